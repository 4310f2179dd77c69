// The prefill tile loop on tensor cores (FlashAttention-2's shape): a CTA of 4 warps owns 64
// packed (new token, q head of the group) rows of one kv head, each warp 16 of them, and walks
// the sequence's keys in tiles of K staged in shared memory. Per tile a warp computes its
// S = Q K^T with mma_m16n8k16 (kernels/mma.cuh), keeps the online softmax of its rows in
// registers (base 2, as attention_tile.cuh), rounds P to T and adds P V with mma_m16n8k16 into
// fp32 accumulators that stay in registers. f16 / bf16 models, head_dim a multiple of 16.
//
// fp8 pools: a code's value is exact in f16 and in bf16 (e4m3 and e5m2 both), so the tiles hold
// the decoded codes and the head's scales are applied in fp32: k_scale to the scores, v_scale to
// the output. Nothing is rounded twice and codes times a large scale cannot overflow f16.
//
// Shared memory, 32-bit words each holding two T (low half first); strides padded so that the
// fragment reads of a warp hit 32 different banks:
//   q [R][D / 2 + 4]   word w of row r: dims 2w, 2w + 1
//   k [K][D / 2 + 4]   the same for key j of the tile
//   v [K / 2][D + 8]   word c of pair p: V[2p][c] (low), V[2p + 1][c]: P V's B fragments
//                      pair keys 2 tig, 2 tig + 1 of one column, so one word is one register
// Keys of the tile at or past key_end are zeros (their probability 0 multiplies them). A soft-cap
// maps the scores before the mask, sinks join the row sums at the end (mma_store): a layer
// with neither runs the same instructions as before them.
#pragma once

#include "attention_tile.cuh"
#include "mma.cuh"

namespace pkv::cuda::dev {

// DV: the output columns one pass over the keys computes (the whole D up to 256; D = 512 takes
// two passes of 256, each recomputing the scores, so a lane keeps 256 / 2 floats of O, as at 256).
template <int D, int K, int DV = D> struct MmaTile {
  static_assert(D % 16 == 0 && K % 16 == 0 && D % DV == 0, "mma tiles are 16 wide");
  static constexpr int kRows = 64, kKeys = K, kOutCols = DV, kQkStride = D / 2 + 4,
                       kVStride = DV + 8;
  static constexpr int kWords = (kRows + K) * kQkStride + K / 2 * kVStride;
  static constexpr size_t kSmemBytes = sizeof(uint32_t) * kWords;
};

// Eight consecutive elements of a pool of C (T, or fp8 codes decoded to T exactly) as T bits.
template <class T, class C>
__device__ __forceinline__ void load_bits8(const C *p, uint16_t (&bits)[8]) {
  if constexpr (kIsFp8<C>) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    uint8_t codes[8];
    memcpy(codes, &raw, sizeof codes);
#pragma unroll
    for (int i = 0; i < 8; ++i) bits[i] = to_bits(from_float<T>(fp8_decode<C>(codes[i])));
  } else {
    const uint4 raw = *reinterpret_cast<const uint4 *>(p);
    memcpy(bits, &raw, sizeof bits);
  }
}

__device__ __forceinline__ void store4(uint32_t *dst, uint32_t x, uint32_t y, uint32_t z,
                                       uint32_t w) {
  *reinterpret_cast<uint4 *>(dst) = make_uint4(x, y, z, w);
}

template <class T, int D, int R>
__device__ __forceinline__ void mma_load_q(const AttnArgs &a, const RowBlock &rb, uint32_t *q) {
  constexpr int kChunks = D / 8, kStride = D / 2 + 4;
  for (int c = threadIdx.x; c < R * kChunks; c += kAttnThreads) {
    const int r = c / kChunks, d8 = c % kChunks * 8;
    uint16_t x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rb.num_rows)
      load_bits8<T, T>(static_cast<const T *>(a.q) + row_offset(a, rb, r, D) + d8, x);
    store4(q + r * kStride + d8 / 2, pack_bits(x[0], x[1]), pack_bits(x[2], x[3]),
           pack_bits(x[4], x[5]), pack_bits(x[6], x[7]));
  }
}

