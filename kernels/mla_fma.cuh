// The MLA tile loop in fp32 on the CUDA cores, for f32 models (an f32 or fp8 cache): a CTA of 256
// threads owns 16 rows (q heads of a decode, packed (token, head) rows of a prefill) and walks
// its keys in tiles of 16 latents staged in shared memory once for the 16 rows, with an online
// softmax in base 2 (as attention_tile.cuh). fp8 codes are staged as their values: the scale is
// folded into the queries (scores) and applied to the output.
//
// Shared memory, floats (W = width):
//   q    [16][W + 4]   the rows' queries times scale * log2(e) (* the fp8 scale); zeros for
//                      padding rows (+4: the two rows a warp reads sit in different banks)
//   lat  [16][W + 2]   the tile's latents, zeros at or past key_end (+2: the 16 keys a half-warp
//                      reads sit in 16 banks, and a row stays 8-byte aligned for float2 reads)
//   s    [16][16]      scores, then probabilities
//   m, l, corr [16]    running max, running sum, this tile's rescale of the accumulators
// Accumulators: pair i of a thread is dims (c, c + 1) of row r, pair tid + 256 i of [16][rank / 2].
#pragma once

#include "mla_common.cuh"

namespace pkv::cuda::dev {

struct MlaFmaTile {
  static constexpr int kRows = 16, kKeys = 16;
  static constexpr int kPairs = kRows * PKV_ATTENTION_MAX_KV_LORA_RANK / 2 / kMlaThreads;
  static size_t smem_bytes(int width) {
    return sizeof(float) *
           (size_t(kRows) * (width + 4) + size_t(kKeys) * (width + 2) + kRows * kKeys + 3 * kRows);
  }
};

struct MlaFmaSmem {
  float *q, *lat, *s, *m, *l, *corr;
  int q_stride, lat_stride;
};

__device__ __forceinline__ MlaFmaSmem mla_fma_smem(unsigned char *base, int width) {
  using Tile = MlaFmaTile;
  MlaFmaSmem t;
  t.q_stride = width + 4, t.lat_stride = width + 2;
  t.q = reinterpret_cast<float *>(base);
  t.lat = t.q + Tile::kRows * t.q_stride;
  t.s = t.lat + Tile::kKeys * t.lat_stride;
  t.m = t.s + Tile::kRows * Tile::kKeys;
  t.l = t.m + Tile::kRows;
  t.corr = t.l + Tile::kRows;
  return t;
}

template <class T>
__device__ __forceinline__ void mla_fma_load_q(const MlaArgs &a, const MlaRows &rb,
                                               const MlaFmaSmem &sm, float q_scale) {
  const int chunks = a.width / 8;
  for (int c = threadIdx.x; c < MlaFmaTile::kRows * chunks; c += kMlaThreads) {
    const int r = c / chunks, d8 = c % chunks * 8;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rb.num_rows) load8(static_cast<const T *>(a.q) + mla_q_offset(a, rb, r) + d8, x);
#pragma unroll
    for (int i = 0; i < 8; ++i) sm.q[r * sm.q_stride + d8 + i] = x[i] * q_scale;
  }
  for (int r = threadIdx.x; r < MlaFmaTile::kRows; r += kMlaThreads) {
    sm.m[r] = -INFINITY;
    sm.l[r] = 0.f;
  }
}

