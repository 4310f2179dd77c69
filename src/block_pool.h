// The blocks of one tier (DESIGN.md §4 and §11): the device pool (tier 0) and the host tier
// (tier 1) keep their blocks alike. A block is free (ref 0, holding nothing reusable), cached
// (ref 0, holding the KV of a prefix-tree node: reusable, evictable) or used (ref >= 1).
//
// The ref-0 blocks sit on intrusive doubly linked lists, one per retention class (DESIGN.md §4,
// "Retention"). List 0 holds the free blocks at its head (reused first) and the normal cached
// ones (priority 0) after them in release order; each other class, a (priority, retention_ms)
// pair in use, holds its cached blocks in release order, which within one class is also the
// order their retention ends in. take() hands out list 0's head when it is free; else the victim
// is the least (effective priority, release stamp) among the lists' heads, a head whose retention
// ended counting as priority 0, and for a low class (priority < 0, which a decay raises) also its
// first block whose retention holds. So eviction is exact (lowest priority first, least recently
// released first within one) and costs one or two comparisons per class in use, at most
// kClasses, plus a low class's cursor that only moves forward: O(1) amortized. The host tier uses
// list 0 only (plain LRU).
// The block manager decides what a block holds; this keeps the counts and the lists.
#pragma once

#include <cstdint>
#include <vector>

#include "huge_pages.h"
#include "pkv/pkv.h"

namespace pkv {

// An eviction priority and how long it holds after a release (pkv_seq_params.cache_priority,
// cache_retention_ms): priority 0 is normal (plain LRU), retention 0 never decays.
struct Retention {
  int32_t priority = 0;
  uint32_t retention_ms = 0;
};
// A release by no holder of its own (a pin's, a copy-on-write's source): the block keeps what
// it had.
inline constexpr Retention kNoRetention{INT32_MIN, 0};
// The one a block keeps when two holders differ: the higher priority, then the longer retention
// (0 = forever), so the later deadline.
Retention stronger(Retention a, Retention b);
// A caller's cache_priority and cache_retention_ms, checked (what names the struct or call):
// PKV_ERR_INVALID_ARGUMENT for a priority outside PKV_CACHE_PRIORITY_MIN .. MAX.
Retention read_retention(int32_t priority, uint32_t retention_ms, const char *what);

class BlockPool {
 public:
  static constexpr uint32_t kNoNode = UINT32_MAX;
  static constexpr uint32_t kRetentions = PKV_MAX_CACHE_RETENTIONS;  // per non-zero priority
  static constexpr uint32_t kPriorities = PKV_CACHE_PRIORITY_MAX - PKV_CACHE_PRIORITY_MIN;
  static constexpr uint32_t kClasses = 1 + kPriorities * kRetentions;  // list 0 first

  explicit BlockPool(uint32_t num_blocks);  // every block free, taken in id order

  uint32_t num_blocks() const { return num_blocks_; }
  uint32_t num_free() const { return num_free_; }      // ref 0, cached or not
  uint32_t num_cached() const { return num_cached_; }  // ref 0 and holding a node's KV
  int32_t ref(int32_t b) const { return blocks_[b].ref; }
  uint32_t node(int32_t b) const { return blocks_[b].node; }
  // The clock retention is measured by (ms); it never goes back (a smaller value is ignored).
  void set_now(uint64_t ms) { now_ms_ = ms > now_ms_ ? ms : now_ms_; }
  // The block take() would hand out next (a cached one must be evicted first), -1 when none.
  int32_t head() const;
  // The ref-0 block after b on its list (b must be on one), -1 after the tail; its entry is asked
  // for, so a walk ahead of the pops (BlockManager::prefetch_pops) finds it loaded. With several
  // classes in use the pops may come from other lists: a walk of one list is then only a guess.
  int32_t next_free(int32_t b) const {
    const int32_t next = blocks_[b].next;
    if (next < 0 || uint32_t(next) >= num_blocks_) return -1;
    __builtin_prefetch(&blocks_[next]);
    return next;
  }
  // Ref-0 blocks, list 0 first (head to tail), then each class's: f(block) for each until it
  // returns false. f may set a block's node to kNoNode (it moves to list 0's head, walked).
  template <class F> void for_each_free(F &&f) const {
    for (uint32_t c = 0; c < kClasses; ++c)
      for (int32_t b = blocks_[sentinel(c)].next; b != sentinel(c);) {
        const int32_t next = blocks_[b].next;  // f may move b
        if (!f(b)) return;
        b = next;
      }
  }

