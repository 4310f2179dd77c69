/*
 * sched_util.h - what the scheduler tests share: engines with scheduler limits, requests whose
 * whole token stream is known in advance, and a "model" whose every output can be checked.
 *
 * The model: V of the token at position p is a function of the whole context 0..p (its chain
 * hash); Q and K are 0, so attention averages V uniformly and, exactly (small integers),
 *   out[row][q head h][d] * (p + 1) == sum over positions 0..p of V[kv head h / group][d].
 * The next token is a hash of the context. A cached block served under the wrong prefix, KV
 * written to the wrong slot, a lost token at preemption or a sampled row in the wrong place all
 * change the numbers or the tokens.
 */
#ifndef PKV_SCHED_UTIL_H
#define PKV_SCHED_UTIL_H

#include "test_util.h"

enum { SU_LAYERS = 2, SU_QH = 4, SU_KVH = 2, SU_HD = 8, SU_VOCAB = 64, SU_KV = SU_KVH * SU_HD };
enum { SU_WAITING = 0, SU_RUNNING = 1, SU_FINISHED = 2, SU_RELEASED = 3, SU_DRAINED = 4 };

static inline uint64_t su_mix(uint64_t h, int32_t token) {
  uint64_t z = (h ^ (uint32_t)token) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The chain hash of tokens[0..n) (n >= 1). */
static inline uint64_t su_chain(const int32_t *tokens, uint32_t n) {
  uint64_t h = 0;
  for (uint32_t i = 0; i < n; i++) h = su_mix(h, tokens[i]);
  return h;
}

/* The model's next token after a context whose chain hash is h. */
static inline int32_t su_next(uint64_t h) { return (int32_t)((h >> 52) % SU_VOCAB); }
/* V[kv head g][d] of a token whose context has chain hash h, in layer 0 (layer l adds l). */
static inline int32_t su_value(uint64_t h, uint32_t j) { return (int32_t)((h >> (3 * j)) & 7); }

/* An engine with the tiny test model (test_util.h's shape) and scheduler limits. */
static inline pkv_engine *su_engine(uint32_t block_size, uint32_t num_blocks, uint32_t max_num_seqs,
                                    uint32_t max_tokens, uint32_t max_model_len, uint32_t caching) {
  pkv_engine_params p;
  tu_params(&p, block_size, num_blocks);
  p.max_num_seqs = max_num_seqs;
  p.max_num_batched_tokens = max_tokens;
  p.max_model_len = max_model_len;
  p.enable_prefix_caching = caching;
  return tu_engine_p(&p);
}

/* A request and what it must produce. */
typedef struct su_req {
  uint64_t seq;
  int32_t *tokens; /* [len]: the prompt, then the generated tokens the model will sample */
  int32_t *vsum;   /* [len][SU_KV]: prefix sums of V (layer 0) */
  uint32_t prompt_len, len, max_new;
  int32_t stop, priority;
  uint32_t finish_reason; /* expected */
  const char *salt;       /* NULL = none */
  int state;              /* SU_*, as the test's model of the scheduler sees it */
} su_req;

/* Fills r with the prompt and the stream the model will produce. 1 on success. */
static inline int su_req_make(su_req *r, const int32_t *prompt, uint32_t n, uint32_t max_new,
                              int32_t stop, int32_t priority) {
  memset(r, 0, sizeof *r);
  uint32_t cap = n + max_new;
  r->tokens = (int32_t *)malloc(cap * sizeof *r->tokens);
  r->vsum = (int32_t *)malloc((size_t)cap * SU_KV * sizeof *r->vsum);
  if (!CHECK(r->tokens && r->vsum)) return 0;
  memcpy(r->tokens, prompt, n * sizeof *prompt);
  r->prompt_len = n, r->max_new = max_new, r->stop = stop, r->priority = priority;
  r->finish_reason = PKV_FINISH_LENGTH;
  uint64_t h = 0;
  uint32_t len = n;
  for (uint32_t p = 0; p < len; p++) {
    h = su_mix(h, r->tokens[p]);
    for (uint32_t j = 0; j < SU_KV; j++)
      r->vsum[p * SU_KV + j] = (p ? r->vsum[(p - 1) * SU_KV + j] : 0) + su_value(h, j);
    if (p + 1 == len && len < cap && r->finish_reason == PKV_FINISH_LENGTH) {
      int32_t t = su_next(h);
      r->tokens[len++] = t;
      if (t == stop) r->finish_reason = PKV_FINISH_STOP_TOKEN;
    }
  }
  r->len = len;
  return 1;
}

static inline void su_req_free(su_req *r) {
  free(r->tokens);
  free(r->vsum);
  r->tokens = NULL, r->vsum = NULL;
}

/* Submits r; 1 on success (r->seq set, state WAITING). */
static inline int su_submit(pkv_engine *e, su_req *r) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = r->max_new;
  rp.stop_token = r->stop;
  rp.priority = r->priority;
  rp.cache_salt = r->salt;
  rp.cache_salt_len = r->salt ? (uint32_t)strlen(r->salt) : 0;
  r->state = SU_WAITING;
  return CHECK_OK(pkv_submit(e, r->tokens, r->prompt_len, &rp, &r->seq));
}

