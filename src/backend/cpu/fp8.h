// fp8 KV (OCP e4m3fn and e5m2, dtype_cvt.h) on eight lanes: write_kv's rounding and attention's
// conversion to floats, both by bit arithmetic. Like vec8.h, included only by cpu_attention.cpp
// inside its variant's namespace.
//
// Encoding matches tests/common/attention_ref.c's pkv_ref_fp8_encode bit for bit: the nearest
// code of y (ties to the even code), the largest finite for |y| >= the largest finite, NaN ->
// 0x7F, the sign kept (-0 and negatives that round to zero give 0x80).
// Decoding is exact: a code's value is a float. Measured converting 2 KiB of e4m3 codes in L1,
// times a scale, on this project's Zen 4 machine (best of 5): AVX2 variant through F16C 0.076 ns
// per element (a bf16 row: 0.073), the portable bit path 0.19, a 256-entry table 0.41 scalar and
// 0.38 gathered; baseline variant (SSE2) bits 0.43, table 0.43 (bf16: 0.07).
#pragma once

#ifndef PKV_CPU_VARIANT
#error "fp8.h belongs to cpu_attention.cpp (PKV_CPU_VARIANT)"
#endif

#include <cfloat>
#include <cstdint>

#include "backend/cpu/dtype_cvt.h"
#include "backend/cpu/vec8.h"

namespace pkv {
namespace PKV_CPU_VARIANT {

// Masks and selects by integer arithmetic: GCC scalarizes comparisons and ?: of 8-lane integer
// vectors on SSE2 (the baseline variant), lane by lane. All ones where a < b, else 0, for
// a, b in [0, 2^31) (the difference cannot overflow).
inline v8i less(v8i a, v8i b) { return (a - b) >> 31; }
inline v8i less(v8i a, int32_t b) { return (a - b) >> 31; }
// Lanes of b where mask (all ones or zero per lane) is set, else of a.
inline v8i select(v8i mask, v8i b, v8i a) { return (mask & b) | (~mask & a); }
constexpr int32_t float_bits(float f) { return __builtin_bit_cast(int32_t, f); }

// The codes (0 .. 255 per lane) of y.
template <class C> inline v8u fp8_encode8(v8f y) {
  constexpr int kShift = 23 - C::kMan;  // float mantissa bits that go
  constexpr int32_t kRebias = int32_t(127 - C::kBias) << C::kMan;
  constexpr float kMinNormal = 1.0f / float(1u << (C::kBias - 1));   // 2^(1 - bias)
  constexpr float kSubUnit = float(1u << (C::kBias + C::kMan - 1));  // 1 / subnormal step
  const v8i bits = v8i(as_bits(y)), abs = bits & 0x7fffffff;
  const v8f a = as_float(v8u(abs));
  // Normal codes: float's exponent and mantissa rounded to kMan bits, nearest even (a carry
  // moves into the exponent, as it should), then rebiased. No lane overflows: abs < 2^31 - 2^22.
  const v8i normal =
      ((abs + ((1 << (kShift - 1)) - 1) + ((abs >> kShift) & 1)) >> kShift) - kRebias;
  // Subnormal codes are the count of subnormal steps: a * kSubUnit is exact (a power of two,
  // below 2^kMan + 1), and adding 2^23 rounds it to an integer, nearest even. The largest rounds
  // to the smallest normal's code, as it should.
  const v8i sub = v8i(as_bits(a * kSubUnit + 8388608.0f)) - 0x4b000000;
  v8i code = select(less(abs, float_bits(kMinNormal)), sub, normal);
  code = select(~less(abs, float_bits(C::kMax)), splat_i(C::kMaxCode), code);  // saturation, +-inf
  code |= (bits >> 24) & 0x80;
  return v8u(select(less(splat_i(0x7f800000), abs), splat_i(0x7f), code));  // NaN
}

// The values of eight codes (0 .. 255 per lane), by bits: exponent and mantissa moved into
// float's fields and rebiased; a subnormal code (exponent 0) is its mantissa times the
// subnormal step; e4m3's NaN (S.1111.111) and e5m2's inf/NaN (S.11111.xx) get float's
// all-ones exponent (mantissa 0: inf, else NaN).
template <class C> inline v8f fp8_decode8(v8u codes) {
  constexpr int32_t kRebias = int32_t(127 - C::kBias) << 23;
  constexpr float kSubStep = 1.0f / float(1u << (C::kBias + C::kMan - 1));
  const v8i c = v8i(codes), mag = c & 0x7f;
  const v8i normal = (mag << (23 - C::kMan)) + kRebias;
  const v8i sub = v8i(as_bits(__builtin_convertvector(mag, v8f) * kSubStep));
  const v8i special = ~less(mag, C::kMan == 3 ? 0x7f : 0x7c);
  const v8i bits =
      select(less(mag, 1 << C::kMan), sub, normal) | (special & 0x7f800000) | ((c & 0x80) << 24);
  return as_float(v8u(bits));
}

// n codes (a multiple of 8) to floats times scale.
template <class C> inline void fp8_row_portable(const C *src, float *dst, uint32_t n, float scale) {
  const v8f s = splat(scale);
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, fp8_decode8<C>(load8_u8(&src[d].bits)) * s);
}

#if defined(__F16C__)
// F16C converts halves exactly, subnormals included. e5m2 is the upper byte of a half; e4m3
// moved into a half's fields reads 2^-8 of its value (half's bias is 8 more) and its NaN code
// reads 1.875: NaNs are put back after (rare: only a NaN input is stored as one).
inline __m128i fp8_halves(__m128i bytes_in_high, bool e4m3) {
  // S.EEEE.MMM.00000000 -> S.0EEEE.MMM0000000: arithmetic shift copies the sign, the mask drops it.
  return e4m3 ? _mm_and_si128(_mm_srai_epi16(bytes_in_high, 1), _mm_set1_epi16(short(0xbfff)))
              : bytes_in_high;
}

inline void store_halves(float *dst, __m128i halves, __m256 mult) {
  _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtph_ps(halves), mult));
}

