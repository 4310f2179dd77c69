/*
 * test_util.h - the unit tests' harness: checks, a per-file summary, and helpers that make small
 * CPU engines and drive sequences through pkv.h.
 *
 * Every CHECK* macro is an expression that counts one pass or one failure and evaluates to 1 when
 * the check passed, so a test can stop early: `if (!CHECK_OK(...)) return;`.
 * tu_summary() prints "N passed, N failed" as the file's last line and returns the exit status.
 */
#ifndef PKV_TEST_UTIL_H
#define PKV_TEST_UTIL_H

#include <pkv/pkv.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tu_passed_;
static int tu_failed_;

static inline int tu_result_(int ok, const char *file, int line, const char *what) {
  if (ok) {
    tu_passed_++;
    return 1;
  }
  tu_failed_++;
  fprintf(stderr, "FAIL %s:%d: %s\n", file, line, what);
  return 0;
}

static inline int tu_check_eq_(long long a, long long b, const char *sa, const char *sb,
                               const char *file, int line) {
  if (a == b) return tu_result_(1, file, line, sa);
  tu_failed_++;
  fprintf(stderr, "FAIL %s:%d: %s == %s (%lld vs %lld)\n", file, line, sa, sb, a, b);
  return 0;
}

/* A status check. want != PKV_OK also requires a non-empty pkv_last_error(). */
static inline int tu_check_status_(pkv_status got, pkv_status want, const char *expr,
                                   const char *file, int line) {
  const char *msg = pkv_last_error();
  if (got == want && (want == PKV_OK || (msg != NULL && msg[0] != '\0')))
    return tu_result_(1, file, line, expr);
  tu_failed_++;
  fprintf(stderr, "FAIL %s:%d: %s -> %d (%s), want %d (%s); last error: \"%s\"\n", file, line, expr,
          (int)got, pkv_status_string(got), (int)want, pkv_status_string(want),
          msg ? msg : "(null)");
  return 0;
}

static inline int tu_check_err_(const pkv_engine *e, pkv_status got, pkv_status want,
                                const char *expr, const char *file, int line) {
  if (!tu_check_status_(got, want, expr, file, line)) return 0;
  const char *msg = pkv_engine_last_error(e);
  return tu_result_(msg != NULL && msg[0] != '\0', file, line, "pkv_engine_last_error() set");
}

#define CHECK(cond) tu_result_(!!(cond), __FILE__, __LINE__, #cond)
#define CHECK_EQ_INT(a, b) tu_check_eq_((long long)(a), (long long)(b), #a, #b, __FILE__, __LINE__)
#define CHECK_OK(expr) tu_check_status_((expr), PKV_OK, #expr, __FILE__, __LINE__)
#define CHECK_STATUS(expr, want) tu_check_status_((expr), (want), #expr, __FILE__, __LINE__)
/* A failed call on engine e: the status, and a non-empty message from both error channels. */
#define CHECK_ERR(e, expr, want) tu_check_err_((e), (expr), (want), #expr, __FILE__, __LINE__)

