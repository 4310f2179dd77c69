#include "block_hash.h"

// The whole of XXH3 inlined from Debian's xxhash.h: the short, fixed-size inputs a block is are
// hashed without a call into libxxhash, with the same result.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

namespace pkv {

namespace {

inline void store_le32(unsigned char *dst, uint32_t v) {
  dst[0] = static_cast<unsigned char>(v);
  dst[1] = static_cast<unsigned char>(v >> 8);
  dst[2] = static_cast<unsigned char>(v >> 16);
  dst[3] = static_cast<unsigned char>(v >> 24);
}

inline void store_tokens_le(unsigned char *dst, const int32_t *tokens, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n) std::memcpy(dst, tokens, 4 * n);
#else
  for (size_t i = 0; i < n; ++i) store_le32(dst + 4 * i, static_cast<uint32_t>(tokens[i]));
#endif
}

constexpr size_t kChunkTokens = 64;  // blocks up to this size hash in one shot from the stack

}  // namespace

uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len) {
  return XXH3_64bits_withSeed(salt_len ? salt : "", salt_len, seed);
}

uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len, uint64_t lora_id) {
  if (lora_id == 0) return root_hash(seed, salt, salt_len);
  // The id and the salt's length after the salt, then a tag: a salt alone ending in these 20
  // bytes is the only input that hashes alike, and it must end in "pkv-lora" (hashes name
  // blocks for routers; pkv itself compares salts and ids exactly).
  unsigned char tail[20];
  store_le32(tail, static_cast<uint32_t>(lora_id));
  store_le32(tail + 4, static_cast<uint32_t>(lora_id >> 32));
  store_le32(tail + 8, static_cast<uint32_t>(salt_len));
  std::memcpy(tail + 12, "pkv-lora", 8);
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, seed);
  if (salt_len) XXH3_64bits_update(&state, salt, salt_len);
  XXH3_64bits_update(&state, tail, sizeof tail);
  return XXH3_64bits_digest(&state);
}

uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens,
                    const void *extra, size_t extra_len) {
  if (extra_len == 0) return block_hash(seed, parent_hash, tokens, num_tokens);
  unsigned char buf[8 + 4 * kChunkTokens];
  store_le32(buf, static_cast<uint32_t>(parent_hash));
  store_le32(buf + 4, static_cast<uint32_t>(parent_hash >> 32));
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, seed);
  XXH3_64bits_update(&state, buf, 8);
  for (size_t i = 0; i < num_tokens; i += kChunkTokens) {
    const size_t n = num_tokens - i < kChunkTokens ? num_tokens - i : kChunkTokens;
    store_tokens_le(buf, tokens + i, n);
    XXH3_64bits_update(&state, buf, 4 * n);
  }
  XXH3_64bits_update(&state, extra, extra_len);
  return XXH3_64bits_digest(&state);
}

uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens) {
  unsigned char buf[8 + 4 * kChunkTokens];
  store_le32(buf, static_cast<uint32_t>(parent_hash));
  store_le32(buf + 4, static_cast<uint32_t>(parent_hash >> 32));
  if (num_tokens <= kChunkTokens) {
    store_tokens_le(buf + 8, tokens, num_tokens);
    return XXH3_64bits_withSeed(buf, 8 + 4 * num_tokens, seed);
  }
  // Large blocks: streaming gives the same hash as one shot over the whole input.
  XXH3_state_t state;
  XXH3_INITSTATE(&state);
  XXH3_64bits_reset_withSeed(&state, seed);
  XXH3_64bits_update(&state, buf, 8);
  for (size_t i = 0; i < num_tokens; i += kChunkTokens) {
    const size_t n = num_tokens - i < kChunkTokens ? num_tokens - i : kChunkTokens;
    store_tokens_le(buf, tokens + i, n);
    XXH3_64bits_update(&state, buf, 4 * n);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace pkv
