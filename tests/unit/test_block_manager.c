/* The block manager: all-or-nothing NO_SPACE, the allocation query, fork and copy-on-write,
 * eviction order, preemption and resume. */
#include "test_util.h"

/* pkv_allocate_query's answer is what pkv_allocate then takes. */
static void check_query_then_alloc(pkv_engine *e, const int32_t *t, uint32_t n, uint64_t *out) {
  uint32_t q_blocks = 0, q_cached = 0, cached = 99;
  pkv_stats before = tu_stats(e);
  CHECK_OK(pkv_allocate_query(e, t, n, NULL, &q_blocks, &q_cached));
  pkv_stats mid = tu_stats(e);
  CHECK(memcmp(&before, &mid, sizeof before) == 0); /* the query changes nothing */
  *out = tu_alloc(e, t, n, &cached);
  pkv_stats after = tu_stats(e);
  CHECK_EQ_INT(before.num_free_blocks - after.num_free_blocks, q_blocks);
  CHECK_EQ_INT(cached, q_cached);
}

static void test_no_space_allocate(void) {
  pkv_engine *e = tu_engine(4, 8, 0);
  if (!e) return;
  int32_t ta[20], tb[16];
  tu_fill(ta, 20, 1);
  tu_fill(tb, 16, 100);
  uint64_t seqs[4] = {0};
  check_query_then_alloc(e, ta, 20, &seqs[0]);
  tu_compute1(e, seqs[0]);
  uint32_t q_blocks = 0;
  CHECK_OK(pkv_allocate_query(e, tb, 16, NULL, &q_blocks, NULL));
  CHECK_EQ_INT(q_blocks, 4);
  uint64_t st = tu_state(e, seqs, 1), seq = 12345;
  uint32_t cached = 12345;
  CHECK_ERR(e, pkv_allocate(e, tb, 16, NULL, &seq, &cached), PKV_ERR_NO_SPACE);
  CHECK_EQ_INT(seq, 12345); /* outputs untouched too */
  CHECK_EQ_INT(cached, 12345);
  CHECK(tu_state(e, seqs, 1) == st);
  CHECK_ENGINE(e);
  check_query_then_alloc(e, tb, 12, &seqs[1]);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, 0);

  /* release a (5 sealed blocks, all cached); a prompt hitting 4 of them revives 4 + takes 1 */
  CHECK_OK(pkv_release(e, seqs[0]));
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 5);
  int32_t tc[17];
  memcpy(tc, ta, 16 * sizeof ta[0]);
  tc[16] = 999;
  check_query_then_alloc(e, tc, 17, &seqs[2]);
  CHECK_EQ_INT(tu_info(e, seqs[2]).num_cached_tokens, 16);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_no_space_append_resume(void) {
  pkv_engine *e = tu_engine(4, 8, 0);
  if (!e) return;
  int32_t t[40];
  tu_fill(t, 40, 1);
  uint64_t seqs[3];
  seqs[0] = tu_alloc(e, t, 18, NULL);      /* 5 blocks, the last holds 2 */
  seqs[1] = tu_alloc(e, t + 20, 12, NULL); /* 3 blocks: the pool is full */
  uint64_t st = tu_state(e, seqs, 2);
  CHECK_ERR(e, pkv_append(e, seqs[1], t, 1), PKV_ERR_NO_SPACE);
  CHECK_ERR(e, pkv_append(e, seqs[0], t, 3), PKV_ERR_NO_SPACE); /* 2 fit, 1 does not */
  CHECK(tu_state(e, seqs, 2) == st);
  CHECK_OK(pkv_append(e, seqs[0], t, 2)); /* exactly fills the last block */
  CHECK_EQ_INT(tu_info(e, seqs[0]).num_tokens, 20);
  CHECK_EQ_INT(tu_info(e, seqs[0]).num_blocks, 5);

  CHECK_OK(pkv_preempt(e, seqs[1]));
  seqs[2] = tu_alloc(e, t + 30, 5, NULL); /* takes 2 of the 3 given back */
  st = tu_state(e, seqs, 3);
  uint32_t cached = 12345;
  CHECK_ERR(e, pkv_resume(e, seqs[1], &cached), PKV_ERR_NO_SPACE);
  CHECK_EQ_INT(cached, 12345);
  CHECK(tu_state(e, seqs, 3) == st);
  CHECK_EQ_INT(tu_info(e, seqs[1]).is_preempted, 1);
  CHECK_OK(pkv_release(e, seqs[2]));
  CHECK_OK(pkv_resume(e, seqs[1], &cached));
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_info(e, seqs[1]).num_blocks, 3);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Fork, then append to the child into the shared, partly filled block: one copy, listed by the
 * next batch; the tables then differ only in the last block. */
