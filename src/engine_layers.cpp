// Engine's layers (engine.h): the pool's shape and where each layer's K and V are in it
// (pkv_pool_info, pkv_layer_info), what is set per layer before the first sequence (fp8 scales,
// attention sinks), and pkv_attention's checks and call for one layer. DESIGN.md §12.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine.h"
#include "status.h"

namespace pkv {

LayerSpec Engine::layer_spec(uint32_t l) const {
  return specs_.empty() ? flat_layer_spec(params_, l) : specs_[l];
}

PoolShape Engine::pool_shape(const RankPool &rank) const {
  const PoolLayout &l = rank.layout;
  const PoolLayout h = pool_layout(rank.params, params_.host_num_blocks);
  // Pages: the widest layer sizes the kernels' scratch (head_dim covers V's width too).
  uint32_t head_dim = params_.head_dim;
  if (l.paged)
    for (const LayerSpec &s : specs_) head_dim = std::max({head_dim, s.head_dim, s.v_dim});
  else if (!specs_.empty()) {
    const auto first =
        std::find_if(specs_.begin(), specs_.end(), [](const LayerSpec &s) { return s.cached(); });
    if (first != specs_.end()) head_dim = first->head_dim;  // none: STATE layers alone
  }
  PoolShape shape{l.num_layers,
                  params_.num_blocks,
                  params_.block_size,
                  l.kv_heads,
                  head_dim,
                  l.dtype_bytes,
                  params_.dtype,
                  kv_dtype_of(params_),
                  params_.num_q_heads / params_.tp_size,
                  {l.layer_block_bytes, l.layer_bytes, l.bytes_per_pool},
                  params_.host_num_blocks,
                  {h.layer_bytes, h.bytes_per_pool},
                  l.tensors,
                  params_.kv_layout == PKV_KV_LAYOUT_MLA ? params_.kv_lora_rank : 0};
  shape.paged = l.paged;
  shape.model_layers = params_.num_layers;
  shape.num_state_slots = states_.num_total();
  shape.state_slot_bytes = state_layout_.slot_bytes;
  shape.num_host_state_slots = states_.num_host();
  shape.max_num_seqs = params_.max_num_seqs;
  shape.max_num_batched_tokens = params_.max_num_batched_tokens;
  shape.max_blocks_per_seq =
      params_.max_model_len ? (params_.max_model_len + params_.block_size - 1) / params_.block_size
                            : params_.num_blocks;
  shape.num_kv_groups = std::max<uint32_t>(groups_.num_groups(), 1);
  for (const LayerSpec &s : specs_) {
    shape.sinks |= s.sinks;
    if (s.indexed()) shape.index_topk = std::max(shape.index_topk, s.index_topk);
  }
  return shape;
}

struct pkv_pool_info Engine::pool_info() const {
  return rank_pool_info(0);
}

struct pkv_pool_info Engine::rank_pool_info(uint32_t rank) const {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  const RankPool &rp = pools_[rank];
  const Backend &pool = *rp.backend;
  const PoolLayout &l = rp.layout;  // the layout pool_shape() allocated
  struct pkv_pool_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.device = pool.device();
  info.dtype = kv_dtype_of(params_);
  info.model_dtype = params_.dtype;
  info.num_kv_groups = groups_.num_groups();
  info.kernels = pool.kernels();
  info.num_layers = l.num_layers;
  info.num_blocks = params_.num_blocks;
  info.block_size = params_.block_size;
  info.kv_heads = l.kv_heads;
  info.head_dim = pool_shape(rp).head_dim;
  info.k_base = pool.k_pool();
  info.v_base = pool.v_pool();
  info.head_stride = l.head_stride;
  info.token_stride = l.token_stride;
  info.block_stride = l.block_stride;
  info.layer_stride = l.layer_stride;
  info.bytes_per_pool = l.bytes_per_pool;
  const PoolLayout h = pool_layout(rp.params, params_.host_num_blocks);
  info.host_num_blocks = params_.host_num_blocks;
  info.host_k_base = pool.host_k_pool();
  info.host_v_base = pool.host_v_pool();
  info.host_layer_stride = h.layer_stride;
  info.host_bytes_per_pool = h.bytes_per_pool;
  info.state_base = pool.state_pool();
  info.state_slot_bytes = states_.enabled() ? state_layout_.slot_bytes : 0;
  info.num_state_slots = states_.num_total();
  info.host_state_base = pool.host_state_pool();
  info.num_host_state_slots = states_.num_host();
  info.rank = rank;
  info.num_ranks = num_ranks();
  info.device_id = pool.device() == PKV_DEVICE_CUDA ? rank_device_id(params_, rank) : -1;
  info.tp_rank = rp.params.tp_rank;
  info.pp_rank = rp.params.pp_rank;
  info.first_layer = rp.stage.first;
  info.end_layer = rp.stage.end;
  return info;
}

const Engine::RankPool &Engine::stage_rank(uint32_t rank, uint32_t layer) const {
  const RankPool &rp = pools_[rank];
  if (layer >= rp.stage.first && layer < rp.stage.end) return rp;
  const uint32_t pp = params_.pp_size;
  uint32_t s = 0;
  while (s + 1 < pp && stage_layers(params_.num_layers, pp, s).end <= layer) ++s;
  const StageLayers at = stage_layers(params_.num_layers, pp, s);
  fail(PKV_ERR_INVALID_ARGUMENT,
       "layer %u is pipeline stage %u's (layers %u .. %u); %s stage %u's (layers %u .. %u)", layer,
       s, at.first, at.end - 1,
       pools_.size() > 1 ? "this rank's handle is of" : "this engine holds", rp.params.pp_rank,
       rp.stage.first, rp.stage.end - 1);
}

const Engine::RankPool &Engine::layer_rank(uint32_t layer) const {
  for (const RankPool &rp : pools_)
    if (layer >= rp.stage.first && layer < rp.stage.end) return rp;
  return stage_rank(0, layer);  // refused: another stage's
}

struct pkv_layer_info Engine::layer_info(uint32_t layer) const {
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  const LayerSpec s = layer_spec(layer);
  // The pool of the layer's stage (rank 0 of it: every tensor-parallel rank's is alike).
  const RankPool &rp = layer_rank(layer);
  const Backend &pool = *rp.backend;
  const uint32_t db = rp.layout.dtype_bytes;
  struct pkv_layer_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.kind = s.kind;
  info.attention = s.attention;
  info.window = s.window;
  info.group = groups_.layer_group(layer) == kNoGroup ? rp.groups.layer_group(layer)
                                                      : groups_.layer_group(layer);
  info.source_layer = s.source;
  info.kv_heads = s.kv_heads;
  info.head_dim = s.head_dim;
  info.v_head_dim = s.v_dim;
  info.k_eq_v = s.v_is_k();
  info.sinks = s.sinks;
  info.logit_softcap = s.softcap;
  info.softmax_scale = s.scale;
  if (s.kind == PKV_LAYER_STATE) return state_layer_info(layer, s, info);
  // V's rows are K's where V is K (MLA's latent, k_eq_v): as wide as K's.
  const uint64_t v_row = s.v_is_k() ? s.head_dim : s.v_dim;
  info.token_stride = uint64_t(s.kv_heads) * s.head_dim;
  info.v_token_stride = uint64_t(s.kv_heads) * v_row;
  info.head_stride = s.head_dim;
  const LayerPlace at = layer_place(rp.layout, rp.groups, s, params_.block_size);
  info.block_stride = at.block_stride / db;
  char *k = static_cast<char *>(pool.k_pool());
  char *v = at.v_in_k_pool ? k : static_cast<char *>(pool.v_pool());
  info.k_base = k + at.k_offset;
  info.v_base = v + at.v_offset;
  if (char *hk = static_cast<char *>(pool.host_k_pool())) {
    const PoolLayout h = pool_layout(rp.params, params_.host_num_blocks);
    const LayerPlace ht = layer_place(h, rp.groups, s, params_.block_size);
    char *hv = ht.v_in_k_pool ? hk : static_cast<char *>(pool.host_v_pool());
    info.host_k_base = hk + ht.k_offset;
    info.host_v_base = hv + ht.v_offset;
    if (s.indexed()) {
      info.host_index_base = hk + ht.index_offset;
      if (s.index_dtype != PKV_DTYPE_BF16) info.host_index_scale_base = hk + ht.index_scale_offset;
    }
  }
  if (s.indexed()) {
    info.index_head_dim = s.index_dim;
    info.index_dtype = s.index_dtype;
    info.index_n_heads = s.index_heads;
    info.index_topk = s.index_topk;
    info.index_block_bytes = at.block_stride;
    info.index_base = k + at.index_offset;
    if (s.index_dtype != PKV_DTYPE_BF16) info.index_scale_base = k + at.index_scale_offset;
  }
  return info;
}

// A STATE layer has no K and V: its parts' places within a state slot (state_layout_), and no
// KV group (UINT32_MAX).
struct pkv_layer_info Engine::state_layer_info(uint32_t layer, const LayerSpec &s,
                                               struct pkv_layer_info info) const {
  info.group = UINT32_MAX;
  info.source_layer = layer;
  for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS; ++i) {
    info.state_offset[i] = state_layout_.offset[layer][i];
    info.state_bytes[i] = state_layout_.bytes[layer][i];
    if (!s.state[i].bytes) continue;
    info.state_dtype[i] = s.state[i].dtype;
    std::copy(s.state[i].shape, s.state[i].shape + PKV_MAX_STATE_DIMS,
              info.state_shape + size_t(i) * PKV_MAX_STATE_DIMS);
  }
  return info;
}