template <class C> inline void fp8_row(const C *src, float *dst, uint32_t n, float scale) {
  constexpr bool kE4M3 = C::kMan == 3;
  const float mult = kE4M3 ? scale * 256.0f : scale;
  if (!(mult <= FLT_MAX)) return fp8_row_portable(src, dst, n, scale);  // a scale above 2^120
  const __m256 m = _mm256_set1_ps(mult);
  const __m128i zero = _mm_setzero_si128(), nan = _mm_set1_epi8(char(0xff)),
                sign = _mm_set1_epi8(char(0x80));
  const uint8_t *p = &src[0].bits;
  uint32_t d = 0;
  for (; d + 16 <= n; d += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + d));
    store_halves(dst + d, fp8_halves(_mm_unpacklo_epi8(zero, x), kE4M3), m);
    store_halves(dst + d + 8, fp8_halves(_mm_unpackhi_epi8(zero, x), kE4M3), m);
    if (kE4M3 &&
        __builtin_expect(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_or_si128(x, sign), nan)) != 0, 0))
      for (int i = 0; i < 16; ++i)
        if ((p[d + i] & 0x7f) == 0x7f) dst[d + i] = __builtin_nanf("");
  }
  if (d < n) {  // eight left (n is a multiple of 8)
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p + d));
    store_halves(dst + d, fp8_halves(_mm_unpacklo_epi8(zero, x), kE4M3), m);
    if (kE4M3)
      for (int i = 0; i < 8; ++i)
        if ((p[d + i] & 0x7f) == 0x7f) dst[d + i] = __builtin_nanf("");
  }
}
#else
template <class C> inline void fp8_row(const C *src, float *dst, uint32_t n, float scale) {
  fp8_row_portable(src, dst, n, scale);
}
#endif

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
