// fp8 KV codes (OCP 8-bit floats, DESIGN.md §12): e4m3fn (bias 7, 3 mantissa bits, finite
// range +-448, no infinities, NaN 0x7F / 0xFF) and e5m2 (bias 15, 2 mantissa bits, +-57344,
// IEEE-like infinities and NaNs). A stored code means its value times its head's scale.
//
// Plain integer and float arithmetic on one byte, the same on a GPU (sm_80 has no fp8
// conversions) and in the emulator; no float denormal is ever an operand or a result, so a
// flush-to-zero build computes the same codes. Checked bit for bit against
// tests/common/attention_ref.c's pkv_ref_fp8_encode, which finds codes by exhaustion.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace pkv::cuda {

// Pool element types: one byte, the code. Tags for the templates; never converted implicitly.
struct Fp8E4M3 {
  uint8_t code;
};
struct Fp8E5M2 {
  uint8_t code;
};

template <class F> constexpr bool kIsFp8 = std::is_same_v<F, Fp8E4M3> || std::is_same_v<F, Fp8E5M2>;

namespace dev {

template <class F> struct Fp8Format;
template <> struct Fp8Format<Fp8E4M3> {
  static constexpr int kMan = 3, kBias = 7;
  static constexpr uint32_t kMaxCode = 0x7E;  // 448 = 1.75 * 2^8
};
template <> struct Fp8Format<Fp8E5M2> {
  static constexpr int kMan = 2, kBias = 15;
  static constexpr uint32_t kMaxCode = 0x7B;  // 57344 = 1.75 * 2^15
};

__host__ __device__ __forceinline__ uint32_t float_bits(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}
__host__ __device__ __forceinline__ float bits_float(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

// The value of the code whose sign bit is clear, for mag < 0x80 (no NaN, no infinity): a
// normal code rebiased into a float's exponent, a subnormal one as mag * 2^(1 - bias - man).
template <class F> __host__ __device__ __forceinline__ float fp8_magnitude(uint32_t mag) {
  using Fmt = Fp8Format<F>;
  constexpr uint32_t kRebias = uint32_t(127 - Fmt::kBias) << 23;
  constexpr float kSubnormalStep = 1.f / float(1u << (Fmt::kBias - 1 + Fmt::kMan));
  return mag >= (1u << Fmt::kMan) ? bits_float((mag << (23 - Fmt::kMan)) + kRebias)
                                  : float(mag) * kSubnormalStep;
}

// The code of y: the nearest value, ties to the even code; |y| at or past the largest finite
// value (infinities included) saturates to it; NaN -> 0x7F; the sign is kept (-0 -> 0x80).
template <class F> __host__ __device__ __forceinline__ uint8_t fp8_encode(float y) {
  using Fmt = Fp8Format<F>;
  const uint32_t bits = float_bits(y), mag = bits & 0x7FFFFFFFu;
  const uint32_t sign = (bits >> 24) & 0x80u;
  if (mag > 0x7F800000u) return 0x7F;
  const float a = bits_float(mag);
  if (a >= fp8_magnitude<F>(Fmt::kMaxCode)) return uint8_t(sign | Fmt::kMaxCode);
  constexpr float kMinNormal = 1.f / float(1u << (Fmt::kBias - 1));
  if (a < kMinNormal) {
    // Subnormal codes are a * 2^(bias - 1 + man), rounded to an integer 0 .. 2^man (rintf: to
    // nearest even); 2^man is the smallest normal's code, so the rounding may carry into it.
    constexpr float kScale = float(1u << (Fmt::kBias - 1 + Fmt::kMan));
    return uint8_t(sign | uint32_t(rintf(a * kScale)));
  }
  // Normal: round the float's 23 mantissa bits to man, ties to even (add half an ulp less one,
  // plus the kept lowest bit); a carry moves into the exponent, as it should. Below the
  // saturation bound the result never passes kMaxCode.
  constexpr int kDrop = 23 - Fmt::kMan;
  const uint32_t rounded = (mag + ((1u << (kDrop - 1)) - 1) + ((mag >> kDrop) & 1)) >> kDrop;
  return uint8_t(sign | (rounded - (uint32_t(127 - Fmt::kBias) << Fmt::kMan)));
}

// The value of a code (not yet times its scale).
template <class F> __host__ __device__ __forceinline__ float fp8_decode(uint8_t code) {
  const uint32_t mag = code & 0x7Fu;
  float v;
  if constexpr (std::is_same_v<F, Fp8E4M3>)
    v = mag == 0x7F ? bits_float(0x7FC00000u) : fp8_magnitude<F>(mag);
  else
    v = mag >= 0x7C ? bits_float(mag == 0x7C ? 0x7F800000u : 0x7FC00000u) : fp8_magnitude<F>(mag);
  return code & 0x80 ? -v : v;
}

}  // namespace dev
}  // namespace pkv::cuda
