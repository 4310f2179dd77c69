// The arguments of the attention kernels (decode and prefill), and the one place that checks a
// launcher's inputs and fills them. Host code that .cu files share; no device code.
#pragma once

#include <climits>

#include "device_common.cuh"

namespace pkv::cuda::dev {

// What the attention kernels read, by value. Pointers are device memory.
struct AttnArgs {
  const void *q;                   // [num_tokens][q_heads][head_dim]
  void *out;                       // [num_tokens][q_heads][head_dim]
  const void *k_cache, *v_cache;   // blocks of [block_size][kv_heads][head_dim], kv dtype; v_cache
                                   // is k_cache for a layer whose V is its K
  int64_t block_stride;            // elements (kv dtype) from one block to the next
  const float *k_scale, *v_scale;  // fp8 pools: [kv_heads]; else null
  const int32_t *query_start, *context_lens, *block_indptr, *block_indices;
  int32_t q_heads, kv_heads, head_dim, block_size, group;
  int32_t window;      // keys a row sees, itself included: KvLayer::window, INT32_MAX for 0 (all)
  int32_t chunk;       // KvLayer::chunk: 0 = none
  float scale_log2;    // scale * log2(e)
  float cap_log2;      // KvLayer::softcap * log2(e) (the scores are in base 2), 0 = none
  const float *sinks;  // [q_heads] natural-log logits, or null (KvLayer::sinks)
  float *ws_acc;       // decode splits: [num_seqs][q_heads][max_splits][head_dim]
  float *ws_ml;        // decode splits: [num_seqs][q_heads][max_splits][2] = (max, sum)
  int32_t split_tokens, max_splits;
};

// The keys a layer's token sees at most: its window or chunk, else all (0).
inline int32_t attn_span(const KvLayer &layer) {
  return layer.chunk > 0 ? layer.chunk : layer.window;
}

// The launchers' common rules (grid dimensions y and z hold kv heads and sequences, so at most
// PKV_CUDA_MAX_GRID of each; 16-byte aligned q, out, pool and block stride for the vector loads;
// an fp8 pool has its scales (a K = V layer: k_scale for both); window, chunk >= 0 and not both;
// softcap finite and >= 0; v_dim 0 or head_dim), then every field but the decode workspace.
// scale > 0 (the engine resolves softmax_scale's default). head_dim and the dtype pairing are
// checked by the dispatch.
inline cudaError_t make_attn_args(const KvLayer &layer, const BatchView &batch, const void *q,
                                  void *out, int32_t q_heads, float scale, AttnArgs *a) {
  const int64_t dense = int64_t(layer.block_size) * layer.kv_heads * layer.head_dim;
  const int64_t elem = int64_t(dtype_bytes(layer.kv_dtype));
  if (batch.num_seqs < 0 || batch.num_seqs > PKV_CUDA_MAX_GRID || layer.kv_heads < 1 ||
      layer.kv_heads > PKV_CUDA_MAX_GRID || q_heads < 1 || q_heads % layer.kv_heads != 0 ||
      layer.block_size < 1 || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !aligned16(layer.v) || !(scale > 0.f) || layer.window < 0 || layer.chunk < 0 ||
      (layer.window > 0 && layer.chunk > 0) || !(layer.softcap >= 0.f) ||
      !(layer.softcap < INFINITY) || (layer.v_dim != 0 && layer.v_dim != layer.head_dim) ||
      (layer.block_stride != 0 &&
       (layer.block_stride < dense * elem || layer.block_stride % 16 != 0)) ||
      (is_fp8(layer.kv_dtype) && (!layer.k_scale || (layer.v && !layer.v_scale))))
    return cudaErrorInvalidValue;
  *a = AttnArgs{};
  a->q = q, a->out = out, a->k_cache = layer.k, a->v_cache = layer.v ? layer.v : layer.k;
  a->block_stride = layer.block_stride ? layer.block_stride / elem : dense;
  a->k_scale = layer.k_scale, a->v_scale = layer.v ? layer.v_scale : layer.k_scale;
  a->window = layer.window > 0 ? layer.window : INT32_MAX;
  a->chunk = layer.chunk;
  a->cap_log2 = layer.softcap * 1.4426950408889634f;
  a->sinks = layer.sinks;
  a->query_start = batch.query_start, a->context_lens = batch.context_lens;
  a->block_indptr = batch.block_indptr, a->block_indices = batch.block_indices;
  a->q_heads = q_heads, a->kv_heads = layer.kv_heads, a->head_dim = layer.head_dim;
  a->block_size = layer.block_size, a->group = q_heads / layer.kv_heads;
  a->scale_log2 = scale * 1.4426950408889634f;  // log2(e): the kernels' softmax is in base 2
  return cudaSuccess;
}

}  // namespace pkv::cuda::dev
