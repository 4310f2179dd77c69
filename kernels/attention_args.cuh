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
  const void *k_cache, *v_cache;   // [num_blocks][block_size][kv_heads][head_dim], kv dtype
  const float *k_scale, *v_scale;  // fp8 pools: [kv_heads]; else null
  const int32_t *query_start, *context_lens, *block_indptr, *block_indices;
  int32_t q_heads, kv_heads, head_dim, block_size, group;
  int32_t window;    // keys a row sees, itself included: KvLayer::window, INT32_MAX for 0 (all)
  float scale_log2;  // scale * log2(e)
  float *ws_acc;     // decode splits: [num_seqs][q_heads][max_splits][head_dim]
  float *ws_ml;      // decode splits: [num_seqs][q_heads][max_splits][2] = (max, sum)
  int32_t split_tokens, max_splits;
};

// The launchers' common rules (grid dimensions y and z hold kv heads and sequences, so at most
// PKV_CUDA_MAX_GRID of each; 16-byte aligned q, out and pool for the vector loads; an fp8 pool
// has its scales; window >= 0), then every field but the decode workspace. scale > 0 (the engine
// resolves softmax_scale's default). head_dim and the dtype pairing are checked by the dispatch.
inline cudaError_t make_attn_args(const KvLayer &layer, const BatchView &batch, const void *q,
                                  void *out, int32_t q_heads, float scale, AttnArgs *a) {
  if (batch.num_seqs < 0 || batch.num_seqs > PKV_CUDA_MAX_GRID || layer.kv_heads < 1 ||
      layer.kv_heads > PKV_CUDA_MAX_GRID || q_heads < 1 || q_heads % layer.kv_heads != 0 ||
      layer.block_size < 1 || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !aligned16(layer.v) || !(scale > 0.f) || layer.window < 0 ||
      (is_fp8(layer.kv_dtype) && (!layer.k_scale || !layer.v_scale)))
    return cudaErrorInvalidValue;
  *a = AttnArgs{};
  a->q = q, a->out = out, a->k_cache = layer.k, a->v_cache = layer.v;
  a->k_scale = layer.k_scale, a->v_scale = layer.v_scale;
  a->window = layer.window > 0 ? layer.window : INT32_MAX;
  a->query_start = batch.query_start, a->context_lens = batch.context_lens;
  a->block_indptr = batch.block_indptr, a->block_indices = batch.block_indices;
  a->q_heads = q_heads, a->kv_heads = layer.kv_heads, a->head_dim = layer.head_dim;
  a->block_size = layer.block_size, a->group = q_heads / layer.kv_heads;
  a->scale_log2 = scale * 1.4426950408889634f;  // log2(e): the kernels' softmax is in base 2
  return cudaSuccess;
}

}  // namespace pkv::cuda::dev
