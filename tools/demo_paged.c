/*
 * demo_paged.c - `pkv demo` served through pkv, as a host would: every request goes in with
 * pkv_submit (its tenant's cache salt, max_new_tokens, the stop token), then each pkv_step's batch
 * runs through the model with pkv_attention as the attention of every layer, and pkv_commit takes
 * the greedy tokens. Finished requests are drained, checked against pkv's own record
 * (pkv_seq_tokens, finish reason) and released. With --hybrid, the recurrent layers run the
 * demo's recurrence (demo_mixer.c) on the state slots the batch lists, after pkv_batch_copy has
 * done the queued state copies (checkpoints taken and restored).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

typedef struct paged_run {
  const demo_options *o;
  const demo_workload *w;
  const model *m;
  demo_result *r;
  pkv_engine *e;
  uint64_t *seqs; /* [request] its sequence id, increasing */
  int32_t *tokens, *positions, *sample_rows, *sampled, *row_out;
  uint32_t *sample_seq; /* [sampling rows] index in the batch */
  uint32_t cap_rows;
  model_workspace ws;
  double t0;
  demo_state_region sr; /* --hybrid: pkv's state slots */
} paged_run;

/* The run's failure into r->error: what failed, then pkv's status and message when a pkv call
 * failed (s != PKV_OK); the demo's own failures (s == PKV_OK) are said by what alone. */
static int fail(paged_run *p, const char *what, pkv_status s) {
  if (s == PKV_OK)
    snprintf(p->r->error, sizeof p->r->error, "%s", what);
  else
    snprintf(p->r->error, sizeof p->r->error, "%s: %s: %s", what, pkv_status_string(s),
             pkv_engine_last_error(p->e));
  return -1;
}

const char *demo_in_flag_terms(const demo_options *o, const char *msg, char *buf, size_t cap) {
  /* every engine field the demo takes from a flag; the model's shape is built in, not a flag */
  const char *names[][2] = {
      {"num_blocks", !o->paged_blocks ? "--num-blocks"
                     : o->hybrid
                         ? "the pool's blocks (--num-blocks and the checkpoints' bytes as blocks)"
                         : "the windowed pool's blocks (--num-blocks scaled to its bytes)"},
      {"block_size", "--block-size"},
      {"max_model_len", "--max-model-len"},
      {"num_layers", "--layers"},
      {"layer_windows", "--windows"},
      {"max_num_seqs", "--max-num-seqs"},
      {"max_num_batched_tokens", "--step-tokens"},
      {"host_cache_bytes", "--host-cache"},
      {"preemption_mode", "--preemption"},
      {"state_checkpoint_policy", "--state-checkpoints"},
      {"state_checkpoint_interval", "--checkpoint-interval"},
      {"num_state_checkpoints", "--checkpoint-slots"},
  };
  return cli_in_flag_terms(msg, (const char *const(*)[2])names, sizeof names / sizeof names[0], buf,
                           cap);
}

typedef struct attend_ctx {
  pkv_batch *b;
  demo_result *r;
  const pkv_batch_view *v;
  paged_run *p;
} attend_ctx;

/* A recurrent layer (--hybrid) is the demo's own kernel on pkv's state slots: pkv has none. */
static int attend(void *ctx, uint32_t layer, const float *q, const float *k, const float *v,
                  float *out) {
  attend_ctx *a = ctx;
  const double t = cli_now_s();
  demo_mixer *x = a->p->o->mixer;
  if (x && x->is_state[layer]) {
    int rc =
        demo_mixer_batch(x, layer, a->v, &a->p->sr, q, k, v, out, a->r->error, sizeof a->r->error);
    a->r->attn_s += cli_now_s() - t;
    return rc;
  }
  pkv_status s = pkv_attention(a->b, layer, q, k, v, out);
  a->r->attn_s += cli_now_s() - t;
  return s == PKV_OK ? 0 : fail(a->p, "pkv_attention", s);
}

