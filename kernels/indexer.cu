// The lightning indexer (see indexer.cuh): key writes, one warp per token; the top-k in two
// kernels per wave of tokens: indexer_score_kernel splits each token's context over CTAs (the
// work: heads * dim multiply-adds per key, in fp32 on the CUDA cores, register-blocked 4 keys x 4
// heads a thread) and leaves every score in the workspace, then
// indexer_select_kernel, one CTA per token, finds the k-th score by a radix select on the
// scores' order-preserving bits and emits the kept keys in position order. Both are independent
// of the threads' order: the same scores and the same set, ties included, run after run.
#include "device_common.cuh"
#include "indexer.cuh"
#include "indexer_select.cuh"

namespace pkv::cuda {
namespace {

using dev::imin;

constexpr int kWriteWarps = 4;
// The score CTA: a tile of 64 keys against 64 staged heads, each thread 4 keys x 4 heads (16
// dot products in registers from two 16-byte shared loads per value of the dimension).
constexpr int kScoreThreads = 256, kTileKeys = 64, kKeysPer = 4, kHeadsPer = 4;
constexpr int kKeyGroups = kTileKeys / kKeysPer;         // 16
constexpr int kHeadGroups = kScoreThreads / kKeyGroups;  // 16
constexpr int kStagedHeads = kHeadGroups * kHeadsPer;    // 64
constexpr int kSplitKeys = 256;                          // keys per score CTA (4 tiles)
constexpr float kFp8Max = 448.f;                         // e4m3's largest finite value

// The fp8 scale of a key whose largest magnitude is amax (pkv.h: amax / 448, 1 for zeros; ue8m0:
// the power of two at or above it).
__device__ __forceinline__ float key_scale(float amax, bool ue8m0) {
  if (!(amax > 0.f)) return 1.f;
  const float s = amax / kFp8Max;
  if (!ue8m0) return s;
  int e;
  const float f = frexpf(s, &e);  // s = f * 2^e, f in [0.5, 1)
  return ldexpf(1.f, f == 0.5f ? e - 1 : e);
}

// One warp per token: lane i holds values 8i .. 8i + 7 (dim <= 256 = 32 chunks of 8).
template <class T, bool kFp8>
__global__ void __launch_bounds__(32 * kWriteWarps)
    indexer_write_kernel(IndexerLayer layer, const T *k, const int64_t *slots, int32_t num_tokens,
                         bool ue8m0) {
  const int t = blockIdx.x * kWriteWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (t >= num_tokens) return;  // the whole warp
  const int64_t slot = slots[t];
  if (slot < 0) return;
  const int chunks = layer.dim / 8;
  float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (lane < chunks) dev::load8(k + int64_t(t) * layer.dim + lane * 8, x);
  char *page = static_cast<char *>(layer.pages) + slot / layer.block_size * layer.block_stride;
  const int64_t off = slot % layer.block_size;
  if constexpr (!kFp8) {
    uint16_t bits[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) bits[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
    uint4 raw;
    memcpy(&raw, bits, sizeof raw);
    if (lane < chunks)
      *reinterpret_cast<uint4 *>(page + layer.key_offset + (off * layer.dim + lane * 8) * 2) = raw;
  } else {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
    const float scale = key_scale(dev::warp_max(amax), ue8m0);
    uint8_t codes[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) codes[i] = dev::fp8_encode<Fp8E4M3>(x[i] / scale);
    uint2 raw;
    memcpy(&raw, codes, sizeof raw);
    if (lane < chunks)
      *reinterpret_cast<uint2 *>(page + layer.key_offset + off * layer.dim + lane * 8) = raw;
    if (lane == 0) *reinterpret_cast<float *>(page + layer.scale_offset + off * 4) = scale;
  }
}

// What the score and select kernels read, by value.
struct TopkArgs {
  IndexerLayer layer;
  BatchView batch;
  const void *q;
  const float *weights;
  int32_t heads, topk, token0;  // token0: the wave's first token
  bool slots;
  float *scores;  // [wave tokens][max_keys]
  int32_t max_keys;
  int32_t *out;
  int32_t key_dims;  // dims of the key tile staged at once: dim, or fewer (score_key_dims)
};

// Shared memory of a score CTA: the staged q heads transposed ([dim][64]: a thread reads its 4
// heads at once) and their weights, the key tile transposed ([key_dims][64]: its 4 keys at once),
// the keys' scales, the head groups' sums per key.
size_t score_smem_floats(int32_t dim, int32_t key_dims) {
  return size_t(dim) * kStagedHeads + kStagedHeads + size_t(key_dims) * kTileKeys + kTileKeys +
         kHeadGroups * kTileKeys;
}

// The key tile's dims staged at once: all of them where the CTA fits the device's opt-in shared
// memory (sm_80, sm_90 and sm_100 at every dim; 99 KiB parts, sm_86 / 89 / 120, up to dim 184),
// else the most (a multiple of 8) that fits beside the whole q: dim 256 on 99 KiB takes its keys
// in 120 + 120 + 16 dims, summed in the same order, so the scores are the same bits. 0: none fit.
int32_t score_key_dims(int32_t dim, size_t max_smem) {
  if (score_smem_floats(dim, dim) * sizeof(float) <= max_smem) return dim;
  const size_t fixed = score_smem_floats(dim, 0) * sizeof(float);
  if (fixed >= max_smem) return 0;
  const int64_t dims = int64_t((max_smem - fixed) / (sizeof(float) * kTileKeys)) / 8 * 8;
  return int32_t(dims < dim ? dims : dim);
}

// Dims d0 .. d1 - 1 of keys k0 .. k0 + kTileKeys - 1 of the token's sequence (zeros at or past n)
// into kt, as the codes' values (or bf16's); with dim 0 among them, their scales into ks.
template <class C>
__device__ void load_key_tile(const TopkArgs &a, const int32_t *blocks, int k0, int n, int d0,
                              int d1, float *kt, float *ks) {
  const IndexerLayer &l = a.layer;
  const int chunks = (d1 - d0) / 8;
  const char *pages = static_cast<const char *>(l.pages);
  for (int c = threadIdx.x; c < kTileKeys * chunks; c += kScoreThreads) {
    const int j = c / chunks, d8 = d0 + c % chunks * 8, key = k0 + j;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (key < n) {
      const char *page = pages + int64_t(blocks[key / l.block_size]) * l.block_stride;
      const int64_t off = key % l.block_size;
      dev::load8(reinterpret_cast<const C *>(page + l.key_offset) + off * l.dim + d8, x);
      if (d8 == 0)
        ks[j] = kIsFp8<C> ? *reinterpret_cast<const float *>(page + l.scale_offset + off * 4) : 1.f;
    } else if (d8 == 0) {
      ks[j] = 0.f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) kt[(d8 - d0 + i) * kTileKeys + j] = x[i];
  }
}

// Heads h0 .. h0 + count - 1 of the token's q into qt ([dim][64], as floats) and weights into ws;
// zeros for the heads past count (weight 0: they add nothing).
template <class T>
__device__ void stage_queries(const TopkArgs &a, int t, int h0, int count, float *qt, float *ws) {
  const int dim = a.layer.dim, chunks = dim / 8;
  const T *q = static_cast<const T *>(a.q) + (int64_t(t) * a.heads + h0) * dim;
  for (int c = threadIdx.x; c < kStagedHeads * chunks; c += kScoreThreads) {
    const int h = c / chunks, d8 = c % chunks * 8;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (h < count) dev::load8(q + h * dim + d8, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) qt[(d8 + i) * kStagedHeads + h] = x[i];
  }
  for (int h = threadIdx.x; h < kStagedHeads; h += kScoreThreads)
    ws[h] = h < count ? a.weights[int64_t(t) * a.heads + h0 + h] : 0.f;
}

// The thread's 4 heads x 4 keys dot products over dims d0 .. d1 - 1 (kt holds those dims).
__device__ __forceinline__ void dot_block(const float *qt, const float *kt, int d0, int d1, int kg,
                                          int hg, float (&dot)[kHeadsPer][kKeysPer]) {
  for (int d = d0; d < d1; ++d) {
    const float4 qv = *reinterpret_cast<const float4 *>(qt + d * kStagedHeads + hg * kHeadsPer);
    const float4 kv = *reinterpret_cast<const float4 *>(kt + (d - d0) * kTileKeys + kg * kKeysPer);
    const float qh[kHeadsPer] = {qv.x, qv.y, qv.z, qv.w}, kk[kKeysPer] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
    for (int i = 0; i < kHeadsPer; ++i)
#pragma unroll
      for (int k = 0; k < kKeysPer; ++k) dot[i][k] += qh[i] * kk[k];
  }
}

// The thread's 4 keys' sums over its 4 heads: sum of w * relu(dot * scale), into part.
__device__ __forceinline__ void score_block(const float (&dot)[kHeadsPer][kKeysPer],
                                            const float *ws, const float *ks, int kg, int hg,
                                            float (&part)[kKeysPer]) {
#pragma unroll
  for (int i = 0; i < kHeadsPer; ++i)
#pragma unroll
    for (int k = 0; k < kKeysPer; ++k) {
      const float r = dot[i][k] * ks[kg * kKeysPer + k];
      part[k] += ws[hg * kHeadsPer + i] * (r < 0.f ? 0.f : r);  // relu keeping a NaN (last)
    }
}

// grid = (key split, wave token): the scores of the split's keys, kTileKeys at a time, against
// kStagedHeads heads at a time; the head groups' sums added in order. Two CTAs an SM at dim 128
// (66 KiB of shared memory each), so at most 128 registers. A key tile narrower than dim
// (a.key_dims: a 99 KiB device at dim > 184) is staged a part of its dims at a time, in order.
template <class T, class C>
__global__ void __launch_bounds__(kScoreThreads, 2) indexer_score_kernel(TopkArgs a) {
  extern __shared__ __align__(16) float smem[];
  const int t = a.token0 + int(blockIdx.y);
  const dev::TokenPlace tp = dev::token_place(a.batch, t);
  const int n = tp.pos + 1, key_begin = int(blockIdx.x) * kSplitKeys;
  if (key_begin >= n) return;  // the whole CTA
  const int dim = a.layer.dim;
  const bool whole = a.key_dims == dim;
  float *qt = smem, *ws = qt + dim * kStagedHeads, *kt = ws + kStagedHeads;
  float *ks = kt + a.key_dims * kTileKeys, *red = ks + kTileKeys;
  const int32_t *blocks = a.batch.block_indices + a.batch.block_indptr[tp.seq];
  const int kg = threadIdx.x % kKeyGroups, hg = threadIdx.x / kKeyGroups;
  int loaded = -1;  // the first head staged in qt
  for (int k0 = key_begin; k0 < imin(n, key_begin + kSplitKeys); k0 += kTileKeys) {
    __syncthreads();  // the previous tile's reads of kt, ks and red are done
    if (whole) load_key_tile<C>(a, blocks, k0, n, 0, dim, kt, ks);
    float part[kKeysPer] = {0.f, 0.f, 0.f, 0.f};
    for (int h0 = 0; h0 < a.heads; h0 += kStagedHeads) {
      if (h0 != loaded) {  // every tile with more heads than one staging, the first otherwise
        __syncthreads();
        stage_queries<T>(a, t, h0, imin(kStagedHeads, a.heads - h0), qt, ws);
        loaded = h0;
      }
      float dot[kHeadsPer][kKeysPer] = {};
      for (int d0 = 0; d0 < dim; d0 += a.key_dims) {
        const int d1 = imin(dim, d0 + a.key_dims);
        if (!whole) {
          __syncthreads();  // every thread is done with the previous part of kt
          load_key_tile<C>(a, blocks, k0, n, d0, d1, kt, ks);
        }
        __syncthreads();
        dot_block(qt, kt, d0, d1, kg, hg, dot);
      }
      score_block(dot, ws, ks, kg, hg, part);
    }
#pragma unroll
    for (int k = 0; k < kKeysPer; ++k) red[hg * kTileKeys + kg * kKeysPer + k] = part[k];
    __syncthreads();
    const int j = threadIdx.x;
    if (j < kTileKeys && k0 + j < n) {
      float sum = 0.f;
      for (int g = 0; g < kHeadGroups; ++g) sum += red[g * kTileKeys + j];
      a.scores[int64_t(blockIdx.y) * a.max_keys + k0 + j] = sum;
    }
  }
}

// grid = wave token: the token's row of out from its scores (dev::select_top).
__global__ void __launch_bounds__(dev::kSelectThreads) indexer_select_kernel(TopkArgs a) {
  const int t = a.token0 + int(blockIdx.x);
  const dev::TokenPlace tp = dev::token_place(a.batch, t);
  const int32_t *blocks = a.batch.block_indices + a.batch.block_indptr[tp.seq];
  dev::select_top(a.scores + int64_t(blockIdx.x) * a.max_keys, tp.pos + 1, a.topk,
                  a.out + int64_t(t) * a.topk, a.slots ? blocks : nullptr, a.layer.block_size);
}

// IndexerLayer's rules, shared by both launchers.
bool layer_ok(const IndexerLayer &l) {
  const bool fp8 = l.index_dtype == DType::fp8_e4m3;
  return l.pages && aligned16(l.pages) && l.block_size >= 1 && l.dim >= 8 &&
         l.dim <= PKV_INDEXER_MAX_HEAD_DIM && l.dim % PKV_ATTENTION_HEAD_DIM_ALIGN == 0 &&
         (fp8 || l.index_dtype == DType::bf16) && l.key_offset >= 0 && l.key_offset % 16 == 0 &&
         l.block_stride > 0 && l.block_stride % 16 == 0 &&
         (!fp8 || (l.scale_offset >= 0 && l.scale_offset % 4 == 0));
}

template <class T, class C>
cudaError_t launch_topk_typed(TopkArgs a, const IndexerTopkPlan &plan, cudaStream_t stream) {
  int device = 0, max_smem = 0;
  if (const cudaError_t e = cudaGetDevice(&device)) return e;
  if (const cudaError_t e =
          cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device))
    return e;
  a.key_dims = score_key_dims(a.layer.dim, size_t(max_smem));
  if (a.key_dims < 8) return cudaErrorInvalidConfiguration;  // no device pkv builds for
  const size_t smem = score_smem_floats(a.layer.dim, a.key_dims) * sizeof(float);
  if (const cudaError_t e =
          allow_smem(reinterpret_cast<const void *>(indexer_score_kernel<T, C>), smem))
    return e;
  const uint32_t splits = uint32_t(dev::ceil_div(plan.max_keys, kSplitKeys));
  for (int32_t t0 = 0; t0 < a.batch.num_tokens; t0 += plan.wave_tokens) {
    const uint32_t wave = uint32_t(imin(plan.wave_tokens, a.batch.num_tokens - t0));
    a.token0 = t0;
    indexer_score_kernel<T, C><<<dim3(splits, wave), kScoreThreads, smem, stream>>>(a);
    indexer_select_kernel<<<wave, dev::kSelectThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_indexer_write(const IndexerLayer &layer, const void *k, const int64_t *slots,
                                 int32_t num_tokens, bool ue8m0, cudaStream_t stream) {
  if (!layer_ok(layer) || !aligned16(k) || !slots || num_tokens < 0) return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const uint32_t grid = uint32_t(dev::ceil_div(num_tokens, kWriteWarps));
  return dispatch_dtype(layer.dtype, [&](auto t) {
    using T = decltype(t);
    const T *kt = static_cast<const T *>(k);
    if (layer.index_dtype == DType::fp8_e4m3)
      indexer_write_kernel<T, true>
          <<<grid, 32 * kWriteWarps, 0, stream>>>(layer, kt, slots, num_tokens, ue8m0);
    else
      indexer_write_kernel<T, false>
          <<<grid, 32 * kWriteWarps, 0, stream>>>(layer, kt, slots, num_tokens, ue8m0);
    return cudaGetLastError();
  });
}

size_t indexer_score_smem_bytes(int32_t dim, size_t max_smem) {
  const int32_t key_dims = score_key_dims(dim, max_smem);
  return key_dims < 8 ? 0 : score_smem_floats(dim, key_dims) * sizeof(float);
}

IndexerTopkPlan plan_indexer_topk(const BatchView &batch, size_t max_workspace) {
  IndexerTopkPlan p{};
  p.max_keys = batch.max_context_len > 0 ? batch.max_context_len : 1;
  const size_t row = size_t(p.max_keys) * sizeof(float);
  const size_t fit = max_workspace / row;
  const int32_t tokens = batch.num_tokens > 0 ? batch.num_tokens : 1;
  const size_t most = size_t(tokens < PKV_CUDA_MAX_GRID ? tokens : PKV_CUDA_MAX_GRID);  // grid.y
  p.wave_tokens = int32_t(fit < 1 ? 1 : fit < most ? fit : most);
  p.workspace_bytes = size_t(p.wave_tokens) * row;
  return p;
}

cudaError_t launch_indexer_topk(const IndexerLayer &layer, const BatchView &batch, const void *q,
                                const float *weights, int32_t heads, int32_t topk, bool slots,
                                int32_t *out, const IndexerTopkPlan &plan, void *workspace,
                                cudaStream_t stream) {
  if (!layer_ok(layer) || !aligned16(q) || !weights || !out || heads < 1 || heads > 65536 ||
      topk < 1 || batch.num_seqs < 0 || batch.num_tokens < 0 || plan.wave_tokens < 1 ||
      plan.wave_tokens > PKV_CUDA_MAX_GRID || plan.max_keys < batch.max_context_len || !workspace ||
      plan.workspace_bytes < size_t(plan.wave_tokens) * size_t(plan.max_keys) * sizeof(float))
    return cudaErrorInvalidValue;
  if (batch.num_tokens == 0) return cudaSuccess;
  TopkArgs a{
      layer,         batch, q, weights, heads, topk, 0, slots, static_cast<float *>(workspace),
      plan.max_keys, out,   0};  // key_dims: launch_topk_typed's, from the device
  return dispatch_dtype(layer.dtype, [&](auto t) {
    using T = decltype(t);
    if (layer.index_dtype == DType::fp8_e4m3) return launch_topk_typed<T, Fp8E4M3>(a, plan, stream);
    return launch_topk_typed<T, __nv_bfloat16>(a, plan, stream);
  });
}

}  // namespace pkv::cuda
