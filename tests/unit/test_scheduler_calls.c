/* The scheduler's calls used wrongly, and the calls around it: pkv_step / pkv_commit /
 * pkv_batch_end on the wrong kind of batch, a NULL sampled array, abort and replan, manual calls
 * on request sequences, releasing requests in every state, the request counters. */
#include "sched_util.h"

static void test_wrong_batch_kinds(void) {
  pkv_engine *e = su_engine(4, 32, 8, 64, 0, 1);
  if (!e) return;
  uint64_t r = su_submit_plain(e, 1, 5, 4, -1, 0);
  pkv_batch *b = NULL, *b2 = NULL;
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  uint64_t before = tu_state(e, &r, 1);
  CHECK_ERR(e, pkv_step(e, &b2), PKV_ERR_STATE);
  CHECK(b2 == NULL);
  CHECK_ERR(e, pkv_batch_end(b), PKV_ERR_STATE);
  CHECK_EQ_INT(tu_state(e, &r, 1), before);
  CHECK_EQ_INT(tu_info(e, r).in_batch, 1); /* still open */
  int32_t tok = 3;
  CHECK_OK(pkv_commit(b, &tok));
  CHECK_EQ_INT(tu_info(e, r).in_batch, 0);
  /* a manual batch: pkv_step refuses to open another, pkv_commit refuses to end it */
  int32_t t[8];
  tu_fill(t, 8, 500);
  uint64_t m = tu_alloc(e, t, 8, NULL);
  pkv_batch *mb = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &m, NULL, 1, &mb))) return;
  CHECK_ERR(e, pkv_step(e, &b2), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_commit(mb, &tok), PKV_ERR_STATE);
  CHECK_EQ_INT(tu_info(e, m).in_batch, 1);
  CHECK_OK(pkv_batch_end(mb));
  CHECK_EQ_INT(tu_info(e, m).num_computed_tokens, 8);
  CHECK_ERR(NULL, pkv_commit(NULL, &tok), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_commit_null_tokens(void) {
  pkv_engine *e = su_engine(4, 32, 8, 6, 0, 1);
  if (!e) return;
  uint64_t r = su_submit_plain(e, 1, 10, 4, -1, 0);
  pkv_batch *b = NULL;
  /* first chunk of 6: nothing samples, NULL is fine */
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  CHECK_EQ_INT(tu_view(b).sample_rows[0], -1);
  CHECK_OK(pkv_commit(b, NULL));
  CHECK_EQ_INT(tu_info(e, r).num_computed_tokens, 6);
  /* last chunk samples: NULL is refused and the batch stays open */
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  uint64_t before = tu_state(e, &r, 1);
  CHECK_ERR(e, pkv_commit(b, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(tu_state(e, &r, 1), before);
  CHECK_EQ_INT(tu_info(e, r).in_batch, 1);
  int32_t tok = 42;
  CHECK_OK(pkv_commit(b, &tok));
  struct pkv_seq_info info = tu_info(e, r);
  CHECK_EQ_INT(info.num_computed_tokens, 10);
  CHECK_EQ_INT(info.num_generated_tokens, 1);
  CHECK_EQ_INT(info.num_tokens, 11);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

typedef struct plan {
  uint32_t num_seqs, num_tokens;
  uint64_t seqs[8];
  int32_t query_start[9], sample_rows[8], positions[64];
  int64_t slots[64];
} plan;

static plan plan_of(const pkv_batch_view *v) {
  plan p;
  memset(&p, 0, sizeof p);
  p.num_seqs = v->num_seqs, p.num_tokens = v->num_tokens;
  memcpy(p.seqs, v->seq_ids, v->num_seqs * sizeof p.seqs[0]);
  memcpy(p.query_start, v->query_start, (v->num_seqs + 1) * sizeof p.query_start[0]);
  memcpy(p.sample_rows, v->sample_rows, v->num_seqs * sizeof p.sample_rows[0]);
  memcpy(p.positions, v->positions, v->num_tokens * sizeof p.positions[0]);
  memcpy(p.slots, v->slot_mapping, v->num_tokens * sizeof p.slots[0]);
  return p;
}

static int same_plan(const plan *a, const plan *b) {
  return a->num_seqs == b->num_seqs && a->num_tokens == b->num_tokens &&
         !memcmp(a->seqs, b->seqs, sizeof a->seqs) &&
         !memcmp(a->query_start, b->query_start, sizeof a->query_start) &&
         !memcmp(a->sample_rows, b->sample_rows, sizeof a->sample_rows) &&
         !memcmp(a->positions, b->positions, sizeof a->positions) &&
         !memcmp(a->slots, b->slots, sizeof a->slots);
}

/* Aborts the next step and checks that the one after plans the same work; then commits it. */
static void abort_and_replan(pkv_engine *e) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  pkv_batch_view v = tu_view(b);
  plan first = plan_of(&v);
  pkv_stats st = tu_stats(e);
  pkv_batch_abort(b);
  CHECK_ENGINE(e);
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  v = tu_view(b);
  plan again = plan_of(&v);
  CHECK(same_plan(&first, &again));
  pkv_stats st2 = tu_stats(e);
  CHECK_EQ_INT(st2.num_steps, st.num_steps + 1); /* every batch pkv_step returned counts */
  CHECK_EQ_INT(st2.num_scheduled_tokens, st.num_scheduled_tokens + v.num_tokens);
  int32_t sampled[8];
  su_sample(e, &v, sampled);
  CHECK_OK(pkv_commit(b, sampled));
  CHECK_ENGINE(e);
}

static void test_abort_replans(void) {
  pkv_engine *e = su_engine(4, 32, 8, 12, 0, 1);
  if (!e) return;
  uint64_t s[3];
  s[0] = su_submit_plain(e, 1, 5, 3, -1, 0);
  s[1] = su_submit_plain(e, 100, 9, 3, -1, 0);
  abort_and_replan(e); /* admission: 5 + a chunk of 7 */
  s[2] = su_submit_plain(e, 200, 3, 3, -1, 0);
  abort_and_replan(e); /* a decode, the last 2 of s1, the new s2 */
  abort_and_replan(e); /* decodes only */
  CHECK(su_run(e, 50) >= 0);
  int32_t t[32];
  uint32_t lens[3] = {8, 12, 6};
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(su_tokens(e, s[i], t, 32), lens[i]);
  pkv_engine_destroy(e);
}

static void test_manual_calls_refused(void) {
  pkv_engine *e = su_engine(4, 32, 8, 64, 0, 1);
  if (!e) return;
  uint64_t run = su_submit_plain(e, 1, 5, 8, -1, 0);
  uint64_t fin = su_submit_plain(e, 50, 3, 1, -1, 0);
  CHECK_EQ_INT(su_step(e, NULL), 2);
  uint64_t wait = su_submit_plain(e, 100, 4, 3, -1, 0);
  uint64_t ids[3] = {run, fin, wait};
  uint64_t before = tu_state(e, ids, 3);
  int32_t t[1] = {7};
  for (int i = 0; i < 3; i++) {
    uint64_t child = 0;
    pkv_batch *b = NULL;
    CHECK_ERR(e, pkv_append(e, ids[i], t, 1), PKV_ERR_STATE);
    CHECK_ERR(e, pkv_fork(e, ids[i], &child), PKV_ERR_STATE);
    CHECK_ERR(e, pkv_preempt(e, ids[i]), PKV_ERR_STATE);
    CHECK_ERR(e, pkv_resume(e, ids[i], NULL), PKV_ERR_STATE);
    CHECK_ERR(e, pkv_batch_begin(e, &ids[i], NULL, 1, &b), PKV_ERR_STATE);
    CHECK(child == 0 && b == NULL);
  }
  CHECK_EQ_INT(tu_state(e, ids, 3), before);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_release_each_state(void) {
  pkv_engine *e = su_engine(4, 32, 8, 64, 0, 1);
  if (!e) return;
  uint64_t run = su_submit_plain(e, 1, 6, 8, -1, 0);
  uint64_t fin = su_submit_plain(e, 50, 3, 1, -1, 0);
  CHECK_EQ_INT(su_step(e, NULL), 2);
  uint64_t wait = su_submit_plain(e, 100, 4, 3, -1, 0);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_waiting_requests, 1);
  CHECK_EQ_INT(st.num_running_requests, 1);
  CHECK_EQ_INT(st.num_finished_requests, 1);
  CHECK_EQ_INT(st.num_used_blocks, 2);
  /* in a batch: refused */
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
  CHECK_ERR(e, pkv_release(e, run), PKV_ERR_STATE);
  pkv_batch_abort(b);
  CHECK_OK(pkv_release(e, wait));
  CHECK_OK(pkv_release(e, run));
  CHECK_OK(pkv_release(e, fin)); /* finished, never drained */
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_waiting_requests, 0);
  CHECK_EQ_INT(st.num_running_requests, 0);
  CHECK_EQ_INT(st.num_finished_requests, 0);
  CHECK_EQ_INT(st.num_used_blocks, 0);
  CHECK_EQ_INT(st.num_seqs, 0);
  uint64_t done[4];
  uint32_t n = 9;
  CHECK_OK(pkv_drain_finished(e, done, 4, &n));
  CHECK_EQ_INT(n, 0);
  CHECK_OK(pkv_step(e, &b));
  CHECK(b == NULL);
  CHECK_ERR(e, pkv_release(e, run), PKV_ERR_NOT_FOUND);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_request_counters(void) {
  pkv_engine *e = su_engine(4, 64, 2, 16, 0, 1);
  if (!e) return;
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_steps, 0);
  CHECK_EQ_INT(st.num_scheduled_tokens, 0);
  pkv_batch *b = (pkv_batch *)&st;
  CHECK_OK(pkv_step(e, &b)); /* nothing to run: NULL, not counted */
  CHECK(b == NULL);
  for (int i = 0; i < 3; i++) su_submit_plain(e, 10 * i, 6, 2, -1, 0);
  uint64_t tokens = 0, steps = 0;
  su_plan v;
  while (su_step(e, &v) > 0) {
    tokens += v.num_tokens, steps++;
    st = tu_stats(e);
    CHECK_EQ_INT(st.num_steps, steps);
    CHECK_EQ_INT(st.num_scheduled_tokens, tokens);
    CHECK_EQ_INT(st.num_waiting_requests + st.num_running_requests + st.num_finished_requests, 3);
    CHECK(st.num_running_requests <= 2);
  }
  CHECK_EQ_INT(tokens, 3 * 6 + 3 * 1);
  CHECK_EQ_INT(tu_stats(e).num_finished_requests, 3);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_wrong_batch_kinds);
  TU_RUN(test_commit_null_tokens);
  TU_RUN(test_abort_replans);
  TU_RUN(test_manual_calls_refused);
  TU_RUN(test_release_each_state);
  TU_RUN(test_request_counters);
  return tu_summary();
}
