#include "profiler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "checked.h"
#include "kv_groups.h"
#include "params.h"
#include "state_layout.h"
#include "status.h"

namespace pkv {

uint32_t kv_heads_per_rank(const pkv_engine_params &p) {
  // When tp_size > num_kv_heads, KV heads are replicated: each rank keeps one (and every rank
  // keeps MLA's one latent whole).
  return std::max(1u, p.num_kv_heads / p.tp_size);
}

uint32_t kv_tensors(const pkv_engine_params &p) { return p.kv_layout == PKV_KV_LAYOUT_MLA ? 1 : 2; }

LayerSpec layer_spec_of(const pkv_engine_params &p, uint32_t l) {
  if (!p.layer_specs) return flat_layer_spec(p, l);
  return resolve_layer_specs(p)[l];
}

namespace {

// The layer today's layout repeats: the flat fields', or the first cached spec (every cached
// spec stores the same, uniform_storage).
LayerSpec unit_layer(const pkv_engine_params &p) {
  if (!p.layer_specs) return flat_layer_spec(p, 0);
  for (const LayerSpec &s : resolve_layer_specs(p))
    if (s.cached()) return s;
  fail(PKV_ERR_INTERNAL, "layer_specs without a cached layer");  // layer 0 cannot be SHARED
}

// Pages: num_blocks of page_token_bytes x block_size bytes, one tensor.
PoolLayout paged_layout(const pkv_engine_params &p, const KvGroups &groups, uint64_t num_blocks) {
  PoolLayout l;
  l.paged = true;
  // The flat fields' heads, or the most any spec has (block_layout PAGE keeps flat layers too).
  l.kv_heads = p.layer_specs ? 0 : kv_heads_per_rank(p);
  for (const LayerSpec &s : resolve_layer_specs(p)) l.kv_heads = std::max(l.kv_heads, s.kv_heads);
  l.tensors = 1;
  l.dtype_bytes = dtype_bytes(kv_dtype_of(p));
  l.num_layers = 1;
  l.num_blocks = num_blocks;
  l.block_bytes = checked_product({groups.page_token_bytes, p.block_size}, kMaxOffset,
                                  "block_bytes = the page: its layers' K and V bytes per token "
                                  "(pkv_kv_group_info) x block_size");
  l.pool_bytes = checked_product({num_blocks, l.block_bytes}, kMaxOffset,
                                 "pool_bytes = num_blocks x block_bytes (every page)");
  l.head_stride = l.token_stride = 0;  // per layer: layer_place, pkv_layer_info
  l.block_stride = l.block_bytes / l.dtype_bytes;
  l.layer_stride = 0;
  l.layer_block_bytes = l.block_bytes;
  l.layer_bytes = l.bytes_per_pool = l.pool_bytes;
  return l;
}

}  // namespace

PoolLayout pool_layout(const pkv_engine_params &p, uint64_t num_blocks) {
  const KvGroups groups = kv_groups_of(p);
  if (groups.paged) return paged_layout(p, groups, num_blocks);
  const LayerSpec unit = unit_layer(p);
  PoolLayout l;
  l.kv_heads = unit.kv_heads;
  l.dtype_bytes = dtype_bytes(kv_dtype_of(p));
  l.num_blocks = num_blocks;
  l.num_layers = groups.group_layers;
  const uint64_t kv = l.kv_heads, bs = p.block_size, hd = unit.head_dim, db = l.dtype_bytes;
  l.tensors = unit.v_is_k() ? 1 : 2;
  // block_bytes first: every per-block figure divides it, so it is the one a shape overflows.
  l.block_bytes =
      checked_product({l.tensors, l.num_layers, bs, kv, hd, db}, kMaxOffset,
                      "block_bytes = 2 (K,V; 1 for the MLA latent) x group_layers x block_size x "
                      "kv_heads_per_rank x head_dim x kv dtype bytes");
  l.pool_bytes = checked_product({num_blocks, l.block_bytes}, kMaxOffset,
                                 "pool_bytes = num_blocks x block_bytes (K and V, all layers)");
  // Each figure below divides block_bytes or pool_bytes: the checks cannot fail past here, and
  // stay so that no figure is computed unchecked.
  l.head_stride = hd;
  l.token_stride =
      checked_product({kv, hd}, kMaxOffset, "token_stride = kv_heads_per_rank x head_dim");
  l.block_stride = checked_product({bs, kv, hd}, kMaxOffset,
                                   "block_stride = block_size x kv_heads_per_rank x head_dim");
  l.layer_stride = checked_product({num_blocks, l.block_stride}, kMaxOffset,
                                   "layer_stride = num_blocks x block_stride");
  l.layer_block_bytes = checked_product({l.block_stride, db}, kMaxOffset,
                                        "block bytes of one layer = block_stride x dtype bytes");
  l.layer_bytes = checked_product({num_blocks, l.layer_block_bytes}, kMaxOffset,
                                  "layer bytes = num_blocks x block_stride x dtype bytes");
  l.bytes_per_pool = checked_product({l.num_layers, l.layer_bytes}, kMaxOffset,
                                     "bytes_per_pool = group_layers x layer_stride x dtype bytes");
  return l;
}

LayerPlace layer_place(const PoolLayout &layout, const KvGroups &groups, const LayerSpec &spec,
                       uint32_t block_size) {
  const uint32_t slot = groups.layer_slot(spec.source);
  LayerPlace at;
  if (layout.paged) {
    const uint64_t layer = groups.layer_token_bytes[groups.layer_group(spec.source)] * block_size;
    at.k_offset = slot * layer;
    at.v_offset =
        at.k_offset + (spec.v_is_k() ? 0 : spec.k_token_bytes(layout.dtype_bytes) * block_size);
    at.block_stride = layout.block_bytes;
    at.v_in_k_pool = true;
    if (spec.indexed()) {
      at.index_offset = at.k_offset + spec.k_token_bytes(layout.dtype_bytes) * block_size;
      at.index_scale_offset = at.index_offset + spec.index_key_bytes() * block_size;
    }
    return at;
  }
  at.k_offset = at.v_offset = slot * layout.layer_bytes;
  at.block_stride = layout.layer_block_bytes;
  at.v_in_k_pool = spec.v_is_k();
  return at;
}

std::vector<GroupBytes> group_bytes(const pkv_engine_params &p, const KvGroups &groups,
                                    const PoolLayout &unit) {
  std::vector<GroupBytes> out(groups.num_groups());
  // Equal layers without specs: one group, or windows whose layer arrays count the groups.
  std::vector<uint32_t> sizes = groups.group_size;
  if (sizes.empty()) {
    sizes.assign(groups.num_groups(), 0);
    if (groups.groups.empty()) sizes[0] = groups.num_layers;
    for (uint32_t g : groups.groups)
      if (g != kNoGroup) ++sizes[g];  // a layer of another pipeline stage: none
  }
  for (uint32_t g = 0; g < groups.num_groups(); ++g) {
    out[g].layer_token_bytes =
        groups.layer_token_bytes.empty()
            ? unit.block_bytes / (uint64_t(groups.group_layers) * p.block_size)
            : groups.layer_token_bytes[g];
    out[g].num_layers = sizes[g];
    out[g].padding_bytes_per_block =
        unit.block_bytes - out[g].layer_token_bytes * sizes[g] * p.block_size;
  }
  return out;
}

uint64_t max_pool_blocks(const PoolLayout &unit) {
  return std::min<uint64_t>(INT32_MAX, kMaxOffset / unit.block_bytes);
}

namespace {

// fp8 scales: one float per (layer, kv head of this rank) for K and for V; 0 for other caches.
// block_bytes bounds layers x kv heads by 2^62 only, so 8 times that is checked too.
uint64_t kv_scale_bytes(const pkv_engine_params &p, const PoolLayout &unit) {
  if (!is_fp8(kv_dtype_of(p))) return 0;
  if (p.layer_specs) {  // each cached layer's own heads and tensors (a few thousand at most)
    uint64_t n = 0;
    for (const LayerSpec &s : resolve_layer_specs(p))
      if (s.cached()) n += (s.v_is_k() ? 1 : 2) * uint64_t(s.kv_heads) * sizeof(float);
    return n;
  }
  (void)unit;  // the flat fields' tensors and heads: a PAGE pool's unit is one tensor of pages
  return checked_product(
      {kv_tensors(p), p.num_layers, kv_heads_per_rank(p), sizeof(float)}, kMaxOffset,
      "kv_scale_bytes = 2 (K,V; 1 for the MLA latent) x num_layers x kv_heads_per_rank x 4");
}

// Blocks one sequence of max_model_len needs (one per KV group without a limit): each group's, a
// windowed group holding those of one token's window only (kv_groups.h, group_blocks_for). Refused when no pool of this shape could hold them, as
// no budget would help.
uint64_t blocks_per_max_seq(const pkv_engine_params &p, const PoolLayout &unit) {
  const KvGroups groups = kv_groups_of(p);
  if (!p.max_model_len) return groups.num_groups();
  uint64_t n = 0;
  for (uint32_t w : groups.group_window) n += group_blocks_for(w, p.max_model_len, p.block_size);
  if (n > max_pool_blocks(unit))
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "max_model_len %u needs %llu blocks of %llu bytes; a pool of this shape holds at most %llu "
        "(2^31-1 blocks, 2^63-1 bytes)",
        p.max_model_len, (unsigned long long)n, (unsigned long long)unit.block_bytes,
        (unsigned long long)max_pool_blocks(unit));
  return n;
}

// What one sequence of max_model_len lacks, when num_blocks < blocks_per_max_seq. From the
// formula it is counted from the signed budget: when used + reserve already exceed
// total * utilization, that excess is missing too.
uint64_t shortfall(const pkv_engine_params &p, const pkv_kv_budget &b, long double allowed) {
  const uint64_t need =
      checked_sum(checked_sum(checked_product({b.blocks_per_max_seq, b.block_bytes}, kMaxOffset,
                                              "blocks_per_max_seq x block_bytes"),
                              b.kv_scale_bytes, kMaxOffset,
                              "blocks_per_max_seq x block_bytes + kv_scale_bytes"),
                  b.state_pool_bytes, kMaxOffset,
                  "blocks_per_max_seq x block_bytes + kv_scale_bytes + state_pool_bytes");
  // Integers where the budget is one: need exceeds it, as num_blocks < blocks_per_max_seq.
  if (p.num_blocks) return need - b.pool_bytes;
  if (p.kv_cache_bytes) return need - p.kv_cache_bytes;
  const long double missing = std::ceil((long double)need - allowed);
  if (missing > (long double)UINT64_MAX)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "shortfall_bytes = blocks_per_max_seq x block_bytes - (total x utilization - used_bytes - "
         "reserve_bytes) overflows 64 bits (used_bytes %llu, reserve_bytes %llu)",
         (unsigned long long)b.used_bytes, (unsigned long long)b.reserve_bytes);
  return static_cast<uint64_t>(missing);
}

