#include "state_pool.h"

#include <algorithm>

#include "status.h"

namespace pkv {

StatePool::StatePool(uint32_t num_working, uint32_t num_total, uint32_t num_host_swap,
                     uint32_t num_host)
    : num_working_(num_working),
      num_total_(num_total),
      num_host_swap_(num_host_swap),
      num_host_(num_host) {
  PKV_ASSERT(num_working <= num_total && num_total <= INT32_MAX && num_host_swap <= num_host &&
             num_host <= INT32_MAX);
  free_.reserve(num_working);  // give_back never allocates
  for (uint32_t s = num_working; s-- > 0;) free_.push_back(static_cast<int32_t>(s));
  host_free_.reserve(num_host_swap);
  for (uint32_t s = num_host_swap; s-- > 0;) host_free_.push_back(static_cast<int32_t>(s));
}

void StatePool::require_free_host(const char *what) const {
  if (num_host_swap_ == 0)
    fail(PKV_ERR_UNSUPPORTED, "%s: no host state slots (the engine has no host tier)", what);
  if (host_free_.empty())
    fail(PKV_ERR_NO_SPACE,
         "%s: all %u host state slots for swapped-out sequences (max_num_seqs) are held; swap a "
         "sequence in or release one first",
         what, num_host_swap_);
}

int32_t StatePool::take_host() {
  PKV_ASSERT(!host_free_.empty());
  const int32_t slot = host_free_.back();
  host_free_.pop_back();
  return slot;
}

void StatePool::give_back_host(int32_t slot) {
  PKV_ASSERT(slot >= 0 && uint32_t(slot) < num_host_swap_ && host_free_.size() < num_host_swap_);
  host_free_.push_back(slot);
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

void StatePool::queue_copy(int32_t src, int32_t dst, int32_t kind) {
  const uint32_t src_n = kind == PKV_COPY_STATE_IN ? num_host_ : num_total_;
  const uint32_t dst_n = kind == PKV_COPY_STATE_OUT ? num_host_ : num_total_;
  PKV_ASSERT(src >= 0 && dst >= 0 && uint32_t(src) < src_n && uint32_t(dst) < dst_n);
  pending_.push_back({src, dst, kind});
}

bool StatePool::host_slot_busy(int32_t slot) const {
  for (const BlockCopy &c : pending_)
    if ((c.kind == PKV_COPY_STATE_IN && c.src == slot) ||
        (c.kind == PKV_COPY_STATE_OUT && c.dst == slot))
      return true;
  return false;
}

void StatePool::copies_done(size_t n) {
  PKV_ASSERT(n <= pending_.size());
  pending_.erase(pending_.begin(), pending_.begin() + long(n));
}

void StatePool::check(const std::vector<int32_t> &held,
                      const std::vector<int32_t> &host_held) const {
  std::vector<uint8_t> host_seen(num_host_swap_, 0);
  for (int32_t s : host_free_)
    if (s < 0 || uint32_t(s) >= num_host_swap_ || host_seen[size_t(s)]++)
      fail(PKV_ERR_INTERNAL, "host state slot %d is free twice, or no host slot", s);
  size_t num_host_held = 0;
  for (int32_t s : host_held) {
    if (s < 0) continue;
    if (uint32_t(s) >= num_host_swap_ || host_seen[size_t(s)]++)
      fail(PKV_ERR_INTERNAL, "host state slot %d is held while free or held twice", s);
    num_host_held++;
  }
  if (num_host_held + host_free_.size() != num_host_swap_)
    fail(PKV_ERR_INTERNAL, "%zu host state slots held + %zu free != %u", num_host_held,
         host_free_.size(), num_host_swap_);
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