/* A plain request of n tokens starting at `first`; returns its id, 0 on failure. */
static inline uint64_t su_submit_plain(pkv_engine *e, int32_t first, uint32_t n, uint32_t max_new,
                                       int32_t stop, int32_t priority) {
  int32_t t[512];
  tu_fill(t, n, first);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = max_new;
  rp.stop_token = stop;
  rp.priority = priority;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_submit(e, t, n, &rp, &seq))) return 0;
  return seq;
}

/* The model's token for row i of a view: from pkv's own tokens of the sequence. */
static inline int32_t su_sample_row(pkv_engine *e, const pkv_batch_view *v, uint32_t i) {
  static int32_t buf[8192];
  uint32_t len = 0;
  CHECK_OK(pkv_seq_tokens(e, v->seq_ids[i], buf, 8192, &len));
  uint32_t ctx = (uint32_t)v->context_lens[i];
  if (!CHECK(ctx >= 1 && ctx <= len)) return 0;
  CHECK_EQ_INT(v->positions[v->sample_rows[i]], ctx - 1);
  return su_next(su_chain(buf, ctx));
}

/* The model's tokens for every sampling row of v into out[num_seqs] (-1 elsewhere). */
static inline void su_sample(pkv_engine *e, const pkv_batch_view *v, int32_t *out) {
  for (uint32_t i = 0; i < v->num_seqs; i++)
    out[i] = v->sample_rows[i] >= 0 ? su_sample_row(e, v, i) : -1;
}

/* A copy of a batch view's plan (the view's arrays die with the batch). */
enum { SU_PLAN_SEQS = 64, SU_PLAN_TOKENS = 512 };
typedef struct su_plan {
  uint32_t num_seqs, num_tokens;
  uint64_t seq_ids[SU_PLAN_SEQS];
  int32_t query_start[SU_PLAN_SEQS + 1], sample_rows[SU_PLAN_SEQS], context_lens[SU_PLAN_SEQS];
  int32_t positions[SU_PLAN_TOKENS];
} su_plan;

static inline void su_plan_of(const pkv_batch_view *v, su_plan *p) {
  memset(p, 0, sizeof *p);
  if (!CHECK(v->num_seqs <= SU_PLAN_SEQS && v->num_tokens <= SU_PLAN_TOKENS)) return;
  p->num_seqs = v->num_seqs, p->num_tokens = v->num_tokens;
  memcpy(p->seq_ids, v->seq_ids, v->num_seqs * sizeof p->seq_ids[0]);
  memcpy(p->query_start, v->query_start, (v->num_seqs + 1) * sizeof p->query_start[0]);
  memcpy(p->sample_rows, v->sample_rows, v->num_seqs * sizeof p->sample_rows[0]);
  memcpy(p->context_lens, v->context_lens, v->num_seqs * sizeof p->context_lens[0]);
  memcpy(p->positions, v->positions, v->num_tokens * sizeof p->positions[0]);
}

