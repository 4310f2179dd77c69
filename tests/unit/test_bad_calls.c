/* Bad input, part 2: sequence and batch calls with bad ids, counts, buffers and states, and
 * (0.7) the sparse attention calls. Each refused call returns its status, leaves a message in
 * both error channels, and changes nothing. */
#include "test_util.h"

enum { BS = 4, MAX_LEN = 32 };

typedef struct {
  pkv_engine *e;
  uint64_t live[3]; /* a: 6 tokens computed; b: 9 tokens, 4 computed; p: preempted */
  uint64_t released;
} fixture;

static int setup(fixture *f) {
  pkv_engine_params p;
  tu_params(&p, BS, 16);
  p.max_model_len = MAX_LEN;
  f->e = tu_engine_p(&p);
  if (!f->e) return 0;
  int32_t t[20];
  tu_fill(t, 20, 1);
  f->live[0] = tu_alloc(f->e, t, 6, NULL);
  tu_compute1(f->e, f->live[0]);
  f->live[1] = tu_alloc(f->e, t + 8, 9, NULL);
  uint32_t four = 4;
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(f->e, &f->live[1], &four, 1, &b))) CHECK_OK(pkv_batch_end(b));
  f->live[2] = tu_alloc(f->e, t, 3, NULL);
  CHECK_OK(pkv_preempt(f->e, f->live[2]));
  f->released = tu_alloc(f->e, t, 2, NULL);
  CHECK_OK(pkv_release(f->e, f->released));
  return f->live[0] && f->live[1] && f->live[2];
}

/* Refused with want, both messages set, nothing observable changed. A successful call first
 * clears the engine's message, so the one checked is this call's. */
#define REFUSED(f, expr, want)                     \
  do {                                             \
    uint64_t st_ = tu_state((f)->e, (f)->live, 3); \
    tu_stats((f)->e);                              \
    CHECK_ERR((f)->e, expr, want);                 \
    CHECK(tu_state((f)->e, (f)->live, 3) == st_);  \
  } while (0)

static void test_bad_allocate(fixture *f) {
  int32_t t[MAX_LEN + 1];
  tu_fill(t, MAX_LEN + 1, 100);
  uint64_t seq = 777;
  uint32_t n = 777, m = 777;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  REFUSED(f, pkv_allocate(f->e, NULL, 4, NULL, &seq, &n), bad);
  REFUSED(f, pkv_allocate(f->e, t, 0, NULL, &seq, &n), bad);
  REFUSED(f, pkv_allocate(f->e, t, MAX_LEN + 1, NULL, &seq, &n), bad);
  REFUSED(f, pkv_allocate(f->e, t, 4, NULL, NULL, &n), bad);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt_len = 3; /* and no salt bytes */
  REFUSED(f, pkv_allocate(f->e, t, 4, &sp, &seq, &n), bad);
  REFUSED(f, pkv_allocate_query(f->e, NULL, 4, NULL, &n, &m), bad);
  REFUSED(f, pkv_allocate_query(f->e, t, 0, NULL, &n, &m), bad);
  REFUSED(f, pkv_allocate_query(f->e, t, MAX_LEN + 1, NULL, &n, &m), bad);
  CHECK_EQ_INT(seq, 777);
  CHECK_EQ_INT(n, 777);
  CHECK_EQ_INT(m, 777);
  CHECK_OK(pkv_allocate_query(f->e, t, MAX_LEN, NULL, NULL, NULL)); /* the limit itself is fine */
}

static void test_unknown_ids(fixture *f) {
  const uint64_t ids[3] = {0, f->released, 0x7fffffffffffull};
  int32_t t[4] = {1, 2, 3, 4}, buf[8];
  uint32_t n = 0;
  uint64_t child = 0;
  struct pkv_seq_info info;
  pkv_batch *b = NULL;
  const pkv_status nf = PKV_ERR_NOT_FOUND;
  for (int i = 0; i < 3; i++) {
    uint64_t id = ids[i];
    REFUSED(f, pkv_append(f->e, id, t, 1), nf);
    REFUSED(f, pkv_fork(f->e, id, &child), nf);
    REFUSED(f, pkv_release(f->e, id), nf);
    REFUSED(f, pkv_preempt(f->e, id), nf);
    REFUSED(f, pkv_resume(f->e, id, &n), nf);
    info.struct_size = sizeof info;
    REFUSED(f, pkv_seq_info(f->e, id, &info), nf);
    REFUSED(f, pkv_seq_block_table(f->e, id, buf, 8, &n), nf);
    REFUSED(f, pkv_seq_tokens(f->e, id, buf, 8, &n), nf);
    uint64_t pair[2] = {f->live[1], id};
    REFUSED(f, pkv_batch_begin(f->e, pair, NULL, 2, &b), nf);
  }
  CHECK(b == NULL);
}

