// The kinds of KV group the block manager knows (DESIGN.md §4, §12), vLLM v1's per-spec managers
// without their class hierarchy: each kind answers three questions in one small unit of plain
// functions (block_kind_*.h), and the core (block_manager.*) asks them through the rules chosen
// once per group:
//   which blocks a sequence holds    blocks first_held .. its last (the ones before: -1)
//   which it can give back           those before first_held, as its next token moves on
//   what a prefix hit of h needs     blocks first_held(h * block_size) .. h-1, all cached
// first_held is the kind's first_needed, but never past the last sealed block while prefix
// caching is on (the parent of the next block sealed: block_manager.cpp). A new kind is one new
// file and one row of kKindRules.
#pragma once

#include <cstdint>
#include <vector>

#include "kv_groups.h"

namespace pkv {

enum class BlockKind : uint8_t { kFull = 0, kSliding = 1, kChunked = 2, kShared = 3 };

struct KindRules {
  const char *name;   // for messages
  bool gives_back;    // first_needed may be past block 0
  bool holds_blocks;  // false: the group never holds a block (SHARED)
  // The first block a token at position `next` or later reads (span: the window or chunk).
  uint32_t (*first_needed)(uint32_t span, uint64_t next, uint32_t block_size);
  // The most blocks a sequence of up to num_tokens tokens, all computed but the last, holds.
  uint64_t (*max_blocks)(uint32_t span, uint64_t num_tokens, uint32_t block_size);
  // The most blocks it holds while a chunk of up to `chunk` tokens has its slots and is not yet
  // computed (admission per chunk: the chunk is reserved before the kind gives back what falls
  // out of the window, DESIGN.md §7), by the kind's rule alone (first_needed; the core adds its
  // last-sealed-block rule), never more than num_tokens fill.
  uint64_t (*max_blocks_chunk)(uint32_t span, uint64_t num_tokens, uint32_t chunk,
                               uint32_t block_size);
};

// One group's kind: its rules and their span (tokens of the window or chunk; 0 for FULL, SHARED).
struct GroupKind {
  BlockKind kind = BlockKind::kFull;
  uint32_t span = 0;
  const KindRules &rules() const;
  uint32_t first_needed(uint64_t next, uint32_t block_size) const {
    return rules().first_needed(span, next, block_size);
  }
  uint64_t max_blocks(uint64_t num_tokens, uint32_t block_size) const {
    return rules().max_blocks(span, num_tokens, block_size);
  }
  uint64_t max_blocks_chunk(uint64_t num_tokens, uint32_t chunk, uint32_t block_size) const {
    return rules().max_blocks_chunk(span, num_tokens, chunk, block_size);
  }
};

// Each group's kind: FULL, SLIDING (group_window the window) or CHUNKED (the chunk size).
std::vector<GroupKind> group_kinds(const KvGroups &groups);

// How many leading blocks of a prompt of num_tokens tokens a prefix hit may serve: at least its
// last token is computed (a prompt of whole blocks recomputes its last block). The block manager,
// the engine and the scheduler's store lookups all ask this.
inline uint32_t max_hit_blocks(uint32_t num_tokens, uint32_t block_size) {
  return num_tokens ? (num_tokens - 1) / block_size : 0;
}

}  // namespace pkv
