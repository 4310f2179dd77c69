/*
 * demo_contig.c - the baseline `pkv demo` compares with: contiguous KV, as before paging. Each
 * running sequence owns a slot of max_model_len tokens of KV, reserved whole at admission, in the
 * same memory as pkv's pool - so only pool_tokens / max_model_len sequences run at once. The same
 * model, the same step-token budget and chunking, the same greedy tokens; attention is computed
 * here on the slot (f32, two-pass softmax). With --hybrid, a slot also holds its sequence's
 * recurrent state, every sequence computed from token 0 (no prefix cache, no checkpoint).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

typedef struct contig_run {
  const demo_options *o;
  const demo_workload *w;
  const model *m;
  demo_result *r;
  uint32_t num_slots, kvd;
  float *k_cache, *v_cache; /* [slot][layer][max_model_len][kv_heads][head_dim] */
  int32_t *slot_req;        /* [slot] the request in it, -1 = free */
  uint32_t *computed;       /* [request] tokens whose KV is in its slot */
  uint32_t *order;          /* running slots, admission order */
  uint32_t num_running, next_request, step_rows;
  /* this step's rows */
  int32_t *tokens, *positions, *sample_rows, *out;
  uint32_t *row_slot, *sample_req;
  float *scores; /* [max_model_len] */
  float *states; /* --hybrid: [slot][layer][conv | ssm] (demo_mixer.c's parts) */
  model_workspace ws;
} contig_run;

static size_t slot_offset(const contig_run *c, uint32_t slot, uint32_t layer, uint32_t pos) {
  return (((size_t)slot * c->m->c.num_layers + layer) * c->o->max_model_len + pos) * c->kvd;
}

/* A recurrent layer: each sequence's rows (consecutive: add_rows) on its slot's state. */
static void recur(contig_run *c, uint32_t layer, const float *q, const float *k, const float *v,
                  float *out) {
  demo_mixer *x = c->o->mixer;
  const size_t qd = c->m->q_dim, per_layer = x->conv_floats + x->ssm_floats;
  for (uint32_t r0 = 0, r1; r0 < c->step_rows; r0 = r1) {
    for (r1 = r0 + 1; r1 < c->step_rows && c->row_slot[r1] == c->row_slot[r0];) r1++;
    float *st = c->states + ((size_t)c->row_slot[r0] * x->num_layers + layer) * per_layer;
    demo_mixer_rows(x, layer, q + r0 * qd, k + (size_t)r0 * c->kvd, v + (size_t)r0 * c->kvd,
                    r1 - r0, c->positions[r0] == 0, st, st + x->conv_floats, out + r0 * qd);
  }
}

/* Writes the rows' K/V into their slots, then causal attention of each row over its slot. */
static int attend(void *ctx, uint32_t layer, const float *q, const float *k, const float *v,
                  float *out) {
  contig_run *c = ctx;
  const double t0 = cli_now_s();
  if (c->o->mixer && c->o->mixer->is_state[layer]) {
    recur(c, layer, q, k, v, out);
    c->r->attn_s += cli_now_s() - t0;
    return 0;
  }
  const uint32_t D = c->m->c.head_dim, QH = c->m->c.num_q_heads, group = QH / c->m->c.num_kv_heads;
  const uint32_t rows = c->step_rows;
  const float scale = 1.0f / sqrtf((float)D);
  for (uint32_t row = 0; row < rows; row++) {
    size_t at = slot_offset(c, c->row_slot[row], layer, (uint32_t)c->positions[row]);
    memcpy(c->k_cache + at, k + (size_t)row * c->kvd, c->kvd * sizeof(float));
    memcpy(c->v_cache + at, v + (size_t)row * c->kvd, c->kvd * sizeof(float));
  }
  for (uint32_t row = 0; row < rows; row++) {
    /* A windowed layer (--windows) attends to its window's keys only, as pkv's does. */
    const uint32_t pos = (uint32_t)c->positions[row],
                   w = c->o->windows ? c->o->layer_windows[layer] : 0;
    const uint32_t first = w && pos + 1 > w ? pos + 1 - w : 0, ctx_len = pos + 1 - first;
    const size_t base = slot_offset(c, c->row_slot[row], layer, first);
    for (uint32_t h = 0; h < QH; h++) {
      const float *qh = q + ((size_t)row * QH + h) * D;
      const size_t head = (size_t)(h / group) * D;
      float mx = -INFINITY, sum = 0.0f, *o = out + ((size_t)row * QH + h) * D;
      for (uint32_t j = 0; j < ctx_len; j++) {
        const float *kj = c->k_cache + base + (size_t)j * c->kvd + head;
        float s = 0.0f;
        for (uint32_t d = 0; d < D; d++) s += qh[d] * kj[d];
        c->scores[j] = s * scale;
        if (c->scores[j] > mx) mx = c->scores[j];
      }
      memset(o, 0, D * sizeof *o);
      for (uint32_t j = 0; j < ctx_len; j++) {
        const float p = expf(c->scores[j] - mx),
                    *vj = c->v_cache + base + (size_t)j * c->kvd + head;
        sum += p;
        for (uint32_t d = 0; d < D; d++) o[d] += p * vj[d];
      }
      for (uint32_t d = 0; d < D; d++) o[d] /= sum;
    }
  }
  c->r->attn_s += cli_now_s() - t0;
  return 0;
}

