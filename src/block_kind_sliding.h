// The sliding-window kind (DESIGN.md §12): a token at p reads keys p - window + 1 .. p, so a
// sequence holds the blocks of its next token's window, gives back every block wholly before it,
// and a prefix hit of h blocks needs the blocks of the window of the token at h * block_size.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kv_groups.h"

namespace pkv {

struct SlidingKind {
  // span: the window. The block of the window's first key.
  static uint32_t first_needed(uint32_t window, uint64_t next, uint32_t block_size) {
    return window_start(window, next) / block_size;
  }
  // A token's window spans at most ceil(window / block_size) + 1 blocks (kv_groups.h's rule).
  static uint64_t max_blocks(uint32_t window, uint64_t num_tokens, uint32_t block_size) {
    return group_blocks_for(window, num_tokens, block_size);
  }
  // A chunk of up to B tokens from C holds keys C - window + 1 .. C + B - 1 (the window of its
  // first token, which the give-back has not passed yet, and the chunk): window + B - 1 tokens,
  // which span at most ceil((window + B - 2) / block_size) + 1 blocks (the first at a block's
  // last slot), never more than num_tokens fill.
  static uint64_t max_blocks_chunk(uint32_t window, uint64_t num_tokens, uint32_t chunk,
                                   uint32_t block_size) {
    const uint64_t all = (num_tokens + block_size - 1) / block_size;
    const uint64_t keys = uint64_t(window) + chunk - 1;
    return std::min<uint64_t>(all, (keys - 1 + block_size - 1) / block_size + 1);
  }
};

}  // namespace pkv