static void test_bad_seq_calls(fixture *f) {
  int32_t t[MAX_LEN] = {0}, buf[8];
  uint32_t n = 0;
  uint64_t a = f->live[0], child = 0;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  REFUSED(f, pkv_append(f->e, a, NULL, 1), bad);
  REFUSED(f, pkv_append(f->e, a, t, 0), bad);
  REFUSED(f, pkv_append(f->e, a, t, MAX_LEN - 6 + 1), bad); /* past max_model_len */
  REFUSED(f, pkv_fork(f->e, a, NULL), bad);
  REFUSED(f, pkv_fork(f->e, f->live[1], &child), PKV_ERR_STATE); /* not all computed */
  REFUSED(f, pkv_resume(f->e, a, &n), PKV_ERR_STATE);            /* not preempted */
  REFUSED(f, pkv_seq_info(f->e, a, NULL), bad);
  REFUSED(f, pkv_seq_block_table(f->e, a, buf, 8, NULL), bad);
  REFUSED(f, pkv_seq_block_table(f->e, a, NULL, 8, &n), bad);
  REFUSED(f, pkv_seq_tokens(f->e, a, buf, 8, NULL), bad);
  REFUSED(f, pkv_seq_tokens(f->e, a, NULL, 8, &n), bad);
  CHECK_EQ_INT(child, 0);
}

