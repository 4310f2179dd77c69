/* End to end: a tiny transformer (3 layers, hidden 64, 4 q heads / 2 kv heads of 16, RoPE,
 * RMSNorm, SwiGLU MLP, vocab 200, deterministic random weights, f32) generates greedily for
 * prompts sharing a system prompt, once on pkv (block size 7, prefix caching: hits, a chunked
 * prefill, mixed batches, a fork continuing with another token so a shared block is copied, a
 * preemption and resume that recomputes what the cache lost, a forked pair swapped out to the
 * host tier and back) and once on a naive contiguous KV
 * cache per sequence. The tokens must be identical and the logits equal within f32 noise.
 * The story runs ten times at tp 1: f32 KV; fp8 e4m3 and e5m2 KV (scales per layer and kv head from
 * the amax of an f32 run, the naive cache rounding as pkv_ref_fp8_encode does: the logits
 * then agree within what a value landing on the other side of a rounding edge could move); a
 * sliding window of 8 on every layer (the naive side masks it); a hybrid model, the window on
 * layers 0 and 2 and full attention on layer 1 (two KV groups; the swap-out is left out, as pkv
 * has no host tier with windows), in f32 and in fp8 e4m3; and a model whose attention is
 * multi-head latent attention (DeepSeek's: a latent of 32 + a shared rotary key of 16 per token,
 * per-head keys and values up-projected from it), pkv caching the latent and attending in the
 * absorbed form while the naive side decompresses every head's K and V into its contiguous
 * cache; and two models described per layer (pkv's layer_specs, kv_mode.specs): gpt-oss-like
 * (alternating windows, a sink logit per layer and q head) and Gemma-4-like (layers of unequal
 * kv heads in one paged pool, a K = V layer, a SHARED layer reading layer 0's KV); and a
 * recurrent hybrid (Qwen3-Next / Jamba-like): layer 1 a STATE layer, a gated linear recurrence
 * S_t = g_t S_{t-1} + k_t v_t^T with output q_t S_t after a short causal conv of v, its state in
 * pkv's working slot (the fork's copy of it queued by pkv, done by pkv_batch_copy), between two
 * full-attention layers; no prefix hit here (no batch of this story ends on a boundary where a
 * state checkpoint is taken, so a hit would lack the state: e2e_recurrent.c's stories hit), the
 * preempted sequence recomputed from token 0. Then f32 and fp8 e4m3 KV run the story again with
 * tensor parallelism 2 on one engine (tp_size 2, ranks ALL: a CPU pool per rank), each layer's
 * attention split over the ranks (rank r: q heads 2r, 2r + 1 and kv head r, on its handle from
 * pkv_batch_rank; the outputs put back in head order, as the all-gather after the o-projection
 * would), so both ranks' pools go through the prefix hits, the chunked prefill, the fork's copy,
 * the preemption and the swap to the host tier and back: the tokens must be tp 1's and the
 * naive side's, the logits within the same tolerance of both. It prints how often fp8 KV picks
 * the tokens bf16 KV (the naive cache rounding to bf16) picks.
 * The model, the naive side and the layer calls on pkv are e2e_model.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "e2e_model.h"
#include "kv_world.h"

enum { NUM_PROMPTS = 4, SYS_LEN = 17, WINDOW = 8 };

/* ---------------------------------------------------------------- the pkv side */
typedef struct e2e_seq {
  uint64_t id;
  int32_t tokens[MAX_TOKENS];
  uint32_t num_tokens, prompt_len, cached, ngen;
  int second_at;   /* the generated token that took the second best (-1: none) */
  int32_t pending; /* sampled by the last step, not appended yet (-1: none) */
  float logits[GEN][VOCAB];
} e2e_seq;

typedef struct e2e_run {
  pkv_engine *e;
  int mla; /* the model's attention is MLA */
  e2e_seq seqs[NUM_PROMPTS];
} e2e_run;