// The per-layer terms (since 0.5.0): cached layers, a token's bytes in all of them, the most
// bytes a group's block leaves unused.
void model_bytes(const pkv_engine_params &p, const KvGroups &groups, const PoolLayout &unit,
                 pkv_kv_budget &b) {
  b.num_cached_layers = groups.num_cached;
  for (const GroupBytes &g : group_bytes(p, groups, unit)) {
    b.model_bytes_per_token = checked_sum(
        b.model_bytes_per_token,
        checked_product({g.layer_token_bytes, g.num_layers}, kMaxOffset,
                        "a group's bytes per token"),
        kMaxOffset, "model_bytes_per_token = every cached layer's K and V bytes of one token");
    b.padding_bytes_per_block = std::max(b.padding_bytes_per_block, g.padding_bytes_per_block);
  }
}

// The host tier's terms: its blocks from host_num_blocks or host_cache_bytes, its bytes, and the
// host memory it comes from (host: zero when not measured).
void host_tier(const pkv_engine_params &p, const PoolLayout &unit, const MemoryInfo &host,
               pkv_kv_budget &b) {
  if (p.host_num_blocks) {
    b.host_num_blocks = p.host_num_blocks;
  } else if (p.host_cache_bytes) {
    b.host_num_blocks = std::min(p.host_cache_bytes / unit.block_bytes, max_pool_blocks(unit));
    if (b.host_num_blocks == 0)
      fail(PKV_ERR_INVALID_ARGUMENT, "host_cache_bytes %llu holds no block of %llu bytes",
           (unsigned long long)p.host_cache_bytes, (unsigned long long)unit.block_bytes);
  }
  b.host_pool_bytes = checked_product({b.host_num_blocks, unit.block_bytes}, kMaxOffset,
                                      "host_pool_bytes = host_num_blocks x block_bytes");
  b.host_total_bytes = host.total_bytes;
  b.host_available_bytes = std::min(host.free_bytes, host.total_bytes);
}

}  // namespace

