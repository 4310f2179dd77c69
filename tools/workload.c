/*
 * workload.c - the synthetic serving workload of `pkv simulate` (see workload.h).
 */
#include "workload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { VOCAB_SIZE = 32000 };
static const double TWO_PI = 6.283185307179586;

/* splitmix64: small, fast, and the same sequence on every platform. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

static uint32_t rng_range(uint64_t *s, uint32_t lo, uint32_t hi) { /* [lo, hi] */
  return lo + (uint32_t)(rng_uniform(s) * ((double)hi - lo + 1.0));
}

/* Log-normal with the given mean: most values near the median, a long tail of big ones. */
static double rng_lognormal(uint64_t *s, double mean, double sigma) {
  double u1 = 1.0 - rng_uniform(s), u2 = rng_uniform(s); /* u1 in (0, 1] */
  double normal = sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
  return exp(log(mean) - 0.5 * sigma * sigma + sigma * normal);
}

static uint32_t clamp_u32(double v, uint32_t lo, uint32_t hi) {
  if (!(v >= lo)) return lo; /* NaN included */
  if (v > hi) return hi;
  return (uint32_t)v;
}

static int32_t rng_token(uint64_t *s) { return 1 + (int32_t)(rng_next(s) % (VOCAB_SIZE - 1)); }

int32_t sim_sample_token(uint64_t seed, uint32_t request, uint32_t sample, uint32_t position) {
  uint64_t s = seed ^ ((uint64_t)request << 32) ^ ((uint64_t)sample << 24) ^ position;
  return rng_token(&s);
}

void sim_workload_params_default(sim_workload_params *p) {
  memset(p, 0, sizeof *p);
  p->num_requests = 400;
  p->seed = 1;
  p->num_system_prompts = 4;
  p->system_min_tokens = 500;
  p->system_max_tokens = 2000;
  p->shared_fraction = 0.8;
  p->mean_prompt_tokens = 600;
  p->mean_output_tokens = 250;
  p->fork_fraction = 0.1;
  p->max_model_len = 8192;
}

/* Which system prompt a request uses: Zipf-like, prompt k with weight 1/(k+1). */
static int32_t pick_system_prompt(uint64_t *s, uint32_t n) {
  double total = 0.0;
  for (uint32_t k = 0; k < n; k++) total += 1.0 / (k + 1.0);
  double x = rng_uniform(s) * total;
  for (uint32_t k = 0; k < n; k++) {
    x -= 1.0 / (k + 1.0);
    if (x < 0.0) return (int32_t)k;
  }
  return (int32_t)n - 1;
}

/* Draws one request's shape; fits system + user + output into max_model_len. */
static void draw_request(const sim_workload_params *p, uint64_t *s, const uint32_t *system_lens,
                         sim_request *r, uint32_t *user_len) {
  uint32_t limit = p->max_model_len;
  r->system_id = -1;
  r->system_len = 0;
  if (p->num_system_prompts > 0 && rng_uniform(s) < p->shared_fraction) {
    int32_t k = pick_system_prompt(s, p->num_system_prompts);
    if (system_lens[k] <= limit / 2) { /* a system prompt never takes more than half */
      r->system_id = k;
      r->system_len = system_lens[k];
    }
  }
  uint32_t room = limit - r->system_len; /* >= limit / 2 >= 1 */
  uint32_t user = clamp_u32(rng_lognormal(s, p->mean_prompt_tokens, 1.0), 8, room);
  uint32_t out = clamp_u32(rng_lognormal(s, p->mean_output_tokens, 0.9), 1, room);
  if (user >= room) user = room > 1 ? room - 1 : 1;
  if (user + out > room) out = room - user;
  if (out == 0) out = 1, user = room - 1;
  *user_len = user;
  r->prompt_len = r->system_len + user;
  r->output_len = out;
  r->num_samples = rng_uniform(s) < p->fork_fraction ? 2 : 1;
}

int sim_workload_make(const sim_workload_params *p, sim_workload *w) {
  memset(w, 0, sizeof *w);
  uint64_t s = p->seed;
  uint32_t nsys = p->num_system_prompts;
  uint32_t *system_lens = calloc(nsys + 1, sizeof *system_lens);
  int32_t **systems = calloc(nsys + 1, sizeof *systems);
  w->requests = calloc(p->num_requests + 1, sizeof *w->requests);
  int ok = system_lens != NULL && systems != NULL && w->requests != NULL;
  for (uint32_t k = 0; ok && k < nsys; k++) {
    system_lens[k] = rng_range(&s, p->system_min_tokens, p->system_max_tokens);
    systems[k] = malloc(((size_t)system_lens[k] + 1) * sizeof(int32_t));
    ok = systems[k] != NULL;
    for (uint32_t t = 0; ok && t < system_lens[k]; t++) systems[k][t] = rng_token(&s);
  }
  for (uint32_t i = 0; ok && i < p->num_requests; i++) {
    sim_request *r = &w->requests[i];
    uint32_t user_len = 0;
    draw_request(p, &s, system_lens, r, &user_len);
    r->prompt = malloc((size_t)r->prompt_len * sizeof(int32_t));
    if (r->prompt == NULL) {
      ok = 0;
      break;
    }
    w->num_requests = i + 1;
    if (r->system_len > 0)
      memcpy(r->prompt, systems[r->system_id], r->system_len * sizeof(int32_t));
    for (uint32_t t = r->system_len; t < r->prompt_len; t++) r->prompt[t] = rng_token(&s);
    w->prompt_tokens += r->prompt_len;
    w->output_tokens += (uint64_t)r->output_len * r->num_samples;
    w->num_forked += r->num_samples == 2;
  }
  for (uint32_t k = 0; systems != NULL && k < nsys; k++) free(systems[k]);
  free(systems);
  free(system_lens);
  if (!ok) sim_workload_free(w);
  return ok ? 0 : -1;
}

void sim_workload_free(sim_workload *w) {
  for (uint32_t i = 0; w->requests != NULL && i < w->num_requests; i++) free(w->requests[i].prompt);
  free(w->requests);
  memset(w, 0, sizeof *w);
}