void Engine::set_kv_scales(uint32_t layer, const float *k_scales, const float *v_scales) {
  if (k_scales_.empty())
    fail(PKV_ERR_INVALID_ARGUMENT, "the cache is %s, not fp8: it has no scales (kv_dtype)",
         dtype_name(kv_dtype_of(params_)));
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  const LayerSpec spec = layer_spec(layer);
  PKV_REQUIRE(spec.kind != PKV_LAYER_STATE,
              "layer %u is a STATE layer: its recurrent state is not quantized (it has no K and V "
              "to scale)",
              layer);
  PKV_REQUIRE(spec.cached(),
              "layer %u is SHARED: it reads layer %u's cache, quantized with that layer's scales "
              "(set them there)",
              layer, spec.source);
  // MLA and K = V: one tensor, k's scale; there is no V to scale.
  const bool one = spec.v_is_k();
  PKV_REQUIRE(k_scales && (v_scales || one), "k_scales and v_scales must not be NULL");
  if (one) v_scales = k_scales;          // checked as k's, not kept
  const uint32_t heads = spec.kv_heads;  // per rank
  // Ranks ALL: every tensor-parallel rank's heads, in rank order (the layer's stage's ranks).
  const uint32_t tp = pools_.size() > 1 ? params_.tp_size : 1;
  for (uint32_t h = 0; h < heads * tp; ++h)
    PKV_REQUIRE(std::isfinite(k_scales[h]) && k_scales[h] > 0 && std::isfinite(v_scales[h]) &&
                    v_scales[h] > 0,
                "kv head %u: scales must be finite and > 0, got k %g, v %g", h, double(k_scales[h]),
                double(v_scales[h]));
  if (kv_written())
    fail(PKV_ERR_STATE,
         "scales are set before the first sequence (or imported plan): KV already written keeps "
         "its scale");
  // Tensor-parallel rank t's row of the layer at the table of rank (the layer's stage, t).
  const uint32_t first = pools_.size() > 1 ? layer_rank(layer).params.pp_rank * tp : 0;
  for (uint32_t t = 0; t < tp; ++t) {
    const size_t at = (size_t(first + t) * params_.num_layers + layer) * budget_.kv_heads_per_rank;
    std::copy(k_scales + size_t(t) * heads, k_scales + size_t(t + 1) * heads, &k_scales_[at]);
    if (!v_scales_.empty())
      std::copy(v_scales + size_t(t) * heads, v_scales + size_t(t + 1) * heads, &v_scales_[at]);
  }
  if (store_) store_->set_kv_scales(k_scales_, v_scales_);
}

