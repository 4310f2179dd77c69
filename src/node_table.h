// A flat open-addressing multimap from a 64-bit key to prefix-node ids, for PrefixTree's child
// lookups: one probe sequence over 16-byte slots instead of a std::unordered_map's chain of heap
// nodes. Linear probing, power-of-two capacity at most half full, backward-shift deletion (no
// tombstones). Equal keys may repeat: find offers every node stored under a key, and the caller
// tells the nodes apart (PrefixTree compares parent and tokens).
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

  // Calls f(node) for each node stored under key until f returns true; returns that node or kEmpty.
  template <class F> uint32_t find(uint64_t key, F &&f) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot &s = slots_[i];
      if (s.node == kEmpty) return kEmpty;
      if (s.key == key && f(s.node)) return s.node;
    }
  }

  // Starts loading key's home slot; returns the node there now (kEmpty if none), a likely match.
  uint32_t peek(uint64_t key) const { return slots_[home(key)].node; }
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[home(key)]); }

  void insert(uint64_t key, uint32_t node) {
    if (2 * (size_ + 1) > slots_.size()) rebuild(slots_.size() * 2);
    place(key, node);
    size_++;
  }

  // Removes the slot holding (key, node); false (nothing changed) when there is none. Both must
  // match: the same node may sit under another key earlier in this key's probe sequence.
  bool erase(uint64_t key, uint32_t node) {
    size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].node == kEmpty) return false;
      if (slots_[i].node == node && slots_[i].key == key) break;
    }
    // Backward shift: pull later slots of the cluster into the hole when their home allows.
    for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (slots_[j].node == kEmpty) break;
      size_t h = home(slots_[j].key);
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
    uint64_t key;
    uint32_t node;
  };

  static size_t capacity_for(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
  }
  size_t home(uint64_t key) const {
    // Fibonacci hashing: the top bits of key * 2^64/phi spread any key pattern over the table.
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(uint64_t key, uint32_t node) {
    size_t i = home(key);
    while (slots_[i].node != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{key, node};
  }
  void rebuild(size_t capacity) {
    std::vector<Slot, HugePageAllocator<Slot>> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{0, kEmpty});
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) shift_--;
    for (const Slot &s : old)
      if (s.node != kEmpty) place(s.key, s.node);
  }

  std::vector<Slot, HugePageAllocator<Slot>> slots_;  // huge pages: probed at random
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace pkv
