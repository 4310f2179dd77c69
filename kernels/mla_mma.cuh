// The MLA tile loop on tensor cores (FlashMLA's shape on mma.sync m16n8k16, kernels/mma.cuh): a
// CTA of 8 warps owns kRows = 16 * RG rows (the q heads of a decode, packed (token, head) rows of
// a prefill) and walks its keys in tiles of kKeys latents, each tile staged in shared memory once
// for all the rows. Warp (rg, ds), rg < RG, ds < DS = 8 / RG, per tile:
//   S  = Q K^T   rows 16 rg .. + 15 against keys 8 ds .. + 7 of the tile, over the whole width;
//   softmax      the DS warps of a row group meet their row maxima in shared memory, each keeps
//                its keys' share of the row sums and writes its P (rounded to T) to shared memory;
//   O += P V     its rows, all the tile's keys, output n-tiles (8 dims) ds, ds + DS, ... of rank.
// So every warp does 16 x 8 x width of QK^T and 16 x kKeys x rank / DS of PV a tile: RG 4 is 64
// rows x 16 keys, RG 2 is 32 rows x 32 keys; O takes rank / DS / 2 fp32 registers a lane (128
// for RG 4 at rank 512). The next tile's global loads are issued before this tile's math (into
// registers) and stored after it. fp8 caches: a code's value is exact in f16 and bf16, so tiles
// hold decoded codes, and the scale multiplies the scores (fp32) and the output.
//
// Shared memory, 32-bit words of two T (low half first); a row of width values takes stride =
// W16 / 2 + 4 words (W16: width rounded up to 16, the rest zeros), so a warp's fragment reads hit
// 32 different banks:
//   q   [kRows][stride]        the rows' queries (padding rows zeros)
//   lat [kKeys][stride]        the tile's latents (keys at or past key_end zeros)
//   p   [kRows][kKeys / 2 + 4] probabilities
//   red [DS][kRows] (fp32)     each warp's row maxima of the tile; at the end its row sums
#pragma once

#include <type_traits>

#include "mla_common.cuh"
#include "mma.cuh"

