/* End to end, the recurrent hybrid (e2e_model.h: layer 1 a gated linear recurrence whose state
 * lives in pkv's slots, between two full-attention layers) with prefix caching: pkv's paged run,
 * its recurrent states restored from checkpoints at block boundaries, generates the tokens (and
 * logits within f32 noise) of a naive contiguous run that caches nothing.
 * Under each checkpoint policy (PROMPT_END, EVERY 2 blocks, NONE, PROMPT_END with a single
 * checkpoint slot: LRU evictions; and with a host tier: PROMPT_END under swap preemption, and two
 * checkpoint slots whose evictions are offloaded to host state slots and restored from there)
 * two stories run:
 * - batches the test plans (pkv_allocate, pkv_batch_begin): a prefill in chunks, some ending on
 *   block boundaries (a checkpoint is taken there when the policy wants one) and some crossing
 *   them; an admission whose cached KV ends where no checkpoint is (B: it falls back to a
 *   shorter hit or to token 0, and leaves the checkpoint the next prompt sharing it hits); hits
 *   at 21 and 28 tokens taken from checkpoints; a fork (its state copied); a preemption and
 *   resume that restarts from the last checkpoint; with a host tier, D swapped out by hand
 *   (STATE_OUT) while C resumes, then swapped back in (STATE_IN);
 * - the same prompts through pkv_submit / pkv_step (e2e_recurrent_sched.c): the scheduler ends
 *   chunks on the boundaries the policy wants, then preempts under a small pool.
 * And a store restart: an engine on a file store computes A, whose checkpoint at 28 is written
 * beside its blocks; a new engine on the store hits 28 tokens of D (the blocks and the
 * checkpoint fetched, the state restored from a host state slot) and of A.
 * Each admission's hit is the policy's (rec_policy), and pkv_stats counts it: restores, hit
 * tokens, fallback tokens. NONE hits nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "e2e_recurrent.h"
#include "kv_world.h"

#define LOGIT_TOL 5e-5

const kv_mode rec_mode = {"recurrent", 0, 0, 0, 0, {{{0}}}, SPECS_RECURRENT};

void rec_prompt(rec_seq *s, char which) {
  memset(s, 0, sizeof *s);
  s->second_at = s->pending = -1;
  const uint32_t own = which == 'A' || which == 'B' ? 6 : which >= 'E' ? 16 : 3;
  if (which == 'D') { /* A's first 29 tokens, then its own */
    rec_seq a;
    rec_prompt(&a, 'A');
    memcpy(s->tokens, a.tokens, 29 * sizeof s->tokens[0]);
    s->num_tokens = 29;
  } else {
    for (int i = 0; i < P_LEN; i++) s->tokens[i] = (int32_t)((i * 37 + 11) % VOCAB);
    s->num_tokens = P_LEN;
  }
  for (uint32_t i = 0; i < own; i++)
    s->tokens[s->num_tokens++] = (int32_t)(((which - 'A') * 53 + i * 29 + 5) % VOCAB);
  s->prompt_len = s->num_tokens;
}

int rec_engine(const rec_policy *pol, uint32_t num_blocks, uint32_t max_num_batched_tokens,
               pkv_engine **out) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = QH, p.num_kv_heads = KVH, p.head_dim = HD;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.block_size = BS;
  p.num_blocks = num_blocks, p.num_threads = 2, p.enable_prefix_caching = 1;
  p.max_num_batched_tokens = max_num_batched_tokens;
  p.state_checkpoint_policy = pol->policy, p.state_checkpoint_interval = pol->interval;
  p.num_state_checkpoints = pol->num_checkpoints;
  p.host_num_blocks = pol->host_blocks, p.preemption_mode = pol->preemption_mode;
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE, st.path = pol->store_dir, st.model_id = "e2e-recurrent";
  if (pol->store_dir) p.store = &st;
  pkv_layer_spec specs[LAYERS];
  memset(specs, 0, sizeof specs);
  for (uint32_t l = 0; l < LAYERS; l++) {
    specs[l].num_kv_heads = KVH; /* full attention, the model's heads */
    if (!layer_recurrent(&rec_mode, l)) continue;
    memset(&specs[l], 0, sizeof specs[l]); /* conv [CONV - 1][KVH * HD], ssm [KVH][HD][HD], f32 */
    specs[l].kind = PKV_LAYER_STATE;
    specs[l].state_shape[0] = CONV - 1, specs[l].state_shape[1] = KVH * HD;
    specs[l].state_shape[4] = KVH, specs[l].state_shape[5] = HD, specs[l].state_shape[6] = HD;
  }
  p.layer_specs = specs, p.layer_spec_size = sizeof specs[0];
  *out = NULL;
  if (!CHECK_OK(pkv_engine_create(&p, out))) return 0;
  e2e_mode = &rec_mode, e2e_engine = *out;
  return 1;
}

