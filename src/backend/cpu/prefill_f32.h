// The prefill kernel's fp32 engine (cpu_prefill.cpp): FMA micro-kernels on K and V chunks
// converted to floats, lanes of the variant's widest vector (f32_lanes.h). Runs f16 models in
// every x86 variant, and bf16 models where vdpbf16ps is missing.
#pragma once

#ifndef PKV_CPU_VARIANT
#error "prefill_f32.h belongs to the CPU kernel variants (PKV_CPU_VARIANT)"
#endif
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "prefill_f32.h needs AVX2, FMA and F16C"
#endif

#include <algorithm>
#include <cstdint>

#include "backend/cpu/prefill_tile.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
// Internal linkage: only cpu_prefill.cpp includes this, and no other file of the variant may
// see (or clash with) these names.
namespace {

#if defined(__AVX512F__)
constexpr int kQkQueries = 2, kQkKeys = 8;  // S micro-kernel: 2 x 16 query vectors x 8 keys
constexpr int kPvQueries = 4, kPvVecs = 4;  // O micro-kernel: 4 query vectors x 64 of head_dim
#else
constexpr int kQkQueries = 2, kQkKeys = 4;  // 2 x 8 x 4: 8 accumulators of 16 registers
constexpr int kPvQueries = 4, kPvVecs = 2;
#endif

// s[key][query] = sum over d of qt[d][query] * k[key][d], for QB x kLanes queries and KB keys.
template <int QB, int KB>
inline void qk_f32(const float *qt, uint32_t rgp, const float *k, uint32_t hd, float *s) {
  Lanes acc[KB][QB];
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) acc[j][b] = lanes_zero();
  for (uint32_t d = 0; d < hd; ++d) {
    Lanes q[QB];
    for (int b = 0; b < QB; ++b) q[b] = lanes_load(qt + size_t(d) * rgp + b * kLanes);
    for (int j = 0; j < KB; ++j) {
      const Lanes kj = lanes_splat(k[size_t(j) * hd + d]);
      for (int b = 0; b < QB; ++b) acc[j][b] = lanes_fma(q[b], kj, acc[j][b]);
    }
  }
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) lanes_store(s + size_t(j) * rgp + b * kLanes, acc[j][b]);
}

