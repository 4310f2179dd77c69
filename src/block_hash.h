// The canonical chained block hash (DESIGN.md §4): the name other processes use for a block.
//   root  = XXH3-64(salt bytes, seed)
//   block = XXH3-64(parent hash as u64 LE ++ token ids as i32 LE, seed)
// With an adapter and extra keys (pkv_block_hash_root_lora, pkv_block_hash_extra; their bytes
// are pkv.h's, the block's extra bytes PrefixKeys::block_extra's):
//   root  = XXH3-64(salt ++ lora_id as u64 LE ++ salt_len as u32 LE ++ "pkv-lora", seed)
//   block = XXH3-64(parent hash as u64 LE ++ token ids as i32 LE ++ extra bytes, seed)
// lora_id 0 and empty extra bytes give the hashes above.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pkv {

uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len);
uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens);
uint64_t root_hash(uint64_t seed, const void *salt, size_t salt_len, uint64_t lora_id);
uint64_t block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens, size_t num_tokens,
                    const void *extra, size_t extra_len);

}  // namespace pkv
