// The arguments of the attention kernels (decode and prefill), and the one place that checks a
// launcher's inputs and fills them. Host code that .cu files share; no device code.
#pragma once

#include <cmath>

#include "device_common.cuh"

namespace pkv::cuda::dev {

// What the attention kernels read, by value. Pointers are device memory.
struct AttnArgs {
  const void *q;                  // [num_tokens][q_heads][head_dim]
  void *out;                      // [num_tokens][q_heads][head_dim]
  const void *k_cache, *v_cache;  // [num_blocks][block_size][kv_heads][head_dim]
  const int32_t *query_start, *context_lens, *block_indptr, *block_indices;
  int32_t q_heads, kv_heads, head_dim, block_size, group;
  float scale_log2;  // scale * log2(e)
  float *ws_acc;     // decode splits: [num_seqs][q_heads][max_splits][head_dim]
  float *ws_ml;      // decode splits: [num_seqs][q_heads][max_splits][2] = (max, sum)
  int32_t split_tokens, max_splits;
};

// The launchers' common rules (grid dimensions y and z hold kv heads and sequences, so at most
// 65535 of each; 16-byte aligned q, out and pool for the vector loads), then every field but the
// decode workspace. scale <= 0 means 1/sqrt(head_dim). head_dim is checked by dispatch_head_dim.
inline cudaError_t make_attn_args(const KvLayer &layer, const BatchView &batch, const void *q,
                                  void *out, int32_t q_heads, float scale, AttnArgs *a) {
  if (batch.num_seqs < 0 || batch.num_seqs > 65535 || layer.kv_heads < 1 ||
      layer.kv_heads > 65535 || q_heads < 1 || q_heads % layer.kv_heads != 0 ||
      layer.block_size < 1 || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !aligned16(layer.v))
    return cudaErrorInvalidValue;
  *a = AttnArgs{};
  a->q = q, a->out = out, a->k_cache = layer.k, a->v_cache = layer.v;
  a->query_start = batch.query_start, a->context_lens = batch.context_lens;
  a->block_indptr = batch.block_indptr, a->block_indices = batch.block_indices;
  a->q_heads = q_heads, a->kv_heads = layer.kv_heads, a->head_dim = layer.head_dim;
  a->block_size = layer.block_size, a->group = q_heads / layer.kv_heads;
  const float s = scale > 0.f ? scale : 1.f / std::sqrt(float(layer.head_dim));
  a->scale_log2 = s * 1.4426950408889634f;  // log2(e): the kernels' softmax is in base 2
  return cudaSuccess;
}

}  // namespace pkv::cuda::dev
