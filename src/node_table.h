// A flat open-addressing multimap from a 64-bit key to prefix-node ids, for PrefixTree's child
// lookups: one probe sequence over 8-byte slots instead of a std::unordered_map's chain of heap
// nodes. Linear probing, power-of-two capacity at most half full, backward-shift deletion (no
// tombstones). A slot keeps the key's 32-bit fingerprint (the top half of its Fibonacci hash,
// whose top bits are also its home slot) and the node: 8 slots a cache line, so a pool of 512k
// blocks misses half as many lines as with the whole key (admission, bench_block_manager). Keys
// may share a fingerprint, and equal keys may repeat: find offers every node stored under the
// key's fingerprint, and the caller tells the nodes apart (PrefixTree compares parent and tokens).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "huge_pages.h"

namespace pkv {

class NodeTable {
 public:
  static constexpr uint32_t kEmpty = UINT32_MAX;

  explicit NodeTable(size_t expected = 0) { rebuild(capacity_for(expected)); }

  // Calls f(node) for each node stored under key's fingerprint until f returns true; returns that
  // node or kEmpty.
  template <class F> uint32_t find(uint64_t key, F &&f) const {
    const uint32_t fp = fingerprint(key);
    for (size_t i = home(fp);; i = (i + 1) & mask_) {
      const Slot &s = slots_[i];
      if (s.node == kEmpty) return kEmpty;
      if (s.fp == fp && f(s.node)) return s.node;
    }
  }

  // Starts loading key's home slot; returns the node there now (kEmpty if none), a likely match.
  uint32_t peek(uint64_t key) const { return slots_[home(fingerprint(key))].node; }
  // Its home slot's line and the next: a probe run or an erase's backward shift often crosses
  // into the next line (4 slots a line), and a miss there came in series with the first.
  void prefetch(uint64_t key) const {
    const size_t i = home(fingerprint(key));
    __builtin_prefetch(&slots_[i]);
    __builtin_prefetch(&slots_[(i + kSlotsPerLine) & mask_]);
  }

  void insert(uint64_t key, uint32_t node) {
    if (2 * (size_ + 1) > slots_.size() && slots_.size() < kMaxCapacity) rebuild(slots_.size() * 2);
    place(fingerprint(key), node);
    size_++;
  }

  // Removes the slot holding (key's fingerprint, node); false (nothing changed) when there is
  // none. Both must match: the same node may sit under another key earlier in this key's probe
  // sequence.
  bool erase(uint64_t key, uint32_t node) {
    const uint32_t fp = fingerprint(key);
    size_t i = home(fp);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].node == kEmpty) return false;
      if (slots_[i].node == node && slots_[i].fp == fp) break;
    }
    // Backward shift: pull later slots of the cluster into the hole when their home allows.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].node == kEmpty) break;
      size_t h = home(slots_[j].fp);
      bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i].node = kEmpty;
    size_--;
    return true;
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t fp;  // fingerprint(key)
    uint32_t node;
  };
  static constexpr size_t kSlotsPerLine = 64 / sizeof(Slot);

  static constexpr size_t kMaxCapacity = size_t(1) << 32;  // a home is a fingerprint's top bits
  static size_t capacity_for(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n && cap < kMaxCapacity) cap *= 2;
    return cap;
  }
  // Fibonacci hashing: the top bits of key * 2^64/phi spread any key pattern over the table. The
  // top 32 are the fingerprint; its top bits are the home slot (capacity at most 2^32).
  static uint32_t fingerprint(uint64_t key) {
    return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 32);
  }
  size_t home(uint32_t fp) const { return static_cast<size_t>(fp >> shift_); }
  void place(uint32_t fp, uint32_t node) {
    size_t i = home(fp);
    while (slots_[i].node != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{fp, node};
  }
  void rebuild(size_t capacity) {
    std::vector<Slot, HugePageAllocator<Slot>> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{0, kEmpty});
    mask_ = capacity - 1;
    shift_ = 32;
    for (size_t c = capacity; c > 1; c >>= 1) shift_--;
    for (const Slot &s : old)
      if (s.node != kEmpty) place(s.fp, s.node);
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;  // huge pages: probed at random
  size_t mask_ = 0;
  unsigned shift_ = 32;  // home = fp >> shift_
  size_t size_ = 0;
};

}  // namespace pkv
