/* The scheduler's preemption by swapping (preemption_mode SWAP / AUTO, DESIGN.md §11): the
 * newest running request goes to the host tier with its KV instead of giving it up, comes back
 * before waiting requests are admitted, recomputes nothing, and every request still ends with
 * exactly the model's tokens. The scenario is test_scheduler.c's test_preempt_newest. */
#include "sched_util.h"

enum { BS = 2, BLOCKS = 9 };

static pkv_engine *engine(uint32_t mode, uint32_t host_blocks, uint32_t max_tokens) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.max_num_seqs = 3;
  p.max_num_batched_tokens = max_tokens;
  p.host_num_blocks = host_blocks;
  p.preemption_mode = mode;
  return tu_engine_p(&p);
}

typedef struct outcome {
  pkv_stats stats;
  uint32_t len[4];
  int32_t tokens[4][32];
} outcome;

/* a, b (2 tokens) and c (8) run, d waits; at step 4 each needs a block for its fifth token and
 * c, the newest, is preempted. Runs to the end; returns what happened. */
static void run(pkv_engine *e, outcome *o, int expect_swap) {
  memset(o, 0, sizeof *o);
  const uint64_t a = su_submit_plain(e, 1, 2, 6, -1, 0);
  const uint64_t b = su_submit_plain(e, 10, 2, 6, -1, 0);
  const uint64_t c = su_submit_plain(e, 20, 8, 6, -1, 0);
  const uint64_t d = su_submit_plain(e, 40, 1, 2, -1, 0);
  su_plan v;
  for (int k = 0; k < 3; k++) CHECK_EQ_INT(su_step(e, &v), 3);
  CHECK_EQ_INT(su_step(e, &v), 2);
  struct pkv_seq_info ci = tu_info(e, c);
  CHECK_EQ_INT(ci.kv_tier, expect_swap ? PKV_TIER_HOST : PKV_TIER_NONE);
  CHECK_EQ_INT(ci.is_preempted, expect_swap ? 0 : 1);
  /* Its KV kept (all but the sampled token awaiting its slot), or given up. */
  CHECK_EQ_INT(ci.num_computed_tokens, expect_swap ? ci.num_tokens - 1 : 0);
  CHECK_EQ_INT(ci.num_host_blocks, expect_swap ? (ci.num_tokens - 1 + BS - 1) / BS : 0);
  CHECK(ci.num_tokens >= 10);
  CHECK_EQ_INT(tu_stats(e).num_swapped_seqs, expect_swap ? 1 : 0);
  /* c comes back before d is admitted. */
  for (int k = 0; k < 60; k++) {
    if (tu_info(e, d).num_computed_tokens > 0 || tu_info(e, d).finish_reason)
      CHECK(tu_info(e, c).kv_tier == PKV_TIER_DEVICE || tu_info(e, c).finish_reason);
    if (su_step(e, &v) <= 0) break;
  }
  o->stats = tu_stats(e);
  const uint64_t ids[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) {
    o->len[i] = su_tokens(e, ids[i], o->tokens[i], 32);
    CHECK_EQ_INT(tu_info(e, ids[i]).finish_reason, PKV_FINISH_LENGTH);
    for (uint32_t p = (i == 3 ? 1 : i == 2 ? 8 : 2); p < o->len[i]; p++)
      CHECK_EQ_INT(o->tokens[i][p], su_next(su_chain(o->tokens[i], p)));
  }
  CHECK_EQ_INT(o->stats.num_swapped_seqs, 0);
  CHECK_EQ_INT(o->stats.num_host_free_blocks, o->stats.num_host_blocks);
}

static void same_tokens(const outcome *x, const outcome *y) {
  for (int i = 0; i < 4; i++) {
    CHECK_EQ_INT(x->len[i], y->len[i]);
    CHECK(memcmp(x->tokens[i], y->tokens[i], x->len[i] * sizeof(int32_t)) == 0);
  }
}

static void test_swap_instead_of_recompute(void) {
  pkv_engine *re = engine(PKV_PREEMPT_RECOMPUTE, 0, 64), *sw = engine(PKV_PREEMPT_SWAP, 8, 64);
  if (!re || !sw) return;
  outcome r, s;
  run(re, &r, 0);
  run(sw, &s, 1);
  same_tokens(&r, &s);
  CHECK_EQ_INT(s.stats.num_preemptions, 1);
  CHECK_EQ_INT(s.stats.num_swap_preemptions, 1);
  CHECK_EQ_INT(s.stats.num_swapped_out_blocks, 5);
  CHECK_EQ_INT(s.stats.num_swapped_in_blocks, 5);
  CHECK_EQ_INT(r.stats.num_swap_preemptions, 0);
  /* Recompute computed c's 10 tokens again (its prefix cache served some); swap computed none. */
  CHECK(s.stats.num_scheduled_tokens < r.stats.num_scheduled_tokens);
  pkv_engine_destroy(re);
  pkv_engine_destroy(sw);
}

/* A full host tier: the victim is recomputed instead. */
static void test_full_host_tier_recomputes(void) {
  pkv_engine *e = engine(PKV_PREEMPT_SWAP, 4, 64); /* c needs 5 host blocks */
  if (!e) return;
  outcome o;
  run(e, &o, 0);
  CHECK_EQ_INT(o.stats.num_preemptions, 1);
  CHECK_EQ_INT(o.stats.num_swap_preemptions, 0);
  pkv_engine_destroy(e);
}

/* AUTO swaps only what costs more than one step's prefill to recompute: c's 10 computed tokens
 * against max_num_batched_tokens 64 (recompute) and 8 (swap). */
static void test_auto(void) {
  pkv_engine *cheap = engine(PKV_PREEMPT_AUTO, 8, 64), *dear = engine(PKV_PREEMPT_AUTO, 8, 8);
  pkv_engine *none = engine(PKV_PREEMPT_AUTO, 0, 64);
  if (!cheap || !dear || !none) return;
  outcome x, y, z;
  run(cheap, &x, 0);
  run(dear, &y, 1);
  run(none, &z, 0);
  same_tokens(&x, &y);
  same_tokens(&x, &z);
  CHECK_EQ_INT(x.stats.num_swap_preemptions, 0);
  CHECK_EQ_INT(y.stats.num_swap_preemptions, 1);
  pkv_engine_destroy(cheap);
  pkv_engine_destroy(dear);
  pkv_engine_destroy(none);
}

static void test_mode_refused(void) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  pkv_engine *e = NULL;
  p.preemption_mode = PKV_PREEMPT_SWAP; /* no host tier */
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "host tier") != NULL);
  p.preemption_mode = 3;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(e == NULL);
}

int main(void) {
  TU_RUN(test_swap_instead_of_recompute);
  TU_RUN(test_full_host_tier_recomputes);
  TU_RUN(test_auto);
  TU_RUN(test_mode_refused);
  return tu_summary();
}
