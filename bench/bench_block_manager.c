/*
 * bench_block_manager.c - how fast pkv's block manager is, per operation and per block.
 *
 * For pools of 4k, 64k and 512k blocks (block size 16; a tiny model shape so the pool stays
 * small: 1 KiB per block, 512 MiB at 512k, and the CPU pool is touched lazily) and prompts of
 * 512-4096 tokens with 0% or 50% of their tokens a shared prefix, it times:
 *   allocate     pkv_allocate of a prompt (prefix lookup + reservation)
 *   prefill      pkv_batch_begin + pkv_batch_end over that whole prompt (plan + seal)
 *   append       pkv_append of 1 token (decode)
 *   decode       pkv_batch_begin + pkv_batch_end of a decode step, per sequence
 *   release      pkv_release
 *   query-hit    pkv_allocate_query of a prompt whose blocks are all cached: the hit walk
 *   query-miss   pkv_allocate_query of a never-seen prompt: the walk stops at the first block
 * ns/block divides by the blocks the operation covers (the prompt's blocks; 1 for append and
 * decode). Before timing, the pool is filled with cached blocks (released prompts), so lookups
 * and evictions run against a full prefix tree, as in a long-running server.
 * Method: CLOCK_MONOTONIC around loops of calls (the clock's own cost subtracted), one warm-up
 * round, then the median over several runs. Not a test; not installed. --quick: a smoke run.
 *
 * Then (bench_request_cost.c) one request's admission, allocate + prefill + release of a 50%-shared
 * prompt, by pool size: its ratio to the 4k pool (flat: <= 1.2x), and with --old PATH the same
 * requests on another libpkv loaded by path in the same run (e.g. 0.3.0's, built from commit
 * 03f6ad6 into a directory of its own), with the ratio this/other; and the cost per KV group
 * of a Gemma-4-like engine (layer specs) beside a one-group one.
 * Then (bench_chunk_admission.c) admission per chunk (pkv_step) against whole-prompt admission
 * (pkv_allocate) in a Gemma-3-like engine: ns per prompt block and each group's peak, in the
 * same run.
 * Last (bench_eviction.c) the cost of an evicted block with retention priorities against plain
 * LRU, in the same run, as a ratio.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pkv/pkv.h>

#include "bench_chunk_admission.h"
#include "bench_eviction.h"
#include "bench_request_cost.h"
#include "bench_util.h"

enum { BLOCK_SIZE = 16, MIN_PROMPT = 512, MAX_PROMPT = 4096, PROMPTS_PER_ROUND = 8 };

typedef struct bench_cfg {
  uint32_t pool_blocks;
  uint32_t shared_pct;   /* 0 or 50 */
  uint32_t runs;         /* timed runs; the median is reported */
  uint32_t rounds;       /* rounds per run */
  uint32_t decode_steps; /* per round */
  uint32_t query_reps;   /* per prompt per round */
  double fill_fraction;  /* of the pool, filled with cached blocks before timing */
} bench_cfg;

typedef struct bench {
  pkv_engine *e;
  const bench_cfg *cfg;
  uint64_t rng;
  int32_t shared_prefix[MAX_PROMPT];
  int32_t *prompts[PROMPTS_PER_ROUND]; /* [MAX_PROMPT] each */
  uint32_t lens[PROMPTS_PER_ROUND];
  uint64_t seqs[PROMPTS_PER_ROUND];
  int32_t *miss_prompt; /* [MAX_PROMPT] */
  op_acc acc[NUM_OPS];
} bench;

static uint32_t blocks_of(uint32_t tokens) { return (tokens + BLOCK_SIZE - 1) / BLOCK_SIZE; }

/* A prompt of len tokens: the first shared_pct% from the shared prefix, the rest never seen. */
static void make_prompt(bench *b, int32_t *out, uint32_t len, uint32_t shared_pct) {
  uint32_t shared = len * shared_pct / 100;
  memcpy(out, b->shared_prefix, shared * sizeof *out);
  for (uint32_t t = shared; t < len; t++) out[t] = bench_token(&b->rng);
}

