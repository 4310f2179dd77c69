// The blocks of one tier (DESIGN.md §4 and §11): the device pool (tier 0) and the host tier
// (tier 1) keep their blocks alike. A block is free (ref 0, holding nothing reusable), cached
// (ref 0, holding the KV of a prefix-tree node: reusable, evictable) or used (ref >= 1). The ref-0
// blocks sit on one intrusive doubly linked list: take() pops its head, a block whose last
// reference goes joins the tail when cached (evicted last) and the head when free (reused first),
// so the list runs from free blocks through cached ones in LRU order. Every call is O(1).
// The block manager decides what a block holds; this keeps the counts and the list.
#pragma once

#include <cstdint>
#include <vector>

#include "huge_pages.h"

namespace pkv {

class BlockPool {
 public:
  static constexpr uint32_t kNoNode = UINT32_MAX;

  explicit BlockPool(uint32_t num_blocks);  // every block free, taken in id order

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t num_free() const { return num_free_; }      // ref 0, cached or not
  uint32_t num_cached() const { return num_cached_; }  // ref 0 and holding a node's KV
  int32_t ref(int32_t b) const { return blocks_[b].ref; }
  uint32_t node(int32_t b) const { return blocks_[b].node; }
  // The block take() would hand out next (a cached one must be evicted first), -1 when none.
  int32_t head() const { return num_free_ ? blocks_[sentinel()].next : -1; }
  // The ref-0 block after b on the list (b must be on it), -1 after the tail; its entry is asked
  // for, so a walk ahead of the pops (BlockManager::prefetch_pops) finds it loaded.
  int32_t next_free(int32_t b) const {
    const int32_t next = blocks_[b].next;
    if (next == sentinel() || next < 0) return -1;
    __builtin_prefetch(&blocks_[next]);
    return next;
  }
  // Ref-0 blocks from head to tail: f(block) for each until it returns false.
  template <class F> void for_each_free(F &&f) const {
    for (int32_t b = blocks_[sentinel()].next; b != sentinel();) {
      const int32_t next = blocks_[b].next;  // f may move b
      if (!f(b)) return;
      b = next;
    }
  }

  // The head of the list, its ref count 1. It must not be cached (the caller evicts first).
  int32_t take();
  // The same for a given ref-0 block anywhere on the list.
  void take(int32_t b);
  // One more reference; a ref-0 block (a cached hit) leaves the list and keeps its node.
  void add_ref(int32_t b);
  // One reference less; at 0 the block joins the list (tail when cached, head when free) and
  // true is returned.
  bool drop_ref(int32_t b);
  // The KV of node is in b (node set) or no longer (kNoNode). A ref-0 block moves to the tail
  // when it becomes cached and to the head when it stops being.
  void set_node(int32_t b, uint32_t node);
  // A cached block was used: it becomes the last to be evicted.
  void touch(int32_t b);

  // The list holds exactly the ref-0 blocks, linked both ways, free ones before cached ones; the
  // counters agree. tier names the pool in messages. Throws PKV_ERR_INTERNAL.
  void check(const char *tier) const;

 private:
  struct Block {
    int32_t ref = 0;
    int32_t prev = -1;  // list links, valid while ref == 0
    int32_t next = -1;
    uint32_t node = kNoNode;
  };

  int32_t sentinel() const { return static_cast<int32_t>(num_blocks_); }
  void insert_after(int32_t at, int32_t b);
  void remove(int32_t b);
  void link(int32_t b);  // a ref-0 block onto the list: cached to the tail, free to the head

  uint32_t num_blocks_;
  // num_blocks_ + 1: the last is the list's sentinel. Huge pages: read at random (huge_pages.h).
  std::vector<Block, HugePageAllocator<Block>> blocks_;
  uint32_t num_free_;
  uint32_t num_cached_ = 0;
};

}  // namespace pkv
