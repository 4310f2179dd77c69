// write_kv, copy_blocks and copy_tier_blocks: plain copies, moved in 16-byte chunks when
// everything is aligned (a row of head_dim elements is always a multiple of 16 bytes) and in bytes
// otherwise; write_kv into an fp8 pool quantizes instead. One block-copy kernel serves both
// copies: within the pool, and between two pools. A pool without V (the MLA latent cache: v null)
// has its K alone written and copied.
#include <cstdint>

#include "cache_ops.cuh"
#include "device_common.cuh"

namespace pkv::cuda {
namespace {

constexpr int kWriteThreads = 128;
constexpr int kCopyThreads = 256;

// Where slot's row starts in a cache whose blocks of block_size rows of row units each are
// block_stride units apart (units: elements, chunks or bytes).
__device__ __forceinline__ int64_t slot_offset(int64_t slot, int32_t block_size,
                                               int64_t block_stride, int64_t row) {
  return slot / block_size * block_stride + slot % block_size * row;
}

// grid.x = token. k, v: [tokens][row_chunks]; caches: blocks of [block_size][row_chunks],
// block_stride chunks apart; v and v_cache null: K only.
template <class Chunk>
__global__ void __launch_bounds__(kWriteThreads)
    write_kv_kernel(const Chunk *__restrict__ k, const Chunk *__restrict__ v, Chunk *k_cache,
                    Chunk *v_cache, const int64_t *__restrict__ slot_mapping, int64_t row_chunks,
                    int32_t block_size, int64_t block_stride) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t src = token * row_chunks;
  const int64_t dst = slot_offset(slot, block_size, block_stride, row_chunks);
  for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
    k_cache[dst + c] = k[src + c];
    if (v_cache) v_cache[dst + c] = v[src + c];
  }
}

// grid = (token, kv head). k, v: [tokens][kv_heads][head_dim] of T; caches: blocks of
// [block_size][kv_heads][head_dim] fp8 codes C, block_stride bytes apart. Each element is divided
// by its head's scale in IEEE fp32 (__fdiv_rn, whatever the division flags) and encoded
// (fp8.cuh). v, v_cache and v_scale null: K only.
template <class T, class C>
__global__ void __launch_bounds__(kWriteThreads)
    write_kv_fp8_kernel(const T *__restrict__ k, const T *__restrict__ v, uint8_t *k_cache,
                        uint8_t *v_cache, const int64_t *__restrict__ slot_mapping,
                        const float *__restrict__ k_scale, const float *__restrict__ v_scale,
                        int32_t head_dim, int32_t block_size, int64_t block_stride) {
  const int64_t token = blockIdx.x, head = blockIdx.y;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t row = int64_t(gridDim.y) * head_dim;
  const int64_t src = token * row + head * head_dim;
  const int64_t dst = slot_offset(slot, block_size, block_stride, row) + head * head_dim;
  const float ks = k_scale[head], vs = v_cache ? v_scale[head] : 1.f;
  for (int32_t i = threadIdx.x; i < head_dim; i += blockDim.x) {
    k_cache[dst + i] = dev::fp8_encode<C>(__fdiv_rn(dev::to_float(k[src + i]), ks));
    if (v_cache) v_cache[dst + i] = dev::fp8_encode<C>(__fdiv_rn(dev::to_float(v[src + i]), vs));
  }
}

// grid = (pair, layer, 0 for K / 1 for V; only 0 for pools without V). Each pool: [layers]
// [layer_chunks] of [blocks][block_chunks], with a layer stride of its own; the two may be one
// pool (copy_blocks).
// The pairs of a launch are independent (cache_ops.cuh), so the CTAs run in any order.
template <class Chunk>
__global__ void __launch_bounds__(kCopyThreads)
    copy_blocks_kernel(const Chunk *src_k, const Chunk *src_v, Chunk *dst_k, Chunk *dst_v,
                       const int32_t *__restrict__ block_pairs, int64_t src_layer_chunks,
                       int64_t dst_layer_chunks, int64_t block_chunks) {
  const int64_t pair = blockIdx.x, layer = blockIdx.y;
  const Chunk *from = (blockIdx.z == 0 ? src_k : src_v) + layer * src_layer_chunks +
                      int64_t(block_pairs[2 * pair]) * block_chunks;
  Chunk *to = (blockIdx.z == 0 ? dst_k : dst_v) + layer * dst_layer_chunks +
              int64_t(block_pairs[2 * pair + 1]) * block_chunks;
  for (int64_t c = threadIdx.x; c < block_chunks; c += blockDim.x) to[c] = from[c];
}

// The bytes from one block of the layer to the next: its block_stride, or dense.
int64_t stride_bytes(const KvLayer &layer, int64_t row_bytes) {
  return layer.block_stride ? layer.block_stride : row_bytes * layer.block_size;
}