uint32_t num_ranks(const pkv_engine_params &p) {
  return p.ranks == PKV_RANKS_ALL ? p.tp_size * std::max(p.pp_size, 1u) : 1;
}

pkv_engine_params rank_params(const pkv_engine_params &p, uint32_t rank) {
  if (p.ranks != PKV_RANKS_ALL) return p;
  pkv_engine_params r = p;
  r.tp_rank = rank % p.tp_size;
  r.pp_rank = rank / p.tp_size;
  return r;
}

int32_t rank_device_id(const pkv_engine_params &p, uint32_t rank) {
  return p.ranks == PKV_RANKS_ALL && p.rank_device_ids ? p.rank_device_ids[rank] : p.device_id;
}

pkv_kv_budget compute_budget(const pkv_engine_params &p, int32_t device, const MemoryInfo &measured,
                             const MemoryInfo &host, uint32_t ranks_on_device) {
  const PoolLayout unit = pool_layout(p, 0);
  const KvGroups groups = kv_groups_of(p);
  pkv_kv_budget b;
  std::memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.device = device;
  b.kv_dtype = kv_dtype_of(p);
  b.kv_layout = p.kv_layout;
  b.num_kv_groups = groups.num_groups();
  b.group_layers = groups.group_layers;
  b.padded_layers = groups.padded_layers();
  b.kv_scale_bytes = kv_scale_bytes(p, unit);
  b.kv_heads_per_rank = unit.kv_heads;
  b.block_bytes = unit.block_bytes;
  b.bytes_per_token = b.block_bytes / p.block_size;
  model_bytes(p, groups, unit, b);
  state_budget(p, b);  // the state slots come off the budget before the blocks (DESIGN.md §13)
  if (p.memory_total_bytes) {
    b.total_bytes = p.memory_total_bytes;
    b.used_bytes = p.memory_used_bytes;
  } else {
    b.total_bytes = measured.total_bytes;
    b.used_bytes = checked_sum(
        measured.total_bytes - std::min(measured.free_bytes, measured.total_bytes),
        p.memory_used_bytes, UINT64_MAX, "used_bytes = measured in use + memory_used_bytes");
  }
  b.reserve_bytes = p.reserve_bytes;
  b.memory_utilization = p.memory_utilization;
  // long double holds every uint64 exactly; only total * utilization rounds (within a byte).
  // Ranks sharing the device (or the host) split what it allows evenly.
  b.num_ranks = 1;
  b.ranks_on_device = ranks_on_device;
  const long double allowed = ((long double)b.total_bytes * p.memory_utilization -
                               (long double)b.used_bytes - (long double)b.reserve_bytes) /
                              ranks_on_device;
  if (p.kv_cache_bytes) {
    b.budget_bytes = p.kv_cache_bytes;
    b.source = PKV_BUDGET_FROM_BYTE_CAP;
  } else {
    b.budget_bytes = allowed > 0 ? static_cast<uint64_t>(std::floor(allowed)) : 0;
    b.source = PKV_BUDGET_FROM_UTILIZATION;
  }
  const uint64_t before_blocks = b.kv_scale_bytes + b.state_pool_bytes;  // each below 2^63
  const uint64_t for_blocks = b.budget_bytes - std::min(b.budget_bytes, before_blocks);
  if (p.num_blocks) {
    b.num_blocks = p.num_blocks;  // pool_layout refuses a pool that cannot be represented
    b.source = PKV_BUDGET_FIXED_BLOCKS;
  } else {
    b.num_blocks = std::min(for_blocks / b.block_bytes, max_pool_blocks(unit));
  }
  b.pool_bytes = pool_layout(p, b.num_blocks).pool_bytes;
  b.max_tokens = checked_product({b.num_blocks, p.block_size}, kMaxOffset,
                                 "max_tokens = num_blocks x block_size");
  b.blocks_per_max_seq = blocks_per_max_seq(p, unit);
  b.max_seqs_at_max_model_len = b.num_blocks / b.blocks_per_max_seq;
  if (b.num_blocks < b.blocks_per_max_seq) b.shortfall_bytes = shortfall(p, b, allowed);
  host_tier(p, unit, host, b);
  return b;
}

