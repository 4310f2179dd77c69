/*
 * kv_world.h - the kernels suite's harness: a CPU engine, the test's own copy of every sequence,
 * and one call (kw_step) that runs a batch through pkv_attention on every layer and checks each
 * output against the fp64 reference (tests/common/attention_ref.h).
 *
 * Values: q, k and v of the token at position p are a hash of (the sequence's tokens 0..p, layer,
 * q/k/v, head, dim), quantized to the engine's dtype. Two sequences with the same token prefix
 * therefore have the same K/V there, so KV served by a prefix hit or shared after a fork equals
 * what the reference regenerates from the tokens alone.
 *
 * Attention variants: with an fp8 kv_dtype the engine gets per-(layer, head) scales that are not 1
 * (some small enough that values saturate, some large enough that they land on subnormal codes),
 * the pool is checked byte for byte against pkv_ref_fp8_encode, and the reference reads the same
 * quantized values (code value * scale). With a window the reference masks as pkv must; with
 * per-layer windows (KV groups) each layer is read and checked through its own group's slot
 * mapping and its slot in the pool (pkv_kv_groups).
 */
#ifndef PKV_TESTS_KV_WORLD_H
#define PKV_TESTS_KV_WORLD_H

#include <pkv/pkv.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------------------------------------------------------------- checks
 * As tests/unit/test_util.h, with the counters shared by every file of a test executable. Each
 * macro counts one pass or failure and is 1 when the check passed. */
extern int kw_passed, kw_failed;
int kw_result(int ok, const char *file, int line, const char *what);
int kw_status(pkv_status got, pkv_status want, const pkv_engine *e, const char *expr,
              const char *file, int line);
int kw_summary(void); /* prints "N passed, N failed"; the exit status */

#define CHECK(cond) kw_result(!!(cond), __FILE__, __LINE__, #cond)
#define CHECK_OK(expr) kw_status((expr), PKV_OK, NULL, #expr, __FILE__, __LINE__)
/* A failed call: the status and a non-empty pkv_last_error() (and engine message when e). */
#define CHECK_ERR(e, expr, want) kw_status((expr), (want), (e), #expr, __FILE__, __LINE__)
#define CHECK_ENGINE(e) CHECK_OK(pkv_engine_check(e))

