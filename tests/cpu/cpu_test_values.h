// Values for the tests of CpuKernels (test_cpu_groups.cpp, test_cpu_layers.cpp): a deterministic
// mix, and model dtypes stored and read back as the kernels see them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pkv/pkv.h"

namespace pkv_test {

inline uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline size_t dtype_bytes(int32_t d) {
  return d == PKV_DTYPE_F32 ? 4 : d == PKV_DTYPE_F16 || d == PKV_DTYPE_BF16 ? 2 : 1;
}
inline bool is_fp8(int32_t d) { return d == PKV_DTYPE_FP8_E4M3 || d == PKV_DTYPE_FP8_E5M2; }

// Stores x in dtype at base[i] (bf16: rounded to nearest even); returns the stored value.
inline double store(int32_t dtype, double x, void *base, size_t i) {
  const float f = static_cast<float>(x);
  if (dtype == PKV_DTYPE_F32) return static_cast<float *>(base)[i] = f;
  if (dtype == PKV_DTYPE_F16)
    return static_cast<double>(static_cast<_Float16 *>(base)[i] = static_cast<_Float16>(f));
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  static_cast<uint16_t *>(base)[i] = b;
  u = uint32_t(b) << 16;
  float g;
  std::memcpy(&g, &u, 4);
  return g;
}
inline double load(int32_t dtype, const void *base, size_t i) {
  if (dtype == PKV_DTYPE_F32) return static_cast<const float *>(base)[i];
  if (dtype == PKV_DTYPE_F16) return static_cast<double>(static_cast<const _Float16 *>(base)[i]);
  const uint32_t u = uint32_t(static_cast<const uint16_t *>(base)[i]) << 16;
  float g;
  std::memcpy(&g, &u, 4);
  return g;
}

}  // namespace pkv_test