static uint32_t uncomputed(e2e_run *run, const e2e_seq *s) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(run->e, s->id, &info));
  CHECK(info.num_tokens == s->num_tokens);
  return info.num_tokens - info.num_computed_tokens;
}

/* One batch: seqs idx[i] compute num_new[i] tokens (0 = all uncomputed); each one whose last
 * token got computed samples its next token (pending until append_pending). */
static int e2e_step(const model *m, e2e_run *run, const int *idx, const uint32_t *num_new,
                    uint32_t n) {
  const int mla = run->mla;
  uint64_t ids[NUM_PROMPTS];
  uint32_t counts[NUM_PROMPTS];
  for (uint32_t i = 0; i < n; i++) {
    ids[i] = run->seqs[idx[i]].id;
    counts[i] = num_new && num_new[i] ? num_new[i] : uncomputed(run, &run->seqs[idx[i]]);
  }
  pkv_batch *b = NULL;
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_begin(run->e, ids, counts, n, &b)) || !CHECK_OK(pkv_batch_info(b, &v)))
    return 0;
  int32_t *tokens = calloc(v.num_tokens, sizeof(int32_t));
  float *logits = malloc(sizeof(float) * v.num_tokens * VOCAB);
  for (uint32_t i = 0; i < n; i++)
    for (int32_t r = v.query_start[i]; r < v.query_start[i + 1]; r++)
      tokens[r] = run->seqs[idx[i]].tokens[v.positions[r]];
  int ok = forward(m, tokens, v.positions, v.num_tokens, mla, 1, attention_on_pkv, b, logits);
  for (uint32_t i = 0; ok && i < n; i++) {
    e2e_seq *s = &run->seqs[idx[i]];
    const int32_t last = v.query_start[i + 1] - 1;
    if ((uint32_t)v.positions[last] + 1 != s->num_tokens || s->ngen == GEN) continue;
    memcpy(s->logits[s->ngen], logits + (size_t)last * VOCAB, sizeof s->logits[0]);
    s->pending = pick(s->logits[s->ngen], (int)s->ngen == s->second_at);
    s->ngen++;
  }
  free(tokens), free(logits);
  return CHECK_OK(pkv_batch_end(b)) && ok;
}

static void append_pending(e2e_run *run) {
  for (int i = 0; i < NUM_PROMPTS; i++) {
    e2e_seq *s = &run->seqs[i];
    if (s->id && s->pending >= 0 && CHECK_OK(pkv_append(run->e, s->id, &s->pending, 1)))
      s->tokens[s->num_tokens++] = s->pending;
    s->pending = -1;
  }
}

static int admit(e2e_run *run, int i, const int32_t *sys, const int32_t *user, uint32_t user_len) {
  e2e_seq *s = &run->seqs[i];
  memcpy(s->tokens, sys, SYS_LEN * sizeof s->tokens[0]);
  memcpy(s->tokens + SYS_LEN, user, user_len * sizeof s->tokens[0]);
  s->num_tokens = s->prompt_len = SYS_LEN + user_len;
  s->second_at = s->pending = -1;
  return CHECK_OK(pkv_allocate(run->e, s->tokens, s->num_tokens, NULL, &s->id, &s->cached));
}

/* Steps every live sequence that still generates, but those in the mask (1 << i: preempted or
 * swapped out). */
static int step_all(const model *m, e2e_run *run, unsigned skip) {
  int idx[NUM_PROMPTS];
  uint32_t n = 0;
  for (int i = 0; i < NUM_PROMPTS; i++)
    if (run->seqs[i].id && run->seqs[i].ngen < GEN && !(skip >> i & 1)) idx[n++] = i;
  const int ok = n == 0 || e2e_step(m, run, idx, NULL, n);
  append_pending(run);
  return ok;
}

/* Prompts 0..2 share a 17-token system prompt; 3 is 2's fork after its prefill, continuing with
 * its second best token. 1 is preempted mid-generation and resumed. With a window the cached
 * counts are the block manager's to choose (a windowed group may give blocks back): at most the
 * full-attention ones. */
