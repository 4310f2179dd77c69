#include "state_checkpoints.h"

#include "prefix_tree.h"  // kNoNode
#include "status.h"

namespace pkv {

StateCheckpoints::StateCheckpoints(int32_t first, uint32_t count)
    : first_(first),
      count_(count),
      node_(count, kNoNode),
      prev_(count, kNone),
      next_(count, kNone) {
  PKV_ASSERT(first >= 0 && int64_t(first) + count <= INT32_MAX);
  free_.reserve(count);  // release never allocates
  for (uint32_t i = count; i-- > 0;) free_.push_back(first + int32_t(i));
}

uint32_t StateCheckpoints::index(int32_t slot) const {
  PKV_ASSERT(owns(slot));
  return uint32_t(slot - first_);
}

void StateCheckpoints::unlink(int32_t i) {
  if (prev_[i] == kNone)
    head_ = next_[i];
  else
    next_[prev_[i]] = next_[i];
  if (next_[i] == kNone)
    tail_ = prev_[i];
  else
    prev_[next_[i]] = prev_[i];
  prev_[i] = next_[i] = kNone;
}

void StateCheckpoints::link_tail(int32_t i) {
  prev_[i] = tail_;
  next_[i] = kNone;
  if (tail_ == kNone)
    head_ = i;
  else
    next_[tail_] = i;
  tail_ = i;
}

void StateCheckpoints::hold(int32_t slot, uint32_t node) {
  const uint32_t i = index(slot);
  PKV_ASSERT(!free_.empty() && free_.back() == slot && node_[i] == kNoNode && node != kNoNode);
  free_.pop_back();
  node_[i] = node;
  link_tail(int32_t(i));
  num_held_++;
}

void StateCheckpoints::release(int32_t slot) {
  const uint32_t i = index(slot);
  PKV_ASSERT(node_[i] != kNoNode);
  unlink(int32_t(i));
  node_[i] = kNoNode;
  free_.push_back(slot);
  num_held_--;
}

void StateCheckpoints::touch(int32_t slot) {
  const uint32_t i = index(slot);
  PKV_ASSERT(node_[i] != kNoNode);
  unlink(int32_t(i));
  link_tail(int32_t(i));
}

void StateCheckpoints::check() const {
  std::vector<uint8_t> seen(count_, 0);
  for (int32_t s : free_) {
    if (!owns(s) || seen[index(s)]++ || node_[index(s)] != kNoNode)
      fail(PKV_ERR_INTERNAL, "checkpoint slot %d is free twice, held, or no checkpoint slot", s);
  }
  uint32_t linked = 0;
  int32_t prev = kNone;
  for (int32_t i = head_; i != kNone; prev = i, i = next_[i]) {
    if (uint32_t(i) >= count_ || seen[i]++ || node_[i] == kNoNode || prev_[i] != prev ||
        ++linked > count_)
      fail(PKV_ERR_INTERNAL, "checkpoint LRU list broken at slot %d", first_ + i);
  }
  if (prev != tail_ || linked != num_held_ || linked + free_.size() != count_)
    fail(PKV_ERR_INTERNAL, "checkpoint slots: %u linked, %u held, %zu free of %u", linked,
         num_held_, free_.size(), count_);
}

}  // namespace pkv
