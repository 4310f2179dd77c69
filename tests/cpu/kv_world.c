/* The kernels suite's harness: see kv_world.h. */
#include "kv_world.h"

#include "attention_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kw_passed, kw_failed;

int kw_result(int ok, const char *file, int line, const char *what) {
  if (ok) {
    kw_passed++;
    return 1;
  }
  kw_failed++;
  fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
  return 0;
}

int kw_status(pkv_status got, pkv_status want, const pkv_engine *e, const char *expr,
              const char *file, int line) {
  const char *msg = pkv_last_error();
  const char *emsg = e ? pkv_engine_last_error(e) : "-";
  if (got == want && (want == PKV_OK || (msg[0] != '\0' && emsg[0] != '\0')))
    return kw_result(1, file, line, expr);
  kw_failed++;
  fprintf(stderr, "FAIL %s:%d: %s -> %d (%s), want %d (%s); last error: \"%s\"\n", file, line, expr,
          (int)got, pkv_status_string(got), (int)want, pkv_status_string(want), msg);
  return 0;
}

int kw_summary(void) {
  printf("%d passed, %d failed\n", kw_passed, kw_failed);
  return kw_failed ? 1 : 0;
}

void kw_skip_unless_isa(void) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = 1, p.num_kv_heads = 1, p.head_dim = 64;
  p.device = PKV_DEVICE_CPU, p.block_size = 16, p.num_blocks = 4, p.num_threads = 1;
  pkv_engine *e = NULL;
  const pkv_status s = pkv_engine_create(&p, &e);
  if (s == PKV_ERR_UNSUPPORTED) {
    printf("skipped: %s\n", pkv_last_error());
    exit(77);
  }
  if (s != PKV_OK) {
    fprintf(stderr, "pkv_engine_create: %s\n", pkv_last_error());
    exit(1);
  }
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (pkv_pool_info(e, &info) == PKV_OK && info.kernels) printf("CPU kernels: %s\n", info.kernels);
  pkv_engine_destroy(e);
}

int kw_main(int argc, char **argv, const kw_config *configs, int num_configs,
            void (*run)(const kw_config *c)) {
  int ran = 0;
  kw_skip_unless_isa();
  for (int i = 0; i < num_configs; i++) {
    if (argc > 1 && strcmp(argv[1], configs[i].name) != 0) continue;
    const int failed_before = kw_failed;
    run(&configs[i]);
    printf("%s %s\n", kw_failed == failed_before ? "ok  " : "FAIL", configs[i].name);
    fflush(stdout);
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no config named %s\n", argv[1]);
    return 1;
  }
  return kw_summary();
}

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int32_t kw_token(uint64_t seed, uint32_t i) {
  return (int32_t)(1 + mix(seed * 0x100000001b3ull + i) % 30000);
}

void kw_tokens(int32_t *out, uint32_t n, uint64_t seed) {
  for (uint32_t i = 0; i < n; i++) out[i] = kw_token(seed, i);
}

__extension__ typedef _Float16 f16; /* an ISO/IEC TS 18661-3 type: gcc >= 12, clang */

static uint16_t bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* finite inputs only */
}

double kw_store(int32_t dtype, double x, void *base, size_t i) {
  const float f = (float)x;
  if (dtype == PKV_DTYPE_F32) {
    ((float *)base)[i] = f;
    return f;
  }
  if (dtype == PKV_DTYPE_F16) {
    const f16 h = (f16)f;
    ((f16 *)base)[i] = h;
    return (double)h;
  }
  ((uint16_t *)base)[i] = bf16_bits(f);
  return kw_load(dtype, base, i);
}

