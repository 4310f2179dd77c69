// Sparse MLA over the paged latent cache (see sparse_mla.cuh), in fp32 on the CUDA cores: a CTA
// of 256 threads per (token, 16 q heads) walks the token's index row 16 entries at a time,
// gathers those latents once into shared memory (as floats, fp8 codes times their scale), scores
// them for its 16 heads (a thread a (head, key) pair), and keeps an online softmax per head with
// the output row spread over the head's 16 threads (32 values each at the largest rank).
#include <cmath>

#include "mla_common.cuh"
#include "sparse_common.cuh"
#include "sparse_mla.cuh"

namespace pkv::cuda {
namespace {

using dev::imin;

constexpr int kThreads = 256, kHeads = 16, kKeys = 16;
constexpr int kLanes = kThreads / kHeads;  // threads per head in the output update
constexpr int kMaxAcc = PKV_ATTENTION_MAX_KV_LORA_RANK / kLanes;
static_assert(kHeads * kKeys == kThreads, "one score per thread");

struct SparseArgs {
  const void *q;
  void *out;
  const void *cache;     // the latents: block b at b * block_elems, [block_size][width]
  const float *k_scale;  // fp8: [1]; else null
  BatchView batch;
  const int32_t *indices;  // [num_tokens][topk]
  int32_t topk, q_heads, width, rank, block_size;
  int64_t block_elems;
  float scale_log2;  // scale * log2(e): the softmax is in base 2
};

// Shared memory: q of the CTA's heads and the tile's latents, rows of width + 1 floats (the odd
// stride spreads a warp's 16 keys over 16 banks), the tile's scores and positions.
size_t smem_bytes(int32_t width) {
  return sizeof(float) * (size_t(kHeads + kKeys) * (width + 1) + kHeads * kKeys) +
         sizeof(int32_t) * kKeys;
}

// The tile's latents (pos[j] < 0: zeros) into lat.
template <class C>
__device__ void gather_latents(const SparseArgs &a, const int32_t *blocks, const int32_t *pos,
                               float *lat, int stride) {
  const int chunks = a.width / 8;
  const float ks = kIsFp8<C> ? a.k_scale[0] : 1.f;
  const C *cache = static_cast<const C *>(a.cache);
  for (int c = threadIdx.x; c < kKeys * chunks; c += kThreads) {
    const int j = c / chunks, d8 = c % chunks * 8, p = pos[j];
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (p >= 0) {
      const int64_t at = int64_t(blocks[p / a.block_size]) * a.block_elems +
                         int64_t(p % a.block_size) * a.width + d8;
      dev::load8(cache + at, x);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) lat[j * stride + d8 + i] = x[i] * ks;
  }
}

// The CTA's q rows (zeros past q_heads) into qs.
template <class T>
__device__ void stage_q(const SparseArgs &a, int t, int h0, float *qs, int stride) {
  const int chunks = a.width / 8;
  for (int c = threadIdx.x; c < kHeads * chunks; c += kThreads) {
    const int r = c / chunks, d8 = c % chunks * 8;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (h0 + r < a.q_heads)
      dev::load8(static_cast<const T *>(a.q) + (int64_t(t) * a.q_heads + h0 + r) * a.width + d8, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[r * stride + d8 + i] = x[i];
  }
}

// grid = (token, head block).
template <class T, class C>
__global__ void __launch_bounds__(kThreads) sparse_mla_kernel(SparseArgs a) {
  extern __shared__ __align__(16) float smem[];
  const int t = int(blockIdx.x), h0 = int(blockIdx.y) * kHeads, stride = a.width + 1;
  const dev::TokenPlace tp = dev::token_place(a.batch, t);
  float *qs = smem, *lat = qs + kHeads * stride, *s = lat + kKeys * stride;
  int32_t *pos = reinterpret_cast<int32_t *>(s + kHeads * kKeys);
  const int32_t *blocks = a.batch.block_indices + a.batch.block_indptr[tp.seq];
  stage_q<T>(a, t, h0, qs, stride);
  const int h = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  float acc[kMaxAcc];
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j0 = 0; j0 < a.topk; j0 += kKeys) {
    __syncthreads();  // the previous tile's reads of lat, s and pos are done (and qs is staged)
    if (threadIdx.x < kKeys) {
      const int j = j0 + threadIdx.x;
      const int32_t p = j < a.topk ? a.indices[int64_t(t) * a.topk + j] : -1;
      pos[threadIdx.x] = p >= 0 && p <= tp.pos ? p : -1;
    }
    __syncthreads();
    bool any = false;
    for (int j = 0; j < kKeys; ++j) any = any || pos[j] >= 0;
    if (!any) continue;  // the whole CTA: a tile of padding
    gather_latents<C>(a, blocks, pos, lat, stride);
    __syncthreads();
    {
      const int sh = threadIdx.x / kKeys, sj = threadIdx.x % kKeys;
      const float *qr = qs + sh * stride, *kr = lat + sj * stride;
      float dot = 0.f;
      for (int d = 0; d < a.width; ++d) dot += qr[d] * kr[d];
      s[threadIdx.x] = pos[sj] >= 0 ? dot * a.scale_log2 : -INFINITY;
    }
    __syncthreads();
    const float *sr = s + h * kKeys;
    float tile_max = -INFINITY;
    for (int j = 0; j < kKeys; ++j) tile_max = fmaxf(tile_max, sr[j]);
    const float next = fmaxf(m, tile_max);
    if (next == -INFINITY) continue;  // nothing seen yet (every score -inf)
    const float corr = exp2f(m - next);
    float p[kKeys], sum = 0.f;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) sum += p[j] = exp2f(sr[j] - next);
    l = l * corr + sum;
#pragma unroll
    for (int i = 0; i < kMaxAcc; ++i) {
      const int c = lane + i * kLanes;
      if (c >= a.rank) break;
      float x = acc[i] * corr;
#pragma unroll
      for (int j = 0; j < kKeys; ++j) x += p[j] * lat[j * stride + c];
      acc[i] = x;
    }
    m = next;
  }
  if (h0 + h >= a.q_heads) return;
  T *o = static_cast<T *>(a.out) + (int64_t(t) * a.q_heads + h0 + h) * a.rank;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no key: out 0
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) {
    const int c = lane + i * kLanes;
    if (c >= a.rank) break;
    o[c] = dev::from_float<T>(acc[i] * inv);
  }
}

}  // namespace

