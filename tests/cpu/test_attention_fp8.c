/* fp8 caches through pkv.h: write_kv's bytes and pkv_set_kv_scales' refusals.
 *
 * write_kv: every f16 and every bf16 bit pattern (NaNs, infinities, subnormals included), and for
 * f32 every fp8 code's value, the midpoints between neighbouring codes and the floats beside
 * them, values past the largest finite, signed zeros, f32 subnormals and random bit patterns,
 * each under a power-of-two scale (the quotient exact: true ties) and one that is not, written by
 * pkv_attention into e4m3 and e5m2 pools, which must hold exactly pkv_ref_fp8_encode's codes.
 *
 * A V scale above FLT_MAX / 256 (the AVX2 variant's e4m3 conversion multiplies by 256 * scale,
 * which would overflow: it takes the portable path for such rows): attention still matches the
 * reference.
 *
 * NaN codes: a NaN written into an e4m3 or e5m2 cache is read back as NaN by the decode kernel of
 * every variant (test_nan_codes).
 *
 * pkv_set_kv_scales: refused on a cache that is not fp8, for a layer out of range, NULL scales,
 * a scale 0, negative, NaN or infinite (in any head, k or v), and once a sequence exists (also
 * after it is released); each refusal leaves the scales as they were, which the codes written
 * afterwards show.
 *
 * Usage: test_attention_fp8 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "kv_world.h"

enum { HEADS = 2, HD = 256, ROW = HEADS * HD, BS = 16 };

static pkv_engine *make_engine(int32_t dtype, int32_t kv_dtype, uint32_t layers, uint32_t blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = layers, p.num_q_heads = HEADS, p.num_kv_heads = HEADS, p.head_dim = HD;
  p.dtype = dtype, p.kv_dtype = kv_dtype, p.device = PKV_DEVICE_CPU, p.block_size = BS;
  p.num_blocks = blocks, p.num_threads = 2;
  pkv_engine *e = NULL;
  return CHECK_OK(pkv_engine_create(&p, &e)) ? e : NULL;
}

/* Computes a new sequence of n tokens with one pkv_attention call per layer, K and V row t of
 * every layer being k + t * ROW and v + t * ROW (the engine's dtype), and compares the pool with
 * pkv_ref_fp8_encode of those values under each head's scale (ks, vs: [layers][HEADS]). */
static void write_and_compare(pkv_engine *e, int32_t dtype, int e5m2, uint32_t layers,
                              const void *k, const void *v, uint32_t n, const float *ks,
                              const float *vs, const char *label) {
  const size_t elt = dtype == PKV_DTYPE_F32 ? 4 : 2;
  int32_t *tokens = malloc(n * sizeof *tokens);
  kw_tokens(tokens, n, n * 31u + (uint32_t)dtype);
  uint64_t id = 0;
  pkv_batch *b = NULL;
  pkv_batch_view view;
  memset(&view, 0, sizeof view);
  view.struct_size = sizeof view;
  unsigned char *q = calloc((size_t)n * ROW, elt), *out = malloc((size_t)n * ROW * elt);
  if (CHECK_OK(pkv_allocate(e, tokens, n, NULL, &id, NULL)) &&
      CHECK_OK(pkv_batch_begin(e, &id, NULL, 1, &b)) && CHECK_OK(pkv_batch_info(b, &view))) {
    for (uint32_t l = 0; l < layers; l++) CHECK_OK(pkv_attention(b, l, q, k, v, out));
    struct pkv_pool_info p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    CHECK_OK(pkv_pool_info(e, &p));
    size_t bad = 0;
    for (uint32_t l = 0; l < layers; l++)
      for (uint32_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < ROW; i++) {
          const size_t at = l * p.layer_stride + (size_t)view.slot_mapping[t] * p.token_stride + i;
          const float x[2] = {(float)kw_load(dtype, k, (size_t)t * ROW + i),
                              (float)kw_load(dtype, v, (size_t)t * ROW + i)};
          const uint8_t want[2] = {pkv_ref_fp8_encode(x[0], ks[l * HEADS + i / HD], e5m2),
                                   pkv_ref_fp8_encode(x[1], vs[l * HEADS + i / HD], e5m2)};
          const uint8_t got[2] = {((const uint8_t *)p.k_base)[at], ((const uint8_t *)p.v_base)[at]};
          for (int kv = 0; kv < 2; kv++)
            if (got[kv] != want[kv] && bad++ < 10)
              fprintf(stderr, "  %s: layer %u %c row %u [%u]: %a / %a -> 0x%02x, want 0x%02x\n",
                      label, l, kv ? 'v' : 'k', t, i, (double)x[kv],
                      (double)(kv ? vs : ks)[l * HEADS + i / HD], got[kv], want[kv]);
        }
    if (!CHECK(bad == 0)) fprintf(stderr, "%s: %zu codes differ\n", label, bad);
    CHECK_OK(pkv_batch_end(b));
  }
  if (id) CHECK_OK(pkv_release(e, id));
  free(tokens), free(q), free(out);
}

