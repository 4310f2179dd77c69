// The arithmetic of CPU sparse attention (DESIGN.md §14), one copy per instruction-set variant
// (compiled as cpu_attention.cpp is, PKV_CPU_VARIANT naming it): the indexer's scores of 8 keys
// at a time and MLA over a token's selected latents. Plain loops of fixed 8-lane width with
// independent accumulators, which the compiler turns into the variant's vectors; the gathering
// and the selection around them are cpu_indexer.cpp's.
#ifndef PKV_CPU_VARIANT
#error "cpu_sparse_math.cpp is compiled once per variant (PKV_CPU_VARIANT)"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/cpu_attention.h"

namespace pkv {
namespace PKV_CPU_VARIANT {

void indexer_scores8(const float *q, const float *w, uint32_t heads, uint32_t dim,
                     const float *keys_t, const float *scales, float *score) {
  float total[8] = {};
  for (uint32_t h = 0; h < heads; ++h) {
    const float *qh = q + size_t(h) * dim;
    // Four chains over the key's values: one would wait on its own adds.
    float a0[8] = {}, a1[8] = {}, a2[8] = {}, a3[8] = {};
    for (uint32_t i = 0; i < dim; i += 4) {
      const float *k = keys_t + size_t(i) * 8;
      for (int l = 0; l < 8; ++l) {
        a0[l] += qh[i] * k[l];
        a1[l] += qh[i + 1] * k[8 + l];
        a2[l] += qh[i + 2] * k[16 + l];
        a3[l] += qh[i + 3] * k[24 + l];
      }
    }
    for (int l = 0; l < 8; ++l) {
      const float v = ((a0[l] + a1[l]) + (a2[l] + a3[l])) * scales[l];
      total[l] += w[h] * (v < 0.0f ? 0.0f : v);  // relu; a NaN stays NaN
    }
  }
  std::memcpy(score, total, sizeof total);
}

namespace {

inline float sum8(const float *s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// p[j] = scale * q . lat[j] for j < n, four keys at a time (width a multiple of 8).
void scores(const float *q, uint32_t width, const float *lat, uint32_t n, float scale, float *p) {
  uint32_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float *l0 = lat + size_t(j) * width, *l1 = l0 + width, *l2 = l1 + width, *l3 = l2 + width;
    float s0[8] = {}, s1[8] = {}, s2[8] = {}, s3[8] = {};
    for (uint32_t i = 0; i < width; i += 8)
      for (int x = 0; x < 8; ++x) {
        s0[x] += q[i + x] * l0[i + x];
        s1[x] += q[i + x] * l1[i + x];
        s2[x] += q[i + x] * l2[i + x];
        s3[x] += q[i + x] * l3[i + x];
      }
    p[j] = sum8(s0) * scale, p[j + 1] = sum8(s1) * scale;
    p[j + 2] = sum8(s2) * scale, p[j + 3] = sum8(s3) * scale;
  }
  for (; j < n; ++j) {
    const float *l0 = lat + size_t(j) * width;
    float s0[8] = {};
    for (uint32_t i = 0; i < width; i += 8)
      for (int x = 0; x < 8; ++x) s0[x] += q[i + x] * l0[i + x];
    p[j] = sum8(s0) * scale;
  }
}

}  // namespace

void sparse_attend(const float *q, uint32_t heads, uint32_t width, uint32_t rank, const float *lat,
                   uint32_t n, float scale, float *p, float *out) {
  for (uint32_t h = 0; h < heads; ++h) {
    float *o = out + size_t(h) * rank;
    std::fill(o, o + rank, 0.0f);
    if (!n) continue;  // no key: out 0
    scores(q + size_t(h) * width, width, lat, n, scale, p);
    const float max = *std::max_element(p, p + n);
    float sum = 0.0f;
    for (uint32_t j = 0; j < n; ++j) sum += p[j] = std::exp(p[j] - max);
    for (uint32_t j = 0; j < n; ++j) {
      const float pj = p[j], *lj = lat + size_t(j) * width;
      for (uint32_t i = 0; i < rank; ++i) o[i] += pj * lj[i];
    }
    const float inv = 1.0f / sum;
    for (uint32_t i = 0; i < rank; ++i) o[i] *= inv;
  }
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