void Engine::set_attention_sinks(uint32_t layer, const float *sinks, uint32_t num_sinks) {
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  PKV_REQUIRE(layer_spec(layer).sinks,
              "layer %u has no sinks: its pkv_layer_spec.sinks is 0 (set it to 1 at create)",
              layer);
  PKV_REQUIRE(sinks != nullptr, "sinks is NULL");
  // Ranks ALL: every rank's q heads in rank order, the whole model's.
  const uint32_t per_rank = params_.num_q_heads / params_.tp_size;
  const uint32_t tp = pools_.size() > 1 ? params_.tp_size : 1;
  const uint32_t heads = per_rank * tp;
  if (num_ranks() > 1)
    PKV_REQUIRE(num_sinks == heads,
                "num_sinks %u: an engine of every rank (ranks ALL) takes every rank's q heads in "
                "rank order, num_q_heads = %u",
                num_sinks, heads);
  PKV_REQUIRE(num_sinks == heads, "num_sinks %u: this rank has %u q heads (num_q_heads / tp_size)",
              num_sinks, heads);
  for (uint32_t h = 0; h < heads; ++h)
    PKV_REQUIRE(std::isfinite(sinks[h]), "sinks[%u] is %g: each sink logit must be finite", h,
                double(sinks[h]));
  if (kv_written())
    fail(PKV_ERR_STATE,
         "sinks are set before the first sequence (pkv_allocate or pkv_submit) or imported plan, "
         "with the weights");
  const uint32_t first = pools_.size() > 1 ? layer_rank(layer).params.pp_rank * tp : 0;
  for (uint32_t t = 0; t < tp; ++t)
    std::copy(sinks + size_t(t) * per_rank, sinks + size_t(t + 1) * per_rank,
              &sinks_[(size_t(first + t) * params_.num_layers + layer) * per_rank]);
  sinks_set_[layer] = 1;
}