static uint32_t prompt_len(bench *b) {
  return MIN_PROMPT + (uint32_t)(bench_next(&b->rng) % (MAX_PROMPT - MIN_PROMPT + 1));
}

/* allocate, then prefill, of each prompt of the round. */
static int admit_round(bench *b) {
  for (uint32_t i = 0; i < PROMPTS_PER_ROUND; i++) {
    b->lens[i] = prompt_len(b);
    make_prompt(b, b->prompts[i], b->lens[i], b->cfg->shared_pct);
    uint32_t blocks = blocks_of(b->lens[i]);
    double t0 = bench_now_ns();
    pkv_status s = pkv_allocate(b->e, b->prompts[i], b->lens[i], NULL, &b->seqs[i], NULL);
    op_add(&b->acc[OP_ALLOCATE], t0, 1, blocks);
    if (s != PKV_OK) return bench_fail(b->e, "pkv_allocate", s);
    pkv_batch *batch = NULL;
    t0 = bench_now_ns();
    s = pkv_batch_begin(b->e, &b->seqs[i], NULL, 1, &batch);
    if (s == PKV_OK) s = pkv_batch_end(batch);
    op_add(&b->acc[OP_PREFILL], t0, 1, blocks);
    if (s != PKV_OK) return bench_fail(b->e, "pkv_batch_begin/end", s);
  }
  return 0;
}

/* Decode steps: append 1 token to each sequence, then one batch computes them. */
static int decode_round(bench *b) {
  for (uint32_t step = 0; step < b->cfg->decode_steps; step++) {
    int32_t tokens[PROMPTS_PER_ROUND];
    for (uint32_t i = 0; i < PROMPTS_PER_ROUND; i++) tokens[i] = bench_token(&b->rng);
    pkv_status s = PKV_OK;
    double t0 = bench_now_ns();
    for (uint32_t i = 0; i < PROMPTS_PER_ROUND && s == PKV_OK; i++)
      s = pkv_append(b->e, b->seqs[i], &tokens[i], 1);
    op_add(&b->acc[OP_APPEND], t0, PROMPTS_PER_ROUND, PROMPTS_PER_ROUND);
    if (s != PKV_OK) return bench_fail(b->e, "pkv_append", s);
    pkv_batch *batch = NULL;
    t0 = bench_now_ns();
    s = pkv_batch_begin(b->e, b->seqs, NULL, PROMPTS_PER_ROUND, &batch);
    if (s == PKV_OK) s = pkv_batch_end(batch);
    op_add(&b->acc[OP_DECODE], t0, PROMPTS_PER_ROUND, PROMPTS_PER_ROUND);
    if (s != PKV_OK) return bench_fail(b->e, "decode pkv_batch_begin/end", s);
  }
  return 0;
}

/* The lookup walk alone: the live prompts are fully cached; the miss prompt was never seen. */
static int query_round(bench *b) {
  uint32_t need = 0, cached = 0;
  pkv_status s = PKV_OK;
  for (uint32_t i = 0; i < PROMPTS_PER_ROUND; i++) {
    double t0 = bench_now_ns();
    for (uint32_t r = 0; r < b->cfg->query_reps && s == PKV_OK; r++)
      s = pkv_allocate_query(b->e, b->prompts[i], b->lens[i], NULL, &need, &cached);
    op_add(&b->acc[OP_QUERY_HIT], t0, b->cfg->query_reps,
           b->cfg->query_reps * blocks_of(b->lens[i]));
    if (s != PKV_OK) return bench_fail(b->e, "pkv_allocate_query (hit)", s);
    if (cached + BLOCK_SIZE < b->lens[i]) { /* a hit walk must find all but the last block */
      fprintf(stderr, "bench: a sealed prompt of %u tokens had only %u cached tokens\n", b->lens[i],
              cached);
      return -1;
    }
    uint32_t len = b->lens[i];
    make_prompt(b, b->miss_prompt, len, 0);
    t0 = bench_now_ns();
    for (uint32_t r = 0; r < b->cfg->query_reps && s == PKV_OK; r++)
      s = pkv_allocate_query(b->e, b->miss_prompt, len, NULL, &need, &cached);
    op_add(&b->acc[OP_QUERY_MISS], t0, b->cfg->query_reps, b->cfg->query_reps * blocks_of(len));
    if (s != PKV_OK) return bench_fail(b->e, "pkv_allocate_query (miss)", s);
  }
  return 0;
}

