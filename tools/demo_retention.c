/*
 * demo_retention.c - `pkv demo --retention`: tenants' requests, each behind its tenant's system
 * prompt, then a burst of unique prompts (no shared prefix) that cycles the pool, then the
 * tenants' requests again. Under plain LRU the burst evicts the system prompts, so the second
 * round computes them again; pkv's retention keeps them. The same workload runs through pkv once
 * per way of keeping them:
 *
 *   plain LRU         every request at cache_priority 0
 *   request priority  the tenants' requests at PKV_CACHE_PRIORITY_MAX (pkv_request_params), the
 *                     burst at 0: everything a tenant's request releases outranks the burst
 *   prefix priority   every request at 0, each system prompt given PKV_CACHE_PRIORITY_MAX by
 *                     pkv_cache_set_priority once its blocks exist: only the prefixes outrank it
 *   pin               each system prompt pinned (pkv_cache_pin) once its blocks exist, when the
 *                     pins fit in PKV_MAX_PINNED_PERCENT of the pool
 *
 * --retention-ms gives the two priority runs a cache_retention_ms: a kept block decays to normal
 * that long after its last release, so a retention shorter than the burst keeps nothing.
 *
 * All requests arrive at step 0 and are admitted in order (pkv's queue is first come, first
 * served), so the burst runs between the two rounds. Per run: the tenants' second-round hit rate
 * (cached prompt tokens, pkv_seq_info.num_cached_tokens, over prompt tokens), the first round's
 * and the burst's, the prompt rows the second round computed, forward rows, evictions by
 * priority and pinned blocks (pkv_stats). Retention changes what is cached, never what is
 * computed from it: every run must generate the plain LRU run's tokens, or the demo fails.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

enum { RUN_LRU, RUN_REQUEST, RUN_PREFIX, RUN_PIN, NUM_RUNS };
static const char *const run_names[NUM_RUNS] = {"plain LRU", "request priority", "prefix priority",
                                                "pin"};

/* The workload's three parts, in request order: [0, per_round) the tenants' first round, then
 * the burst's [per_round, per_round + burst), then the tenants' second round. */
typedef struct parts {
  uint32_t per_round, burst;
} parts;

const char *demo_retention_check(demo_options *o, int requests_seen, int blocks_seen,
                                 int seqs_seen) {
  if (!o->retention)
    return o->burst || o->retention_ms ? "--burst and --retention-ms go with --retention" : NULL;
  if (o->hybrid) return "--retention runs attention layers only: drop --hybrid";
  if (o->store) return "--retention runs in one process on the pool alone: drop --store";
  if (o->host_cache)
    return "--retention compares what the pool keeps; a host tier (plain LRU) would serve the "
           "evicted system prompts back: drop --host-cache";
  if (o->windows) return "--retention runs full attention: drop --windows";
  if (o->plot) return "--plot draws the runs of pkv demo without --retention: drop one of them";
  if (o->no_prefix_caching)
    return "--retention compares what the prefix cache keeps: drop --no-prefix-caching";
  if (!requests_seen) o->num_requests = 8; /* a round's: two per default tenant */
  if (!blocks_seen) o->num_blocks = 96;    /* small, so that a short burst cycles it */
  /* A burst whose running requests hold the whole pool takes every cached block, kept or not:
   * priorities order eviction, they do not forbid it (only pins do). 4 at a time leave room. */
  if (!seqs_seen) o->max_num_seqs = 4;
  if ((uint64_t)o->num_blocks * o->block_size < o->max_model_len)
    return "the pool (--num-blocks x --block-size, --retention's default --num-blocks 96) must "
           "hold one --max-model-len sequence";
  if (o->num_requests < o->num_tenants)
    return "--retention: --requests (each round's) must be at least --tenants, so that every "
           "tenant comes back after the burst";
  if (o->burst > 100000) return "--burst must be at most 100000 (0: twice the pool's tokens)";
  return NULL;
}

static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t in_range(uint64_t *s, uint32_t lo, uint32_t hi) {
  return lo + (uint32_t)(next_u64(s) % (hi - lo + 1));
}