/* A short buffer: INVALID_ARGUMENT with the size needed; cap 0 asks the size. */
static void test_short_buffers(fixture *f) {
  uint64_t bq = f->live[1];
  int32_t buf[8];
  uint32_t n = 0;
  REFUSED(f, pkv_seq_block_table(f->e, bq, buf, 2, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 3);
  n = 0;
  REFUSED(f, pkv_seq_tokens(f->e, bq, buf, 8, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 9);
  n = 0;
  CHECK_OK(pkv_seq_block_table(f->e, bq, NULL, 0, &n));
  CHECK_EQ_INT(n, 3);
  CHECK_OK(pkv_seq_tokens(f->e, bq, NULL, 0, &n));
  CHECK_EQ_INT(n, 9);
  CHECK_OK(pkv_seq_tokens(f->e, f->live[2], buf, 8, &n)); /* a preempted seq keeps its tokens */
  CHECK_EQ_INT(n, 3);
  CHECK_OK(pkv_seq_block_table(f->e, f->live[2], NULL, 0, &n));
  CHECK_EQ_INT(n, 0);
}

static void test_bad_batch_begin(fixture *f) {
  uint64_t a = f->live[0], bq = f->live[1];
  pkv_batch *const sentinel = (pkv_batch *)(void *)f;
  pkv_batch *b = sentinel;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  uint64_t dup[2] = {bq, bq}, one[1] = {bq}, pre[1] = {f->live[2]};
  uint32_t zero = 0, too_many = 6, counts[2] = {1, 1};
  REFUSED(f, pkv_batch_begin(f->e, NULL, NULL, 1, &b), bad);
  REFUSED(f, pkv_batch_begin(f->e, one, NULL, 0, &b), bad);
  REFUSED(f, pkv_batch_begin(f->e, one, NULL, 1, NULL), bad);
  REFUSED(f, pkv_batch_begin(f->e, dup, counts, 2, &b), bad);
  REFUSED(f, pkv_batch_begin(f->e, one, &zero, 1, &b), bad);
  REFUSED(f, pkv_batch_begin(f->e, one, &too_many, 1, &b), bad); /* 5 uncomputed */
  REFUSED(f, pkv_batch_begin(f->e, &a, NULL, 1, &b), bad);       /* nothing to compute */
  REFUSED(f, pkv_batch_begin(f->e, pre, NULL, 1, &b), PKV_ERR_STATE);
  CHECK(b == sentinel);
}

/* While a batch is open: no second one, and its members cannot change. Others can. */
static void test_open_batch(fixture *f) {
  uint64_t a = f->live[0], bq = f->live[1], child = 0;
  int32_t t[2] = {5, 6};
  uint32_t two = 2;
  pkv_batch *b = NULL, *b2 = NULL;
  if (!CHECK_OK(pkv_batch_begin(f->e, &bq, &two, 1, &b))) return;
  REFUSED(f, pkv_batch_begin(f->e, &a, NULL, 1, &b2), PKV_ERR_STATE);
  CHECK_OK(pkv_append(f->e, a, t, 1)); /* a is not a member */
  REFUSED(f, pkv_batch_begin(f->e, &a, NULL, 1, &b2), PKV_ERR_STATE);
  REFUSED(f, pkv_append(f->e, bq, t, 1), PKV_ERR_STATE);
  REFUSED(f, pkv_fork(f->e, bq, &child), PKV_ERR_STATE);
  REFUSED(f, pkv_release(f->e, bq), PKV_ERR_STATE);
  REFUSED(f, pkv_preempt(f->e, bq), PKV_ERR_STATE);
  CHECK(b2 == NULL);
  CHECK_EQ_INT(tu_info(f->e, bq).in_batch, 1);
  CHECK_STATUS(pkv_batch_info(b, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ENGINE(f->e);
  CHECK_OK(pkv_batch_end(b));
  CHECK_EQ_INT(tu_info(f->e, bq).num_computed_tokens, 6);
  REFUSED(f, pkv_fork(f->e, a, &child), PKV_ERR_STATE); /* its appended token is not computed */
}

/* Destroying an engine with an open batch frees both (ASan checks the rest). */
static void test_destroy_with_open_batch(void) {
  pkv_engine *e = tu_engine(BS, 8, 0);
  if (!e) return;
  int32_t t[5] = {1, 2, 3, 4, 5};
  uint64_t a = tu_alloc(e, t, 5, NULL);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b));
  pkv_engine_destroy(e);
}

/* A handle whose batch ended is refused by every batch call, also while a newer batch of the same
 * engine is open (in 0.1 a handle was the batch's address, which a new batch could reuse), and
 * also after its engine is gone. The newer batch is untouched. */
static void test_stale_handles(fixture *f) {
  uint64_t a = f->live[0], bq = f->live[1];
  int32_t t[1] = {5};
  CHECK_OK(pkv_append(f->e, a, t, 1));
  uint32_t one = 1;
  pkv_batch *old = NULL, *cur = NULL;
  if (!CHECK_OK(pkv_batch_begin(f->e, &bq, &one, 1, &old))) return;
  CHECK_OK(pkv_batch_end(old));
  for (int round = 0; round < 8; round++) { /* end/begin again: an allocator often reuses memory */
    if (!CHECK_OK(pkv_batch_begin(f->e, &bq, &one, 1, &cur))) return;
    CHECK(cur != old);
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    float x[64];
    int32_t sampled = 0;
    CHECK_STATUS(pkv_batch_info(old, &v), PKV_ERR_STATE);
    CHECK_STATUS(pkv_attention(old, 0, x, x, x, x + 32), PKV_ERR_STATE);
    CHECK_STATUS(pkv_batch_end(old), PKV_ERR_STATE);
    CHECK_STATUS(pkv_commit(old, &sampled), PKV_ERR_STATE);
    pkv_batch_abort(old); /* ignored */
    CHECK_EQ_INT(tu_info(f->e, bq).in_batch, 1);
    CHECK_OK(pkv_batch_info(cur, &v));
    CHECK_EQ_INT(v.num_seqs, 1);
    if (round + 1 < 8) {
      pkv_batch_abort(cur);
      old = cur;
    }
  }
  CHECK_OK(pkv_batch_end(cur));
  /* A handle outlives its engine's destruction as a refused value, not a read of freed memory. */
  pkv_engine *e = tu_engine(BS, 8, 0);
  if (!e) return;
  uint64_t s = tu_alloc(e, t, 1, NULL);
  pkv_batch *gone = NULL;
  CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &gone));
  pkv_engine_destroy(e);
  CHECK_STATUS(pkv_batch_end(gone), PKV_ERR_STATE);
  pkv_batch_abort(gone);
}

#define WITH_FIXTURE(fn)         \
  static void fn##_fresh(void) { \
    fixture f;                   \
    memset(&f, 0, sizeof f);     \
    if (setup(&f)) {             \
      fn(&f);                    \
      CHECK_ENGINE(f.e);         \
    }                            \
    pkv_engine_destroy(f.e);     \
  }

