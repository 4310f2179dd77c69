/*
 * demo.h - what the parts of `pkv demo` share: options, the synthetic multi-tenant workload, and
 * one run's result (tokens, time to first token, a per-step trace for the plot).
 *
 *   demo.c          the command: flags, the two runs, the report
 *   demo_workload.c the workload and the result bookkeeping
 *   demo_paged.c    serving through pkv: pkv_submit / pkv_step / pkv_attention / pkv_commit
 *   demo_contig.c   the baseline: each sequence preallocates max_model_len tokens of KV
 *   demo_windows.c  --windows: per-layer windows, the pool in the same bytes, full attention's run
 *   demo_plot.c     the SVG: per run, KV reserved and used and running sequences per step
 *   demo_store.c    --store: a cold and a warm run in two processes sharing a store
 *   demo_hybrid.c   --hybrid: recurrent layers, runs by checkpoint policy against contiguous
 *   demo_mixer.c    --hybrid's recurrent layers, on pkv's state slots or the baseline's own
 *   demo_retention.c --retention: tenants' system prompts through a burst, LRU against retention
 *   demo_cuda.c     --device cuda: a CUDA engine with cuBLAS GEMMs against the CPU engine
 *   demo_disagg.c   --disaggregated: prefill and decode processes, KV moved by pkv's UCX agent
 */
#ifndef PKV_TOOLS_DEMO_H
#define PKV_TOOLS_DEMO_H

#include <stdint.h>

#include <pkv/pkv.h>

#include "model.h"

enum { DEMO_MAX_TENANTS = 16 };
enum { DEMO_LONG_PROMPT_OUT = 4 }; /* --long-prompt's request: tokens generated after it */
enum {
  DEMO_ATTENTION_INTERVAL = 4, /* --hybrid: layer l is attention when l % 4 == 3 */
  DEMO_CONV_KERNEL = 4
}; /* its recurrent layers' causal conv, in tokens */

/* --hybrid's recurrent layers (demo_mixer.c): weights, and the layout of one layer's state. */
typedef struct demo_mixer {
  uint32_t num_layers, q_heads, kv_heads, head_dim;
  uint32_t conv_dim;                /* q | k | v channels: q_dim + 2 * kv_dim */
  uint32_t conv_floats, ssm_floats; /* a layer's state parts: conv_dim x 3, kv_heads x D x D */
  uint8_t is_state[16];             /* [layer] 1: recurrent, 0: attention */
  float *conv_w;                    /* [layer][conv_dim][DEMO_CONV_KERNEL] */
  float *gate_w;                    /* [layer][kv_heads][head_dim] */
  float *scratch;                   /* [conv_dim]: the demo runs one thread */
} demo_mixer;

/* Where pkv keeps the states: slot s's part i of layer l at base + s * slot_bytes +
 * offset[l][i] (pkv_pool_info, pkv_layer_info). */
typedef struct demo_state_region {
  void *base;
  uint64_t slot_bytes;
  uint32_t num_slots;
  uint64_t offset[16][2];
} demo_state_region;

