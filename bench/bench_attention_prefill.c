/*
 * bench_attention_prefill.c - the CPU attention bench's prefill table (see
 * bench_attention_prefill.h). For each prompt length the GEMMs run before and after pkv's rows
 * and the ratio uses the better, as the read probe does for decode: on a shared machine the
 * yardstick should not gain from a moment when other work slowed it. With OpenBLAS beside oneDNN
 * (bench_gemm_beside), its sgemm gets a column of its own, for runs that had only it.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_attention_prefill.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench_cpu.h"
#include "bench_gemm.h"

enum { NUM_LENGTHS = 2, MAX_KINDS = 8, MAX_GEMMS = MAX_KINDS + 1 };
#define TARGET_PREFILL 0.50

static const uint32_t LENGTHS[NUM_LENGTHS] = {2048, 8192};
static const bench_shape SHAPE = {32, 8, 128, 0, 0}; /* GQA 4, Llama-3-8B's layer */

/* The distinct GEMMs of a prompt length, each with its better GFLOP/s. */
typedef struct gemm_set {
  int num;
  const char *name[MAX_GEMMS];
  double gflops[MAX_GEMMS];
} gemm_set;

/* pkv's measurement of one row, and the GEMM set beside it (an index into the gemm_set). */
typedef struct prefill_row {
  double sec, busy;
  const char *gemm;
  int exact, gemm_index;
} prefill_row;

/* name's index in set, added when new; -1 for no GEMM. */
static int gemm_index(gemm_set *set, const char *name) {
  if (!name) return -1;
  for (int i = 0; i < set->num; i++)
    if (strcmp(set->name[i], name) == 0) return i;
  set->name[set->num] = name, set->gflops[set->num] = 0.0;
  return set->num++;
}

/* Runs each GEMM of the set at n tokens, keeping the better GFLOP/s. */
static void measure_gemms(gemm_set *set, uint32_t n, uint32_t threads, uint32_t max_runs) {
  if (set->num == 0) return;
  for (int i = 0; i < set->num; i++) {
    double busy = 0.0;
    const double gflops =
        bench_gemm_gflops(set->name[i], n, SHAPE.head_dim, SHAPE.q_heads, threads, max_runs, &busy);
    printf("GEMM %s, n = %u: %.1f GFLOP/s, busy %.0f%%\n", set->name[i], n, gflops, 100.0 * busy);
    if (gflops > set->gflops[i]) set->gflops[i] = gflops;
  }
  fflush(stdout);
  nanosleep(&(struct timespec){0, 300000000}, NULL); /* the libraries' threads spin a while */
}

/* Causal attention over one n-token prompt: pkv_attention of a one-layer engine. */
static void measure_prefill(const kv_kind *kind, prefill_row *row, uint32_t n, uint32_t threads,
                            uint32_t max_runs) {
  bench_run r;
  row->sec = -1.0, row->busy = 0.0;
  if (bench_run_open(&r, kind, SHAPE, 1, threads, n / BENCH_BLOCK_SIZE + 1, 1, n, 0) == 0)
    row->sec = bench_time_calls(bench_run_step, &r, max_runs, threads, &row->busy);
  bench_run_close(&r);
}

/* Prints a row (and the sgemm beside, when beside >= 0); returns its ratio to the GEMM (0
 * without one). */
static double print_row(const kv_kind *kind, const prefill_row *row, uint32_t n,
                        const gemm_set *set, int beside) {
  const double flops = 4.0 * SHAPE.q_heads * SHAPE.head_dim * ((double)n * (n + 1) / 2);
  const double gflops = row->sec > 0 ? flops / row->sec * 1e-9 : 0.0;
  const double gemm_gflops = row->gemm_index >= 0 ? set->gflops[row->gemm_index] : 0.0;
  printf("%-5s %6u %9.1f %8.1f %5.0f%%", kind->name, n, row->sec * 1e3, gflops, 100.0 * row->busy);
  if (gemm_gflops <= 0) {
    printf("  (no GEMM)\n");
    return 0.0;
  }
  printf("  %-11s%s %8.1f %5.0f%%", row->gemm, row->exact ? " " : "*", gemm_gflops,
         100.0 * gflops / gemm_gflops);
  if (beside >= 0) printf(" %8.1f", set->gflops[beside]);
  printf("\n");
  return gflops / gemm_gflops;
}

