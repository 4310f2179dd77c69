// The cache described per layer (pkv_engine_params.layer_specs, DESIGN.md §12): reading the
// caller's specs at its layer_spec_size, every rule pkv.h states for them, and each layer's spec
// resolved (zeros filled from the flat fields, heads per rank, the scale).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv_groups.h"
#include "pkv/pkv.h"
#include "state_layout.h"

namespace pkv {

// One layer, resolved: nothing left 0 that pkv.h defaults.
struct LayerSpec {
  uint32_t kind = PKV_LAYER_ATTENTION;
  uint32_t attention = PKV_ATTENTION_FULL;
  uint32_t window = 0;    // SLIDING: the window, CHUNKED: the chunk size, FULL: 0
  uint32_t kv_heads = 0;  // this rank's (MLA: 1, the latent)
  uint32_t head_dim = 0;  // K's values per head (MLA: the latent's width)
  uint32_t v_dim = 0;     // V's and out's values per head (MLA: kv_lora_rank)
  bool k_eq_v = false;    // V is K, stored once
  bool sinks = false;
  uint32_t source = 0;  // the layer whose cache it reads: itself, or a SHARED layer's source
  float softcap = 0.0f;
  float scale = 0.0f;  // pkv_attention's
  // A STATE layer's parts (pkv_layer_spec.state_*; bytes 0 = absent, and in every other kind).
  StatePart state[PKV_MAX_STATE_PARTS] = {};
  // An MLA layer's indexer (pkv_layer_spec.index_*; index_dim 0 = none, DESIGN.md §14): per
  // token a key of index_dim values of index_dtype (FP8_E4M3 with an fp32 scale, or BF16) after
  // the block's latents in the same page.
  uint32_t index_dim = 0, index_dtype = 0, index_heads = 0, index_topk = 0;

  // Has a KV cache of its own: neither SHARED (it reads its source's) nor STATE (a fixed-size
  // state per sequence in a state slot, state_layout.h; in no KV group).
  bool cached() const { return kind != PKV_LAYER_SHARED && kind != PKV_LAYER_STATE; }
  // K and V are one tensor: a k_eq_v layer, or MLA's latent (V its first v_dim values).
  bool v_is_k() const { return k_eq_v || kind == PKV_LAYER_MLA; }
  // Bytes of one token's K (and V) in this layer's cache: 0 for a SHARED layer.
  uint64_t token_bytes(uint32_t dtype_bytes) const;
  uint64_t k_token_bytes(uint32_t dtype_bytes) const {
    return uint64_t(kv_heads) * head_dim * dtype_bytes;
  }
  bool indexed() const { return index_dim != 0; }
  // One token's indexer bytes: its key's values, and fp8's scale (0 without an indexer).
  uint64_t index_key_bytes() const {
    return uint64_t(index_dim) * (index_dtype == PKV_DTYPE_BF16 ? 2 : 1);
  }
  uint64_t index_token_bytes() const {
    return index_dim ? index_key_bytes() + (index_dtype == PKV_DTYPE_BF16 ? 0 : 4) : 0;
  }
};

// The 0.5 size of pkv_layer_spec: the least layer_spec_size accepted.
constexpr uint32_t kMinLayerSpecSize = 48;
static_assert(sizeof(pkv_layer_spec) >= kMinLayerSpecSize, "pkv_layer_spec only grows");

// Layer l of validated params without layer_specs, as the flat fields say.
LayerSpec flat_layer_spec(const pkv_engine_params &p, uint32_t l);

// The caller's specs copied at its layer_spec_size (fields it lacks are 0); empty when
// layer_specs is NULL. Checks only what reading needs (the size); see check_layer_specs.
std::vector<pkv_layer_spec> copy_layer_specs(const pkv_engine_params &p);

// Every rule of pkv.h for layer_specs (p's other fields already checked): INVALID_ARGUMENT
// naming the layer and field, UNSUPPORTED for what pkv cannot serve yet (a host tier or store
// with layers the flat fields could not describe; MLA with windows). Then the specs resolved.
std::vector<LayerSpec> resolve_layer_specs(const pkv_engine_params &p);

// The KV groups of validated params: from their layer specs, or their windows (kv_groups.h).
KvGroups kv_groups_of(const pkv_engine_params &p);

// The store fingerprint's KV layout (StoreShape::layout, DESIGN.md §11): "" for one KV group of
// full attention of the flat fields' layers (STATE layers beside them, one indexer in every MLA
// layer: 0.7's keys); else every layer's spec, window, group and slot as text.
std::string store_layout(const pkv_engine_params &p, const std::vector<LayerSpec> &specs,
                         const KvGroups &groups);

// Whether every cached layer stores the same tensors of the same shape, both K and V (or MLA's
// latent) with V as wide as K: today's pool layout holds them (profiler.h, pool_layout).
bool uniform_storage(const std::vector<LayerSpec> &specs);

}  // namespace pkv
