/* The scheduler's rules (pkv_submit / pkv_step / pkv_commit), one case each: decode every step,
 * admission order and limits, chunked prompts, preemption of the newest, refusal at submit,
 * finishing, the finished queue. Misuse of the calls is in test_scheduler_calls.c, the
 * randomized run in test_scheduler_random.c. */
#include "sched_util.h"

static void test_running_decode_every_step(void) {
  pkv_engine *e = su_engine(4, 64, 8, 64, 0, 1);
  if (!e) return;
  uint64_t s[3];
  for (int i = 0; i < 3; i++) s[i] = su_submit_plain(e, 100 * (i + 1), 3 + (uint32_t)i, 5, -1, 0);
  su_plan v;
  CHECK_EQ_INT(su_step(e, &v), 3);
  CHECK_EQ_INT(v.num_tokens, 3 + 4 + 5);
  for (uint32_t i = 0; i < 3; i++) {
    CHECK_EQ_INT(v.seq_ids[i], s[i]);
    CHECK_EQ_INT(v.sample_rows[i], v.query_start[i + 1] - 1);
  }
  for (int step = 2; step <= 5; step++) {
    CHECK_EQ_INT(su_step(e, &v), 3);
    CHECK_EQ_INT(v.num_tokens, 3);
    for (uint32_t i = 0; i < 3; i++) {
      CHECK_EQ_INT(v.seq_ids[i], s[i]);
      CHECK_EQ_INT(v.positions[i], 3 + i + (uint32_t)step - 2);
      CHECK_EQ_INT(v.sample_rows[i], i);
    }
  }
  for (int i = 0; i < 3; i++) {
    struct pkv_seq_info info = tu_info(e, s[i]);
    CHECK_EQ_INT(info.finish_reason, PKV_FINISH_LENGTH);
    CHECK_EQ_INT(info.num_generated_tokens, 5);
    CHECK_EQ_INT(info.num_tokens, 3 + i + 5);
    CHECK_EQ_INT(info.num_blocks, 0);
  }
  CHECK_EQ_INT(su_step(e, NULL), 0);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_steps, 5);
  CHECK_EQ_INT(st.num_scheduled_tokens, 12 + 4 * 3);
  CHECK_EQ_INT(st.num_finished_requests, 3);
  CHECK_EQ_INT(st.num_running_requests, 0);
  CHECK_EQ_INT(st.num_used_blocks, 0);
  pkv_engine_destroy(e);
}

/* max_num_seqs 1 and one token each: the steps show the admission order. */
static void test_priority_then_arrival(void) {
  pkv_engine *e = su_engine(4, 64, 1, 64, 0, 1);
  if (!e) return;
  int32_t prio[5] = {0, 5, 0, 5, 9};
  uint64_t s[5];
  for (int i = 0; i < 5; i++) s[i] = su_submit_plain(e, 10 * i, 2, 1, -1, prio[i]);
  int order[5] = {4, 1, 3, 0, 2};
  for (int k = 0; k < 5; k++) {
    su_plan v;
    CHECK_EQ_INT(su_step(e, &v), 1);
    CHECK_EQ_INT(v.seq_ids[0], s[order[k]]);
  }
  uint64_t done[8];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_finished(e, done, 8, &n));
  CHECK_EQ_INT(n, 5);
  for (uint32_t k = 0; k < n; k++) CHECK_EQ_INT(done[k], s[order[k]]);
  CHECK_OK(pkv_drain_finished(e, done, 8, &n));
  CHECK_EQ_INT(n, 0);
  pkv_engine_destroy(e);
}

static void test_max_num_seqs(void) {
  pkv_engine *e = su_engine(4, 64, 2, 64, 0, 1);
  if (!e) return;
  uint64_t s[4];
  for (int i = 0; i < 4; i++) s[i] = su_submit_plain(e, 10 * i, 3, 3, -1, 0);
  su_plan v;
  CHECK_EQ_INT(su_step(e, &v), 2);
  CHECK_EQ_INT(v.seq_ids[0], s[0]);
  CHECK_EQ_INT(v.seq_ids[1], s[1]);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_waiting_requests, 2);
  CHECK_EQ_INT(st.num_running_requests, 2);
  CHECK_EQ_INT(su_step(e, &v), 2); /* seats full: decodes only */
  CHECK_EQ_INT(v.num_tokens, 2);
  CHECK_EQ_INT(su_step(e, &v), 2); /* s0, s1 finish here */
  CHECK_EQ_INT(tu_info(e, s[0]).finish_reason, PKV_FINISH_LENGTH);
  CHECK_EQ_INT(su_step(e, &v), 2);
  CHECK_EQ_INT(v.seq_ids[0], s[2]);
  CHECK_EQ_INT(v.seq_ids[1], s[3]);
  CHECK_EQ_INT(tu_stats(e).num_waiting_requests, 0);
  pkv_engine_destroy(e);
}

