/*
 * bench_attention.c - how close pkv_attention on the CPU runs to the machine's limits: decode to
 * its read bandwidth, prefill to a GEMM library's matrix throughput, both measured in the same run.
 *
 * Decode (issue 13: >= 80% of the read probe for bf16 and f16 KV, >= 60% for fp8): one new token
 * per sequence over a cached context. Axes: KV bf16, f16, fp8 e4m3 (under a bf16 model); GQA 1,
 * 4, 8 (8 kv heads: 8, 32, 64 q heads; head_dim 256 has 4 kv heads, as Gemma's, so a token's K/V
 * is as large as at 128); head_dim 64, 128, 256; 1 sequence (pkv splits it over the keys) and 64;
 * contexts 2k, 8k, 32k, 128k. The default runs the whole cross of KV x sequences x contexts at
 * GQA 4 / head_dim 128 (Llama-3-8B's layer), then each other GQA and head_dim with the rest held
 * there, for every KV dtype and sequence count at contexts 2k and 32k (2k and 8k for 64
 * sequences), and 1 sequence at 32k under a sliding window of 4096 (bf16, e4m3: a windowed layer
 * reads its window's keys); --full runs the whole cross (216 cases and the windows, tens of
 * minutes); --quick 6 cases at GQA 4 / head_dim 128 and prefill at 2k only, in under a minute;
 * --prefill the prefill table alone, --mla the MLA table alone.
 * A step is pkv_attention over every layer of an engine of L layers, each layer's cache its own
 * memory, with L chosen so that a step reads >= 512 MiB of K/V: 16x the 32 MiB L3 of the machines
 * we run on, so no cache flush is needed and none is done. Cases whose pool would pass 4.5 GiB are
 * skipped with a line that says so. GB/s counts the K/V bytes a step must read:
 * L * seqs * 2 * keys * kv_heads * head_dim * kv bytes, keys = context + 1, or the window. The
 * contexts are written into the pool directly (pkv_pool_info + the batch's tables, as a host
 * kernel would), so filling 128k tokens costs no prefill.
 * The yardstick is a read-bandwidth probe with the engine's thread count: a sum over 1 GiB, best
 * of several, at the start, before each case and at the end. A row's ratio divides by the better
 * of the start probe and its own; the closing lines divide by the best probe of the run and give
 * the worst ratio of bf16/f16 cases and of fp8 cases, with the kernel variant that ran
 * (pkv_pool_info.kernels: picked by CPUID, or forced by --isa NAME, which sets PKV_CPU_ISA).
 * A second yardstick, the scattered-block probe: the same sum over the same 1 GiB in blocks of a
 * case's K block size (16 tokens of every kv head: 8 to 32 KiB here), visited in a shuffled
 * order, as a long-running engine's fragmented pool lays a sequence out; measured once per block
 * size, and each row's `scat` divides by it. The bench's own tables come from a fresh pool, in
 * order, so a kernel that prefetches ahead can pass 100% of it.
 *
 * Prefill (target >= 50% of the GEMM): one causal prompt of 2k and of 8k tokens, GQA 4 / head_dim
 * 128, each KV dtype; GFLOP/s counts 4 * q_heads * head_dim per (query, key) pair, n(n+1)/2 pairs.
 * Beside it, a GEMM library (bench_gemm.c) runs the attention's matmuls as GEMMs of the same
 * shapes, per q head S = Q K^T ([n][hd] x [hd][n]) and O = P V ([n][n] x [n][hd]), over half the q
 * heads: the same FLOPs, since a GEMM computes the whole n x n square where causal attention needs
 * half. The library is oneDNN (libdnnl-dev) when the bench is built with it: its matmul of the
 * model's dtype (bf16 or f16 in, fp32 out), with the code oneDNN picks for the CPU (AVX-512 BF16,
 * AMX); where it has no matmul of the dtype (oneDNN 2.6 has no f16 one on Zen 4), its f32 matmul
 * stands in, and the output says so. Without oneDNN, OpenBLAS (libopenblas-dev): cblas_sbgemm for
 * bf16 when the library exports it, else sgemm (fp32) stands in; with both, OpenBLAS's sgemm is a
 * column of its own. Threads: the bench's count. Built with neither, the bench runs without the
 * GEMM column and says so.
 *
 * Each time is the median of several calls after a warm-up (bench_time_calls). The machine may be
 * shared: the probes and the busy column (CPU time of the process over wall time * threads, during
 * the timed calls) show how much of it pkv had.
 * MLA decode (issue 15): 128 q heads over DeepSeek V3's latent (512 + 64), bf16 and fp8 latents,
 * contexts 2k-32k; GB/s of latent read against the probe, and GFLOP/s against the bf16 model's
 * GEMM of the prefill: 128 heads do 242 FLOPs per latent byte, so a CPU runs out of multiply-adds
 * long before memory.
 * Sparse MLA decode (issue 29; bench_attention_sparse.c): DeepSeek V3.2's indexer, top-k 2048 and
 * MLA over the kept latents at 32k, 64k and 128k, against dense MLA decode of the same engine.
 * Usage: bench_attention [--quick | --full] [--prefill | --mla | --sparse] [--heads N]
 * [--threads N] [--isa NAME]. Not a test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pkv/pkv.h>

#include "bench_attention_engine.h"
#include "bench_attention_prefill.h"
#include "bench_attention_sparse.h"
#include "bench_cpu.h"
#include "bench_gemm.h"
#include "bench_util.h"

enum { BLOCK = BENCH_BLOCK_SIZE, MAX_CASES = 256, NUM_KINDS = 3 };
#define STEP_MIN_BYTES (512.0 * 1048576.0)
#define POOL_LIMIT_BYTES (4.5 * 1073741824.0)
#define PROBE_BYTES ((size_t)1 << 30)
#define TARGET_DECODE 0.80
#define TARGET_DECODE_FP8 0.60
#define MLA_STEP_MIN_BYTES (64.0 * 1048576.0)
enum { MLA_Q_HEADS = 128, MLA_LATENT = 576, MLA_RANK = 512 };

/* ---------------------------------------------------------------- decode */
static const kv_kind KINDS[NUM_KINDS] = {{"bf16", PKV_DTYPE_BF16, 0},
                                         {"f16", PKV_DTYPE_F16, 0},
                                         {"e4m3", PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3}};

