/*
 * bench_util.c - timing, statistics, random tokens and the table of bench_block_manager.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_cost_ns;

double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

void bench_calibrate_clock(void) {
  double d[101];
  for (int i = 0; i < 101; i++) {
    double t0 = bench_now_ns();
    d[i] = bench_now_ns() - t0;
  }
  clock_cost_ns = bench_median(d, 101);
}

void op_add(op_acc *acc, double t0, uint64_t ops, uint64_t blocks) {
  double ns = bench_now_ns() - t0 - clock_cost_ns;
  acc->ns += ns > 0.0 ? ns : 0.0;
  acc->ops += ops;
  acc->blocks += blocks;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(const double *v, uint32_t n) {
  double s[128];
  if (n == 0) return 0.0;
  if (n > 128) n = 128;
  memcpy(s, v, n * sizeof *s);
  qsort(s, n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

uint64_t bench_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int32_t bench_token(uint64_t *state) { return 1 + (int32_t)(bench_next(state) % 31999); }

int bench_fail(const pkv_engine *e, const char *what, pkv_status s) {
  fprintf(stderr, "bench: %s failed: %s: %s\n", what, pkv_status_string(s),
          e != NULL ? pkv_engine_last_error(e) : pkv_last_error());
  return -1;
}

int bench_alloc_prompts(int32_t **prompts, uint32_t n, int32_t **extra, uint32_t cap) {
  *extra = malloc(cap * sizeof **extra);
  int ok = *extra != NULL;
  for (uint32_t i = 0; i < n; i++) {
    prompts[i] = malloc(cap * sizeof *prompts[i]);
    ok = ok && prompts[i] != NULL;
  }
  if (ok) return 0;
  bench_free_prompts(prompts, n, *extra);
  return -1;
}

void bench_free_prompts(int32_t **prompts, uint32_t n, int32_t *extra) {
  for (uint32_t i = 0; i < n; i++) free(prompts[i]);
  free(extra);
}

static const char *op_names[NUM_OPS] = {"allocate", "prefill",   "append",    "decode",
                                        "release",  "query-hit", "query-miss"};

void bench_print_header(int quick) {
  printf("bench_block_manager%s: block size 16, prompts 512-4096 tokens, CPU engine, 1 thread\n",
         quick ? " --quick (1 run; numbers are rough)" : " (median of 7 runs)");
  printf(
      "pool pre-filled with cached blocks (allocation evicts); ns/block = per block the call covers "
      "(prompt blocks; 1 for append/decode)\n\n");
  printf("%-11s %11s %7s %13s %11s %9s\n", "op", "pool blocks", "shared", "ops/s", "ns/op",
         "ns/block");
}

void bench_print_rows(uint32_t pool_blocks, uint32_t shared_pct, const op_result r[NUM_OPS],
                      const bench_notes *notes) {
  for (int op = 0; op < NUM_OPS; op++) {
    double ops_s = r[op].ns_per_op > 0.0 ? 1e9 / r[op].ns_per_op : 0.0;
    printf("%-11s %11u %6u%% %13.0f %11.1f %9.2f\n", op_names[op], pool_blocks, shared_pct, ops_s,
           r[op].ns_per_op, r[op].ns_per_block);
  }
  printf("%-11s (pool %.0f MiB; timed runs evicted %llu cached blocks for ~%llu allocated)\n", "",
         (double)notes->pool_bytes / 1048576.0, (unsigned long long)notes->evictions,
         (unsigned long long)notes->blocks_allocated);
}

/* Compares ns/block of the largest pool with the smallest (0% shared), and the walk target. */
void bench_print_summary(const uint32_t pools[BENCH_NUM_POOLS],
                         op_result results[BENCH_NUM_POOLS][BENCH_NUM_SHARED][NUM_OPS]) {
  const int last = BENCH_NUM_POOLS - 1;
  char grows[160] = "", flat[160] = "";
  printf("\nns/block, %u-block pool vs %u-block pool (0%% shared):", pools[last], pools[0]);
  for (int op = 0; op < NUM_OPS; op++) {
    double small = results[0][0][op].ns_per_block, big = results[last][0][op].ns_per_block;
    double ratio = small > 0.0 ? big / small : 0.0;
    printf(" %s %.2fx%s", op_names[op], ratio, op + 1 < NUM_OPS ? "," : "\n");
    char *list = ratio > 1.5 ? grows : flat;
    size_t len = strlen(list);
    snprintf(list + len, 160 - len, "%s%s", len ? ", " : "", op_names[op]);
  }
  printf("grows with pool size (above 1.5x; this machine is noisy): %s; flat: %s\n",
         grows[0] ? grows : "none", flat[0] ? flat : "none");
  double hit = 0.0, miss = 0.0;
  for (int p = 0; p < BENCH_NUM_POOLS; p++) {
    for (int sh = 0; sh < BENCH_NUM_SHARED; sh++) {
      double h = results[p][sh][OP_QUERY_HIT].ns_per_block,
             m = results[p][sh][OP_QUERY_MISS].ns_per_block;
      if (h > hit) hit = h;
      if (m > miss) miss = m;
    }
  }
  printf("lookup walk, worst over pools: hit %.1f ns/block, miss %.1f ns/block (a miss stops at "
         "the first block); target <= 50 ns/block: %s\n",
         hit, miss, hit <= 50.0 && miss <= 50.0 ? "met" : "NOT met");
}

pkv_status bench_open_batch(pkv_engine *e, const uint64_t *ids, uint32_t num_seqs,
                            const int32_t *next_token, int decode, pkv_batch **out) {
  pkv_status st = PKV_OK;
  if (decode) {
    st = pkv_batch_begin(e, ids, NULL, num_seqs, out);
    if (st == PKV_OK) st = pkv_batch_end(*out);
    for (uint32_t s = 0; st == PKV_OK && s < num_seqs; s++)
      st = pkv_append(e, ids[s], next_token, 1);
  }
  return st == PKV_OK ? pkv_batch_begin(e, ids, NULL, num_seqs, out) : st;
}