cudaError_t launch_sparse_mla(const KvLayer &layer, int32_t kv_lora_rank, const BatchView &batch,
                              const void *q, const int32_t *indices, int32_t topk, void *out,
                              int32_t q_heads, float scale, cudaStream_t stream) {
  if (batch.num_seqs < 0 || batch.num_tokens < 0 || q_heads < 1 || q_heads > PKV_CUDA_MAX_GRID ||
      layer.v || layer.kv_heads != 1 || layer.window != 0 || layer.chunk != 0 ||
      layer.softcap != 0.f || layer.sinks || (layer.v_dim != 0 && layer.v_dim != kv_lora_rank) ||
      layer.block_size < 1 || !dev::latent_ok(layer.head_dim, kv_lora_rank) ||
      !dev::latent_stride_ok(layer) || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !indices || topk < 1 || !(scale > 0.f) || (is_fp8(layer.kv_dtype) && !layer.k_scale))
    return cudaErrorInvalidValue;
  if (batch.num_tokens == 0) return cudaSuccess;
  SparseArgs a{};
  a.q = q, a.out = out, a.cache = layer.k, a.k_scale = layer.k_scale;
  a.batch = batch, a.indices = indices;
  a.topk = topk, a.q_heads = q_heads, a.width = layer.head_dim, a.rank = kv_lora_rank;
  a.block_size = layer.block_size, a.block_elems = dev::latent_block_elems(layer);
  a.scale_log2 = scale * 1.4426950408889634f;  // log2(e)
  const size_t smem = smem_bytes(layer.head_dim);
  const dim3 grid(uint32_t(batch.num_tokens), uint32_t(dev::ceil_div(q_heads, kHeads)));
  return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    if (const cudaError_t e =
            allow_smem(reinterpret_cast<const void *>(sparse_mla_kernel<T, C>), smem))
      return e;
    sparse_mla_kernel<T, C><<<grid, kThreads, smem, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace pkv::cuda