// Keys k0 .. k0 + K - 1 of the K pool into k and of V's columns v0 .. v0 + DV - 1 into v
// (layouts above).
template <class T, class C, int D, int K, int DV = D>
__device__ __forceinline__ void mma_load_kv(const AttnArgs &a, const RowBlock &rb, uint32_t *k,
                                            uint32_t *v, int k0, int key_end, int v0 = 0) {
  constexpr int kChunks = D / 8, kStride = D / 2 + 4, kVStride = DV + 8;
  const int32_t *blocks = a.block_indices + a.block_indptr[rb.seq];
  const C *k_cache = static_cast<const C *>(a.k_cache),
          *v_cache = static_cast<const C *>(a.v_cache);
  for (int c = threadIdx.x; c < K / 2 * kChunks; c += kAttnThreads) {
    const int p = c / kChunks, d8 = c % kChunks * 8;
    const bool in_v = DV == D || (d8 >= v0 && d8 < v0 + DV);  // a column of this pass's V
    uint16_t kx[2][8] = {}, vx[2][8] = {};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = k0 + 2 * p + h;
      if (key < key_end) {
        const int64_t off = int64_t(blocks[key / a.block_size]) * a.block_stride +
                            (int64_t(key % a.block_size) * a.kv_heads + rb.kv_head) * D + d8;
        load_bits8<T, C>(k_cache + off, kx[h]);
        if (in_v) load_bits8<T, C>(v_cache + off, vx[h]);
      }
      store4(k + (2 * p + h) * kStride + d8 / 2, pack_bits(kx[h][0], kx[h][1]),
             pack_bits(kx[h][2], kx[h][3]), pack_bits(kx[h][4], kx[h][5]),
             pack_bits(kx[h][6], kx[h][7]));
    }
    if (!in_v) continue;
    uint32_t *vp = v + p * kVStride + (d8 - v0);
    store4(vp, pack_bits(vx[0][0], vx[1][0]), pack_bits(vx[0][1], vx[1][1]),
           pack_bits(vx[0][2], vx[1][2]), pack_bits(vx[0][3], vx[1][3]));
    store4(vp + 4, pack_bits(vx[0][4], vx[1][4]), pack_bits(vx[0][5], vx[1][5]),
           pack_bits(vx[0][6], vx[1][6]), pack_bits(vx[0][7], vx[1][7]));
  }
}

// This warp's rows (16 from row0 of the CTA's tile): per lane rows group and group + 8, the
// last key each may see (causal; -1 for padding rows) and the first (window or chunk), the online
// softmax state and O (DV: the pass's output columns).
template <int DV> struct WarpRows {
  int last[2], first[2];
  float m[2], l[2];
  float o[DV / 8][4];  // O's n-tiles of 8 dims, C-fragment layout
};

