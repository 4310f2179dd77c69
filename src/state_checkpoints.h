// The recurrent state's checkpoint slots (DESIGN.md §13): slot ids first .. first + count - 1 of
// the state region (after the working slots, state_pool.h). A held slot keeps the state of a
// sequence at one block boundary, attached to the prefix-tree node of the block that ends there
// (the anchor group's, block_manager.h); the block manager serves a prefix hit at that boundary
// from it. Held slots are in LRU order (a hit touches its slot), so a capture with no slot free
// takes the least recently used one. Every call is O(1) and allocates nothing.
#pragma once

#include <cstdint>
#include <vector>

namespace pkv {

// What a prefix-tree node holds of the state (PrefixTree::state): a device checkpoint slot
// (>= 0, an id of the state region), an offloaded one in a host state slot (encoded <= -2), or
// kNoCheckpoint.
constexpr int32_t kNoCheckpoint = -1;
inline int32_t host_checkpoint_ref(int32_t host_slot) { return -2 - host_slot; }
inline bool is_host_checkpoint(int32_t ref) { return ref <= -2; }
inline int32_t checkpoint_slot(int32_t ref) { return ref <= -2 ? -2 - ref : ref; }

class StateCheckpoints {
 public:
  StateCheckpoints() = default;  // no checkpoints
  StateCheckpoints(int32_t first, uint32_t count);

  bool enabled() const { return count_ > 0; }
  uint32_t num_slots() const { return count_; }
  uint32_t num_held() const { return num_held_; }
  bool owns(int32_t slot) const { return slot >= first_ && slot - first_ < int64_t(count_); }

  // A free slot, or kNone when every slot is held.
  int32_t free_slot() const { return free_.empty() ? kNone : free_.back(); }
  // The least recently used held slot (kNone when none is held).
  int32_t oldest() const { return head_ == kNone ? kNone : head_ + first_; }
  // A free slot becomes held by node, the most recently used.
  void hold(int32_t slot, uint32_t node);
  // A held slot becomes free.
  void release(int32_t slot);
  // A held slot becomes the most recently used.
  void touch(int32_t slot);
  uint32_t node(int32_t slot) const { return node_[index(slot)]; }

  // Free and held slots are disjoint and cover every slot, the LRU list links every held slot
  // once, and held(slot) is true exactly for the slots a node names. Throws PKV_ERR_INTERNAL.
  void check() const;

  static constexpr int32_t kNone = -1;

 private:
  uint32_t index(int32_t slot) const;
  void unlink(int32_t i);
  void link_tail(int32_t i);

  int32_t first_ = 0;
  uint32_t count_ = 0, num_held_ = 0;
  std::vector<int32_t> free_;            // a stack of slot ids, the lowest on top at first
  std::vector<uint32_t> node_;           // [count]: the holding node, kNoNode when free
  std::vector<int32_t> prev_, next_;     // [count]: the LRU list of held slots, by index
  int32_t head_ = kNone, tail_ = kNone;  // oldest, newest (indices)
};

}  // namespace pkv
