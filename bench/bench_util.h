/*
 * bench_util.h - timing, statistics, random tokens and the table of bench_block_manager.
 */
#ifndef PKV_BENCH_UTIL_H
#define PKV_BENCH_UTIL_H

#include <stdint.h>

#include <pkv/pkv.h>

enum { BENCH_MAX_RUNS = 16, BENCH_NUM_POOLS = 3, BENCH_NUM_SHARED = 2 };

/* The timed operations, in table order. */
enum {
  OP_ALLOCATE,
  OP_PREFILL,
  OP_APPEND,
  OP_DECODE,
  OP_RELEASE,
  OP_QUERY_HIT,
  OP_QUERY_MISS,
  NUM_OPS
};

typedef struct op_acc {
  double ns;       /* time in the op's loops, clock cost subtracted */
  uint64_t ops;    /* calls (or sequences, for a batch) */
  uint64_t blocks; /* blocks those calls covered */
} op_acc;

typedef struct op_result {
  double ns_per_op, ns_per_block; /* medians over the runs */
} op_result;

/* What a configuration's timed runs did besides the timings. */
typedef struct bench_notes {
  uint64_t pool_bytes;
  uint64_t evictions;        /* cached blocks reused for new contents */
  uint64_t blocks_allocated; /* approximate: prompt blocks + decode blocks */
} bench_notes;

/* Nanoseconds on CLOCK_MONOTONIC. */
double bench_now_ns(void);
/* Measures the cost of one bench_now_ns pair, subtracted by op_add. */
void bench_calibrate_clock(void);
/* Adds the time since t0 (one timed loop of ops calls covering blocks blocks) to acc. */
void op_add(op_acc *acc, double t0, uint64_t ops, uint64_t blocks);

double bench_median(const double *v, uint32_t n);

/* splitmix64, and a token id in [1, 32000) from it. */
uint64_t bench_next(uint64_t *state);
int32_t bench_token(uint64_t *state);

/* Prints what failed (with pkv_engine_last_error, or pkv_last_error when e is NULL); returns -1. */
int bench_fail(const pkv_engine *e, const char *what, pkv_status s);

/* n prompt buffers and one more, each of cap tokens; 0 or -1 (then nothing is allocated). */
int bench_alloc_prompts(int32_t **prompts, uint32_t n, int32_t **extra, uint32_t cap);
void bench_free_prompts(int32_t **prompts, uint32_t n, int32_t *extra);

/* The attention benches' batch: with decode, the prompts' tokens count as computed (the bench
 * wrote their K/V itself), each sequence gets one more token and the batch computes just that;
 * without, the batch computes the whole prompts. */
pkv_status bench_open_batch(pkv_engine *e, const uint64_t *ids, uint32_t num_seqs,
                            const int32_t *next_token, int decode, pkv_batch **out);

void bench_print_header(int quick);
void bench_print_rows(uint32_t pool_blocks, uint32_t shared_pct, const op_result r[NUM_OPS],
                      const bench_notes *notes);
void bench_print_summary(const uint32_t pools[BENCH_NUM_POOLS],
                         op_result results[BENCH_NUM_POOLS][BENCH_NUM_SHARED][NUM_OPS]);

#endif /* PKV_BENCH_UTIL_H */