static void test_fork_copy_on_write(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  int32_t t[6];
  tu_fill(t, 6, 10);
  uint64_t p = tu_alloc(e, t, 6, NULL), c = 0;
  CHECK_ERR(e, pkv_fork(e, p, &c), PKV_ERR_STATE); /* not computed yet */
  tu_compute1(e, p);
  CHECK_OK(pkv_fork(e, p, &c));
  CHECK(c != 0 && c != p);
  int32_t tp[4], tc[4];
  CHECK_EQ_INT(tu_table(e, c, tc, 4), 2);
  tu_table(e, p, tp, 4);
  CHECK(memcmp(tp, tc, sizeof tp[0] * 2) == 0);
  struct pkv_seq_info ci = tu_info(e, c);
  CHECK_EQ_INT(ci.num_tokens, 6);
  CHECK_EQ_INT(ci.num_computed_tokens, 6);
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 2);

  int32_t next = 42;
  CHECK_OK(pkv_append(e, c, &next, 1));
  CHECK_EQ_INT(tu_stats(e).num_cow_copies, 1);
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 3);
  CHECK_EQ_INT(tu_table(e, c, tc, 4), 2);
  CHECK_EQ_INT(tc[0], tp[0]);
  CHECK(tc[1] != tp[1]);

  /* an aborted batch gives the copy back to the queue; the next one lists it again */
  for (int round = 0; round < 2; round++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_batch_begin(e, &c, NULL, 1, &b))) break;
    pkv_batch_view v = tu_view(b);
    if (CHECK_EQ_INT(v.num_copies, 1)) {
      CHECK_EQ_INT(v.copy_src[0], tp[1]);
      CHECK_EQ_INT(v.copy_dst[0], tc[1]);
    }
    CHECK_EQ_INT(v.num_tokens, 1);
    CHECK_EQ_INT(v.slot_mapping[0], (int64_t)tc[1] * 4 + 2);
    if (round == 0)
      pkv_batch_abort(b);
    else
      CHECK_OK(pkv_batch_end(b));
  }
  /* no more copies: c's last block is its own now, and so is p's */
  CHECK_OK(pkv_append(e, c, &next, 1));
  CHECK_OK(pkv_append(e, p, &next, 1));
  CHECK_EQ_INT(tu_stats(e).num_cow_copies, 1);
  uint64_t both[2] = {p, c};
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, both, NULL, 2, &b))) {
    CHECK_EQ_INT(tu_view(b).num_copies, 0);
    CHECK_OK(pkv_batch_end(b));
  }
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Fork of a sequence whose last block is full: append takes a new block, no copy. */
static void test_fork_full_last_block(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  int32_t t[8];
  tu_fill(t, 8, 10);
  uint64_t p = tu_alloc(e, t, 8, NULL), c = 0;
  tu_compute1(e, p);
  CHECK_OK(pkv_fork(e, p, &c));
  CHECK_OK(pkv_append(e, c, t, 1));
  CHECK_EQ_INT(tu_stats(e).num_cow_copies, 0);
  CHECK_EQ_INT(tu_info(e, c).num_blocks, 3);
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 3);
  CHECK_OK(pkv_release(e, p));
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 3); /* c still holds all of them */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Unsealed blocks are reused first; a released sequence's last block is evicted before its first;
 * an earlier release is evicted before a later one. */
