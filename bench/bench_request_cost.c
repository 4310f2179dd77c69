/*
 * bench_request_cost.c - what one request's admission costs (bench_request_cost.h): pkv_allocate
 * of its prompt, pkv_batch_begin + pkv_batch_end over the whole prompt (plan + seal) and
 * pkv_release, in a pool filled with cached blocks, each prompt 512-4096 tokens of which the
 * first 50% are one shared prefix. Pools of 4k, 64k and 512k blocks (block size 16, the same tiny
 * one-group model as bench_block_manager.c).
 *
 * Same-run comparison with another build: every call goes through a table of entry points, the
 * linked libpkv's or one loaded by path with dlopen(RTLD_LOCAL) (its symbols stay its own, so two
 * libpkv builds live in one process). The two run the same requests (one token stream), in
 * alternating runs on one core, and the medians are compared: noise from the machine hits both.
 * Time is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine the time the bench
 * waits for a core would otherwise swamp the differences measured.
 * An older libpkv accepts this header's larger pkv_engine_params: it reads its own fields (every
 * struct is read by its declared size) and the new fields are left 0, their defaults.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_request_cost.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { REQ_BLOCK_SIZE = 16, REQ_MIN_PROMPT = 512, REQ_MAX_PROMPT = 4096, REQ_SHARED_PCT = 50 };

int req_api_linked(req_api *api) {
  api->name = "this build";
  api->handle = NULL;
  api->params_init = pkv_engine_params_init;
  api->create = pkv_engine_create;
  api->destroy = pkv_engine_destroy;
  api->allocate = pkv_allocate;
  api->batch_begin = pkv_batch_begin;
  api->batch_end = pkv_batch_end;
  api->release = pkv_release;
  return 0;
}

int req_api_open(req_api *api, const char *path) {
  memset(api, 0, sizeof *api);
  api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (api->handle == NULL) {
    fprintf(stderr, "bench: cannot load %s: %s\n", path, dlerror());
    return -1;
  }
  api->name = path;
  /* POSIX's way to turn dlsym's void * into a function pointer: copy the bytes. */
  struct {
    const char *sym;
    void *dst;
  } syms[] = {{"pkv_engine_params_init", &api->params_init},
              {"pkv_engine_create", &api->create},
              {"pkv_engine_destroy", &api->destroy},
              {"pkv_allocate", &api->allocate},
              {"pkv_batch_begin", &api->batch_begin},
              {"pkv_batch_end", &api->batch_end},
              {"pkv_release", &api->release}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    void *f = dlsym(api->handle, syms[i].sym);
    if (f == NULL) {
      fprintf(stderr, "bench: %s has no %s: not a libpkv\n", path, syms[i].sym);
      dlclose(api->handle);
      api->handle = NULL;
      return -1;
    }
    memcpy(syms[i].dst, &f, sizeof f);
  }
  return 0;
}

void req_api_close(req_api *api) {
  if (api->handle != NULL) dlclose(api->handle);
  api->handle = NULL;
}

/* A Gemma-4-like cache of 12 layers (tiny widths, the bench's own): five sliding layers (window
 * 1024, head_dim 8) to each full one (head_dim 16, K = V), the last four SHARED (Gemma 4's
 * num_kv_shared_layers: they read layer 7's or layer 5's KV). */
enum { GEMMA_LAYERS = 12, GEMMA_FIRST_SHARED = 8 };

static void gemma4_like(pkv_layer_spec specs[GEMMA_LAYERS]) {
  memset(specs, 0, GEMMA_LAYERS * sizeof specs[0]);
  for (uint32_t l = 0; l < GEMMA_LAYERS; l++) {
    const int full = l % 6 == 5;
    specs[l].kind = l >= GEMMA_FIRST_SHARED ? PKV_LAYER_SHARED : PKV_LAYER_ATTENTION;
    specs[l].attention = full ? PKV_ATTENTION_FULL : PKV_ATTENTION_SLIDING;
    specs[l].window = full ? 0 : 1024;
    specs[l].head_dim = full ? 16 : 8;
    specs[l].k_eq_v = (uint32_t)full;
    specs[l].source_layer = l >= GEMMA_FIRST_SHARED ? (full ? 5 : 7) : 0;
  }
}

