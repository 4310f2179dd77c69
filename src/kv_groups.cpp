#include "kv_groups.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "layer_specs.h"
#include "pkv/pkv.h"

namespace pkv {

// Sums of pages over groups can pass 2^64 before the choice (pages up to 2^63 bytes).
__extension__ typedef unsigned __int128 u128;

bool KvGroups::any_windowed() const {
  return std::any_of(group_window.begin(), group_window.end(), [](uint32_t w) { return w != 0; });
}

uint32_t KvGroups::padded_layers() const {
  if (group_size.empty()) {
    // Layers of other pipeline stages are in no group (stage_kv_groups).
    const uint32_t in_groups =
        groups.empty() ? num_layers
                       : uint32_t(std::count_if(groups.begin(), groups.end(),
                                                [](uint32_t g) { return g != kNoGroup; }));
    return group_layers * num_groups() - in_groups;
  }
  uint32_t n = 0;
  for (uint32_t g = 0; g < num_groups(); ++g)
    n += (paged ? uint32_t(page_token_bytes / layer_token_bytes[g]) : group_layers) - group_size[g];
  return n;
}

uint32_t KvGroups::attention(uint32_t group) const {
  if (!group_attention.empty()) return group_attention[group];
  return group_window[group] ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
}

StageLayers stage_layers(uint32_t num_layers, uint32_t pp_size, uint32_t stage) {
  const uint32_t per = num_layers / pp_size, rest = num_layers % pp_size;
  // The stages pp_size - 1 - rest .. pp_size - 2 take one more layer each.
  StageLayers out{0, 0};
  for (uint32_t s = 0; s <= stage; ++s) {
    const bool more = s + 1 < pp_size && s + 1 + rest >= pp_size;
    out.first = out.end;
    out.end = out.first + per + (more ? 1 : 0);
  }
  return out;
}

KvGroups stage_kv_groups(const KvGroups &all, StageLayers stage) {
  KvGroups g = all;
  const uint32_t n = all.num_layers;
  g.windows.resize(n), g.groups.resize(n), g.slots.resize(n);
  std::vector<uint32_t> count(all.num_groups(), 0);
  g.group_layers = 0;
  g.num_cached = 0;
  for (uint32_t l = 0; l < n; ++l) {
    g.windows[l] = all.layer_window(l);
    const uint32_t group = all.layer_group(l);
    const bool here = l >= stage.first && l < stage.end && group != kNoGroup;
    g.groups[l] = here ? group : kNoGroup;
    g.slots[l] = here ? count[group]++ : kNoGroup;
    if (here) g.group_layers = std::max(g.group_layers, count[group]), ++g.num_cached;
  }
  if (!g.group_size.empty()) g.group_size = count;
  g.group_layers = std::max(g.group_layers, 1u);
  return g;
}

KvGroups make_kv_groups(uint32_t num_layers, uint32_t sliding_window,
                        const uint32_t *layer_windows) {
  KvGroups g;
  g.num_layers = num_layers;
  g.num_cached = num_layers;
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

uint64_t choose_page(const std::vector<PageKind> &kinds) {
  // No waste: a page P (bytes per token) with P % t_k == 0 and (n_k t_k) % P == 0 for every kind
  // exists exactly when lcm(t_k) divides gcd(n_k t_k), and the largest is that gcd.
  uint64_t total_gcd = 0;
  for (const PageKind &k : kinds) total_gcd = std::gcd(total_gcd, k.token_bytes * k.num_layers);
  if (std::all_of(kinds.begin(), kinds.end(),
                  [&](const PageKind &k) { return total_gcd % k.token_bytes == 0; }))
    return total_gcd;
  // Else every page of m layers of one kind (at least the widest layer) is a candidate; its
  // waste is what each group's page holds beyond its layers, summed over the groups a token fills.
  uint64_t widest = 0, held = 0;
  for (const PageKind &k : kinds)
    widest = std::max(widest, k.token_bytes), held += k.token_bytes * k.num_layers;
  uint64_t best = 0;
  u128 best_waste = ~(u128)0;
  for (const PageKind &c : kinds)
    for (uint64_t m = 1; m <= c.num_layers; ++m) {
      const uint64_t page = c.token_bytes * m;
      if (page < widest) continue;
      u128 bytes = 0;
      for (const PageKind &k : kinds) {
        const uint64_t per_page = page / k.token_bytes;
        bytes += (u128)((k.num_layers + per_page - 1) / per_page) * page;
      }
      const u128 waste = bytes - held;
      if (waste < best_waste || (waste == best_waste && page > best))
        best = page, best_waste = waste;
    }
  return best;
}

KvGroups make_kv_groups(const std::vector<LayerSpec> &specs, uint32_t dtype_bytes) {
  KvGroups g;
  g.num_layers = static_cast<uint32_t>(specs.size());
  // Kinds by (attention, window, bytes): FULL (0, 0) first, as the windows' groups above.
  std::map<std::tuple<uint32_t, uint32_t, uint64_t>, std::vector<uint32_t>> kinds;
  for (uint32_t l = 0; l < g.num_layers; ++l)
    if (specs[l].cached())
      kinds[{specs[l].attention, specs[l].window, specs[l].token_bytes(dtype_bytes)}].push_back(l);
  std::vector<PageKind> page_kinds;
  uint32_t fewest = UINT32_MAX;
  for (const auto &k : kinds) {
    page_kinds.push_back(PageKind{std::get<2>(k.first), uint32_t(k.second.size())});
    fewest = std::min<uint32_t>(fewest, k.second.size());
    g.num_cached += k.second.size();
  }
  const bool equal = std::all_of(page_kinds.begin(), page_kinds.end(), [&](const PageKind &k) {
    return k.token_bytes == page_kinds[0].token_bytes;
  });
  // Equal layers: today's groups (the fewest layers of a kind per block, the rest padded).
  g.page_token_bytes = equal ? page_kinds[0].token_bytes * fewest : choose_page(page_kinds);
  g.paged = !uniform_storage(specs);
  g.windows.resize(g.num_layers);
  g.groups.resize(g.num_layers);
  g.slots.resize(g.num_layers);
  for (const auto &k : kinds) {
    const uint64_t bytes = std::get<2>(k.first);
    const uint32_t per_block = static_cast<uint32_t>(g.page_token_bytes / bytes);
    // The most layers a block holds: a page with room for more than its kind has counts those.
    g.group_layers =
        std::max<uint32_t>(g.group_layers, std::min<size_t>(per_block, k.second.size()));
    for (size_t i = 0; i < k.second.size(); ++i) {
      if (i % per_block == 0) {
        g.group_attention.push_back(std::get<0>(k.first));
        g.group_window.push_back(std::get<1>(k.first));
        g.layer_token_bytes.push_back(bytes);
        g.group_size.push_back(0);
      }
      const uint32_t l = k.second[i];
      g.groups[l] = g.num_groups() - 1;
      g.slots[l] = static_cast<uint32_t>(i % per_block);
      g.windows[l] = specs[l].window;
      ++g.group_size.back();
    }
  }
  for (uint32_t l = 0; l < g.num_layers; ++l)
    if (specs[l].kind == PKV_LAYER_SHARED) {
      g.groups[l] = g.groups[specs[l].source];
      g.slots[l] = g.slots[specs[l].source];
      g.windows[l] = g.windows[specs[l].source];
    } else if (specs[l].kind == PKV_LAYER_STATE) {
      g.groups[l] = g.slots[l] = kNoGroup;  // its state is in a state slot (state_layout.h)
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
