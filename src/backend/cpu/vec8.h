// Eight-lane float vectors (GCC/Clang vector extensions): one AVX2 register in the v3 variant,
// two SSE registers in the baseline, NEON pairs on ARM. Loads convert from the KV dtypes (fp8:
// fp8.h). Like dtype_cvt.h, included only by cpu_attention.cpp inside its variant's namespace.
#pragma once

#ifndef PKV_CPU_VARIANT
#error "vec8.h belongs to cpu_attention.cpp (PKV_CPU_VARIANT)"
#endif

#include <cstdint>
#include <cstring>
#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace pkv {
namespace PKV_CPU_VARIANT {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint8_t v8u8 __attribute__((vector_size(8)));

inline v8f splat(float x) { return v8f{x, x, x, x, x, x, x, x}; }
inline v8i splat_i(int32_t x) { return v8i{x, x, x, x, x, x, x, x}; }
inline v8f load8(const float *p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float *p, v8f v) { std::memcpy(p, &v, sizeof v); }
inline v8f as_float(v8u u) {
  v8f f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline v8u as_bits(v8f f) {
  v8u u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float hsum(v8f v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Eight elements of a KV dtype as floats.
inline v8f load8(const Bf16 *p) {
  v8u16 h;
  std::memcpy(&h, p, sizeof h);
  const v8i bits = __builtin_convertvector(h, v8i) << 16;
  v8f f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline v8f load8(const _Float16 *p) {
#if defined(__F16C__)
  const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  v8f f;
  std::memcpy(&f, &v, sizeof f);
  return f;
#else
  v8f f;
  for (int i = 0; i < 8; ++i) f[i] = static_cast<float>(p[i]);
  return f;
#endif
}

// Eight bytes, zero-extended to 32-bit lanes, and back (values <= 255). Spelled with intrinsics
// on x86: GCC turns __builtin_convertvector of an 8-byte vector into byte-by-byte moves.
inline v8u load8_u8(const uint8_t *p) {
  v8u v;
#if defined(__AVX2__)
  const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
  std::memcpy(&v, &w, sizeof v);
#elif defined(__SSE2__)
  const __m128i z = _mm_setzero_si128();
  const __m128i h = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)), z);
  const __m128i halves[2] = {_mm_unpacklo_epi16(h, z), _mm_unpackhi_epi16(h, z)};
  std::memcpy(&v, halves, sizeof v);
#else
  v8u8 b;
  std::memcpy(&b, p, sizeof b);
  v = __builtin_convertvector(b, v8u);
#endif
  return v;
}
inline void store8_u8(uint8_t *p, v8u v) {
#if defined(__SSE2__)
  __m128i halves[2];
  std::memcpy(halves, &v, sizeof v);
  const __m128i w = _mm_packs_epi32(halves[0], halves[1]);  // lanes <= 255: no saturation
  _mm_storel_epi64(reinterpret_cast<__m128i *>(p), _mm_packus_epi16(w, w));
#else
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v[i]);
#endif
}

// e^x lane by lane for softmax arguments (x <= 0, -inf allowed): 0 below -87, rel. error ~2e-7.
inline v8f exp8(v8f x) {
  const v8f lo = splat(-87.0f);
  const v8f xc = x < lo ? lo : x;  // clamped: the exponent bits below stay in range
  const v8f t = xc * 1.44269504088896341f;
  const v8i n = __builtin_convertvector(t + (t < 0.0f ? splat(-0.5f) : splat(0.5f)), v8i);
  const v8f nf = __builtin_convertvector(n, v8f);
  const v8f r = (xc - nf * 0.693359375f) + nf * 2.12194440e-4f;
  v8f p = splat(1.9875691500E-4f);
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const v8i e = (n + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &e, sizeof scale);
  return x < lo ? splat(0.0f) : p * scale;
}

// e^x of one softmax argument (a rescale factor): a lane of exp8, so the scalar and vector paths
// round alike and the polynomial lives in one place.
inline float fast_exp(float x) { return exp8(splat(x))[0]; }

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
