/*
 * sim_loop.c - the serving loop of `pkv simulate` (see sim.h).
 *
 * One step: (1) every running sequence with one token left decodes it, (2) running prompts take
 * prefill chunks from what is left of the token budget, (3) waiting requests are admitted FIFO
 * while the budget lasts and pkv_allocate_query says their blocks fit, (4) pkv_batch_begin /
 * pkv_batch_end, (5) each sequence whose tokens are now all computed samples one token: forks
 * first when it is a two-sample request fresh out of prefill, is released when its output is
 * done, else appends the token; an append that finds no free block preempts the newest running
 * sequence (recompute) and puts it at the front of the queue.
 */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct sim {
  pkv_engine *e;
  const sim_workload *w;
  const sim_config *c;
  uint64_t seed;
  sim_result *r;
  sim_seq *seqs; /* every sequence made, [cap] */
  uint32_t num_seqs, cap;
  uint32_t *running; /* indices into seqs, oldest admission first */
  uint32_t num_running;
  int32_t *queue; /* ring of waiting work: >= 0 a new request, < 0 -(seq + 1) preempted */
  uint32_t q_head, q_len;
  uint64_t *batch_ids; /* this step's batch: pkv ids, token counts, indices into seqs */
  uint32_t *batch_counts, *batch_seqs;
  uint32_t batch_len;
  uint32_t *samples_left; /* per request: its sequences not yet finished */
} sim;

static int fail(sim *s, const char *what, pkv_status st) {
  fprintf(stderr, "pkv simulate: %s failed: %s: %s\n", what, pkv_status_string(st),
          pkv_engine_last_error(s->e));
  return -1;
}

/* Every block-manager call is timed and counted for the ops/s figure. */
static void timed(sim *s, double t0) {
  s->r->pkv_seconds += cli_now_s() - t0;
  s->r->pkv_calls++;
}

/* ---------------------------------------------------------------- queue and running list */

static void queue_push_back(sim *s, int32_t v) { s->queue[(s->q_head + s->q_len++) % s->cap] = v; }

static void queue_push_front(sim *s, int32_t v) {
  s->q_head = (s->q_head + s->cap - 1) % s->cap;
  s->queue[s->q_head] = v;
  s->q_len++;
}

static void queue_pop_front(sim *s) {
  s->q_head = (s->q_head + 1) % s->cap;
  s->q_len--;
}

static void running_remove(sim *s, uint32_t seq) {
  for (uint32_t i = 0; i < s->num_running; i++) {
    if (s->running[i] != seq) continue;
    memmove(&s->running[i], &s->running[i + 1], (s->num_running - i - 1) * sizeof *s->running);
    s->num_running--;
    return;
  }
}

static uint64_t free_blocks(sim *s) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(s->e, &st);
  return st.num_free_blocks;
}

/* Preemption by recompute: the sequence keeps its tokens, gives back its blocks, and waits at the
 * front of the queue. */
static int preempt(sim *s, uint32_t seq) {
  sim_seq *q = &s->seqs[seq];
  double t0 = cli_now_s();
  pkv_status st = pkv_preempt(s->e, q->id);
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_preempt", st);
  q->num_computed = 0;
  running_remove(s, seq);
  queue_push_front(s, -(int32_t)seq - 1);
  return 0;
}

/* ---------------------------------------------------------------- admission */

/* A new request: 1 admitted, 0 it does not fit now, -1 error. */
static int admit_request(sim *s, uint32_t req) {
  const sim_request *rq = &s->w->requests[req];
  uint32_t need = 0, cached = 0;
  double t0 = cli_now_s();
  pkv_status st = pkv_allocate_query(s->e, rq->prompt, rq->prompt_len, NULL, &need, NULL);
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_allocate_query", st);
  uint64_t watermark = s->num_running > 0 ? s->c->watermark_blocks : 0;
  if (need + watermark > free_blocks(s)) return 0;
  uint64_t id = 0;
  t0 = cli_now_s();
  st = pkv_allocate(s->e, rq->prompt, rq->prompt_len, NULL, &id, &cached);
  timed(s, t0);
  if (st == PKV_ERR_NO_SPACE) return 0;
  if (st != PKV_OK) return fail(s, "pkv_allocate", st);
  sim_seq *q = &s->seqs[s->num_seqs];
  memset(q, 0, sizeof *q);
  q->id = id;
  q->request = req;
  q->num_tokens = rq->prompt_len;
  q->num_computed = q->max_computed = cached;
  s->running[s->num_running++] = s->num_seqs++;
  return 1;
}

