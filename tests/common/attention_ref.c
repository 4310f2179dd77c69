/* fp64 references: see attention_ref.h. */
#include "attention_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

/* One query row: q . k over qk_dim values, v's first v_dim values; the rows of k and v are
 * k_stride and v_stride apart. Scores scaled, then capped (softcap > 0); a sink (non-NULL)
 * joins the denominator. */
static void attend_row_full(const double *q, const double *k, const double *v, double *out,
                            uint32_t num_keys, size_t k_stride, size_t v_stride, uint32_t qk_dim,
                            uint32_t v_dim, double scale, double softcap, const double *sink,
                            double *scores) {
  double max = sink ? *sink : -INFINITY, sum = 0.0;
  for (uint32_t j = 0; j < num_keys; ++j) {
    double s = 0.0;
    for (uint32_t d = 0; d < qk_dim; ++d) s += q[d] * k[(size_t)j * k_stride + d];
    s *= scale;
    if (softcap > 0.0) s = softcap * tanh(s / softcap);
    scores[j] = s;
    if (scores[j] > max) max = scores[j];
  }
  for (uint32_t j = 0; j < num_keys; ++j) {
    scores[j] = exp(scores[j] - max);
    sum += scores[j];
  }
  if (sink) sum += exp(*sink - max);
  for (uint32_t d = 0; d < v_dim; ++d) {
    double acc = 0.0;
    for (uint32_t j = 0; j < num_keys; ++j) acc += scores[j] * v[(size_t)j * v_stride + d];
    out[d] = acc / sum;
  }
}

static void attend_row_dims(const double *q, const double *k, const double *v, double *out,
                            uint32_t num_keys, uint32_t kv_stride, uint32_t qk_dim, uint32_t v_dim,
                            double scale, double *scores) {
  attend_row_full(q, k, v, out, num_keys, kv_stride, kv_stride, qk_dim, v_dim, scale, 0.0, NULL,
                  scores);
}

void pkv_ref_attention(const double *q, const double *k, const double *v, double *out,
                       uint32_t num_q, uint32_t context_len, uint32_t q_heads, uint32_t kv_heads,
                       uint32_t head_dim, double scale) {
  pkv_ref_attention_window(q, k, v, out, num_q, context_len, q_heads, kv_heads, head_dim, scale, 0);
}

void pkv_ref_attention_window(const double *q, const double *k, const double *v, double *out,
                              uint32_t num_q, uint32_t context_len, uint32_t q_heads,
                              uint32_t kv_heads, uint32_t head_dim, double scale, uint32_t window) {
  const pkv_ref_layer layer = {q_heads, kv_heads, head_dim, head_dim, scale, window, 0, 0.0, NULL};
  pkv_ref_attention_layer(&layer, q, k, v, out, num_q, context_len);
}

uint32_t pkv_ref_first_key(const pkv_ref_layer *layer, uint32_t pos) {
  if (layer->chunk) return pos / layer->chunk * layer->chunk;
  return layer->window && pos + 1 > layer->window ? pos + 1 - layer->window : 0;
}

void pkv_ref_attention_layer(const pkv_ref_layer *layer, const double *q, const double *k,
                             const double *v, double *out, uint32_t num_q, uint32_t context_len) {
  const uint32_t group = layer->q_heads / layer->kv_heads, hd = layer->head_dim, vd = layer->v_dim;
  const size_t k_stride = (size_t)layer->kv_heads * hd;
  const size_t v_stride = v ? (size_t)layer->kv_heads * vd : k_stride;
  const uint32_t v_width = v ? vd : hd; /* of a V head's row */
  const double scale = layer->scale > 0.0 ? layer->scale : 1.0 / sqrt((double)hd);
  double *scores = (double *)malloc(sizeof(double) * (context_len ? context_len : 1));
  if (!v) v = k;
  for (uint32_t i = 0; i < num_q; ++i) {
    const uint32_t pos = context_len - num_q + i, first = pkv_ref_first_key(layer, pos);
    for (uint32_t h = 0; h < layer->q_heads; ++h) {
      const size_t kv = h / group;
      attend_row_full(q + ((size_t)i * layer->q_heads + h) * hd, k + first * k_stride + kv * hd,
                      v + first * v_stride + kv * v_width,
                      out + ((size_t)i * layer->q_heads + h) * vd, pos + 1 - first, k_stride,
                      v_stride, hd, vd, scale, layer->softcap,
                      layer->sinks ? &layer->sinks[h] : NULL, scores);
    }
  }
  free(scores);
}

void pkv_ref_gather_rows(const void *cache, const int32_t *block_table, uint32_t block_size,
                         size_t block_stride, size_t row_bytes, uint32_t num_rows, void *dst) {
  for (uint32_t p = 0; p < num_rows; ++p) {
    const int32_t block = block_table[p / block_size];
    if (block < 0) continue;
    const size_t at = (size_t)block * block_stride + (size_t)(p % block_size) * row_bytes;
    memcpy((char *)dst + (size_t)p * row_bytes, (const char *)cache + at, row_bytes);
  }
}

