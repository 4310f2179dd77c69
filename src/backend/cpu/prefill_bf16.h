// The prefill kernel's bf16 engine (cpu_prefill.cpp): vdpbf16ps micro-kernels on pair-interleaved
// ("VNNI") operands, for bf16 models over bf16 or fp8 caches (fp8 codes are exact in bf16).
#pragma once

#ifndef PKV_CPU_VARIANT
#error "prefill_bf16.h belongs to the CPU kernel variants (PKV_CPU_VARIANT)"
#endif
#if !defined(__AVX512BF16__) || !defined(__AVX512BW__)
#error "prefill_bf16.h needs AVX-512 BF16"
#endif

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cpu/prefill_tile.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
// Internal linkage: only cpu_prefill.cpp includes this, and no other file of the variant may
// see (or clash with) these names.
namespace {

constexpr int kDpQueries = 2, kDpKeys = 8;      // S: 2 x 16 query vectors x 8 keys
constexpr int kDpPvQueries = 4, kDpPvVecs = 4;  // O: 4 query vectors x 64 of head_dim

// The same bits as another vector type.
template <class To, class From> inline To vcast(From f) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
inline __m512bh as_bh(__m512i x) { return vcast<__m512bh>(x); }

// s[key][query] = sum over pairs p of qp[p][query] . k[key][p] (bf16 pairs, fp32 sums).
template <int QB, int KB>
inline void qk_bf16(const uint32_t *qp, uint32_t rgp, const uint32_t *k, uint32_t pairs, float *s) {
  __m512 acc[KB][QB];
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) acc[j][b] = _mm512_setzero_ps();
  for (uint32_t p = 0; p < pairs; ++p) {
    __m512bh q[QB];
    for (int b = 0; b < QB; ++b) q[b] = as_bh(_mm512_loadu_si512(qp + size_t(p) * rgp + b * 16));
    for (int j = 0; j < KB; ++j) {
      const __m512bh kj = as_bh(_mm512_set1_epi32(int32_t(k[size_t(j) * pairs + p])));
      for (int b = 0; b < QB; ++b) acc[j][b] = _mm512_dpbf16_ps(acc[j][b], q[b], kj);
    }
  }
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) _mm512_storeu_ps(s + size_t(j) * rgp + b * 16, acc[j][b]);
}

// o[query][d] = o * alpha + sum over key pairs u of pp[u][query] . vp[u][d].
template <int QI, int DV>
inline void pv_bf16(const uint32_t *pp, uint32_t rgp, const uint32_t *vp, uint32_t hdp,
                    uint32_t pairs, const float *alpha, float *o) {
  __m512 acc[QI][DV];
  for (int i = 0; i < QI; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int c = 0; c < DV; ++c)
      acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(o + size_t(i) * hdp + c * 16), a);
  }
  for (uint32_t u = 0; u < pairs; ++u) {
    __m512bh vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = as_bh(_mm512_loadu_si512(vp + size_t(u) * hdp + c * 16));
    for (int i = 0; i < QI; ++i) {
      const __m512bh pi = as_bh(_mm512_set1_epi32(int32_t(pp[size_t(u) * rgp + i])));
      for (int c = 0; c < DV; ++c) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], pi, vv[c]);
    }
  }
  for (int i = 0; i < QI; ++i)
    for (int c = 0; c < DV; ++c) _mm512_storeu_ps(o + size_t(i) * hdp + c * 16, acc[i][c]);
}

template <int QI>
inline void pv_bf16_rows(const uint32_t *pp, uint32_t rgp, const uint32_t *vp, uint32_t hdp,
                         uint32_t pairs, const float *alpha, float *o) {
  uint32_t d = 0;
  for (; d + kDpPvVecs * 16 <= hdp; d += kDpPvVecs * 16)
    pv_bf16<QI, kDpPvVecs>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
  switch ((hdp - d) / 16) {
    case 3:
      return pv_bf16<QI, 3>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    case 2:
      return pv_bf16<QI, 2>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    case 1:
      return pv_bf16<QI, 1>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    default:
      return;
  }
}

// r[k] (k < 16): row k of a 16 x 16 matrix of 32-bit elements; on return r[k] is its column k.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int k = 0; k < 8; ++k) {  // pairs of rows interleaved within each 128-bit lane
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4;
       ++k) {  // then each 128-bit lane of r[4k + j] holds column 4 lane + j of rows 4k .. 4k + 3
    r[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // gather the 4 x 4 blocks of each column from the 4 registers
    const __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88),
                  b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88),
                  d = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(a, c, 0xdd);
    t[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
  for (int k = 0; k < 16; ++k) r[k] = t[k];
}