void Engine::set_stream(void *stream) {
  PKV_REQUIRE(pools_.size() == 1 || stream == nullptr,
              "pkv_engine_set_stream: this engine holds %zu ranks' pools on their own devices: "
              "set each rank's stream with pkv_engine_set_rank_stream (NULL sets every rank's "
              "default stream)",
              pools_.size());
  for (const RankPool &pool : pools_) pool.backend->set_stream(stream);
}

void Engine::set_rank_stream(uint32_t rank, void *stream) {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  pools_[rank].backend->set_stream(stream);
}

void Engine::check_attention(uint32_t layer, const LayerSpec &s, const void *q, const void *k,
                             const void *v, const void *out) const {
  if (s.kind == PKV_LAYER_STATE)
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "layer %u is a STATE layer: it has no K and V to attend over; the host runs its recurrence "
        "on the state in slot pkv_batch_view.state_slots[i] (pkv_layer_info says where its parts "
        "are)",
        layer);
  if (s.kind == PKV_LAYER_MLA) {
    PKV_REQUIRE(q && k && out, "q, k (the latents) and out must not be NULL");
    PKV_REQUIRE(!v, "kv_layout MLA has no V (it is a view of the latents): pass v NULL");
    PKV_REQUIRE(out != q && out != k, "out may not alias q or k");
    if (!attention_mla_supported(params_.kv_lora_rank, params_.qk_rope_head_dim))
      fail(
          PKV_ERR_UNSUPPORTED,
          "pkv_attention on an MLA cache supports kv_lora_rank and qk_rope_head_dim multiples of %d up to %d "
          "and %d, not %u and %u",
          PKV_ATTENTION_HEAD_DIM_ALIGN, PKV_ATTENTION_MAX_KV_LORA_RANK, PKV_ATTENTION_MAX_ROPE_DIM,
          params_.kv_lora_rank, params_.qk_rope_head_dim);
    return;
  }
  if (s.kind == PKV_LAYER_SHARED) {
    PKV_REQUIRE(q && out, "q and out must not be NULL");
    PKV_REQUIRE(
        !k && !v,
        "layer %u is SHARED: it reads layer %u's K and V and writes none: pass k and v NULL", layer,
        s.source);
    PKV_REQUIRE(out != q, "out may not alias q");
  } else if (s.k_eq_v) {
    PKV_REQUIRE(q && k && out, "q, k and out must not be NULL");
    PKV_REQUIRE(!v, "layer %u keeps K = V (k_eq_v): pass v NULL", layer);
    PKV_REQUIRE(out != q && out != k, "out may not alias q or k");
  } else {
    PKV_REQUIRE(q && k && v && out, "q, k, v and out must not be NULL");
    PKV_REQUIRE(out != q && out != k && out != v, "out may not alias q, k or v");
  }
  const int32_t device = backend_->device();
  if (!attention_head_dim_supported(s.head_dim, device) ||
      !attention_head_dim_supported(s.v_dim, device)) {
    const char *on = device == PKV_DEVICE_CPU ? "on the CPU" : "on CUDA";
    if (specs_.empty())
      fail(PKV_ERR_UNSUPPORTED,
           "pkv_attention %s supports head_dim multiples of %d up to %u, not %u", on,
           PKV_ATTENTION_HEAD_DIM_ALIGN, attention_max_head_dim(device), params_.head_dim);
    fail(PKV_ERR_UNSUPPORTED,
         "layer %u: pkv_attention %s supports head_dim and v_head_dim multiples of %d up to %u, "
         "not %u and %u (the pool holds the layer: pkv_layer_info says where, for the host's "
         "kernels)",
         layer, on, PKV_ATTENTION_HEAD_DIM_ALIGN, attention_max_head_dim(device), s.head_dim,
         s.v_dim);
  }
  if (s.sinks && !sinks_set_[layer])
    fail(PKV_ERR_STATE,
         "layer %u has attention sinks that were not set: call pkv_set_attention_sinks before the "
         "first sequence (attending without them would be wrong)",
         layer);
}

