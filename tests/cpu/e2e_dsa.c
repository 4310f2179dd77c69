/* End to end, sparse attention (DeepSeek V3.2 / GLM-5's DSA): the tiny transformer's MLA model
 * (e2e_model.h: 3 layers, a latent of 32 + a shared rotary key of 16 per token) with a lightning
 * indexer in every layer: per token an indexer key of 16 values that pkv caches in fp8 e4m3 with
 * one scale per token, per query 3 indexer heads and their weights, all projected from the
 * normed hidden state; each query attends over the 8 best-scoring keys of its context only. The
 * prompts (24-token system prompt, own parts of 6 to 12) and their 10 generated tokens make
 * contexts of 30 to 46 tokens, far past the top-k.
 * On pkv each layer calls pkv_indexer_write, pkv_indexer_topk (positions; slots too, checked
 * against the block tables) and pkv_sparse_mla_attention; the naive side keeps its own
 * contiguous cache of decompressed K/V and indexer keys (quantized as pkv.h specifies), scores
 * in fp64, takes its own top-k with pkv.h's tie rule and attends over it, no pkv call. Tokens
 * must be identical and logits within f32 noise (LOGIT_ATOL) through two stories:
 * - batches the test plans (pkv_batch_begin): a chunked prefill, prefix hits (two prompts sharing
 *   the system prompt's blocks), a mixed batch, pkv_fork (the child continues with its second
 *   best token, a shared block copied), a preemption that recomputes, and a forked pair swapped
 *   out to the host tier and back;
 * - the scheduler (pkv_submit / pkv_step / pkv_commit, e2e_dsa_sched.c) with a budget of 10 new
 *   tokens a step (chunks) and a pool too small for its six requests: preemption by recompute in
 *   one run, by swap (PKV_PREEMPT_SWAP, host tier) in another, prefix hits in both.
 * The system prompt holds a run of one repeated token: the indexer has no rotary part, so in
 * layer 0 those keys are equal and some top-k cuts fall between equal scores, which pkv.h's
 * rule (the lower position wins) decides on both sides. It prints how far the runs came from a
 * choice f32 noise could flip (fp8 rounding edges of the indexer keys, score gaps at the cuts). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "e2e_dsa.h"
#include "kv_world.h"

enum { NUM_SEQS = 4 };

const kv_mode dsa_mode = {"dsa", 0, 0, 0, E2E_DSA, {{{0}}}, 0};

int dsa_engine(uint32_t num_blocks, uint32_t host_blocks, uint32_t budget, uint32_t preemption,
               pkv_engine **out) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = QH, p.num_kv_heads = 1, p.head_dim = LATENT;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.block_size = BS;
  p.num_blocks = num_blocks, p.host_num_blocks = host_blocks;
  p.num_threads = 2, p.enable_prefix_caching = 1, p.preemption_mode = preemption;
  if (budget) p.max_num_batched_tokens = budget;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = RANK, p.qk_rope_head_dim = ROPE;
  p.softmax_scale = 1.0f / sqrtf(QKD); /* the heads' 1/sqrt(NOPE + ROPE) */
  pkv_layer_spec specs[LAYERS];
  memset(specs, 0, sizeof specs);
  for (int l = 0; l < LAYERS; l++) {
    specs[l].kind = PKV_LAYER_MLA;
    specs[l].index_head_dim = IDX_DIM, specs[l].index_dtype = PKV_DTYPE_FP8_E4M3;
    specs[l].index_n_heads = IDX_HEADS, specs[l].index_topk = IDX_TOPK;
  }
  p.layer_specs = specs, p.layer_spec_size = sizeof specs[0];
  e2e_mode = &dsa_mode;
  *out = NULL;
  if (!CHECK_OK(pkv_engine_create(&p, out))) return 0;
  e2e_engine = *out;
  struct pkv_layer_info li;
  memset(&li, 0, sizeof li);
  li.struct_size = sizeof li;
  return CHECK_OK(pkv_layer_info(*out, LAYERS - 1, &li)) &&
         CHECK(li.kind == PKV_LAYER_MLA && li.index_head_dim == IDX_DIM &&
               li.index_dtype == PKV_DTYPE_FP8_E4M3 && li.index_n_heads == IDX_HEADS &&
               li.index_topk == IDX_TOPK && li.index_scale_base != NULL &&
               (host_blocks == 0) == (li.host_index_base == NULL));
}

void dsa_prompt(dsa_seq *s, int u, uint32_t own_len) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < SYS_LEN; i++) /* tokens 9 .. 18: one token repeated */
    s->tokens[i] = i >= 9 && i < 19 ? 123 : (int32_t)((i * 37 + 11) % VOCAB);
  for (uint32_t i = 0; i < own_len; i++)
    s->tokens[SYS_LEN + i] = (int32_t)((u * 53 + (int)i * 29 + 5) % VOCAB);
  s->num_tokens = s->prompt_len = SYS_LEN + own_len;
  s->second_at = s->pending = -1;
}

