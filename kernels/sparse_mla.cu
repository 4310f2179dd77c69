// Sparse MLA over the paged latent cache (see sparse_mla.cuh), in fp32 on the CUDA cores: a CTA
// of 256 threads per (token, 16 q heads, split of the row) walks its entries 16 at a time,
// gathers those latents once into shared memory (as floats, fp8 codes times their scale), scores
// them for its 16 heads (a thread a (head, key) pair), and keeps an online softmax per head with
// the output row spread over the head's 16 threads (32 values each at the largest rank). A few
// decodes split their rows so that the CTAs fill the GPU, and a merge kernel combines the parts.
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
constexpr int32_t kMinSplitEntries = 128;  // 8 tiles
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
  // Splits of a row's entries (SparseMlaPlan): a CTA takes split_entries of them; with more than
  // one split its partial goes to ws_acc ([tokens][q_heads][splits][rank], unnormalized) and
  // ws_ml ([tokens][q_heads][splits][2] = max, sum), and the merge kernel writes out.
  int32_t split_entries, num_splits;
  float *ws_acc, *ws_ml;
};

// One head's online softmax, its output row spread over the head's kLanes threads (value lane +
// i * kLanes in acc[i]); every thread of the head keeps the same m and l.
struct RowState {
  float m, l;
  float acc[kMaxAcc];
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

// The tile's scores s [kHeads][kKeys] into head h's state: the new max, the rescale, the
// probabilities' sum and their weighted latents.
__device__ __forceinline__ void update_row(const SparseArgs &a, RowState &st, const float *sr,
                                           const float *lat, int stride, int lane) {
  float tile_max = -INFINITY;
  for (int j = 0; j < kKeys; ++j) tile_max = fmaxf(tile_max, sr[j]);
  const float next = fmaxf(st.m, tile_max);
  if (next == -INFINITY) return;  // nothing seen yet (every score -inf)
  const float corr = exp2f(st.m - next);
  float p[kKeys], sum = 0.f;
#pragma unroll
  for (int j = 0; j < kKeys; ++j) sum += p[j] = exp2f(sr[j] - next);
  st.l = st.l * corr + sum;
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) {
    const int c = lane + i * kLanes;
    if (c >= a.rank) break;
    float x = st.acc[i] * corr;
#pragma unroll
    for (int j = 0; j < kKeys; ++j) x += p[j] * lat[j * stride + c];
    st.acc[i] = x;
  }
  st.m = next;
}

// Head h0 + h's row of token t: into out (normalized; 0 with no key), or its split's partial.
template <class T>
__device__ __forceinline__ void put_row(const SparseArgs &a, const RowState &st, int t, int head,
                                        int lane) {
  if (head >= a.q_heads) return;
  const int64_t row = int64_t(t) * a.q_heads + head;
  if (a.num_splits > 1) {
    const int64_t part = row * a.num_splits + blockIdx.z;
    if (lane == 0) a.ws_ml[2 * part] = st.m, a.ws_ml[2 * part + 1] = st.l;
#pragma unroll
    for (int i = 0; i < kMaxAcc; ++i)
      if (lane + i * kLanes < a.rank) a.ws_acc[part * a.rank + lane + i * kLanes] = st.acc[i];
    return;
  }
  T *o = static_cast<T *>(a.out) + row * a.rank;
  const float inv = st.l > 0.f ? 1.f / st.l : 0.f;  // no key: out 0
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i)
    if (lane + i * kLanes < a.rank) o[lane + i * kLanes] = dev::from_float<T>(st.acc[i] * inv);
}

// grid = (token, head block, split).
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
  RowState st;
  st.m = -INFINITY, st.l = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxAcc; ++i) st.acc[i] = 0.f;
  const int begin = int(blockIdx.z) * a.split_entries;
  const int end = imin(a.topk, begin + a.split_entries);
  for (int j0 = begin; j0 < end; j0 += kKeys) {
    __syncthreads();  // the previous tile's reads of lat, s and pos are done (and qs is staged)
    if (threadIdx.x < kKeys) {
      const int j = j0 + threadIdx.x;
      const int32_t p = j < end ? a.indices[int64_t(t) * a.topk + j] : -1;
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
    update_row(a, st, s + h * kKeys, lat, stride, lane);
  }
  put_row<T>(a, st, t, h0 + h, lane);
}

// grid = (q head, token): out = sum_s 2^(m_s - m) acc_s / sum_s 2^(m_s - m) l_s over the splits
// (a split without a key has l_s 0; no key at all: out 0).
template <class T>
__global__ void __launch_bounds__(kThreads) sparse_mla_merge_kernel(SparseArgs a) {
  const int64_t row = int64_t(blockIdx.y) * a.q_heads + blockIdx.x;
  const float *ml = a.ws_ml + 2 * row * a.num_splits;
  float m = -INFINITY, l = 0.f;
  for (int s = 0; s < a.num_splits; ++s) m = fmaxf(m, ml[2 * s]);
  if (m != -INFINITY)
    for (int s = 0; s < a.num_splits; ++s) l += exp2f(ml[2 * s] - m) * ml[2 * s + 1];
  T *out = static_cast<T *>(a.out) + row * a.rank;
  for (int c = threadIdx.x; c < a.rank; c += kThreads) {
    float x = 0.f;
    if (l > 0.f)
      for (int s = 0; s < a.num_splits; ++s)
        x += exp2f(ml[2 * s] - m) * a.ws_acc[(row * a.num_splits + s) * a.rank + c];
    out[c] = dev::from_float<T>(l > 0.f ? x / l : 0.f);
  }
}

}  // namespace