AttentionCall Engine::attention_call(uint32_t layer, const LayerSpec &s, uint32_t rank) const {
  AttentionCall c{};
  c.layer = layer;
  const RankPool &rp = stage_rank(rank, layer);
  c.slot = rp.groups.layer_slot(layer);
  c.group = rp.groups.layer_group(layer);
  c.window = s.attention == PKV_ATTENTION_SLIDING ? s.window : 0;
  c.chunk = s.attention == PKV_ATTENTION_CHUNKED ? s.window : 0;
  c.scale = s.scale;
  // A SHARED layer reads its source's codes: its source's scales.
  const size_t heads = budget_.kv_heads_per_rank;
  if (!k_scales_.empty()) {
    const size_t at = (size_t(rank) * params_.num_layers + s.source) * heads;
    c.k_scale = &k_scales_[at];
    c.v_scale = s.v_is_k() ? c.k_scale : &v_scales_[at];
  }
  c.kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.v_dim = s.v_dim;
  c.mla = s.kind == PKV_LAYER_MLA;
  c.write = s.cached();
  const LayerPlace at = layer_place(rp.layout, rp.groups, s, params_.block_size);
  c.k_offset = at.k_offset;
  c.v_offset = at.v_offset;
  c.block_stride = at.block_stride;
  c.v_in_k_pool = at.v_in_k_pool;
  c.dense_stride = !rp.layout.paged;
  c.softcap = s.softcap;
  const size_t q_heads = params_.num_q_heads / params_.tp_size;
  c.sinks = s.sinks ? &sinks_[(size_t(rank) * params_.num_layers + layer) * q_heads] : nullptr;
  return c;
}

}  // namespace pkv