/* The f32 inputs: see the top of the file. Returns the count (at most cap). */
static uint32_t f32_cases(float *x, uint32_t cap, float scale) {
  uint32_t n = 0;
#define ADD(v) (n < cap ? (void)(x[n++] = (float)(v)) : (void)0)
  for (int e5m2 = 0; e5m2 < 2; e5m2++)
    for (int c = 0; c < 255; c++) {
      const double a = pkv_ref_fp8_decode((uint8_t)c, e5m2),
                   b = pkv_ref_fp8_decode((uint8_t)(c + 1), e5m2);
      if (!isfinite(a)) continue;
      const float mid =
          (float)((isfinite(b) && (c & 0x7f) != 0x7f ? (a + b) / 2 : a * 1.0625) * scale);
      ADD(a * scale), ADD(mid), ADD(nextafterf(mid, INFINITY)), ADD(nextafterf(mid, -INFINITY));
    }
  const float special[] = {0.0f,
                           -0.0f,
                           448.0f * scale * 1.0001f,
                           464.0f * scale,
                           -480.0f * scale,
                           57344.0f * scale,
                           61440.0f * scale,
                           -65536.0f * scale,
                           1e30f,
                           -1e38f,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           1e-45f,
                           -1e-40f,
                           1.17549435e-38f,
                           1e-12f};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) ADD(special[i]);
  uint64_t state = 12345;
  while (n < cap) { /* random bit patterns, and random values of fp8's range */
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t u = (uint32_t)(state >> 32);
    float f;
    memcpy(&f, &u, 4);
    const double value = n % 2 ? (double)f : ldexp((double)(int32_t)u, -22) * scale;
    ADD(value);
  }
#undef ADD
  return n;
}

/* write_kv's bytes for one model dtype and fp8 format. */
static void test_write_codes(int32_t dtype, int e5m2) {
  const int32_t kv_dtype = e5m2 ? PKV_DTYPE_FP8_E5M2 : PKV_DTYPE_FP8_E4M3;
  const size_t elt = dtype == PKV_DTYPE_F32 ? 4 : 2;
  enum { TOKENS = 128, LAYERS = 2 }; /* 2 * 128 * 512 = 65536 values per layer */
  /* Layer 0: power-of-two scales (y = x / scale exact: K's midpoints are ties); layer 1: scales
   * that round (V's values lie at codes and midpoints of 0.0123's grid). */
  const float ks[LAYERS * HEADS] = {0.5f, 0.0078125f, 0.0123f, 3.7f};
  const float vs[LAYERS * HEADS] = {2.0f, 1.0f, 0.0123f, 1.3e-5f};
  pkv_engine *e = make_engine(dtype, kv_dtype, LAYERS, TOKENS / BS + 4);
  if (!e) return;
  for (uint32_t l = 0; l < LAYERS; l++)
    CHECK_OK(pkv_set_kv_scales(e, l, ks + l * HEADS, vs + l * HEADS));
  unsigned char *kv = malloc(2 * TOKENS * ROW * elt); /* K rows, then V rows */
  if (dtype == PKV_DTYPE_F32) {
    float *x = (float *)kv;
    f32_cases(x, TOKENS * ROW, 0.5f);
    f32_cases(x + TOKENS * ROW, TOKENS * ROW, 0.0123f);
  } else {
    for (uint32_t i = 0; i < 2 * TOKENS * ROW; i++) /* every 16-bit pattern, in K and in V */
      ((uint16_t *)kv)[i] = (uint16_t)(i * 40503u);
  }
  char label[64];
  snprintf(label, sizeof label, "%s -> %s",
           dtype == PKV_DTYPE_F32   ? "f32"
           : dtype == PKV_DTYPE_F16 ? "f16"
                                    : "bf16",
           e5m2 ? "e5m2" : "e4m3");
  write_and_compare(e, dtype, e5m2, LAYERS, kv, kv + TOKENS * ROW * elt, TOKENS, ks, vs, label);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  free(kv);
}

