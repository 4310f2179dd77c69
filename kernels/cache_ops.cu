// write_kv and copy_blocks: plain copies, moved in 16-byte chunks when everything is aligned
// (a row of head_dim elements is always a multiple of 16 bytes) and in bytes otherwise.
#include <cstdint>

#include "cache_ops.cuh"
#include "device_common.cuh"

namespace pkv::cuda {
namespace {

constexpr int kWriteThreads = 128;
constexpr int kCopyThreads = 256;

// grid.x = token. k, v: [tokens][row_chunks]; caches: [slots][row_chunks].
template <class Chunk>
__global__ void __launch_bounds__(kWriteThreads)
    write_kv_kernel(const Chunk *__restrict__ k, const Chunk *__restrict__ v, Chunk *k_cache,
                    Chunk *v_cache, const int64_t *__restrict__ slot_mapping, int64_t row_chunks) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  const int64_t src = token * row_chunks, dst = slot * row_chunks;
  for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
    k_cache[dst + c] = k[src + c];
    v_cache[dst + c] = v[src + c];
  }
}

// grid = (pair, layer, 0 for K / 1 for V). Pools: [layers][layer_chunks] of [blocks][block_chunks].
template <class Chunk>
__global__ void __launch_bounds__(kCopyThreads)
    copy_blocks_kernel(Chunk *k_pool, Chunk *v_pool, const int32_t *__restrict__ block_pairs,
                       int64_t layer_chunks, int64_t block_chunks) {
  Chunk *base = (blockIdx.z == 0 ? k_pool : v_pool) + int64_t(blockIdx.y) * layer_chunks;
  const int64_t src = int64_t(block_pairs[2 * int64_t(blockIdx.x)]) * block_chunks;
  const int64_t dst = int64_t(block_pairs[2 * int64_t(blockIdx.x) + 1]) * block_chunks;
  for (int64_t c = threadIdx.x; c < block_chunks; c += blockDim.x) base[dst + c] = base[src + c];
}

template <class Chunk>
cudaError_t write_kv_as(const KvLayer &layer, const void *k, const void *v, const int64_t *slots,
                        int32_t num_tokens, int64_t row_bytes, cudaStream_t stream) {
  write_kv_kernel<Chunk><<<num_tokens, kWriteThreads, 0, stream>>>(
      static_cast<const Chunk *>(k), static_cast<const Chunk *>(v), static_cast<Chunk *>(layer.k),
      static_cast<Chunk *>(layer.v), slots, row_bytes / int64_t(sizeof(Chunk)));
  return cudaGetLastError();
}

template <class Chunk>
cudaError_t copy_blocks_as(const KvPool &pool, const int32_t *pairs, int32_t num_pairs,
                           cudaStream_t stream) {
  const dim3 grid(uint32_t(num_pairs), uint32_t(pool.num_layers), 2);
  copy_blocks_kernel<Chunk><<<grid, kCopyThreads, 0, stream>>>(
      static_cast<Chunk *>(pool.k), static_cast<Chunk *>(pool.v), pairs,
      pool.layer_stride_bytes / int64_t(sizeof(Chunk)), pool.block_bytes / int64_t(sizeof(Chunk)));
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_write_kv(const KvLayer &layer, const void *k, const void *v,
                            const int64_t *slot_mapping, int32_t num_tokens, cudaStream_t stream) {
  if (num_tokens < 0 || layer.block_size < 1 || layer.kv_heads < 1 || layer.head_dim < 1)
    return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const int64_t row_bytes =
      int64_t(layer.kv_heads) * layer.head_dim * int64_t(dtype_bytes(layer.dtype));
  if (aligned16(k) && aligned16(v) && aligned16(layer.k) && aligned16(layer.v) &&
      row_bytes % 16 == 0)
    return write_kv_as<uint4>(layer, k, v, slot_mapping, num_tokens, row_bytes, stream);
  return write_kv_as<uint8_t>(layer, k, v, slot_mapping, num_tokens, row_bytes, stream);
}

cudaError_t launch_copy_blocks(const KvPool &pool, const int32_t *block_pairs, int32_t num_pairs,
                               cudaStream_t stream) {
  if (num_pairs < 0 || pool.num_layers < 0 || pool.num_layers > PKV_CUDA_MAX_GRID || pool.block_bytes < 0)
    return cudaErrorInvalidValue;
  if (num_pairs == 0 || pool.num_layers == 0 || pool.block_bytes == 0) return cudaSuccess;
  if (aligned16(pool.k) && aligned16(pool.v) && pool.block_bytes % 16 == 0 &&
      pool.layer_stride_bytes % 16 == 0)
    return copy_blocks_as<uint4>(pool, block_pairs, num_pairs, stream);
  return copy_blocks_as<uint8_t>(pool, block_pairs, num_pairs, stream);
}

}  // namespace pkv::cuda