/* A preempted sequence: resume it, then append the token it sampled before it was preempted. */
static int admit_preempted(sim *s, uint32_t seq) {
  sim_seq *q = &s->seqs[seq];
  uint32_t cached = 0;
  double t0 = cli_now_s();
  pkv_status st = pkv_resume(s->e, q->id, &cached);
  timed(s, t0);
  if (st == PKV_ERR_NO_SPACE) return 0;
  if (st != PKV_OK) return fail(s, "pkv_resume", st);
  q->num_computed = cached;
  s->running[s->num_running++] = seq;
  if (q->pending_token == 0) return 1;
  t0 = cli_now_s();
  st = pkv_append(s->e, q->id, &q->pending_token, 1);
  timed(s, t0);
  if (st == PKV_ERR_NO_SPACE) { /* back to where it was: preempted, first in the queue */
    queue_pop_front(s);
    return preempt(s, seq) < 0 ? -1 : 0;
  }
  if (st != PKV_OK) return fail(s, "pkv_append", st);
  q->num_tokens++;
  q->pending_token = 0;
  return 1;
}

static int admit_front(sim *s) {
  int32_t v = s->queue[s->q_head];
  int rc = v >= 0 ? admit_request(s, (uint32_t)v) : admit_preempted(s, (uint32_t)(-v - 1));
  if (rc == 1) queue_pop_front(s);
  return rc;
}

/* ---------------------------------------------------------------- one step */

static void batch_add(sim *s, uint32_t seq, uint32_t n) {
  s->batch_ids[s->batch_len] = s->seqs[seq].id;
  s->batch_counts[s->batch_len] = n;
  s->batch_seqs[s->batch_len++] = seq;
}

/* Decodes first, then prefill chunks, then admissions, under the step's token budget. */
static int plan_step(sim *s) {
  uint32_t budget = s->c->step_tokens;
  s->batch_len = 0;
  for (uint32_t i = 0; i < s->num_running && budget > 0; i++) {
    const sim_seq *q = &s->seqs[s->running[i]];
    if (q->num_tokens - q->num_computed == 1) batch_add(s, s->running[i], 1), budget--;
  }
  for (uint32_t i = 0; i < s->num_running && budget > 0; i++) {
    const sim_seq *q = &s->seqs[s->running[i]];
    uint32_t left = q->num_tokens - q->num_computed;
    if (left <= 1) continue;
    uint32_t n = left < budget ? left : budget;
    batch_add(s, s->running[i], n);
    budget -= n;
  }
  while (budget > 0 && s->q_len > 0 && s->num_running < s->c->max_seqs) {
    int rc = admit_front(s);
    if (rc <= 0) return rc;
    uint32_t seq = s->running[s->num_running - 1];
    uint32_t left = s->seqs[seq].num_tokens - s->seqs[seq].num_computed;
    uint32_t n = left < budget ? left : budget;
    batch_add(s, seq, n);
    budget -= n;
  }
  return 0;
}

/* Counts a batch entry's tokens as prompt, decode, or recompute (below the old high mark). */
static void count_tokens(sim *s, sim_seq *q, uint32_t n) {
  uint32_t from = q->num_computed, to = q->num_computed + n;
  uint32_t fresh = to > q->max_computed ? (from > q->max_computed ? from : q->max_computed) : to;
  uint32_t prompt_len = s->w->requests[q->request].prompt_len;
  uint32_t prompt_end = to < prompt_len ? to : prompt_len;
  uint32_t prompt = prompt_end > fresh ? prompt_end - fresh : 0;
  s->r->recomputed_tokens += fresh - from;
  s->r->prompt_tokens_computed += prompt;
  s->r->decode_tokens_computed += (to - fresh) - prompt;
  q->num_computed = to;
  if (to > q->max_computed) q->max_computed = to;
}