static void test_write_codes_all(void) {
  const int32_t dtypes[3] = {PKV_DTYPE_F32, PKV_DTYPE_F16, PKV_DTYPE_BF16};
  for (int d = 0; d < 3; d++)
    for (int e5m2 = 0; e5m2 < 2; e5m2++) test_write_codes(dtypes[d], e5m2);
}

/* One token written with K and V values x: its codes under the scales the engine holds must be
 * those of (ks, vs). */
static void check_scales_held(pkv_engine *e, const float *ks, const float *vs, const char *label) {
  float *kv = malloc(2 * ROW * sizeof(float));
  for (uint32_t i = 0; i < 2 * ROW; i++) kv[i] = (float)(0.001 * (i % 97) - 0.04 * (i % 5));
  write_and_compare(e, PKV_DTYPE_F32, 0, 1, kv, kv + ROW, 1, ks, vs, label);
  free(kv);
}

static void test_set_scales_refusals(void) {
  const float ones[HEADS] = {1.0f, 1.0f}, good_k[HEADS] = {0.01f, 0.002f},
              good_v[HEADS] = {0.3f, 0.04f};
  pkv_engine *plain = make_engine(PKV_DTYPE_BF16, 0, 1, 8);
  if (plain) {
    CHECK_ERR(plain, pkv_set_kv_scales(plain, 0, good_k, good_v), PKV_ERR_INVALID_ARGUMENT);
    pkv_engine_destroy(plain);
  }
  pkv_engine *e = make_engine(PKV_DTYPE_F32, PKV_DTYPE_FP8_E4M3, 1, 8);
  if (!e) return;
  CHECK_ERR(NULL, pkv_set_kv_scales(NULL, 0, good_k, good_v), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_set_kv_scales(e, 0, good_k, good_v));
  CHECK_ERR(e, pkv_set_kv_scales(e, 1, ones, ones), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, UINT32_MAX, ones, ones), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, NULL, ones), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, ones, NULL), PKV_ERR_INVALID_ARGUMENT);
  const float bad[] = {0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    for (int which = 0; which < 4; which++) { /* k or v, head 0 or 1: the other values valid */
      float k[HEADS] = {1.0f, 1.0f}, v[HEADS] = {1.0f, 1.0f};
      (which < 2 ? k : v)[which % 2] = bad[i];
      CHECK_ERR(e, pkv_set_kv_scales(e, 0, k, v), PKV_ERR_INVALID_ARGUMENT);
    }
  check_scales_held(e, good_k, good_v, "after refusals");
  /* A sequence existed (released by now): too late, as it is while one lives. */
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, ones, ones), PKV_ERR_STATE);
  int32_t t[3] = {5, 6, 7};
  uint64_t id = 0;
  if (CHECK_OK(pkv_allocate(e, t, 3, NULL, &id, NULL))) {
    CHECK_ERR(e, pkv_set_kv_scales(e, 0, good_v, good_k), PKV_ERR_STATE);
    CHECK_OK(pkv_release(e, id));
  }
  check_scales_held(e, good_k, good_v, "after late calls");
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_huge_scale(void) {
  enum { N = 20 };
  const float ks[HEADS] = {0.01f, 0.02f}, vs[HEADS] = {2e36f, 3e36f};
  pkv_engine *e = make_engine(PKV_DTYPE_F32, PKV_DTYPE_FP8_E4M3, 1, 4);
  if (!e || !CHECK_OK(pkv_set_kv_scales(e, 0, ks, vs))) {
    pkv_engine_destroy(e);
    return;
  }
  float *q = malloc(sizeof(float) * N * ROW * 4), *k = q + N * ROW, *v = k + N * ROW,
        *out = v + N * ROW;
  double *qd = malloc(sizeof(double) * N * ROW * 5), *kd = qd + N * ROW, *vd = kd + N * ROW;
  double *got = vd + N * ROW, *ref = got + N * ROW;
  uint64_t state = 99;
  for (uint32_t i = 0; i < N * ROW; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(state >> 40) / 16777216.0; /* [0, 1) */
    q[i] = (float)(2 * u - 1), k[i] = (float)(1 - 2 * u), v[i] = (float)((u - 0.5) * 2e36);
    qd[i] = q[i];
    kd[i] = pkv_ref_fp8_decode(pkv_ref_fp8_encode(k[i], ks[i % ROW / HD], 0), 0) * ks[i % ROW / HD];
    vd[i] = pkv_ref_fp8_decode(pkv_ref_fp8_encode(v[i], vs[i % ROW / HD], 0), 0) * vs[i % ROW / HD];
  }
  int32_t t[N];
  kw_tokens(t, N, 7);
  uint64_t id = 0;
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_allocate(e, t, N, NULL, &id, NULL)) &&
      CHECK_OK(pkv_batch_begin(e, &id, NULL, 1, &b))) {
    CHECK_OK(pkv_attention(b, 0, q, k, v, out));
    pkv_ref_attention(qd, kd, vd, ref, N, N, HEADS, HEADS, HD, (double)(1.0f / sqrtf((float)HD)));
    for (uint32_t i = 0; i < N * ROW; i++) got[i] = out[i];
    /* fp32 sums of values up to 1e36: absolute noise near N * 2^-24 * 1e36 */
    CHECK(pkv_ref_compare("v scale 2e36", got, ref, N * ROW, 4e30, 1e-4) == 0);
    CHECK_OK(pkv_batch_end(b));
  }
  free(q), free(qd);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* out (bf16, rows x QH x D) against ref: NaN exactly where ref is NaN, close elsewhere. The count
 * of bad elements (the first few printed). */