SparseMlaPlan plan_sparse_mla_with(int32_t num_tokens, int32_t q_heads, int32_t kv_lora_rank,
                                   int32_t topk, int32_t split_entries) {
  SparseMlaPlan p{};
  const int32_t entries = topk > 0 ? topk : 1;
  p.split_entries = dev::ceil_div(split_entries > 0 ? split_entries : entries, kKeys) * kKeys;
  p.num_splits = dev::ceil_div(entries, p.split_entries);
  p.workspace_bytes = p.num_splits > 1
                          ? sizeof(float) * size_t(num_tokens > 0 ? num_tokens : 0) *
                                size_t(q_heads) * size_t(p.num_splits) * (size_t(kv_lora_rank) + 2)
                          : 0;
  return p;
}

// A wave of one CTA per SM at most: when the tokens' head blocks are fewer than the SMs (a few
// decodes), each row's entries split into as many parts as fill them, never under
// kMinSplitEntries (each split costs a partial row written and merged).
SparseMlaPlan plan_sparse_mla(int32_t num_tokens, int32_t q_heads, int32_t kv_lora_rank,
                              int32_t topk, int32_t num_sms) {
  const int64_t ctas = int64_t(num_tokens) * dev::ceil_div(q_heads, kHeads);
  const int64_t want = ctas > 0 && ctas < num_sms ? num_sms / ctas : 1;
  int64_t split = (int64_t(topk) + want - 1) / want;
  if (split < kMinSplitEntries) split = kMinSplitEntries;
  return plan_sparse_mla_with(num_tokens, q_heads, kv_lora_rank, topk, int32_t(split));
}

cudaError_t launch_sparse_mla(const KvLayer &layer, int32_t kv_lora_rank, const BatchView &batch,
                              const void *q, const int32_t *indices, int32_t topk, void *out,
                              int32_t q_heads, float scale, const SparseMlaPlan &plan,
                              void *workspace, cudaStream_t stream) {
  if (batch.num_seqs < 0 || batch.num_tokens < 0 || q_heads < 1 || q_heads > PKV_CUDA_MAX_GRID ||
      layer.v || layer.kv_heads != 1 || layer.window != 0 || layer.chunk != 0 ||
      layer.softcap != 0.f || layer.sinks || (layer.v_dim != 0 && layer.v_dim != kv_lora_rank) ||
      layer.block_size < 1 || !dev::latent_ok(layer.head_dim, kv_lora_rank) ||
      !dev::latent_stride_ok(layer) || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !indices || topk < 1 || !(scale > 0.f) || (is_fp8(layer.kv_dtype) && !layer.k_scale) ||
      plan.split_entries < kKeys || plan.split_entries % kKeys || plan.num_splits < 1 ||
      plan.num_splits > PKV_CUDA_MAX_GRID || int64_t(plan.num_splits) * plan.split_entries < topk ||
      (plan.num_splits > 1 &&
       (!workspace || plan.workspace_bytes < sizeof(float) * size_t(batch.num_tokens) *
                                                 size_t(q_heads) * size_t(plan.num_splits) *
                                                 (size_t(kv_lora_rank) + 2))))
    return cudaErrorInvalidValue;
  if (batch.num_tokens == 0) return cudaSuccess;
  SparseArgs a{};
  a.q = q, a.out = out, a.cache = layer.k, a.k_scale = layer.k_scale;
  a.batch = batch, a.indices = indices;
  a.topk = topk, a.q_heads = q_heads, a.width = layer.head_dim, a.rank = kv_lora_rank;
  a.block_size = layer.block_size, a.block_elems = dev::latent_block_elems(layer);
  a.scale_log2 = scale * 1.4426950408889634f;  // log2(e)
  a.split_entries = plan.split_entries, a.num_splits = plan.num_splits;
  const size_t parts = size_t(batch.num_tokens) * size_t(q_heads) * size_t(plan.num_splits);
  a.ws_acc = plan.num_splits > 1 ? static_cast<float *>(workspace) : nullptr;
  a.ws_ml = a.ws_acc ? a.ws_acc + parts * size_t(kv_lora_rank) : nullptr;
  const size_t smem = smem_bytes(layer.head_dim);
  const dim3 grid(uint32_t(batch.num_tokens), uint32_t(dev::ceil_div(q_heads, kHeads)),
                  uint32_t(plan.num_splits));
  return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
    using T = decltype(t);
    using C = decltype(c);
    if (const cudaError_t e =
            allow_smem(reinterpret_cast<const void *>(sparse_mla_kernel<T, C>), smem))
      return e;
    sparse_mla_kernel<T, C><<<grid, kThreads, smem, stream>>>(a);
    if (plan.num_splits > 1)
      sparse_mla_merge_kernel<T>
          <<<dim3(uint32_t(q_heads), uint32_t(batch.num_tokens)), kThreads, 0, stream>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace pkv::cuda
