// The attention math of the CPU backend, one copy per instruction-set variant (cpu_attention.cpp
// compiled with different flags); CpuKernels plans the work and picks a variant at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace pkv {

// Floats of per-thread scratch the math needs, for items of at most max_q rows x q heads.
inline size_t attention_scratch_floats(uint32_t max_q, uint32_t head_dim) {
  const size_t rg = max_q;
  return 2 * rg * head_dim + 3 * rg + 2 * size_t(kAttnChunk) * head_dim + rg * kAttnChunk;
}
// Floats of one split item's partial result.
inline size_t attention_partial_floats(uint32_t rows, uint32_t q_heads, uint32_t head_dim) {
  return size_t(rows) * q_heads * (head_dim + 2);
}

// attention: the planned items of one layer's call. quantize_fp8: write_kv's rounding of n
// elements (a multiple of 8) of dtype at src to kv_dtype's fp8 codes of x / scale.
#define PKV_DECLARE_CPU_ATTENTION(ns)                                                       \
  namespace ns {                                                                          \
  void attention(const CpuStep &step, const CpuLayer &layer, const AttnWork &work,        \
                 ThreadPool &pool);                                                       \
  void quantize_fp8(const void *src, int32_t dtype, int32_t kv_dtype, uint8_t *dst,       \
                    uint32_t n, float scale);                                             \
  }

PKV_DECLARE_CPU_ATTENTION(cpu_base)
PKV_DECLARE_CPU_ATTENTION(cpu_v3)  // x86-64 with AVX2, FMA, F16C

#undef PKV_DECLARE_CPU_ATTENTION

}  // namespace pkv
