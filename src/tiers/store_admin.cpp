#include "tiers/store_admin.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "status.h"
#include "tiers/store_format.h"
#include "tiers/store_factory.h"

namespace pkv {
namespace {

constexpr size_t kPageKeys = 512;                         // the count hint of each Store::list
constexpr uint64_t kReadBatchBytes = uint64_t(16) << 20;  // values read in one Store::get

// The value's verdict: "" when it is a whole pkv block stored under its own key.
std::string judge(const StoreKey &key, const uint8_t *value, uint64_t size, StoreValueInfo *info) {
  std::string why;
  if (!read_value_header(value, size, info, &why)) return why;
  if (!(info->key == key)) return "stored under another key";
  const int32_t *tokens = reinterpret_cast<const int32_t *>(value + kValueHeaderBytes);
  if (!(store_block_key(info->parent, tokens, info->num_tokens) == key))
    return "its key is not SHA-256 of its parent and tokens";
  return "";
}

pkv_store_entry entry_of(const StoreEntry &e) {
  pkv_store_entry out;
  std::memset(&out, 0, sizeof out);
  std::memcpy(out.key.bytes, e.key.bytes, 32);
  out.value_bytes = e.value_bytes;
  out.state = PKV_STORE_VALUE_UNREAD;
  return out;
}

void set_problem(char (&dst)[PKV_STORE_PROBLEM_BYTES], const std::string &why) {
  std::snprintf(dst, sizeof dst, "%s", why.c_str());  // cut to fit
}

}  // namespace

StoreAdmin::StoreAdmin(const pkv_store_params *p) : config_(p) {
  const pkv_store_params &c = config_.params();
  if (c.kind == PKV_STORE_CALLBACK)
    fail(PKV_ERR_UNSUPPORTED,
         "a CALLBACK store is the host's own: pkv cannot list or remove its keys");
  if (c.kind == PKV_STORE_FILE) {  // never made here: a mistyped path is an error, not a new store
    struct stat st;
    if (stat(c.path, &st) != 0)
      fail(PKV_ERR_STORE, "file store: %s: %s", c.path, std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) fail(PKV_ERR_STORE, "file store: %s is not a directory", c.path);
  }
  store_ = make_store(c);
}

void StoreAdmin::require_writable(const char *what) const {
  if (config_.params().write_mode == PKV_STORE_READ_ONLY)
    fail(PKV_ERR_STATE, "%s: the store was opened read-only (write_mode PKV_STORE_READ_ONLY)",
         what);
}

std::vector<StoreEntry> StoreAdmin::next_page(uint64_t *cursor) {
  std::vector<StoreEntry> page;
  const StoreStatus s = store_->list(cursor, kPageKeys, &page);
  if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
  return page;
}

// A value too large to read in one batch, judged a piece at a time: its header first (a header
// that is not this format's, or declares another size, ends it there), then its tokens (at most
// 4 MiB: PKV_MAX_BLOCK_SIZE of them), then its payload in chunks of kChunkBytes through a running
// checksum, so memory stays bounded whatever the value's size. false: gone (or resized) since it
// was listed.
bool StoreAdmin::judge_large(const StoreEntry &e, pkv_store_entry *out) {
  constexpr size_t kChunkBytes = size_t(4) << 20;
  auto read_exact = [&](uint64_t at, size_t n, uint8_t *buf) {
    size_t got = 0;
    const StoreStatus s = store_->read_range(e.key, at, n, buf, &got);
    if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
    return got == n;
  };
  *out = entry_of(e);
  out->state = PKV_STORE_VALUE_BAD;
  std::vector<uint8_t> head(kValueHeaderBytes);
  if (!read_exact(0, head.size(), head.data())) return false;
  StoreValueInfo info;
  std::string why;
  if (!parse_value_header(head.data(), e.value_bytes, &info, &why))
    return set_problem(out->problem, why), true;
  head.resize(size_t(info.payload_offset));
  if (!read_exact(kValueHeaderBytes, head.size() - kValueHeaderBytes,
                  head.data() + kValueHeaderBytes))
    return false;
  why = check_value_head(head.data(), info);
  if (why.empty() && !(info.key == e.key)) why = "stored under another key";
  const int32_t *tokens = reinterpret_cast<const int32_t *>(head.data() + kValueHeaderBytes);
  if (why.empty() && !(store_block_key(info.parent, tokens, info.num_tokens) == e.key))
    why = "its key is not SHA-256 of its parent and tokens";
  if (!why.empty()) return set_problem(out->problem, why), true;
  PayloadChecksum sum;
  std::vector<uint8_t> chunk(size_t(std::min<uint64_t>(kChunkBytes, info.payload_bytes)));
  for (uint64_t at = 0; at < info.payload_bytes;) {
    const size_t n = size_t(std::min<uint64_t>(chunk.size(), info.payload_bytes - at));
    if (!read_exact(info.payload_offset + at, n, chunk.data())) return false;
    sum.add(chunk.data(), n);
    at += n;
  }
  if (sum.done() != info.payload_checksum)
    return set_problem(out->problem, "payload checksum mismatch"), true;
  good(info, out);
  return true;
}

void StoreAdmin::good(const StoreValueInfo &info, pkv_store_entry *out) {
  out->state = PKV_STORE_VALUE_GOOD;
  out->problem[0] = '\0';
  out->num_tokens = info.num_tokens;
  out->payload_bytes = info.payload_bytes;
  std::memcpy(out->parent.bytes, info.parent.bytes, 32);
  std::memcpy(out->fingerprint, info.fingerprint.bytes, 32);
}

// Values of one size are read together, up to kReadBatchBytes a batch; the verdicts keep the
// entries' order. A larger value is judged alone, a piece at a time (judge_large).
std::vector<pkv_store_entry> StoreAdmin::read(const std::vector<StoreEntry> &entries) {
  const size_t n = entries.size();
  std::vector<pkv_store_entry> judged(n);
  std::vector<uint8_t> there(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries[a].value_bytes < entries[b].value_bytes;
  });
  for (size_t i = 0; i < n;) {
    const uint64_t size = entries[order[i]].value_bytes;
    if (size > kReadBatchBytes) {
      there[order[i]] = judge_large(entries[order[i]], &judged[order[i]]);
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && entries[order[j]].value_bytes == size && size <= kReadBatchBytes / (j - i + 1))
      ++j;
    std::vector<StoreKey> keys;
    for (size_t k = i; k < j; ++k) keys.push_back(entries[order[k]].key);
    std::vector<uint8_t> values(size_t(size) * (j - i));
    std::vector<uint8_t> found(j - i, kStoreAbsent);
    const StoreStatus s = store_->get(keys.data(), j - i, values.data(), size, found.data(), 0);
    if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
    for (size_t k = i; k < j; ++k) {
      if (found[k - i] != kStoreFound) continue;  // gone, or resized, since it was listed
      const StoreEntry &e = entries[order[k]];
      pkv_store_entry &out = judged[order[k]];
      out = entry_of(e);
      StoreValueInfo info;
      const std::string why = judge(e.key, values.data() + (k - i) * size, size, &info);
      there[order[k]] = 1;
      if (why.empty()) {
        good(info, &out);
      } else {
        out.state = PKV_STORE_VALUE_BAD;
        set_problem(out.problem, why);
      }
    }
    i = j;
  }
  std::vector<pkv_store_entry> kept;
  for (size_t k = 0; k < n; ++k)
    if (there[k]) kept.push_back(judged[k]);
  return kept;
}