int dsa_forward(const model *m, pkv_batch *b, dsa_seq *seqs, int n, int32_t *sampled) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) return 0;
  dsa_seq **of = calloc(v.num_seqs, sizeof *of); /* the batch's sequences, in batch order */
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
  ok = ok && forward(m, tokens, v.positions, v.num_tokens, E2E_DSA, 1, attention_on_pkv, b, logits);
  for (uint32_t i = 0; ok && i < v.num_seqs; i++) {
    dsa_seq *s = of[i];
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

int dsa_compare(const model *m, const dsa_seq *s, const char *story, int i) {
  int32_t tokens[GEN];
  float(*logits)[VOCAB] = malloc(sizeof(float) * GEN * VOCAB);
  naive_generate(m, s->tokens, s->prompt_len, s->second_at, &dsa_mode, NULL, NULL, tokens, logits);
  int ok = CHECK(s->ngen == GEN);
  for (int g = 0; ok && g < GEN; g++) {
    char label[96];
    snprintf(label, sizeof label, "%s: sequence %d token %d logits", story, i, g);
    double got[VOCAB], ref[VOCAB];
    for (int j = 0; j < VOCAB; j++) got[j] = s->logits[g][j], ref[j] = logits[g][j];
    ok = CHECK(pkv_ref_compare(label, got, ref, VOCAB, LOGIT_ATOL, LOGIT_RTOL) == 0) && ok;
    if (!CHECK(s->tokens[s->prompt_len + g] == tokens[g]))
      fprintf(stderr, "  %s: sequence %d token %d: pkv %d, naive %d\n", story, i, g,
              s->tokens[s->prompt_len + g], tokens[g]),
          ok = 0;
  }
  printf("%-9s sequence %d (%u tokens, %u cached at admission):", story, i, s->prompt_len,
         s->cached);
  for (int g = 0; g < GEN; g++) printf(" %d", s->tokens[s->prompt_len + g]);
  printf("\n");
  free(logits);
  return ok;
}

/* ---------------------------------------------------------------- batches the test plans */
/* One batch: seqs idx[i] compute num_new[i] tokens (0 = all not yet computed). */
static int step(const model *m, pkv_engine *e, dsa_seq *seqs, const int *idx,
                const uint32_t *num_new, uint32_t n) {
  uint64_t ids[NUM_SEQS];
  uint32_t counts[NUM_SEQS];
  for (uint32_t i = 0; i < n; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (!CHECK_OK(pkv_seq_info(e, seqs[idx[i]].id, &info))) return 0;
    ids[i] = seqs[idx[i]].id;
    counts[i] = num_new && num_new[i] ? num_new[i] : info.num_tokens - info.num_computed_tokens;
  }
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, ids, counts, n, &b))) return 0;
  const int ok = dsa_forward(m, b, seqs, NUM_SEQS, NULL);
  if (!ok) pkv_batch_abort(b);
  return ok && CHECK_OK(pkv_batch_end(b));
}

static int append_pending(pkv_engine *e, dsa_seq *seqs) {
  int ok = 1;
  for (int i = 0; i < NUM_SEQS; i++) {
    dsa_seq *s = &seqs[i];
    if (s->id && s->pending >= 0 && (ok = ok && CHECK_OK(pkv_append(e, s->id, &s->pending, 1))))
      s->tokens[s->num_tokens++] = s->pending;
    s->pending = -1;
  }
  return ok;
}

/* Every live sequence that still generates steps, but those in the mask (1 << i). */
static int step_all(const model *m, pkv_engine *e, dsa_seq *seqs, unsigned skip) {
  int idx[NUM_SEQS];
  uint32_t n = 0;
  for (int i = 0; i < NUM_SEQS; i++)
    if (seqs[i].id && seqs[i].ngen < GEN && !(skip >> i & 1)) idx[n++] = i;
  const int ok = n == 0 || step(m, e, seqs, idx, NULL, n);
  return append_pending(e, seqs) && ok;
}

static int admit(pkv_engine *e, dsa_seq *s, int u, uint32_t own_len) {
  dsa_prompt(s, u, own_len);
  return CHECK_OK(pkv_allocate(e, s->tokens, s->num_tokens, NULL, &s->id, &s->cached));
}

