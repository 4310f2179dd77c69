/*
 * bench_plans.c - what a step's plan costs to carry to other processes' ranks (DESIGN.md §10):
 * a decider (ranks ONE, rank 0 of tp_size 2) plans decode steps of S sequences at a context of C
 * tokens (pkv_batch_begin: the step's own planning, the reference), exports each plan
 * (pkv_batch_export_plan) and a pool engine (ranks POOL, rank 1) imports it (pkv_plan_import).
 * Prints the plan's bytes and the median microseconds of each, and export and import as ratios
 * of the planning time of the same run. CPU pools; no attention runs (the KV side is not what
 * is measured).
 * Then a store's cost across ranks: a value holds every rank's slice of its block (one key, one
 * lookup and one write per block however many ranks), so an engine of tp ranks (ranks ALL) reads
 * and writes the same bytes per block as one engine of the whole model. A prompt written through
 * to a FILE store (the time to drain the writer) and hit from it by a fresh engine (pkv_allocate,
 * which waits for the store), per block, tp 1 against tp 2 and 4 of the same model.
 * Run: build/bench/bench_plans [--quick]
 */
#define _XOPEN_SOURCE 700
#include <pkv/pkv.h>

#include <ftw.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

enum { BS = 16 };

static pkv_engine *make(uint32_t ranks, uint32_t tp_rank, uint32_t seqs, uint32_t context) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = 2, p.num_kv_heads = 2, p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.num_threads = 1;
  p.block_size = BS, p.tp_size = 2, p.tp_rank = tp_rank, p.ranks = ranks;
  p.max_num_seqs = seqs, p.max_model_len = context + 256;
  p.num_blocks = seqs * ((context + 256) / BS + 1);
  pkv_engine *e = NULL;
  const pkv_status s = pkv_engine_create(&p, &e);
  if (s != PKV_OK) {
    bench_fail(NULL, "pkv_engine_create", s);
    exit(1);
  }
  return e;
}

static void check(pkv_status s, const pkv_engine *e, const char *what) {
  if (s != PKV_OK) {
    bench_fail(e, what, s);
    exit(1);
  }
}

static void run(uint32_t seqs, uint32_t context, uint32_t steps) {
  pkv_engine *decider = make(PKV_RANKS_ONE, 0, seqs, context);
  pkv_engine *pool = make(PKV_RANKS_POOL, 1, seqs, context);
  uint64_t *ids = malloc(sizeof *ids * seqs);
  uint32_t *counts = malloc(sizeof *counts * seqs);
  int32_t *prompt = malloc(sizeof *prompt * context);
  uint64_t rng = 7;
  for (uint32_t i = 0; i < seqs; ++i) {
    for (uint32_t t = 0; t < context; ++t) prompt[t] = bench_token(&rng);
    check(pkv_allocate(decider, prompt, context, NULL, &ids[i], NULL), decider, "pkv_allocate");
  }
  /* The prompts' KV counts as computed: a batch of them ends (no attention runs). Its plan goes
   * to the pool too, as step 0. */
  pkv_batch *b = NULL, *pb = NULL;
  check(pkv_batch_begin(decider, ids, NULL, seqs, &b), decider, "pkv_batch_begin");
  uint64_t len = 0, cap = 0;
  uint8_t *plan = NULL;
  check(pkv_batch_export_plan(b, NULL, 0, &len), decider, "pkv_batch_export_plan");
  cap = len, plan = malloc(cap);
  check(pkv_batch_export_plan(b, plan, cap, &len), decider, "pkv_batch_export_plan");
  check(pkv_plan_import(pool, plan, len, &pb), pool, "pkv_plan_import");
  check(pkv_batch_end(pb), pool, "pkv_batch_end");
  check(pkv_batch_end(b), decider, "pkv_batch_end");
  double *begin_us = malloc(sizeof(double) * steps), *export_us = malloc(sizeof(double) * steps);
  double *import_us = malloc(sizeof(double) * steps);
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < seqs; ++i) counts[i] = 1;
  for (uint32_t step = 0; step < steps; ++step) {
    for (uint32_t i = 0; i < seqs; ++i) {
      const int32_t token = bench_token(&rng);
      check(pkv_append(decider, ids[i], &token, 1), decider, "pkv_append");
    }
    double t0 = bench_now_ns();
    check(pkv_batch_begin(decider, ids, counts, seqs, &b), decider, "pkv_batch_begin");
    double t1 = bench_now_ns();
    check(pkv_batch_export_plan(b, plan, cap, &len), decider, "pkv_batch_export_plan");
    if (len > cap) { /* the first decode plan: its size asked, then written */
      cap = len, plan = realloc(plan, cap);
      t1 = bench_now_ns();
      check(pkv_batch_export_plan(b, plan, cap, &len), decider, "pkv_batch_export_plan");
    }
    const double t2 = bench_now_ns();
    check(pkv_plan_import(pool, plan, len, &pb), pool, "pkv_plan_import");
    const double t3 = bench_now_ns();
    check(pkv_batch_end(pb), pool, "pkv_batch_end");
    check(pkv_batch_end(b), decider, "pkv_batch_end");
    begin_us[step] = (t1 - t0) / 1e3, export_us[step] = (t2 - t1) / 1e3;
    import_us[step] = (t3 - t2) / 1e3;
    bytes = len;
  }
  const double plan_med = bench_median(begin_us, steps);
  const double exp_med = bench_median(export_us, steps), imp_med = bench_median(import_us, steps);
  printf("%8u %8u %12llu %12.1f %12.1f %12.1f %8.2f %8.2f\n", seqs, context,
         (unsigned long long)bytes, plan_med, exp_med, imp_med, exp_med / plan_med,
         imp_med / plan_med);
  fflush(stdout);
  free(begin_us), free(export_us), free(import_us), free(plan);
  free(ids), free(counts), free(prompt);
  pkv_engine_destroy(pool);
  pkv_engine_destroy(decider);
}