// Counts what was removed also when the store fails part way.
void StoreAdmin::remove(const std::vector<StoreKey> &keys, uint64_t *removed) {
  std::vector<uint8_t> gone(keys.size(), 0);
  const StoreStatus s = store_->remove(keys.data(), keys.size(), gone.data());
  for (uint8_t g : gone) *removed += g;
  if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
}

struct pkv_store_info StoreAdmin::info() {
  struct pkv_store_info out;
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.kind = config_.params().kind;
  uint64_t cursor = 0;
  do {
    for (const StoreEntry &e : next_page(&cursor))
      ++out.num_blocks, out.total_bytes += e.value_bytes;
  } while (cursor != 0);
  return out;
}

// A call works on a copy of the listing and keeps it only on success: a failed call changes
// nothing, and the same cursor can be passed again.
std::vector<pkv_store_entry> StoreAdmin::list(uint64_t *cursor, bool read_values, uint32_t cap) {
  PKV_REQUIRE(*cursor == 0 || *cursor == listing_.token,
              "cursor %llu is not the one this handle's listing returned last (0 starts over)",
              static_cast<unsigned long long>(*cursor));
  Listing next = *cursor == 0 ? Listing{} : listing_;
  while (next.pending.size() < cap && !next.store_done) {
    std::vector<StoreEntry> page = next_page(&next.store_cursor);
    next.pending.insert(next.pending.end(), page.begin(), page.end());
    next.store_done = next.store_cursor == 0;
  }
  const auto taken_end =
      next.pending.begin() + std::ptrdiff_t(std::min<size_t>(cap, next.pending.size()));
  const std::vector<StoreEntry> taken(next.pending.begin(), taken_end);
  std::vector<pkv_store_entry> out;
  if (read_values) {
    out = read(taken);
  } else {
    for (const StoreEntry &e : taken) out.push_back(entry_of(e));
  }
  next.pending.erase(next.pending.begin(), next.pending.begin() + std::ptrdiff_t(taken.size()));
  next.token = next.pending.empty() && next.store_done ? 0 : next_token_++;
  listing_ = std::move(next);
  *cursor = listing_.token;
  return out;
}

void StoreAdmin::verify(bool remove_bad, pkv_store_verify_result *r) {
  if (remove_bad) require_writable("verify with remove_bad");
  uint64_t cursor = 0;
  do {
    const std::vector<StoreEntry> page = next_page(&cursor);
    const std::vector<pkv_store_entry> judged = read(page);
    r->num_gone += page.size() - judged.size();
    std::vector<StoreKey> bad;
    for (const pkv_store_entry &e : judged) {
      ++r->num_blocks;
      if (e.state == PKV_STORE_VALUE_GOOD) {
        ++r->num_good, r->good_bytes += e.value_bytes;
        continue;
      }
      if (r->num_bad++ == 0) {
        r->first_bad_key = e.key;
        std::memcpy(r->first_bad_problem, e.problem, sizeof e.problem);
      }
      r->bad_bytes += e.value_bytes;
      StoreKey k;
      std::memcpy(k.bytes, e.key.bytes, 32);
      bad.push_back(k);
    }
    if (remove_bad && !bad.empty()) remove(bad, &r->num_removed);
  } while (cursor != 0);
}

void StoreAdmin::clear(uint64_t *removed) {
  require_writable("clear");
  uint64_t cursor = 0;
  do {
    std::vector<StoreKey> keys;
    for (const StoreEntry &e : next_page(&cursor)) keys.push_back(e.key);
    if (!keys.empty()) remove(keys, removed);
  } while (cursor != 0);
}

}  // namespace pkv