/* A sequence samples one token: released when its output is complete, else it is kept to append. */
static int sample(sim *s, uint32_t seq) {
  sim_seq *q = &s->seqs[seq];
  q->num_sampled++;
  s->r->sampled_tokens++;
  if (q->num_sampled < s->w->requests[q->request].output_len) {
    q->pending_token = sim_sample_token(s->seed, q->request, q->sample, q->num_tokens);
    return 0;
  }
  double t0 = cli_now_s();
  pkv_status st = pkv_release(s->e, q->id);
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_release", st);
  q->id = 0;
  running_remove(s, seq);
  if (--s->samples_left[q->request] == 0) s->r->completed_requests++;
  return 0;
}

/* A two-sample request fresh out of prefill: the child shares every block of the parent. */
static int fork_child(sim *s, uint32_t parent) {
  sim_seq *p = &s->seqs[parent];
  uint64_t child = 0;
  double t0 = cli_now_s();
  pkv_status st = pkv_fork(s->e, p->id, &child);
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_fork", st);
  p->forked = 1;
  sim_seq *c = &s->seqs[s->num_seqs];
  *c = *p;
  c->id = child;
  c->sample = 1;
  s->running[s->num_running++] = s->num_seqs++;
  return sample(s, s->num_seqs - 1);
}

static int finish_step(sim *s) {
  for (uint32_t i = 0; i < s->batch_len; i++) {
    uint32_t seq = s->batch_seqs[i];
    sim_seq *q = &s->seqs[seq];
    count_tokens(s, q, s->batch_counts[i]);
    if (q->num_computed < q->num_tokens) continue; /* prefill goes on next step */
    int two = s->w->requests[q->request].num_samples == 2;
    if (two && q->sample == 0 && !q->forked && fork_child(s, seq) < 0) return -1;
    if (sample(s, seq) < 0) return -1;
  }
  return 0;
}

/* Appends the sampled tokens, oldest sequence first; no free block: preempt the newest. */
static int append_sampled(sim *s) {
  for (uint32_t i = 0; i < s->num_running; i++) {
    uint32_t seq = s->running[i];
    sim_seq *q = &s->seqs[seq];
    while (q->pending_token != 0) {
      double t0 = cli_now_s();
      pkv_status st = pkv_append(s->e, q->id, &q->pending_token, 1);
      timed(s, t0);
      if (st == PKV_OK) {
        q->num_tokens++;
        q->pending_token = 0;
        break;
      }
      if (st != PKV_ERR_NO_SPACE) return fail(s, "pkv_append", st);
      uint32_t victim = s->running[s->num_running - 1];
      if (preempt(s, victim) < 0) return -1;
      if (victim == seq) break; /* it was the newest itself: its token waits in the queue */
    }
  }
  return 0;
}

static int run_batch(sim *s) {
  pkv_batch *b = NULL;
  double t0 = cli_now_s();
  pkv_status st = pkv_batch_begin(s->e, s->batch_ids, s->batch_counts, s->batch_len, &b);
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_batch_begin", st);
  t0 = cli_now_s();
  st = pkv_batch_end(b); /* the forward step would run between these two */
  timed(s, t0);
  if (st != PKV_OK) return fail(s, "pkv_batch_end", st);
  return 0;
}