/* Adds up to budget of request req's uncomputed tokens (in slot) as rows. */
static uint32_t add_rows(contig_run *c, uint32_t slot, uint32_t budget, uint32_t *rows,
                         uint32_t *samples) {
  const uint32_t req = (uint32_t)c->slot_req[slot];
  const uint32_t total = c->w->requests[req].prompt_len + c->r->num_generated[req];
  uint32_t n = total - c->computed[req];
  if (n > budget) n = budget;
  for (uint32_t k = 0; k < n; k++, (*rows)++) {
    const uint32_t pos = c->computed[req] + k;
    c->tokens[*rows] = demo_token_at(c->w, c->r, req, pos);
    c->positions[*rows] = (int32_t)pos;
    c->row_slot[*rows] = slot;
  }
  c->computed[req] += n;
  if (n > 0 && c->computed[req] == total) {
    c->sample_rows[*samples] = (int32_t)(*rows - 1);
    c->sample_req[(*samples)++] = req;
  }
  return n;
}

/* Plans a step like pkv's scheduler: running sequences first, then new ones while a slot is free
 * and the budget lasts. Returns the rows. */
static uint32_t plan(contig_run *c, uint32_t *samples) {
  uint32_t rows = 0, budget = c->o->step_tokens, seqs = 0;
  *samples = 0;
  for (uint32_t i = 0; i < c->num_running && budget > 0 && seqs < c->o->max_num_seqs; i++, seqs++)
    budget -= add_rows(c, c->order[i], budget, &rows, samples);
  for (uint32_t slot = 0; slot < c->num_slots && budget > 0 && seqs < c->o->max_num_seqs; slot++) {
    if (c->slot_req[slot] >= 0 || c->next_request == c->w->num_requests) continue;
    c->slot_req[slot] = (int32_t)c->next_request++;
    c->order[c->num_running++] = slot;
    budget -= add_rows(c, slot, budget, &rows, samples), seqs++;
  }
  return rows;
}

static void finish(contig_run *c, uint32_t req) {
  for (uint32_t i = 0; i < c->num_running; i++)
    if (c->slot_req[c->order[i]] == (int32_t)req) {
      c->slot_req[c->order[i]] = -1;
      memmove(c->order + i, c->order + i + 1, (c->num_running - i - 1) * sizeof *c->order);
      c->num_running--;
      return;
    }
}