static int release_round(bench *b) {
  for (uint32_t i = 0; i < PROMPTS_PER_ROUND; i++) {
    uint32_t blocks = blocks_of(b->lens[i] + b->cfg->decode_steps);
    double t0 = bench_now_ns();
    pkv_status s = pkv_release(b->e, b->seqs[i]);
    op_add(&b->acc[OP_RELEASE], t0, 1, blocks);
    if (s != PKV_OK) return bench_fail(b->e, "pkv_release", s);
  }
  return 0;
}

static int one_round(bench *b) {
  if (admit_round(b) != 0 || decode_round(b) != 0 || query_round(b) != 0) return -1;
  return release_round(b);
}

/* Fills the pool with cached blocks: prompts of never-seen tokens, sealed, then released. */
static int fill_pool(bench *b) {
  uint64_t target = (uint64_t)(b->cfg->fill_fraction * b->cfg->pool_blocks);
  uint64_t filled = 0;
  while (filled + MAX_PROMPT / BLOCK_SIZE <= target) {
    make_prompt(b, b->miss_prompt, MAX_PROMPT, 0);
    uint64_t seq = 0;
    pkv_batch *batch = NULL;
    pkv_status s = pkv_allocate(b->e, b->miss_prompt, MAX_PROMPT, NULL, &seq, NULL);
    if (s == PKV_OK) s = pkv_batch_begin(b->e, &seq, NULL, 1, &batch);
    if (s == PKV_OK) s = pkv_batch_end(batch);
    if (s == PKV_OK) s = pkv_release(b->e, seq);
    if (s != PKV_OK) return bench_fail(b->e, "filling the pool", s);
    filled += MAX_PROMPT / BLOCK_SIZE;
  }
  return 0;
}

static pkv_status create_engine(uint32_t pool_blocks, pkv_engine **e) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1; /* 2 (K,V) x 1 layer x 16 tokens x 1 head x 8 x 4 B = 1 KiB per block */
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32;
  p.block_size = BLOCK_SIZE;
  p.num_blocks = pool_blocks;
  p.max_model_len = MAX_PROMPT + 1024;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = 1;
  return pkv_engine_create(&p, e);
}

/* Runs one (pool, shared%) configuration; out[op] = median ns per op and per block. */
static uint64_t num_evictions(pkv_engine *e) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(e, &st);
  return st.num_evictions;
}