static int run_on_pkv(const model *m, e2e_run *run, const kv_mode *mode, uint32_t tp) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = QH, p.num_kv_heads = KVH, p.head_dim = HD;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.block_size = BS, p.num_blocks = 64;
  p.num_threads = 2, p.enable_prefix_caching = 1;
  p.tp_size = tp, p.ranks = tp > 1 ? PKV_RANKS_ALL : PKV_RANKS_ONE; /* tp > 1: a pool per rank */
  /* pkv has no host tier with windows or STATE layers yet */
  const int no_host = mode->window || mode->specs == SPECS_RECURRENT;
  p.host_num_blocks = no_host ? 0 : 32;
  p.kv_dtype = mode->kv_dtype, p.sliding_window = mode->hybrid ? 0 : mode->window;
  const uint32_t hybrid_windows[LAYERS] = {mode->window, 0, mode->window};
  if (mode->hybrid) p.layer_windows = hybrid_windows;
  pkv_layer_spec specs[LAYERS];
  memset(specs, 0, sizeof specs);
  for (uint32_t l = 0; mode->specs && l < LAYERS; l++) {
    specs[l].attention = layer_window(mode, l) ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
    specs[l].window = layer_window(mode, l);
    specs[l].num_kv_heads = (uint32_t)layer_kv_heads(mode, l);
    specs[l].k_eq_v = (uint32_t)layer_k_eq_v(mode, l);
    specs[l].sinks = mode->specs == SPECS_GPT_OSS;
    if (layer_source(mode, l) != l) specs[l].kind = PKV_LAYER_SHARED;
    specs[l].source_layer = layer_source(mode, l) != l ? layer_source(mode, l) : 0;
    if (!layer_recurrent(mode, l)) continue;
    memset(&specs[l], 0, sizeof specs[l]); /* conv [CONV - 1][KVH * HD], ssm [KVH][HD][HD], f32 */
    specs[l].kind = PKV_LAYER_STATE;
    specs[l].state_shape[0] = CONV - 1, specs[l].state_shape[1] = KVH * HD;
    specs[l].state_shape[4] = KVH, specs[l].state_shape[5] = HD, specs[l].state_shape[6] = HD;
  }
  if (mode->specs) {
    p.sliding_window = 0, p.layer_specs = specs, p.layer_spec_size = sizeof specs[0];
  }
  e2e_mode = mode;
  if (mode->mla) { /* one latent per token; the scale is the heads' 1/sqrt(NOPE + ROPE) */
    p.kv_layout = PKV_KV_LAYOUT_MLA, p.num_kv_heads = 1, p.head_dim = LATENT;
    p.kv_lora_rank = RANK, p.qk_rope_head_dim = ROPE, p.softmax_scale = 1.0f / sqrtf(QKD);
  }
  memset(run, 0, sizeof *run);
  run->mla = mode->mla;
  if (!CHECK_OK(pkv_engine_create(&p, &run->e))) return 0;
  e2e_engine = run->e, e2e_tp = tp;
  struct pkv_pool_info pool;
  memset(&pool, 0, sizeof pool);
  pool.struct_size = sizeof pool;
  if (!CHECK_OK(pkv_pool_info(run->e, &pool)) || !CHECK(pool.num_ranks == tp)) return 0;
  /* ranks ALL takes every rank's kv heads in rank order, [tp][KVH / tp]: the model's order */
  for (uint32_t l = 0; mode->kv_dtype && l < LAYERS; l++)
    if (!CHECK_OK(pkv_set_kv_scales(run->e, l, mode->scales[l][0], mode->scales[l][1]))) return 0;
  for (uint32_t l = 0; mode->specs == SPECS_GPT_OSS && l < LAYERS; l++) {
    float sinks[QH];
    for (int h = 0; h < QH; h++) sinks[h] = layer_sink(mode, l, h);
    if (!CHECK_OK(pkv_set_attention_sinks(run->e, l, sinks, QH))) return 0;
  }
  const int exact = mode->window == 0; /* the cached counts below are exact */
  /* STATE layers: no prefix hit (no checkpoint: no batch ends on a boundary PROMPT_END wants) */
  const uint32_t hit = mode->specs == SPECS_RECURRENT ? 0 : 14, rehit = hit ? 21 : 0;
  int32_t sys[SYS_LEN], user[3][9];
  for (int i = 0; i < SYS_LEN; i++) sys[i] = (int32_t)((i * 37 + 11) % VOCAB);
  for (int u = 0; u < 3; u++)
    for (int i = 0; i < 9; i++) user[u][i] = (int32_t)((u * 53 + i * 29 + 5) % VOCAB);
  int ok = admit(run, 0, sys, user[0], 6);
  const int first = 0;
  const uint32_t chunk = 12;
  ok = ok && CHECK(run->seqs[0].cached == 0) && e2e_step(m, run, &first, &chunk, 1) &&
       step_all(m, run, 0);
  ok = ok && admit(run, 1, sys, user[1], 9) && admit(run, 2, sys, user[2], 5);
  ok = ok && CHECK(exact ? run->seqs[1].cached == hit && run->seqs[2].cached == hit
                         : run->seqs[1].cached <= hit && run->seqs[2].cached <= hit);
  if (!ok) return 0;
  /* 0 decodes, 1 prefills a chunk after its hit, 2 all of its uncached part: then fork 2. */
  const int mixed[3] = {0, 1, 2};
  const uint32_t counts[3] = {0, 5, 0};
  ok = e2e_step(m, run, mixed, counts, 3);
  e2e_seq *parent = &run->seqs[2], *child = &run->seqs[3];
  *child = *parent;
  ok = ok && CHECK(parent->ngen == 1) && CHECK_OK(pkv_fork(run->e, parent->id, &child->id));
  child->second_at = 0;
  child->pending = pick(child->logits[0], 1);
  append_pending(run);
  for (int step = 0; ok && step < 2; step++) ok = step_all(m, run, 0);
  /* 1 has 27 tokens computed (3 sealed blocks and 6 tokens) and its last sampled token pending
   * in pkv: preempt, two steps without it, resume: 21 cached, 7 recomputed. */
  ok = ok && CHECK_OK(pkv_preempt(run->e, run->seqs[1].id));
  for (int step = 0; ok && step < 2; step++) ok = step_all(m, run, 1u << 1);
  uint32_t cached = 0;
  ok = ok && CHECK_OK(pkv_resume(run->e, run->seqs[1].id, &cached));
  ok = ok && CHECK(run->seqs[1].num_tokens == 28 && (exact ? cached == rehit : cached <= rehit));
  /* 2 and its fork 3 share their prompt's blocks: swapped out, those move once; two steps run
   * without them (others take their pool blocks); swapped in, their KV is back, byte for byte.
   * (With windows pkv has no host tier yet: the two steps run without them all the same.) */
  if (no_host) {
    for (int step = 0; ok && step < 2; step++) ok = step_all(m, run, 1u << 2 | 1u << 3);
  } else {
    ok = ok && CHECK_OK(pkv_swap_out(run->e, run->seqs[2].id)) &&
         CHECK_OK(pkv_swap_out(run->e, run->seqs[3].id));
    struct pkv_seq_info i2, i3;
    memset(&i2, 0, sizeof i2), memset(&i3, 0, sizeof i3);
    i2.struct_size = i3.struct_size = sizeof i2;
    ok = ok && CHECK_OK(pkv_seq_info(run->e, run->seqs[2].id, &i2)) &&
         CHECK_OK(pkv_seq_info(run->e, run->seqs[3].id, &i3));
    pkv_stats sw;
    memset(&sw, 0, sizeof sw);
    sw.struct_size = sizeof sw;
    CHECK_OK(pkv_engine_stats(run->e, &sw));
    CHECK(i2.kv_tier == PKV_TIER_HOST && i3.kv_tier == PKV_TIER_HOST);
    CHECK(sw.num_swapped_out_blocks < (uint64_t)i2.num_host_blocks + i3.num_host_blocks);
    for (int step = 0; ok && step < 2; step++) ok = step_all(m, run, 1u << 2 | 1u << 3);
    ok = ok && CHECK_OK(pkv_swap_in(run->e, run->seqs[3].id)) &&
         CHECK_OK(pkv_swap_in(run->e, run->seqs[2].id));
  }
  for (int step = 0; ok && step < 2 * GEN; step++) ok = step_all(m, run, 0);
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(pkv_engine_stats(run->e, &st));
  CHECK((!exact || st.prefix_hit_tokens >= 2 * hit + cached) && st.num_cow_copies >= 1 &&
        st.num_preemptions == 1);
  CHECK(hit || st.prefix_hit_tokens == 0);
  CHECK((no_host || st.num_swapped_in_blocks >= 1) && st.num_swapped_seqs == 0);
  for (int i = 0; i < NUM_PROMPTS; i++) {
    int32_t tokens[MAX_TOKENS];
    uint32_t len = 0;
    CHECK(run->seqs[i].ngen == GEN);
    CHECK_OK(pkv_seq_tokens(run->e, run->seqs[i].id, tokens, MAX_TOKENS, &len));
    CHECK(len == run->seqs[i].num_tokens &&
          memcmp(tokens, run->seqs[i].tokens, len * sizeof tokens[0]) == 0);
  }
  CHECK_ENGINE(run->e);
  pkv_engine_destroy(run->e);
  return ok;
}

