/* The DSA model through pkv_submit / pkv_step / pkv_commit (e2e_dsa.c tells the story): request
 * 0 alone first (its prompt's blocks then cached), then five more sharing its system prompt, with
 * a budget of BUDGET new tokens a step (the scheduler chunks the prompts) and a pool of POOL
 * blocks, too few for them all as they grow, so the scheduler preempts: by recompute, or by swap
 * to the host tier. Every request's tokens and logits must be the naive run's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_dsa.h"
#include "kv_world.h"

enum { NUM_REQS = 6, MAX_STEPS = 400, BUDGET = 10, POOL = 10, HOST = 32 };

static int submit(pkv_engine *e, dsa_seq *s, int u, uint32_t own_len) {
  dsa_prompt(s, u, own_len);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = GEN;
  return CHECK_OK(pkv_submit(e, s->tokens, s->num_tokens, &rp, &s->id));
}

/* Steps until pkv_step has nothing to run: the model samples, pkv_commit appends. */
static int run_all(const model *m, pkv_engine *e, dsa_seq *reqs, int n) {
  for (int k = 0; k < MAX_STEPS; k++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(e, &b))) return 0;
    if (!b) return 1;
    int32_t sampled[NUM_REQS];
    for (int i = 0; i < NUM_REQS; i++) sampled[i] = -1;
    for (int j = 0; j < n; j++) reqs[j].pending = -1;
    if (!dsa_forward(m, b, reqs, n, sampled) || !CHECK_OK(pkv_commit(b, sampled))) {
      pkv_batch_abort(b);
      return 0;
    }
    for (int j = 0; j < n; j++)
      if (reqs[j].pending >= 0) reqs[j].tokens[reqs[j].num_tokens++] = reqs[j].pending;
  }
  return CHECK(!"pkv_step still runs after MAX_STEPS steps");
}

/* pkv's tokens of request j are the test's, and it finished on its length. */
static int finished(pkv_engine *e, dsa_seq *s) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  int32_t tokens[MAX_TOKENS];
  uint32_t len = 0;
  const int ok = CHECK_OK(pkv_seq_info(e, s->id, &info)) &&
                 CHECK(info.finish_reason == PKV_FINISH_LENGTH) &&
                 CHECK_OK(pkv_seq_tokens(e, s->id, tokens, MAX_TOKENS, &len)) &&
                 CHECK(len == s->num_tokens && memcmp(tokens, s->tokens, len * 4) == 0);
  s->cached = info.num_cached_tokens;
  return ok;
}

int dsa_sched_story(const model *m, uint32_t preemption) {
  const int swap = preemption == PKV_PREEMPT_SWAP;
  const char *story = swap ? "swap" : "recompute";
  pkv_engine *e = NULL;
  if (!dsa_engine(POOL, swap ? HOST : 0, BUDGET, preemption, &e)) return 0;
  dsa_seq *reqs = calloc(NUM_REQS, sizeof *reqs);
  int ok = submit(e, &reqs[0], 0, 8) && run_all(m, e, reqs, 1);
  for (int i = 1; ok && i < NUM_REQS; i++) ok = submit(e, &reqs[i], i, 6 + 2 * (uint32_t)(i % 4));
  ok = ok && run_all(m, e, reqs, NUM_REQS);
  for (int i = 0; ok && i < NUM_REQS; i++) ok = finished(e, &reqs[i]);
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ok = ok && CHECK_OK(pkv_engine_stats(e, &st));
  printf("%s: %llu steps, %llu prefix hit tokens, %llu preemptions (%llu by swap), %llu blocks "
         "swapped in\n",
         story, (unsigned long long)st.num_steps, (unsigned long long)st.prefix_hit_tokens,
         (unsigned long long)st.num_preemptions, (unsigned long long)st.num_swap_preemptions,
         (unsigned long long)st.num_swapped_in_blocks);
  /* each later request hits the system prompt's 21 tokens at its first admission at least */
  ok = ok && CHECK(st.prefix_hit_tokens >= 21 * (NUM_REQS - 1)) && CHECK(st.num_preemptions >= 1) &&
       CHECK(swap ? st.num_swap_preemptions >= 1 && st.num_swapped_in_blocks >= 1
                  : st.num_swap_preemptions == 0);
  ok = ok && CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  for (int i = 0; ok && i < NUM_REQS; i++) ok = dsa_compare(m, &reqs[i], story, i);
  free(reqs);
  return ok;
}
