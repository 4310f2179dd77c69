// The chunked local kind (DESIGN.md §12, Llama 4's attention_chunk_size): a token at p reads keys
// floor(p / chunk) * chunk .. p, its own chunk's. A chunk boundary is where blocks can be given
// back: a sequence holds the blocks of its next token's chunk and gives back every block wholly
// before floor(next / chunk) * chunk; a prefix hit of h blocks needs the blocks of the chunk of
// the token at h * block_size that lie before it (none when the hit ends on a chunk boundary).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "kv_groups.h"

namespace pkv {

struct ChunkedKind {
  // span: the chunk size (tokens, >= 1). The block of the next token's chunk start.
  static uint32_t first_needed(uint32_t chunk, uint64_t next, uint32_t block_size) {
    return static_cast<uint32_t>(next / chunk * chunk / block_size);
  }
  // The keys a token reads (its chunk up to it) span at most ceil(chunk / block_size) + 1 blocks,
  // as a window of chunk keys does (a chunk need not start on a block boundary): kv_groups.h's
  // rule with the chunk as the window.
  static uint64_t max_blocks(uint32_t chunk, uint64_t num_tokens, uint32_t block_size) {
    return group_blocks_for(chunk, num_tokens, block_size);
  }
  // A prefill chunk of up to B tokens from C holds keys from C's chunk start (a multiple of the
  // chunk size) to C + B - 1: at most chunk + B - 1 tokens. A chunk start lies at a multiple of
  // g = gcd(chunk, block_size) within its block, so at worst g short of the block's end:
  // ceil((block_size - g + chunk + B - 1) / block_size) blocks, never more than num_tokens fill.
  static uint64_t max_blocks_chunk(uint32_t chunk, uint64_t num_tokens, uint32_t prefill,
                                   uint32_t block_size) {
    const uint64_t all = (num_tokens + block_size - 1) / block_size;
    const uint64_t offset = block_size - std::gcd(chunk, block_size);
    const uint64_t keys = uint64_t(chunk) + prefill - 1;
    return std::min<uint64_t>(all, (offset + keys + block_size - 1) / block_size);
  }
};

}  // namespace pkv