static double logit_tol(const kv_mode *mode) {
  const int fp8 = mode->kv_dtype == PKV_DTYPE_FP8_E4M3 || mode->kv_dtype == PKV_DTYPE_FP8_E5M2;
  return fp8 ? FP8_LOGIT_TOL : LOGIT_ATOL;
}

/* One mode's story on pkv (tp ranks) against the naive side kept the same way. 0 when the story
 * failed. */
static int run_mode(const model *m, const kv_mode *mode, uint32_t tp, e2e_run *run,
                    float *min_gap) {
  const double tol = logit_tol(mode);
  if (!run_on_pkv(m, run, mode, tp)) return 0;
  for (int i = 0; i < NUM_PROMPTS; i++) {
    const e2e_seq *s = &run->seqs[i];
    int32_t tokens[GEN];
    float(*logits)[VOCAB] = malloc(sizeof(float) * GEN * VOCAB);
    naive_generate(m, s->tokens, s->prompt_len, s->second_at, mode, NULL, NULL, tokens, logits);
    for (int g = 0; g < GEN; g++) {
      const float gap = logits[g][pick(logits[g], 0)] - logits[g][pick(logits[g], 1)];
      *min_gap = fminf(*min_gap, g == s->second_at ? INFINITY : gap);
      char label[96];
      snprintf(label, sizeof label, "%s: prompt %d token %d logits", mode->name, i, g);
      double got[VOCAB], ref[VOCAB];
      for (int j = 0; j < VOCAB; j++) got[j] = s->logits[g][j], ref[j] = logits[g][j];
      CHECK(pkv_ref_compare(label, got, ref, VOCAB, tol, tol) == 0);
      if (!CHECK(s->tokens[s->prompt_len + g] == tokens[g]))
        fprintf(stderr, "  %s: prompt %d token %d: pkv %d, naive %d\n", mode->name, i, g,
                s->tokens[s->prompt_len + g], tokens[g]);
    }
    printf("%-8s prompt %d (%u tokens, %u cached at admission):", mode->name, i, s->prompt_len,
           s->cached);
    for (int g = 0; g < GEN; g++) printf(" %d", s->tokens[s->prompt_len + g]);
    printf("\n");
    free(logits);
  }
  return 1;
}