typedef struct demo_options {
  uint32_t num_requests, num_tenants, num_layers;
  uint64_t seed;
  uint32_t block_size, num_blocks, max_num_seqs, step_tokens, max_model_len;
  int no_prefix_caching;
  uint64_t host_cache;      /* bytes of the host tier of the third run; 0 = no third run */
  const char *preemption;   /* its preemption mode: "swap" (default) or "auto" */
  uint32_t preemption_mode; /* PKV_PREEMPT_* of a paged run (set per run by demo.c) */
  const char *plot;
  int32_t stop_token;
  const char *store; /* --store: a directory or redis://HOST[:PORT]; NULL = no store runs */
  const pkv_store_params *store_params; /* a paged run's store (set per run by demo_store.c) */
  const char *windows; /* --windows: per-layer sliding windows, the list repeated over layers */
  uint32_t layer_windows[16]; /* parsed from it; all 0 = full attention */
  uint32_t long_prompt;       /* --long-prompt: one request of this many tokens (0: none) */
  int full_attention;         /* a paged run that ignores layer_windows (the comparison run) */
  uint32_t paged_blocks; /* a paged run's pool: num_blocks scaled to the same bytes (set per run) */
  int hybrid;            /* --hybrid: recurrent layers (demo_hybrid.c) */
  const char *state_checkpoints; /* --state-checkpoints: one policy; NULL = each */
  uint32_t checkpoint_interval;  /* --checkpoint-interval: EVERY's blocks */
  uint32_t checkpoint_slots;     /* --checkpoint-slots: 0 = pkv's default (max_num_seqs) */
  uint32_t checkpoint_policy;    /* PKV_STATE_CHECKPOINT_* of a paged run (set per run) */
  demo_mixer *mixer;             /* --hybrid: the recurrent layers of both designs (set by it) */
  int retention;                 /* --retention (demo_retention.c) */
  int disaggregated;             /* --disaggregated (demo_disagg.c) */
  uint32_t burst;                /* --burst: its unique prompts; 0 = twice the pool's tokens */
  uint32_t retention_ms;         /* --retention-ms: the priority runs' cache_retention_ms */
  /* A paged run calls this after each pkv_commit (no batch open), when set: --retention's pins
   * and prefix priorities need the system prompts' blocks to exist. 0, or -1 with error set. */
  int (*on_step)(void *ctx, pkv_engine *e, const uint64_t *seqs, char *error, size_t cap);
  /* the same, called as soon as pkv_step planned a batch (its slots reserved, still open) */
  int (*on_batch)(void *ctx, pkv_engine *e, const uint64_t *seqs, char *error, size_t cap);
  void *on_step_ctx;
  const char *device;    /* --device: "cpu" (default) or "cuda" */
  int32_t engine_device; /* a paged run's PKV_DEVICE_* (set per run; 0 = CPU) */
  void *cuda_stream;     /* a CUDA run's stream: its engine's (pkv_engine_set_stream), cuBLAS's */
  const model_gemm_backend *gemm_backend; /* a paged run's GEMMs (set per run; NULL = host's) */
} demo_options;

typedef struct demo_request {
  int32_t *prompt; /* [prompt_len]: the tenant's system prompt, then the user's part */
  uint32_t prompt_len, system_len, tenant, max_new_tokens;
  int32_t cache_priority; /* its pkv_request_params.cache_priority (--retention); 0 = plain LRU */
  uint32_t cache_retention_ms; /* and cache_retention_ms: 0 = the priority never decays */
} demo_request;

typedef struct demo_workload {
  demo_request *requests; /* [num_requests], all arriving at step 0 */
  uint32_t num_requests, num_tenants;
  char salts[DEMO_MAX_TENANTS][16]; /* "tenant-N": each tenant's cache salt */
  uint64_t prompt_tokens, max_new_tokens;
} demo_workload;

/* One run of the workload through one KV design. */
typedef struct demo_result {
  const char *name;
  double wall_s, model_s, attn_s; /* all; in model_forward; in its attention */
  uint64_t steps, rows;           /* steps; forward rows (prompt, recomputed and decode tokens) */
  int32_t **generated;            /* [request][max_new_tokens] */
  float **margin; /* [request][max_new_tokens] each greedy token's logit over the runner-up's */
  uint32_t *num_generated; /* [request] */
  uint32_t *finish;        /* [request] PKV_FINISH_* */
  uint32_t *ttft_steps;    /* [request] steps until its first token, that step included */
  double *ttft_ms;         /* [request] */
  uint32_t num_finished, max_running;
  uint64_t sum_running;       /* over steps, for the mean */
  double util_sum, util_peak; /* KV utilization per step: sum (for the mean) and peak */
  double reserved_sum;        /* contiguous: share of the budget reserved by running sequences */
  uint64_t preemptions, hit_tokens, query_tokens, generated_tokens;
  uint64_t swap_preemptions, swapped_out_blocks, swapped_in_blocks, host_blocks; /* host tier */
  uint64_t device_hit_tokens, host_hit_tokens, offloaded_blocks, loaded_blocks;  /* hits by tier */
  uint64_t store_hit_tokens, store_puts, store_hits, store_misses; /* the store tier */
  uint64_t store_bad;         /* blocks the store held but that failed a check or an error lost */
  uint64_t store_put_lost;    /* blocks not written: the write queue was full, or a store error */
  double close_s;             /* pkv_engine_destroy: with a store, the queued writes finish there */
  uint32_t concurrency_limit; /* the contiguous design's slots; 0 for pkv */
  /* --hybrid: pkv_stats's checkpoint counters, pkv_kv_budget's state terms */
  uint64_t ckpt_taken, ckpt_evicted, ckpt_held, state_restores, state_fallback_tokens;
  uint64_t ckpt_slots, state_bytes_per_seq, block_bytes;
  /* --retention: pkv_stats's evictions by priority (low, normal, high, highest), pinned blocks
   * at the end; per request, prompt tokens the prefix cache served at its last admission (NULL
   * unless the caller allocated it) */
  uint64_t evictions[4], pinned_blocks;
  uint32_t *cached_tokens;
  float *trace_util;       /* [steps] KV utilization (live tokens' share), for the plot */
  float *trace_reserved;   /* [steps] the budget's share reserved for running sequences */
  uint32_t *trace_running; /* [steps] running sequences */
  uint64_t trace_cap;
  char error[256]; /* set when the run failed */
} demo_result;