// S = Q K^T for the warp's 16 rows against the tile's K keys, scaled to base 2, soft-capped
// (cap > 0) and masked.
template <class T, int D, int K, int DV>
__device__ __forceinline__ void mma_scores(const uint32_t *q, const uint32_t *k, int warp_row0,
                                           const WarpRows<DV> &w, float (&s)[K / 8][4], int k0,
                                           int key_end, float cap, float score_scale) {
  constexpr int kStride = D / 2 + 4;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
#pragma unroll
  for (int j = 0; j < K / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t *qr = q + (warp_row0 + group) * kStride + 8 * kk + tig;
    const uint32_t a[4] = {qr[0], qr[8 * kStride], qr[4], qr[8 * kStride + 4]};
#pragma unroll
    for (int j = 0; j < K / 8; ++j) {
      const uint32_t *kr = k + (8 * j + group) * kStride + 8 * kk + tig;
      const uint32_t b[2] = {kr[0], kr[4]};
      mma_m16n8k16<T>(s[j], a, b);
    }
  }
#pragma unroll
  for (int j = 0; j < K / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[j][i] *= score_scale;
  if (cap > 0.f) {
#pragma unroll
    for (int j = 0; j < K / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = soft_cap(s[j][i], cap);
  }
#pragma unroll
  for (int j = 0; j < K / 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = k0 + 8 * j + 2 * tig + (i & 1);
      const bool seen = key < key_end && key <= w.last[i >> 1] && key >= w.first[i >> 1];
      if (!seen) s[j][i] = -INFINITY;
    }
}

// The online softmax step for the tile's scores s, then O = O * corr + P V.
template <class T, int D, int K>
__device__ __forceinline__ void mma_softmax_pv(const uint32_t *v, WarpRows<D> &w,
                                               float (&s)[K / 8][4]) {
  constexpr int kVStride = D + 8;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // rows group (c0, c1) and group + 8 (c2, c3)
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < K / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a row
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(w.m[h], mx);
    corr[h] = m_new == -INFINITY ? 1.f : exp2f(w.m[h] - m_new);
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < K / 8; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[j][e] = m_new == -INFINITY ? 0.f : exp2f(s[j][e] - m_new);
        sum += s[j][e];
      }
    w.l[h] = w.l[h] * corr[h] + sum;  // this lane's columns; summed over the row at the end
    w.m[h] = m_new;
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) w.o[n][i] *= corr[i >> 1];
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const uint32_t a[4] = {pack_rn<T>(s[2 * kk][0], s[2 * kk][1]),
                           pack_rn<T>(s[2 * kk][2], s[2 * kk][3]),
                           pack_rn<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                           pack_rn<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
    const uint32_t *vr = v + (8 * kk + tig) * kVStride + group;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const uint32_t b[2] = {vr[8 * n], vr[4 * kVStride + 8 * n]};
      mma_m16n8k16<T>(w.o[n], a, b);
    }
  }
}

// out = O / l (times v_scale for fp8) for the warp's real rows, columns o0 .. o0 + DV - 1; with
// sinks, l with the row's sink joined and O rescaled to the max with it.
template <class T, int D, int DV = D>
__device__ __forceinline__ void mma_store(const AttnArgs &a, const RowBlock &rb, int warp_row0,
                                          WarpRows<DV> &w, float v_scale, int o0 = 0) {
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.l[h] += __shfl_xor_sync(0xffffffffu, w.l[h], 1);
    w.l[h] += __shfl_xor_sync(0xffffffffu, w.l[h], 2);
    const int r = warp_row0 + group + 8 * h;
    if (r >= rb.num_rows) continue;
    float f = v_scale / w.l[h];
    if (a.sinks) {
      const int q_head = rb.kv_head * a.group + (rb.row0 + r) % a.group;
      const float corr = join_sink(a, q_head, w.m[h], w.l[h]);
      f = v_scale * corr / w.l[h];
    }
    T *out = static_cast<T *>(a.out) + row_offset(a, rb, r, D) + o0 + 2 * tig;
#pragma unroll
    for (int n = 0; n < DV / 8; ++n) {
      out[8 * n] = from_float<T>(w.o[n][2 * h] * f);
      out[8 * n + 1] = from_float<T>(w.o[n][2 * h + 1] * f);
    }
  }
}

