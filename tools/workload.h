/*
 * workload.h - a synthetic serving workload for `pkv simulate`, deterministic from a seed.
 *
 * Shaped like chat traffic: a few shared system prompts (most requests start with one of them,
 * the popular ones more often), then a user prompt and an output whose lengths are long-tailed
 * (log-normal, clamped), and a fraction of requests that ask for two parallel samples (the host
 * forks the sequence after its prefill, so the two share the prompt's blocks).
 */
#ifndef PKV_TOOLS_WORKLOAD_H
#define PKV_TOOLS_WORKLOAD_H

#include <stdint.h>

typedef struct sim_workload_params {
  uint32_t num_requests;       /* default 400 */
  uint64_t seed;               /* default 1 */
  uint32_t num_system_prompts; /* default 4 */
  uint32_t system_min_tokens;  /* default 500 */
  uint32_t system_max_tokens;  /* default 2000 */
  double shared_fraction;      /* requests that start with a system prompt; default 0.8 */
  double mean_prompt_tokens;   /* the user part, log-normal; default 600 */
  double mean_output_tokens;   /* log-normal; default 250 */
  double fork_fraction;        /* requests with two samples; default 0.1 */
  uint32_t max_model_len;      /* prompt + output never exceed it */
} sim_workload_params;

typedef struct sim_request {
  int32_t *prompt; /* [prompt_len]: system prompt (if any) then user prompt */
  uint32_t prompt_len;
  uint32_t system_len;  /* leading tokens that are a shared system prompt; 0 if none */
  int32_t system_id;    /* which system prompt, -1 if none */
  uint32_t output_len;  /* tokens to generate, >= 1 */
  uint32_t num_samples; /* 1, or 2: forked after prefill */
} sim_request;

typedef struct sim_workload {
  sim_request *requests; /* [num_requests], in arrival order */
  uint32_t num_requests;
  uint64_t prompt_tokens; /* sums over the requests */
  uint64_t output_tokens; /* per sample */
  uint32_t num_forked;    /* requests with two samples */
} sim_workload;

void sim_workload_params_default(sim_workload_params *p);

/* Builds the workload; 0, or -1 when out of memory (w then holds nothing). */
int sim_workload_make(const sim_workload_params *p, sim_workload *w);
void sim_workload_free(sim_workload *w);

/* The fake "sampled" token of a sequence at a position: deterministic, never 0. */
int32_t sim_sample_token(uint64_t seed, uint32_t request, uint32_t sample, uint32_t position);

#endif /* PKV_TOOLS_WORKLOAD_H */