void demo_engine_params(const demo_options *o, const model *m, pkv_engine_params *ep) {
  pkv_engine_params_init(ep, sizeof *ep);
  ep->num_layers = m->c.num_layers;
  ep->num_q_heads = m->c.num_q_heads;
  ep->num_kv_heads = m->c.num_kv_heads;
  ep->head_dim = m->c.head_dim;
  ep->dtype = PKV_DTYPE_F32;
  ep->device = o->engine_device ? o->engine_device : PKV_DEVICE_CPU;
  ep->max_model_len = o->max_model_len;
  ep->block_size = o->block_size;
  ep->num_blocks = o->paged_blocks ? o->paged_blocks : o->num_blocks;
  if (o->windows && !o->full_attention) ep->layer_windows = o->layer_windows;
  ep->enable_prefix_caching = o->no_prefix_caching ? 0 : 1;
  ep->max_num_seqs = o->max_num_seqs;
  ep->max_num_batched_tokens = o->step_tokens;
  ep->preemption_mode = o->preemption_mode;
  ep->host_cache_bytes = o->preemption_mode != PKV_PREEMPT_RECOMPUTE ? o->host_cache : 0;
  ep->store = o->store_params;
}

static int create(paged_run *p) {
  pkv_engine_params ep;
  demo_engine_params(p->o, p->m, &ep);
  pkv_layer_spec specs[16];
  if (p->o->mixer) {
    demo_mixer_specs(p->o->mixer, specs);
    ep.layer_specs = specs, ep.layer_spec_size = sizeof specs[0];
    ep.state_checkpoint_policy = p->o->checkpoint_policy;
    if (p->o->checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY)
      ep.state_checkpoint_interval = p->o->checkpoint_interval;
    if (p->o->checkpoint_policy != PKV_STATE_CHECKPOINT_NONE)
      ep.num_state_checkpoints = p->o->checkpoint_slots;
  }
  pkv_status s = pkv_engine_create(&ep, &p->e);
  /* --device cuda: pkv's kernels and the demo's cuBLAS GEMMs on one stream, in order */
  if (s == PKV_OK && p->o->cuda_stream &&
      (s = pkv_engine_set_stream(p->e, p->o->cuda_stream)) != PKV_OK)
    return fail(p, "pkv_engine_set_stream", s);
  if (s == PKV_OK && p->o->mixer && demo_state_region_get(p->e, p->o->mixer, &p->sr) != 0)
    return fail(p, "pkv's state slots are not laid out as the layer specs asked", PKV_OK);
  if (s == PKV_OK) return 0;
  char said[sizeof p->r->error];
  snprintf(p->r->error, sizeof p->r->error, "the engine refused: %s",
           demo_in_flag_terms(p->o, pkv_last_error(), said, sizeof said));
  return -1;
}

static int submit_all(paged_run *p) {
  for (uint32_t i = 0; i < p->w->num_requests; i++) {
    const demo_request *q = &p->w->requests[i];
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = q->max_new_tokens;
    rp.stop_token = p->o->stop_token;
    rp.cache_salt = p->w->salts[q->tenant];
    rp.cache_salt_len = (uint32_t)strlen(p->w->salts[q->tenant]);
    rp.cache_priority = q->cache_priority;
    rp.cache_retention_ms = q->cache_retention_ms;
    pkv_status s = pkv_submit(p->e, q->prompt, q->prompt_len, &rp, &p->seqs[i]);
    if (s != PKV_OK) return fail(p, "pkv_submit", s);
    if (i > 0 && p->seqs[i] <= p->seqs[i - 1])
      return fail(p, "pkv_submit: ids not increasing", PKV_OK);
  }
  return 0;
}

