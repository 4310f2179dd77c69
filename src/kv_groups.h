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

// The group (and slot) of a layer that is in none: a STATE layer (pkv_kv_groups, pkv_layer_info).
constexpr uint32_t kNoGroup = UINT32_MAX;

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
  // A STATE layer is in no group: its group and slot are kNoGroup, its window 0.
  std::vector<uint32_t> windows, groups, slots;

  // Layer specs (DESIGN.md §12; empty without them): per group, one of its layers' K and V of
  // one token (its layers' bytes are equal), and how many layers it holds.
  std::vector<uint64_t> layer_token_bytes;
  std::vector<uint32_t> group_size;
  // Layer specs: a block's bytes / block_size (every group's block is this page), and whether
  // blocks are pages (layers unequal: a layer's K and V at its slot's offset within each block's
  // page) rather than today's [slot][block] layout.
  uint64_t page_token_bytes = 0;
  bool paged = false;
  uint32_t num_cached = 0;  // layers with a KV cache of their own: less SHARED and STATE

  uint32_t layer_window(uint32_t l) const { return windows.empty() ? group_window[0] : windows[l]; }
  uint32_t layer_group(uint32_t l) const { return groups.empty() ? 0 : groups[l]; }
  uint32_t layer_slot(uint32_t l) const { return slots.empty() ? l : slots[l]; }
  uint32_t num_groups() const { return static_cast<uint32_t>(group_window.size()); }
  // Slots no layer fills: in equal groups, group_layers each; in pages, what the page holds.
  uint32_t padded_layers() const;
  uint32_t attention(uint32_t group) const;  // PKV_ATTENTION_* of a group
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

struct LayerSpec;
// The groups of resolved layer specs (layer_specs.h): layers grouped by (attention, window,
// bytes per token); a SHARED layer in its source's group and slot. Equal layers: groups as
// above; unequal: a page that wastes nothing when one exists, else the least (kv_groups.cpp).
KvGroups make_kv_groups(const std::vector<LayerSpec> &specs, uint32_t dtype_bytes);

// Pipeline stages (DESIGN.md §10): stage s of pp_size over num_layers layers holds layers
// [first, end): num_layers / pp_size each, the rest one more each in the stages before the last
// (vLLM's get_pp_indices).
struct StageLayers {
  uint32_t first, end;
};
StageLayers stage_layers(uint32_t num_layers, uint32_t pp_size, uint32_t stage);

// The groups of one stage's pool: the same groups (the block manager's, so a block table means
// the same blocks on every stage), each stage layer's slot renumbered among its group's layers
// in the stage, group_layers the most any group has there; a layer of another stage is in no
// group (kNoGroup). Equal layers only (not paged).
KvGroups stage_kv_groups(const KvGroups &all, StageLayers stage);

// One KV group of pages: the bytes of one token of one layer and how many layers there are.
struct PageKind {
  uint64_t token_bytes;
  uint32_t num_layers;
};
// The page (bytes per token of a block) for kinds of unequal bytes: the largest page that every
// kind's layer bytes divide and that divides every kind's total, when one exists (no waste);
// else the candidate page (a whole number of some kind's layers) that wastes the least per token
// held by every group, ties to the larger page (fewer groups).
uint64_t choose_page(const std::vector<PageKind> &kinds);

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