/* One scheduler step with the model's tokens, no attention: pkv_step, sample, pkv_commit,
 * pkv_engine_check. Returns the batch's number of sequences (0: nothing to run), -1 on failure.
 * plan_out (nullable) gets a copy of the plan. */
static inline int su_step(pkv_engine *e, su_plan *plan_out) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(e, &b))) return -1;
  if (!b) return 0;
  pkv_batch_view v = tu_view(b);
  int32_t sampled[1024];
  su_sample(e, &v, sampled);
  if (plan_out) su_plan_of(&v, plan_out);
  int n = (int)v.num_seqs;
  if (!CHECK_OK(pkv_commit(b, sampled)) || !CHECK_ENGINE(e)) return -1;
  return n;
}

/* Steps until pkv_step has nothing to run (at most max_steps); returns the steps run, -1 on
 * failure. */
static inline int su_run(pkv_engine *e, int max_steps) {
  for (int i = 0; i < max_steps; i++) {
    int n = su_step(e, NULL);
    if (n <= 0) return n < 0 ? -1 : i;
  }
  return max_steps;
}

static inline uint32_t su_tokens(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_tokens(e, seq, out, cap, &len));
  return len;
}

/* pkv_attention with the model's V on every layer of batch b (view v); every output row
 * checked: out * count is the sum of V over the keys the layer reads (layer 0 its window, when
 * window is not 0). req_of(ctx, seq) is the request a batch's sequence runs. Returns the first
 * bad row's sequence (0: every row good). */
static inline uint64_t su_attend(pkv_batch *b, const pkv_batch_view *v, uint32_t window,
                                 const su_req *(*req_of)(void *ctx, uint64_t seq), void *ctx) {
  size_t nq = (size_t)v->num_tokens * SU_QH * SU_HD, nkv = (size_t)v->num_tokens * SU_KV;
  float *q = calloc(nq, sizeof *q), *k = calloc(nkv, sizeof *k), *val = calloc(nkv, sizeof *val);
  float *out = calloc(nq, sizeof *out);
  uint64_t bad = 0;
  for (uint32_t layer = 0; layer < SU_LAYERS && q && k && val && out; layer++) {
    for (uint32_t i = 0; i < v->num_seqs; i++) {
      const su_req *r = req_of(ctx, v->seq_ids[i]);
      for (int32_t row = v->query_start[i]; row < v->query_start[i + 1]; row++) {
        const int32_t *s = r->vsum + (size_t)v->positions[row] * SU_KV;
        for (uint32_t j = 0; j < SU_KV; j++)
          val[(size_t)row * SU_KV + j] =
              (float)(s[j] - (v->positions[row] ? s[(int)j - SU_KV] : 0) + (int32_t)layer);
      }
    }
    if (!CHECK_OK(pkv_attention(b, layer, q, k, val, out))) break;
    for (uint32_t row = 0; row < v->num_tokens && !bad; row++) {
      uint32_t i = 0;
      while ((uint32_t)v->query_start[i + 1] <= row) i++;
      const su_req *r = req_of(ctx, v->seq_ids[i]);
      const int32_t pos = v->positions[row];
      const int32_t from =
          layer == 0 && window && pos >= (int32_t)window ? pos - (int32_t)window + 1 : 0;
      for (uint32_t h = 0; h < SU_QH * SU_HD && !bad; h++) {
        const size_t j = (h / SU_HD) / (SU_QH / SU_KVH) * SU_HD + h % SU_HD;
        double want =
            r->vsum[(size_t)pos * SU_KV + j] - (from ? r->vsum[(size_t)(from - 1) * SU_KV + j] : 0);
        want += (double)layer * (pos - from + 1);
        const double err = out[(size_t)row * SU_QH * SU_HD + h] * (pos - from + 1) - want;
        if (!CHECK(err < 0.25 && err > -0.25)) bad = v->seq_ids[i];
      }
    }
  }
  free(q), free(k), free(val), free(out);
  return bad;
}

#endif /* PKV_SCHED_UTIL_H */
