/* pkv_attention's refusals and what they leave behind: bad layer, NULL pointers, out aliasing an
 * input (INVALID_ARGUMENT) leave the batch usable, its copy-on-write copies included; abort
 * before or after pkv_attention; head_dim pkv cannot run (UNSUPPORTED); small head_dims it can;
 * pkv_pool_info's layout, and the copied block in the pool after copy-on-write; MLA's calls (v
 * NULL, latents it cannot run, no V scales). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_world.h"

static const kw_config base = {"errors", 2, 4, 2, 64, PKV_DTYPE_F32, 16, 64, 2, 0, 0,
                               0,        3, 0, 0, 0};

/* A (21 tokens) computed and forked into F; both append: A's last block is copied. Returns 1
 * when the copy is queued. */
static int fork_and_append(kw_world *w, int *a, int *f) {
  int32_t t[32];
  kw_tokens(t, 23, 5);
  *a = kw_alloc(w, t, 21, NULL);
  if (*a < 0 || kw_step(w, a, NULL, 1, 0) != 0) return 0;
  *f = kw_fork(w, *a);
  return *f >= 0 && kw_append(w, *a, t + 21, 1) && kw_append(w, *f, t + 22, 1);
}

static void refuse_all(kw_world *w, pkv_batch *b, const void *q, const void *k, const void *v,
                       void *out) {
  pkv_engine *e = w->e;
  const uint32_t nl = w->c.num_layers;
  CHECK_ERR(e, pkv_attention(b, nl, q, k, v, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, UINT32_MAX, q, k, v, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, NULL, k, v, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, NULL, v, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, NULL, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 1, q, k, v, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, v, (void *)q), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, v, (void *)k), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, v, (void *)v), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(NULL, pkv_attention(NULL, 0, q, k, v, out), PKV_ERR_INVALID_ARGUMENT);
  w->on_batch = NULL;
}

/* Every refusal first, in a batch with a queued copy; then the real calls must be right. */
static void test_refusals_leave_batch_usable(void) {
  kw_world w;
  int a, f;
  if (!kw_init(&w, &base)) return;
  if (fork_and_append(&w, &a, &f)) {
    w.on_batch = refuse_all;
    const int s[2] = {f, a};
    kw_step(&w, s, NULL, 2, 0);
  }
  kw_free(&w);
}

/* Abort after pkv_attention did the copies (they stay done), or before (they are requeued):
 * either way the step run again sees the shared prefix. */
static void test_abort(void) {
  for (int after = 0; after < 2; after++) {
    kw_world w;
    int a, f;
    if (!kw_init(&w, &base)) return;
    if (fork_and_append(&w, &a, &f)) {
      const int s[2] = {a, f};
      if (after) {
        kw_step(&w, s, NULL, 2, KW_ABORT);
      } else {
        uint64_t ids[2] = {w.seqs[a].id, w.seqs[f].id};
        pkv_batch *b = NULL;
        if (CHECK_OK(pkv_batch_begin(w.e, ids, NULL, 2, &b))) pkv_batch_abort(b);
      }
      kw_step(&w, s, NULL, 2, KW_REVERSE_LAYERS);
      /* The copied block holds the shared tokens 16..20 in both tables. */
      int32_t ta[4], tf[4];
      uint32_t na = 0, nf = 0;
      CHECK_OK(pkv_seq_block_table(w.e, w.seqs[a].id, ta, 4, &na));
      CHECK_OK(pkv_seq_block_table(w.e, w.seqs[f].id, tf, 4, &nf));
      const struct pkv_pool_info p = kw_pool(&w);
      if (CHECK(na == 2 && nf == 2 && ta[0] == tf[0] && ta[1] != tf[1]))
        for (uint32_t l = 0; l < p.num_layers; l++) {
          const size_t row = p.token_stride * 4,
                       la = (l * p.layer_stride + ta[1] * p.block_stride) * 4;
          const size_t lf = (l * p.layer_stride + tf[1] * p.block_stride) * 4;
          CHECK(memcmp((char *)p.k_base + la, (char *)p.k_base + lf, 5 * row) == 0);
          CHECK(memcmp((char *)p.v_base + la, (char *)p.v_base + lf, 5 * row) == 0);
          CHECK(memcmp((char *)p.k_base + la + 5 * row, (char *)p.k_base + lf + 5 * row, row) != 0);
        }
    }
    kw_free(&w);
  }
}

