/* The recurrent model's prefix hits through pkv_submit / pkv_step (e2e_recurrent.c tells the
 * story): A alone, chunked by a budget of 10 tokens a step, the scheduler ending its chunks on the
 * boundaries its policy wants; then B (its cached KV past the last checkpoint: a fallback); then
 * C and D (hits at 21 and 28 from checkpoints); then six longer prompts sharing P in a pool too
 * small for all of them, so the scheduler preempts and later recomputes from a checkpoint. Every
 * request's tokens and logits are the naive run's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e_recurrent.h"
#include "kv_world.h"

enum { NUM_REQS = 10, MAX_STEPS = 600, MAX_ENDS = 16 };

typedef struct sched {
  pkv_engine *e;
  rec_seq reqs[NUM_REQS];
  int n;
  uint32_t ends[NUM_REQS][MAX_ENDS]; /* where each prompt's chunks ended (context lengths) */
  uint32_t num_ends[NUM_REQS];
} sched;

static int submit(sched *s, char which) {
  rec_seq *r = &s->reqs[s->n];
  rec_prompt(r, which);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = GEN;
  return CHECK_OK(pkv_submit(s->e, r->tokens, r->num_tokens, &rp, &r->id)) && ++s->n;
}

/* Notes where the batch's prompt chunks end (a chunk of a prompt not yet done computing). */
static void note_chunk_ends(sched *s, pkv_batch *b) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) return;
  for (uint32_t i = 0; i < v.num_seqs; i++)
    for (int j = 0; j < s->n; j++)
      if (s->reqs[j].id == v.seq_ids[i] && (uint32_t)v.context_lens[i] <= s->reqs[j].prompt_len &&
          s->num_ends[j] < MAX_ENDS)
        s->ends[j][s->num_ends[j]++] = (uint32_t)v.context_lens[i];
}

/* Steps until pkv_step has nothing to run: the test's forward pass samples, pkv_commit appends. */
static int run_all(const model *m, sched *s) {
  for (int n = 0; n < MAX_STEPS; n++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(s->e, &b))) return 0;
    if (!b) return 1;
    note_chunk_ends(s, b);
    int32_t sampled[NUM_REQS];
    for (int i = 0; i < NUM_REQS; i++) sampled[i] = -1;
    for (int j = 0; j < s->n; j++) s->reqs[j].pending = -1;
    if (!rec_forward(m, b, s->reqs, s->n, sampled)) {
      pkv_batch_abort(b);
      return 0;
    }
    if (!CHECK_OK(pkv_commit(b, sampled))) {
      pkv_batch_abort(b);
      return 0;
    }
    for (int j = 0; j < s->n; j++)
      if (s->reqs[j].pending >= 0) s->reqs[j].tokens[s->reqs[j].num_tokens++] = s->reqs[j].pending;
  }
  return CHECK(!"pkv_step still runs after MAX_STEPS steps");
}

static uint32_t cached_at_admission(sched *s, int j) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(s->e, s->reqs[j].id, &info));
  CHECK(info.finish_reason == PKV_FINISH_LENGTH);
  return info.num_cached_tokens;
}

static int ended_at(const sched *s, int j, uint32_t boundary) {
  for (uint32_t i = 0; i < s->num_ends[j]; i++)
    if (s->ends[j][i] == boundary) return 1;
  return 0;
}

/* Runs one request (or two) to the end, checking the hit of each admission. */
static int phase(const model *m, const rec_policy *p, sched *s, const char *which,
                 const uint32_t *hit, const uint32_t *kv) {
  const int first = s->n, count = (int)strlen(which);
  const pkv_stats before = rec_stats(s->e);
  int ok = 1;
  for (int i = 0; ok && i < count; i++) ok = submit(s, which[i]);
  ok = ok && run_all(m, s);
  const pkv_stats after = rec_stats(s->e);
  uint32_t cached = 0, want = 0, want_kv = 0, restores = 0;
  for (int i = 0; ok && i < count; i++) {
    const uint32_t c = cached_at_admission(s, first + i);
    ok = CHECK(c == hit[i]);
    cached += c, want += hit[i], want_kv += kv[i], restores += hit[i] > 0;
  }
  char label[32];
  snprintf(label, sizeof label, "pkv_step %s", which);
  return ok && rec_check_admission(p, label, &before, &after, cached, want, want_kv, restores);
}

int rec_sched_story(const model *m, const rec_policy *p) {
  sched *s = calloc(1, sizeof *s);
  /* 20 blocks hold A..D (12 at most at once, some shared); prompts that hit nothing share no
   * blocks: 13 hold them (C and D: 6 each) and are too few for two of E..J (7 each decoding) */
  if (!rec_engine(p, p->hit_c ? 20 : 13, 10, &s->e)) {
    free(s);
    return 0;
  }
  const uint32_t zero[1] = {0}, hb[1] = {p->hit_b}, kb[1] = {3 * BS};
  const uint32_t hcd[2] = {p->hit_c, p->hit_d}, kcd[2] = {3 * BS, 4 * BS};
  int ok = phase(m, p, s, "A", zero, zero);
  /* chunks of at most 10 tokens, cut where the policy wants a checkpoint */
  const int every = p->policy == PKV_STATE_CHECKPOINT_EVERY;
  ok = ok && CHECK(p->policy == PKV_STATE_CHECKPOINT_NONE || ended_at(s, 0, 4 * BS)) &&
       CHECK(!every || ended_at(s, 0, 2 * BS));
  ok = ok && phase(m, p, s, "B", hb, kb) &&
       CHECK(p->policy == PKV_STATE_CHECKPOINT_NONE ||
             ended_at(s, 1, 3 * BS)); /* its branch point */
  ok = ok && phase(m, p, s, "CD", hcd, kcd);
  /* E..J: 40-token prompts sharing P, 50 tokens (8 blocks, 3 of them P's) each at the end: more
   * than the pool holds while several run */
  const pkv_stats before = rec_stats(s->e);
  for (int i = 0; ok && i < 6; i++) ok = submit(s, (char)('E' + i));
  ok = ok && run_all(m, s);
  const pkv_stats after = rec_stats(s->e);
  ok = rec_counters(p, "pkv_step", &after) && ok &&
       CHECK(after.num_preemptions > before.num_preemptions) &&
       CHECK(p->preemption_mode != PKV_PREEMPT_SWAP ||
             after.num_swap_preemptions > before.num_swap_preemptions) &&
       CHECK(p->policy != PKV_STATE_CHECKPOINT_NONE || after.prefix_hit_tokens == 0);
  for (int j = 0; ok && j < s->n; j++) {
    char label[64];
    snprintf(label, sizeof label, "%s: pkv_step: request %c", p->name, 'A' + j);
    ok = rec_check_seq(m, s->e, &s->reqs[j], label);
  }
  ok = ok && CHECK_ENGINE(s->e);
  pkv_engine_destroy(s->e);
  free(s);
  return ok;
}
