// Multi-head latent attention (MLA: DeepSeek V2/V3/R1, Kimi K2) over a paged latent cache, in
// the absorbed form (DESIGN.md §6, §12). The cache holds one latent of width = kv_lora_rank +
// rope values per token (KvLayer with v null, kv_heads 1, head_dim the width); every q head
// attends to it: scores q . latent, output the softmax-weighted sum of the latents' first
// kv_lora_rank values. A CTA reads each latent tile once for a block of q heads (rows), so the
// heads share every load: f16 / bf16 models on tensor cores (mma.sync m16n8k16, mla_mma.cuh; fp8
// caches too, their codes exact in f16 / bf16), f32 models on an fp32 tile loop (mla_fma.cuh).
// Decode rows split their keys (split-K) and a merge kernel combines the splits, so a single long
// sequence fills the GPU; prefill rows (prompts, chunks after a cached prefix) are causal.
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// How a step's MLA work is laid out; built on the host once per step (plan), used by every layer.
struct MlaPlan {
  int32_t split_tokens;    // decode: keys per split, a multiple of 32
  int32_t max_splits;      // ceil(max_context_len / split_tokens)
  int32_t row_groups;      // tensor cores: 16-row groups per CTA, 2 or 4 (32 or 64 q heads of a
                           // decode; packed (token, head) rows of a prefill)
  size_t workspace_bytes;  // device workspace launch_mla_attention needs (0: none)
};

// Shared memory the tensor-core kernel takes with row_groups and a latent of `width` values: a
// plan may pick row_groups 4 only where this fits the device
// (cudaDevAttrMaxSharedMemoryPerBlockOptin).
size_t mla_smem_bytes(int32_t row_groups, int32_t width);

// Chooses the rows per CTA (64 for more than 32 q heads when they fit max_smem, else 32) and a
// split so that the decodes fill about one wave of one CTA per SM (num_sms), never fewer than 256
// keys per split.
MlaPlan plan_mla(const BatchView &batch, int32_t q_heads, int32_t kv_lora_rank, int32_t width,
                 int32_t num_sms, size_t max_smem);
// The same with a given split (rounded up to 32) and row_groups (2 or 4): tests, tuning.
MlaPlan plan_mla_with(const BatchView &batch, int32_t q_heads, int32_t kv_lora_rank,
                      int32_t split_tokens, int32_t row_groups);

// out[t][h] = causal softmax(q[t][h] . latent * scale) latent[:kv_lora_rank] over the keys of
// t's sequence (0 .. t's position), for every row of the batch (decode and prefill); fp8 latents
// are read times layer.k_scale[0]. layer: the latent cache (v null, kv_heads 1, window 0, and
// since 0.5.0 no chunk, softcap or sinks: the engine refuses those on MLA; v_dim 0 or
// kv_lora_rank; since 0.7.0 a block_stride of pages, a multiple of 16 bytes: DESIGN.md §12),
// head_dim = kv_lora_rank + rope, both parts multiples of PKV_ATTENTION_HEAD_DIM_ALIGN, at most
// PKV_ATTENTION_MAX_KV_LORA_RANK / PKV_ATTENTION_MAX_ROPE_DIM). q: [num_tokens][q_heads][head_dim],
// out: [num_tokens][q_heads][kv_lora_rank], layer.dtype, 16-byte aligned; scale > 0. The new
// tokens' latents must already be in the cache (launch_write_kv with v null). plan: made for this
// batch; workspace: device, plan.workspace_bytes. Asynchronous on stream; returns the launch
// status (cudaErrorInvalidValue, before any launch, for arguments outside these rules).
cudaError_t launch_mla_attention(const KvLayer &layer, int32_t kv_lora_rank, const BatchView &batch,
                                 const void *q, void *out, int32_t q_heads, float scale,
                                 const MlaPlan &plan, void *workspace, cudaStream_t stream);

}  // namespace pkv::cuda