static void test_unsupported_head_dim(void) {
  /* not multiples of 8, or past PKV_ATTENTION_MAX_HEAD_DIM_CPU (a CPU engine's limit) */
  const uint32_t dims[] = {36, 4, 12, 100, 520, 1024};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    kw_config c = base;
    c.head_dim = dims[i];
    kw_world w;
    if (!kw_init(&w, &c)) continue;
    int32_t t[8];
    kw_tokens(t, 8, 3);
    const int s = kw_alloc(&w, t, 8, NULL);
    pkv_batch *b = NULL;
    if (s >= 0 && CHECK_OK(pkv_batch_begin(w.e, &w.seqs[s].id, NULL, 1, &b))) {
      const size_t n = (size_t)8 * c.num_q_heads * c.head_dim;
      float *q = calloc(n, 4), *k = calloc(n, 4), *v = calloc(n, 4), *out = calloc(n, 4);
      if (!CHECK_ERR(w.e, pkv_attention(b, 0, q, k, v, out), PKV_ERR_UNSUPPORTED))
        fprintf(stderr, "  head_dim %u\n", dims[i]);
      CHECK_OK(pkv_batch_end(b));
      free(q), free(k), free(v), free(out);
    }
    kw_free(&w);
  }
}

/* MLA: v must be NULL (there is no V); q, k and out not; latents pkv cannot run are
 * UNSUPPORTED; fp8 scales take no V scale. The refusals leave the batch usable. */
static void refuse_mla(kw_world *w, pkv_batch *b, const void *q, const void *k, const void *v,
                       void *out) {
  pkv_engine *e = w->e;
  CHECK(v == NULL);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, q, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "v NULL") != NULL);
  CHECK_ERR(e, pkv_attention(b, 0, NULL, k, NULL, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, NULL, NULL, out), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, NULL, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_attention(b, 0, q, k, NULL, (void *)k), PKV_ERR_INVALID_ARGUMENT);
  w->on_batch = NULL;
}

static void test_mla_calls(void) {
  kw_config c = base;
  c.num_kv_heads = 1, c.head_dim = 48, c.kv_lora_rank = 32, c.softmax_scale = 0.2f;
  c.kv_dtype = PKV_DTYPE_FP8_E4M3;
  kw_world w;
  if (kw_init(&w, &c)) { /* its fp8 scales were set with v_scales NULL */
    const float one = 1.0f, zero = 0.0f;
    CHECK_ERR(w.e, pkv_set_kv_scales(w.e, 0, NULL, &one), PKV_ERR_INVALID_ARGUMENT);
    CHECK_ERR(w.e, pkv_set_kv_scales(w.e, 0, &zero, NULL), PKV_ERR_INVALID_ARGUMENT);
    int a, f;
    if (fork_and_append(&w, &a, &f)) {
      w.on_batch = refuse_mla;
      const int s[2] = {f, a};
      kw_step(&w, s, NULL, 2, 0);
    }
    kw_free(&w);
  }
  /* A K/V engine still needs its V scales. */
  kw_config h = base;
  h.kv_dtype = PKV_DTYPE_FP8_E4M3;
  if (kw_init(&w, &h)) {
    const float ones[2] = {1.0f, 1.0f};
    CHECK_ERR(w.e, pkv_set_kv_scales(w.e, 0, ones, NULL), PKV_ERR_INVALID_ARGUMENT);
    kw_free(&w);
  }
  /* Latents pkv_attention cannot run: parts not multiples of 8, or above its limits. */
  const uint32_t parts[][2] = {{36, 12}, {32, 4}, {520, 64}, {512, 136}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    kw_config m = base;
    m.num_kv_heads = 1, m.kv_lora_rank = parts[i][0], m.head_dim = parts[i][0] + parts[i][1];
    m.softmax_scale = 0.1f;
    if (!kw_init(&w, &m)) continue;
    int32_t t[8];
    kw_tokens(t, 8, 4);
    const int s = kw_alloc(&w, t, 8, NULL);
    pkv_batch *b = NULL;
    if (s >= 0 && CHECK_OK(pkv_batch_begin(w.e, &w.seqs[s].id, NULL, 1, &b))) {
      const size_t n = (size_t)8 * m.num_q_heads * m.head_dim;
      float *q = calloc(n, 4), *k = calloc(n, 4), *out = calloc(n, 4);
      if (!CHECK_ERR(w.e, pkv_attention(b, 0, q, k, NULL, out), PKV_ERR_UNSUPPORTED))
        fprintf(stderr, "  kv_lora_rank %u, rope %u\n", parts[i][0], parts[i][1]);
      CHECK(strstr(pkv_last_error(), "MLA") != NULL);
      CHECK_OK(pkv_batch_end(b));
      free(q), free(k), free(out);
    }
    kw_free(&w);
  }
}

