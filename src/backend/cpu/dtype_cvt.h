// The KV dtypes of the CPU kernels (f32, f16 as _Float16, bf16 as its bits, fp8 e4m3 / e5m2 as
// their codes) and the stores that round floats to them, written so loops over them vectorize
// (the loads are vec8.h's load8 and load_fp8). Included only by cpu_attention.cpp, inside its
// instruction-set variant's namespace: each variant has its own copies, so the linker can never
// hand the baseline code an AVX2 one.
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

// OCP fp8: sign, exponent, mantissa bits. e4m3fn: bias 7, no infinities, S.1111.111 is NaN,
// largest finite 448 (0x7E). e5m2: bias 15, IEEE-like (S.11111.00 inf, S.11111.xx NaN), largest
// finite 57344 (0x7B).
struct Fp8E4M3 {
  uint8_t bits;
  static constexpr int kMan = 3, kBias = 7;
  static constexpr uint32_t kMaxCode = 0x7E;
  static constexpr float kMax = 448.0f;
};
struct Fp8E5M2 {
  uint8_t bits;
  static constexpr int kMan = 2, kBias = 15;
  static constexpr uint32_t kMaxCode = 0x7B;
  static constexpr float kMax = 57344.0f;
};
template <class C> constexpr bool kIsFp8 = false;
template <> constexpr bool kIsFp8<Fp8E4M3> = true;
template <> constexpr bool kIsFp8<Fp8E5M2> = true;

inline void from_float1(float f, float *dst) { *dst = f; }
inline void from_float1(float f, _Float16 *dst) { *dst = static_cast<_Float16>(f); }
inline void from_float1(float f, Bf16 *dst) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // Round to nearest even; a NaN stays a (quiet) NaN.
  const uint16_t rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  dst->bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<uint16_t>((u >> 16) | 0x40u) : rounded;
}

template <class T>
inline void from_float_scaled(const float *src, float scale, T *dst, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) from_float1(src[i] * scale, dst + i);
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
