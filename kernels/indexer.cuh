// Sparse attention's lightning indexer (DeepSeek V3.2, GLM-5; DESIGN.md §14) over the paged
// pool: the new tokens' indexer keys quantized into their pages, and each new token's top keys of
// its context by the indexer score. pkv.h (pkv_indexer_write, pkv_indexer_topk) is the contract:
// the quantization, the score, the order of the output and the tie rule.
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// One layer's indexer keys in the pages: block b's keys at pages + b * block_stride + key_offset
// ([block_size][dim] of index_dtype), fp8's fp32 scales at + scale_offset ([block_size]).
struct IndexerLayer {
  void *pages;           // the pool: device memory, 16-byte aligned
  int64_t key_offset;    // bytes; a multiple of 16
  int64_t scale_offset;  // bytes; a multiple of 4 (fp8 only)
  int64_t block_stride;  // bytes from one block to the next; a multiple of 16
  int32_t block_size;    // tokens per block, >= 1
  int32_t dim;           // index_head_dim: a multiple of PKV_ATTENTION_HEAD_DIM_ALIGN, at most
                         // PKV_INDEXER_MAX_HEAD_DIM
  DType dtype;           // the model's: the keys written, the queries (f32, f16, bf16)
  DType index_dtype;     // fp8_e4m3 (codes and a per-token scale) or bf16
};

// k [num_tokens][dim] (layer.dtype, 16-byte aligned) into the slots slots[t] (< 0: skipped).
// FP8_E4M3: scale = max|x| / 448 (1 for a key of zeros; ue8m0: rounded up to a power of two),
// codes saturate(round_to_nearest_even(x / scale)); BF16: each value rounded to nearest even.
// Asynchronous on stream; cudaErrorInvalidValue, before any launch, for arguments outside the
// rules of IndexerLayer.
cudaError_t launch_indexer_write(const IndexerLayer &layer, const void *k, const int64_t *slots,
                                 int32_t num_tokens, bool ue8m0, cudaStream_t stream);

// The top-k's layout: scores of `wave_tokens` tokens at a time, each a row of max_keys floats.
struct IndexerTopkPlan {
  int32_t wave_tokens;     // tokens scored and selected per launch pair, >= 1
  int32_t max_keys;        // the longest context of the batch (>= 1)
  size_t workspace_bytes;  // wave_tokens * max_keys * 4
};

// A wave as large as max_workspace allows (at least one token).
IndexerTopkPlan plan_indexer_topk(const BatchView &batch, size_t max_workspace);

// For each new token t of the batch (position p in its sequence): score(t, s) = sum over h of
// weights[t][h] * relu(q[t][h] . key(s)) for every key s in 0 .. p (key(s): the codes times the
// scale, or the bf16 values), in fp32; out[t][0 .. topk) = the topk keys of highest score in
// ascending position (slots: block_indices[...] * block_size + offset instead), then -1 where
// the context is shorter. Of equal scores the lower position is kept; NaN ranks below every
// number. q: [num_tokens][heads][dim] of layer.dtype, 16-byte aligned; weights [num_tokens]
// [heads] fp32; heads 1 .. 2^16; topk >= 1. The new tokens' keys must already be written.
// Asynchronous on stream; cudaErrorInvalidValue, before any launch, for arguments outside
// these rules.
cudaError_t launch_indexer_topk(const IndexerLayer &layer, const BatchView &batch, const void *q,
                                const float *weights, int32_t heads, int32_t topk, bool slots,
                                int32_t *out, const IndexerTopkPlan &plan, void *workspace,
                                cudaStream_t stream);

// Shared memory a score CTA of launch_indexer_topk takes at index_head_dim `dim` on a device
// whose opt-in limit a block is max_smem (cudaDevAttrMaxSharedMemoryPerBlockOptin): its key tile
// is staged whole where that fits, else a part of its dims at a time. 0 when nothing fits (the
// launch then fails with cudaErrorInvalidConfiguration).
size_t indexer_score_smem_bytes(int32_t dim, size_t max_smem);

}  // namespace pkv::cuda