static void test_eviction_order(void) {
  pkv_engine *e = tu_engine(4, 8, 0);
  if (!e) return;
  int32_t t[64];
  tu_fill(t, 64, 1);
  int32_t ta[4], tb[4], tc[4], td[4];
  uint64_t a = tu_alloc(e, t, 14, NULL); /* a0 a1 a2 sealed, a3 not */
  tu_compute1(e, a);
  tu_table(e, a, ta, 4);
  CHECK_OK(pkv_release(e, a)); /* free list: [a3, 4 fresh, a2, a1, a0] */
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 3);

  uint64_t b = tu_alloc(e, t + 20, 14, NULL); /* a3 + 3 fresh: no eviction */
  tu_table(e, b, tb, 4);
  CHECK_EQ_INT(tb[0], ta[3]);
  CHECK_EQ_INT(tu_stats(e).num_evictions, 0);
  uint64_t c = tu_alloc(e, t + 40, 5, NULL); /* the last fresh one, then a2 */
  tu_table(e, c, tc, 4);
  CHECK_EQ_INT(tc[1], ta[2]);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_evictions, 1);
  CHECK_EQ_INT(s.num_cached_blocks, 2);

  CHECK_OK(pkv_release(e, b)); /* nothing sealed: all to the head */
  int32_t pd[13];
  memcpy(pd, t, 12 * sizeof t[0]);
  pd[12] = 999;
  uint32_t cached = 99;
  uint64_t d = tu_alloc(e, pd, 13, &cached); /* a0 a1 hit; a2 is gone */
  CHECK_EQ_INT(cached, 8);
  tu_table(e, d, td, 4);
  CHECK_EQ_INT(td[0], ta[0]);
  CHECK_EQ_INT(td[1], ta[1]);
  CHECK_EQ_INT(tu_stats(e).num_evictions, 1);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_eviction_release_order(void) {
  pkv_engine *e = tu_engine(4, 4, 0);
  if (!e) return;
  int32_t x[5] = {1, 2, 3, 4, 9}, y[5] = {5, 6, 7, 8, 9}, z[12];
  tu_fill(z, 12, 100);
  uint64_t xy[2] = {tu_alloc(e, x, 4, NULL), tu_alloc(e, y, 4, NULL)};
  tu_compute(e, xy, 2);
  CHECK_OK(pkv_release(e, xy[0]));
  CHECK_OK(pkv_release(e, xy[1])); /* [f, f, x0, y0] */
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 2);
  tu_alloc(e, z, 12, NULL); /* f, f, x0 */
  CHECK_EQ_INT(tu_stats(e).num_evictions, 1);
  uint32_t cx = 99, cy = 99;
  CHECK_OK(pkv_allocate_query(e, x, 5, NULL, NULL, &cx));
  CHECK_OK(pkv_allocate_query(e, y, 5, NULL, NULL, &cy));
  CHECK_EQ_INT(cx, 0);
  CHECK_EQ_INT(cy, 4);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_preempt_resume(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  int32_t t[13];
  tu_fill(t, 13, 1);
  uint64_t a = tu_alloc(e, t, 10, NULL);
  tu_compute1(e, a);
  CHECK_OK(pkv_append(e, a, t + 10, 3));
  tu_compute1(e, a); /* 13 tokens: blocks 0..2 sealed */
  int32_t before[4], after[4];
  tu_table(e, a, before, 4);
  CHECK_OK(pkv_preempt(e, a));
  struct pkv_seq_info info = tu_info(e, a);
  CHECK_EQ_INT(info.is_preempted, 1);
  CHECK_EQ_INT(info.num_computed_tokens, 0);
  CHECK_EQ_INT(info.num_tokens, 13);
  CHECK_EQ_INT(info.num_blocks, 0);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_preemptions, 1);
  CHECK_EQ_INT(s.num_preempted_seqs, 1);
  CHECK_EQ_INT(s.num_seqs, 1);
  CHECK_EQ_INT(s.num_used_blocks, 0);
  CHECK_EQ_INT(s.num_cached_blocks, 3);
  pkv_batch *b = NULL;
  CHECK_ERR(e, pkv_batch_begin(e, &a, NULL, 1, &b), PKV_ERR_STATE);
  CHECK_ENGINE(e);

  uint32_t cached = 99;
  CHECK_OK(pkv_resume(e, a, &cached));
  CHECK_EQ_INT(cached, 12);
  info = tu_info(e, a);
  CHECK_EQ_INT(info.is_preempted, 0);
  CHECK_EQ_INT(info.num_computed_tokens, 12);
  CHECK_EQ_INT(info.num_cached_tokens, 12);
  CHECK_EQ_INT(tu_table(e, a, after, 4), 4);
  CHECK(memcmp(before, after, 3 * sizeof before[0]) == 0);
  CHECK_EQ_INT(tu_stats(e).num_preempted_seqs, 0);
  if (CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
    pkv_batch_view v = tu_view(b);
    CHECK_EQ_INT(v.num_tokens, 1);
    CHECK_EQ_INT(v.positions[0], 12);
    CHECK_OK(pkv_batch_end(b));
  }
  int32_t toks[16];
  uint32_t len = 0;
  CHECK_OK(pkv_seq_tokens(e, a, toks, 16, &len));
  CHECK_EQ_INT(len, 13);
  CHECK(memcmp(toks, t, sizeof t) == 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_no_space_allocate);
  TU_RUN(test_no_space_append_resume);
  TU_RUN(test_fork_copy_on_write);
  TU_RUN(test_fork_full_last_block);
  TU_RUN(test_eviction_order);
  TU_RUN(test_eviction_release_order);
  TU_RUN(test_preempt_resume);
  return tu_summary();
}
