#include "block_hash.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace pkv {

namespace {

inline void store_le32(unsigned char *dst, uint32_t v) {
  dst[0] = static_cast<unsigned char>(v);
  dst[1] = static_cast<unsigned char>(v >> 8);
  dst[2] = static_cast<unsigned char>(v >> 16);
  dst[3] = static_cast<unsigned char>(v >> 24);
}

}  // namespace

uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len) {
  return XXH3_64bits_withSeed(salt_len ? salt : "", salt_len, seed);
}

uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens) {
  // One contiguous buffer: XXH3's one-shot path is several times faster than streaming for the
  // short inputs a block is (16 tokens = 72 bytes). The buffer is per thread and only grows.
  thread_local std::vector<unsigned char> buf;
  const size_t bytes = 8 + 4 * num_tokens;
  if (buf.size() < bytes) buf.resize(bytes);
  unsigned char *p = buf.data();
  store_le32(p, static_cast<uint32_t>(parent_hash));
  store_le32(p + 4, static_cast<uint32_t>(parent_hash >> 32));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (num_tokens) std::memcpy(p + 8, tokens, 4 * num_tokens);
#else
  for (size_t i = 0; i < num_tokens; ++i) store_le32(p + 8 + 4 * i, static_cast<uint32_t>(tokens[i]));
#endif
  return XXH3_64bits_withSeed(p, bytes, seed);
}

}  // namespace pkv