WITH_FIXTURE(test_bad_allocate)
WITH_FIXTURE(test_unknown_ids)
WITH_FIXTURE(test_bad_seq_calls)
WITH_FIXTURE(test_short_buffers)
WITH_FIXTURE(test_bad_batch_begin)
WITH_FIXTURE(test_open_batch)
WITH_FIXTURE(test_stale_handles)

/* ---------------------------------------------------------------- sparse attention (0.7) */
/* An MLA engine (latent 16 + 8, f32) whose layer 0 has an fp8 indexer of index_dim values, 2
 * heads, top-k 4, and layer 1 none. */
static pkv_engine *sparse_engine(uint32_t index_dim) {
  static pkv_layer_spec s[2];
  memset(s, 0, sizeof s);
  s[0].kind = s[1].kind = PKV_LAYER_MLA;
  s[0].index_head_dim = index_dim, s[0].index_n_heads = 2, s[0].index_topk = 4;
  pkv_engine_params p;
  tu_params(&p, BS, 16);
  p.num_q_heads = 2, p.num_kv_heads = 1, p.head_dim = 24, p.softmax_scale = 0.2f;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = 16, p.qk_rope_head_dim = 8;
  p.layer_specs = s, p.layer_spec_size = sizeof s[0];
  return tu_engine_p(&p);
}

/* The pool's bytes and the sequence's state: what a refused call must leave as it was. */
static uint64_t sparse_state(pkv_engine *e, uint64_t seq) {
  const struct pkv_pool_info pool = tu_pool(e);
  return tu_mix_(tu_state(e, &seq, 1), pool.k_base, pool.bytes_per_pool);
}

/* Refused with want and a message holding says; the pool, the sequence and every output
 * buffer (a fingerprint of `bufs`) as they were. */
#define SPARSE_REFUSED(e, seq, expr, want, says)                                          \
  do {                                                                                    \
    const uint64_t st_ = sparse_state((e), (seq)), out_ = tu_mix_(0, &bufs, sizeof bufs); \
    CHECK_ERR((e), expr, want);                                                           \
    if (!CHECK(strstr(pkv_last_error(), (says)) != NULL))                                 \
      fprintf(stderr, "  wanted \"%s\" in \"%s\"\n", (says), pkv_last_error());           \
    CHECK(sparse_state((e), (seq)) == st_ && tu_mix_(0, &bufs, sizeof bufs) == out_);     \
  } while (0)

/* Inputs and outputs of the three calls for 6 tokens (f32): every output 0x5a before. */
typedef struct {
  float k[6 * 16], q[6 * 2 * 16], w[6 * 2], lat[6 * 24], mq[6 * 2 * 24];
  int32_t top[6 * 4];
  float out[6 * 2 * 16];
} sparse_bufs;

/* Each refusal in an open batch (the batch's first calls: its copies not yet done), then the
 * calls themselves succeed; a batch that has ended is refused by all three. */