/* head_dim 256 keeps 4 kv heads (Gemma's), the others 8. */
static bench_shape make_shape(uint32_t gqa, uint32_t head_dim, uint32_t window) {
  const uint32_t kv_heads = head_dim >= 256 ? 4 : 8;
  return (bench_shape){kv_heads * gqa, kv_heads, head_dim, window, 0};
}

/* A decode case, and what it measured. */
typedef struct decode_case {
  int kind;
  uint32_t gqa, head_dim, seqs, ctx, window;
  double gbs;       /* 0: skipped or failed */
  double scattered; /* the scattered-block probe of its block size */
} decode_case;

/* Bytes of one K (or V) block of a case: BLOCK tokens of every kv head. */
static size_t case_block_bytes(const decode_case *c) {
  return (size_t)BLOCK * make_shape(c->gqa, c->head_dim, c->window).kv_heads * c->head_dim *
         (KINDS[c->kind].kv_dtype ? 1 : 2);
}

/* The tables a run prints: all, or one of them (--prefill, --mla). */
typedef enum run_tables { TABLES_ALL, TABLES_PREFILL, TABLES_MLA, TABLES_SPARSE } run_tables;

/* What every case needs. */
typedef struct bench_cfg {
  uint32_t threads, max_runs;
  uint32_t sparse_heads; /* the sparse MLA table's q heads (--heads; DeepSeek's 128) */
  const uint64_t *probe_buf;
  double best_probe; /* the best probe of the run so far */
  size_t block_bytes[8];
  double block_probe[8]; /* the scattered-block probes, by block size (0: none yet) */
  double min_busy;       /* the lowest busy of the decode rows */
  const char *kernels;
  run_tables tables;
} bench_cfg;