template <class Chunk>
cudaError_t write_kv_as(const KvLayer &layer, const void *k, const void *v, const int64_t *slots,
                        int32_t num_tokens, int64_t row_bytes, cudaStream_t stream) {
  const int64_t chunk = sizeof(Chunk);
  write_kv_kernel<Chunk><<<num_tokens, kWriteThreads, 0, stream>>>(
      static_cast<const Chunk *>(k), static_cast<const Chunk *>(v), static_cast<Chunk *>(layer.k),
      static_cast<Chunk *>(layer.v), slots, row_bytes / chunk, layer.block_size,
      stride_bytes(layer, row_bytes) / chunk);
  return cudaGetLastError();
}

template <class T, class C>
cudaError_t write_kv_fp8_as(const KvLayer &layer, const void *k, const void *v,
                            const int64_t *slots, int32_t num_tokens, cudaStream_t stream) {
  const dim3 grid(uint32_t(num_tokens), uint32_t(layer.kv_heads));
  write_kv_fp8_kernel<T, C><<<grid, kWriteThreads, 0, stream>>>(
      static_cast<const T *>(k), static_cast<const T *>(v), static_cast<uint8_t *>(layer.k),
      static_cast<uint8_t *>(layer.v), slots, layer.k_scale, layer.v_scale, layer.head_dim,
      layer.block_size, stride_bytes(layer, int64_t(layer.kv_heads) * layer.head_dim));
  return cudaGetLastError();
}

template <class Chunk>
cudaError_t copy_blocks_as(const KvPool &from, const KvPool &to, const int32_t *pairs,
                           int32_t num_pairs, cudaStream_t stream) {
  const dim3 grid(uint32_t(num_pairs), uint32_t(from.num_layers), from.v ? 2 : 1);
  const int64_t chunk = sizeof(Chunk);
  copy_blocks_kernel<Chunk><<<grid, kCopyThreads, 0, stream>>>(
      static_cast<const Chunk *>(from.k), static_cast<const Chunk *>(from.v),
      static_cast<Chunk *>(to.k), static_cast<Chunk *>(to.v), pairs,
      from.layer_stride_bytes / chunk, to.layer_stride_bytes / chunk, from.block_bytes / chunk);
  return cudaGetLastError();
}

bool pool_aligned16(const KvPool &p) {
  return aligned16(p.k) && aligned16(p.v) && p.layer_stride_bytes % 16 == 0 &&
         p.block_bytes % 16 == 0;
}

}  // namespace

cudaError_t launch_write_kv(const KvLayer &layer, const void *k, const void *v,
                            const int64_t *slot_mapping, int32_t num_tokens, cudaStream_t stream) {
  const int64_t row_bytes =
      int64_t(layer.kv_heads) * layer.head_dim * int64_t(dtype_bytes(layer.kv_dtype));
  if (num_tokens < 0 || layer.block_size < 1 || layer.kv_heads < 1 ||
      layer.kv_heads > PKV_CUDA_MAX_GRID || layer.head_dim < 1 || !layer.k || !k ||
      !layer.v != !v || (layer.v_dim != 0 && layer.v_dim != layer.head_dim) ||
      (layer.block_stride != 0 &&
       (layer.block_stride < row_bytes * layer.block_size || layer.block_stride % 16 != 0)))
    return cudaErrorInvalidValue;
  if (is_fp8(layer.kv_dtype)) {
    if (!layer.k_scale || (layer.v && !layer.v_scale)) return cudaErrorInvalidValue;
    if (num_tokens == 0) return cudaSuccess;
    return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
      if constexpr (kIsFp8<decltype(c)>)
        return write_kv_fp8_as<decltype(t), decltype(c)>(layer, k, v, slot_mapping, num_tokens,
                                                         stream);
      else
        return cudaErrorInvalidValue;  // not reached: kv_dtype is fp8
    });
  }
  if (layer.kv_dtype != layer.dtype || dtype_bytes(layer.dtype) == 1) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  if (aligned16(k) && aligned16(v) && aligned16(layer.k) && aligned16(layer.v) &&
      row_bytes % 16 == 0)
    return write_kv_as<uint4>(layer, k, v, slot_mapping, num_tokens, row_bytes, stream);
  return write_kv_as<uint8_t>(layer, k, v, slot_mapping, num_tokens, row_bytes, stream);
}

cudaError_t launch_copy_tier_blocks(const KvPool &from, const KvPool &to,
                                    const int32_t *block_pairs, int32_t num_pairs,
                                    cudaStream_t stream) {
  if (num_pairs < 0 || from.num_layers < 0 || from.num_layers > PKV_CUDA_MAX_GRID ||
      from.block_bytes < 0 || to.num_layers != from.num_layers ||
      to.block_bytes != from.block_bytes || !from.v != !to.v)
    return cudaErrorInvalidValue;
  if (num_pairs == 0 || from.num_layers == 0 || from.block_bytes == 0) return cudaSuccess;
  if (pool_aligned16(from) && pool_aligned16(to))
    return copy_blocks_as<uint4>(from, to, block_pairs, num_pairs, stream);
  return copy_blocks_as<uint8_t>(from, to, block_pairs, num_pairs, stream);
}

cudaError_t launch_copy_blocks(const KvPool &pool, const int32_t *block_pairs, int32_t num_pairs,
                               cudaStream_t stream) {
  return launch_copy_tier_blocks(pool, pool, block_pairs, num_pairs, stream);
}

}  // namespace pkv::cuda