/* One row of a two-run table: the label, then each run's cell. */
#define DEMO_ROW(label, fmt_a, a, fmt_b, b)                 \
  do {                                                      \
    char cell_a_[48], cell_b_[48];                          \
    snprintf(cell_a_, sizeof cell_a_, fmt_a, a);            \
    snprintf(cell_b_, sizeof cell_b_, fmt_b, b);            \
    printf("  %-34s %20s %20s\n", label, cell_a_, cell_b_); \
  } while (0)

static inline double demo_per_s(double x, double s) { return s > 0 ? x / s : 0; }

/* demo_workload.c */
int demo_workload_make(const demo_options *o, uint32_t vocab, demo_workload *w);
void demo_workload_free(demo_workload *w);
/* The token at position pos of request i: its prompt, then what r generated. */
int32_t demo_token_at(const demo_workload *w, const demo_result *r, uint32_t i, uint32_t pos);
int demo_result_init(demo_result *r, const char *name, const demo_workload *w);
void demo_result_free(demo_result *r, const demo_workload *w);
/* Records request i's sampled token at the end of step (1-based) and now_s into the run; returns
 * the finish reason it causes (PKV_FINISH_NONE while it goes on). */
uint32_t demo_result_token(demo_result *r, const demo_workload *w, uint32_t i, int32_t token,
                           int32_t stop_token, double ms);
/* Appends one step's KV utilization, reserved share and running sequences to the trace. */
int demo_result_trace(demo_result *r, double util, double reserved, uint32_t running);
/* Mean, p50 and p90 of the n requests' first-token times, in steps (ms = 0) or ms (1). */
void demo_result_ttft(const demo_result *r, uint32_t n, int ms, double out[3]);
/* Requests whose generated tokens differ between a and b; the first such request and the index
 * of its first differing token into *first and *at (untouched when none differ). */
uint32_t demo_result_differ(const demo_workload *w, const demo_result *a, const demo_result *b,
                            uint32_t *first, uint32_t *at);

/* demo_paged.c: a paged run's engine params, from the flags and the model's shape. */
void demo_engine_params(const demo_options *o, const model *m, pkv_engine_params *ep);
/* demo_paged.c, demo_contig.c: 0, or -1 with r->error set. */
int demo_run_paged(const demo_options *o, const demo_workload *w, const model *m, demo_result *r);
/* pkv's message msg with the engine fields the demo sets from flags named as those flags, into
 * buf[cap]; returns buf. */
const char *demo_in_flag_terms(const demo_options *o, const char *msg, char *buf, size_t cap);
int demo_run_contig(const demo_options *o, const demo_workload *w, const model *m, demo_result *r);

/* demo_store.c. Whether spec is a --store value the demo can use: NULL, or why not. */
const char *demo_store_check(const char *spec);
/* The cold and the warm run through the store, each in a process of its own, and their report;
 * 0, or -1 (message printed). */
int demo_store_runs(const demo_options *o, const demo_workload *w, const model *m);

/* demo_windows.c. --windows into o->layer_windows: 0, or -1 (malformed). */
int demo_parse_windows(demo_options *o);
/* The windowed run's pool: as many blocks as num_blocks' bytes hold (o->paged_blocks); prints
 * the groups. 0, or -1 (message printed). */
int demo_windowed_pool(demo_options *o, const model *m);
/* The same model with full attention in the same memory, against the windowed run p; 0, or -1. */
/* --long-prompt: one request of that many prompt tokens through the windowed engine; prints each
 * KV group's peak of held blocks during its prefill (per chunk) against the whole prompt. */
int demo_print_long_prompt(const demo_options *o, const model *m);
int demo_print_full_attention(const demo_options *o, const demo_workload *w, const model *m,
                              const demo_result *p);