static double cpu_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static pkv_engine *create_engine(const req_api *api, uint32_t pool_blocks, int gemma) {
  pkv_engine_params p;
  pkv_engine *e = NULL;
  pkv_layer_spec specs[GEMMA_LAYERS];
  if (api->params_init(&p, sizeof p) != PKV_OK) return NULL;
  p.num_layers = 1;
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32;
  p.block_size = REQ_BLOCK_SIZE;
  p.num_blocks = pool_blocks;
  p.max_model_len = REQ_MAX_PROMPT + 1024;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = 1;
  if (gemma) {
    gemma4_like(specs);
    p.num_layers = GEMMA_LAYERS;
    p.layer_specs = specs;
    p.layer_spec_size = sizeof specs[0];
  }
  return api->create(&p, &e) == PKV_OK ? e : NULL;
}

/* One request: allocate, compute the whole prompt, release. */
static pkv_status request(const req_api *api, pkv_engine *e, const int32_t *tokens, uint32_t n) {
  uint64_t seq = 0;
  pkv_batch *b = NULL;
  pkv_status s = api->allocate(e, tokens, n, NULL, &seq, NULL);
  if (s != PKV_OK) return s;
  s = api->batch_begin(e, &seq, NULL, 1, &b);
  if (s == PKV_OK) s = api->batch_end(b);
  pkv_status r = api->release(e, seq);
  return s != PKV_OK ? s : r;
}

static void make_prompt(uint64_t *rng, const int32_t *shared, int32_t *out, uint32_t len,
                        uint32_t shared_pct) {
  uint32_t n = len * shared_pct / 100;
  memcpy(out, shared, n * sizeof *out);
  for (uint32_t t = n; t < len; t++) out[t] = bench_token(rng);
}

/* An engine per API with its pool filled by never-seen prompts (sealed, released). */
static int setup(const req_api *api, uint32_t pool_blocks, int gemma, uint64_t *rng, int32_t *buf,
                 pkv_engine **out) {
  *out = create_engine(api, pool_blocks, gemma);
  if (*out == NULL) {
    fprintf(stderr, "bench: %s: pkv_engine_create of %u blocks failed\n", api->name, pool_blocks);
    return -1;
  }
  for (uint64_t filled = 0; filled + REQ_MAX_PROMPT / REQ_BLOCK_SIZE <= pool_blocks;
       filled += REQ_MAX_PROMPT / REQ_BLOCK_SIZE) {
    make_prompt(rng, buf, buf, REQ_MAX_PROMPT, 0);
    if (request(api, *out, buf, REQ_MAX_PROMPT) != PKV_OK) {
      fprintf(stderr, "bench: %s: filling the pool failed\n", api->name);
      return -1;
    }
  }
  return 0;
}

/* One timed run of `requests` requests on every API's engine, the same prompts for each: the
 * prompts are drawn first, then each API runs them all. us[a] = microseconds per request.
 * Before its timed requests, each engine serves REQ_WARM untimed ones (the same for each API):
 * the other engine's run, just before, left this one's metadata out of the caches, which a
 * server running one engine does not see; the timed requests measure the steady state. */
enum { REQ_WARM = 16 };
static void draw_prompts(uint64_t *rng, const int32_t *shared, int32_t **prompts, uint32_t *lens,
                         uint32_t requests) {
  for (uint32_t r = 0; r < requests; r++) {
    lens[r] = REQ_MIN_PROMPT + (uint32_t)(bench_next(rng) % (REQ_MAX_PROMPT - REQ_MIN_PROMPT + 1));
    make_prompt(rng, shared, prompts[r], lens[r], REQ_SHARED_PCT);
  }
}