// The whole walk over keys key_begin .. key_end - 1 for the CTA's rows, then the output. A warp
// skips the multiplies of a tile that none of its rows sees (its loads and barriers stay).
template <class T, class C, int D, int K>
__device__ __forceinline__ void attend_rows_mma(const AttnArgs &a, const RowBlock &rb,
                                                unsigned char *smem, int key_begin, int key_end) {
  using Tile = MmaTile<D, K>;
  uint32_t *q = reinterpret_cast<uint32_t *>(smem);
  uint32_t *k = q + Tile::kRows * Tile::kQkStride, *v = k + K * Tile::kQkStride;
  const int warp_row0 = threadIdx.x / 32 * 16, group = threadIdx.x % 32 / 4;
  const int first_new = rb.context_len - rb.query_len;
  WarpRows<D> w;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp_row0 + group + 8 * h;
    w.last[h] = r < rb.num_rows ? first_new + (rb.row0 + r) / a.group : -1;
    w.first[h] = r < rb.num_rows ? first_key(a, w.last[h]) : 0;
    w.m[h] = -INFINITY, w.l[h] = 0.f;
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) w.o[n][0] = w.o[n][1] = w.o[n][2] = w.o[n][3] = 0.f;
  const int warp_rows = imin(16, rb.num_rows - warp_row0);  // <= 0: padding only
  const int warp_last = first_new + (rb.row0 + warp_row0 + warp_rows - 1) / a.group;
  const int warp_first = first_key(a, first_new + (rb.row0 + warp_row0) / a.group);
  float score_scale = a.scale_log2, v_scale = 1.f;
  if constexpr (kIsFp8<C>) score_scale *= a.k_scale[rb.kv_head], v_scale = a.v_scale[rb.kv_head];
  mma_load_q<T, D, Tile::kRows>(a, rb, q);
  for (int k0 = key_begin; k0 < key_end; k0 += K) {
    mma_load_kv<T, C, D, K>(a, rb, k, v, k0, key_end);
    __syncthreads();
    if (warp_rows > 0 && k0 <= warp_last && k0 + K > warp_first) {
      float s[K / 8][4];
      mma_scores<T, D, K>(q, k, warp_row0, w, s, k0, key_end, a.cap_log2, score_scale);
      mma_softmax_pv<T, D, K>(v, w, s);
    }
    __syncthreads();
  }
  if (warp_rows > 0) mma_store<T, D>(a, rb, warp_row0, w, v_scale);
}

// attend_rows_mma for a D too wide for O in registers: the walk runs once per DV output columns
// (DV < D), each pass recomputing the same scores (so the same softmax) and keeping only its
// columns of O. A separate function, so the kernels of D <= 256 keep their instructions.
template <class T, class C, int D, int K, int DV>
__device__ __forceinline__ void attend_rows_mma_split(const AttnArgs &a, const RowBlock &rb,
                                                      unsigned char *smem, int key_begin,
                                                      int key_end) {
  static_assert(DV < D, "one pass: attend_rows_mma");
  using Tile = MmaTile<D, K, DV>;
  uint32_t *q = reinterpret_cast<uint32_t *>(smem);
  uint32_t *k = q + Tile::kRows * Tile::kQkStride, *v = k + K * Tile::kQkStride;
  const int warp_row0 = threadIdx.x / 32 * 16, group = threadIdx.x % 32 / 4;
  const int first_new = rb.context_len - rb.query_len;
  const int warp_rows = imin(16, rb.num_rows - warp_row0);  // <= 0: padding only
  const int warp_last = first_new + (rb.row0 + warp_row0 + warp_rows - 1) / a.group;
  const int warp_first = first_key(a, first_new + (rb.row0 + warp_row0) / a.group);
  float score_scale = a.scale_log2, v_scale = 1.f;
  if constexpr (kIsFp8<C>) score_scale *= a.k_scale[rb.kv_head], v_scale = a.v_scale[rb.kv_head];
  mma_load_q<T, D, Tile::kRows>(a, rb, q);
#pragma unroll 1
  for (int v0 = 0; v0 < D; v0 += DV) {
    WarpRows<DV> w;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row0 + group + 8 * h;
      w.last[h] = r < rb.num_rows ? first_new + (rb.row0 + r) / a.group : -1;
      w.first[h] = r < rb.num_rows ? first_key(a, w.last[h]) : 0;
      w.m[h] = -INFINITY, w.l[h] = 0.f;
    }
#pragma unroll
    for (int n = 0; n < DV / 8; ++n) w.o[n][0] = w.o[n][1] = w.o[n][2] = w.o[n][3] = 0.f;
    for (int k0 = key_begin; k0 < key_end; k0 += K) {
      mma_load_kv<T, C, D, K, DV>(a, rb, k, v, k0, key_end, v0);
      __syncthreads();
      if (warp_rows > 0 && k0 <= warp_last && k0 + K > warp_first) {
        float s[K / 8][4];
        mma_scores<T, D, K>(q, k, warp_row0, w, s, k0, key_end, a.cap_log2, score_scale);
        mma_softmax_pv<T, DV, K>(v, w, s);
      }
      __syncthreads();
    }
    if (warp_rows > 0) mma_store<T, D, DV>(a, rb, warp_row0, w, v_scale, v0);
  }
}

}  // namespace pkv::cuda::dev
