// Tier 1 of DESIGN.md §11: the host tier's blocks. The memory is the backend's (a second mapped
// region on the CPU, pinned memory on CUDA); this keeps which blocks are in use: reference
// counts and a free list. The block manager decides what moves here and back.
#pragma once

#include <cstdint>
#include <vector>

namespace pkv {

class HostTier {
 public:
  explicit HostTier(uint32_t num_blocks);

  uint32_t num_blocks() const { return static_cast<uint32_t>(ref_.size()); }
  uint32_t num_free() const { return static_cast<uint32_t>(free_.size()); }
  int32_t ref(int32_t block) const { return ref_[block]; }
  // A free block, its ref count 1. The caller checked num_free().
  int32_t pop_free();
  void add_ref(int32_t block);
  // True when the block became free.
  bool drop_ref(int32_t block);
  // The free list holds exactly the ref-0 blocks, once each. Throws PKV_ERR_INTERNAL.
  void check() const;

 private:
  std::vector<int32_t> ref_;
  std::vector<int32_t> free_;  // a stack: the lowest ids are handed out first
};

}  // namespace pkv