namespace pkv::cuda::dev {

template <int RG> struct MlaMmaTile {
  static_assert(RG == 2 || RG == 4, "64 or 32 rows a CTA");
  static constexpr int kRowGroups = RG, kDimSplits = 8 / RG;
  static constexpr int kRows = 16 * RG, kKeys = 8 * kDimSplits;
  static constexpr int kOutTiles = PKV_ATTENTION_MAX_KV_LORA_RANK / 8 / kDimSplits;
  static constexpr int kPStride = kKeys / 2 + 4;
  // 8-element chunks of a tile each thread fetches, at the widest latent.
  static constexpr int kFetch = (kKeys * kMlaMaxWidth / 8 + kMlaThreads - 1) / kMlaThreads;
  __host__ __device__ static int stride(int width) { return (width + 15) / 16 * 8 + 4; }
  static size_t smem_bytes(int width) {
    return sizeof(uint32_t) *
           (size_t(kRows + kKeys) * stride(width) + kRows * kPStride + kDimSplits * kRows);
  }
};

// 8 elements of the cache as loaded: 16 bytes of T, or 8 fp8 codes.
template <class C> using MlaChunk = std::conditional_t<kIsFp8<C>, uint2, uint4>;

// A warp's rows, per lane rows group and group + 8 of its row group: the last key each sees, the
// online softmax state (l: this warp's keys only) and O's n-tiles (C-fragment layout).
template <int RG> struct MlaWarp {
  int last[2];
  float m[2], l[2];
  float o[MlaMmaTile<RG>::kOutTiles][4];
};

// Zeros in the padding words of every q and lat row (width .. W16), then the rows' queries.
template <class T, class Tile>
__device__ __forceinline__ void mla_mma_load_q(const MlaArgs &a, const MlaRows &rb, uint32_t *q) {
  const int stride = Tile::stride(a.width), words = a.width / 2, pad = stride - 4 - words;
  for (int i = threadIdx.x; i < (Tile::kRows + Tile::kKeys) * pad; i += kMlaThreads)
    q[i / pad * stride + words + i % pad] = 0;
  const int chunks = a.width / 8;
  for (int c = threadIdx.x; c < Tile::kRows * chunks; c += kMlaThreads) {
    const int r = c / chunks, d8 = c % chunks * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    const T *q_rows = static_cast<const T *>(a.q);
    if (r < rb.num_rows) x = *reinterpret_cast<const uint4 *>(q_rows + mla_q_offset(a, rb, r) + d8);
    *reinterpret_cast<uint4 *>(q + r * stride + d8 / 2) = x;
  }
}

// The latents of keys k0 .. k0 + kKeys - 1 into registers (zeros at or past key_end).
template <class C, class Tile>
__device__ __forceinline__ void mla_fetch(const MlaArgs &a, const MlaRows &rb, int k0,
                                          MlaChunk<C> (&raw)[Tile::kFetch]) {
  const int chunks = a.width / 8;
  const int32_t *blocks = a.block_indices + a.block_indptr[rb.seq];
  const C *cache = static_cast<const C *>(a.cache);
#pragma unroll
  for (int i = 0; i < Tile::kFetch; ++i) {
    const int c = threadIdx.x + i * kMlaThreads, j = c / chunks, key = k0 + j;
    raw[i] = MlaChunk<C>{};
    if (j < Tile::kKeys && key < rb.key_end) {
      raw[i] = *reinterpret_cast<const MlaChunk<C> *>(cache + mla_latent_at(a, blocks, key) +
                                                      c % chunks * 8);
    }
  }
}

// The fetched chunks into lat as T (fp8 codes decoded, exactly).
template <class T, class C, class Tile>
__device__ __forceinline__ void mla_stash(const MlaArgs &a, const MlaChunk<C> (&raw)[Tile::kFetch],
                                          uint32_t *lat) {
  const int chunks = a.width / 8, stride = Tile::stride(a.width);
#pragma unroll
  for (int i = 0; i < Tile::kFetch; ++i) {
    const int c = threadIdx.x + i * kMlaThreads, j = c / chunks;
    if (j >= Tile::kKeys) break;
    uint4 x;
    if constexpr (kIsFp8<C>) {
      uint8_t codes[8];
      memcpy(codes, &raw[i], sizeof codes);
      uint16_t b[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) b[e] = to_bits(from_float<T>(fp8_decode<C>(codes[e])));
      x = make_uint4(pack_bits(b[0], b[1]), pack_bits(b[2], b[3]), pack_bits(b[4], b[5]),
                     pack_bits(b[6], b[7]));
    } else {
      x = raw[i];
    }
    *reinterpret_cast<uint4 *>(lat + j * stride + c % chunks * 4) = x;
  }
}

// S of the warp's 16 rows x 8 keys over the width (two accumulator chains), scaled to base 2 and
// masked; each row's max over these keys goes to red.
template <class T, class Tile>
__device__ __forceinline__ void mla_scores(const MlaArgs &a, const MlaRows &rb, const uint32_t *q,
                                           const uint32_t *lat, float *red, const int (&last)[2],
                                           int k0, float score_scale, float (&s)[4]) {
  const int stride = Tile::stride(a.width), steps = (a.width + 15) / 16;
  const int warp = threadIdx.x / 32, rg = warp / Tile::kDimSplits, ds = warp % Tile::kDimSplits;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
  const uint32_t *qr = q + (16 * rg + group) * stride + tig;  // k-step kk: words 8 kk on
  const uint32_t *kr = lat + (8 * ds + group) * stride + tig;
  float s2[4] = {0.f, 0.f, 0.f, 0.f};
  s[0] = s[1] = s[2] = s[3] = 0.f;
  for (int kk = 0; kk < steps; kk += 2) {
    const uint32_t af[4] = {qr[0], qr[8 * stride], qr[4], qr[8 * stride + 4]};
    const uint32_t bf[2] = {kr[0], kr[4]};
    mma_m16n8k16<T>(s, af, bf);
    if (kk + 1 < steps) {
      const uint32_t af2[4] = {qr[8], qr[8 * stride + 8], qr[12], qr[8 * stride + 12]};
      const uint32_t bf2[2] = {kr[8], kr[12]};
      mma_m16n8k16<T>(s2, af2, bf2);
    }
    qr += 16, kr += 16;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = k0 + 8 * ds + 2 * tig + (i & 1);
    const bool seen = key < rb.key_end && key <= last[i >> 1];
    s[i] = seen ? (s[i] + s2[i]) * score_scale : -INFINITY;
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = fmaxf(s[2 * h], s[2 * h + 1]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // the 4 lanes of a row
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    if (tig == 0) red[ds * Tile::kRows + 16 * rg + group + 8 * h] = mx;
  }
}

// The online softmax step of the warp's rows against the maxima of every warp of its row group:
// P (rounded to T) into p, this warp's share of the sums, O rescaled.
template <class T, int RG>
__device__ __forceinline__ void mla_softmax(const float *red, uint32_t *p, MlaWarp<RG> &w,
                                            const float (&s)[4]) {
  using Tile = MlaMmaTile<RG>;
  const int warp = threadIdx.x / 32, rg = warp / Tile::kDimSplits, ds = warp % Tile::kDimSplits;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
  float corr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = 16 * rg + group + 8 * h;
    float m_new = w.m[h];
#pragma unroll
    for (int d = 0; d < Tile::kDimSplits; ++d) m_new = fmaxf(m_new, red[d * Tile::kRows + row]);
    corr[h] = m_new == -INFINITY ? 1.f : exp2f(w.m[h] - m_new);
    const float p0 = m_new == -INFINITY ? 0.f : exp2f(s[2 * h] - m_new);
    const float p1 = m_new == -INFINITY ? 0.f : exp2f(s[2 * h + 1] - m_new);
    w.l[h] = w.l[h] * corr[h] + p0 + p1;
    w.m[h] = m_new;
    p[row * Tile::kPStride + 4 * ds + tig] = pack_rn<T>(p0, p1);
  }
#pragma unroll
  for (int j = 0; j < Tile::kOutTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) w.o[j][i] *= corr[i >> 1];
}

// The halves of two words that hold one column: hi picks the high halves (an odd column).
__device__ __forceinline__ uint32_t mla_column(uint32_t lo_key, uint32_t hi_key, bool hi) {
  return hi ? (lo_key >> 16) | (hi_key & 0xFFFF0000u) : (lo_key & 0xFFFFu) | (hi_key << 16);
}

// O += P V for the warp's rows and output n-tiles; V is lat's first rank columns, read as the B
// fragments' key pairs (two words of consecutive keys, one half each).
template <class T, int RG>
__device__ __forceinline__ void mla_pv(const MlaArgs &a, const uint32_t *p, const uint32_t *lat,
                                       MlaWarp<RG> &w) {
  using Tile = MlaMmaTile<RG>;
  const int stride = Tile::stride(a.width), n_tiles = a.rank / 8;
  const int warp = threadIdx.x / 32, rg = warp / Tile::kDimSplits, ds = warp % Tile::kDimSplits;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
  const bool hi = group & 1;
#pragma unroll
  for (int kk = 0; kk < Tile::kKeys / 16; ++kk) {
    const uint32_t *pr = p + (16 * rg + group) * Tile::kPStride + 8 * kk + tig;
    const uint32_t af[4] = {pr[0], pr[8 * Tile::kPStride], pr[4], pr[8 * Tile::kPStride + 4]};
    const uint32_t *vr = lat + (16 * kk + 2 * tig) * stride + group / 2;
#pragma unroll
    for (int j = 0; j < Tile::kOutTiles; ++j) {
      const int nt = ds + Tile::kDimSplits * j;
      if (nt >= n_tiles) break;
      const uint32_t *v = vr + 4 * nt;
      const uint32_t bf[2] = {mla_column(v[0], v[stride], hi),
                              mla_column(v[8 * stride], v[9 * stride], hi)};
      mma_m16n8k16<T>(w.o[j], af, bf);
    }
  }
}

// The rows' sums over all warps of a row group, then the output (or the split's partial).
template <class T, int RG>
__device__ __forceinline__ void mla_mma_store(const MlaArgs &a, const MlaRows &rb, float *red,
                                              MlaWarp<RG> &w, float v_scale) {
  using Tile = MlaMmaTile<RG>;
  const int warp = threadIdx.x / 32, rg = warp / Tile::kDimSplits, ds = warp % Tile::kDimSplits;
  const int lane = threadIdx.x % 32, group = lane / 4, tig = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.l[h] += __shfl_xor_sync(0xffffffffu, w.l[h], 1);
    w.l[h] += __shfl_xor_sync(0xffffffffu, w.l[h], 2);
    if (tig == 0) red[ds * Tile::kRows + 16 * rg + group + 8 * h] = w.l[h];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * rg + group + 8 * h;
    if (r >= rb.num_rows) continue;
    float l = 0.f;
#pragma unroll
    for (int d = 0; d < Tile::kDimSplits; ++d) l += red[d * Tile::kRows + r];
    const float f = rb.split < 0 ? v_scale / l : v_scale;
#pragma unroll
    for (int j = 0; j < Tile::kOutTiles; ++j) {
      const int nt = ds + Tile::kDimSplits * j;
      if (nt >= a.rank / 8) break;
      mla_put2<T>(a, rb, r, 8 * nt + 2 * tig, w.o[j][2 * h], w.o[j][2 * h + 1], f);
    }
    if (ds == 0 && tig == 0) mla_put_ml(a, rb, r, w.m[h], l);
  }
}

