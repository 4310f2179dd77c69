// The block manager (DESIGN.md §4): which physical blocks each sequence uses.
//
// A block is free (ref 0, nothing reusable), cached (ref 0, sealed KV a prefix node points at,
// evictable) or used (ref >= 1). Ref-0 blocks sit on one intrusive doubly linked free list:
// allocation pops the head; a release appends the sequence's sealed blocks to the tail in reverse
// table order (its tail blocks are evicted first) and puts unsealed ones at the head (reused first).
// Every call is all-or-nothing: it checks that enough free blocks exist before it changes
// anything, and it is O(blocks touched), never O(pool).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "prefix_tree.h"
#include "sequence.h"

namespace pkv {

struct BlockCopy {
  int32_t src;
  int32_t dst;
};

struct BlockStats {
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t num_evictions = 0;
  uint64_t num_cow_copies = 0;
  uint64_t num_preemptions = 0;
};

class BlockManager {
 public:
  BlockManager(uint32_t num_blocks, uint32_t block_size, bool prefix_caching, uint64_t hash_seed,
               bool constant_hash);

  // What admitting these tokens under this salt would take: the cached blocks it would reuse
  // (in order) and how many free blocks it would consume.
  struct Admission {
    std::vector<int32_t> hit_blocks;
    uint32_t num_new_blocks = 0;
    uint32_t num_free_needed = 0;  // new blocks + cached hit blocks revived from the free list
  };
  Admission plan_admission(const std::string &salt, const int32_t *tokens, uint32_t n) const;

  // Gives seq (tokens and salt set, no blocks) its blocks: prefix hits + new blocks.
  // Throws PKV_ERR_NO_SPACE with nothing changed.
  void admit(Sequence &seq);
  // Reserves blocks for n more tokens (copy-on-write of a shared partial last block), then
  // appends the tokens. Throws PKV_ERR_NO_SPACE with nothing changed.
  void append(Sequence &seq, const int32_t *tokens, uint32_t n);
  // child, a copy of its parent (same block table), takes a reference on each of its blocks.
  void fork(const Sequence &child);
  // Drops every block reference of seq; its table becomes empty (tokens are kept).
  void free_blocks(Sequence &seq);
  // Seals seq's full, computed blocks into the prefix tree.
  void seal(Sequence &seq);
  void count_preemption() { stats_.num_preemptions++; }
  // Evicts every cached block (pkv_reset_prefix_cache); events as documented there.
  void reset_cache();
  void set_events(KvEvents *events) { events_ = events; tree_.set_events(events); }

  // Copy-on-write copies not yet handed to a batch.
  std::vector<BlockCopy> take_copies();
  void return_copies(std::vector<BlockCopy> copies);
  size_t num_pending_copies() const { return pending_copies_.size(); }

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t block_size() const { return block_size_; }
  uint32_t num_free() const { return num_free_; }
  uint32_t num_cached() const { return num_cached_; }
  const BlockStats &stats() const { return stats_; }
  size_t num_prefix_nodes() const { return tree_.num_nodes(); }
  int32_t ref_count(int32_t block) const { return blocks_[block].ref; }

  // Every invariant of DESIGN.md §9 against the live sequences. Throws PKV_ERR_INTERNAL.
  void check(const std::unordered_map<uint64_t, Sequence> &seqs) const;

 private:
  struct Block {
    int32_t ref = 0;
    int32_t prev = -1;  // free-list links, valid while ref == 0
    int32_t next = -1;
    uint32_t node = kNoNode;  // prefix node this block is a sealed copy of
  };

  int32_t sentinel() const { return static_cast<int32_t>(num_blocks_); }
  void list_insert_after(int32_t at, int32_t block);
  void list_remove(int32_t block);
  int32_t pop_free();             // head of the free list, evicted if cached; ref becomes 1
  void add_ref(int32_t block);    // revives a ref-0 block when needed
  void drop_ref(int32_t block);   // at 0: cached to the tail, unsealed to the head
  void reserve(Sequence &seq, const Admission &plan);
  void check_space(uint32_t needed, const char *what) const;

  uint32_t num_blocks_;
  uint32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;  // num_blocks_ + 1: the last is the free list's sentinel
  uint32_t num_free_;
  uint32_t num_cached_ = 0;
  uint64_t seed_;
  PrefixTree tree_;
  KvEvents *events_ = nullptr;
  std::vector<BlockCopy> pending_copies_;
  BlockStats stats_;
};

}  // namespace pkv