static uint32_t request_of(const paged_run *p, uint64_t seq) {
  uint32_t lo = 0, hi = p->w->num_requests - 1;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (p->seqs[mid] < seq)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int reserve_rows(paged_run *p, uint32_t rows, uint32_t seqs) {
  uint32_t need = rows > seqs ? rows : seqs;
  if (need <= p->cap_rows) return 0;
  free(p->tokens), free(p->positions), free(p->sample_rows), free(p->sampled), free(p->row_out),
      free(p->sample_seq);
  p->tokens = malloc(need * sizeof(int32_t));
  p->positions = malloc(need * sizeof(int32_t));
  p->sample_rows = malloc(need * sizeof(int32_t));
  p->sampled = malloc(need * sizeof(int32_t));
  p->row_out = malloc(need * sizeof(int32_t));
  p->sample_seq = malloc(need * sizeof(uint32_t));
  p->cap_rows = need;
  return p->tokens && p->positions && p->sample_rows && p->sampled && p->row_out && p->sample_seq
             ? 0
             : -1;
}

/* Runs the model over a batch and fills p->sampled[i] for every sampling sequence. */
static int forward(paged_run *p, pkv_batch *b, const pkv_batch_view *v) {
  if (reserve_rows(p, v->num_tokens, v->num_seqs) != 0) return fail(p, "out of memory", PKV_OK);
  uint32_t n = 0;
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    const uint32_t req = request_of(p, v->seq_ids[i]);
    for (int32_t row = v->query_start[i]; row < v->query_start[i + 1]; row++) {
      p->tokens[row] = demo_token_at(p->w, p->r, req, (uint32_t)v->positions[row]);
      p->positions[row] = v->positions[row];
    }
    p->sampled[i] = -1;
    if (v->sample_rows[i] >= 0) p->sample_seq[n] = i, p->sample_rows[n++] = v->sample_rows[i];
  }
  double t = cli_now_s();
  /* pkv_attention would do the copies at its first call, after the recurrent layers before it
   * had read their slots: a checkpoint restored or taken must be copied first */
  const pkv_status cs = p->o->mixer ? pkv_batch_copy(b) : PKV_OK;
  if (cs != PKV_OK) return fail(p, "pkv_batch_copy", cs);
  attend_ctx a = {b, p->r, v, p};
  p->ws.backend = p->o->gemm_backend;
  if (model_forward(p->m, &p->ws, p->tokens, p->positions, v->num_tokens, p->sample_rows, n, attend,
                    &a, p->row_out) != 0)
    return p->r->error[0]
               ? -1 /* pkv_attention's or the mixer's */
               : fail(p, p->o->gemm_backend ? "a GEMM on the GPU" : "out of memory", PKV_OK);
  p->r->model_s += cli_now_s() - t;
  p->r->rows += v->num_tokens;
  for (uint32_t s = 0; s < n; s++) {
    const uint32_t i = p->sample_seq[s], req = request_of(p, v->seq_ids[i]);
    p->sampled[i] = p->row_out[s];
    if (p->r->num_generated[req] < p->w->requests[req].max_new_tokens)
      p->r->margin[req][p->r->num_generated[req]] = p->ws.margin[s];
  }
  return 0;
}

/* A finished request: pkv's tokens and finish reason must be the demo's; then it goes. */
static int retire(paged_run *p, uint64_t seq) {
  const uint32_t i = request_of(p, seq), n = p->w->requests[i].prompt_len + p->r->num_generated[i];
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  pkv_status s = pkv_seq_info(p->e, seq, &info);
  if (s != PKV_OK) return fail(p, "pkv_seq_info", s);
  uint32_t len = 0;
  if (reserve_rows(p, n, 1) != 0) return fail(p, "out of memory", PKV_OK);
  s = pkv_seq_tokens(p->e, seq, p->tokens, p->cap_rows, &len);
  if (s != PKV_OK) return fail(p, "pkv_seq_tokens", s);
  if (p->r->cached_tokens) p->r->cached_tokens[i] = info.num_cached_tokens;
  int same = len == n && info.finish_reason == p->r->finish[i];
  for (uint32_t k = 0; same && k < n; k++) same = p->tokens[k] == demo_token_at(p->w, p->r, i, k);
  if (!same)
    return fail(p, "a finished request's tokens differ from what was committed", PKV_ERR_INTERNAL);
  s = pkv_release(p->e, seq);
  return s == PKV_OK ? 0 : fail(p, "pkv_release", s);
}