/* A 20-token prompt under a budget of 8 tokens: chunks 8, 8, 4; the 3-token request behind it
 * shares the last chunk's step. */
static void test_chunked_prompt(void) {
  pkv_engine *e = su_engine(4, 64, 8, 8, 0, 1);
  if (!e) return;
  uint64_t a = su_submit_plain(e, 1, 20, 2, -1, 0);
  uint64_t b = su_submit_plain(e, 100, 3, 2, -1, 0);
  su_plan v;
  for (int k = 0; k < 2; k++) {
    CHECK_EQ_INT(su_step(e, &v), 1);
    CHECK_EQ_INT(v.seq_ids[0], a);
    CHECK_EQ_INT(v.num_tokens, 8);
    CHECK_EQ_INT(v.positions[0], 8 * k);
    CHECK_EQ_INT(v.sample_rows[0], -1);
    CHECK_EQ_INT(tu_info(e, a).num_generated_tokens, 0);
    CHECK_EQ_INT(tu_info(e, b).num_computed_tokens, 0);
  }
  CHECK_EQ_INT(su_step(e, &v), 2);
  CHECK_EQ_INT(v.seq_ids[0], a);
  CHECK_EQ_INT(v.seq_ids[1], b);
  CHECK_EQ_INT(v.query_start[1], 4);
  CHECK_EQ_INT(v.query_start[2], 7);
  CHECK_EQ_INT(v.sample_rows[0], 3);
  CHECK_EQ_INT(v.sample_rows[1], 6);
  CHECK_EQ_INT(tu_info(e, a).num_generated_tokens, 1);
  CHECK_EQ_INT(tu_info(e, b).num_generated_tokens, 1);
  /* prefill chunk and decodes share a step: a third request joins while a and b decode */
  uint64_t c = su_submit_plain(e, 200, 12, 1, -1, 0);
  CHECK_EQ_INT(su_step(e, &v), 3);
  CHECK_EQ_INT(v.seq_ids[2], c);
  CHECK_EQ_INT(v.num_tokens, 8);
  CHECK_EQ_INT(v.query_start[3] - v.query_start[2], 6);
  CHECK_EQ_INT(v.sample_rows[2], -1);
  CHECK_EQ_INT(tu_stats(e).num_scheduled_tokens, 8 + 8 + 7 + 8);
  CHECK_EQ_INT(su_run(e, 100), 1);
  CHECK_EQ_INT(tu_info(e, c).num_tokens, 13);
  pkv_engine_destroy(e);
}

/* bs 2, 9 blocks: a, b (2 tokens) and c (8 tokens) run; d waits (max_num_seqs 3). At step 4
 * each needs a block for its fifth token: c, the newest, is preempted, and d is not admitted
 * although blocks are free. c recomputes first, with its own prefix from the cache. */
