/*
 * demo_workload.c - `pkv demo`'s synthetic multi-tenant workload, and the bookkeeping both runs
 * share (demo.h).
 *
 * Each tenant has a cache salt and a system prompt (64-192 tokens); a request is one of them
 * (tenant 0 the busiest) followed by a user part, long-tailed (log-normal, mean ~48 tokens), and
 * asks for a long-tailed number of new tokens (mean ~64). Everything comes from the seed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "demo.h"

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) {
  return ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
}

/* Log-normal with the given mean (sigma 0.8), clamped to [lo, hi]. */
static uint32_t long_tailed(uint64_t *s, double mean, uint32_t lo, uint32_t hi) {
  const double sigma = 0.8, mu = log(mean) - sigma * sigma / 2;
  const double z = sqrt(-2.0 * log(uniform(s))) * cos(6.283185307179586 * uniform(s));
  double x = exp(mu + sigma * z);
  if (x < lo) x = lo;
  if (x > hi) x = hi;
  return (uint32_t)x;
}

/* A token of ordinary text: never the stop token, never 0. */
static int32_t text_token(uint64_t *s, uint32_t vocab, int32_t stop) {
  int32_t t;
  do t = (int32_t)(1 + next_u64(s) % (vocab - 1));
  while (t == stop);
  return t;
}

int demo_workload_make(const demo_options *o, uint32_t vocab, demo_workload *w) {
  memset(w, 0, sizeof *w);
  uint64_t rng = o->seed * 0x100000001b3ull + 17;
  int32_t *system[DEMO_MAX_TENANTS] = {0};
  uint32_t system_len[DEMO_MAX_TENANTS];
  w->num_tenants = o->num_tenants;
  w->requests = calloc(o->num_requests, sizeof *w->requests);
  int ok = w->requests != NULL;
  for (uint32_t t = 0; t < w->num_tenants && ok; t++) {
    snprintf(w->salts[t], sizeof w->salts[t], "tenant-%u", t);
    system_len[t] = 64 + (uint32_t)(next_u64(&rng) % 129);
    ok = (system[t] = malloc(system_len[t] * sizeof(int32_t))) != NULL;
    for (uint32_t i = 0; ok && i < system_len[t]; i++)
      system[t][i] = text_token(&rng, vocab, o->stop_token);
  }
  const uint32_t room =
      o->max_model_len / 2; /* user part and output each get half of what is left */
  for (uint32_t i = 0; i < o->num_requests && ok; i++, w->num_requests++) {
    demo_request *r = &w->requests[i];
    double pick = uniform(&rng); /* tenant t with weight 1 / (t + 1) */
    double total = 0, acc = 0;
    for (uint32_t t = 0; t < w->num_tenants; t++) total += 1.0 / (t + 1);
    for (r->tenant = 0; r->tenant + 1 < w->num_tenants; r->tenant++)
      if ((acc += 1.0 / (r->tenant + 1) / total) > pick) break;
    r->system_len = system_len[r->tenant] < room ? system_len[r->tenant] : room / 2;
    const uint32_t left = o->max_model_len - r->system_len;
    const uint32_t user = long_tailed(&rng, 48, 4, left / 2);
    r->max_new_tokens = long_tailed(&rng, 64, 4, left - user);
    r->prompt_len = r->system_len + user;
    ok = (r->prompt = malloc(r->prompt_len * sizeof(int32_t))) != NULL;
    if (!ok) break;
    memcpy(r->prompt, system[r->tenant], r->system_len * sizeof(int32_t));
    for (uint32_t k = r->system_len; k < r->prompt_len; k++)
      r->prompt[k] = text_token(&rng, vocab, o->stop_token);
    w->prompt_tokens += r->prompt_len;
    w->max_new_tokens += r->max_new_tokens;
  }
  for (uint32_t t = 0; t < DEMO_MAX_TENANTS; t++) free(system[t]);
  if (ok) return 0;
  demo_workload_free(w);
  return -1;
}

void demo_workload_free(demo_workload *w) {
  for (uint32_t i = 0; w->requests && i < w->num_requests; i++) free(w->requests[i].prompt);
  free(w->requests);
  memset(w, 0, sizeof *w);
}

int32_t demo_token_at(const demo_workload *w, const demo_result *r, uint32_t i, uint32_t pos) {
  const demo_request *q = &w->requests[i];
  return pos < q->prompt_len ? q->prompt[pos] : r->generated[i][pos - q->prompt_len];
}