pkv_stats rec_stats(pkv_engine *e) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(pkv_engine_stats(e, &st));
  return st;
}

int rec_counters(const rec_policy *p, const char *run, const pkv_stats *st) {
  printf("%-10s %s: %llu preemptions (%llu swaps), %llu checkpoints taken, %llu evicted (%llu "
         "offloaded), %llu restores (%llu from host), %llu hit tokens, %llu fallback tokens\n",
         p->name, run, (unsigned long long)st->num_preemptions,
         (unsigned long long)st->num_swap_preemptions,
         (unsigned long long)st->num_state_checkpoints_taken,
         (unsigned long long)st->num_state_checkpoint_evictions,
         (unsigned long long)st->num_state_checkpoints_offloaded,
         (unsigned long long)st->num_state_restores,
         (unsigned long long)st->num_state_restores_from_host,
         (unsigned long long)st->prefix_hit_tokens, (unsigned long long)st->state_fallback_tokens);
  /* an offloaded checkpoint is not dropped: it is held on the host */
  return CHECK(st->num_state_checkpoints_held + st->num_host_state_checkpoints_held ==
               st->num_state_checkpoints_taken - st->num_state_checkpoint_evictions);
}

int rec_forward(const model *m, pkv_batch *b, rec_seq *seqs, int n, int32_t *sampled) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) return 0;
  rec_seq **of = calloc(v.num_seqs, sizeof *of); /* the batch's sequences, in batch order */
  int32_t *tokens = calloc(v.num_tokens, sizeof(int32_t));
  float *logits = malloc(sizeof(float) * v.num_tokens * VOCAB);
  int ok = 1;
  for (uint32_t i = 0; i < v.num_seqs; i++) {
    for (int j = 0; j < n; j++)
      if (seqs[j].id == v.seq_ids[i]) of[i] = &seqs[j];
    ok = ok && CHECK(of[i] != NULL);
    for (int32_t r = v.query_start[i]; ok && r < v.query_start[i + 1]; r++)
      tokens[r] = of[i]->tokens[v.positions[r]];
  }
  ok = ok && forward(m, tokens, v.positions, v.num_tokens, 0, 1, attention_on_pkv, b, logits);
  for (uint32_t i = 0; ok && i < v.num_seqs; i++) {
    rec_seq *s = of[i];
    const int32_t last = v.query_start[i + 1] - 1;
    const int samples = (uint32_t)v.positions[last] + 1 == s->num_tokens;
    ok = CHECK((v.sample_rows[i] == last) == samples) && CHECK(!samples || s->ngen < GEN);
    if (!ok || !samples) continue;
    memcpy(s->logits[s->ngen], logits + (size_t)last * VOCAB, sizeof s->logits[0]);
    s->pending = pick(s->logits[s->ngen], (int)s->ngen == s->second_at);
    if (sampled) sampled[i] = s->pending;
    s->ngen++;
  }
  free(of), free(tokens), free(logits);
  return ok;
}