// The whole walk over the CTA's keys, then its output. smem: Tile::smem_bytes(width).
template <class T, class C, int RG>
__device__ __forceinline__ void mla_attend_mma(const MlaArgs &a, const MlaRows &rb,
                                               unsigned char *smem) {
  using Tile = MlaMmaTile<RG>;
  const int stride = Tile::stride(a.width);
  uint32_t *q = reinterpret_cast<uint32_t *>(smem), *lat = q + Tile::kRows * stride;
  uint32_t *p = lat + Tile::kKeys * stride;
  float *red = reinterpret_cast<float *>(p + Tile::kRows * Tile::kPStride);
  const int rg = threadIdx.x / 32 / Tile::kDimSplits, group = threadIdx.x % 32 / 4;
  MlaWarp<RG> w;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    w.last[h] = mla_last_key(a, rb, 16 * rg + group + 8 * h);
    w.m[h] = -INFINITY, w.l[h] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < Tile::kOutTiles; ++j) w.o[j][0] = w.o[j][1] = w.o[j][2] = w.o[j][3] = 0.f;
  float score_scale = a.scale_log2, v_scale = 1.f;
  if constexpr (kIsFp8<C>) score_scale *= a.k_scale[0], v_scale = a.k_scale[0];
  mla_mma_load_q<T, Tile>(a, rb, q);
  MlaChunk<C> raw[Tile::kFetch];
  mla_fetch<C, Tile>(a, rb, rb.key_begin, raw);
  for (int k0 = rb.key_begin; k0 < rb.key_end; k0 += Tile::kKeys) {
    mla_stash<T, C, Tile>(a, raw, lat);
    __syncthreads();
    if (k0 + Tile::kKeys < rb.key_end) mla_fetch<C, Tile>(a, rb, k0 + Tile::kKeys, raw);
    float s[4];
    mla_scores<T, Tile>(a, rb, q, lat, red, w.last, k0, score_scale, s);
    __syncthreads();
    mla_softmax<T, RG>(red, p, w, s);
    __syncthreads();
    mla_pv<T, RG>(a, p, lat, w);
    __syncthreads();
  }
  mla_mma_store<T, RG>(a, rb, red, w, v_scale);
}

}  // namespace pkv::cuda::dev
