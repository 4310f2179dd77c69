/* fp64 references of sparse attention: see indexer_ref.h. */
#include "indexer_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"

float pkv_ref_indexer_scale(const float *x, uint32_t dim, int ue8m0) {
  float amax = 0.0f;
  for (uint32_t i = 0; i < dim; ++i)
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  if (amax == 0.0f) return 1.0f;
  const float s = amax / 448.0f;
  if (!ue8m0) return s;
  /* The smallest power of two >= s, found by doubling / halving: no log2 rounding. */
  double p = 1.0;
  while (p < s) p *= 2.0;
  while (p / 2.0 >= s) p /= 2.0;
  return (float)p;
}

void pkv_ref_indexer_quantize_fp8(const float *x, uint32_t dim, int ue8m0, uint8_t *codes,
                                  float *scale) {
  const float s = pkv_ref_indexer_scale(x, dim, ue8m0);
  for (uint32_t i = 0; i < dim; ++i) codes[i] = pkv_ref_fp8_encode(x[i], s, 0);
  *scale = s;
}

/* bf16 bits' value, with the infinities' codes read as +-2^128: the value rounding to
 * nearest even compares against (IEEE's overflow rule). */
static double bf16_rounding_value(uint32_t bits16) {
  if ((bits16 & 0x7fffu) == 0x7f80u) return (bits16 & 0x8000u) ? -ldexp(1.0, 128) : ldexp(1.0, 128);
  return pkv_ref_bf16_value((uint16_t)bits16);
}

uint16_t pkv_ref_bf16_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40u);
  if (isinf(x)) return (uint16_t)(u >> 16);
  /* The nearer of the two bf16 neighbours by value (ties: the even code), not by bit tricks. */
  const uint32_t lo = u >> 16, hi = lo + 1;
  const double dlo = fabs((double)x - bf16_rounding_value(lo));
  const double dhi = fabs((double)x - bf16_rounding_value(hi));
  if (dlo < dhi || (dlo == dhi && (lo & 1u) == 0)) return (uint16_t)lo;
  return (uint16_t)hi;
}

double pkv_ref_bf16_value(uint16_t bits) {
  const uint32_t u = (uint32_t)bits << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void pkv_ref_indexer_key_fp8(const uint8_t *codes, float scale, uint32_t dim, double *key) {
  for (uint32_t i = 0; i < dim; ++i) key[i] = pkv_ref_fp8_decode(codes[i], 0) * (double)scale;
}

void pkv_ref_indexer_key_bf16(const uint16_t *bits, uint32_t dim, double *key) {
  for (uint32_t i = 0; i < dim; ++i) key[i] = pkv_ref_bf16_value(bits[i]);
}

double pkv_ref_indexer_score(const double *q, const double *w, const double *key, uint32_t heads,
                             uint32_t dim) {
  double sum = 0.0;
  for (uint32_t h = 0; h < heads; ++h) {
    double dot = 0.0;
    for (uint32_t i = 0; i < dim; ++i) dot += q[(size_t)h * dim + i] * key[i];
    sum += w[h] * (dot < 0.0 ? 0.0 : dot); /* relu: a NaN stays NaN (torch's relu) */
  }
  return sum;
}

typedef struct ranked_key {
  double score;
  uint32_t pos;
} ranked_key;

/* qsort's order of the top-k: a number before a NaN, a higher score first, then the lower
 * position. */
static int rank_order(const void *pa, const void *pb) {
  const ranked_key *a = pa, *b = pb;
  const int na = isnan(a->score) != 0, nb = isnan(b->score) != 0;
  if (na != nb) return na ? 1 : -1;
  if (!na && a->score != b->score) return a->score > b->score ? -1 : 1;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

static int by_position(const void *pa, const void *pb) {
  const int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  return (a > b) - (a < b);
}

uint32_t pkv_ref_topk(const double *scores, uint32_t n, uint32_t topk, int32_t *out) {
  const uint32_t keep = n < topk ? n : topk;
  ranked_key *keys = malloc(sizeof(ranked_key) * (n ? n : 1));
  for (uint32_t s = 0; s < n; ++s) keys[s] = (ranked_key){scores[s], s};
  qsort(keys, n, sizeof(ranked_key), rank_order); /* the whole order: a full sort, naive */
  for (uint32_t i = 0; i < keep; ++i) out[i] = (int32_t)keys[i].pos;
  qsort(out, keep, sizeof(int32_t), by_position);
  for (uint32_t i = keep; i < topk; ++i) out[i] = -1;
  free(keys);
  return keep;
}

void pkv_ref_positions_to_slots(const int32_t *positions, uint32_t count,
                                const int32_t *block_table, uint32_t block_size, int32_t *slots) {
  for (uint32_t i = 0; i < count; ++i) {
    const int32_t p = positions[i];
    slots[i] = p < 0 ? -1
                     : (int32_t)((int64_t)block_table[(uint32_t)p / block_size] * block_size +
                                 (uint32_t)p % block_size);
  }
}

void pkv_ref_sparse_mla(const double *q, const double *latent, const int32_t *indices,
                        uint32_t topk, uint32_t pos, uint32_t q_heads, uint32_t kv_lora_rank,
                        uint32_t rope_dim, double scale, double *out) {
  const uint32_t width = kv_lora_rank + rope_dim;
  double *p = malloc(sizeof(double) * (topk ? topk : 1));
  for (uint32_t h = 0; h < q_heads; ++h) {
    const double *qh = q + (size_t)h * width;
    double *oh = out + (size_t)h * kv_lora_rank;
    double max = -INFINITY, sum = 0.0;
    for (uint32_t j = 0; j < topk; ++j) {
      const int32_t s = indices[j];
      if (s < 0 || (uint32_t)s > pos) continue;
      double dot = 0.0;
      for (uint32_t i = 0; i < width; ++i) dot += qh[i] * latent[(size_t)s * width + i];
      p[j] = dot * scale;
      if (p[j] > max) max = p[j];
    }
    for (uint32_t j = 0; j < topk; ++j) {
      const int32_t s = indices[j];
      if (s < 0 || (uint32_t)s > pos) continue;
      sum += p[j] = exp(p[j] - max);
    }
    for (uint32_t i = 0; i < kv_lora_rank; ++i) {
      double acc = 0.0;
      for (uint32_t j = 0; j < topk; ++j) {
        const int32_t s = indices[j];
        if (s >= 0 && (uint32_t)s <= pos) acc += p[j] * latent[(size_t)s * width + i];
      }
      oh[i] = sum > 0.0 ? acc / sum : 0.0;
    }
  }
  free(p);
}