// o[query][d] = o * alpha[query] + sum over keys of p[key][query] * v[key][d], for QI queries and
// DV x kLanes of head_dim.
template <int QI, int DV>
inline void pv_f32(const float *p, uint32_t rgp, const float *v, uint32_t hdp, uint32_t n,
                   const float *alpha, float *o) {
  Lanes acc[QI][DV];
  for (int i = 0; i < QI; ++i) {
    const Lanes a = lanes_splat(alpha[i]);
    for (int c = 0; c < DV; ++c)
      acc[i][c] = lanes_mul(lanes_load(o + size_t(i) * hdp + c * kLanes), a);
  }
  for (uint32_t j = 0; j < n; ++j) {
    Lanes vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = lanes_load(v + size_t(j) * hdp + c * kLanes);
    for (int i = 0; i < QI; ++i) {
      const Lanes pi = lanes_splat(p[size_t(j) * rgp + i]);
      for (int c = 0; c < DV; ++c) acc[i][c] = lanes_fma(pi, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < QI; ++i)
    for (int c = 0; c < DV; ++c) lanes_store(o + size_t(i) * hdp + c * kLanes, acc[i][c]);
}

template <int QI>
inline void pv_f32_rows(const float *p, uint32_t rgp, const float *v, uint32_t hdp, uint32_t n,
                        const float *alpha, float *o) {
  uint32_t d = 0;
  for (; d + kPvVecs * kLanes <= hdp; d += kPvVecs * kLanes)
    pv_f32<QI, kPvVecs>(p, rgp, v + d, hdp, n, alpha, o + d);
  switch ((hdp - d) / kLanes) {
    case 3:
      return pv_f32<QI, 3>(p, rgp, v + d, hdp, n, alpha, o + d);
    case 2:
      return pv_f32<QI, 2>(p, rgp, v + d, hdp, n, alpha, o + d);
    case 1:
      return pv_f32<QI, 1>(p, rgp, v + d, hdp, n, alpha, o + d);
    default:
      return;
  }
}

// T: the model's dtype (q, out); C: the cache's.
template <class T, class C> struct F32Engine {
  float *qt, *k, *s,
      *v;  // [hd][rgp] queries; [chunk][hd] keys; [chunk][rgp] scores, then P; [chunk][hdp] values

  static size_t floats(const Tile &t, uint32_t chunk) {
    return size_t(t.hd) * t.rgp + size_t(chunk) * t.hd + size_t(chunk) * t.rgp +
           size_t(chunk) * t.hdp + 64;
  }
  void carve(Arena &a, const Tile &t) {
    qt = a.take(size_t(t.hd) * t.rgp);
    k = a.take(size_t(t.chunk) * t.hd);
    s = a.take(size_t(t.chunk) * t.rgp);
    v = a.take(size_t(t.chunk) * t.hdp);
  }
  // q: the tile's first row; rows `q_stride` apart, each holding the group's q heads.
  void pack_q(const Tile &t, const T *q, size_t q_stride, float *row) {
    fill_range(qt, qt + size_t(t.hd) * t.rgp, 0.0f);
    for (uint32_t r = 0; r < t.rows; ++r)
      for (uint32_t g = 0; g < t.group; ++g) {
        to_f32(q + r * q_stride + size_t(g) * t.hd, row, t.hd);
        const uint32_t i = r * t.group + g;
        for (uint32_t d = 0; d < t.hd; ++d) qt[size_t(d) * t.rgp + i] = row[d];
      }
  }
  static void store_out(const float *src, float scale, T *dst, uint32_t n) {
    from_float_scaled(src, scale, dst, n);
  }
  void load_k(const C *const *rows, uint32_t n, const Tile &t) {
    const uint32_t nk = round_up(n, kQkKeys);
    for (uint32_t j = 0; j < n; ++j) to_f32(rows[j], k + size_t(j) * t.hd, t.hd);
    fill_range(k + size_t(n) * t.hd, k + size_t(nk) * t.hd, 0.0f);
  }
  void scores(Tile &t, uint32_t n) {
    const uint32_t nk = round_up(n, kQkKeys);
    uint32_t i = 0;
    for (; i + kQkQueries * kLanes <= t.rgp; i += kQkQueries * kLanes)
      for (uint32_t j = 0; j < nk; j += kQkKeys)
        qk_f32<kQkQueries, kQkKeys>(qt + i, t.rgp, k + size_t(j) * t.hd, t.hd,
                                    s + size_t(j) * t.rgp + i),
            t.pf.step();
    for (; i < t.rgp; i += kLanes)
      for (uint32_t j = 0; j < nk; j += kQkKeys)
        qk_f32<1, kQkKeys>(qt + i, t.rgp, k + size_t(j) * t.hd, t.hd, s + size_t(j) * t.rgp + i),
            t.pf.step();
  }
  static uint32_t score_calls(const Tile &t, uint32_t n) {
    return (t.rgp / (kQkQueries * kLanes) + t.rgp % (kQkQueries * kLanes) / kLanes) *
           (round_up(n, kQkKeys) / kQkKeys);
  }
  // P = 2^(s - m) in place; l = l * alpha + the chunk's sum.
  void probs(Tile &t, uint32_t n, uint32_t i0, Lanes m_use) {
    Lanes sum = lanes_zero();
    for (uint32_t j = 0; j < n; ++j) {
      float *row = s + size_t(j) * t.rgp + i0;
      const Lanes p = lanes_exp2(lanes_sub(lanes_load(row), m_use));
      lanes_store(row, p);
      sum = lanes_add(sum, p);
    }
    lanes_store(t.l + i0, lanes_fma(lanes_load(t.l + i0), lanes_load(t.alpha + i0), sum));
  }
  void load_v(const C *const *rows, uint32_t n, const Tile &t) {
    for (uint32_t j = 0; j < n; ++j) {
      float *dst = v + size_t(j) * t.hdp;
      to_f32(rows[j], dst, t.vd);
      fill_range(dst + t.vd, dst + t.hdp, 0.0f);
    }
  }
  void accumulate(Tile &t, uint32_t n) {
    for (uint32_t i = 0; i < t.rgp; i += kPvQueries)
      pv_f32_rows<kPvQueries>(s + i, t.rgp, v, t.hdp, n, t.alpha + i, t.o + size_t(i) * t.hdp);
  }
};

}  // namespace
}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
