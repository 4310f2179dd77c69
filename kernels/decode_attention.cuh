// Paged decode attention (sequences with one new token) with split-K: one CTA per (sequence,
// kv head, group chunk of up to 8 q heads, split) reads its slice of K/V once for all those q
// heads (GQA), keeps an online softmax, and leaves a partial (max, sum, acc) per split; a merge
// kernel combines the splits. A sequence whose context fits one split is written directly.
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// How a step's decode work is split; built on the host per step and window (plan), used per
// layer of that window (run).
struct DecodePlan {
  int32_t split_tokens;    // keys per split, a multiple of 64
  int32_t max_splits;      // ceil(keys / split_tokens), keys = min(max_context_len, window or all)
  size_t workspace_bytes;  // device workspace launch_decode_attention needs (0: none)
  // The shape it was made for: a step whose layers differ in shape (DESIGN.md §12) makes a plan
  // per shape, and launch_decode_attention refuses a plan of another (its workspace is sized
  // for this one).
  int32_t q_heads, head_dim;
};

// Chooses split_tokens so that about two CTAs per SM are busy (num_sms: the device's SM count),
// never fewer than 256 keys per split. window: the layers' span, KvLayer::window or for chunked
// layers KvLayer::chunk (0 = all): a sequence reads at most that many keys, split from the
// window's (chunk's) first on.
DecodePlan plan_decode(const BatchView &batch, int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                       int32_t window, int32_t num_sms);
// The most workspace plan_decode asks for with these arguments, under any window: a buffer of
// this size serves every window's plan of the step.
size_t decode_workspace_bound(const BatchView &batch, int32_t q_heads, int32_t kv_heads,
                              int32_t head_dim, int32_t num_sms);
// The same plan with a given split size (tests, tuning); split_tokens is rounded up to 64.
DecodePlan plan_decode_with_split(const BatchView &batch, int32_t q_heads, int32_t head_dim,
                                  int32_t window, int32_t split_tokens);

// out[t] = softmax(q[t] K^T * scale) V over the keys of t's window (layer.window; 0 = all) or
// chunk (layer.chunk) for every sequence whose query_len is 1 (other rows of out are left
// untouched); fp8 K/V are read times layer's scales; layer.softcap caps the scaled scores and
// layer.sinks join the denominators (once per row, in the merge when split). q, out:
// [num_tokens][q_heads][head_dim] in layer.dtype, 16-byte aligned; q_heads a multiple of
// layer.kv_heads; scale > 0 (pkv resolves the default). plan: one made for these q_heads and
// head_dim, and layer.window (or chunk) or a wider one; workspace: device, plan.workspace_bytes. Asynchronous on stream;
// returns the launch status.
cudaError_t launch_decode_attention(const KvLayer &layer, const BatchView &batch, const void *q,
                                    void *out, int32_t q_heads, float scale, const DecodePlan &plan,
                                    void *workspace, cudaStream_t stream);

}  // namespace pkv::cuda