#define KW_RUN(fn)                                                         \
  do {                                                                     \
    int failed_before_ = kw_failed;                                        \
    fn();                                                                  \
    printf("%s %s\n", kw_failed == failed_before_ ? "ok  " : "FAIL", #fn); \
    fflush(stdout);                                                        \
  } while (0)

enum { KW_MAX_SEQS = 16 };

/* kw_step flags */
enum {
  KW_REVERSE_LAYERS = 1, /* call pkv_attention from the last layer to the first */
  KW_TWICE = 2,          /* call every layer twice (the second call must give the same out) */
  KW_ABORT = 4,          /* check, then pkv_batch_abort instead of pkv_batch_end */
};

typedef struct kw_config {
  const char *name;
  uint32_t num_layers, num_q_heads, num_kv_heads, head_dim; /* the whole model */
  int32_t dtype;
  uint32_t block_size, num_blocks, num_threads;
  uint32_t tp_size, tp_rank; /* 0 = 1, 0 */
  float softmax_scale;       /* 0 = 1/sqrt(head_dim) */
  float q_amp;               /* q values lie in [-q_amp, q_amp] (k and v in [-1, 1]) */
  int32_t kv_dtype;          /* 0 = dtype, or PKV_DTYPE_FP8_E4M3 / E5M2 */
  uint32_t window;           /* sliding window of every layer; 0 = full attention */
  uint32_t kv_lora_rank;     /* 0: K/V heads; else kv_layout MLA: num_kv_heads 1, head_dim the
                                latent (kv_lora_rank + its rotary part), softmax_scale given */
} kw_config;

typedef struct kw_seq {
  uint64_t id;      /* 0 = slot unused */
  int32_t *tokens;  /* [cap] */
  uint64_t *prefix; /* [cap] hash of tokens 0..p */
  uint32_t num_tokens, num_computed, cap;
} kw_seq;

typedef struct kw_world {
  kw_config c;
  pkv_engine *e;
  uint32_t q_heads, kv_heads; /* per rank */
  int mla;                    /* kv_layout MLA: k rows are latents, no v, out v_dim per head */
  uint32_t v_dim;             /* values per head of V and out: head_dim, or kv_lora_rank */
  size_t elt;                 /* bytes of one element of q, k, v and out */
  size_t kv_elt;              /* bytes of one element of the pool: elt, or 1 for fp8 */
  int fp8;                    /* 0, or 1 for e4m3, 2 for e5m2 */
  float *scales;              /* fp8: [layers][2 (k, v)][kv_heads], as set with pkv_set_kv_scales */
  /* kw_kv_values' rows, direct-mapped by (prefix, layer, kind): [memo_rows][kv_heads * head_dim] */
  double *memo;
  uint64_t *memo_keys; /* [memo_rows][2]: prefix, 1 + layer * 4 + kind (0 = empty) */
  size_t memo_rows;
  uint64_t memo_clock;                /* picks the row of a set to replace */
  uint32_t *layer_windows;            /* NULL, or [layers]: each layer's window (kw_init_windows) */
  uint32_t *layer_group, *layer_slot; /* [layers]: pkv_kv_groups */
  uint64_t given_back; /* block table entries of -1 (blocks a windowed group gave back) seen */
  double atol, rtol;
  double scale;
  kw_seq seqs[KW_MAX_SEQS];
  uint64_t steps; /* batches run, for labels */
  /* Called by kw_step once per batch, after q/k/v ([layers][tokens][heads][head_dim]) are built
   * and before its own pkv_attention calls: tests of failing calls set it. */
  void (*on_batch)(struct kw_world *w, pkv_batch *b, const void *q, const void *k, const void *v,
                   void *out);
} kw_world;

/* Creates the engine (CPU, c's shape). Returns 1 on success (failures are counted). */
int kw_init(kw_world *w, const kw_config *c);
/* The same with a host tier of host_num_blocks blocks (pkv_swap_out). */
int kw_init_host(kw_world *w, const kw_config *c, uint32_t host_num_blocks);
/* The same with a window per layer (layer_windows [c->num_layers], copied; c->window unused):
 * layers of different windows are KV groups of their own. */
int kw_init_windows(kw_world *w, const kw_config *c, const uint32_t *layer_windows);
void kw_free(kw_world *w);

/* Sequences, by slot index. kw_alloc returns the slot (-1 on failure) and the cached count. */
int kw_alloc(kw_world *w, const int32_t *tokens, uint32_t n, uint32_t *out_cached);
int kw_append(kw_world *w, int s, const int32_t *tokens, uint32_t n);
int kw_fork(kw_world *w, int parent);
void kw_release(kw_world *w, int s);
int kw_preempt(kw_world *w, int s);
int kw_resume(kw_world *w, int s, uint32_t *out_cached);

/* One batch: slot s[i] computes num_new[i] of its uncomputed tokens (NULL = all). q/k/v are built
 * in the view's order, pkv_attention runs for every layer, every output row (a sample of them for
 * big prefills) is compared with the reference, the K/V rows are read back from the pool through
 * pkv_pool_info, and the batch ends. Returns the number of failed checks (0 = fine). */
int kw_step(kw_world *w, const int *s, const uint32_t *num_new, uint32_t n, unsigned flags);

/* Computes the next n (0 = all) uncomputed tokens of slot s without pkv_attention: a batch whose
 * K/V the test writes into the pool itself (pkv_pool_info + slot_mapping), as a host kernel
 * would. For long contexts whose prefill would cost too much to check. Returns 1 on success. */
int kw_fill_direct(kw_world *w, int s, uint32_t n);

/* A token id derived from (seed, i): deterministic prompts. */
int32_t kw_token(uint64_t seed, uint32_t i);
void kw_tokens(int32_t *out, uint32_t n, uint64_t seed);

/* Quantize / load one element of the engine's dtype (bf16: round to nearest even). */
double kw_store(int32_t dtype, double x, void *base, size_t i);
double kw_load(int32_t dtype, const void *base, size_t i);

/* Fills dst (dtype) and dstd (double, may be NULL) with the heads * head_dim values of kind
 * (0 q, 1 k, 2 v) of the token whose prefix hash is prefix, on layer. */
void kw_gen_row(const kw_world *w, uint64_t prefix, uint32_t layer, uint32_t kind, void *dst,
                double *dstd);

/* What the pool holds for a k (kind 1) or v (2) row of layer given in the engine's dtype: dst
 * (kv_heads * head_dim elements of the pool's dtype; may be NULL) and its values dstd (may be
 * NULL): the row itself, or its fp8 codes (pkv_ref_fp8_encode) and code value * scale. */
void kw_cache_row(const kw_world *w, uint32_t layer, uint32_t kind, const void *row, void *dst,
                  double *dstd);

/* kw_gen_row then kw_cache_row: the values the pool holds for the k (kind 1) or v (2) row of the
 * token whose prefix hash is prefix, on layer (kept: the checks read a window's rows every step). */
void kw_kv_values(kw_world *w, uint64_t prefix, uint32_t layer, uint32_t kind, double *dstd);

/* Layer l's window (0 = full attention). */
uint32_t kw_window(const kw_world *w, uint32_t l);

/* The fp8 scale of (layer, kind 1 k / 2 v, kv head) that kw_init sets. */
float kw_scale(const kw_world *w, uint32_t layer, uint32_t kind, uint32_t head);

/* pkv_pool_info of the engine, struct_size set. */
struct pkv_pool_info kw_pool(kw_world *w);

/* A test's main over its named configs: runs run(c) for every config, or only for the one named
 * by argv[1] (meson runs one per test, in parallel), printing "ok" or "FAIL" and its name after
 * each. Returns the exit status (1 for an unknown name). */
/* When PKV_CPU_ISA forces a CPU kernel variant this CPU cannot run (pkv_engine_create answers
 * PKV_ERR_UNSUPPORTED), prints why and exits 77: meson counts the test as skipped. Prints the
 * variant the engine runs otherwise. */
void kw_skip_unless_isa(void);
int kw_main(int argc, char **argv, const kw_config *configs, int num_configs,
            void (*run)(const kw_config *c));

#endif /* PKV_TESTS_KV_WORLD_H */
