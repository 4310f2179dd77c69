// The tile loop shared by decode and prefill attention: a CTA owns a tile of rows (packed
// (new token, q head of the group) pairs of one kv head) and walks a range of the sequence's
// keys in tiles through the block table, with an online softmax (FlashAttention's recurrence,
// in base 2). All in fp32; K and V tiles are staged in shared memory one after the other, fp8
// codes already times their head's scale. The caller's key range starts at the first key any
// of its rows sees (windows), so blocks before it are never read: a windowed table holds -1 there.
//
// Shared memory, floats (d = head_dim):
//   q    [R][d]        the rows' queries, pre-multiplied by scale * log2(e)
//   kv   [K][d + 1]    the K tile, then the V tile (+1 breaks bank conflicts of the dot products)
//   s    [R][K]        scores, then probabilities
//   m, l, corr [R]     running max, running sum, this tile's rescale of the accumulators
//   last [R] (int32)   the last key position row r may see (causal), -1 for padding rows
//   first [R] (int32)  the first: its window's (last - window + 1) or its chunk's
// A soft-cap (AttnArgs::cap_log2) maps each score before the mask; sinks join the sums at the
// end (store_rows, or the decode merge), so a layer without either runs the same arithmetic.
// Accumulators live in registers: pair i of a thread is element f = tid + i * kAttnThreads of
// the [R][d] output tile.
#pragma once

#include "attention_args.cuh"

namespace pkv::cuda::dev {

constexpr int kAttnThreads = 128;

// The rows a CTA computes: packed rows row0 .. row0 + num_rows - 1 of a sequence's
// query_len * group rows, p = token * group + g (q head kv_head * group + g).
struct RowBlock {
  int32_t seq, kv_head, row0, num_rows, query_start, query_len, context_len;
};

// W: the widest head_dim of the bucket (HeadDim::kWidth), which sizes the accumulators.
template <int D, int R, int K, int W = (D ? D : PKV_ATTENTION_MAX_HEAD_DIM)> struct Tile {
  static constexpr int kRows = R, kKeys = K;
  static constexpr int kMaxD = D ? D : W;
  static constexpr int kPairs = (R * kMaxD + kAttnThreads - 1) / kAttnThreads;
  static size_t smem_bytes(int d) { return sizeof(float) * (R * d + K * (d + 1) + R * K + 5 * R); }
};

struct TileSmem {
  float *q, *kv, *s, *m, *l, *corr;
  int32_t *last, *first;
};

// base: the kernel's dynamic shared memory, declared as bytes because it holds floats and
// int32s (a float array read as int32 would be type punning).
template <int R, int K> __device__ __forceinline__ TileSmem carve_smem(unsigned char *base, int d) {
  TileSmem t;
  t.q = reinterpret_cast<float *>(base);
  t.kv = t.q + R * d;
  t.s = t.kv + K * (d + 1);
  t.m = t.s + R * K;
  t.l = t.m + R;
  t.corr = t.l + R;
  const int floats = R * d + K * (d + 1) + R * K + 3 * R;  // q, kv, s, m, l, corr
  t.last = reinterpret_cast<int32_t *>(base + sizeof(float) * floats);
  t.first = t.last + R;
  return t;
}

// The first key a row at position pos sees: its chunk's first (chunked local attention), else
// its window's (0 under full attention). Never after pos.
__device__ __forceinline__ int32_t first_key(const AttnArgs &a, int32_t pos) {
  return a.chunk ? pos - pos % a.chunk : window_start(pos, a.window);
}

// A score s (base 2) under the soft-cap c (base 2 too): c * tanh(s / c), the same map as in
// natural units since both sides scale by log2(e).
__device__ __forceinline__ float soft_cap(float s, float cap) { return cap * tanhf(s / cap); }

// Joins q head h's sink to a row's final max m and sum l (base 2): l becomes the sum with the
// sink's weight; returns the factor that rescales the row's accumulators to the new max.
__device__ __forceinline__ float join_sink(const AttnArgs &a, int q_head, float m, float &l) {
  const float sink = a.sinks[q_head] * 1.4426950408889634f;  // log2(e): logits to base 2
  const float m_new = fmaxf(m, sink), f = exp2f(m - m_new);
  l = l * f + exp2f(sink - m_new);
  return f;
}

// Offset of row r's vector in q / out: [token][q_heads][head_dim].
__device__ __forceinline__ int64_t row_offset(const AttnArgs &a, const RowBlock &rb, int r, int d) {
  const int p = rb.row0 + r, token = p / a.group, g = p % a.group;
  return (int64_t(rb.query_start + token) * a.q_heads + rb.kv_head * a.group + g) * d;
}

template <class T, int R>
__device__ __forceinline__ void load_rows(const AttnArgs &a, const RowBlock &rb, const TileSmem &sm,
                                          int d) {
  const int chunks = d / 8;
  for (int c = threadIdx.x; c < R * chunks; c += kAttnThreads) {
    const int r = c / chunks, d8 = c % chunks * 8;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rb.num_rows) load8(static_cast<const T *>(a.q) + row_offset(a, rb, r, d) + d8, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) sm.q[r * d + d8 + i] = x[i] * a.scale_log2;
  }
  for (int r = threadIdx.x; r < R; r += kAttnThreads) {
    const int token = (rb.row0 + r) / a.group;
    sm.last[r] = r < rb.num_rows ? rb.context_len - rb.query_len + token : -1;
    sm.first[r] = r < rb.num_rows ? first_key(a, sm.last[r]) : 0;
    sm.m[r] = -INFINITY;
    sm.l[r] = 0.f;
  }
}