static int bench_config(const bench_cfg *cfg, bench *b, op_result out[NUM_OPS],
                        bench_notes *notes) {
  b->cfg = cfg;
  pkv_status s = create_engine(cfg->pool_blocks, &b->e);
  if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s);
  pkv_kv_budget budget;
  memset(&budget, 0, sizeof budget);
  budget.struct_size = sizeof budget;
  if (pkv_engine_budget(b->e, &budget) == PKV_OK && budget.pool_bytes > ((uint64_t)1 << 30))
    fprintf(stderr, "bench: warning: pool of %llu bytes\n", (unsigned long long)budget.pool_bytes);
  notes->pool_bytes = budget.pool_bytes;
  int rc = fill_pool(b);
  if (rc == 0) rc = one_round(b); /* warm-up */
  uint64_t evictions0 = num_evictions(b->e), allocated = 0;
  double samples[NUM_OPS][2][BENCH_MAX_RUNS];
  for (uint32_t run = 0; rc == 0 && run < cfg->runs; run++) {
    memset(b->acc, 0, sizeof b->acc);
    for (uint32_t r = 0; rc == 0 && r < cfg->rounds; r++) rc = one_round(b);
    allocated += b->acc[OP_ALLOCATE].blocks + b->acc[OP_APPEND].blocks / BLOCK_SIZE;
    for (int op = 0; op < NUM_OPS; op++) {
      samples[op][0][run] = b->acc[op].ns / (double)b->acc[op].ops;
      samples[op][1][run] = b->acc[op].ns / (double)b->acc[op].blocks;
    }
  }
  for (int op = 0; rc == 0 && op < NUM_OPS; op++) {
    out[op].ns_per_op = bench_median(samples[op][0], cfg->runs);
    out[op].ns_per_block = bench_median(samples[op][1], cfg->runs);
  }
  notes->evictions = num_evictions(b->e) - evictions0;
  notes->blocks_allocated = allocated;
  pkv_engine_destroy(b->e);
  b->e = NULL;
  return rc;
}

int main(int argc, char **argv) {
  int quick = 0;
  const char *old_lib = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      quick = 1;
    } else if (strcmp(argv[i], "--old") == 0 && i + 1 < argc) {
      old_lib = argv[++i];
    } else {
      fprintf(stderr,
              "usage: %s [--quick] [--old PATH]\n"
              "  --old PATH  also run the per-request comparison on the libpkv at PATH (an older\n"
              "              build, e.g. 0.3.0's libpkv.so), in the same run\n",
              argv[0]);
      return strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ? 0 : 2;
    }
  }
  static const uint32_t pools[BENCH_NUM_POOLS] = {4096, 65536, 524288};
  static const uint32_t shared[BENCH_NUM_SHARED] = {0, 50};
  bench *b = calloc(1, sizeof *b);
  if (b == NULL ||
      bench_alloc_prompts(b->prompts, PROMPTS_PER_ROUND, &b->miss_prompt, MAX_PROMPT)) {
    fprintf(stderr, "bench: out of memory\n");
    return 1;
  }
  b->rng = 0x5eed;
  for (uint32_t t = 0; t < MAX_PROMPT; t++) b->shared_prefix[t] = bench_token(&b->rng);
  bench_calibrate_clock();
  static op_result results[BENCH_NUM_POOLS][BENCH_NUM_SHARED][NUM_OPS];
  bench_print_header(quick);
  int status = 0;
  for (int p = 0; p < BENCH_NUM_POOLS && status == 0; p++) {
    for (int sh = 0; sh < BENCH_NUM_SHARED && status == 0; sh++) {
      bench_cfg cfg = {pools[p],       shared[sh], quick ? 1 : 7, quick ? 1 : 8, quick ? 4 : 16,
                       quick ? 2 : 20, 1.0};
      bench_notes notes = {0, 0, 0};
      status = bench_config(&cfg, b, results[p][sh], &notes);
      if (status == 0) bench_print_rows(pools[p], shared[sh], results[p][sh], &notes);
      fflush(stdout);
    }
  }
  if (status == 0) bench_print_summary(pools, results);
  req_api apis[REQ_MAX_APIS];
  uint32_t num_apis = 1;
  req_api_linked(&apis[0]);
  if (status == 0 && old_lib != NULL) {
    if (req_api_open(&apis[1], old_lib) != 0) status = -1;
    num_apis = 2;
  }
  if (status == 0) status = bench_request_cost(apis, num_apis, quick);
  if (num_apis == 2) req_api_close(&apis[1]);
  if (status == 0) status = bench_request_groups(quick);
  if (status == 0) status = bench_admission_per_chunk(quick);
  if (status == 0) status = bench_eviction_priorities(quick);
  bench_free_prompts(b->prompts, PROMPTS_PER_ROUND, b->miss_prompt);
  free(b);
  return status == 0 ? 0 : 1;
}
