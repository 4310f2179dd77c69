// The canonical chained block hash (DESIGN.md §4): the name other processes use for a block.
//   root  = XXH3-64(salt bytes, seed)
//   block = XXH3-64(parent hash as u64 LE ++ token ids as i32 LE, seed)
#pragma once

#include <cstddef>
#include <cstdint>

namespace pkv {

uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len);
uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens);

}  // namespace pkv