#define TU_RUN(fn)                                                          \
  do {                                                                      \
    int failed_before_ = tu_failed_;                                        \
    fn();                                                                   \
    printf("%s %s\n", tu_failed_ == failed_before_ ? "ok  " : "FAIL", #fn); \
  } while (0)

static inline int tu_summary(void) {
  printf("%d passed, %d failed\n", tu_passed_, tu_failed_);
  return tu_failed_ ? 1 : 0;
}

/* ---------------------------------------------------------------- engines */
/* A tiny CPU model: 2 layers, 4 q heads, 2 kv heads, head_dim 8, f32, one worker thread. */
static inline void tu_params(pkv_engine_params *p, uint32_t block_size, uint32_t num_blocks) {
  memset(p, 0, sizeof *p);
  pkv_engine_params_init(p, sizeof *p);
  p->num_layers = 2;
  p->num_q_heads = 4;
  p->num_kv_heads = 2;
  p->head_dim = 8;
  p->dtype = PKV_DTYPE_F32;
  p->device = PKV_DEVICE_CPU;
  p->block_size = block_size;
  p->num_blocks = num_blocks;
  p->num_threads = 1;
}

static inline pkv_engine *tu_engine_p(const pkv_engine_params *p) {
  pkv_engine *e = NULL;
  if (!CHECK_OK(pkv_engine_create(p, &e))) return NULL;
  CHECK(e != NULL);
  return e;
}

static inline pkv_engine *tu_engine(uint32_t block_size, uint32_t num_blocks,
                                    uint32_t debug_flags) {
  pkv_engine_params p;
  tu_params(&p, block_size, num_blocks);
  p.debug_flags = debug_flags;
  return tu_engine_p(&p);
}

/* ---------------------------------------------------------------- sequences */
static inline void tu_fill(int32_t *tokens, uint32_t n, int32_t first) {
  for (uint32_t i = 0; i < n; i++) tokens[i] = first + (int32_t)i;
}

/* Allocates with an optional salt (NULL = none); returns the id, 0 on failure (counted). */
static inline uint64_t tu_alloc_salt(pkv_engine *e, const int32_t *tokens, uint32_t n,
                                     const char *salt, uint32_t *out_cached) {
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = salt;
  sp.cache_salt_len = salt ? (uint32_t)strlen(salt) : 0;
  uint64_t seq = 0;
  uint32_t cached = 0xdeadbeef;
  if (!CHECK_OK(pkv_allocate(e, tokens, n, &sp, &seq, &cached))) return 0;
  CHECK(seq != 0);
  if (out_cached) *out_cached = cached;
  return seq;
}

static inline uint64_t tu_alloc(pkv_engine *e, const int32_t *tokens, uint32_t n,
                                uint32_t *out_cached) {
  return tu_alloc_salt(e, tokens, n, NULL, out_cached);
}

static inline pkv_stats tu_stats(pkv_engine *e) {
  pkv_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(pkv_engine_stats(e, &s));
  return s;
}

static inline struct pkv_seq_info tu_info(pkv_engine *e, uint64_t seq) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(e, seq, &info));
  return info;
}

/* Where e's pool and state slots are (pkv_pool_info). */
static inline struct pkv_pool_info tu_pool(pkv_engine *e) {
  struct pkv_pool_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_pool_info(e, &in));
  return in;
}

/* Where layer l of e is and what it holds (pkv_layer_info). */
static inline struct pkv_layer_info tu_layer_info(pkv_engine *e, uint32_t l) {
  struct pkv_layer_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_layer_info(e, l, &in));
  return in;
}

/* The bytes of state slot `slot`: a device one, or (host 1) a host state slot. */
static inline unsigned char *tu_state_slot(pkv_engine *e, int32_t slot, int host) {
  const struct pkv_pool_info in = tu_pool(e);
  unsigned char *base = (unsigned char *)(host ? in.host_state_base : in.state_base);
  return base + (uint64_t)slot * in.state_slot_bytes;
}

/* The block table of seq into out[cap]; returns its length. */
static inline uint32_t tu_table(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_block_table(e, seq, out, cap, &len));
  return len;
}

/* One step computing every uncomputed token of seqs[0..n). */
static inline int tu_compute(pkv_engine *e, const uint64_t *seqs, uint32_t n) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, seqs, NULL, n, &b))) return 0;
  return CHECK_OK(pkv_batch_end(b));
}

static inline int tu_compute1(pkv_engine *e, uint64_t seq) { return tu_compute(e, &seq, 1); }

static inline pkv_batch_view tu_view(const pkv_batch *b) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  CHECK_OK(pkv_batch_info(b, &v));
  return v;
}

/* ---------------------------------------------------------------- KV written as a host would */
/* What a host's kernels write (f32 pools) for position pos of a sequence tagged tag: K (v = 0) or
 * V (v = 1), element i of the token's row on one layer. */
static inline float tu_kv_value(uint32_t tag, int v, uint32_t layer, uint32_t pos, uint32_t i) {
  return (float)(tag * 100000 + v * 50000 + layer * 10000 + pos * 100 + i);
}

/* Writes (check 0) the pool K/V of seq's first n tokens through its block table, or (check 1)
 * returns how many of those floats differ from what a write would have put there. */