int rec_check_admission(const rec_policy *p, const char *label, const pkv_stats *before,
                        const pkv_stats *after, uint32_t cached, uint32_t hit, uint32_t kv,
                        uint32_t want_restores) {
  if (p->policy == PKV_STATE_CHECKPOINT_NONE) kv = 0;
  const uint64_t restores = after->num_state_restores - before->num_state_restores;
  const uint64_t hits = after->prefix_hit_tokens - before->prefix_hit_tokens;
  const uint64_t fallback = after->state_fallback_tokens - before->state_fallback_tokens;
  const int ok = CHECK(cached == hit) && CHECK(restores == want_restores) && CHECK(hits == hit) &&
                 CHECK(fallback == kv - hit);
  if (!ok)
    fprintf(stderr,
            "  %s: %u tokens cached (want %u: the KV of %u); %llu restores (want %u), %llu hit "
            "tokens, %llu fallback tokens\n",
            label, cached, hit, kv, (unsigned long long)restores, want_restores,
            (unsigned long long)hits, (unsigned long long)fallback);
  return ok;
}

int rec_check_seq(const model *m, pkv_engine *e, const rec_seq *s, const char *label) {
  int32_t tokens[MAX_TOKENS], naive[GEN];
  uint32_t len = 0;
  int ok = CHECK(s->ngen == GEN) && CHECK_OK(pkv_seq_tokens(e, s->id, tokens, MAX_TOKENS, &len)) &&
           CHECK(len == s->num_tokens && memcmp(tokens, s->tokens, len * sizeof tokens[0]) == 0);
  float(*logits)[VOCAB] = malloc(sizeof(float) * GEN * VOCAB);
  naive_generate(m, s->tokens, s->prompt_len, s->second_at, &rec_mode, NULL, NULL, naive, logits);
  for (int g = 0; g < GEN; g++) {
    char what[96];
    snprintf(what, sizeof what, "%s token %d logits", label, g);
    double got[VOCAB], ref[VOCAB];
    for (int j = 0; j < VOCAB; j++) got[j] = s->logits[g][j], ref[j] = logits[g][j];
    ok = CHECK(pkv_ref_compare(what, got, ref, VOCAB, LOGIT_TOL, LOGIT_TOL) == 0) && ok;
    if (!CHECK(s->tokens[s->prompt_len + g] == naive[g])) {
      fprintf(stderr, "  %s token %d: pkv %d, naive %d\n", label, g, s->tokens[s->prompt_len + g],
              naive[g]);
      ok = 0;
    }
  }
  free(logits);
  return ok;
}

/* ---------------------------------------------------------------- batches the test plans */
enum { SA, SB, SB2, SC, SD, NUM_SEQS }; /* B2: B's fork, its first token B's second best */

static uint32_t uncomputed(pkv_engine *e, const rec_seq *s) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(e, s->id, &info));
  return info.num_tokens - info.num_computed_tokens;
}

/* STATE_OUT and STATE_IN copies the batches listed (a manual story's) */
static uint32_t state_moves[2];

static void count_state_moves(pkv_batch *b) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) return;
  for (uint32_t i = 0; i < v.num_copies; i++) {
    state_moves[0] += v.copy_kind[i] == PKV_COPY_STATE_OUT;
    state_moves[1] += v.copy_kind[i] == PKV_COPY_STATE_IN;
  }
}

/* One batch: seqs idx[i] compute num_new[i] tokens (0: all uncomputed). */
static int step(const model *m, pkv_engine *e, rec_seq *seqs, const int *idx,
                const uint32_t *num_new, uint32_t n) {
  uint64_t ids[NUM_SEQS];
  uint32_t counts[NUM_SEQS];
  for (uint32_t i = 0; i < n; i++) {
    ids[i] = seqs[idx[i]].id;
    counts[i] = num_new[i] ? num_new[i] : uncomputed(e, &seqs[idx[i]]);
  }
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, ids, counts, n, &b))) return 0;
  count_state_moves(b);
  const int ok = rec_forward(m, b, seqs, NUM_SEQS, NULL);
  if (!ok) pkv_batch_abort(b);
  return ok && CHECK_OK(pkv_batch_end(b));
}

static int append_pending(pkv_engine *e, rec_seq *seqs) {
  int ok = 1;
  for (int i = 0; i < NUM_SEQS; i++) {
    rec_seq *s = &seqs[i];
    if (s->id && s->pending >= 0 && (ok = ok && CHECK_OK(pkv_append(e, s->id, &s->pending, 1))))
      s->tokens[s->num_tokens++] = s->pending;
    s->pending = -1;
  }
  return ok;
}

/* Every live sequence that still generates decodes (or prefills all it has), but those in the
 * mask (1 << i); then the sampled tokens are appended. */
