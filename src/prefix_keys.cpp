#include "prefix_keys.h"

#include <algorithm>
#include <cstring>

#include "params.h"
#include "status.h"

namespace pkv {

namespace {

void put_le32(std::string *out, uint32_t v) {
  const char b[4] = {char(v), char(v >> 8), char(v >> 16), char(v >> 24)};
  out->append(b, 4);
}

uint32_t get_le32(const char *p) {
  const unsigned char *u = reinterpret_cast<const unsigned char *>(p);
  return uint32_t(u[0]) | uint32_t(u[1]) << 8 | uint32_t(u[2]) << 16 | uint32_t(u[3]) << 24;
}

// The size of pkv_extra_key in 0.5, the first version that has it: a caller's element is at
// least this.
constexpr uint32_t kMinExtraKeySize = 24;
static_assert(sizeof(pkv_extra_key) >= kMinExtraKeySize, "pkv_extra_key only grows");

}  // namespace

bool PrefixKeys::operator==(const PrefixKeys &o) const {
  if (salt != o.salt || lora_id != o.lora_id || extra.size() != o.extra.size()) return false;
  for (size_t i = 0; i < extra.size(); ++i)
    if (extra[i].start != o.extra[i].start || extra[i].end != o.extra[i].end ||
        extra[i].key != o.extra[i].key)
      return false;
  return true;
}

std::string PrefixKeys::block_extra(uint32_t first, uint32_t n) const {
  std::string out;
  if (extra.empty()) return out;
  const uint64_t last = uint64_t(first) + n;  // one past the block
  // The first key ending after the block's start; keys are sorted and disjoint, so their ends
  // are sorted too.
  auto it = std::upper_bound(extra.begin(), extra.end(), first,
                             [](uint32_t t, const ExtraKey &k) { return t < k.end; });
  for (; it != extra.end() && it->start < last; ++it) {
    const uint32_t lo = std::max(it->start, first);
    const uint32_t hi = static_cast<uint32_t>(std::min<uint64_t>(it->end, last));
    put_le32(&out, lo - first);
    put_le32(&out, hi - first);
    put_le32(&out, lo - it->start);
    put_le32(&out, static_cast<uint32_t>(it->key.size()));
    out += it->key;
  }
  return out;
}

std::vector<std::string> PrefixKeys::block_extras(uint32_t num_blocks, uint32_t block_size) const {
  std::vector<std::string> out(num_blocks);
  if (extra.empty()) return out;
  for (uint32_t j = 0; j < num_blocks; ++j) out[j] = block_extra(j * block_size, block_size);
  return out;
}

std::vector<ExtraKey> read_extra_keys(const pkv_extra_key *keys, uint32_t num_keys,
                                      uint32_t key_size, uint32_t num_tokens) {
  std::vector<ExtraKey> out;
  if (num_keys == 0) return out;
  PKV_REQUIRE(keys != nullptr, "extra_keys is NULL with num_extra_keys %u", num_keys);
  PKV_REQUIRE(num_keys <= PKV_MAX_EXTRA_KEYS, "num_extra_keys %u exceeds %d", num_keys,
              PKV_MAX_EXTRA_KEYS);
  PKV_REQUIRE(key_size >= kMinExtraKeySize && key_size % 8 == 0,
              "extra_key_size %u: at least %u (the 0.5 pkv_extra_key) and a multiple of 8 expected "
              "(set it to sizeof(pkv_extra_key))",
              key_size, kMinExtraKeySize);
  out.reserve(num_keys);
  const char *base = reinterpret_cast<const char *>(keys);
  for (uint32_t i = 0; i < num_keys; ++i) {
    pkv_extra_key k{};
    std::memcpy(&k, base + size_t(i) * key_size, std::min<size_t>(key_size, sizeof k));
    PKV_REQUIRE(k.start_token < k.end_token,
                "extra key %u covers tokens [%u, %u): start_token must be below end_token", i,
                k.start_token, k.end_token);
    PKV_REQUIRE(num_tokens == UINT32_MAX || k.end_token <= num_tokens,
                "extra key %u ends at token %u, past the prompt's %u tokens", i, k.end_token,
                num_tokens);
    PKV_REQUIRE(out.empty() || k.start_token >= out.back().end,
                "extra key %u starts at token %u, before extra key %u ends (%u): keys must be "
                "sorted by start_token and not overlap",
                i, k.start_token, i - 1, out.back().end);
    PKV_REQUIRE(k.key_len >= 1 && k.key_len <= PKV_MAX_EXTRA_KEY_BYTES,
                "extra key %u: key_len %u, 1 .. %d expected", i, k.key_len,
                PKV_MAX_EXTRA_KEY_BYTES);
    PKV_REQUIRE(k.key != nullptr, "extra key %u: key is NULL with key_len %u", i, k.key_len);
    PKV_REQUIRE(k.reserved0 == 0, "extra key %u: reserved0 must be 0", i);
    out.push_back(ExtraKey{k.start_token, k.end_token,
                           std::string(static_cast<const char *>(k.key), k.key_len)});
  }
  return out;
}

PrefixKeys read_prefix_keys(const void *salt, uint32_t salt_len, const pkv_extra_key *keys,
                            uint32_t num_keys, uint32_t key_size, uint64_t lora_id,
                            uint32_t num_tokens) {
  PrefixKeys k;
  k.salt = salt_bytes(salt, salt_len);
  k.lora_id = lora_id;
  k.extra = read_extra_keys(keys, num_keys, key_size, num_tokens);
  return k;
}

std::vector<ExtraItem> parse_block_extra(const std::string &extra) {
  std::vector<ExtraItem> out;
  for (size_t p = 0; p + 16 <= extra.size();) {
    const char *b = extra.data() + p;
    ExtraItem it{get_le32(b), get_le32(b + 4), get_le32(b + 8), b + 16, get_le32(b + 12)};
    PKV_ASSERT(p + 16 + it.key_len <= extra.size());
    out.push_back(it);
    p += 16 + it.key_len;
  }
  return out;
}

uint32_t count_block_extra(const std::string &extra) {
  return static_cast<uint32_t>(parse_block_extra(extra).size());
}

}  // namespace pkv