/* 2 and its fork 3 out to the host tier, two steps without them, back. */
static int swap_pair(const model *m, pkv_engine *e, dsa_seq *seqs) {
  int ok = CHECK_OK(pkv_swap_out(e, seqs[2].id)) && CHECK_OK(pkv_swap_out(e, seqs[3].id));
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ok = ok && CHECK_OK(pkv_seq_info(e, seqs[3].id, &info)) && CHECK(info.kv_tier == PKV_TIER_HOST);
  for (int i = 0; ok && i < 2; i++) ok = step_all(m, e, seqs, 1u << 2 | 1u << 3);
  return ok && CHECK_OK(pkv_swap_in(e, seqs[3].id)) && CHECK_OK(pkv_swap_in(e, seqs[2].id));
}

/* 0 (30 tokens) prefills in chunks of 12 and 18; 1 (33) and 2 (30) hit the system prompt's 21
 * tokens; 0 decodes while 1 prefills a chunk of 5 and 2 the rest; 2 forks into 3 (sharing its
 * last, partial block); two steps; 1 is preempted with 34 tokens computed and resumed (the KV of
 * 28 cached, 7 recomputed); 2 and 3 are swapped out and back in; all run to GEN tokens. */
static int batches_story(const model *m, dsa_seq *seqs) {
  pkv_engine *e = NULL;
  if (!dsa_engine(48, 24, 0, PKV_PREEMPT_RECOMPUTE, &e)) return 0;
  memset(seqs, 0, sizeof(dsa_seq) * NUM_SEQS);
  const int first = 0;
  const uint32_t chunk = 12;
  int ok = admit(e, &seqs[0], 0, 6) && CHECK(seqs[0].cached == 0) &&
           step(m, e, seqs, &first, &chunk, 1) && step_all(m, e, seqs, 0);
  ok = ok && admit(e, &seqs[1], 1, 9) && admit(e, &seqs[2], 2, 6) &&
       CHECK(seqs[1].cached == 21 && seqs[2].cached == 21);
  const int mixed[3] = {0, 1, 2};
  const uint32_t counts[3] = {0, 5, 0};
  ok = ok && step(m, e, seqs, mixed, counts, 3);
  seqs[3] = seqs[2]; /* the fork continues with 2's second best token */
  ok = ok && CHECK(seqs[2].ngen == 1) && CHECK_OK(pkv_fork(e, seqs[2].id, &seqs[3].id));
  seqs[3].second_at = 0;
  seqs[3].pending = pick(seqs[3].logits[0], 1);
  ok = ok && append_pending(e, seqs);
  for (int i = 0; ok && i < 2; i++) ok = step_all(m, e, seqs, 0);
  uint32_t cached = 0;
  ok = ok && CHECK_OK(pkv_preempt(e, seqs[1].id));
  for (int i = 0; ok && i < 2; i++) ok = step_all(m, e, seqs, 1u << 1);
  ok = ok && CHECK_OK(pkv_resume(e, seqs[1].id, &cached)) && CHECK(cached == 28);
  ok = ok && swap_pair(m, e, seqs);
  for (int i = 0; ok && i < 2 * GEN; i++) ok = step_all(m, e, seqs, 0);
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ok = ok && CHECK_OK(pkv_engine_stats(e, &st)) &&
       CHECK(st.prefix_hit_tokens >= 2 * 21 + 28 && st.num_cow_copies >= 1 &&
             st.num_preemptions == 1 && st.num_swapped_in_blocks >= 1);
  printf("batches: %llu prefix hit tokens, %llu COW copies, %llu blocks swapped out, %llu in\n",
         (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.num_cow_copies,
         (unsigned long long)st.num_swapped_out_blocks,
         (unsigned long long)st.num_swapped_in_blocks);
  ok = ok && CHECK_ENGINE(e);
  pkv_engine_destroy(e);
  for (int i = 0; ok && i < NUM_SEQS; i++) ok = dsa_compare(m, &seqs[i], "batches", i);
  return ok;
}

int main(void) {
  kw_skip_unless_isa();
  model *m = malloc(sizeof *m);
  init_model(m);
  dsa_seq *seqs = calloc(NUM_SEQS, sizeof *seqs);
  int ok = batches_story(m, seqs);
  printf("%s batches\n", ok ? "ok  " : "FAIL");
  ok = dsa_sched_story(m, PKV_PREEMPT_RECOMPUTE);
  printf("%s pkv_step, preemption by recompute\n", ok ? "ok  " : "FAIL");
  ok = dsa_sched_story(m, PKV_PREEMPT_SWAP);
  printf("%s pkv_step, preemption by swap\n", ok ? "ok  " : "FAIL");
  printf("closest fp8 indexer value to a rounding edge: %.3g relative\n", dsa_closest_edge);
  printf("top-k cuts: %u, %u between equal scores (the tie rule), smallest other score gap "
         "%.3g relative\n",
         dsa_cuts, dsa_cut_ties, dsa_min_cut_gap);
  CHECK(dsa_cut_ties > 0 && dsa_cuts > dsa_cut_ties);
  free(seqs);
  free(m);
  return kw_summary();
}