static void test_preempt_newest(void) {
  pkv_engine *e = su_engine(2, 9, 3, 64, 0, 1);
  if (!e) return;
  uint64_t a = su_submit_plain(e, 1, 2, 6, -1, 0);
  uint64_t b = su_submit_plain(e, 10, 2, 6, -1, 0);
  uint64_t c = su_submit_plain(e, 20, 8, 6, -1, 0);
  uint64_t d = su_submit_plain(e, 40, 1, 2, -1, 0);
  su_plan v;
  for (int k = 0; k < 3; k++) CHECK_EQ_INT(su_step(e, &v), 3);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, 0);
  pkv_stats before = tu_stats(e);
  CHECK_EQ_INT(su_step(e, &v), 2);
  CHECK_EQ_INT(v.seq_ids[0], a);
  CHECK_EQ_INT(v.seq_ids[1], b);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_preemptions, before.num_preemptions + 1);
  CHECK_EQ_INT(st.num_waiting_requests, 2);
  CHECK(st.num_free_blocks >= 1); /* d (one block) would fit: still not admitted */
  struct pkv_seq_info ci = tu_info(e, c);
  CHECK_EQ_INT(ci.is_preempted, 1);
  CHECK_EQ_INT(ci.num_blocks, 0);
  CHECK_EQ_INT(ci.num_computed_tokens, 0);
  CHECK_EQ_INT(ci.num_tokens, 11); /* the prompt and three sampled tokens, kept */
  CHECK_EQ_INT(ci.num_generated_tokens, 3);
  int32_t t[32];
  CHECK_EQ_INT(su_tokens(e, c, t, 32), 11);
  CHECK_EQ_INT(su_next(su_chain(t, 10)), t[10]);
  /* run on: c must be admitted before d and hit its own prefix */
  int c_back = 0;
  for (int k = 0; k < 60 && !c_back; k++) {
    uint64_t hits = tu_stats(e).prefix_hit_tokens;
    if (su_step(e, &v) <= 0) break;
    if (tu_info(e, d).num_computed_tokens > 0 || tu_info(e, d).finish_reason)
      CHECK(!tu_info(e, c).is_preempted || tu_info(e, c).finish_reason);
    if (!tu_info(e, c).is_preempted) {
      c_back = 1;
      CHECK(tu_stats(e).prefix_hit_tokens >= hits + 2);
      CHECK(tu_info(e, c).num_cached_tokens >= 2);
    }
  }
  CHECK(c_back);
  CHECK(su_run(e, 100) >= 0);
  uint32_t want[4] = {8, 8, 14, 3};
  uint64_t ids[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) {
    uint32_t n = su_tokens(e, ids[i], t, 32);
    CHECK_EQ_INT(n, want[i]);
    for (uint32_t p = (i == 3 ? 1 : i == 2 ? 8 : 2); p < n; p++)
      CHECK_EQ_INT(t[p], su_next(su_chain(t, p)));
  }
  pkv_engine_destroy(e);
}

