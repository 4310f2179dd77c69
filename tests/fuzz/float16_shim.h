/*
 * float16_shim.h - clang 14 has no _Float16 on x86-64 (clang >= 15 has), so the fuzzers' clang
 * build of src/backend/cpu/cpu_attention.cpp is compiled with `-include` of this file: _Float16
 * becomes a 2-byte struct holding IEEE half bits, converted in software (round to nearest even).
 * Only the fuzz build uses it; libpkv itself is built by gcc with the real type.
 */
#ifndef PKV_FLOAT16_SHIM_H
#define PKV_FLOAT16_SHIM_H

#if defined(__clang__) && __clang_major__ < 15 && defined(__x86_64__)
#include <cstdint>
#include <cstring>

struct pkv_shim_half {
  uint16_t bits;
  pkv_shim_half() = default;
  explicit pkv_shim_half(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
      bits = uint16_t(sign | 0x7e00u);
      return;
    }  // NaN
    if (a >= 0x477ff000u) {
      bits = uint16_t(sign | 0x7c00u);
      return;
    }                       // overflow: inf
    if (a < 0x38800000u) {  // subnormal half (or zero): scale by 2^24 and round
      float m;
      std::memcpy(&m, &a, 4);
      bits = uint16_t(sign | uint32_t(__builtin_nearbyintf(m * 16777216.0f)));
      return;
    }
    const uint32_t r = a + 0x0fffu + ((a >> 13) & 1u) - 0x38000000u;  // rebias, round to even
    bits = uint16_t(sign | (r >> 13));
  }
  explicit operator float() const {
    const uint32_t sign = uint32_t(bits & 0x8000u) << 16, e = (bits >> 10) & 0x1fu,
                   m = bits & 0x3ffu;
    float f;
    if (e == 0) {
      f = float(m) / 16777216.0f;
      return sign ? -f : f;
    }
    const uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
    std::memcpy(&f, &u, 4);
    return f;
  }
};
#define _Float16 pkv_shim_half
#endif

#endif /* PKV_FLOAT16_SHIM_H */
