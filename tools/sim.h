/*
 * sim.h - the serving loop of `pkv simulate` (sim_loop.c), shared with its command (simulate.c).
 *
 * A small continuous-batching scheduler written by a host against pkv.h, the way pkv_step will
 * do it inside pkv: FIFO admission when the blocks fit, chunked prefill under a token budget,
 * decode of one token per step, fork after prefill for two-sample requests, preemption of the
 * newest sequence by recompute when an append finds no free block. No attention is computed:
 * this exercises the block manager.
 */
#ifndef PKV_TOOLS_SIM_H
#define PKV_TOOLS_SIM_H

#include <stdint.h>

#include <pkv/pkv.h>

#include "workload.h"

typedef struct sim_config {
  uint32_t step_tokens;      /* token budget of one step (prefill chunks + decodes) */
  uint32_t max_seqs;         /* most running sequences */
  uint32_t watermark_blocks; /* free blocks admission leaves for decodes (vLLM's watermark) */
  int check;                 /* pkv_engine_check and pkv_seq_info after every step */
} sim_config;

/* One pkv sequence of the simulation (a request, or the second sample of a forked one). */
typedef struct sim_seq {
  uint64_t id; /* pkv's sequence id; 0 once released */
  uint32_t request;
  uint32_t sample;       /* 0, or 1 for the forked child */
  uint32_t num_tokens;   /* tokens pkv holds for it (prompt + appended) */
  uint32_t num_computed; /* of which computed (cached included) */
  uint32_t max_computed; /* the most it ever had computed: below it, computing is recompute */
  uint32_t num_sampled;  /* output tokens sampled so far */
  int32_t pending_token; /* sampled but not appended yet (it was preempted); 0 = none */
  int forked;            /* its fork was made (sample 0 of a two-sample request) */
} sim_seq;

typedef struct sim_result {
  uint64_t steps;
  uint64_t prompt_tokens_computed; /* prompt tokens computed the first time */
  uint64_t decode_tokens_computed; /* output tokens computed the first time */
  uint64_t recomputed_tokens;      /* computed again after a preemption */
  uint64_t sampled_tokens;
  uint32_t completed_requests;
  double util_sum, util_peak; /* used blocks / blocks, after each step */
  double running_sum;         /* running sequences, after each step */
  uint32_t running_peak;
  uint64_t busy_steps;  /* steps after which requests still waited: memory or the */
  double busy_util_sum; /* token budget was the limit, not the arrivals */
  double busy_running_sum;
  uint64_t pkv_calls;  /* block-manager calls (stats queries not counted) */
  double pkv_seconds;  /* time inside them */
  double wall_seconds; /* the whole loop */
  pkv_stats stats;     /* the engine's counters at the end */
} sim_result;

/* Runs the workload to completion on e. 0, or -1 after printing why to stderr. */
int sim_run(pkv_engine *e, const sim_workload *w, const sim_config *c, uint64_t seed,
            sim_result *out);

#endif /* PKV_TOOLS_SIM_H */