static double probe_now(bench_cfg *cfg, int reps) {
  const double gbs = bench_probe(cfg->probe_buf, PROBE_BYTES, cfg->threads, reps);
  if (gbs > cfg->best_probe) cfg->best_probe = gbs;
  return gbs;
}

/* The scattered-block probe of block_bytes (measured once, best of 3); 0 when it cannot run. */
static double scattered_probe(bench_cfg *cfg, size_t block_bytes) {
  int i = 0;
  for (; i < 8 && cfg->block_bytes[i]; i++)
    if (cfg->block_bytes[i] == block_bytes) return cfg->block_probe[i];
  if (i == 8) return 0.0;
  cfg->block_bytes[i] = block_bytes;
  cfg->block_probe[i] =
      bench_probe_blocks(cfg->probe_buf, PROBE_BYTES, block_bytes, cfg->threads, 3);
  return cfg->block_probe[i];
}

/* "32k", or "32k/w4k" under a window of 4096. */
static const char *context_name(const decode_case *c, char *buf, size_t cap) {
  if (c->window)
    snprintf(buf, cap, "%uk/w%uk", c->ctx / 1024, c->window / 1024);
  else
    snprintf(buf, cap, "%uk", c->ctx / 1024);
  return buf;
}

static void print_case(const decode_case *c, bench_shape sh) {
  char ctx[32];
  printf("%-5s %4u %4u/%-3u %4u %5u %8s", KINDS[c->kind].name, c->gqa, sh.q_heads, sh.kv_heads,
         c->head_dim, c->seqs, context_name(c, ctx, sizeof ctx));
}

/* Measures one decode case (a row of the table) into c->gbs; returns 1 when it failed. */
static int decode_case_run(bench_cfg *cfg, decode_case *c, double start_probe) {
  const kv_kind *kind = &KINDS[c->kind];
  const bench_shape sh = make_shape(c->gqa, c->head_dim, c->window);
  const size_t kv_elt = kind->kv_dtype ? 1 : 2;
  const double token_bytes = 2.0 * sh.kv_heads * sh.head_dim * kv_elt; /* K and V */
  const uint32_t keys = c->window && c->window < c->ctx + 1 ? c->window : c->ctx + 1;
  const double layer_read = (double)c->seqs * keys * token_bytes;
  const uint32_t layers = (uint32_t)((STEP_MIN_BYTES + layer_read - 1) / layer_read);
  const uint64_t blocks = (uint64_t)c->seqs * ((c->ctx + BLOCK) / BLOCK) + 1;
  const double pool_bytes = (double)layers * blocks * BLOCK * token_bytes;
  c->gbs = 0.0;
  print_case(c, sh);
  if (pool_bytes > POOL_LIMIT_BYTES) {
    printf("  skipped: its pool would take %.1f GiB (cap %.1f GiB)\n", pool_bytes / 1073741824.0,
           POOL_LIMIT_BYTES / 1073741824.0);
    return 0;
  }
  fflush(stdout);
  const double probe = probe_now(cfg, 3);
  bench_run r;
  double busy = 0.0, sec = -1.0;
  if (bench_run_open(&r, kind, sh, layers, cfg->threads, blocks, c->seqs, c->ctx, 1) == 0)
    sec = bench_time_calls(bench_run_step, &r, cfg->max_runs, cfg->threads, &busy);
  const char *kernels = r.kernels;
  bench_run_close(&r);
  if (sec <= 0) {
    printf("  failed\n");
    return 1;
  }
  const double bytes = layers * layer_read, best = probe > start_probe ? probe : start_probe;
  c->gbs = bytes / sec * 1e-9;
  c->scattered = scattered_probe(cfg, case_block_bytes(c));
  cfg->kernels = kernels;
  if (busy < cfg->min_busy) cfg->min_busy = busy;
  char scat[16] = "     -";
  if (c->scattered > 0) snprintf(scat, sizeof scat, "%5.0f%%", 100.0 * c->gbs / c->scattered);
  printf(" %6u %6.0f %8.2f %7.1f %6.1f %5.0f%% %s %4.0f%%  %s\n", layers, bytes / 1048576.0,
         sec * 1e3, c->gbs, probe, 100.0 * c->gbs / best, scat, 100.0 * busy, kernels);
  fflush(stdout);
  return 0;
}