/* Utilization and concurrency after the step; with --check, pkv's invariants and our shadow. */
static int record_step(sim *s) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_status rc = pkv_engine_stats(s->e, &st);
  if (rc != PKV_OK) return fail(s, "pkv_engine_stats", rc);
  double util = st.num_blocks > 0 ? (double)st.num_used_blocks / (double)st.num_blocks : 0.0;
  s->r->util_sum += util;
  if (util > s->r->util_peak) s->r->util_peak = util;
  s->r->running_sum += s->num_running;
  if (s->num_running > s->r->running_peak) s->r->running_peak = s->num_running;
  if (s->q_len > 0) {
    s->r->busy_steps++;
    s->r->busy_util_sum += util;
    s->r->busy_running_sum += s->num_running;
  }
  if (!s->c->check) return 0;
  rc = pkv_engine_check(s->e);
  if (rc != PKV_OK) return fail(s, "pkv_engine_check", rc);
  for (uint32_t i = 0; i < s->num_running; i++) {
    const sim_seq *q = &s->seqs[s->running[i]];
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    rc = pkv_seq_info(s->e, q->id, &info);
    if (rc != PKV_OK) return fail(s, "pkv_seq_info", rc);
    if (info.num_tokens != q->num_tokens || info.num_computed_tokens != q->num_computed ||
        info.is_preempted || info.in_batch) {
      fprintf(stderr,
              "pkv simulate: --check: sequence %llu: pkv says %u tokens, %u computed, preempted %u,"
              " in batch %u; the host expects %u tokens, %u computed, running\n",
              (unsigned long long)q->id, info.num_tokens, info.num_computed_tokens,
              info.is_preempted, info.in_batch, q->num_tokens, q->num_computed);
      return -1;
    }
  }
  return 0;
}

static int sim_alloc(sim *s, const sim_workload *w) {
  s->cap = 2 * w->num_requests + 1;
  s->seqs = calloc(s->cap, sizeof *s->seqs);
  s->running = calloc(s->cap, sizeof *s->running);
  s->queue = calloc(s->cap, sizeof *s->queue);
  s->batch_ids = calloc(s->cap, sizeof *s->batch_ids);
  s->batch_counts = calloc(s->cap, sizeof *s->batch_counts);
  s->batch_seqs = calloc(s->cap, sizeof *s->batch_seqs);
  s->samples_left = calloc(w->num_requests + 1, sizeof *s->samples_left);
  if (s->seqs && s->running && s->queue && s->batch_ids && s->batch_counts && s->batch_seqs &&
      s->samples_left)
    return 0;
  fprintf(stderr, "pkv simulate: out of memory\n");
  return -1;
}

static void sim_free(sim *s) {
  free(s->seqs);
  free(s->running);
  free(s->queue);
  free(s->batch_ids);
  free(s->batch_counts);
  free(s->batch_seqs);
  free(s->samples_left);
}

static int sim_loop(sim *s) {
  uint64_t max_steps = 64 * (s->w->prompt_tokens + s->w->output_tokens) + 1000;
  while (s->q_len > 0 || s->num_running > 0) {
    if (plan_step(s) < 0) return -1;
    if (s->batch_len == 0) {
      fprintf(stderr,
              "pkv simulate: stuck: nothing runs and the next request does not fit in "
              "%llu free blocks (is the pool smaller than one sequence?)\n",
              (unsigned long long)free_blocks(s));
      return -1;
    }
    if (run_batch(s) < 0 || finish_step(s) < 0 || append_sampled(s) < 0 || record_step(s) < 0)
      return -1;
    if (++s->r->steps > max_steps) {
      fprintf(stderr, "pkv simulate: no end after %llu steps (a bug)\n",
              (unsigned long long)max_steps);
      return -1;
    }
  }
  return 0;
}

int sim_run(pkv_engine *e, const sim_workload *w, const sim_config *c, uint64_t seed,
            sim_result *out) {
  sim s;
  memset(&s, 0, sizeof s);
  memset(out, 0, sizeof *out);
  s.e = e;
  s.w = w;
  s.c = c;
  s.seed = seed;
  s.r = out;
  int rc = sim_alloc(&s, w);
  for (uint32_t i = 0; rc == 0 && i < w->num_requests; i++) {
    s.samples_left[i] = w->requests[i].num_samples;
    queue_push_back(&s, (int32_t)i);
  }
  double t0 = cli_now_s();
  if (rc == 0) rc = sim_loop(&s);
  out->wall_seconds = cli_now_s() - t0;
  out->stats.struct_size = sizeof out->stats;
  pkv_engine_stats(e, &out->stats);
  sim_free(&s);
  return rc;
}
