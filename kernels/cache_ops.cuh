// KV cache maintenance on the device: writing new K/V rows into their slots (vLLM's
// reshape_and_cache) and copying whole blocks, all layers at once: within the pool (copy-on-write)
// and between the pool and the pinned host tier (swap and offload; DESIGN.md §11).
#pragma once

#include "kv_types.cuh"

namespace pkv::cuda {

// Writes k and v rows, each [num_tokens][kv_heads][head_dim] in layer.dtype, into the slots
// slot_mapping[num_tokens] (device, int64; -1 = skip this row) of one layer. Asynchronous on
// stream; returns the launch status. A pool of the model's dtype gets the rows as bytes; an fp8
// pool (layer.kv_dtype) gets each element x of head h as the code of x / scale[h] (fp32
// division, nearest with ties to even, saturating to the largest finite, NaN -> 0x7F). A pool
// without V (layer.v null: the MLA latent cache, whose rows are k's) takes v null and writes K
// alone; its fp8 layer.v_scale is not read; so does a layer whose V is its K. Slot s = b *
// block_size + o is row o of block b, blocks layer.block_stride bytes apart (0: dense). A
// block_stride below the dense bytes or not a multiple of 16, or a v_dim other than head_dim,
// is refused.
cudaError_t launch_write_kv(const KvLayer &layer, const void *k, const void *v,
                            const int64_t *slot_mapping, int32_t num_tokens, cudaStream_t stream);

// For every pair i and every layer, copies K and V of block block_pairs[2i] onto block
// block_pairs[2i + 1] (device, int32 [num_pairs][2]). No block may be both a source and a
// destination in one call. A pool without V (pool.v null: MLA) copies K alone. Asynchronous on
// stream; returns the launch status.
cudaError_t launch_copy_blocks(const KvPool &pool, const int32_t *block_pairs, int32_t num_pairs,
                               cudaStream_t stream);

// For every pair i and every layer, copies K and V of block block_pairs[2i] of `from` onto block
// block_pairs[2i + 1] of `to` (device, int32 [num_pairs][2]): pool -> host tier (a scatter into
// host memory, swap-out and offload) or host tier -> pool (a gather, swap-in and load), in one
// launch. The two pools have their own block counts (layer strides) but the same num_layers and
// block_bytes, and both have V or neither (else cudaErrorInvalidValue). Host memory must be pinned and mapped
// (cudaHostAlloc) and named by its device pointer (cudaHostGetDevicePointer); the kernel reads or
// writes it over the bus. The pairs must be independent: no block of `to` written twice, and
// when `from` and `to` are one pool, no block both a source and a destination. Asynchronous on
// stream; returns the launch status.
cudaError_t launch_copy_tier_blocks(const KvPool &from, const KvPool &to,
                                    const int32_t *block_pairs, int32_t num_pairs,
                                    cudaStream_t stream);

}  // namespace pkv::cuda
