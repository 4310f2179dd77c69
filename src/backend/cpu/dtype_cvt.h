// Element conversions for the CPU kernels (f32, f16 as _Float16, bf16 as its bits) and a
// branch-free exp, all written so loops over them vectorize. Included only by cpu_attention.cpp,
// inside its instruction-set variant's namespace: each variant has its own copies, so the linker
// can never hand the baseline code an AVX2 one.
#pragma once

#ifndef PKV_CPU_VARIANT
#error "dtype_cvt.h belongs to cpu_attention.cpp (PKV_CPU_VARIANT)"
#endif

#include <cstdint>
#include <cstring>

namespace pkv {
namespace PKV_CPU_VARIANT {

struct Bf16 {
  uint16_t bits;
};

inline float to_float1(float x) { return x; }
inline float to_float1(_Float16 x) { return static_cast<float>(x); }
inline float to_float1(Bf16 x) {
  uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline void from_float1(float f, float *dst) { *dst = f; }
inline void from_float1(float f, _Float16 *dst) { *dst = static_cast<_Float16>(f); }
inline void from_float1(float f, Bf16 *dst) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // Round to nearest even; a NaN stays a (quiet) NaN.
  const uint16_t rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  dst->bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u) : rounded;
}

template <class T> inline void to_float(const T *src, float *dst, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) dst[i] = to_float1(src[i]);
}

template <class T> inline void from_float_scaled(const float *src, float scale, T *dst, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) from_float1(src[i] * scale, dst + i);
}

// e^x for x <= 0 (softmax arguments), relative error ~2e-7; 0 below -87.
inline float fast_exp(float x) {
  if (x < -87.0f) return 0.0f;  // also keeps the exponent shift below in range
  const float t = x * 1.44269504088896341f;
  const int32_t n = static_cast<int32_t>(t < 0 ? t - 0.5f : t + 0.5f);  // round half away
  const float nf = static_cast<float>(n);
  const float r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.0f;
  const int32_t e = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &e, 4);
  return p * scale;
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