static int step(contig_run *c, double t0) {
  uint32_t samples = 0;
  const uint32_t rows = plan(c, &samples);
  if (rows == 0) return 0;
  c->step_rows = rows;
  c->r->rows += rows;
  double t = cli_now_s();
  if (model_forward(c->m, &c->ws, c->tokens, c->positions, rows, c->sample_rows, samples, attend, c,
                    c->out) != 0) {
    snprintf(c->r->error, sizeof c->r->error, "model_forward failed (out of memory)");
    return -1;
  }
  c->r->model_s += cli_now_s() - t;
  const double ms = (cli_now_s() - t0) * 1e3;
  for (uint32_t s = 0; s < samples; s++)
    if (demo_result_token(c->r, c->w, c->sample_req[s], c->out[s], c->o->stop_token, ms))
      finish(c, c->sample_req[s]);
  /* after the step, as pkv's numbers are: finished sequences already gone */
  uint64_t held = 0;
  for (uint32_t i = 0; i < c->num_running; i++) held += c->computed[c->slot_req[c->order[i]]];
  const double capacity = (double)c->o->num_blocks * c->o->block_size;
  const double reserved = (double)c->num_running * c->o->max_model_len / capacity;
  c->r->reserved_sum += reserved;
  return demo_result_trace(c->r, (double)held / capacity, reserved, c->num_running) == 0 ? 1 : -1;
}

static int alloc(contig_run *c) {
  const uint32_t rows = c->o->step_tokens, n = c->w->num_requests, len = c->o->max_model_len;
  const size_t kv = (size_t)c->num_slots * c->m->c.num_layers * len * c->kvd;
  c->k_cache = malloc(kv * sizeof(float));
  c->v_cache = malloc(kv * sizeof(float));
  c->slot_req = malloc(c->num_slots * sizeof *c->slot_req);
  c->order = malloc(c->num_slots * sizeof *c->order);
  c->computed = calloc(n, sizeof *c->computed);
  c->tokens = malloc(rows * sizeof *c->tokens);
  c->positions = malloc(rows * sizeof *c->positions);
  c->sample_rows = malloc(rows * sizeof *c->sample_rows);
  c->out = malloc(rows * sizeof *c->out);
  c->row_slot = malloc(rows * sizeof *c->row_slot);
  c->sample_req = malloc(rows * sizeof *c->sample_req);
  c->scores = malloc(len * sizeof *c->scores);
  const demo_mixer *x = c->o->mixer;
  if (x && !(c->states = malloc((size_t)c->num_slots * x->num_layers *
                                (x->conv_floats + x->ssm_floats) * sizeof(float))))
    return -1;
  if (!c->k_cache || !c->v_cache || !c->slot_req || !c->order || !c->computed || !c->tokens ||
      !c->positions || !c->sample_rows || !c->out || !c->row_slot || !c->sample_req || !c->scores)
    return -1;
  for (uint32_t s = 0; s < c->num_slots; s++) c->slot_req[s] = -1;
  return 0;
}

int demo_run_contig(const demo_options *o, const demo_workload *w, const model *m, demo_result *r) {
  contig_run c;
  memset(&c, 0, sizeof c);
  c.o = o, c.w = w, c.m = m, c.r = r;
  c.kvd = m->c.num_kv_heads * m->c.head_dim;
  c.num_slots = (uint32_t)((uint64_t)o->num_blocks * o->block_size / o->max_model_len);
  r->concurrency_limit = c.num_slots;
  int rc = 0;
  if (c.num_slots == 0) {
    snprintf(r->error, sizeof r->error,
             "the KV budget (--num-blocks x --block-size) holds no sequence of --max-model-len");
    rc = -1;
  } else if (alloc(&c) != 0) {
    snprintf(r->error, sizeof r->error, "out of memory");
    rc = -1;
  }
  const double t0 = cli_now_s();
  while (rc == 0 && (rc = step(&c, t0)) == 1) rc = 0;
  r->wall_s = cli_now_s() - t0;
  if (rc == 0 && r->num_finished != w->num_requests) {
    snprintf(r->error, sizeof r->error, "stopped with %u of %u requests finished", r->num_finished,
             w->num_requests);
    rc = -1;
  }
  model_workspace_free(&c.ws);
  free(c.k_cache), free(c.v_cache), free(c.slot_req), free(c.order), free(c.computed);
  free(c.tokens), free(c.positions), free(c.sample_rows), free(c.out), free(c.row_slot);
  free(c.sample_req), free(c.scores), free(c.states);
  return rc;
}