static int timed_run(const req_api *apis, pkv_engine **engines, uint32_t num_apis,
                     uint32_t requests, uint64_t warm_seed, const int32_t *shared,
                     int32_t *const *prompts, const uint32_t *lens, double *us) {
  static int32_t warm[REQ_MAX_PROMPT];
  for (uint32_t a = 0; a < num_apis; a++) {
    uint64_t wrng = warm_seed;
    for (uint32_t w = 0; w < REQ_WARM; w++) {
      const uint32_t len =
          REQ_MIN_PROMPT + (uint32_t)(bench_next(&wrng) % (REQ_MAX_PROMPT - REQ_MIN_PROMPT + 1));
      make_prompt(&wrng, shared, warm, len, REQ_SHARED_PCT);
      if (request(&apis[a], engines[a], warm, len) != PKV_OK) {
        fprintf(stderr, "bench: %s: a warm-up request failed\n", apis[a].name);
        return -1;
      }
    }
    double t0 = cpu_now_ns();
    for (uint32_t r = 0; r < requests; r++) {
      pkv_status s = request(&apis[a], engines[a], prompts[r], lens[r]);
      if (s != PKV_OK) {
        fprintf(stderr, "bench: %s: a request failed (status %d)\n", apis[a].name, (int)s);
        return -1;
      }
    }
    us[a] = (cpu_now_ns() - t0) / requests / 1e3;
  }
  return 0;
}

int bench_request_cost(const req_api *apis, uint32_t num_apis, int quick) {
  static const uint32_t pools[REQ_NUM_POOLS] = {4096, 65536, 524288};
  const uint32_t runs = quick ? 3 : 9, requests = quick ? 16 : 64;
  double med[REQ_NUM_POOLS][REQ_MAX_APIS];
  uint64_t rng = 0xfeed;
  int32_t shared[REQ_MAX_PROMPT];
  for (uint32_t t = 0; t < REQ_MAX_PROMPT; t++) shared[t] = bench_token(&rng);
  int32_t *prompts[64], *fill = NULL;
  uint32_t lens[64];
  int rc = bench_alloc_prompts(prompts, requests, &fill, REQ_MAX_PROMPT);
  /* Every pool's engines exist at once and each run visits them all in turn, so a noisy
   * stretch of the machine falls on every pool alike instead of on one pool's runs. */
  pkv_engine *engines[REQ_NUM_POOLS][REQ_MAX_APIS] = {{NULL}};
  for (uint32_t p = 0; rc == 0 && p < REQ_NUM_POOLS; p++)
    for (uint32_t a = 0; rc == 0 && a < num_apis; a++)
      rc = setup(&apis[a], pools[p], 0, &rng, fill, &engines[p][a]);
  double samples[REQ_NUM_POOLS][REQ_MAX_APIS][BENCH_MAX_RUNS], us[REQ_MAX_APIS];
  for (uint32_t run = 0; rc == 0 && run <= runs; run++) { /* run 0: warm-up */
    draw_prompts(&rng, shared, prompts, lens, requests);
    const uint64_t warm_seed = bench_next(&rng);
    for (uint32_t p = 0; rc == 0 && p < REQ_NUM_POOLS; p++) {
      rc = timed_run(apis, engines[p], num_apis, requests, warm_seed, shared, prompts, lens, us);
      for (uint32_t a = 0; rc == 0 && run > 0 && a < num_apis; a++) samples[p][a][run - 1] = us[a];
    }
  }
  for (uint32_t p = 0; p < REQ_NUM_POOLS; p++)
    for (uint32_t a = 0; a < num_apis; a++) {
      if (rc == 0) med[p][a] = bench_median(samples[p][a], runs);
      if (engines[p][a] != NULL) apis[a].destroy(engines[p][a]);
    }
  bench_free_prompts(prompts, requests, fill);
  if (rc != 0) return rc;
  printf("\nper request: pkv_allocate + pkv_batch_begin/end over the prompt + pkv_release, %u%% "
         "shared, pool full of cached blocks (thread CPU time, median of %u runs of %u requests)\n",
         REQ_SHARED_PCT, runs, requests);
  printf("%-10s", "pool");
  for (uint32_t a = 0; a < num_apis; a++)
    printf("  %14s us  vs 4k", a ? "other build" : "this build");
  if (num_apis > 1) printf("  this/other");
  printf("\n");
  for (uint32_t p = 0; p < REQ_NUM_POOLS; p++) {
    printf("%-10u", pools[p]);
    for (uint32_t a = 0; a < num_apis; a++)
      printf("  %17.1f  %5.2fx", med[p][a], med[p][a] / med[0][a]);
    if (num_apis > 1) printf("  %9.2fx", med[p][0] / med[p][1]);
    printf("\n");
  }
  const double flat = med[REQ_NUM_POOLS - 1][0] / med[0][0];
  printf("admission, 512k-block pool vs 4k: %.2fx (target <= 1.20x): %s\n", flat,
         flat <= 1.2 ? "met" : "NOT met");
  if (num_apis > 1) {
    double worst = 0;
    for (uint32_t p = 0; p < REQ_NUM_POOLS; p++)
      if (med[p][0] / med[p][1] > worst) worst = med[p][0] / med[p][1];
    printf("one-group engine vs %s: at most %.2fx its cost per request (target <= 1.00x, noise "
           "~5%%): %s\n",
           apis[1].name, worst, worst <= 1.05 ? "met" : "NOT met");
  }
  return 0;
}

