// Paged prefill attention with a causal mask: for sequences with more than one new token (a
// prompt, a chunk of a longer prompt, new tokens after a cached prefix). A CTA takes a tile of
// packed (new token, q head of the group) rows of one kv head and walks the sequence's blocks in
// tiles of keys with an online softmax, so GQA reads each K/V tile once per row tile. f16 / bf16
// models with head_dim 64, 80, 96, 128 or 256 run on tensor cores (mma.sync m16n8k16, fp32
// accumulation; attention_mma.cuh); f32 models and the other head_dims on the fp32 tile loop.
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// out[t] = causal softmax(q[t] K^T * scale) V over the keys of t's window (layer.window; 0 =
// all) or chunk (layer.chunk) for every sequence whose query_len is at least 2 (rows of
// query_len-1 sequences are left to launch_decode_attention); fp8 K/V are read times layer's
// scales; layer.softcap caps the scaled scores and layer.sinks join each row's denominator. q, out:
// [num_tokens][q_heads][head_dim] in layer.dtype, 16-byte aligned; q_heads a multiple of
// layer.kv_heads; scale > 0 (pkv resolves the default). The new tokens' K/V must already be in
// the cache (launch_write_kv). Asynchronous on stream; returns the launch status.
cudaError_t launch_prefill_attention(const KvLayer &layer, const BatchView &batch, const void *q,
                                     void *out, int32_t q_heads, float scale, cudaStream_t stream);

}  // namespace pkv::cuda
