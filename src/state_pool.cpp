#include "state_pool.h"

#include <algorithm>

#include "status.h"

namespace pkv {

StatePool::StatePool(uint32_t num_working, uint32_t num_total)
    : num_working_(num_working), num_total_(num_total) {
  PKV_ASSERT(num_working <= num_total && num_total <= INT32_MAX);
  free_.reserve(num_working);  // give_back never allocates
  for (uint32_t s = num_working; s-- > 0;) free_.push_back(static_cast<int32_t>(s));
}

void StatePool::require_free(const char *what) const {
  if (free_.empty())
    fail(
        PKV_ERR_NO_SPACE,
        "%s: no free state slot: all %u working slots (max_num_seqs: one per running sequence of a "
        "model with STATE layers) are held; release, preempt or finish a sequence first, or "
        "raise max_num_seqs",
        what, num_working_);
}

int32_t StatePool::take() {
  PKV_ASSERT(!free_.empty());
  const int32_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void StatePool::give_back(int32_t slot) {
  PKV_ASSERT(slot >= 0 && uint32_t(slot) < num_working_ && free_.size() < num_working_);
  free_.push_back(slot);
}

void StatePool::queue_copy(int32_t src, int32_t dst) {
  PKV_ASSERT(src >= 0 && dst >= 0 && uint32_t(src) < num_total_ && uint32_t(dst) < num_total_);
  pending_.push_back({src, dst, PKV_COPY_STATE});
}

void StatePool::copies_done(size_t n) {
  PKV_ASSERT(n <= pending_.size());
  pending_.erase(pending_.begin(), pending_.begin() + long(n));
}

void StatePool::check(const std::vector<int32_t> &held) const {
  std::vector<uint8_t> seen(num_working_, 0);
  for (int32_t s : free_) {
    if (s < 0 || uint32_t(s) >= num_working_ || seen[size_t(s)]++)
      fail(PKV_ERR_INTERNAL, "state slot %d is on the free list twice, or is no working slot", s);
  }
  size_t num_held = 0;
  for (int32_t s : held) {
    if (s < 0) continue;
    if (uint32_t(s) >= num_working_ || seen[size_t(s)]++)
      fail(PKV_ERR_INTERNAL, "state slot %d is held while free or held twice (of %u)", s,
           num_working_);
    num_held++;
  }
  if (num_held + free_.size() != num_working_)
    fail(PKV_ERR_INTERNAL, "%zu state slots held + %zu free != %u working slots", num_held,
         free_.size(), num_working_);
}

}  // namespace pkv