/* A tensor-parallel run against its mode's one-rank run: every sequence's tokens the same, the
 * logits within the mode's tolerance; prints how far apart the logits came. */
static void same_as_tp1(const e2e_run *tp1, const e2e_run *run, const kv_mode *mode) {
  double diff = 0;
  for (int i = 0; i < NUM_PROMPTS; i++) {
    const e2e_seq *a = &tp1->seqs[i], *s = &run->seqs[i];
    if (!CHECK(s->num_tokens == a->num_tokens &&
               memcmp(s->tokens, a->tokens, sizeof(int32_t) * a->num_tokens) == 0))
      fprintf(stderr, "  %s: prompt %d: tokens other than tp 1's\n", mode->name, i);
    for (int g = 0; g < GEN; g++) {
      char label[96];
      snprintf(label, sizeof label, "%s: prompt %d token %d logits against tp 1", mode->name, i, g);
      double got[VOCAB], ref[VOCAB];
      for (int j = 0; j < VOCAB; j++) {
        got[j] = s->logits[g][j], ref[j] = a->logits[g][j];
        diff = fmax(diff, fabs(got[j] - ref[j]));
      }
      CHECK(pkv_ref_compare(label, got, ref, VOCAB, logit_tol(mode), logit_tol(mode)) == 0);
    }
  }
  printf("%-8s tokens as tp 1's; largest logit difference from tp 1: %.3g\n", mode->name, diff);
}