// Keys k0 .. k0 + K - 1 of cache (elements C) into kv, times `scale` for fp8 codes; keys at or
// past key_end read as 0 (never NaN, since their probability 0 multiplies them).
template <class C, int K>
__device__ __forceinline__ void load_kv_tile(const C *cache, const AttnArgs &a, const RowBlock &rb,
                                             const TileSmem &sm, int d, int k0, int key_end,
                                             float scale) {
  const int chunks = d / 8;
  const int32_t *blocks = a.block_indices + a.block_indptr[rb.seq];
  for (int c = threadIdx.x; c < K * chunks; c += kAttnThreads) {
    const int j = c / chunks, d8 = c % chunks * 8, key = k0 + j;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (key < key_end) {
      const int64_t at = int64_t(blocks[key / a.block_size]) * a.block_stride +
                         (int64_t(key % a.block_size) * a.kv_heads + rb.kv_head) * d;
      load8(cache + at + d8, x);
      if constexpr (kIsFp8<C>) {
#pragma unroll
        for (int i = 0; i < 8; ++i) x[i] *= scale;
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm.kv[j * (d + 1) + d8 + i] = x[i];
  }
}

// Scores of the tile, soft-capped when cap > 0; a key outside row r's causal window or chunk
// (past last[r] or before first[r]) scores -inf.
template <int D, int R, int K>
__device__ __forceinline__ void tile_scores(const TileSmem &sm, int d, int k0, int key_end,
                                            float cap) {
  for (int e = threadIdx.x; e < R * K; e += kAttnThreads) {
    const int r = e / K, j = e % K, key = k0 + j;
    const float *qr = sm.q + r * d, *kr = sm.kv + j * (d + 1);
    float dot = 0.f;
#pragma unroll 8
    for (int i = 0; i < (D ? D : d); ++i) dot += qr[i] * kr[i];
    if (cap > 0.f) dot = soft_cap(dot, cap);
    sm.s[e] = key < key_end && key <= sm.last[r] && key >= sm.first[r] ? dot : -INFINITY;
  }
}

// One warp per row: new running max, probabilities in place of the scores, rescale factor.
template <int R, int K> __device__ __forceinline__ void tile_softmax(const TileSmem &sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < R; r += kAttnThreads / 32) {
    float *s = sm.s + r * K;
    float tile_max = -INFINITY;
    for (int j = lane; j < K; j += 32) tile_max = fmaxf(tile_max, s[j]);
    const float m_old = sm.m[r], m_new = fmaxf(m_old, warp_max(tile_max));
    float sum = 0.f;
    for (int j = lane; j < K; j += 32) {
      const float p = m_new == -INFINITY ? 0.f : exp2f(s[j] - m_new);
      s[j] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      const float corr = m_new == -INFINITY ? 1.f : exp2f(m_old - m_new);
      sm.corr[r] = corr;
      sm.l[r] = sm.l[r] * corr + sum;
      sm.m[r] = m_new;
    }
  }
}

template <int D, int R, int K, int P>
__device__ __forceinline__ void tile_pv(const TileSmem &sm, int d, float (&acc)[P]) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int f = threadIdx.x + i * kAttnThreads;
    if (f >= R * d) break;
    const int r = f / d, c = f % d;
    const float *p = sm.s + r * K;
    float x = acc[i] * sm.corr[r];
#pragma unroll 4
    for (int j = 0; j < K; ++j) x += p[j] * sm.kv[j * (d + 1) + c];
    acc[i] = x;
  }
}