static inline uint32_t tu_kv_pattern(pkv_engine *e, uint64_t seq, uint32_t tag, uint32_t n,
                                     int check) {
  struct pkv_pool_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  if (!CHECK_OK(pkv_pool_info(e, &in)) || !CHECK(in.dtype == PKV_DTYPE_F32)) return 1;
  int32_t table[256];
  const uint32_t nb = tu_table(e, seq, table, 256);
  if (!CHECK((uint64_t)nb * in.block_size >= n)) return 1;
  uint32_t bad = 0;
  for (uint32_t pos = 0; pos < n; pos++)
    for (int v = 0; v < 2; v++)
      for (uint32_t l = 0; l < in.num_layers; l++) {
        float *row = (float *)(v ? in.v_base : in.k_base) + l * in.layer_stride +
                     (uint64_t)table[pos / in.block_size] * in.block_stride +
                     (pos % in.block_size) * in.token_stride;
        for (uint32_t i = 0; i < in.kv_heads * in.head_dim; i++) {
          if (check)
            bad += row[i] != tu_kv_value(tag, v, l, pos, i);
          else
            row[i] = tu_kv_value(tag, v, l, pos, i);
        }
      }
  return bad;
}

/* The engine's own invariant check. */
#define CHECK_ENGINE(e) CHECK_OK(pkv_engine_check(e))

/* ---------------------------------------------------------------- "nothing changed" */
/* The params calls other than pkv_engine_create (pkv_profile, pkv_kv_groups, pkv_kv_group_info)
 * refuse p with want, the message holding `says` (NULL: not checked), and write none of their
 * outputs. */
static inline void tu_params_calls_refuse(const pkv_engine_params *p, pkv_status want,
                                          const char *says) {
  pkv_kv_budget b;
  memset(&b, 0x5a, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(p, &b), want);
  if (says) CHECK(strstr(pkv_last_error(), says) != NULL);
  CHECK_EQ_INT(b.num_blocks, 0x5a5a5a5a5a5a5a5aull);
  uint32_t groups = 77, group_layers = 77, window[64];
  for (int i = 0; i < 64; i++) window[i] = 9;
  const uint32_t cap = p->num_layers < 64 ? p->num_layers : 64;
  CHECK_STATUS(pkv_kv_groups(p, NULL, NULL, window, cap, &groups, &group_layers), want);
  CHECK(groups == 77 && group_layers == 77 && window[0] == 9);
  struct pkv_kv_group_info info;
  memset(&info, 0x5a, sizeof info);
  info.struct_size = sizeof info;
  CHECK_STATUS(pkv_kv_group_info(p, 0, &info), want);
  CHECK_EQ_INT(info.num_layers, 0x5a5a5a5a);
}

static inline uint64_t tu_mix_(uint64_t h, const void *data, size_t n) {
  const unsigned char *c = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull; /* FNV-1a */
  return h;
}

/* A fingerprint of everything observable: stats (cumulative counters included) and, for each of
 * seqs, its status, info, block table and tokens. Equal before and after = nothing changed. */
static inline uint64_t tu_state(pkv_engine *e, const uint64_t *seqs, uint32_t n) {
  pkv_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  pkv_status st = pkv_engine_stats(e, &s);
  /* A store's writer thread counts its writes whenever it finishes them, and its fetcher thread
   * the lookups of submitted requests whenever it answers them: not a call's doing. */
  s.num_store_puts = s.num_store_put_errors = 0;
  s.num_store_lookups = s.num_store_hits = s.num_store_misses = s.num_store_rejected =
      s.num_store_errors = 0;
  uint64_t h = tu_mix_(14695981039346656037ull, &st, sizeof st);
  h = tu_mix_(h, &s, sizeof s);
  for (uint32_t i = 0; i < n; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    st = pkv_seq_info(e, seqs[i], &info);
    h = tu_mix_(h, &st, sizeof st);
    h = tu_mix_(h, &info, sizeof info);
    int32_t buf[1024];
    uint32_t len = 0;
    if (pkv_seq_block_table(e, seqs[i], buf, 1024, &len) == PKV_OK)
      h = tu_mix_(h, buf, len * sizeof buf[0]);
    if (pkv_seq_tokens(e, seqs[i], buf, 1024, &len) == PKV_OK)
      h = tu_mix_(h, buf, len * sizeof buf[0]);
  }
  return h;
}

#endif /* PKV_TEST_UTIL_H */