/* Against bf16 KV's tokens: pkv's generated tokens position by position (a sequence that diverged
 * stays apart), and the naive side's next-token choices (K/V kept as mode says) fed bf16 KV's
 * tokens. */
static void agreement(const model *m, const e2e_run *run, const kv_mode *mode,
                      int32_t (*bf16_tokens)[GEN], unsigned *generated, unsigned *choices) {
  float(*logits)[VOCAB] = malloc(sizeof(float) * GEN * VOCAB);
  for (int i = 0; i < NUM_PROMPTS; i++) {
    const e2e_seq *s = &run->seqs[i];
    int32_t picks[GEN];
    naive_generate(m, s->tokens, s->prompt_len, s->second_at, mode, NULL, bf16_tokens[i], picks,
                   logits);
    for (int g = 0; g < GEN; g++) {
      *generated += s->tokens[s->prompt_len + g] == bf16_tokens[i][g];
      *choices += picks[g] == bf16_tokens[i][g];
    }
  }
  free(logits);
}

/* After the f32 run (the prompts are known): bf16 KV's tokens (the naive cache rounding to bf16),
 * and the fp8 modes' scales: the amax of each layer's k and v per kv head over an f32 run, over
 * the format's largest finite. */
static void bf16_and_scales(const model *m, const e2e_run *run, kv_mode *e4m3, kv_mode *e5m2,
                            int32_t (*bf16_tokens)[GEN]) {
  const kv_mode bf16 = {"bf16", PKV_DTYPE_BF16, 0, 0, 0, {{{0}}}, 0},
                f32 = {"f32", 0, 0, 0, 0, {{{0}}}, 0};
  float amax[LAYERS][2][KVH] = {{{0}}};
  float(*logits)[VOCAB] = malloc(sizeof(float) * GEN * VOCAB);
  int32_t tokens[GEN];
  for (int i = 0; i < NUM_PROMPTS; i++) {
    const e2e_seq *s = &run->seqs[i];
    naive_generate(m, s->tokens, s->prompt_len, s->second_at, &bf16, NULL, NULL, bf16_tokens[i],
                   logits);
    naive_generate(m, s->tokens, s->prompt_len, s->second_at, &f32, amax, NULL, tokens, logits);
  }
  free(logits);
  for (int l = 0; l < LAYERS; l++)
    for (int kind = 0; kind < 2; kind++)
      for (int h = 0; h < KVH; h++) {
        const float a = amax[l][kind][h] > 0 ? amax[l][kind][h] : 1.0f;
        e4m3->scales[l][kind][h] = a / 448.0f;
        e5m2->scales[l][kind][h] = a / 57344.0f;
      }
}

