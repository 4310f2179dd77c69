/*
 * bench_eviction.c - the cost of an evicted block with retention priorities against plain LRU,
 * in the same run (issue 30 item 3).
 *
 * A pool of 64k blocks (block size 16) is filled with cached blocks: prompts of 4096 never-seen
 * tokens, computed and released. In the LRU mode every release has priority 0 (one list: 0.7's
 * path); in the priorities mode the releases cycle through six classes (priorities -1, 1 and 2,
 * with and without a retention, all still held: the head comparisons are all made) and normal
 * ones. Then each timed pkv_allocate of a new 4096-token prompt evicts 256 cached blocks (its
 * seal and release, which refill the pool, are not timed). Reported: ns per evicted block in
 * each mode (the median over runs, the modes alternating so drift hits both) and their ratio.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_eviction.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "bench_util.h"

enum { EV_BLOCK_SIZE = 16, EV_PROMPT = 4096, EV_POOL = 65536 };

/* A release's retention by index: LRU mode all normal; priorities mode seven kinds in turn. */
static void retention_of(int priorities, uint64_t i, int32_t *priority, uint32_t *ms) {
  static const int32_t p[7] = {-1, 0, 1, 2, -1, 1, 2};
  static const uint32_t r[7] = {0, 0, 0, 0, 3600000, 3600000, 600000};
  *priority = priorities ? p[i % 7] : 0;
  *ms = priorities ? r[i % 7] : 0;
}

static uint64_t evictions_of(pkv_engine *e) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(e, &st);
  return st.num_evictions;
}

/* One prompt of never-seen tokens: allocated (timed into *ns when ns is not NULL), computed,
 * released with the retention of its index. */
static int one_prompt(pkv_engine *e, uint64_t *rng, int32_t *tokens, int priorities, uint64_t i,
                      double *ns) {
  for (uint32_t t = 0; t < EV_PROMPT; t++) tokens[t] = bench_token(rng);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  retention_of(priorities, i, &sp.cache_priority, &sp.cache_retention_ms);
  uint64_t seq = 0;
  pkv_batch *batch = NULL;
  const double t0 = bench_now_ns();
  pkv_status s = pkv_allocate(e, tokens, EV_PROMPT, &sp, &seq, NULL);
  if (ns) *ns += bench_now_ns() - t0;
  if (s == PKV_OK) s = pkv_batch_begin(e, &seq, NULL, 1, &batch);
  if (s == PKV_OK) s = pkv_batch_end(batch);
  if (s == PKV_OK) s = pkv_release(e, seq);
  return s == PKV_OK ? 0 : bench_fail(e, "a prompt", s);
}

/* ns per evicted block of one mode's run: a fresh pool filled, then `prompts` timed ones. */
static int run_mode(int priorities, uint32_t prompts, int32_t *tokens, double *out) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1;
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32;
  p.block_size = EV_BLOCK_SIZE;
  p.num_blocks = EV_POOL;
  p.max_model_len = EV_PROMPT + 64;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = 1;
  pkv_engine *e = NULL;
  pkv_status s = pkv_engine_create(&p, &e);
  if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s);
  uint64_t rng = 0xe71c7 + (uint64_t)priorities, i = 0;
  int rc = 0;
  for (; rc == 0 && i < EV_POOL / (EV_PROMPT / EV_BLOCK_SIZE) + 8; i++) /* full, and warm */
    rc = one_prompt(e, &rng, tokens, priorities, i, NULL);
  const uint64_t before = evictions_of(e);
  double ns = 0;
  for (uint32_t k = 0; rc == 0 && k < prompts; k++, i++)
    rc = one_prompt(e, &rng, tokens, priorities, i, &ns);
  const uint64_t evicted = evictions_of(e) - before;
  pkv_engine_destroy(e);
  if (rc == 0 && evicted < (uint64_t)prompts * (EV_PROMPT / EV_BLOCK_SIZE)) {
    fprintf(stderr, "bench: %llu evictions, %u full prompts expected\n",
            (unsigned long long)evicted, prompts);
    return -1;
  }
  *out = ns / (double)evicted;
  return rc;
}

int bench_eviction_priorities(int quick) {
  const uint32_t runs = quick ? 1 : 7, prompts = quick ? 16 : 128;
  int32_t *tokens = malloc(sizeof(int32_t) * EV_PROMPT);
  if (tokens == NULL) return -1;
  double lru[BENCH_MAX_RUNS], prio[BENCH_MAX_RUNS];
  int rc = 0;
  for (uint32_t r = 0; rc == 0 && r < runs; r++) {
    rc = run_mode(0, prompts, tokens, &lru[r]);
    if (rc == 0) rc = run_mode(1, prompts, tokens, &prio[r]);
  }
  free(tokens);
  if (rc != 0) return rc;
  const double a = bench_median(lru, runs), b = bench_median(prio, runs);
  printf("\neviction by priority (pool %u blocks, prompts of %u tokens, %u runs x %u prompts):\n",
         EV_POOL, EV_PROMPT, runs, prompts);
  printf("  LRU only (priority 0)          %8.1f ns per evicted block (allocate's share)\n", a);
  printf("  priorities, 6 classes in use   %8.1f ns per evicted block\n", b);
  printf("  ratio priorities / LRU         %8.2fx\n", b / a);
  return 0;
}
