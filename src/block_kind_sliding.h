// The sliding-window kind (DESIGN.md §12): a token at p reads keys p - window + 1 .. p, so a
// sequence holds the blocks of its next token's window, gives back every block wholly before it,
// and a prefix hit of h blocks needs the blocks of the window of the token at h * block_size.
#pragma once

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
};

}  // namespace pkv
