// Sparse MLA (DeepSeek V3.2, GLM-5; DESIGN.md §14): MLA's absorbed form over given keys of each
// new token only (pkv_sparse_mla_attention), FlashMLA's sparse decode shape: a CTA per (token,
// block of q heads) gathers each selected latent once for all its heads.
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// How a step's sparse MLA splits each row of indices: split_entries (a multiple of 16) a CTA,
// num_splits of them; more than one needs workspace_bytes of device workspace for the merge.
struct SparseMlaPlan {
  int32_t split_entries, num_splits;
  size_t workspace_bytes;
};

// Splits that fill about one wave of one CTA per SM (num_sms) when the tokens' blocks of 16 q
// heads are fewer; at least 128 entries a split.
SparseMlaPlan plan_sparse_mla(int32_t num_tokens, int32_t q_heads, int32_t kv_lora_rank,
                              int32_t topk, int32_t num_sms);
// The same with a given split (rounded up to 16): tests, tuning.
SparseMlaPlan plan_sparse_mla_with(int32_t num_tokens, int32_t q_heads, int32_t kv_lora_rank,
                                   int32_t topk, int32_t split_entries);

// out[t][h] = softmax over the valid j of (q[t][h] . latent(indices[t][j]) * scale), applied to
// the latents' first kv_lora_rank values, in fp32; an entry outside 0 .. t's position (-1 the
// padding) is skipped, one given twice counts twice, a token with none left gets out 0. layer:
// the latent cache as launch_mla_attention takes it (block_stride 0 or pages); fp8 latents are
// read times layer.k_scale[0]. q: [num_tokens][q_heads][head_dim], out: [num_tokens][q_heads]
// [kv_lora_rank], layer.dtype, 16-byte aligned; indices [num_tokens][topk] (device, int32
// positions); scale > 0. The new tokens' latents must already be in the cache. plan: made for
// this batch's tokens, q_heads, rank and topk; workspace: device, plan.workspace_bytes.
// Asynchronous on stream; cudaErrorInvalidValue, before any launch, for arguments outside these
// rules.
cudaError_t launch_sparse_mla(const KvLayer &layer, int32_t kv_lora_rank, const BatchView &batch,
                              const void *q, const int32_t *indices, int32_t topk, void *out,
                              int32_t q_heads, float scale, const SparseMlaPlan &plan,
                              void *workspace, cudaStream_t stream);

}  // namespace pkv::cuda