double kw_load(int32_t dtype, const void *base, size_t i) {
  if (dtype == PKV_DTYPE_F32) return ((const float *)base)[i];
  if (dtype == PKV_DTYPE_F16) return (double)((const f16 *)base)[i];
  const uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

void kw_gen_row(const kw_world *w, uint64_t prefix, uint32_t layer, uint32_t kind, void *dst,
                double *dstd) {
  const uint32_t heads = kind == 0 ? w->q_heads : w->kv_heads, hd = w->c.head_dim;
  const double amp = kind == 0 ? w->c.q_amp : 1.0;
  for (uint32_t h = 0; h < heads; h++) {
    const uint64_t base = mix(prefix ^ mix(((uint64_t)layer << 40) | ((uint64_t)kind << 32) | h));
    for (uint32_t d = 0; d < hd; d++) {
      const double u = (double)(mix(base + d) >> 40) * (1.0 / 16777216.0); /* [0, 1) */
      const size_t i = (size_t)h * hd + d;
      const double x = kw_store(w->c.dtype, amp * (2.0 * u - 1.0), dst, i);
      if (dstd) dstd[i] = x;
    }
  }
}

uint32_t kw_window(const kw_world *w, uint32_t l) {
  return w->layer_windows ? w->layer_windows[l] : w->c.window;
}

/* Scales by (layer, kind, head): a cycle that saturates |x| > 0.75 (e4m3: 1/600, e5m2: 1/80000),
 * stays in range, and puts values on subnormal codes (e4m3: 40, e5m2: 3000). */
float kw_scale(const kw_world *w, uint32_t layer, uint32_t kind, uint32_t head) {
  static const float e4m3[] = {1.0f / 600, 0.0123f, 0.7f, 40.0f, 1.0f / 300};
  static const float e5m2[] = {1.0f / 80000, 0.00137f, 0.3f, 3000.0f, 0.051f};
  const uint32_t i = (layer * 3 + kind * 2 + head) % 5;
  return w->fp8 == 2 ? e5m2[i] : e4m3[i];
}

void kw_cache_row(const kw_world *w, uint32_t layer, uint32_t kind, const void *row, void *dst,
                  double *dstd) {
  const uint32_t hd = w->c.head_dim, n = w->kv_heads * hd;
  if (!w->fp8) {
    if (dst) memcpy(dst, row, n * w->elt);
    for (uint32_t i = 0; dstd && i < n; i++) dstd[i] = kw_load(w->c.dtype, row, i);
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    const float scale = w->scales[(layer * 2 + kind - 1) * w->kv_heads + i / hd];
    const uint8_t code = pkv_ref_fp8_encode((float)kw_load(w->c.dtype, row, i), scale, w->fp8 == 2);
    if (dst) ((uint8_t *)dst)[i] = code;
    if (dstd) dstd[i] = pkv_ref_fp8_decode(code, w->fp8 == 2) * scale;
  }
}

/* The memo is 4-way set associative (a set's rows replaced in turn): a decode's window, every
 * step mostly the same rows, stays in it. */
void kw_kv_values(kw_world *w, uint64_t prefix, uint32_t layer, uint32_t kind, double *dstd) {
  const size_t n = (size_t)w->kv_heads * w->c.head_dim;
  if (!w->memo_rows) { /* at most 64 MiB of rows, a power of two of them */
    size_t rows = 4;
    while (rows < 65536 && rows * 2 * n * sizeof(double) <= ((size_t)64 << 20)) rows *= 2;
    w->memo = malloc(rows * n * sizeof(double));
    w->memo_keys = calloc(rows * 2, sizeof(uint64_t));
    w->memo_rows = w->memo && w->memo_keys ? rows : 0;
  }
  const uint64_t tag = 1 + (uint64_t)layer * 4 + kind, h = mix(prefix ^ mix(tag));
  const size_t set = w->memo_rows ? (size_t)(h & (w->memo_rows / 4 - 1)) * 4 : 0;
  for (size_t at = set; at < set + 4 && w->memo_rows; at++)
    if (w->memo_keys[2 * at] == prefix && w->memo_keys[2 * at + 1] == tag) {
      memcpy(dstd, w->memo + at * n, n * sizeof(double));
      return;
    }
  unsigned char row[4 * 8 * 256];
  kw_gen_row(w, prefix, layer, kind, row, NULL);
  kw_cache_row(w, layer, kind, row, NULL, dstd);
  if (!w->memo_rows) return;
  const size_t at = set + (size_t)(w->memo_clock++ & 3);
  memcpy(w->memo + at * n, dstd, n * sizeof(double));
  w->memo_keys[2 * at] = prefix, w->memo_keys[2 * at + 1] = tag;
}

struct pkv_pool_info kw_pool(kw_world *w) {
  struct pkv_pool_info p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  CHECK_OK(pkv_pool_info(w->e, &p));
  return p;
}

static int kw_init_all(kw_world *w, const kw_config *c, uint32_t host_num_blocks,
                       const uint32_t *layer_windows);

int kw_init(kw_world *w, const kw_config *c) { return kw_init_host(w, c, 0); }

int kw_init_host(kw_world *w, const kw_config *c, uint32_t host_num_blocks) {
  return kw_init_all(w, c, host_num_blocks, NULL);
}

int kw_init_windows(kw_world *w, const kw_config *c, const uint32_t *layer_windows) {
  return kw_init_all(w, c, 0, layer_windows);
}

static int kw_init_all(kw_world *w, const kw_config *c, uint32_t host_num_blocks,
                       const uint32_t *layer_windows) {
  memset(w, 0, sizeof *w);
  if (layer_windows) {
    w->layer_windows = malloc(c->num_layers * sizeof(uint32_t));
    memcpy(w->layer_windows, layer_windows, c->num_layers * sizeof(uint32_t));
  }
  w->c = *c;
  if (w->c.q_amp == 0.0f) w->c.q_amp = 1.0f;
  const uint32_t tp = c->tp_size ? c->tp_size : 1;
  w->q_heads = c->num_q_heads / tp;
  w->kv_heads = c->num_kv_heads >= tp ? c->num_kv_heads / tp : 1;
  w->mla = c->kv_lora_rank != 0;
  w->v_dim = w->mla ? c->kv_lora_rank : c->head_dim;
  w->elt = c->dtype == PKV_DTYPE_F32 ? 4 : 2;
  w->fp8 = c->kv_dtype == PKV_DTYPE_FP8_E4M3 ? 1 : c->kv_dtype == PKV_DTYPE_FP8_E5M2 ? 2 : 0;
  w->kv_elt = w->fp8 ? 1 : w->elt;
  w->atol = c->dtype == PKV_DTYPE_F32 ? 1e-5 : c->dtype == PKV_DTYPE_F16 ? 2e-3 : 1e-2;
  w->rtol = c->dtype == PKV_DTYPE_F32 ? 1e-4 : c->dtype == PKV_DTYPE_F16 ? 1e-2 : 2e-2;
  /* pkv computes the default scale in float: so does the reference's input. */
  w->scale = c->softmax_scale > 0 ? c->softmax_scale : (double)(1.0f / sqrtf((float)c->head_dim));
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = c->num_layers;
  p.num_q_heads = c->num_q_heads;
  p.num_kv_heads = c->num_kv_heads;
  p.head_dim = c->head_dim;
  p.dtype = c->dtype;
  p.tp_size = tp;
  p.tp_rank = c->tp_rank;
  p.block_size = c->block_size;
  p.num_blocks = c->num_blocks;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = c->num_threads;
  p.softmax_scale = c->softmax_scale;
  p.host_num_blocks = host_num_blocks;
  p.kv_dtype = c->kv_dtype;
  p.sliding_window = c->window;
  p.layer_windows = w->layer_windows;
  if (w->mla) {
    p.kv_layout = PKV_KV_LAYOUT_MLA;
    p.kv_lora_rank = c->kv_lora_rank;
    p.qk_rope_head_dim = c->head_dim - c->kv_lora_rank;
  }
  w->e = NULL;
  w->layer_group = calloc(c->num_layers, sizeof(uint32_t));
  w->layer_slot = calloc(c->num_layers, sizeof(uint32_t));
  uint32_t groups = 0;
  if (!CHECK_OK(pkv_kv_groups(&p, w->layer_group, w->layer_slot, NULL, 0, &groups, NULL)) ||
      !CHECK_OK(pkv_engine_create(&p, &w->e)) || !CHECK(w->e != NULL))
    return 0;
  if (!w->fp8) return 1;
  w->scales = malloc(sizeof(float) * c->num_layers * 2 * w->kv_heads);
  int ok = 1;
  for (uint32_t l = 0; ok && l < c->num_layers; l++) {
    float *ks = w->scales + (size_t)l * 2 * w->kv_heads, *vs = ks + w->kv_heads;
    for (uint32_t h = 0; h < w->kv_heads; h++)
      ks[h] = kw_scale(w, l, 1, h), vs[h] = kw_scale(w, l, 2, h);
    ok = CHECK_OK(pkv_set_kv_scales(w->e, l, ks, w->mla ? NULL : vs)); /* MLA: no V scale */
  }
  return ok;
}

void kw_free(kw_world *w) {
  for (int s = 0; s < KW_MAX_SEQS; s++) {
    free(w->seqs[s].tokens);
    free(w->seqs[s].prefix);
  }
  if (w->e) CHECK_ENGINE(w->e);
  pkv_engine_destroy(w->e);
  free(w->scales), free(w->memo), free(w->memo_keys), free(w->layer_group), free(w->layer_slot);
  free(w->layer_windows);
  memset(w, 0, sizeof *w);
}

static void seq_push(kw_seq *q, const int32_t *tokens, uint32_t n) {
  if (q->num_tokens + n > q->cap) {
    q->cap = (q->num_tokens + n) * 2;
    q->tokens = realloc(q->tokens, q->cap * sizeof *q->tokens);
    q->prefix = realloc(q->prefix, q->cap * sizeof *q->prefix);
  }
  for (uint32_t i = 0; i < n; i++, q->num_tokens++) {
    const uint64_t parent = q->num_tokens ? q->prefix[q->num_tokens - 1] : 0x5eedull;
    q->tokens[q->num_tokens] = tokens[i];
    q->prefix[q->num_tokens] = mix(parent ^ (uint64_t)(uint32_t)tokens[i]);
  }
}

static int free_slot(kw_world *w) {
  for (int s = 0; s < KW_MAX_SEQS; s++)
    if (w->seqs[s].id == 0) return s;
  CHECK(!"no free kw_seq slot");
  return -1;
}

int kw_alloc(kw_world *w, const int32_t *tokens, uint32_t n, uint32_t *out_cached) {
  const int s = free_slot(w);
  if (s < 0) return -1;
  uint32_t cached = 0;
  uint64_t id = 0;
  if (!CHECK_OK(pkv_allocate(w->e, tokens, n, NULL, &id, &cached)) || !CHECK(id != 0)) return -1;
  kw_seq *q = &w->seqs[s];
  q->id = id;
  q->num_tokens = 0;
  seq_push(q, tokens, n);
  q->num_computed = cached;
  if (out_cached) *out_cached = cached;
  return s;
}

int kw_append(kw_world *w, int s, const int32_t *tokens, uint32_t n) {
  if (!CHECK_OK(pkv_append(w->e, w->seqs[s].id, tokens, n))) return 0;
  seq_push(&w->seqs[s], tokens, n);
  return 1;
}

int kw_fork(kw_world *w, int parent) {
  const int s = free_slot(w);
  uint64_t child = 0;
  if (s < 0 || !CHECK_OK(pkv_fork(w->e, w->seqs[parent].id, &child))) return -1;
  kw_seq *p = &w->seqs[parent], *q = &w->seqs[s];
  q->id = child;
  q->num_tokens = 0;
  seq_push(q, p->tokens, p->num_tokens);
  q->num_computed = p->num_computed;
  return s;
}

void kw_release(kw_world *w, int s) {
  CHECK_OK(pkv_release(w->e, w->seqs[s].id));
  w->seqs[s].id = 0;
  w->seqs[s].num_tokens = w->seqs[s].num_computed = 0;
}

int kw_preempt(kw_world *w, int s) {
  if (!CHECK_OK(pkv_preempt(w->e, w->seqs[s].id))) return 0;
  w->seqs[s].num_computed = 0;
  return 1;
}

int kw_resume(kw_world *w, int s, uint32_t *out_cached) {
  uint32_t cached = 0;
  if (!CHECK_OK(pkv_resume(w->e, w->seqs[s].id, &cached))) return 0;
  w->seqs[s].num_computed = cached;
  if (out_cached) *out_cached = cached;
  return 1;
}