int main(void) {
  kw_skip_unless_isa();
  model *m = malloc(sizeof *m);
  init_model(m);
  e2e_run *run = calloc(1, sizeof *run), *tp1 = calloc(2, sizeof *tp1); /* f32's, e4m3's */
  float min_gap = INFINITY; /* the closest greedy choice: how far from a tie the test runs */
  kv_mode modes[10] = {{"f32", 0, 0, 0, 0, {{{0}}}, 0},
                       {"e4m3", PKV_DTYPE_FP8_E4M3, 0, 0, 0, {{{0}}}, 0},
                       {"e5m2", PKV_DTYPE_FP8_E5M2, 0, 0, 0, {{{0}}}, 0},
                       {"window", 0, WINDOW, 0, 0, {{{0}}}, 0},
                       {"hybrid", 0, WINDOW, 1, 0, {{{0}}}, 0},
                       {"hybrid8", PKV_DTYPE_FP8_E4M3, WINDOW, 1, 0, {{{0}}}, 0},
                       {"mla", 0, 0, 0, 1, {{{0}}}, 0},
                       {"gpt-oss", 0, WINDOW, 0, 0, {{{0}}}, SPECS_GPT_OSS},
                       {"gemma4", 0, WINDOW, 0, 0, {{{0}}}, SPECS_GEMMA4},
                       {"recurrent", 0, 0, 0, 0, {{{0}}}, SPECS_RECURRENT}};
  int32_t bf16_tokens[NUM_PROMPTS][GEN];
  unsigned generated[3] = {0}, choices[3] = {0}; /* f32, e4m3, e5m2 against bf16 KV */
  for (int k = 0; k < 10; k++) {
    float gap = INFINITY;
    if (!run_mode(m, &modes[k], 1, run, &gap)) break;
    printf("%-8s smallest top-2 logit gap of a greedy choice: %.3g\n", modes[k].name, gap);
    min_gap = fminf(min_gap, gap);
    if (k == 0) {
      bf16_and_scales(m, run, &modes[1], &modes[2], bf16_tokens);
      memcpy(modes[5].scales, modes[1].scales,
             sizeof modes[5].scales); /* fp8 e4m3 in a hybrid model */
    }
    if (k < 3) agreement(m, run, &modes[k], bf16_tokens, &generated[k], &choices[k]);
    if (k < 2) memcpy(&tp1[k], run, sizeof *run);
  }
  /* f32 and e4m3 again, the attention split over 2 ranks of one engine (ranks ALL) */
  for (int k = 0; k < 2; k++) {
    kv_mode tp2 = modes[k];
    tp2.name = k ? "e4m3-tp2" : "f32-tp2";
    float gap = INFINITY;
    if (!run_mode(m, &tp2, 2, run, &gap)) break;
    same_as_tp1(&tp1[k], run, &tp2);
    min_gap = fminf(min_gap, gap);
  }
  printf("smallest top-2 logit gap of a greedy choice: %.3g (logit tolerance %g; fp8 %g)\n",
         min_gap, LOGIT_ATOL, FP8_LOGIT_TOL);
  printf("closest fp8 K/V value to a rounding edge: %.3g relative\n", closest_edge);
  printf(
      "token agreement with bf16 KV over %d generated tokens: generated f32 %u, e4m3 %u, e5m2 %u; "
      "next-token choices given bf16's tokens f32 %u, e4m3 %u, e5m2 %u\n",
      NUM_PROMPTS * GEN, generated[0], generated[1], generated[2], choices[0], choices[1],
      choices[2]);
  free(run), free(tp1);
  free(m);
  return kw_summary();
}