// The whole walk over keys key_begin .. key_end - 1 of a pool of C elements (T, or an fp8
// tag). On return acc holds the unnormalized output and sm.m / sm.l the row maxima and sums
// (base 2).
template <class T, class C, int D, int R, int K, int P>
__device__ __forceinline__ void attend_rows(const AttnArgs &a, const RowBlock &rb,
                                            const TileSmem &sm, int key_begin, int key_end,
                                            float (&acc)[P]) {
  const int d = D ? D : a.head_dim;
  float k_scale = 1.f, v_scale = 1.f;
  if constexpr (kIsFp8<C>) k_scale = a.k_scale[rb.kv_head], v_scale = a.v_scale[rb.kv_head];
  load_rows<T, R>(a, rb, sm, d);
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0.f;
  __syncthreads();
  for (int k0 = key_begin; k0 < key_end; k0 += K) {
    load_kv_tile<C, K>(static_cast<const C *>(a.k_cache), a, rb, sm, d, k0, key_end, k_scale);
    __syncthreads();
    tile_scores<D, R, K>(sm, d, k0, key_end, a.cap_log2);
    __syncthreads();
    load_kv_tile<C, K>(static_cast<const C *>(a.v_cache), a, rb, sm, d, k0, key_end, v_scale);
    tile_softmax<R, K>(sm);
    __syncthreads();
    tile_pv<D, R, K>(sm, d, acc);
    __syncthreads();
  }
}

// out = acc / l for the real rows; with sinks, acc * corr / l after each row's sink joined l
// (corr: the rescale to the max with the sink).
template <class T, int D, int R, int P>
__device__ __forceinline__ void store_rows(const AttnArgs &a, const RowBlock &rb,
                                           const TileSmem &sm, const float (&acc)[P]) {
  const int d = D ? D : a.head_dim;
  if (a.sinks) {
    for (int r = threadIdx.x; r < rb.num_rows; r += kAttnThreads)
      sm.corr[r] = join_sink(a, rb.kv_head * a.group + (rb.row0 + r) % a.group, sm.m[r], sm.l[r]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int f = threadIdx.x + i * kAttnThreads;
    const int r = f / d, c = f % d;
    if (f >= R * d || r >= rb.num_rows) break;
    const float x = a.sinks ? acc[i] * sm.corr[r] / sm.l[r] : acc[i] / sm.l[r];
    static_cast<T *>(a.out)[row_offset(a, rb, r, d) + c] = from_float<T>(x);
  }
}

}  // namespace pkv::cuda::dev