/* demo_mixer.c. Weights from the model's seed; 0, or -1 (out of memory). */
int demo_mixer_init(demo_mixer *x, const model *m);
void demo_mixer_free(demo_mixer *x);
uint32_t demo_mixer_num_state_layers(const demo_mixer *x);
/* specs[num_layers]: PKV_LAYER_STATE specs of the recurrent layers, zeros elsewhere. */
void demo_mixer_specs(const demo_mixer *x, pkv_layer_spec *specs);
/* One sequence's rows of recurrent layer `layer`, in order: q [rows][q_heads][D], k, v
 * [rows][kv_heads][D] -> out like q; conv and ssm its state parts, updated in place; fresh: the
 * rows start at position 0, so the state starts from zeros. */
void demo_mixer_rows(demo_mixer *x, uint32_t layer, const float *q, const float *k, const float *v,
                     uint32_t rows, int fresh, float *conv, float *ssm, float *out);
/* pkv's state region of engine e, checked against x's layout; 0, or -1. */
int demo_state_region_get(pkv_engine *e, const demo_mixer *x, demo_state_region *sr);
/* Every sequence of batch view v through recurrent layer `layer` on its state slot
 * (v->state_slots); 0, or -1 with error[cap] set. */
int demo_mixer_batch(demo_mixer *x, uint32_t layer, const pkv_batch_view *v,
                     const demo_state_region *sr, const float *q, const float *k, const float *vv,
                     float *out, char *error, size_t cap);

/* demo_hybrid.c. Why the options cannot run --hybrid (a message naming the flag), or NULL; sets
 * --hybrid's defaults (--layers 4, --checkpoint-interval 4, unless the flag was seen). */
const char *demo_hybrid_check(demo_options *o, int layers_seen, int interval_seen);
/* The runs by checkpoint policy and the contiguous one, and their report; 0, or -1 (printed). */
int demo_hybrid_runs(demo_options *o, const demo_workload *w, const model *m);

/* demo_retention.c. Why the options cannot run --retention (a message naming the flag), or NULL;
 * sets its defaults (--requests 8, --num-blocks 96, --max-num-seqs 4, unless the flag was seen). */
const char *demo_retention_check(demo_options *o, int requests_seen, int blocks_seen,
                                 int seqs_seen);
/* Its workload, runs (plain LRU, requests' priority, system prompts' priority, pins) and report;
 * 0, or -1 (message printed). */
int demo_retention_runs(demo_options *o, const model_config *mc);

/* demo_cuda.c. Why the options cannot run --device (a message naming the flag), or NULL. */
const char *demo_cuda_check(const demo_options *o);
/* --device cuda: loads the CUDA runtime and cuBLAS, finds a GPU and checks that libpkv makes
 * CUDA engines of the model's shape mc; *out for demo_cuda_runs (NULL without --device cuda).
 * 0, or -1 with what is missing, named, in why[cap]. */
struct demo_cuda;
/* How demo_cuda_open loads the CUDA runtime and cuBLAS: cuda_api_load (dlopen); a program that
 * runs the demo in the CUDA emulator (emu_demo) points it at the emulator's functions. */
struct cuda_api;
extern int (*demo_cuda_api_load)(struct cuda_api *api, char *error, size_t cap);
int demo_cuda_open(const demo_options *o, const model_config *mc, struct demo_cuda **out, char *why,
                   size_t cap);
/* The CPU run and the CUDA run, their table and the tokens' verdict; 0, or -1 (printed). */
int demo_cuda_runs(struct demo_cuda *dc, const demo_options *o, const demo_workload *w,
                   const model *m);
/* Frees what demo_cuda_open set up. Accepts NULL. */
void demo_cuda_close(struct demo_cuda *dc);

/* demo_disagg.c. Why the options cannot run --disaggregated (naming the flag), or NULL. */
const char *demo_disagg_check(const demo_options *o);
/* The single-engine run, then a prefill process and this (decode) process moving KV by pkv's
 * UCX agent, against ucx_perftest of the same bytes; the report. 0, or -1 (printed). */
int demo_disagg_runs(const demo_options *o, const demo_workload *w, const model *m);

/* demo_plot.c: the SVG of runs[0..num_runs), a panel each; 0, or -1 (message printed). */
int demo_plot(const char *path, const demo_result *const *runs, uint32_t num_runs,
              const demo_options *o);

#endif /* PKV_TOOLS_DEMO_H */