/* stand_in: the GEMM of a row marked *, or NULL. */
static void print_notes(const char *stand_in, double worst, const char *worst_name,
                        uint32_t worst_n) {
  if (stand_in && strncmp(stand_in, "oneDNN ", 7) == 0)
    printf("* a stand-in: oneDNN creates no matmul of the model's dtype on this CPU at the ISA it "
           "may use (unimplemented), so its fp32 matmul runs\n");
  else if (stand_in)
    printf("* a stand-in: this OpenBLAS has no GEMM of the model's dtype (none for f16; for bf16 "
           "cblas_sbgemm %s), so fp32 sgemm runs,\n  whose peak is half that of bf16 dot products "
           "(vdpbf16ps) on AVX-512 BF16\n",
#ifdef PKV_BENCH_SBGEMM
           "is used");
#else
           "is declared in cblas.h but not in the library");
#endif
  if (worst_name)
    printf("prefill: worst ratio %.0f%% (%s, %u tokens); target >= %.0f%% of the GEMM: %s\n",
           100.0 * worst, worst_name, worst_n, 100.0 * TARGET_PREFILL,
           worst >= TARGET_PREFILL ? "met" : "NOT met");
}

int bench_prefill_table(const kv_kind *kinds, int num_kinds, uint32_t threads, uint32_t max_runs,
                        int quick) {
  const char *lib = bench_gemm_library(), *openblas = bench_gemm_beside();
  const char *worst_name = NULL, *stand_in = NULL;
  printf("\nprefill: one causal prompt, GQA 4 (%u q / %u kv heads), head_dim %u; GFLOP/s = 4 * "
         "q_heads * head_dim * n(n+1)/2 / median time\n",
         SHAPE.q_heads, SHAPE.kv_heads, SHAPE.head_dim);
  if (lib) {
    printf("GEMM: %s, %u thread%s\n", lib, threads, threads == 1 ? "" : "s");
    if (openblas)
      printf("sgemm: %s, fp32, the same GEMMs (for runs that had only OpenBLAS)\n", openblas);
    printf(
        "per q head S = Q K^T [n x %u][%u x n] and O = P V [n x n][n x %u], over %u of the %u q "
        "heads (2MNK FLOPs each: the causal attention's FLOPs);\nrun before and after pkv's rows "
        "of a length, the better counts; ratio = pkv's GFLOP/s / the GEMM's\n",
        SHAPE.head_dim, SHAPE.head_dim, SHAPE.head_dim, SHAPE.q_heads / 2, SHAPE.q_heads);
  } else {
    printf("GEMM: none (the bench was built without oneDNN or OpenBLAS: apt-get install "
           "libdnnl-dev)\n");
  }
  int rc = 0;
  double worst = 1e9;
  uint32_t worst_n = 0;
  if (num_kinds > MAX_KINDS) num_kinds = MAX_KINDS;
  for (int i = 0; i < (quick ? 1 : NUM_LENGTHS); i++) {
    const uint32_t n = LENGTHS[i];
    prefill_row rows[MAX_KINDS];
    gemm_set set = {0};
    for (int k = 0; k < num_kinds; k++) {
      rows[k] = (prefill_row){0};
      rows[k].gemm = bench_gemm_for(kinds[k].dtype, &rows[k].exact);
      rows[k].gemm_index = gemm_index(&set, rows[k].gemm);
    }
    const int beside = openblas ? gemm_index(&set, "sgemm") : -1;
    measure_gemms(&set, n, threads, max_runs);
    for (int k = 0; k < num_kinds; k++) measure_prefill(&kinds[k], &rows[k], n, threads, max_runs);
    measure_gemms(&set, n, threads, max_runs);
    printf("%-5s %6s %9s %8s %6s  %-12s %8s %6s%s\n", "kv", "tokens", "ms", "GFLOP/s", "busy",
           "GEMM", "GFLOP/s", "ratio", beside >= 0 ? "    sgemm" : "");
    for (int k = 0; k < num_kinds; k++) {
      const double ratio = print_row(&kinds[k], &rows[k], n, &set, beside);
      rc |= rows[k].sec <= 0;
      if (rows[k].gemm && !rows[k].exact) stand_in = rows[k].gemm;
      if (rows[k].gemm_index >= 0 && set.gflops[rows[k].gemm_index] > 0 && ratio < worst)
        worst = ratio, worst_name = kinds[k].name, worst_n = n;
    }
  }
  print_notes(stand_in, worst, worst_name, worst_n);
  return rc;
}