static const uint32_t ALL_GQA[] = {1, 4, 8}, ALL_HD[] = {64, 128, 256}, ALL_SEQS[] = {1, 64},
                      ALL_CTX[] = {2048, 8192, 32768, 131072};

static int add_case(decode_case *cases, int n, int kind, uint32_t gqa, uint32_t hd, uint32_t seqs,
                    uint32_t ctx, uint32_t window) {
  if (n < MAX_CASES) cases[n++] = (decode_case){kind, gqa, hd, seqs, ctx, window, 0.0, 0.0};
  return n;
}

/* Whether mode (0 default, 1 quick, 2 full) runs this case of the full-attention cross. */
static int case_in_mode(int mode, uint32_t gqa, uint32_t hd, uint32_t seqs, uint32_t ctx) {
  const int base = gqa == 4 && hd == 128, one_axis = gqa == 4 || hd == 128;
  const int variation_ctx = ctx == 2048 || ctx == (seqs == 1 ? 32768u : 8192u);
  const int quick_ctx = ctx == (seqs == 1 ? 8192u : 2048u);
  if (mode == 1) return base && quick_ctx;
  return mode == 2 || base || (one_axis && variation_ctx);
}

/* The cases of a mode, in table order (GQA 4 / head_dim 128 first); returns how many. */
static int build_cases(decode_case *cases, int mode) {
  int n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int g = 0; g < 3; g++)
      for (int h = 0; h < 3; h++)
        for (int k = 0; k < NUM_KINDS; k++)
          for (int s = 0; s < 2; s++)
            for (int x = 0; x < 4; x++) {
              const uint32_t gqa = ALL_GQA[g], hd = ALL_HD[h], seqs = ALL_SEQS[s], ctx = ALL_CTX[x];
              if ((gqa == 4 && hd == 128) == (pass == 0) && case_in_mode(mode, gqa, hd, seqs, ctx))
                n = add_case(cases, n, k, gqa, hd, seqs, ctx, 0);
            }
  for (int k = 0; mode != 1 && k < NUM_KINDS; k += 2) /* bf16, e4m3 */
    n = add_case(cases, n, k, 4, 128, 1, 32768, 4096);
  return n;
}

/* The worst ratio of the measured cases of KV kinds fp8 or not, against probe; NULL if none. */
static const decode_case *worst_case(const decode_case *cases, int n, int fp8) {
  const decode_case *worst = NULL;
  for (int i = 0; i < n; i++)
    if (cases[i].gbs > 0 && (KINDS[cases[i].kind].kv_dtype != 0) == fp8 &&
        (!worst || cases[i].gbs < worst->gbs))
      worst = &cases[i];
  return worst;
}

static void print_worst(const decode_case *cases, int n, int fp8, double probe, double target) {
  const decode_case *w = worst_case(cases, n, fp8);
  printf("decode, %s KV: ", fp8 ? "fp8 (e4m3)" : "bf16/f16");
  if (!w) {
    printf("no case measured\n");
    return;
  }
  const double ratio = w->gbs / probe;
  char ctx[32];
  printf("worst ratio %.0f%% (%.1f GB/s: %s, GQA %u, head_dim %u, %u seq%s, context %s); target "
         "%.0f%%: %s\n",
         100.0 * ratio, w->gbs, KINDS[w->kind].name, w->gqa, w->head_dim, w->seqs,
         w->seqs == 1 ? "" : "s", context_name(w, ctx, sizeof ctx), 100.0 * target,
         ratio >= target ? "met" : "NOT met");
}

