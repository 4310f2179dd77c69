#include "tiers/host_tier.h"

#include "status.h"

namespace pkv {

HostTier::HostTier(uint32_t num_blocks) : ref_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (uint32_t b = num_blocks; b-- > 0;) free_.push_back(static_cast<int32_t>(b));
}

int32_t HostTier::pop_free() {
  PKV_ASSERT(!free_.empty());
  const int32_t block = free_.back();
  free_.pop_back();
  ref_[block] = 1;
  return block;
}

void HostTier::add_ref(int32_t block) {
  PKV_ASSERT(ref_[block] > 0);  // a free host block holds nothing to share
  ref_[block]++;
}

bool HostTier::drop_ref(int32_t block) {
  PKV_ASSERT(ref_[block] > 0);
  if (--ref_[block] > 0) return false;
  free_.push_back(block);  // cannot grow past the reserved num_blocks
  return true;
}

void HostTier::check() const {
  std::vector<char> listed(ref_.size(), 0);
  for (int32_t b : free_) {
    if (b < 0 || size_t(b) >= ref_.size() || ref_[b] != 0 || listed[b]++)
      fail(PKV_ERR_INTERNAL, "host tier: free list holds block %d wrongly", b);
  }
  size_t zero = 0;
  for (int32_t r : ref_) zero += r == 0;
  if (zero != free_.size())
    fail(PKV_ERR_INTERNAL, "host tier: %zu blocks at ref 0, %zu on the free list", zero, free_.size());
}

}  // namespace pkv