int demo_result_init(demo_result *r, const char *name, const demo_workload *w) {
  memset(r, 0, sizeof *r);
  r->name = name;
  const uint32_t n = w->num_requests;
  r->generated = calloc(n, sizeof *r->generated);
  r->num_generated = calloc(n, sizeof *r->num_generated);
  r->finish = calloc(n, sizeof *r->finish);
  r->ttft_steps = calloc(n, sizeof *r->ttft_steps);
  r->ttft_ms = calloc(n, sizeof *r->ttft_ms);
  r->margin = calloc(n, sizeof *r->margin);
  int ok =
      r->generated && r->num_generated && r->finish && r->ttft_steps && r->ttft_ms && r->margin;
  for (uint32_t i = 0; ok && i < n; i++)
    ok = (r->generated[i] = malloc(w->requests[i].max_new_tokens * sizeof(int32_t))) != NULL &&
         (r->margin[i] = malloc(w->requests[i].max_new_tokens * sizeof(float))) != NULL;
  if (ok) return 0;
  demo_result_free(r, w);
  return -1;
}

void demo_result_free(demo_result *r, const demo_workload *w) {
  for (uint32_t i = 0; r->generated && i < w->num_requests; i++) free(r->generated[i]);
  for (uint32_t i = 0; r->margin && i < w->num_requests; i++) free(r->margin[i]);
  free(r->margin);
  free(r->generated), free(r->num_generated), free(r->finish), free(r->ttft_steps),
      free(r->ttft_ms);
  free(r->trace_util), free(r->trace_reserved), free(r->trace_running);
  memset(r, 0, sizeof *r);
}

uint32_t demo_result_token(demo_result *r, const demo_workload *w, uint32_t i, int32_t token,
                           int32_t stop_token, double ms) {
  if (r->num_generated[i] == 0) {
    r->ttft_steps[i] = (uint32_t)r->steps + 1; /* this step included */
    r->ttft_ms[i] = ms;
  }
  r->generated[i][r->num_generated[i]++] = token;
  r->generated_tokens++;
  uint32_t finish = token == stop_token                                    ? PKV_FINISH_STOP_TOKEN
                    : r->num_generated[i] == w->requests[i].max_new_tokens ? PKV_FINISH_LENGTH
                                                                           : PKV_FINISH_NONE;
  if (finish) {
    r->finish[i] = finish;
    r->num_finished++;
  }
  return finish;
}

int demo_result_trace(demo_result *r, double util, double reserved, uint32_t running) {
  if (r->steps >= r->trace_cap) {
    uint64_t cap = r->trace_cap ? 2 * r->trace_cap : 1024;
    float *u = realloc(r->trace_util, cap * sizeof *u);
    if (u) r->trace_util = u;
    float *h = realloc(r->trace_reserved, cap * sizeof *h);
    if (h) r->trace_reserved = h;
    uint32_t *n = realloc(r->trace_running, cap * sizeof *n);
    if (n) r->trace_running = n;
    if (!u || !h || !n) return -1;
    r->trace_cap = cap;
  }
  r->trace_util[r->steps] = (float)util;
  r->trace_reserved[r->steps] = (float)reserved;
  r->trace_running[r->steps] = running;
  r->steps++;
  r->util_sum += util;
  if (util > r->util_peak) r->util_peak = util;
  r->sum_running += running;
  if (running > r->max_running) r->max_running = running;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void demo_result_ttft(const demo_result *r, uint32_t n, int ms, double out[3]) {
  double *v = malloc(n * sizeof *v), sum = 0;
  if (!v) {
    out[0] = out[1] = out[2] = 0;
    return;
  }
  for (uint32_t i = 0; i < n; i++) sum += v[i] = ms ? r->ttft_ms[i] : r->ttft_steps[i];
  qsort(v, n, sizeof *v, cmp_double);
  out[0] = sum / n, out[1] = v[(n - 1) / 2], out[2] = v[(uint32_t)(0.9 * (n - 1) + 0.5)];
  free(v);
}

uint32_t demo_result_differ(const demo_workload *w, const demo_result *a, const demo_result *b,
                            uint32_t *first, uint32_t *at) {
  uint32_t differ = 0;
  for (uint32_t i = 0; i < w->num_requests; i++) {
    uint32_t k = 0, n = a->num_generated[i];
    while (k < n && k < b->num_generated[i] && a->generated[i][k] == b->generated[i][k]) k++;
    if (k == n && n == b->num_generated[i]) continue;
    if (differ++ == 0) *first = i, *at = k;
  }
  return differ;
}