static int step_all(const model *m, pkv_engine *e, rec_seq *seqs, unsigned skip) {
  int idx[NUM_SEQS];
  uint32_t n = 0, all[NUM_SEQS] = {0};
  for (int i = 0; i < NUM_SEQS; i++)
    if (seqs[i].id && seqs[i].ngen < GEN && !(skip >> i & 1)) idx[n++] = i;
  return (n == 0 || step(m, e, seqs, idx, all, n)) && append_pending(e, seqs);
}

/* Admits s (its prompt's KV of kv tokens cached) and checks the hit: pkv_allocate_query's and
 * pkv_allocate's, and the counters. */
static int admit(const rec_policy *p, pkv_engine *e, rec_seq *s, char which, uint32_t hit,
                 uint32_t kv) {
  rec_prompt(s, which);
  uint32_t blocks = 0, queried = 0, cached = 0;
  const pkv_stats before = rec_stats(e);
  int ok = CHECK_OK(pkv_allocate_query(e, s->tokens, s->num_tokens, NULL, &blocks, &queried)) &&
           CHECK(queried == hit) &&
           CHECK_OK(pkv_allocate(e, s->tokens, s->num_tokens, NULL, &s->id, &cached));
  const pkv_stats after = rec_stats(e);
  const char label[] = {'a', 'd', 'm', 'i', 't', ' ', which, 0};
  return ok && rec_check_admission(p, label, &before, &after, cached, hit, kv, hit > 0);
}

/* B's prompt, one block boundary at a time (A decoding beside it): a batch ends on every
 * boundary, its branch point at 21 included. */
static int prefill_by_blocks(const model *m, pkv_engine *e, rec_seq *seqs) {
  int ok = 1;
  while (ok && seqs[SB].pending < 0) {
    const uint32_t left = uncomputed(e, &seqs[SB]), at = seqs[SB].num_tokens - left;
    const uint32_t chunk = BS - at % BS < left ? BS - at % BS : left;
    const int idx[2] = {SB, SA};
    const uint32_t counts[2] = {chunk, 0};
    ok = step(m, e, seqs, idx, counts, seqs[SA].ngen < GEN ? 2 : 1);
    if (seqs[SB].pending < 0) ok = ok && append_pending(e, seqs); /* A's token only */
  }
  return ok;
}

/* pkv_swap_out of s, with STATE layers: its working state needs a host state slot, which
 * pkv_pool_info names (the slots pkv's CPU backend copies STATE_OUT / STATE_IN through). */
static int swap_out_checked(pkv_engine *e, const rec_seq *s) {
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  return CHECK_OK(pkv_pool_info(e, &info)) && CHECK(info.host_state_base != NULL) &&
         CHECK(info.num_host_state_slots > 0) && CHECK_OK(pkv_swap_out(e, s->id));
}