static uint32_t nan_compare(const char *label, const uint16_t *out, const double *ref, uint32_t n) {
  uint32_t bad = 0;
  for (uint32_t i = 0; i < n; i++) {
    const double got = kw_load(PKV_DTYPE_BF16, out, i);
    if (isnan(ref[i]) ? isnan(got) : fabs(got - ref[i]) <= 1e-2 + 2e-2 * fabs(ref[i])) continue;
    if (bad++ < 5) fprintf(stderr, "  %s: out[%u] = %g, ref %g\n", label, i, got, ref[i]);
  }
  return bad;
}

/* A NaN written into an fp8 cache is kept as a NaN code (e4m3 S.1111.111, e5m2 S.11111.1x) and read
 * back as NaN by every kernel variant, as the fp64 reference reads it. bf16 model, GQA 2, a prompt
 * of 40 tokens (the prefill kernel), then a decode (the decode kernel: vdpbf16ps's byte lookups,
 * or the fp32 path's halves; the baseline runs the generic runner for both): a NaN in key 5 of kv
 * head 0 makes its two q heads NaN from that position on (that key's score is NaN), not before (a
 * masked score is no score); a NaN in one element of the decoded token's value of kv head 1 makes
 * that element of its q heads NaN; the rest matches the reference. (A NaN in a value of the prompt
 * would also reach the earlier rows of its tile, as in FlashAttention and in a dense P V product:
 * 0 times NaN; the reference does not model that.) */
