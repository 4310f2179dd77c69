// The KV profiler (DESIGN.md §5): how many blocks fit, and every term of why.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "kv_groups.h"
#include "layer_specs.h"
#include "pkv/pkv.h"

namespace pkv {

uint32_t kv_heads_per_rank(const pkv_engine_params &p);
// The cache's tensors per layer: 2 (K and V), or 1 (the MLA latent, PKV_KV_LAYOUT_MLA).
uint32_t kv_tensors(const pkv_engine_params &p);

// The pool's whole layout (pkv.h, pkv_pool_info): K and V each
// [group_layers][num_blocks][block_size][kv_heads][head_dim]. The budget, the backends' allocation
// (PoolShape) and pkv_pool_info all come from here, so the pool described is the pool allocated.
//
// Layers of unequal bytes (layer specs, KvGroups::paged): the pool is num_blocks pages of
// block_bytes, one tensor (tensors 1, num_layers 1: a page is copied whole); each layer's K and V
// are where layer_place says. kv_heads is then the most any layer has.
struct PoolLayout {
  bool paged = false;
  uint32_t kv_heads;     // per rank
  uint32_t tensors;      // 2 (K, V) or 1 (the MLA latent)
  uint32_t dtype_bytes;  // of the kv dtype
  uint32_t num_layers;   // the pool's layers: group_layers (kv_groups.h)
  uint64_t num_blocks;
  uint64_t head_stride, token_stride, block_stride, layer_stride;  // in elements
  uint64_t layer_block_bytes;  // one block of one layer, K (or V)
  uint64_t layer_bytes;        // one layer, K (or V): num_blocks blocks
  uint64_t bytes_per_pool;     // all layers, K (or V)
  uint64_t
      block_bytes;  // one block, K and V (or the latent), all layers (pkv_kv_budget.block_bytes)
  uint64_t pool_bytes;  // K and V: num_blocks * block_bytes = tensors * bytes_per_pool
};

// The layout of validated params with num_blocks blocks (0: the per-block figures, pool 0).
// Every figure is checked arithmetic: each byte count and element offset, and K and V together
// (the CPU backend maps both in one mapping), must fit in int64; else INVALID_ARGUMENT naming
// the field.
PoolLayout pool_layout(const pkv_engine_params &p, uint64_t num_blocks);

// Where one layer's K and V are: byte offsets of block 0 (K in the K pool; V in the V pool,
// or in the K pool when v_in_k_pool: paged pools, MLA and k_eq_v layers), and the bytes from one
// block to the next. A SHARED layer: its source's.
// An MLA layer with an indexer (pages only): its keys after the block's latents, then fp8's
// scales, byte offsets of block 0 in the K pool (0 without an indexer).
struct LayerPlace {
  uint64_t k_offset, v_offset, block_stride;
  bool v_in_k_pool;
  uint64_t index_offset = 0, index_scale_offset = 0;
};
LayerPlace layer_place(const PoolLayout &layout, const KvGroups &groups, const LayerSpec &spec,
                       uint32_t block_size);

// A layer of p: its spec resolved, from layer_specs or the flat fields.
LayerSpec layer_spec_of(const pkv_engine_params &p, uint32_t l);

// Each KV group's bytes (pkv_kv_group_info): one of its layers' per token, its layers, and what
// its blocks leave unused.
struct GroupBytes {
  uint64_t layer_token_bytes;
  uint32_t num_layers;
  uint64_t padding_bytes_per_block;
};
std::vector<GroupBytes> group_bytes(const pkv_engine_params &p, const KvGroups &groups,
                                    const PoolLayout &unit);

// The most blocks a pool of this shape can have: 2^31-1 (block ids are int32), and no more
// than keep pool_bytes within 2^63-1. At least 1 for a layout pool_layout accepted.
uint64_t max_pool_blocks(const PoolLayout &unit);

// The budget for validated params on a resolved device. measured is the device's (or host's)
// memory; it is ignored when p.memory_total_bytes is set. host is the host memory the host tier
// comes from (zero: not measured). Never throws for a small budget: shortfall_bytes > 0 says so
// (see budget_error).
// ranks_on_device: ranks whose pools share this memory (DESIGN.md §10), each budgeted 1 / it of
// what the memory allows.
pkv_kv_budget compute_budget(const pkv_engine_params &p, int32_t device, const MemoryInfo &measured,
                             const MemoryInfo &host, uint32_t ranks_on_device = 1);

// The pools an engine of p holds (tp_size with ranks ALL, else 1), and rank r's CUDA device.
uint32_t num_ranks(const pkv_engine_params &p);
// Rank r's parameters: p with its tp_rank and pp_rank (ranks ALL: rank = pp_rank * tp_size +
// tp_rank), whose pool_layout and kv_groups_of are that rank's pool's; p itself otherwise.
pkv_engine_params rank_params(const pkv_engine_params &p, uint32_t rank);
int32_t rank_device_id(const pkv_engine_params &p, uint32_t rank);

// Throws PKV_ERR_OUT_OF_MEMORY (or INVALID_ARGUMENT for a fixed num_blocks) naming what is
// missing when the budget cannot hold one sequence of max_model_len, or the host memory the
// host tier.
void budget_error(const pkv_engine_params &p, const pkv_kv_budget &b);

// Resolves the device, measures memory (unless memory_total_bytes is set), computes the budget.
pkv_kv_budget profile(const pkv_engine_params &p);

}  // namespace pkv