namespace {

// A byte count a person can read and check: "512 bytes", or three significant digits in the unit
// that holds it and the exact count ("1.50 GiB (1610612736 bytes)"), so no amount shows as 0.0.
std::string readable_bytes(uint64_t n) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  char text[80];
  if (n < 1024) {
    std::snprintf(text, sizeof text, "%llu bytes", (unsigned long long)n);
    return text;
  }
  double v = double(n) / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof units / sizeof units[0]) v /= 1024.0, ++u;
  std::snprintf(text, sizeof text, "%.*f %s (%llu bytes)",
                v < 10    ? 2
                : v < 100 ? 1
                          : 0,
                v, units[u], (unsigned long long)n);
  return text;
}

}  // namespace

void budget_error(const pkv_engine_params &p, const pkv_kv_budget &b) {
  // Each term is below 2^63: the sum cannot overflow.
  // Every rank's host tier is in this host's memory.
  const uint64_t host_bytes =
      checked_product({b.host_pool_bytes + b.host_state_bytes, std::max<uint64_t>(b.num_ranks, 1)},
                      kMaxOffset, "the host tiers of every rank");
  if (b.host_total_bytes && host_bytes > b.host_available_bytes)
    fail(PKV_ERR_OUT_OF_MEMORY,
         "the host tier's %llu blocks%s take %s; the host has %s available (of %s): %s missing. "
         "Lower host_num_blocks or host_cache_bytes%s",
         (unsigned long long)b.host_num_blocks, b.host_state_bytes ? " and its state slots" : "",
         readable_bytes(host_bytes).c_str(), readable_bytes(b.host_available_bytes).c_str(),
         readable_bytes(b.host_total_bytes).c_str(),
         readable_bytes(host_bytes - b.host_available_bytes).c_str(),
         b.host_state_bytes ? " (or max_num_seqs, num_state_checkpoints, host_offload)" : "");
  if (b.shortfall_bytes == 0) return;
  if (b.source == PKV_BUDGET_FIXED_BLOCKS)
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "num_blocks %u cannot hold one sequence of max_model_len %u: it needs %llu blocks of %u tokens. Raise "
        "num_blocks to at least %llu (or 0 to size the pool from the budget), or lower max_model_len",
        p.num_blocks, p.max_model_len, (unsigned long long)b.blocks_per_max_seq, p.block_size,
        (unsigned long long)b.blocks_per_max_seq);
  // As shortfall() counts it (checked there): the blocks of one longest sequence, the scales
  // and the state slots.
  const uint64_t need =
      b.blocks_per_max_seq * b.block_bytes + b.kv_scale_bytes + b.state_pool_bytes;
  const bool cap = b.source == PKV_BUDGET_FROM_BYTE_CAP;
  std::string what = cap ? "kv_cache_bytes" : "total x memory_utilization - used - reserve_bytes";
  if (!cap &&
      b.shortfall_bytes > need)  // the formula is negative: used and reserve exceed the rest
    what += ", where used + reserve_bytes exceed total x memory_utilization by " +
            readable_bytes(b.shortfall_bytes - need);
  char fix[200];
  if (cap)
    std::snprintf(fix, sizeof fix, "Raise kv_cache_bytes to at least %llu",
                  (unsigned long long)need);
  else
    std::snprintf(
        fix, sizeof fix,
        "Raise memory_utilization (now %.3g)%s, or lower reserve_bytes or memory_used_bytes",
        (double)p.memory_utilization, p.memory_total_bytes ? " or memory_total_bytes" : "");
  char states[160] = "";
  if (b.state_pool_bytes)
    std::snprintf(states, sizeof states, " and %u state slots of %s",
                  b.num_state_slots + b.num_state_checkpoints,
                  readable_bytes(b.state_bytes_per_seq).c_str());
  char who[64];
  if (p.max_model_len)
    std::snprintf(who, sizeof who, "one sequence of max_model_len %u", p.max_model_len);
  else
    std::snprintf(who, sizeof who, "the smallest pool (max_model_len 0: a block per KV group)");
  fail(PKV_ERR_OUT_OF_MEMORY,
       "%s needs %llu blocks of %s%s%s: %s; the KV budget (%s) is %s, %s missing. %s%s%s%s", who,
       (unsigned long long)b.blocks_per_max_seq, readable_bytes(b.block_bytes).c_str(),
       b.kv_scale_bytes ? " and the fp8 scales" : "", states, readable_bytes(need).c_str(),
       what.c_str(), readable_bytes(b.budget_bytes).c_str(),
       readable_bytes(b.shortfall_bytes).c_str(), fix,
       p.max_model_len ? ", or lower max_model_len" : "",
       b.state_pool_bytes ? ", or lower max_num_seqs or num_state_checkpoints" : "",
       is_fp8(kv_dtype_of(p)) ? "" : " (or an fp8 kv_dtype: one byte per element)");
}

