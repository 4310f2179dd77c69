// Memory for the arrays as large as the pool that every request reads at random places: the
// pools' block arrays (block_pool.h), the prefix tree's nodes and tokens and its child table
// (prefix_tree.h, node_table.h). With 4 KiB pages a 512k-block pool's arrays span some 20k pages,
// far past the TLB's reach, and nearly every lookup, eviction and insert paid a page walk on top
// of its cache miss: admission cost 1.6-1.7x as much at 512k blocks as at 4k (bench_block_manager,
// pkv 0.3.0 and 0.4). Arrays of 2 MiB and more are therefore aligned to 2 MiB and advised as huge
// pages (Linux transparent huge pages, in "madvise" mode or "always"); the kernel may decline,
// which costs only the speed. Smaller arrays come from operator new as usual.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>

namespace pkv {

constexpr size_t kHugePageBytes = size_t(2) << 20;

template <class T> struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <class U> HugePageAllocator(const HugePageAllocator<U> &) {}

  T *allocate(size_t n) {
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_alloc();
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) return static_cast<T *>(::operator new(bytes));
    const size_t rounded = (bytes + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    void *p = std::aligned_alloc(kHugePageBytes, rounded);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused (EINVAL without THP) changes nothing
#endif
    return static_cast<T *>(p);
  }
  void deallocate(T *p, size_t n) {
    if (n * sizeof(T) < kHugePageBytes)
      ::operator delete(p);
    else
      std::free(p);
  }
  template <class U> bool operator==(const HugePageAllocator<U> &) const { return true; }
  template <class U> bool operator!=(const HugePageAllocator<U> &) const { return false; }
};

}  // namespace pkv