/* ---------------------------------------------------------------- MLA decode */
/* DeepSeek V3's attention (128 q heads over one latent of 512 + 64): every latent is read once
 * for all 128 heads, which do 2 * (576 + 512) FLOPs each with it, 242 FLOPs per bf16 byte. Rows
 * give GB/s of latent read against the read probe, and GFLOP/s against the bf16 model's GEMM of
 * the same run (bench_gemm_for: oneDNN's bf16 matmul, or OpenBLAS's; n 2048, k 512): on a CPU this
 * decode is bound by the multiply-adds, not memory. */
static int mla_table(bench_cfg *cfg, int mode, double start_probe) {
  static const uint32_t ctxs[] = {2048, 8192, 32768}, seqs_of[] = {1, 8};
  int exact = 0, rc = 0;
  const char *gemm = bench_gemm_for(PKV_DTYPE_BF16, &exact);
  double busy = 0.0;
  const double gemm_gflops =
      gemm ? bench_gemm_gflops(gemm, 2048, MLA_RANK, 2, cfg->threads, cfg->max_runs, &busy) : 0.0;
  printf(
      "\nMLA decode: %u q heads over one latent of %u (kv_lora_rank %u), 1 new token per sequence;"
      " GB/s = latent bytes read / median step time; GFLOP/s = 2 * %u * (%u + %u) per key;\n",
      MLA_Q_HEADS, MLA_LATENT, MLA_RANK, MLA_Q_HEADS, MLA_LATENT, MLA_RANK);
  if (gemm_gflops > 0)
    printf("yardstick: GEMM %s (n 2048, k %u) %.1f GFLOP/s; gemm%% = GFLOP/s / that\n", gemm,
           MLA_RANK, gemm_gflops);
  else
    printf("no GEMM in this build (oneDNN or OpenBLAS): gemm%% not measured\n");
  printf("%-5s %5s %8s %6s %6s %8s %7s %6s %6s %7s %6s %5s\n", "kv", "seqs", "context", "layers",
         "MiB", "ms/step", "GB/s", "probe", "ratio", "GFLOP/s", "gemm%", "busy");
  for (int k = 0; k < NUM_KINDS; k += 2) /* bf16, e4m3 */
    for (int si = 0; si < 2; si++)
      for (int x = 0; x < 3; x++) {
        const uint32_t seqs = seqs_of[si], ctx = ctxs[x];
        if ((mode == 1 && (k != 0 || seqs != 1 || ctx != 2048)) ||
            (mode == 0 && seqs != 1 && ctx != 2048))
          continue;
        const kv_kind *kind = &KINDS[k];
        const bench_shape sh = {MLA_Q_HEADS, 1, MLA_LATENT, 0, MLA_RANK};
        const double key_bytes = MLA_LATENT * (kind->kv_dtype ? 1.0 : 2.0);
        const double layer_read = (double)seqs * (ctx + 1) * key_bytes;
        const uint32_t layers = (uint32_t)((MLA_STEP_MIN_BYTES + layer_read - 1) / layer_read);
        const uint64_t blocks = (uint64_t)seqs * ((ctx + BLOCK) / BLOCK) + 1;
        printf("%-5s %5u %7uk", kind->name, seqs, ctx / 1024);
        fflush(stdout);
        const double probe = probe_now(cfg, 3), best = probe > start_probe ? probe : start_probe;
        bench_run r;
        double sec = -1.0;
        busy = 0.0;
        if (bench_run_open(&r, kind, sh, layers, cfg->threads, blocks, seqs, ctx, 1) == 0)
          sec = bench_time_calls(bench_run_step, &r, cfg->max_runs, cfg->threads, &busy);
        bench_run_close(&r);
        if (sec <= 0) {
          printf("  failed\n");
          rc = 1;
          continue;
        }
        const double bytes = layers * layer_read, gbs = bytes / sec * 1e-9;
        const double flops =
            (double)layers * seqs * (ctx + 1) * 2.0 * MLA_Q_HEADS * (MLA_LATENT + MLA_RANK);
        const double gflops = flops / sec * 1e-9;
        printf(" %6u %6.0f %8.2f %7.2f %6.1f %5.1f%% %7.1f %5.0f%% %4.0f%%\n", layers,
               bytes / 1048576.0, sec * 1e3, gbs, probe, 100.0 * gbs / best, gflops,
               gemm_gflops > 0 ? 100.0 * gflops / gemm_gflops : 0.0, 100.0 * busy);
        fflush(stdout);
      }
  return rc;
}

