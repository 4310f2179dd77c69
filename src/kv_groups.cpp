#include "kv_groups.h"

#include <algorithm>
#include <map>

namespace pkv {

bool KvGroups::any_windowed() const {
  return std::any_of(group_window.begin(), group_window.end(), [](uint32_t w) { return w != 0; });
}

KvGroups make_kv_groups(uint32_t num_layers, uint32_t sliding_window,
                        const uint32_t *layer_windows) {
  KvGroups g;
  g.num_layers = num_layers;
  g.group_layers = num_layers;
  if (!layer_windows || std::all_of(layer_windows, layer_windows + num_layers,
                                    [&](uint32_t w) { return w == layer_windows[0]; })) {
    g.group_window.push_back(layer_windows ? layer_windows[0] : sliding_window);
    return g;
  }
  g.windows.assign(layer_windows, layer_windows + num_layers);
  // Layers by window, in layer order; std::map orders windows with 0 (full attention) first.
  std::map<uint32_t, std::vector<uint32_t>> by_window;
  for (uint32_t l = 0; l < num_layers; ++l) by_window[g.windows[l]].push_back(l);
  for (const auto &kv : by_window)
    g.group_layers = std::min<uint32_t>(g.group_layers, kv.second.size());
  g.groups.resize(num_layers);
  g.slots.resize(num_layers);
  for (const auto &kv : by_window) {
    const std::vector<uint32_t> &layers = kv.second;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % g.group_layers == 0) g.group_window.push_back(kv.first);
      g.groups[layers[i]] = g.num_groups() - 1;
      g.slots[layers[i]] = static_cast<uint32_t>(i % g.group_layers);
    }
  }
  return g;
}

uint64_t group_blocks_for(uint32_t window, uint64_t num_tokens, uint32_t block_size) {
  const uint64_t all = (num_tokens + block_size - 1) / block_size;
  if (!window) return all;
  // A token's window spans at most ceil(window / block_size) + 1 blocks: a sequence growing to
  // num_tokens peaks there (at num_tokens itself its window may start on a block boundary and
  // span one block fewer: counting that would leave the pool a block short one token earlier),
  // and never holds more than it has.
  return std::min<uint64_t>(all, (uint64_t(window) + block_size - 1) / block_size + 1);
}

}  // namespace pkv