static pkv_engine *store_engine(uint32_t tp, const char *dir, uint32_t blocks) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE, sp.path = dir, sp.write_queue_blocks = blocks + 1;
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 8, p.num_q_heads = 8, p.num_kv_heads = 8, p.head_dim = 128;
  p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CPU, p.num_threads = 1, p.block_size = BS;
  p.tp_size = tp, p.ranks = tp > 1 ? PKV_RANKS_ALL : PKV_RANKS_ONE;
  p.num_blocks = blocks + 8, p.host_num_blocks = blocks + 8, p.store = &sp;
  pkv_engine *e = NULL;
  check(pkv_engine_create(&p, &e), NULL, "pkv_engine_create (store)");
  return e;
}

static int remove_entry(const char *path, const struct stat *st, int kind, struct FTW *f) {
  (void)st, (void)kind, (void)f;
  return remove(path);
}

/* us per block to write a prompt's blocks through (until the writer drained) and to hit them. */
static void store_cost(uint32_t tp, uint32_t blocks, uint32_t reps) {
  double write_us[16], hit_us[16];
  uint64_t value_bytes = 0;
  int32_t *prompt = malloc(sizeof *prompt * (blocks * BS + 1));
  uint64_t rng = 11;
  for (uint32_t r = 0; r < reps; ++r) {
    char dir[] = "/tmp/pkv-bench-plans-XXXXXX";
    if (!mkdtemp(dir)) exit(1);
    for (uint32_t t = 0; t <= blocks * BS; ++t) prompt[t] = bench_token(&rng);
    const uint32_t n = blocks * BS + 1; /* every block whole, and one token to compute */
    pkv_engine *e = store_engine(tp, dir, blocks);
    uint64_t id = 0;
    pkv_batch *b = NULL;
    check(pkv_allocate(e, prompt, n, NULL, &id, NULL), e, "pkv_allocate");
    check(pkv_batch_begin(e, &id, NULL, 1, &b), e, "pkv_batch_begin");
    const double t0 = bench_now_ns();
    check(pkv_batch_end(b), e, "pkv_batch_end"); /* seals the blocks: written through */
    pkv_engine_destroy(e);                       /* the writer drains first */
    const double t1 = bench_now_ns();
    e = store_engine(tp, dir, blocks);
    uint32_t cached = 0;
    const double t2 = bench_now_ns();
    check(pkv_allocate(e, prompt, n, NULL, &id, &cached), e, "pkv_allocate (hit)");
    const double t3 = bench_now_ns();
    if (cached != blocks * BS) {
      fprintf(stderr, "bench_plans: the store served %u tokens of %u\n", cached, blocks * BS);
      exit(1);
    }
    pkv_kv_budget kb;
    kb.struct_size = sizeof kb;
    check(pkv_engine_budget(e, &kb), e, "pkv_engine_budget");
    value_bytes = kb.block_bytes * tp;
    pkv_engine_destroy(e);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    write_us[r] = (t1 - t0) / 1e3 / blocks, hit_us[r] = (t3 - t2) / 1e3 / blocks;
  }
  printf("%8u %14llu %14.1f %14.1f\n", tp, (unsigned long long)value_bytes,
         bench_median(write_us, reps), bench_median(hit_us, reps));
  fflush(stdout);
  free(prompt);
}

int main(int argc, char **argv) {
  const int quick = argc > 1 && !strcmp(argv[1], "--quick");
  const uint32_t steps = quick ? 5 : 31;
  bench_calibrate_clock();
  printf("decode steps: the decider plans (pkv_batch_begin), exports, a pool engine imports; "
         "median of %u steps, microseconds\n",
         steps);
  printf("%8s %8s %12s %12s %12s %12s %8s %8s\n", "seqs", "context", "plan bytes", "plan us",
         "export us", "import us", "exp/plan", "imp/plan");
  static const uint32_t shapes[][2] = {{1, 4096}, {32, 4096}, {256, 4096}, {64, 32768}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    if (!quick || shapes[i][0] * shapes[i][1] <= 32 * 4096) run(shapes[i][0], shapes[i][1], steps);
  /* 8 layers, 8 kv heads of 128, bf16: 512 KiB of K and V a block for the whole model. */
  printf("\nstore across ranks: a 64-block prompt written through to a FILE store and hit by a "
         "fresh engine, median of %u, microseconds per block\n",
         quick ? 1u : 5u);
  printf("%8s %14s %14s %14s\n", "tp", "value payload", "write us", "hit us");
  for (uint32_t tp = 1; tp <= 4; tp *= 2) store_cost(tp, quick ? 8 : 64, quick ? 1 : 5);
  return 0;
}
