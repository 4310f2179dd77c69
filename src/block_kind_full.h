// The full-attention kind (DESIGN.md §4): a token reads every key before it, so a sequence holds
// every block it has, gives none back, and a prefix hit of h blocks needs all of blocks 0 .. h-1.
#pragma once

#include <cstdint>

#include "kv_groups.h"

namespace pkv {

struct FullKind {
  // The first block a token at `next` or later reads.
  static uint32_t first_needed(uint32_t /*span*/, uint64_t /*next*/, uint32_t /*block_size*/) {
    return 0;
  }
  // The most blocks a sequence of up to num_tokens tokens holds at once: all of them.
  static uint64_t max_blocks(uint32_t /*span*/, uint64_t num_tokens, uint32_t block_size) {
    return group_blocks_for(0, num_tokens, block_size);
  }
  // A chunk changes nothing: it holds every block it has.
  static uint64_t max_blocks_chunk(uint32_t /*span*/, uint64_t num_tokens, uint32_t /*chunk*/,
                                   uint32_t block_size) {
    return group_blocks_for(0, num_tokens, block_size);
  }
};

}  // namespace pkv