static int manual_story(const model *m, const rec_policy *p, rec_seq *seqs) {
  pkv_engine *e = NULL;
  memset(seqs, 0, sizeof(rec_seq) * NUM_SEQS);
  state_moves[0] = state_moves[1] = 0;
  if (!rec_engine(p, 64, 2048, &e)) return 0;
  /* A in chunks ending at 10 (inside a block), 14, 28 and its last token */
  int ok = admit(p, e, &seqs[SA], 'A', 0, 0);
  const uint32_t chunks[4] = {10, 4, 14, 2};
  for (int c = 0; ok && c < 4; c++) ok = step(m, e, seqs, (const int[]){SA}, &chunks[c], 1);
  ok = ok && append_pending(e, seqs) && admit(p, e, &seqs[SB], 'B', p->hit_b, 3 * BS);
  ok = ok && prefill_by_blocks(m, e, seqs);
  /* B forked before its first token is appended: the child continues with the second best */
  seqs[SB2] = seqs[SB];
  ok = ok && CHECK_OK(pkv_fork(e, seqs[SB].id, &seqs[SB2].id));
  seqs[SB2].second_at = 0;
  seqs[SB2].pending = pick(seqs[SB2].logits[0], 1);
  ok = ok && append_pending(e, seqs);
  ok = ok && admit(p, e, &seqs[SC], 'C', p->hit_c, 3 * BS) &&
       admit(p, e, &seqs[SD], 'D', p->hit_d, 4 * BS);
  /* C's prompt, then 2 tokens: 30 tokens, 29 computed (EVERY 2 checkpoints 28), preempted */
  for (int s = 0; ok && s < 3; s++) ok = step_all(m, e, seqs, 0);
  ok = ok && CHECK(seqs[SC].num_tokens == 30) && CHECK_OK(pkv_preempt(e, seqs[SC].id));
  /* with a host tier D sits out swapped out too (its state leaves by STATE_OUT in the next
   * step), and stays out while C resumes and recomputes into a working slot, so a state not
   * brought back by STATE_IN would show in D's tokens */
  const unsigned out = p->host_blocks ? 1u << SC | 1u << SD : 1u << SC;
  const uint32_t moved_out = state_moves[0], moved_in = state_moves[1];
  ok = ok && (!p->host_blocks || swap_out_checked(e, &seqs[SD]));
  for (int s = 0; ok && s < 2; s++) ok = step_all(m, e, seqs, out);
  ok = ok && CHECK(state_moves[0] - moved_out == (p->host_blocks ? 1u : 0u));
  const pkv_stats before = rec_stats(e);
  uint32_t cached = 0;
  ok = ok && CHECK_OK(pkv_resume(e, seqs[SC].id, &cached));
  const pkv_stats after = rec_stats(e);
  ok = ok && rec_check_admission(p, "resume C", &before, &after, cached, p->hit_c_resumed, 4 * BS,
                                 p->hit_c_resumed > 0);
  if (ok && p->host_blocks)
    ok = step_all(m, e, seqs, 1u << SD) && CHECK_OK(pkv_swap_in(e, seqs[SD].id)) &&
         step_all(m, e, seqs, 0) && CHECK(state_moves[1] - moved_in == 1);
  for (int s = 0; ok && s < 2 * GEN; s++) ok = step_all(m, e, seqs, 0);
  const pkv_stats st = rec_stats(e);
  ok = rec_counters(p, "batches", &st) && ok &&
       CHECK(st.num_preemptions == 1 && st.num_cow_copies >= 1) &&
       CHECK(st.num_state_checkpoints_taken == p->checkpoints_taken) &&
       CHECK(st.num_state_checkpoints_offloaded >= p->offloaded_min) &&
       CHECK(st.num_state_restores_from_host == p->host_restores) &&
       CHECK(st.num_host_state_checkpoints_held <= st.num_state_checkpoints_offloaded);
  if (!ok)
    fprintf(stderr, "  %s: %llu checkpoints taken (want %u), %llu held\n", p->name,
            (unsigned long long)st.num_state_checkpoints_taken, p->checkpoints_taken,
            (unsigned long long)st.num_state_checkpoints_held);
  for (int i = 0; ok && i < NUM_SEQS; i++) {
    char label[64];
    snprintf(label, sizeof label, "%s: batches: seq %c%s", p->name, "ABBCD"[i],
             i == SB2 ? "'" : "");
    ok = rec_check_seq(m, e, &seqs[i], label);
  }
  ok = ok && CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  return ok;
}