/* One pkv_step through pkv_commit; 1 = ran, 0 = nothing to run, -1 = failed. */
static int step(paged_run *p) {
  pkv_batch *b = NULL;
  pkv_status s = pkv_step(p->e, &b);
  if (s != PKV_OK) return fail(p, "pkv_step", s);
  if (!b) return 0;
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  pkv_batch_info(b, &v);
  if (p->o->on_batch &&
      p->o->on_batch(p->o->on_step_ctx, p->e, p->seqs, p->r->error, sizeof p->r->error)) {
    pkv_batch_abort(b);
    return -1;
  }
  if (forward(p, b, &v) != 0) {
    pkv_batch_abort(b);
    return -1;
  }
  const double ms = (cli_now_s() - p->t0) * 1e3;
  for (uint32_t i = 0; i < v.num_seqs; i++)
    if (p->sampled[i] >= 0)
      demo_result_token(p->r, p->w, request_of(p, v.seq_ids[i]), p->sampled[i], p->o->stop_token,
                        ms);
  if ((s = pkv_commit(b, p->sampled)) != PKV_OK) return fail(p, "pkv_commit", s);
  if (p->o->on_step &&
      p->o->on_step(p->o->on_step_ctx, p->e, p->seqs, p->r->error, sizeof p->r->error))
    return -1;
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(p->e, &st);
  /* a paged sequence holds the blocks it fills and no more: reserved is what is used */
  const double used = (double)st.num_used_blocks / (double)st.num_blocks;
  if (demo_result_trace(p->r, used, used, (uint32_t)st.num_running_requests) != 0)
    return fail(p, "out of memory", PKV_OK);
  uint64_t done[64];
  uint32_t n = 0;
  do {
    if ((s = pkv_drain_finished(p->e, done, 64, &n)) != PKV_OK)
      return fail(p, "pkv_drain_finished", s);
    for (uint32_t k = 0; k < n; k++)
      if (retire(p, done[k]) != 0) return -1;
  } while (n == 64);
  return 1;
}

int demo_run_paged(const demo_options *o, const demo_workload *w, const model *m, demo_result *r) {
  paged_run p;
  memset(&p, 0, sizeof p);
  p.o = o, p.w = w, p.m = m, p.r = r;
  p.seqs = calloc(w->num_requests, sizeof *p.seqs);
  int rc = p.seqs ? create(&p) : -1;
  p.t0 = cli_now_s();
  if (rc == 0) rc = submit_all(&p);
  while (rc == 0 && (rc = step(&p)) == 1) rc = 0;
  r->wall_s = cli_now_s() - p.t0;
  if (rc == 0 && r->num_finished != w->num_requests)
    rc = fail(&p, "pkv_step stopped early", PKV_OK);
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (p.e && pkv_engine_stats(p.e, &st) == PKV_OK) {
    r->preemptions = st.num_preemptions;
    r->hit_tokens = st.prefix_hit_tokens;
    r->query_tokens = st.prefix_query_tokens;
    r->swap_preemptions = st.num_swap_preemptions;
    r->swapped_out_blocks = st.num_swapped_out_blocks;
    r->swapped_in_blocks = st.num_swapped_in_blocks;
    r->host_blocks = st.num_host_blocks;
    r->device_hit_tokens = st.device_hit_tokens;
    r->host_hit_tokens = st.host_hit_tokens;
    r->offloaded_blocks = st.num_offloaded_blocks;
    r->loaded_blocks = st.num_loaded_blocks;
    r->store_hit_tokens = st.store_hit_tokens;
    r->store_hits = st.num_store_hits;
    r->store_misses = st.num_store_misses;
    r->store_bad = st.num_store_rejected + st.num_store_errors;
    r->store_puts = st.num_store_puts;
    r->store_put_lost = st.num_store_put_dropped + st.num_store_put_errors;
    r->ckpt_taken = st.num_state_checkpoints_taken;
    r->ckpt_evicted = st.num_state_checkpoint_evictions;
    r->ckpt_held = st.num_state_checkpoints_held;
    r->state_restores = st.num_state_restores;
    r->state_fallback_tokens = st.state_fallback_tokens;
    r->evictions[0] = st.num_evictions_low, r->evictions[1] = st.num_evictions_normal;
    r->evictions[2] = st.num_evictions_high, r->evictions[3] = st.num_evictions_highest;
    r->pinned_blocks = st.num_pinned_blocks;
  }
  pkv_kv_budget kb;
  memset(&kb, 0, sizeof kb);
  kb.struct_size = sizeof kb;
  if (p.e && pkv_engine_budget(p.e, &kb) == PKV_OK) {
    r->ckpt_slots = kb.num_state_checkpoints;
    r->state_bytes_per_seq = kb.state_bytes_per_seq;
    r->block_bytes = kb.block_bytes;
  }
  /* With a store, destroying the engine finishes the writes still queued (not in the counts). */
  const double t = cli_now_s();
  pkv_engine_destroy(p.e);
  r->close_s = cli_now_s() - t;
  model_workspace_free(&p.ws);
  free(p.seqs), free(p.tokens), free(p.positions), free(p.sample_rows), free(p.sampled),
      free(p.row_out), free(p.sample_seq);
  return rc == 0 ? 0 : -1;
}
