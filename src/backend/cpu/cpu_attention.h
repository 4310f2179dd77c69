// The attention math of the CPU backend, one copy per instruction-set variant (cpu_attention.cpp
// and cpu_decode.cpp compiled with different flags); CpuKernels plans the work, cpu_variant()
// picks the variant at run time.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/cpu/cpu_kernels.h"

namespace pkv {

// Floats of per-thread scratch the math needs, for items of at most max_q rows x q heads: the
// generic path's, or the decode and prefill kernels' (cpu_decode.cpp, cpu_prefill.cpp): their
// state for max_q rows x heads plus kKernelScratchFloats of staging (converted rows, scores).
constexpr size_t kKernelScratchFloats = size_t(1) << 18;
inline size_t attention_scratch_floats(uint32_t max_q, uint32_t head_dim) {
  const size_t rg = max_q;
  const size_t generic =
      2 * rg * head_dim + 3 * rg + 2 * size_t(kAttnChunk) * head_dim + rg * kAttnChunk;
  const size_t kernels = 2 * rg * (head_dim + 16) + kKernelScratchFloats;
  return generic > kernels ? generic : kernels;
}
// The most (row, q head) states one item holds: a tile's rows times a kv head's q heads, or a
// decode's q heads (all kv heads in one item).
inline uint32_t attention_max_q(uint32_t q_heads, uint32_t kv_heads) {
  const uint32_t group = q_heads / kv_heads, tile = attn_tile_rows(group) * group;
  return tile > q_heads ? tile : q_heads;
}
// Floats of one split item's partial result (v_dim: the values per head of V and out).
inline size_t attention_partial_floats(uint32_t rows, uint32_t q_heads, uint32_t v_dim) {
  return size_t(rows) * q_heads * (v_dim + 2);
}

// attention: the planned items of one layer's call. quantize_fp8: write_kv's rounding of n
// elements (a multiple of 8) of dtype at src to kv_dtype's fp8 codes of x / scale.
// (cpu_sparse_math.cpp, DESIGN.md §14) indexer_scores8: the indexer scores of 8 keys, keys_t
// [dim][8] (dim a multiple of 8) their values as floats, scales [8]: score[k] = sum_h w[h] *
// relu(scales[k] * q[h] . key k). sparse_attend: out [heads][rank] of q [heads][width] over n
// latents [n][width] (width a multiple of 8): the softmax of scale * q . latent weighting the
// latents' first rank values (0 for n 0); p holds n floats of scratch.
#define PKV_DECLARE_CPU_ATTENTION(ns)                                                           \
  namespace ns {                                                                                \
  void attention(const CpuStep &step, const CpuLayer &layer, const AttnWork &work,              \
                 ThreadPool &pool);                                                             \
  void quantize_fp8(const void *src, int32_t dtype, int32_t kv_dtype, uint8_t *dst, uint32_t n, \
                    float scale);                                                               \
  void indexer_scores8(const float *q, const float *w, uint32_t heads, uint32_t dim,            \
                       const float *keys_t, const float *scales, float *score);                 \
  void sparse_attend(const float *q, uint32_t heads, uint32_t width, uint32_t rank,             \
                     const float *lat, uint32_t n, float scale, float *p, float *out);          \
  }

PKV_DECLARE_CPU_ATTENTION(cpu_baseline)
PKV_DECLARE_CPU_ATTENTION(cpu_avx2)         // x86-64 with AVX2, FMA, F16C
PKV_DECLARE_CPU_ATTENTION(cpu_avx512)       // + AVX-512 F, BW, DQ, VL
PKV_DECLARE_CPU_ATTENTION(cpu_avx512_bf16)  // + AVX-512 BF16 (vdpbf16ps), VBMI

#undef PKV_DECLARE_CPU_ATTENTION

// Inside one variant (PKV_CPU_VARIANT): the kernels the generic item runner of cpu_attention.cpp
// hands an item to. Each runs the item (rows == 1: a decode; more: a tile of a prefill) and
// returns true, or returns false at once when it has no path for the layer's dtypes and shape
// (the generic runner then runs it). Their output is the runner's: with `partial`, (m, l, acc)
// of every (row, q head) in natural head_dim order, else the rows of layer.out. `scratch` holds
// attention_scratch_floats(max_q, head_dim) floats.
#if defined(PKV_CPU_VARIANT)
namespace PKV_CPU_VARIANT {
namespace {  // internal: each variant's copy keeps its own instruction set
// The factor of a row's acc when a sink logit joins its denominator, natural-log units: m and l
// the row's running max and sum (no key: -inf and 0). acc e^(m - top) / (l e^(m - top) +
// e^(sink - top)) with top the larger of m and sink, so that neither exponential overflows.
inline float sink_scale(float m, float l, float sink) {
  const float top = m > sink ? m : sink;
  const float alpha = std::exp(m - top);  // m = -inf: 0, and the row's output 0
  return alpha / (l * alpha + std::exp(sink - top));
}
}  // namespace
bool decode_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &item, float *scratch,
                 float *partial);
bool prefill_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &item, float *scratch,
                  float *partial);
}  // namespace PKV_CPU_VARIANT
#endif

}  // namespace pkv
