// The widest float vector of an x86 variant as one type, Lanes: 16 lanes (zmm) with AVX-512 F,
// else 8 (ymm, AVX2 + FMA), and the few operations the prefill kernel's fp32 parts need, exp2
// among them. Included only by the variant sources (PKV_CPU_VARIANT), inside its namespace:
// every variant gets its own copies.
#pragma once

#ifndef PKV_CPU_VARIANT
#error "f32_lanes.h belongs to the CPU kernel variants (PKV_CPU_VARIANT)"
#endif
#if !defined(__AVX2__) || !defined(__FMA__)
#error "f32_lanes.h needs AVX2 and FMA"
#endif

#include <immintrin.h>

#include <cstdint>

namespace pkv {
namespace PKV_CPU_VARIANT {

#if defined(__AVX512F__)
constexpr uint32_t kLanes = 16;
using Lanes = __m512;
using LaneMask = __mmask16;
inline Lanes lanes_load(const float *p) { return _mm512_loadu_ps(p); }
inline void lanes_store(float *p, Lanes v) { _mm512_storeu_ps(p, v); }
inline Lanes lanes_splat(float x) { return _mm512_set1_ps(x); }
inline Lanes lanes_zero() { return _mm512_setzero_ps(); }
inline Lanes lanes_fma(Lanes a, Lanes b, Lanes c) { return _mm512_fmadd_ps(a, b, c); }
inline Lanes lanes_mul(Lanes a, Lanes b) { return _mm512_mul_ps(a, b); }
inline Lanes lanes_add(Lanes a, Lanes b) { return _mm512_add_ps(a, b); }
inline Lanes lanes_sub(Lanes a, Lanes b) { return _mm512_sub_ps(a, b); }
inline Lanes lanes_max(Lanes a, Lanes b) { return _mm512_max_ps(a, b); }
// Lanes where lo <= key <= pos (signed), as a mask.
inline LaneMask lanes_visible(const int32_t *lo, const int32_t *pos, int32_t key) {
  const __m512i k = _mm512_set1_epi32(key);
  return _mm512_cmp_epi32_mask(_mm512_loadu_si512(lo), k, _MM_CMPINT_LE) &
         _mm512_cmp_epi32_mask(_mm512_loadu_si512(pos), k, _MM_CMPINT_NLT);
}
inline Lanes lanes_keep(LaneMask m, Lanes v, Lanes other) {
  return _mm512_mask_blend_ps(m, other, v);
}
inline Lanes lanes_if_eq(Lanes a, Lanes b, Lanes then, Lanes other) {  // a == b ? then : other
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), other, then);
}
#else
constexpr uint32_t kLanes = 8;
using Lanes = __m256;
using LaneMask = __m256;  // all ones where set
inline Lanes lanes_load(const float *p) { return _mm256_loadu_ps(p); }
inline void lanes_store(float *p, Lanes v) { _mm256_storeu_ps(p, v); }
inline Lanes lanes_splat(float x) { return _mm256_set1_ps(x); }
inline Lanes lanes_zero() { return _mm256_setzero_ps(); }
inline Lanes lanes_fma(Lanes a, Lanes b, Lanes c) { return _mm256_fmadd_ps(a, b, c); }
inline Lanes lanes_mul(Lanes a, Lanes b) { return _mm256_mul_ps(a, b); }
inline Lanes lanes_add(Lanes a, Lanes b) { return _mm256_add_ps(a, b); }
inline Lanes lanes_sub(Lanes a, Lanes b) { return _mm256_sub_ps(a, b); }
inline Lanes lanes_max(Lanes a, Lanes b) { return _mm256_max_ps(a, b); }
inline LaneMask lanes_visible(const int32_t *lo, const int32_t *pos, int32_t key) {
  const __m256i k = _mm256_set1_epi32(key);
  const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(lo));
  const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(pos));
  // lo <= key and key <= pos: neither lo > key nor key > pos.
  return _mm256_castsi256_ps(_mm256_andnot_si256(
      _mm256_or_si256(_mm256_cmpgt_epi32(l, k), _mm256_cmpgt_epi32(k, p)), _mm256_set1_epi32(-1)));
}
inline Lanes lanes_keep(LaneMask m, Lanes v, Lanes other) { return _mm256_blendv_ps(other, v, m); }
inline Lanes lanes_if_eq(Lanes a, Lanes b, Lanes then, Lanes other) {
  return _mm256_blendv_ps(other, then, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
}
#endif

// 2^x lane by lane for softmax arguments (x <= 0, -inf allowed): 0 below -125 (no subnormal
// results), NaN for NaN (a NaN score makes its row NaN, as in the fp64 reference and the portable
// path), else within ~2e-7 relative: x = n + f, |f| <= 1/2, 2^f by its Taylor polynomial of
// degree 6 (error below (ln2 / 2)^7 / 7!), times 2^n by the exponent.
inline Lanes lanes_exp2(Lanes x) {
  const Lanes xc =
      lanes_max(lanes_splat(-127.0f), x);  // -inf too; NaN stays (max returns its 2nd operand)
#if defined(__AVX512F__)
  const Lanes n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
  const Lanes n = _mm256_round_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
  const Lanes f = lanes_sub(xc, n);
  Lanes p = lanes_splat(1.5403530393381608e-4f);
  p = lanes_fma(p, f, lanes_splat(1.3333558146428443e-3f));
  p = lanes_fma(p, f, lanes_splat(9.6181291076284772e-3f));
  p = lanes_fma(p, f, lanes_splat(5.5504108664821580e-2f));
  p = lanes_fma(p, f, lanes_splat(2.4022650695910071e-1f));
  p = lanes_fma(p, f, lanes_splat(6.9314718055994531e-1f));
  p = lanes_fma(p, f, lanes_splat(1.0f));
#if defined(__AVX512F__)
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(xc, lanes_splat(-125.0f), _CMP_NLT_UQ), p, n);
#else
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)),
                       _mm256_cmp_ps(xc, lanes_splat(-125.0f), _CMP_NLT_UQ));