void pkv_ref_mla_attention(const double *q, const double *latent, double *out, uint32_t num_q,
                           uint32_t context_len, uint32_t q_heads, uint32_t kv_lora_rank,
                           uint32_t rope_dim, double scale) {
  const uint32_t width = kv_lora_rank + rope_dim;
  double *scores = (double *)malloc(sizeof(double) * (context_len ? context_len : 1));
  for (uint32_t i = 0; i < num_q; ++i) {
    const uint32_t pos = context_len - num_q + i;
    for (uint32_t h = 0; h < q_heads; ++h)
      attend_row_dims(q + ((size_t)i * q_heads + h) * width, latent, latent,
                      out + ((size_t)i * q_heads + h) * kv_lora_rank, pos + 1, width, width,
                      kv_lora_rank, scale, scores);
  }
  free(scores);
}

void pkv_ref_write_kv(const void *k, const void *v, void *k_cache, void *v_cache,
                      const int64_t *slot_mapping, uint32_t num_tokens, size_t row_bytes) {
  for (uint32_t t = 0; t < num_tokens; ++t) {
    if (slot_mapping[t] < 0) continue;
    const size_t dst = (size_t)slot_mapping[t] * row_bytes, src = (size_t)t * row_bytes;
    memcpy((char *)k_cache + dst, (const char *)k + src, row_bytes);
    memcpy((char *)v_cache + dst, (const char *)v + src, row_bytes);
  }
}

void pkv_ref_copy_blocks(void *k_pool, void *v_pool, uint32_t num_layers, uint32_t num_blocks,
                         size_t block_bytes, const int32_t *pairs, uint32_t num_pairs) {
  for (uint32_t l = 0; l < num_layers; ++l) {
    for (uint32_t i = 0; i < num_pairs; ++i) {
      const size_t layer = (size_t)l * num_blocks * block_bytes;
      const size_t src = layer + (size_t)pairs[2 * i] * block_bytes;
      const size_t dst = layer + (size_t)pairs[2 * i + 1] * block_bytes;
      memcpy((char *)k_pool + dst, (const char *)k_pool + src, block_bytes);
      memcpy((char *)v_pool + dst, (const char *)v_pool + src, block_bytes);
    }
  }
}

size_t pkv_ref_compare(const char *label, const double *got, const double *ref, size_t n,
                       double atol, double rtol) {
  size_t bad = 0, nans = 0;
  double max_err = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double err = fabs(got[i] - ref[i]);
    if (isnan(err))
      nans++;
    else if (err > max_err)
      max_err = err;
    if (err <= atol + rtol * fabs(ref[i])) continue; /* false for NaN */
    if (bad < 10)
      fprintf(stderr, "  %s: [%zu] got %.8g ref %.8g err %.3g\n", label, i, got[i], ref[i], err);
    bad++;
  }
  if (bad)
    fprintf(stderr, "%s: %zu of %zu elements mismatch (%zu NaN; atol %g rtol %g), max error %.3g\n",
            label, bad, n, nans, atol, rtol, max_err);
  return bad;
}

/* fp8 by exhaustion: the nearest of the 256 codes' values (ties to the even code, whose lowest
 * mantissa bit is 0), saturating to the largest finite; independent of any bit trick. */
static double fp8_value(uint8_t b, int e5m2) {
  const int sign = b >> 7, exp_bits = e5m2 ? 5 : 4, man_bits = 7 - exp_bits;
  const int bias = e5m2 ? 15 : 7;
  const int e = (b >> man_bits) & ((1 << exp_bits) - 1), m = b & ((1 << man_bits) - 1);
  double v;
  if (e5m2 && e == 31)
    v = m ? NAN : INFINITY;
  else if (!e5m2 && e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexp((double)m, 1 - bias - man_bits);
  else
    v = ldexp((double)((1 << man_bits) | m), e - bias - man_bits);
  return sign ? -v : v;
}

double pkv_ref_fp8_decode(uint8_t b, int e5m2) { return fp8_value(b, e5m2); }

/* The non-negative codes' values of e4m3 and e5m2, computed once (tests encode millions of
 * elements, each against every code): call_once keeps it safe from threads. */
static double fp8_values[2][128];
static once_flag fp8_values_once = ONCE_FLAG_INIT;
static void fill_fp8_values(void) {
  for (int f = 0; f < 2; ++f)
    for (int c = 0; c < 128; ++c) fp8_values[f][c] = fp8_value((uint8_t)c, f);
}

uint8_t pkv_ref_fp8_encode(float x, float scale, int e5m2) {
  const float y = x / scale; /* fp32 division, as the kernels do */
  if (isnan(y)) return e5m2 ? 0x7F : 0x7F;
  const double max = e5m2 ? 57344.0 : 448.0;
  if (fabs((double)y) >= max) return (uint8_t)((y < 0 ? 0x80 : 0) | (e5m2 ? 0x7B : 0x7E));
  call_once(&fp8_values_once, fill_fp8_values);
  uint8_t best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 128; ++c) { /* non-negative codes, then the sign */
    const double v = fp8_values[e5m2 != 0][c];
    if (!isfinite(v)) continue;
    const double err = fabs(v - fabs((double)y));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best_err = err;
      best = (uint8_t)c;
    }
  }
  return (uint8_t)(best | (y < 0 || (y == 0 && signbit(y)) ? 0x80 : 0));
}