/* A token of ordinary text: never the stop token, never 0. */
static int32_t text_token(uint64_t *s, uint32_t vocab, int32_t stop) {
  int32_t t;
  do t = (int32_t)(1 + next_u64(s) % (vocab - 1));
  while (t == stop);
  return t;
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

/* Request q: system_len tokens of sys (may be 0), then user tokens of its own. 0, or -1. */
static int make_request(demo_request *q, const int32_t *sys, uint32_t system_len, uint32_t user,
                        uint64_t *rng, uint32_t vocab, int32_t stop) {
  q->system_len = system_len, q->prompt_len = system_len + user;
  if (!(q->prompt = malloc(q->prompt_len * sizeof(int32_t)))) return -1;
  if (system_len) memcpy(q->prompt, sys, system_len * sizeof(int32_t));
  for (uint32_t k = system_len; k < q->prompt_len; k++) q->prompt[k] = text_token(rng, vocab, stop);
  return 0;
}

/* The tenants' rounds around the burst (parts), every length capped to fit max_model_len. */
static int make_workload(const demo_options *o, uint32_t vocab, demo_workload *w, parts *pt) {
  memset(w, 0, sizeof *w);
  uint64_t rng = o->seed * 0x100000001b3ull + 29;
  const uint32_t quarter = o->max_model_len / 4; /* at least 16: --max-model-len >= 64 */
  const uint32_t blo = min_u32(96, 2 * quarter), bhi = min_u32(160, 2 * quarter);
  pt->per_round = o->num_requests;
  /* twice the pool's tokens: every block cached before the burst is wanted for it */
  pt->burst = o->burst ? o->burst
                       : (uint32_t)((2ull * o->num_blocks * o->block_size) / ((blo + bhi) / 2) + 1);
  const uint32_t n = 2 * pt->per_round + pt->burst;
  int32_t *system[DEMO_MAX_TENANTS] = {0};
  uint32_t system_len[DEMO_MAX_TENANTS];
  w->num_tenants = o->num_tenants;
  int ok = (w->requests = calloc(n, sizeof *w->requests)) != NULL;
  for (uint32_t t = 0; t < w->num_tenants && ok; t++) {
    snprintf(w->salts[t], sizeof w->salts[t], "tenant-%u", t);
    system_len[t] = min_u32(64 + (uint32_t)(next_u64(&rng) % 129), quarter);
    ok = (system[t] = malloc(system_len[t] * sizeof(int32_t))) != NULL;
    for (uint32_t i = 0; ok && i < system_len[t]; i++)
      system[t][i] = text_token(&rng, vocab, o->stop_token);
  }
  for (uint32_t i = 0; i < n && ok; i++, w->num_requests++) {
    demo_request *q = &w->requests[i];
    const int burst = i >= pt->per_round && i < pt->per_round + pt->burst;
    q->tenant = i % w->num_tenants; /* the burst's too: its prompts share nothing anyway */
    if (burst) {
      q->max_new_tokens = in_range(&rng, 2, 6);
      ok = make_request(q, NULL, 0, in_range(&rng, blo, bhi), &rng, vocab, o->stop_token) == 0;
    } else {
      q->max_new_tokens = in_range(&rng, 4, min_u32(16, quarter));
      ok = make_request(q, system[q->tenant], system_len[q->tenant],
                        in_range(&rng, 8, min_u32(40, quarter)), &rng, vocab, o->stop_token) == 0;
    }
    w->prompt_tokens += q->prompt_len, w->max_new_tokens += q->max_new_tokens;
  }
  for (uint32_t t = 0; t < DEMO_MAX_TENANTS; t++) free(system[t]);
  if (ok) return 0;
  demo_workload_free(w);
  return -1;
}

/* --retention's on_step for the prefix-priority and pin runs: each tenant's system prompt (its
 * full blocks) kept once all of them exist; a pin is all or nothing, so a partial one goes. */
typedef struct keeper {
  const demo_workload *w;
  uint32_t block_size, run, retention_ms;
  uint8_t kept[DEMO_MAX_TENANTS];
} keeper;

static int keep_one(keeper *k, pkv_engine *e, uint32_t t, const demo_request *q, char *error,
                    size_t cap) {
  const uint32_t full = q->system_len / k->block_size * k->block_size;
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = k->w->salts[t], sp.cache_salt_len = (uint32_t)strlen(k->w->salts[t]);
  uint32_t got = 0;
  uint64_t pin = 0;
  const char *call = k->run == RUN_PIN ? "pkv_cache_pin" : "pkv_cache_set_priority";
  pkv_status s = k->run == RUN_PIN
                     ? pkv_cache_pin(e, q->prompt, full, &sp, &pin, &got)
                     : pkv_cache_set_priority(e, q->prompt, full, &sp, PKV_CACHE_PRIORITY_MAX,
                                              k->retention_ms, &got);
  if (s == PKV_OK && k->run != RUN_PIN) got *= k->block_size; /* blocks given it, as tokens */
  if (s == PKV_OK && got == full) k->kept[t] = 1;
  if (s == PKV_OK && !k->kept[t] && k->run == RUN_PIN)
    call = "pkv_cache_unpin", s = pkv_cache_unpin(e, pin);
  if (s == PKV_OK) return 0;
  snprintf(error, cap, "%s of tenant %u's system prompt (%u tokens): %s: %s", call, t, full,
           pkv_status_string(s), pkv_engine_last_error(e));
  return -1;
}

static int keep(void *ctx, pkv_engine *e, const uint64_t *seqs, char *error, size_t cap) {
  (void)seqs;
  keeper *k = ctx;
  for (uint32_t i = 0; i < k->w->num_tenants && i < k->w->num_requests; i++) {
    const demo_request *q = &k->w->requests[i]; /* round 1 is round robin: request t is t's */
    if (!k->kept[q->tenant] && keep_one(k, e, q->tenant, q, error, cap) != 0) return -1;
  }
  return 0;
}

/* The system prompts' full blocks: what the pins hold. */
static uint64_t system_blocks(const demo_workload *w, uint32_t block_size) {
  uint64_t n = 0;
  for (uint32_t t = 0; t < w->num_tenants && t < w->num_requests; t++)
    n += w->requests[t].system_len / block_size;
  return n;
}

/* One run of kind `run`; prints its failure. */
static int run_one(demo_options *o, demo_workload *w, const parts *pt, const model *m, uint32_t run,
                   demo_result *r) {
  keeper k;
  memset(&k, 0, sizeof k);
  k.w = w, k.block_size = o->block_size, k.run = run, k.retention_ms = o->retention_ms;
  for (uint32_t i = 0; i < w->num_requests; i++) {
    const int tenants = i < pt->per_round || i >= pt->per_round + pt->burst;
    w->requests[i].cache_priority = run == RUN_REQUEST && tenants ? PKV_CACHE_PRIORITY_MAX : 0;
    w->requests[i].cache_retention_ms = run == RUN_REQUEST && tenants ? o->retention_ms : 0;
  }
  o->on_step = run == RUN_PREFIX || run == RUN_PIN ? keep : NULL;
  o->on_step_ctx = &k;
  int rc = demo_result_init(r, run_names[run], w);
  if (rc == 0 && !(r->cached_tokens = calloc(w->num_requests, sizeof *r->cached_tokens))) rc = -1;
  if (rc != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  rc = demo_run_paged(o, w, m, r);
  o->on_step = NULL, o->on_step_ctx = NULL;
  if (rc == 0) return 0;
  fprintf(stderr, "pkv demo: the %s run failed: %s\n", r->name, r->error);
  return -1;
}

/* Cached prompt tokens of requests [lo, hi) over their prompt tokens, in percent. */
static double hit_rate(const demo_workload *w, const demo_result *r, uint32_t lo, uint32_t hi) {
  uint64_t cached = 0, prompt = 0;
  for (uint32_t i = lo; i < hi; i++)
    cached += r->cached_tokens[i], prompt += w->requests[i].prompt_len;
  return prompt ? 100.0 * (double)cached / (double)prompt : 0.0;
}

/* Prompt rows requests [lo, hi) computed: their prompt tokens the cache did not serve. */
static uint64_t prompt_rows(const demo_workload *w, const demo_result *r, uint32_t lo,
                            uint32_t hi) {
  uint64_t n = 0;
  for (uint32_t i = lo; i < hi; i++) n += w->requests[i].prompt_len - r->cached_tokens[i];
  return n;
}

static void print_header(const demo_options *o, const demo_workload *w, const parts *pt,
                         const model *m) {
  uint32_t slo = UINT32_MAX, shi = 0;
  uint64_t burst_tokens = 0;
  for (uint32_t t = 0; t < w->num_tenants; t++) {
    const uint32_t s = w->requests[t].system_len;
    slo = s < slo ? s : slo, shi = s > shi ? s : shi;
  }
  for (uint32_t i = pt->per_round; i < pt->per_round + pt->burst; i++)
    burst_tokens += w->requests[i].prompt_len;
  const uint64_t pool_tokens = (uint64_t)o->num_blocks * o->block_size;
  printf("pkv demo --retention: tenants' system prompts through a burst of unique prompts\n\n");
  printf("  model      %u layers, hidden %u, %u q / %u kv heads of %u, f32, %.1fM random\n"
         "             parameters (seed %llu); GEMM: %s\n",
         m->c.num_layers, m->c.hidden, m->c.num_q_heads, m->c.num_kv_heads, m->c.head_dim,
         m->num_params / 1e6, (unsigned long long)o->seed, model_gemm_name());
  printf("  workload   %u tenants, system prompts %u-%u tokens; all at step 0, in order:\n"
         "             round 1: %u tenants' requests; burst: %u unique prompts, %llu tokens\n"
         "             (%.1fx the pool); round 2: %u tenants' requests again\n",
         w->num_tenants, slo, shi, pt->per_round, pt->burst, (unsigned long long)burst_tokens,
         (double)burst_tokens / (double)pool_tokens, pt->per_round);
  printf("  pool       %u blocks x %u tokens = %llu tokens, up to %u sequences and %u tokens per\n"
         "             step, prefix caching on\n",
         o->num_blocks, o->block_size, (unsigned long long)pool_tokens, o->max_num_seqs,
         o->step_tokens);
  if (o->retention_ms)
    printf("  retention  the priority runs' kept blocks decay to normal %u ms after their last\n"
           "             release (cache_retention_ms)\n",
           o->retention_ms);
  else
    printf("  retention  the priority runs' kept blocks never decay (cache_retention_ms 0)\n");
  printf("\n");
}

#define CELLS(label, fmt, ...)                         \
  do {                                                 \
    printf("  %-32s", label);                          \
    for (uint32_t i_ = 0; i_ < n; i_++) {              \
      const demo_result *r_ = runs[i_];                \
      char cell_[48];                                  \
      snprintf(cell_, sizeof cell_, fmt, __VA_ARGS__); \
      printf(" %17s", cell_);                          \
    }                                                  \
    printf("\n");                                      \
  } while (0)

static void print_table(const demo_workload *w, const parts *pt, const demo_result *const *runs,
                        uint32_t n) {
  const uint32_t b0 = pt->per_round, b1 = pt->per_round + pt->burst, end = w->num_requests;
  printf("  %-32s", "");
  for (uint32_t i = 0; i < n; i++) printf(" %17s", runs[i]->name);
  printf("\n");
  CELLS("tenants' hit rate, round 2", "%.1f%%", hit_rate(w, r_, b1, end));
  CELLS("  its prompt rows computed", "%llu", (unsigned long long)prompt_rows(w, r_, b1, end));
  CELLS("tenants' hit rate, round 1", "%.1f%%", hit_rate(w, r_, 0, b0));
  CELLS("burst's hit rate", "%.1f%%", hit_rate(w, r_, b0, b1));
  CELLS("forward rows (tokens computed)", "%llu", (unsigned long long)r_->rows);
  CELLS("evictions by priority", "%llu",
        (unsigned long long)(r_->evictions[0] + r_->evictions[1] + r_->evictions[2] +
                             r_->evictions[3]));
  CELLS("  normal / highest", "%llu / %llu", (unsigned long long)r_->evictions[1],
        (unsigned long long)r_->evictions[3]);
  CELLS("  low / high", "%llu / %llu", (unsigned long long)r_->evictions[0],
        (unsigned long long)r_->evictions[2]);
  CELLS("pinned blocks at the end", "%llu", (unsigned long long)r_->pinned_blocks);
  CELLS("preemptions", "%llu", (unsigned long long)r_->preemptions);
  CELLS("wall time", "%.2f s", r_->wall_s);
}

/* Every run against plain LRU (runs[0]): the same tokens, and a verdict on the hit rates. */
static int print_verdict(const demo_workload *w, const parts *pt, const demo_result *const *runs,
                         uint32_t n) {
  const uint32_t b1 = pt->per_round + pt->burst;
  const double lru = hit_rate(w, runs[0], b1, w->num_requests);
  int rc = 0;
  printf("\n");
  for (uint32_t i = 1; i < n; i++) {
    const long long saved = (long long)prompt_rows(w, runs[0], b1, w->num_requests) -
                            (long long)prompt_rows(w, runs[i], b1, w->num_requests);
    printf("  %s: round 2 hit %.1f%% against plain LRU's %.1f%%, %lld prompt rows not computed\n",
           runs[i]->name, hit_rate(w, runs[i], b1, w->num_requests), lru, saved);
    uint32_t first = 0, at = 0;
    const uint32_t differ = demo_result_differ(w, runs[i], runs[0], &first, &at);
    if (!differ) continue;
    printf("  tokens identical: NO - %s: %u of %u requests differ from plain LRU's; the first is\n"
           "  request %u at generated token %u. Retention changes what is cached, never what is\n"
           "  computed from it: a kept block with the wrong KV would do this.\n",
           runs[i]->name, differ, w->num_requests, first, at);
    rc = -1;
  }
  if (rc == 0)
    printf("  tokens identical: yes (%u requests, %llu generated tokens, each run vs plain LRU)\n",
           w->num_requests, (unsigned long long)runs[0]->generated_tokens);
  return rc;
}

int demo_retention_runs(demo_options *o, const model_config *mc) {
  model m;
  demo_workload w;
  parts pt;
  if (model_init(&m, mc) != 0 || make_workload(o, mc->vocab, &w, &pt) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    model_free(&m);
    return -1;
  }
  print_header(o, &w, &pt, &m);
  const uint64_t pins = system_blocks(&w, o->block_size);
  const int pin_fits = pins * 100 <= (uint64_t)o->num_blocks * PKV_MAX_PINNED_PERCENT;
  demo_result results[NUM_RUNS];
  const demo_result *runs[NUM_RUNS];
  memset(results, 0, sizeof results);
  uint32_t n = 0;
  int rc = 0;
  for (uint32_t run = 0; run < NUM_RUNS && rc == 0; run++) {
    if (run == RUN_PIN && !pin_fits) continue;
    runs[n] = &results[n];
    rc = run_one(o, &w, &pt, &m, run, &results[n++]);
    fflush(stdout);
  }
  if (rc == 0) {
    print_table(&w, &pt, runs, n);
    if (!pin_fits)
      printf("  (no pin run: the system prompts' %llu blocks are more than %d%% of the pool's %u, "
             "PKV_MAX_PINNED_PERCENT)\n",
             (unsigned long long)pins, PKV_MAX_PINNED_PERCENT, o->num_blocks);
    rc = print_verdict(&w, &pt, runs, n);
  }
  for (uint32_t i = 0; i < n; i++) {
    free(results[i].cached_tokens);
    demo_result_free(&results[i], &w);
  }
  demo_workload_free(&w);
  model_free(&m);
  return rc;
}