/* ---------------------------------------------------------------- main */
static int usage(const char *argv0) {
  fprintf(stderr,
          "usage: %s [--quick | --full] [--prefill | --mla | --sparse] [--heads N] [--threads N]"
          " [--isa NAME]\n"
          "  --prefill   the prefill table only\n"
          "  --mla       the MLA decode table only\n"
          "  --sparse    the sparse MLA decode table only (--heads: its q heads, 1 .. 128)\n"
          "  --isa NAME  sets PKV_CPU_ISA: avx512-bf16, avx512, avx2 or baseline\n",
          argv0);
  return 2;
}

/* Reads the options into *mode (0 default, 1 quick, 2 full) and cfg; 0, or 2 after the usage. */
static int parse_args(int argc, char **argv, int *mode, bench_cfg *cfg) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      *mode = 1;
    else if (strcmp(argv[i], "--full") == 0)
      *mode = 2;
    else if (strcmp(argv[i], "--prefill") == 0)
      cfg->tables = TABLES_PREFILL;
    else if (strcmp(argv[i], "--mla") == 0)
      cfg->tables = TABLES_MLA;
    else if (strcmp(argv[i], "--sparse") == 0)
      cfg->tables = TABLES_SPARSE;
    else if (strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
      cfg->sparse_heads = (uint32_t)atoi(argv[++i]);
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      cfg->threads = (uint32_t)atoi(argv[++i]);
    else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc)
      setenv("PKV_CPU_ISA", argv[++i], 1); /* read when an engine is created */
    else
      return usage(argv[0]);
  }
  if (cfg->threads < 1 || cfg->threads > 64) cfg->threads = 1;
  if (cfg->sparse_heads < 1 || cfg->sparse_heads > 128) return usage(argv[0]);
  cfg->max_runs = *mode == 1 ? 3 : 7;
  return 0;
}

/* The closing probe and lines: worst ratios against the best probe of the run. */
static void print_summary(bench_cfg *cfg, const decode_case *cases, int num_cases, double probe0) {
  const double probe1 = probe_now(cfg, 5), best = cfg->best_probe;
  printf("\nread-bandwidth probe again at the end: %.1f GB/s (start %.1f, best of the run %.1f)\n",
         probe1, probe0, best);
  print_worst(cases, num_cases, 0, best, TARGET_DECODE);
  print_worst(cases, num_cases, 1, best, TARGET_DECODE_FP8);
  double low = 0.0, high = 0.0;
  for (int i = 0; i < num_cases; i++) {
    if (cases[i].gbs <= 0 || cases[i].scattered <= 0) continue;
    const double r = cases[i].gbs / cases[i].scattered;
    low = low == 0.0 || r < low ? r : low;
    high = r > high ? r : high;
  }
  if (high > 0)
    printf("decode against the scattered-block probe of each row's block size: %.0f%% to %.0f%%\n",
           100.0 * low, 100.0 * high);
  printf("decode kernels: %s; ratios against the best probe of the run, %.1f GB/s\n", cfg->kernels,
         best);
  if (cfg->min_busy < 0.9)
    printf("busy fell to %.0f%% in a decode row: other work shared the cores, so those ratios "
           "understate pkv\n",
           100.0 * cfg->min_busy);
}

