#include "tiers/store_admin.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <numeric>

#include "status.h"
#include "tiers/store_format.h"

namespace pkv {
namespace {

constexpr size_t kPageKeys = 512;                      // the count hint of each Store::list
constexpr uint64_t kReadBatchBytes = uint64_t(16) << 20;  // values read in one Store::get

// The value's verdict: "" when it is a whole pkv block stored under its own key.
std::string judge(const StoreKey &key, const uint8_t *value, uint64_t size, StoreValueInfo *info) {
  std::string why;
  if (!read_value_header(value, size, info, &why)) return why;
  if (!(info->key == key)) return "stored under another key";
  // The tokens lie between the header and the payload (store_format.h).
  const uint8_t *tokens = value + size - info->payload_bytes - sizeof(int32_t) * uint64_t(info->num_tokens);
  if (!(store_block_key(info->parent, reinterpret_cast<const int32_t *>(tokens), info->num_tokens) == key))
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
    fail(PKV_ERR_UNSUPPORTED, "a CALLBACK store is the host's own: pkv cannot list or remove its keys");
  if (c.kind == PKV_STORE_FILE) {  // never made here: a mistyped path is an error, not a new store
    struct stat st;
    if (stat(c.path, &st) != 0) fail(PKV_ERR_STORE, "file store: %s: %s", c.path, std::strerror(errno));
    if (!S_ISDIR(st.st_mode)) fail(PKV_ERR_STORE, "file store: %s is not a directory", c.path);
  }
  store_ = make_store(c);
}

void StoreAdmin::require_writable(const char *what) const {
  if (config_.params().write_mode == PKV_STORE_READ_ONLY)
    fail(PKV_ERR_STATE, "%s: the store was opened read-only (write_mode PKV_STORE_READ_ONLY)", what);
}

std::vector<StoreEntry> StoreAdmin::next_page(uint64_t *cursor) {
  std::vector<StoreEntry> page;
  const StoreStatus s = store_->list(cursor, kPageKeys, &page);
  if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
  return page;
}

// Values of one size are read together, up to kReadBatchBytes a batch; the verdicts keep the
// entries' order. A value that cannot be had in memory is judged bad rather than failing all.
std::vector<pkv_store_entry> StoreAdmin::read(const std::vector<StoreEntry> &entries) {
  const size_t n = entries.size();
  std::vector<pkv_store_entry> judged(n);
  std::vector<uint8_t> there(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return entries[a].value_bytes < entries[b].value_bytes; });
  for (size_t i = 0; i < n;) {
    const uint64_t size = entries[order[i]].value_bytes;
    size_t j = i + 1;
    while (j < n && entries[order[j]].value_bytes == size && size <= kReadBatchBytes / (j - i + 1)) ++j;
    std::vector<StoreKey> keys;
    for (size_t k = i; k < j; ++k) keys.push_back(entries[order[k]].key);
    std::unique_ptr<uint8_t[]> values(size <= SIZE_MAX / (j - i) ? new (std::nothrow) uint8_t[size * (j - i)] : nullptr);
    if (!values && j - i > 1) throw std::bad_alloc();  // a batch is at most kReadBatchBytes
    if (!values) {  // one value too large for this machine's memory
      judged[order[i]] = entry_of(entries[order[i]]);
      judged[order[i]].state = PKV_STORE_VALUE_BAD;
      set_problem(judged[order[i]].problem, "too large to read (" + std::to_string(size) + " bytes)");
      there[order[i]] = 1;
      i = j;
      continue;
    }
    std::vector<uint8_t> found(j - i, 0);
    const StoreStatus s = store_->get(keys.data(), j - i, values.get(), size, found.data(), 0);
    if (!s.ok) fail(PKV_ERR_STORE, "%s", s.error.c_str());
    for (size_t k = i; k < j; ++k) {
      if (!found[k - i]) continue;  // gone, or resized, since it was listed
      const StoreEntry &e = entries[order[k]];
      pkv_store_entry &out = judged[order[k]];
      out = entry_of(e);
      StoreValueInfo info;
      const std::string why = judge(e.key, values.get() + (k - i) * size, size, &info);
      there[order[k]] = 1;
      if (!why.empty()) {
        out.state = PKV_STORE_VALUE_BAD;
        set_problem(out.problem, why);
        continue;
      }
      out.state = PKV_STORE_VALUE_GOOD;
      out.num_tokens = info.num_tokens;
      out.payload_bytes = info.payload_bytes;
      std::memcpy(out.parent.bytes, info.parent.bytes, 32);
      std::memcpy(out.fingerprint, info.fingerprint.bytes, 32);
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
    for (const StoreEntry &e : next_page(&cursor)) ++out.num_blocks, out.total_bytes += e.value_bytes;
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
  const auto taken_end = next.pending.begin() + std::ptrdiff_t(std::min<size_t>(cap, next.pending.size()));
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