/* The smallest head_dims pkv supports, all dtypes. */
static void test_small_head_dims(void) {
  const int32_t dtypes[] = {PKV_DTYPE_F32, PKV_DTYPE_F16, PKV_DTYPE_BF16};
  for (uint32_t hd = 8; hd <= 24; hd += 8)
    for (int d = 0; d < 3; d++) {
      kw_config c = base;
      c.head_dim = hd, c.dtype = dtypes[d], c.block_size = 5, c.num_blocks = 128;
      kw_world w;
      if (!kw_init(&w, &c)) continue;
      int32_t t[40];
      kw_tokens(t, 40, hd);
      int s[2] = {kw_alloc(&w, t, 40, NULL), -1};
      const uint32_t chunk = 17;
      kw_step(&w, s, &chunk, 1, 0);
      s[1] = kw_alloc(&w, t, 33, NULL);
      kw_step(&w, s, NULL, 2, 0);
      kw_free(&w);
    }
}

static void test_pool_info(void) {
  const int32_t dtypes[] = {PKV_DTYPE_F32, PKV_DTYPE_F16, PKV_DTYPE_BF16};
  for (int d = 0; d < 3; d++) {
    kw_config c = base;
    c.dtype = dtypes[d], c.num_layers = 3, c.block_size = 7, c.num_blocks = 11;
    kw_world w;
    if (!kw_init(&w, &c)) continue;
    const struct pkv_pool_info p = kw_pool(&w);
    CHECK(p.device == PKV_DEVICE_CPU && p.dtype == c.dtype && p.num_layers == 3);
    CHECK(p.num_blocks == 11 && p.block_size == 7 && p.kv_heads == 2 && p.head_dim == 64);
    CHECK(p.head_stride == 64 && p.token_stride == 128 && p.block_stride == 7 * 128);
    CHECK(p.layer_stride == 11 * p.block_stride);
    CHECK(p.bytes_per_pool == 3 * p.layer_stride * w.elt);
    CHECK(p.k_base && p.v_base);
    const char *k = p.k_base, *v = p.v_base;
    CHECK(v >= k + p.bytes_per_pool || k >= v + p.bytes_per_pool);
    kw_free(&w);
  }
}

int main(void) {
  KW_RUN(test_refusals_leave_batch_usable);
  KW_RUN(test_abort);
  KW_RUN(test_unsupported_head_dim);
  KW_RUN(test_small_head_dims);
  KW_RUN(test_mla_calls);
  KW_RUN(test_pool_info);
  return kw_summary();
}