  // head(), its ref count 1. It must not be cached (the caller evicts first).
  int32_t take();
  // The same for a given ref-0 block anywhere on the lists.
  void take(int32_t b);
  // One more reference; a ref-0 block (a cached hit) leaves its list and keeps its node, and its
  // priority (as one holder's) unless it is normal or its retention ended.
  void add_ref(int32_t b);
  // One reference less, by a holder releasing with retention r: the block keeps the stronger of
  // r and its own. At 0 the block joins a list (a class's tail when cached, list 0's head when
  // free) and true is returned.
  bool drop_ref(int32_t b, Retention r = kNoRetention);
  // The KV of node is in b (node set) or no longer (kNoNode: its retention goes too). A ref-0
  // block moves to its class's tail when it becomes cached and to list 0's head when it stops.
  void set_node(int32_t b, uint32_t node);
  // A cached block was used: it becomes the last of its class to be evicted.
  void touch(int32_t b);
  // pkv_cache_set_priority: a block in use keeps r for its release; a cached one takes r as if
  // released now (to its new class's tail). A free block has nothing to keep: unchanged.
  void set_retention(int32_t b, Retention r);
  // The priority a cached block would be evicted with now: its class's, or 0 once its retention
  // ended.
  int32_t effective_priority(int32_t b) const;

  // The lists hold exactly the ref-0 blocks, linked both ways, free ones before cached ones on
  // list 0, each class's blocks of its priority and retention in release order; the counters and
  // the classes' counts agree. tier names the pool in messages. Throws PKV_ERR_INTERNAL.
  void check(const char *tier) const;

 private:
  struct Block {
    int32_t ref = 0;
    int32_t prev = -1;  // list links, valid while ref == 0
    int32_t next = -1;
    uint32_t node = kNoNode;
    uint64_t stamp = 0;         // release order: when it last joined a list's tail
    uint32_t retention_ms = 0;  // its retention: kept for its release (used) or its class's
    int8_t priority = 0;        // likewise; kUnset: in use, and no holder has given one yet
    uint8_t cls = 0;            // its list while ref 0
  };
  struct Class {
    int32_t priority = 0;
    uint32_t retention_ms = 0;
    uint32_t count = 0;  // its cached blocks; 0: the slot is open to another retention
    // A low class with a retention (a decay raises it to 0): its first block whose retention has
    // not ended as last seen, or its sentinel. The blocks before it have ended (release order),
    // so its lowest block is this one; it only moves forward (amortized O(1)).
    int32_t fresh = -1;
  };

  static constexpr int8_t kUnset = INT8_MIN;
  void unset(Block &blk) {
    blk.priority = kUnset;
    blk.retention_ms = 0;
  }
  int32_t sentinel(uint32_t cls = 0) const { return static_cast<int32_t>(num_blocks_ + cls); }
  void insert_after(int32_t at, int32_t b);
  void remove(int32_t b);  // off its list (its class's count follows)
  void link(int32_t b);    // a ref-0 block onto its list: cached to its class's tail, free to
                           // list 0's head
  uint32_t class_for(Retention r);  // the list a cached block of retention r joins
  bool ended(int32_t b) const;      // a cached block's retention ended
  int32_t fresh(uint32_t c) const;  // class c's first block whose retention holds (advanced)

  uint32_t num_blocks_;
  // num_blocks_ + kClasses: the last are the lists' sentinels. Huge pages: read at random
  // (huge_pages.h).
  std::vector<Block, HugePageAllocator<Block>> blocks_;
  std::vector<uint64_t> released_ms_;  // a cached block of a class with a retention: its release
  mutable Class classes_[kClasses];    // head() advances a low class's fresh block
  uint32_t class_mask_ = 0;            // bit c: class c (>= 1) holds blocks
  uint32_t num_free_;
  uint32_t num_cached_ = 0;
  uint64_t next_stamp_ = 1;
  uint64_t now_ms_ = 0;
};

}  // namespace pkv
