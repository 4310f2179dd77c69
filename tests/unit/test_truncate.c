/* Rollback (pkv_truncate, DESIGN.md §12): a sequence keeps its first n tokens; blocks no kept token
 * needs go back (sealed ones stay cached), computed shrinks with it, and the next write into a
 * sealed block the cut left partly filled copies it first, so the prefix cache keeps its KV.
 * Tried on computed and reserved tokens, at and across block edges, on a forked pair, and with
 * every refusal changing nothing. */
#include "test_util.h"

enum { BS = 4, BLOCKS = 16 };

static void expect_seq(pkv_engine *e, uint64_t s, uint32_t tokens, uint32_t computed,
                       uint32_t blocks) {
  const struct pkv_seq_info in = tu_info(e, s);
  CHECK_EQ_INT(in.num_tokens, tokens);
  CHECK_EQ_INT(in.num_computed_tokens, computed);
  CHECK_EQ_INT(in.num_blocks, blocks);
  CHECK_ENGINE(e);
}

/* Computed tokens cut mid-block: the blocks past the cut go back (cached: their prefix still
 * hits), the cut block stays sealed in the cache, and appending copies it. */
static void test_computed_mid_block(void) {
  pkv_engine *e = tu_engine(BS, BLOCKS, 0);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t s = tu_alloc(e, t, 14, NULL);
  tu_compute1(e, s); /* 3 sealed blocks + 2 tokens */
  int32_t before[8];
  tu_table(e, s, before, 8);
  const uint32_t free0 = (uint32_t)tu_stats(e).num_free_blocks;
  CHECK_OK(pkv_truncate(e, s, 6));
  expect_seq(e, s, 6, 6, 2);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_free_blocks, free0 + 2);
  CHECK_EQ_INT(st.num_cached_blocks, 1); /* block 2 (sealed) went back cached */
  int32_t after[8];
  tu_table(e, s, after, 8);
  CHECK(after[0] == before[0] && after[1] == before[1]);
  /* Other tokens after the cut: the sealed block 1 is copied before the write. */
  int32_t other[3] = {900, 901, 902};
  const uint64_t cow0 = tu_stats(e).num_cow_copies;
  CHECK_OK(pkv_append(e, s, other, 3));
  CHECK_EQ_INT(tu_stats(e).num_cow_copies, cow0 + 1);
  tu_table(e, s, after, 8);
  CHECK(after[0] == before[0] && after[1] != before[1]);
  CHECK_ENGINE(e);
  tu_compute1(e, s);
  /* The original prompt still hits all three of its blocks. */
  uint32_t cached = 0;
  const uint64_t again = tu_alloc(e, t, 13, &cached);
  CHECK_EQ_INT(cached, 12);
  CHECK_OK(pkv_release(e, again));
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* At a block edge, and of reserved (not yet computed) tokens. */
static void test_edges_and_reserved(void) {
  pkv_engine *e = tu_engine(BS, BLOCKS, 0);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 50);
  const uint64_t s = tu_alloc(e, t, 9, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_append(e, s, t + 9, 6)); /* 15 tokens, 9 computed, 4 blocks */
  expect_seq(e, s, 15, 9, 4);
  CHECK_OK(pkv_truncate(e, s, 12)); /* reserved tokens dropped */
  expect_seq(e, s, 12, 9, 3);
  CHECK_OK(pkv_truncate(e, s, 8)); /* exactly at an edge: computed 8, two sealed blocks */
  expect_seq(e, s, 8, 8, 2);
  CHECK_OK(pkv_truncate(e, s, 8)); /* nothing to drop */
  expect_seq(e, s, 8, 8, 2);
  CHECK_OK(pkv_append(e, s, t + 8, 1)); /* a new block, no copy: block 1 is full */
  CHECK_EQ_INT(tu_stats(e).num_cow_copies, 0);
  expect_seq(e, s, 9, 8, 3);
  CHECK_OK(pkv_truncate(e, s, 1));
  expect_seq(e, s, 1, 1, 1);
  int32_t tokens[4];
  uint32_t len = 0;
  CHECK_OK(pkv_seq_tokens(e, s, tokens, 4, &len));
  CHECK(len == 1 && tokens[0] == 50);
  CHECK_OK(pkv_release(e, s));
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_free_blocks, BLOCKS);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A forked pair: the child's cut drops only its references; a copy-on-write block only its
 * dropped tokens needed goes back; the parent's blocks and KV are untouched. */