// Word indices for vpermw: lanes w of the result take x[w / 2] (even w) or y[w / 2] (odd), where
// (x, y) are the two 16-word halves of one register (kInterleave) or words [base, base + 16) of
// two registers (permutex2var: y's words are numbered from 32).
inline __m512i interleave_index(int x0, int y0) {
  alignas(64) int16_t idx[32];
  for (int w = 0; w < 32; ++w) idx[w] = int16_t(w % 2 ? y0 + w / 2 : x0 + w / 2);
  return _mm512_load_si512(idx);
}

template <class C> struct Bf16Engine {
  uint32_t *qp, *k, *pp,
      *vp;  // [hd/2][rgp] query pairs; [chunk][hd/2] keys; [chunk/2][rgp] P pairs; [chunk/2][hdp] V pairs
  float *s, *row_a, *row_b;  // [chunk][rgp] scores; two rows of widep floats (fp8 conversion)
  __m512i halves, lo_pairs, hi_pairs;

  static size_t floats(const Tile &t, uint32_t chunk) {
    return size_t(t.hd / 2) * t.rgp + size_t(chunk) * t.hd / 2 + size_t(chunk / 2) * t.rgp +
           size_t(chunk / 2) * t.hdp + size_t(chunk) * t.rgp + 2 * size_t(t.widep) + 96;
  }
  void carve(Arena &a, const Tile &t) {
    qp = reinterpret_cast<uint32_t *>(a.take(size_t(t.hd / 2) * t.rgp));
    k = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk) * t.hd / 2));
    pp = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk / 2) * t.rgp));
    vp = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk / 2) * t.hdp));
    s = a.take(size_t(t.chunk) * t.rgp);
    row_a = a.take(t.widep);
    row_b = a.take(t.widep);
    halves = interleave_index(0, 16);
    lo_pairs = interleave_index(0, 32);
    hi_pairs = interleave_index(16, 48);
  }
  // Query pairs, 16 queries x 16 pairs at a time: 16 rows in, transposed, 16 rows out.
  void pack_q(const Tile &t, const Bf16 *q, size_t q_stride, float *) {
    const uint32_t pairs = t.hd / 2;
    for (uint32_t i0 = 0; i0 < t.rgp; i0 += 16)
      for (uint32_t p0 = 0; p0 < pairs; p0 += 16) {
        const __mmask16 m =
            pairs - p0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (pairs - p0)) - 1);
        __m512i r[16];
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t i = i0 + k;
          r[k] = i < t.rg ? _mm512_maskz_loadu_epi32(m, q + (i / t.group) * q_stride +
                                                            size_t(i % t.group) * t.hd + 2 * p0)
                          : _mm512_setzero_si512();
        }
        transpose16(r);
        for (uint32_t k = 0; k < 16 && p0 + k < pairs; ++k)
          _mm512_storeu_si512(qp + size_t(p0 + k) * t.rgp + i0, r[k]);
      }
  }
  // dst = src * scale rounded to bf16 (nearest even), n a multiple of 8.
  static void store_out(const float *src, float scale, Bf16 *dst, uint32_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    for (uint32_t d = 0; d < n; d += 16) {
      const __m256i b =
          vcast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + d), s)));
      _mm256_mask_storeu_epi16(dst + d,
                               n - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - d)) - 1), b);
    }
  }
  // Floats (zero past hd) to bf16 (exact for fp8 values), 16 at a time.
  static void f32_to_bf16(const float *src, uint32_t hd, uint16_t *dst) {
    for (uint32_t d = 0; d < hd; d += 16) {
      const __m256i b = vcast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + d)));
      _mm256_mask_storeu_epi16(
          dst + d, hd - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hd - d)) - 1), b);
    }
  }
  void load_k(const C *const *rows, uint32_t n, const Tile &t) {
    const uint32_t nk = round_up(n, kDpKeys), pairs = t.hd / 2;
    for (uint32_t j = 0; j < n; ++j) {
      uint16_t *dst = reinterpret_cast<uint16_t *>(k + size_t(j) * pairs);
      if constexpr (kIsFp8<C>) {
        to_f32(rows[j], row_a, t.hd);
        f32_to_bf16(row_a, t.hd, dst);
      } else {
        std::memcpy(dst, rows[j], t.hd * sizeof(Bf16));
      }
    }
    fill_range(k + size_t(n) * pairs, k + size_t(nk) * pairs, 0u);
  }
  void scores(Tile &t, uint32_t n) {
    const uint32_t nk = round_up(n, kDpKeys), pairs = t.hd / 2;
    uint32_t i = 0;
    for (; i + kDpQueries * 16 <= t.rgp; i += kDpQueries * 16)
      for (uint32_t j = 0; j < nk; j += kDpKeys)
        qk_bf16<kDpQueries, kDpKeys>(qp + i, t.rgp, k + size_t(j) * pairs, pairs,
                                     s + size_t(j) * t.rgp + i),
            t.pf.step();
    for (; i < t.rgp; i += 16)
      for (uint32_t j = 0; j < nk; j += kDpKeys)
        qk_bf16<1, kDpKeys>(qp + i, t.rgp, k + size_t(j) * pairs, pairs, s + size_t(j) * t.rgp + i),
            t.pf.step();
  }
  static uint32_t score_calls(const Tile &t, uint32_t n) {
    return (t.rgp / (kDpQueries * 16) + t.rgp % (kDpQueries * 16) / 16) *
           (round_up(n, kDpKeys) / kDpKeys);
  }
  // P = 2^(s - m) rounded to bf16, packed in key pairs; l sums the rounded values.
  void probs(Tile &t, uint32_t n, uint32_t i0, Lanes m_use) {
    Lanes sum = lanes_zero();
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    for (uint32_t j = 0; j < n; j += 2) {
      const Lanes p0 = lanes_exp2(lanes_sub(lanes_load(s + size_t(j) * t.rgp + i0), m_use));
      const Lanes p1 =
          j + 1 < n ? lanes_exp2(lanes_sub(lanes_load(s + size_t(j + 1) * t.rgp + i0), m_use))
                    : lanes_zero();
      const __m512bh both = _mm512_cvtne2ps_pbh(p1, p0);  // p0's 16 words, then p1's
      const __m512i pairs = _mm512_permutexvar_epi16(halves, vcast<__m512i>(both));
      _mm512_storeu_si512(pp + size_t(j / 2) * t.rgp + i0, pairs);
      sum = lanes_add(sum, _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)));
      sum = lanes_add(sum, _mm512_castsi512_ps(_mm512_and_si512(pairs, high)));
    }
    lanes_store(t.l + i0, lanes_fma(lanes_load(t.l + i0), lanes_load(t.alpha + i0), sum));
  }
  // V rows 2u and 2u + 1 (b: nullptr past the chunk's end; their first vd values) into vp[u].
  void pack_v_pair(const C *a, const C *b, const Tile &t, uint32_t *dst) {
    if constexpr (kIsFp8<C>) {
      to_f32(a, row_a, t.vd);
      fill_range(row_a + t.vd, row_a + t.hdp, 0.0f);
      if (b) to_f32(b, row_b, t.vd);
      fill_range(row_b + (b ? t.vd : 0), row_b + t.hdp, 0.0f);
      for (uint32_t d = 0; d < t.hdp; d += 16) {
        const __m512bh both =
            _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row_b + d), _mm512_loadu_ps(row_a + d));
        _mm512_storeu_si512(dst + d, _mm512_permutexvar_epi16(halves, vcast<__m512i>(both)));
      }
    } else {
      for (uint32_t d = 0; d < t.hdp; d += 32) {
        const uint32_t left = t.vd > d ? t.vd - d : 0;
        const __mmask32 m = left >= 32 ? ~__mmask32(0) : __mmask32((1u << left) - 1);
        const __m512i x = _mm512_maskz_loadu_epi16(m, a + d);
        const __m512i y = b ? _mm512_maskz_loadu_epi16(m, b + d) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + d, _mm512_permutex2var_epi16(x, lo_pairs, y));
        if (d + 16 < t.hdp)
          _mm512_storeu_si512(dst + d + 16, _mm512_permutex2var_epi16(x, hi_pairs, y));
      }
    }
  }
  void load_v(const C *const *rows, uint32_t n, const Tile &t) {
    for (uint32_t j = 0; j < n; j += 2)
      pack_v_pair(rows[j], j + 1 < n ? rows[j + 1] : nullptr, t, vp + size_t(j / 2) * t.hdp);
  }
  void accumulate(Tile &t, uint32_t n) {
    const uint32_t pairs = (n + 1) / 2;
    for (uint32_t i = 0; i < t.rgp; i += kDpPvQueries)
      pv_bf16_rows<kDpPvQueries>(pp + i, t.rgp, vp, t.hdp, pairs, t.alpha + i,
                                 t.o + size_t(i) * t.hdp);
  }
};

}  // namespace
}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