// Keys k0 .. k0 + 15 into lat (fp8: the codes' values), zeros at or past key_end.
template <class C>
__device__ __forceinline__ void mla_fma_load_lat(const MlaArgs &a, const MlaRows &rb,
                                                 const MlaFmaSmem &sm, int k0) {
  const int chunks = a.width / 8;
  const int32_t *blocks = a.block_indices + a.block_indptr[rb.seq];
  for (int c = threadIdx.x; c < MlaFmaTile::kKeys * chunks; c += kMlaThreads) {
    const int j = c / chunks, d8 = c % chunks * 8, key = k0 + j;
    float x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (key < rb.key_end) {
      load8(static_cast<const C *>(a.cache) + mla_latent_at(a, blocks, key) + d8, x);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sm.lat[j * sm.lat_stride + d8 + i] = x[i];
  }
}

// One score per thread (row tid / 16, key tid % 16); keys a row does not see score -inf.
__device__ __forceinline__ void mla_fma_scores(const MlaArgs &a, const MlaRows &rb,
                                               const MlaFmaSmem &sm, int k0) {
  const int r = threadIdx.x / MlaFmaTile::kKeys, j = threadIdx.x % MlaFmaTile::kKeys;
  const float *qr = sm.q + r * sm.q_stride, *kr = sm.lat + j * sm.lat_stride;
  float dot = 0.f;
#pragma unroll 8
  for (int i = 0; i < a.width; ++i) dot += qr[i] * kr[i];
  const int key = k0 + j;
  sm.s[threadIdx.x] = key < rb.key_end && key <= mla_last_key(a, rb, r) ? dot : -INFINITY;
}

// Half a warp per row: the new running max, probabilities in place of the scores, the rescale.
__device__ __forceinline__ void mla_fma_softmax(const MlaFmaSmem &sm) {
  const int r = threadIdx.x / 16, j = threadIdx.x % 16;  // 256 threads: the 16 rows x 16 keys
  float *s = sm.s + r * MlaFmaTile::kKeys;
  float mx = s[j];
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float m_old = sm.m[r], m_new = fmaxf(m_old, mx);
  const float p = m_new == -INFINITY ? 0.f : exp2f(s[j] - m_new);
  float sum = p;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  s[j] = p;
  if (j == 0) {
    const float corr = m_new == -INFINITY ? 1.f : exp2f(m_old - m_new);
    sm.corr[r] = corr;
    sm.l[r] = sm.l[r] * corr + sum;
    sm.m[r] = m_new;
  }
}

__device__ __forceinline__ void mla_fma_pv(const MlaArgs &a, const MlaFmaSmem &sm,
                                           float (&acc)[MlaFmaTile::kPairs][2]) {
  const int half = a.rank / 2;
#pragma unroll
  for (int i = 0; i < MlaFmaTile::kPairs; ++i) {
    const int f = threadIdx.x + i * kMlaThreads, r = f / half, c = 2 * (f % half);
    if (r >= MlaFmaTile::kRows) break;
    const float *p = sm.s + r * MlaFmaTile::kKeys, corr = sm.corr[r];
    float x0 = acc[i][0] * corr, x1 = acc[i][1] * corr;
#pragma unroll 4
    for (int j = 0; j < MlaFmaTile::kKeys; ++j) {
      const float2 v = *reinterpret_cast<const float2 *>(sm.lat + j * sm.lat_stride + c);
      x0 += p[j] * v.x;
      x1 += p[j] * v.y;
    }
    acc[i][0] = x0, acc[i][1] = x1;
  }
}

// The whole walk over the CTA's keys, then its output. smem: MlaFmaTile::smem_bytes(width).
template <class T, class C>
__device__ __forceinline__ void mla_attend_fma(const MlaArgs &a, const MlaRows &rb,
                                               unsigned char *smem) {
  const MlaFmaSmem sm = mla_fma_smem(smem, a.width);
  float v_scale = 1.f;
  if constexpr (kIsFp8<C>) v_scale = a.k_scale[0];
  mla_fma_load_q<T>(a, rb, sm, a.scale_log2 * v_scale);
  float acc[MlaFmaTile::kPairs][2];
#pragma unroll
  for (int i = 0; i < MlaFmaTile::kPairs; ++i) acc[i][0] = acc[i][1] = 0.f;
  for (int k0 = rb.key_begin; k0 < rb.key_end; k0 += MlaFmaTile::kKeys) {
    mla_fma_load_lat<C>(a, rb, sm, k0);
    __syncthreads();
    mla_fma_scores(a, rb, sm, k0);
    __syncthreads();
    mla_fma_softmax(sm);
    __syncthreads();
    mla_fma_pv(a, sm, acc);
    __syncthreads();
  }
  const int half = a.rank / 2;
#pragma unroll
  for (int i = 0; i < MlaFmaTile::kPairs; ++i) {
    const int f = threadIdx.x + i * kMlaThreads, r = f / half, c = 2 * (f % half);
    if (r >= rb.num_rows) break;
    mla_put2<T>(a, rb, r, c, acc[i][0], acc[i][1], rb.split < 0 ? v_scale / sm.l[r] : v_scale);
    if (c == 0) mla_put_ml(a, rb, r, sm.m[r], sm.l[r]);
  }
}

}  // namespace pkv::cuda::dev