static void test_nan_codes(int e5m2) {
  enum { QH = 4, KVH = 2, D = 64, N = 41, QROW = QH * D, KROW = KVH * D };
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = QH, p.num_kv_heads = KVH, p.head_dim = D;
  p.dtype = PKV_DTYPE_BF16, p.kv_dtype = e5m2 ? PKV_DTYPE_FP8_E5M2 : PKV_DTYPE_FP8_E4M3;
  p.device = PKV_DEVICE_CPU, p.block_size = BS, p.num_blocks = 8, p.num_threads = 2;
  pkv_engine *e = NULL;
  const float ks[KVH] = {0.05f, 0.1f}, vs[KVH] = {0.03f, 0.2f};
  if (!CHECK_OK(pkv_engine_create(&p, &e)) || !CHECK_OK(pkv_set_kv_scales(e, 0, ks, vs))) {
    pkv_engine_destroy(e);
    return;
  }
  uint16_t *q = malloc(sizeof(uint16_t) * N * (QROW * 2 + KROW * 2)), *k = q + N * QROW,
           *v = k + N * KROW;
  uint16_t *out = v + N * KROW;
  double *qd = malloc(sizeof(double) * N * (QROW * 2 + KROW * 2)), *kd = qd + N * QROW,
         *vd = kd + N * KROW;
  double *ref = vd + N * KROW;
  uint64_t state = 5;
  for (uint32_t i = 0; i < N * QROW; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    qd[i] = kw_store(PKV_DTYPE_BF16, (double)(state >> 40) / 8388608.0 - 1.0, q, i);
  }
  for (uint32_t i = 0; i < N * KROW; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double a = (double)(state >> 40) / 8388608.0 - 1.0,
                 b = (double)((state >> 16) & 0xffffff) / 8388608.0 - 1.0;
    kw_store(PKV_DTYPE_BF16, a, k, i), kw_store(PKV_DTYPE_BF16, b, v, i);
  }
  k[5 * KROW + 0 * D + 3] = 0x7fc0; /* a NaN in key 5 of kv head 0 */
  v[(N - 1) * KROW + 1 * D + 7] =
      0xffc0; /* and in element 7 of the decoded token's value, kv head 1 */
  for (uint32_t i = 0; i < N * KROW; i++) {
    const uint32_t h = i % KROW / D;
    kd[i] = pkv_ref_fp8_decode(
                pkv_ref_fp8_encode((float)kw_load(PKV_DTYPE_BF16, k, i), ks[h], e5m2), e5m2) *
            ks[h];
    vd[i] = pkv_ref_fp8_decode(
                pkv_ref_fp8_encode((float)kw_load(PKV_DTYPE_BF16, v, i), vs[h], e5m2), e5m2) *
            vs[h];
  }
  int32_t t[N];
  kw_tokens(t, N, 11);
  uint64_t id = 0;
  pkv_batch *b = NULL;
  /* The prompt's N - 1 tokens, then the decode of token N - 1. */
  const char *kind = e5m2 ? "e5m2" : "e4m3";
  if (CHECK_OK(pkv_allocate(e, t, N - 1, NULL, &id, NULL)) &&
      CHECK_OK(pkv_batch_begin(e, &id, NULL, 1, &b)) &&
      CHECK_OK(pkv_attention(b, 0, q, k, v, out)) && CHECK_OK(pkv_batch_end(b))) {
    pkv_ref_attention(qd, kd, vd, ref, N - 1, N - 1, QH, KVH, D, 0.0);
    uint32_t nans = 0;
    for (uint32_t i = 0; i < (N - 1) * QROW; i++) nans += isnan(ref[i]) != 0;
    CHECK(nans == (N - 1 - 5) * 2 * D); /* the premise: rows 5.. of kv head 0's q heads */
    CHECK(nan_compare(kind, out, ref, (N - 1) * QROW) == 0);
  }
  if (CHECK_OK(pkv_append(e, id, t + N - 1, 1)) && CHECK_OK(pkv_batch_begin(e, &id, NULL, 1, &b))) {
    const size_t last_q = (size_t)(N - 1) * QROW, last_kv = (size_t)(N - 1) * KROW;
    CHECK_OK(pkv_attention(b, 0, q + last_q, k + last_kv, v + last_kv, out));
    pkv_ref_attention(qd + last_q, kd, vd, ref, 1, N, QH, KVH, D, 0.0);
    uint32_t nans = 0;
    for (uint32_t i = 0; i < QROW; i++) nans += isnan(ref[i]) != 0;
    CHECK(nans == 2 * D + 2);
    CHECK(nan_compare(kind, out, ref, QROW) == 0);
    CHECK_OK(pkv_batch_end(b));
  }
  free(q), free(qd);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_nan_codes_all(void) {
  test_nan_codes(0);
  test_nan_codes(1);
}

int main(void) {
  kw_skip_unless_isa();
  KW_RUN(test_write_codes_all);
  KW_RUN(test_huge_scale);
  KW_RUN(test_nan_codes_all);
  KW_RUN(test_set_scales_refusals);
  return kw_summary();
}
