// The shared kind (DESIGN.md §12, Gemma 3n / 4's num_kv_shared_layers): layers that read the KV
// of an earlier layer and keep none of their own. A group of this kind holds no block (its table
// is all given back, -1), so nothing is ever allocated for it, there is nothing to give back,
// and a prefix hit needs nothing of it. (The engine puts SHARED layers in their source's group;
// this kind keeps a group of them, should one exist, from costing a block.)
#pragma once

#include <cstdint>

namespace pkv {

struct SharedKind {
  // No block is ever read through this group: the first block needed is past any table.
  static uint32_t first_needed(uint32_t /*span*/, uint64_t /*next*/, uint32_t /*block_size*/) {
    return UINT32_MAX;
  }
  static uint64_t max_blocks(uint32_t /*span*/, uint64_t /*num_tokens*/, uint32_t /*block_size*/) {
    return 0;
  }
  static uint64_t max_blocks_chunk(uint32_t /*span*/, uint64_t /*num_tokens*/, uint32_t /*chunk*/,
                                   uint32_t /*block_size*/) {
    return 0;
  }
};

}  // namespace pkv