int main(int argc, char **argv) {
  const double t0 = bench_now_ns();
  int mode = 0;
  bench_cfg cfg = {
      (uint32_t)sysconf(_SC_NPROCESSORS_ONLN), 7, 128, NULL, 0.0, {0}, {0}, 1.0, "?", TABLES_ALL};
  if (parse_args(argc, argv, &mode, &cfg) != 0) return 2;
  const char *isa = getenv("PKV_CPU_ISA"), *kernels = bench_kernels();
  uint64_t *probe_buf = kernels ? bench_probe_buffer(PROBE_BYTES) : NULL;
  if (!probe_buf) return kernels ? fprintf(stderr, "bench: no memory for the 1 GiB probe\n"), 1 : 2;
  cfg.probe_buf = probe_buf, cfg.kernels = kernels;
  char cpu[256];
  bench_cpu_model(cpu, sizeof cpu);
  printf("pkv bench_attention%s: CPU %s, %u thread%s; kernels %s (PKV_CPU_ISA %s)\n",
         mode == 1   ? " --quick"
         : mode == 2 ? " --full"
                     : "",
         cpu, cfg.threads, cfg.threads == 1 ? "" : "s", kernels,
         isa ? isa : "unset: picked by CPUID");
  const double probe0 = probe_now(&cfg, 5);
  printf("read-bandwidth probe (a sum over 1 GiB on the same threads, best of 5): %.1f GB/s\n",
         probe0);
  static decode_case cases[MAX_CASES];
  const int num_cases = cfg.tables == TABLES_ALL ? build_cases(cases, mode) : 0;
  if (num_cases > 0) {
    printf(
        "scattered-block probe (the same sum in blocks of a K block's size, visited in a shuffled "
        "order, best of 3):");
    for (int i = 0; i < num_cases; i++) {
      const size_t b = case_block_bytes(&cases[i]);
      int seen = 0;
      for (int j = 0; j < i; j++) seen |= case_block_bytes(&cases[j]) == b;
      if (!seen) printf(" %zu KiB %.1f GB/s;", b / 1024, scattered_probe(&cfg, b));
    }
    printf("\n");
  }
  printf("\n");
  if (num_cases > 0) {
    printf(
        "decode: 1 new token per sequence, block size %d; a step = every layer, >= 512 MiB of "
        "K/V; GB/s = K/V bytes read / median step time;\nprobe = best of 3 just before the case; "
        "ratio = GB/s / the better of it and the start probe; scat = GB/s / the scattered-block probe "
        "of its block size\n",
        BLOCK);
    printf("%-5s %4s %8s %4s %5s %8s %6s %6s %8s %7s %6s %6s %6s %5s  %s\n", "kv", "GQA", "q/kv",
           "hd", "seqs", "context", "layers", "MiB", "ms/step", "GB/s", "probe", "ratio", "scat",
           "busy", "kernels");
  }
  int rc = 0;
  for (int i = 0; i < num_cases; i++) rc |= decode_case_run(&cfg, &cases[i], probe0);
  if (cfg.tables == TABLES_ALL || cfg.tables == TABLES_PREFILL)
    rc |= bench_prefill_table(KINDS, NUM_KINDS, cfg.threads, cfg.max_runs, mode == 1);
  if (cfg.tables == TABLES_ALL || cfg.tables == TABLES_MLA) rc |= mla_table(&cfg, mode, probe0);
  const sparse_probe sp = {probe_buf, PROBE_BYTES, cfg.threads, probe0};
  if (cfg.tables == TABLES_ALL || cfg.tables == TABLES_SPARSE)
    rc |= bench_sparse_table(&sp, cfg.sparse_heads, cfg.max_runs, mode == 1);
  print_summary(&cfg, cases, num_cases, probe0);
  printf("run time %.0f s\n", (bench_now_ns() - t0) * 1e-9);
  bench_probe_buffer_free(probe_buf, PROBE_BYTES);
  return rc;
}