static void test_refused_at_submit(void) {
  pkv_engine *e = su_engine(4, 4, 8, 64, 16, 1);
  pkv_engine *f = su_engine(4, 4, 8, 64, 0, 1);
  if (!e || !f) return;
  uint64_t live = su_submit_plain(e, 1, 3, 2, -1, 0);
  int32_t t[32];
  tu_fill(t, 32, 1);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  uint64_t before = tu_state(e, &live, 1), seq = 777;
  rp.max_new_tokens = 7; /* 10 + 7 > max_model_len 16 */
  CHECK_ERR(e, pkv_submit(e, t, 10, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  rp.max_new_tokens = 6; /* 10 + 6 fits */
  CHECK_EQ_INT(tu_state(e, &live, 1), before);
  CHECK_EQ_INT(seq, 777);
  rp.max_new_tokens = 7; /* no limit, but 17 tokens need 5 blocks of 4; the pool has 4 */
  before = tu_state(f, NULL, 0);
  CHECK_ERR(f, pkv_submit(f, t, 10, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(tu_state(f, NULL, 0), before);
  rp.max_new_tokens = 0;
  CHECK_ERR(f, pkv_submit(f, t, 3, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  rp.max_new_tokens = 1, rp.reserved0 = 1;
  CHECK_ERR(f, pkv_submit(f, t, 3, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  rp.reserved0 = 0;
  CHECK_ERR(f, pkv_submit(f, t, 0, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(f, pkv_submit(f, NULL, 3, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(seq, 777);
  CHECK_EQ_INT(tu_state(f, NULL, 0), before);
  rp.max_new_tokens = 6; /* exactly the pool: accepted */
  CHECK_OK(pkv_submit(f, t, 10, &rp, &seq));
  CHECK_EQ_INT(su_run(f, 100), 6);
  CHECK_EQ_INT(tu_info(f, seq).num_tokens, 16);
  pkv_engine_destroy(e);
  pkv_engine_destroy(f);
}

/* Commits chosen tokens to a one-request engine until it finishes. */
static void commit_tokens(pkv_engine *e, const int32_t *tokens, int n) {
  for (int k = 0; k < n; k++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) return;
    CHECK_OK(pkv_commit(b, &tokens[k]));
    CHECK_ENGINE(e);
  }
}

static void test_finish_reasons(void) {
  pkv_engine *e = su_engine(4, 16, 8, 64, 0, 1);
  if (!e) return;
  uint64_t s = su_submit_plain(e, 1, 5, 10, 99, 0);
  int32_t gen[3] = {5, 6, 99};
  commit_tokens(e, gen, 3);
  struct pkv_seq_info info = tu_info(e, s);
  CHECK_EQ_INT(info.is_request, 1);
  CHECK_EQ_INT(info.num_prompt_tokens, 5);
  CHECK_EQ_INT(info.finish_reason, PKV_FINISH_STOP_TOKEN);
  CHECK_EQ_INT(info.num_generated_tokens, 3);
  CHECK_EQ_INT(info.num_blocks, 0);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_used_blocks, 0); /* blocks back at once */
  CHECK_EQ_INT(st.num_finished_requests, 1);
  int32_t t[16];
  CHECK_EQ_INT(su_tokens(e, s, t, 16), 8);
  CHECK_EQ_INT(t[4], 5);
  CHECK_EQ_INT(t[5], 5);
  CHECK_EQ_INT(t[6], 6);
  CHECK_EQ_INT(t[7], 99); /* the stop token is kept */
  uint64_t l = su_submit_plain(e, 50, 4, 2, 99, 0);
  int32_t gen2[2] = {7, 8};
  commit_tokens(e, gen2, 2);
  CHECK_EQ_INT(tu_info(e, l).finish_reason, PKV_FINISH_LENGTH);
  CHECK_EQ_INT(su_tokens(e, l, t, 16), 6);
  CHECK_EQ_INT(t[5], 8);
  uint64_t done[4];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_finished(e, done, 1, &n)); /* cap 1: one at a time */
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(done[0], s);
  CHECK_OK(pkv_drain_finished(e, done, 4, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(done[0], l);
  CHECK_OK(pkv_drain_finished(e, done, 4, &n));
  CHECK_EQ_INT(n, 0);
  CHECK_OK(pkv_release(e, s));
  CHECK_EQ_INT(tu_stats(e).num_finished_requests, 1);
  CHECK_ERR(e, pkv_seq_tokens(e, s, t, 16, &n), PKV_ERR_NOT_FOUND);
  CHECK_OK(pkv_release(e, l));
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_finished_requests, 0);
  CHECK_EQ_INT(st.num_seqs, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The only running request preempts itself when pkv_allocate's sequences hold the other blocks:
 * pkv_step then has nothing to run and says so (NULL) while the stats show the request waiting;
 * once the blocks come back it resumes, recomputes, and finishes with the right tokens. */
static void test_self_preempt(void) {
  pkv_engine *e = su_engine(2, 4, 4, 64, 0, 1);
  if (!e) return;
  int32_t m[4] = {50, 51, 52, 53};
  uint64_t manual = 0;
  CHECK_OK(pkv_allocate(e, m, 4, NULL, &manual, NULL)); /* holds 2 of the 4 blocks */
  uint64_t a = su_submit_plain(e, 1, 4, 4, -1, 0);
  su_plan v;
  CHECK_EQ_INT(su_step(e, &v), 1); /* the prompt: 2 blocks, the pool is full */
  CHECK_EQ_INT(su_step(e, &v), 0); /* its 5th token needs a 3rd block: a preempts itself */
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_preemptions, 1);
  CHECK_EQ_INT(st.num_waiting_requests, 1);
  CHECK_EQ_INT(st.num_running_requests, 0);
  CHECK_EQ_INT(tu_info(e, a).is_preempted, 1);
  CHECK_EQ_INT(tu_info(e, a).num_tokens, 5);
  CHECK_EQ_INT(su_step(e, &v), 0); /* still nothing fits */
  CHECK_OK(pkv_release(e, manual));
  CHECK(su_run(e, 20) >= 0);
  int32_t t[16];
  CHECK_EQ_INT(su_tokens(e, a, t, 16), 8);
  for (uint32_t p = 4; p < 8; p++) CHECK_EQ_INT(t[p], su_next(su_chain(t, p)));
  CHECK_EQ_INT(tu_info(e, a).finish_reason, PKV_FINISH_LENGTH);
  CHECK_OK(pkv_engine_check(e));
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_running_decode_every_step);
  TU_RUN(test_priority_then_arrival);
  TU_RUN(test_max_num_seqs);
  TU_RUN(test_chunked_prompt);
  TU_RUN(test_preempt_newest);
  TU_RUN(test_refused_at_submit);
  TU_RUN(test_finish_reasons);
  TU_RUN(test_self_preempt);
  return tu_summary();
}
