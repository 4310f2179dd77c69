// KV groups (DESIGN.md §12): layers grouped by sliding window, each group with its own block
// table per sequence in the one pool (vLLM's hybrid allocator).
//
// Groups have equal layer counts, so one block of the pool serves any group: a block holds K and
// V of group_layers layers. group_layers is the fewest layers any window has; a window with more
// layers is split into several groups, the last one padded (its unused slots are memory no layer
// reads). Full-attention groups come first, then windowed ones by window.
#pragma once

#include <cstdint>
#include <vector>

namespace pkv {

// One window for every layer (no layer_windows) is one group and keeps no per-layer arrays: a
// shape of 2^32-1 layers costs nothing to describe.
struct KvGroups {
  uint32_t num_layers = 0;
  uint32_t group_layers = 0;           // layers a block holds
  std::vector<uint32_t> group_window;  // [num_groups]: 0 = full attention; the chunk size of a
                                       // chunked group
  // [num_groups]: PKV_ATTENTION_* of each group (FULL, SLIDING: group_window is the window,
  // CHUNKED: it is the chunk size). Empty = FULL or SLIDING as group_window says.
  std::vector<uint32_t> group_attention;
  // [num_layers] each, or empty for one group (layer l: window group_window[0], group 0, slot l).
  std::vector<uint32_t> windows, groups, slots;

  uint32_t layer_window(uint32_t l) const { return windows.empty() ? group_window[0] : windows[l]; }
  uint32_t layer_group(uint32_t l) const { return groups.empty() ? 0 : groups[l]; }
  uint32_t layer_slot(uint32_t l) const { return slots.empty() ? l : slots[l]; }
  uint32_t num_groups() const { return static_cast<uint32_t>(group_window.size()); }
  uint32_t padded_layers() const { return group_layers * num_groups() - num_layers; }
  // Sliding or chunked: the group gives back blocks no future token reads.
  bool windowed(uint32_t group) const { return group_window[group] != 0; }
  bool chunked(uint32_t group) const {
    return !group_attention.empty() && group_attention[group] == 2 /* PKV_ATTENTION_CHUNKED */;
  }
  bool any_windowed() const;
};

// The groups of num_layers layers with these windows (layer_windows: [num_layers], or null for
// sliding_window everywhere).
KvGroups make_kv_groups(uint32_t num_layers, uint32_t sliding_window,
                        const uint32_t *layer_windows);

// The first token a window of `window` keys needs when the next token to compute is at position
// `next`: keys before it are never read again (0 for full attention).
inline uint32_t window_start(uint32_t window, uint64_t next) {
  return window && next >= window ? static_cast<uint32_t>(next - window + 1) : 0;
}

// The most blocks a sequence of up to n tokens, all computed but the last, holds in a group of
// this window: all of its blocks under full attention, else at most ceil(window / block_size) + 1
// (what one token's window spans), never more than n tokens fill.
uint64_t group_blocks_for(uint32_t window, uint64_t num_tokens, uint32_t block_size);

}  // namespace pkv