static void test_sparse_refusals(void) {
  pkv_engine *e = sparse_engine(16);
  int32_t t[6] = {1, 2, 3, 4, 5, 6};
  uint64_t a = e ? tu_alloc(e, t, 6, NULL) : 0;
  pkv_batch *b = NULL;
  if (!a || !CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
    pkv_engine_destroy(e);
    return;
  }
  static sparse_bufs bufs;
  memset(&bufs, 0, sizeof bufs);
  for (int i = 0; i < 6 * 2; i++) bufs.w[i] = 1.0f;
  memset(bufs.top, 0x5a, sizeof bufs.top), memset(bufs.out, 0x5a, sizeof bufs.out);
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 1, bufs.k, 0), bad, "layer 1 has no indexer");
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 2, bufs.k, 0), bad, "layer 2 of 2");
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 0, NULL, 0), bad, "k (the new tokens' indexer keys)");
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 0, bufs.k, 2), bad, "flags 0x2");
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 0, bufs.k, 3), bad, "PKV_INDEXER_SCALE_UE8M0");
  const float *w = bufs.w;
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 1, bufs.q, w, 0, bufs.top), bad, "has no indexer");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 7, bufs.q, w, 0, bufs.top), bad, "layer 7 of 2");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, NULL, w, 0, bufs.top), bad, "must not be NULL");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, bufs.q, NULL, 0, bufs.top), bad, "weights");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, bufs.q, w, 0, NULL), bad, "must not be NULL");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, bufs.q, w, 2, bufs.top), bad, "out_kind 2");
  float *mo = bufs.out;
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 1, bufs.mq, bufs.lat, bufs.top, mo), bad,
                 "layer 1 has no indexer");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, bufs.mq, bufs.lat, NULL, mo), bad, "indices");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, NULL, bufs.lat, bufs.top, mo), bad, "q");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, bufs.mq, NULL, bufs.top, mo), bad, "k");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, bufs.mq, bufs.lat, bufs.top, NULL), bad,
                 "out");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, bufs.mq, bufs.lat, bufs.top, bufs.mq), bad,
                 "out");
  CHECK_ERR(NULL, pkv_indexer_write(NULL, 0, bufs.k, 0), bad);
  CHECK_ERR(NULL, pkv_indexer_topk(NULL, 0, bufs.q, w, 0, bufs.top), bad);
  CHECK_ERR(NULL, pkv_sparse_mla_attention(NULL, 0, bufs.mq, bufs.lat, bufs.top, mo), bad);
  /* The batch is as it was: the calls run (keys of zeros: every score 0, positions 0 .. p). */
  CHECK_OK(pkv_indexer_write(b, 0, bufs.k, PKV_INDEXER_SCALE_UE8M0));
  CHECK_OK(pkv_indexer_topk(b, 0, bufs.q, w, PKV_TOPK_POSITIONS, bufs.top));
  CHECK(bufs.top[0] == 0 && bufs.top[1] == -1 && bufs.top[5 * 4 + 3] == 3);
  CHECK_OK(pkv_sparse_mla_attention(b, 0, bufs.mq, bufs.lat, bufs.top, mo));
  CHECK_OK(pkv_batch_end(b));
  const pkv_status ended = PKV_ERR_STATE;
  SPARSE_REFUSED(e, a, pkv_indexer_write(b, 0, bufs.k, 0), ended, "ended");
  SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, bufs.q, w, 0, bufs.top), ended, "ended");
  SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, bufs.mq, bufs.lat, bufs.top, mo), ended,
                 "ended");
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* index_head_dim the calls cannot run (the engine accepts it: pkv_layer_info says where the keys
 * are, for the host's kernels): not a multiple of 8, or past PKV_INDEXER_MAX_HEAD_DIM. */
static void test_sparse_unsupported(void) {
  const uint32_t dims[] = {12, PKV_INDEXER_MAX_HEAD_DIM + 8};
  for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
    pkv_engine *e = sparse_engine(dims[i]);
    int32_t t[3] = {1, 2, 3};
    uint64_t a = e ? tu_alloc(e, t, 3, NULL) : 0;
    pkv_batch *b = NULL;
    static float big[3 * 2 * 264 + 3 * 2 * 24];
    static int32_t top[3 * 4];
    static sparse_bufs bufs; /* only its fingerprint: big and top are these calls' buffers */
    if (a && CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
      const pkv_status no = PKV_ERR_UNSUPPORTED;
      SPARSE_REFUSED(e, a, pkv_indexer_write(b, 0, big, 0), no, "index_head_dim multiples of 8");
      SPARSE_REFUSED(e, a, pkv_indexer_topk(b, 0, big, big, 0, top), no, "up to 256");
      SPARSE_REFUSED(e, a, pkv_sparse_mla_attention(b, 0, big, big, top, big + 3 * 2 * 264), no,
                     "pkv_sparse_mla_attention supports index_head_dim");
      CHECK(top[0] == 0);
      CHECK_OK(pkv_batch_end(b));
    }
    pkv_engine_destroy(e);
  }
}

int main(void) {
  TU_RUN(test_bad_allocate_fresh);
  TU_RUN(test_unknown_ids_fresh);
  TU_RUN(test_bad_seq_calls_fresh);
  TU_RUN(test_short_buffers_fresh);
  TU_RUN(test_bad_batch_begin_fresh);
  TU_RUN(test_open_batch_fresh);
  TU_RUN(test_stale_handles_fresh);
  TU_RUN(test_destroy_with_open_batch);
  TU_RUN(test_sparse_refusals);
  TU_RUN(test_sparse_unsupported);
  return tu_summary();
}