static void test_forked_pair(void) {
  pkv_engine *e = tu_engine(BS, BLOCKS, 0);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 100);
  const uint64_t p = tu_alloc(e, t, 6, NULL);
  tu_compute1(e, p);
  uint64_t c = 0;
  CHECK_OK(pkv_fork(e, p, &c));
  CHECK_OK(pkv_append(e, c, t + 6, 1)); /* copy-on-write of the shared partial block */
  int32_t pt[4], ct[4];
  tu_table(e, p, pt, 4);
  tu_table(e, c, ct, 4);
  CHECK(ct[0] == pt[0] && ct[1] != pt[1]);
  const uint32_t free0 = (uint32_t)tu_stats(e).num_free_blocks;
  CHECK_OK(pkv_truncate(e, c, 4)); /* back to the shared full block: the copy goes */
  expect_seq(e, c, 4, 4, 1);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, free0 + 1);
  expect_seq(e, p, 6, 6, 2);
  int32_t pt2[4];
  tu_table(e, p, pt2, 4);
  CHECK(pt2[0] == pt[0] && pt2[1] == pt[1]);
  CHECK_OK(pkv_truncate(e, p, 5)); /* the parent's own cut: block 0 stays shared with c */
  expect_seq(e, p, 5, 5, 2);
  CHECK_OK(pkv_release(e, c));
  CHECK_OK(pkv_release(e, p));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Preempted: just the tokens; refusals change nothing. */
static void test_states_and_refusals(void) {
  pkv_engine *e = tu_engine(BS, BLOCKS, 0);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 200);
  const uint64_t s = tu_alloc(e, t, 10, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_preempt(e, s));
  CHECK_OK(pkv_truncate(e, s, 7));
  expect_seq(e, s, 7, 0, 0);
  uint32_t cached = 0;
  CHECK_OK(pkv_resume(e, s, &cached));
  CHECK_EQ_INT(cached, 4);
  expect_seq(e, s, 7, 4, 2);
  const uint64_t st = tu_state(e, &s, 1);
  CHECK_ERR(e, pkv_truncate(e, s, 0), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_truncate(e, s, 8), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_truncate(e, s + 999, 1), PKV_ERR_NOT_FOUND);
  CHECK_ERR(NULL, pkv_truncate(NULL, s, 1), PKV_ERR_INVALID_ARGUMENT);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b));
  CHECK_ERR(e, pkv_truncate(e, s, 5), PKV_ERR_STATE);
  pkv_batch_abort(b);
  CHECK(tu_state(e, &s, 1) == st);
  /* A request of the scheduler is not truncated by hand. */
  uint64_t r = 0;
  CHECK_OK(pkv_submit(e, t, 5, NULL, &r));
  CHECK_ERR(e, pkv_truncate(e, r, 2), PKV_ERR_STATE);
  CHECK_OK(pkv_release(e, r));
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Swapped out: refused (swap it in first). */
static void test_swapped(void) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.host_num_blocks = 8;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  int32_t t[8];
  tu_fill(t, 8, 300);
  const uint64_t s = tu_alloc(e, t, 6, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_swap_out(e, s));
  CHECK_ERR(e, pkv_truncate(e, s, 3), PKV_ERR_STATE);
  CHECK_OK(pkv_swap_in(e, s));
  CHECK_OK(pkv_truncate(e, s, 3));
  expect_seq(e, s, 3, 3, 1);
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_computed_mid_block);
  TU_RUN(test_edges_and_reserved);
  TU_RUN(test_forked_pair);
  TU_RUN(test_states_and_refusals);
  TU_RUN(test_swapped);
  return tu_summary();
}