/* The store restart (the file header's last story), under PROMPT_END with a host tier. */
static int store_story(const model *m, const rec_policy *p, rec_seq *seqs) {
  pkv_engine *e = NULL;
  memset(seqs, 0, sizeof(rec_seq) * NUM_SEQS);
  if (!rec_engine(p, 64, 2048, &e)) return 0;
  int ok = admit(p, e, &seqs[SA], 'A', 0, 0);
  const uint32_t chunks[2] = {28, 2}; /* a checkpoint at 28, written when taken */
  for (int c = 0; ok && c < 2; c++) ok = step(m, e, seqs, (const int[]){SA}, &chunks[c], 1);
  ok = ok && append_pending(e, seqs);
  for (int s = 0; ok && s < GEN; s++) ok = step_all(m, e, seqs, 0);
  ok = ok && rec_check_seq(m, e, &seqs[SA], "store: the first engine: seq A") && CHECK_ENGINE(e);
  pkv_engine_destroy(e); /* its writes are finished */
  memset(seqs, 0, sizeof(rec_seq) * NUM_SEQS);
  if (!ok || !rec_engine(p, 64, 2048, &e)) return 0;
  for (int i = 0; ok && i < 2; i++) { /* D from the store, then A from what D's admission left */
    rec_seq *s = &seqs[i ? SA : SD];
    rec_prompt(s, i ? 'A' : 'D');
    uint32_t cached = 0;
    ok = CHECK_OK(pkv_allocate(e, s->tokens, s->num_tokens, NULL, &s->id, &cached)) &&
         CHECK(cached == 4 * BS);
  }
  for (int s = 0; ok && s < GEN; s++) ok = step_all(m, e, seqs, 0);
  const pkv_stats st = rec_stats(e);
  ok = ok && CHECK(st.store_hit_tokens == 4 * BS) && CHECK(st.num_state_restores == 2) &&
       CHECK(st.num_state_restores_from_host == 2) && CHECK(st.num_store_rejected == 0) &&
       rec_check_seq(m, e, &seqs[SD], "store: after the restart: seq D") &&
       rec_check_seq(m, e, &seqs[SA], "store: after the restart: seq A") && CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  return ok;
}

int main(void) {
  kw_skip_unless_isa();
  model *m = malloc(sizeof *m);
  init_model(m);
  rec_seq *seqs = calloc(NUM_SEQS, sizeof *seqs);
  /* name, policy, interval, checkpoint slots; hits of B, C, D, C resumed; checkpoints taken
   * (PROMPT_END: A at 28, B at 21 and 28; EVERY 2 also A at 14 and C at 28 as it decodes). With
   * one checkpoint slot, B's 21 evicts A's 28 and B's 28 evicts B's 21 (LRU): C and D find KV
   * but no checkpoint, and fall back to token 0 */
  const rec_policy policies[] = {
      {"PROMPT_END", PKV_STATE_CHECKPOINT_PROMPT_END, 0, 0, 0, 21, 28, 21, 3, 0, 0, 0, 0, NULL},
      {"EVERY 2", PKV_STATE_CHECKPOINT_EVERY, 2, 0, 14, 21, 28, 28, 5, 0, 0, 0, 0, NULL},
      {"NONE", PKV_STATE_CHECKPOINT_NONE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
      {"1 slot", PKV_STATE_CHECKPOINT_PROMPT_END, 0, 1, 0, 0, 0, 0, 3, 0, 0, 0, 0, NULL},
      /* with a host tier (swap preemption, offload): the PROMPT_END hits, D swapped by hand */
      {"SWAP", PKV_STATE_CHECKPOINT_PROMPT_END, 0, 0, 0, 21, 28, 21, 3, 64, PKV_PREEMPT_SWAP, 0, 0,
       NULL},
      /* two checkpoint slots and a host tier: B's 28 evicts A's 28 to a host state slot (LRU),
       * D's hit at 28 restores it from there, C's at 21 (B's) from the device */
      {"2 slots+host", PKV_STATE_CHECKPOINT_PROMPT_END, 0, 2, 0, 21, 28, 21, 3, 64,
       PKV_PREEMPT_SWAP, 1, 1, NULL}};
  char dir[64];
  if (CHECK(rec_store_dir(dir))) {
    const rec_policy store = {.name = "store",
                              .policy = PKV_STATE_CHECKPOINT_PROMPT_END,
                              .host_blocks = 64,
                              .store_dir = dir};
    const int failed = kw_failed;
    store_story(m, &store, seqs);
    printf("%s store: a restart hits A's checkpoint\n", kw_failed == failed ? "ok  " : "FAIL");
    rec_store_remove(dir);
  }
  for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++) {
    const int failed = kw_failed;
    manual_story(m, &policies[i], seqs);
    printf("%s %s: batches the test plans\n", kw_failed == failed ? "ok  " : "FAIL",
           policies[i].name);
    const int failed2 = kw_failed;
    rec_sched_story(m, &policies[i]);
    printf("%s %s: pkv_step\n", kw_failed == failed2 ? "ok  " : "FAIL", policies[i].name);
  }
  free(seqs);
  free(m);
  return kw_summary();
}