#endif
}

// Logit soft-capping, lane by lane: c tanh(x / c) for a cap c > 0 in x's units (inv_c = 1 / c).
// tanh(y) = sign(y) (1 - e) / (1 + e) with e = 2^(-2 |y| log2 e) by lanes_exp2: for large |y|, e
// is 0 and the result c exactly; near 0 the difference 1 - e costs the result ~2e-7 c absolute
// (the exponential's error), against std::tanh. NaN stays NaN.
inline Lanes lanes_softcap(Lanes x, Lanes c, Lanes inv_c) {
  const Lanes y = lanes_mul(x, inv_c);
#if defined(__AVX512F__)
  const __m512i sign = _mm512_set1_epi32(int32_t(0x80000000u));
  const Lanes a = _mm512_castsi512_ps(_mm512_andnot_epi32(sign, _mm512_castps_si512(y)));
  const Lanes e = lanes_exp2(lanes_mul(a, lanes_splat(-2.0f * 1.4426950408889634f)));
  const Lanes t =
      lanes_mul(c, _mm512_div_ps(lanes_sub(lanes_splat(1.0f), e), lanes_add(lanes_splat(1.0f), e)));
  return _mm512_castsi512_ps(
      _mm512_or_epi32(_mm512_castps_si512(t), _mm512_and_epi32(sign, _mm512_castps_si512(y))));
#else
  const Lanes sign = _mm256_set1_ps(-0.0f);
  const Lanes a = _mm256_andnot_ps(sign, y);
  const Lanes e = lanes_exp2(lanes_mul(a, lanes_splat(-2.0f * 1.4426950408889634f)));
  const Lanes t =
      lanes_mul(c, _mm256_div_ps(lanes_sub(lanes_splat(1.0f), e), lanes_add(lanes_splat(1.0f), e)));
  return _mm256_or_ps(t, _mm256_and_ps(sign, y));
#endif
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