/* The same requests on a one-group engine and a Gemma-4-like one (this build), 64k-block pools:
 * the cost per request, and per KV group (a request's blocks are taken, sealed and released in
 * every group). */
int bench_request_groups(int quick) {
  const uint32_t pool = 65536, runs = quick ? 3 : 9, requests = quick ? 16 : 64;
  req_api api;
  req_api_linked(&api);
  const req_api apis[2] = {api, api};
  uint64_t rng = 0xbeef;
  int32_t shared[REQ_MAX_PROMPT], *prompts[64], *fill = NULL;
  uint32_t lens[64];
  for (uint32_t t = 0; t < REQ_MAX_PROMPT; t++) shared[t] = bench_token(&rng);
  int rc = bench_alloc_prompts(prompts, requests, &fill, REQ_MAX_PROMPT);
  pkv_engine *engines[2] = {NULL, NULL};
  for (int g = 0; rc == 0 && g < 2; g++) rc = setup(&api, pool, g, &rng, fill, &engines[g]);
  double samples[2][BENCH_MAX_RUNS], us[2];
  for (uint32_t run = 0; rc == 0 && run <= runs; run++) {
    draw_prompts(&rng, shared, prompts, lens, requests);
    rc = timed_run(apis, engines, 2, requests, bench_next(&rng), shared, prompts, lens, us);
    for (int g = 0; rc == 0 && run > 0 && g < 2; g++) samples[g][run - 1] = us[g];
  }
  uint32_t groups[2] = {1, 1};
  for (int g = 0; g < 2; g++) {
    pkv_kv_budget b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    if (engines[g] != NULL && pkv_engine_budget(engines[g], &b) == PKV_OK)
      groups[g] = b.num_kv_groups;
    if (engines[g] != NULL) pkv_engine_destroy(engines[g]);
  }
  bench_free_prompts(prompts, requests, fill);
  if (rc != 0) return rc;
  printf("\nKV groups: the same requests, %u-block pools (median of %u runs of %u requests)\n",
         pool, runs, requests);
  const char *names[2] = {"one group (1 layer)", "Gemma-4-like (12 layers)"};
  for (int g = 0; g < 2; g++) {
    const double m = bench_median(samples[g], runs);
    printf("%-26s %u group(s): %8.1f us per request, %8.1f us per group\n", names[g], groups[g], m,
           m / groups[g]);
  }
  return 0;
}