pkv_kv_budget profile(const pkv_engine_params &p) {
  validate_engine_params(p);
  // The shape's refusals first, so they do not depend on the device or its memory.
  const PoolLayout unit = pool_layout(p, p.num_blocks);
  blocks_per_max_seq(p, unit);
  kv_scale_bytes(p, unit);
  pkv_kv_budget states{};
  state_budget(p, states);
  const int32_t device = resolve_device(p.device, rank_device_id(p, 0));
  // Each rank's device (-1: the host), and how many ranks share it.
  const uint32_t n = num_ranks(p);
  std::vector<int32_t> where(n);
  std::map<int32_t, uint32_t> sharing;
  for (uint32_t r = 0; r < n; ++r) {
    where[r] = device == PKV_DEVICE_CUDA ? rank_device_id(p, r) : -1;
    ++sharing[where[r]];
  }
  MemoryInfo host;
  std::map<int32_t, MemoryInfo> measured;
  if (!p.memory_total_bytes) {
    for (const auto &d : sharing)
      measured[d.first] = d.first >= 0 ? cuda_memory(d.first) : host_memory();
    // The host tier comes from host memory whatever the device; measured with the device's.
    if (p.host_num_blocks || p.host_cache_bytes)
      host = device == PKV_DEVICE_CUDA ? host_memory() : measured[-1];
  }
  // Every rank's pool holds the same blocks: the fewest any rank's memory allows.
  pkv_kv_budget best{};
  for (uint32_t r = 0; r < n; ++r) {
    // A pipeline stage's pool holds its layers only: its blocks are smaller.
    pkv_kv_budget b =
        compute_budget(rank_params(p, r), device, measured[where[r]], host, sharing[where[r]]);
    b.bounding_rank = r;
    if (r == 0 || b.num_blocks < best.num_blocks) best = b;
  }
  best.num_ranks = n;
  return best;
}

}  // namespace pkv
