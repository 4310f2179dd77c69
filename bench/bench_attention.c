/*
 * bench_attention.c - how close pkv_attention on the CPU runs to the machine's memory bandwidth.
 *
 * Decode: 1, 8 and 64 sequences of 512, 2k, 4k and 16k tokens of context (combos whose pool
 * would pass ~4 GiB skipped), bf16 and f16 KV, a Llama-like layer (32 q heads, 8 kv heads,
 * head_dim 128, block size 16), one new token per sequence. Achieved bandwidth counts the K/V
 * bytes one call must read: 2 * (context + 1) * kv_heads * head_dim * elt per sequence.
 * It is set beside a read-bandwidth probe of this machine, measured in the same run with the
 * engine's thread count: a sum over a 1 GiB buffer, best of several. Target: >= 70% of the
 * probe for contexts >= 2k.
 * Prefill: one 2k-token prompt, causal; GFLOP/s counts 4 * q_heads * head_dim per (query, key)
 * pair (n(n+1)/2 pairs).
 *
 * The contexts are written into the pool directly (pkv_pool_info + the batch's slot mapping, as
 * a host kernel would) so that filling 16k-token contexts costs no prefill. Each measurement is
 * one warm-up call, then the median of several, the last-level cache flushed before each one.
 * The machine may be shared: the probe, run before and after, and the busy column (CPU time of
 * the process over wall time * threads, during the timed calls) show how much of it pkv had.
 * Usage: bench_attention [--quick] [--threads N]. Not a test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pkv/pkv.h>

#include "bench_util.h"

enum { Q_HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, BLOCK = 16, MAX_SEQS = 64 };
#define POOL_LIMIT_BYTES (4.25 * 1073741824.0) /* "about 4 GiB": 64 x 16k bf16 is 4.0 GiB */
#define PROBE_BYTES ((size_t)1 << 30)
#define FLUSH_BYTES ((size_t)64 << 20) /* twice the L3 of the machines we run on */

/* ---------------------------------------------------------------- read-bandwidth probe */
typedef struct probe_arg {
  const uint64_t *p;
  size_t n;
  pthread_barrier_t *start;
  uint64_t sum;
} probe_arg;

static void *probe_thread(void *arg)
{
  probe_arg *a = arg;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  pthread_barrier_wait(a->start);
  for (size_t i = 0; i + 4 <= a->n; i += 4) {
    s0 += a->p[i], s1 += a->p[i + 1], s2 += a->p[i + 2], s3 += a->p[i + 3];
  }
  a->sum = s0 + s1 + s2 + s3;
  return NULL;
}

/* Best GB/s of `reps` multi-threaded sums over buf (threads take equal slices). */
static double probe_bandwidth(const uint64_t *buf, size_t bytes, uint32_t threads, int reps)
{
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; r++) {
    pthread_t tid[64];
    probe_arg args[64];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, threads + 1);
    const size_t per = bytes / 8 / threads;
    for (uint32_t t = 0; t < threads; t++) {
      args[t] = (probe_arg){buf + t * per, per, &start, 0};
      pthread_create(&tid[t], NULL, probe_thread, &args[t]);
    }
    pthread_barrier_wait(&start);
    const double t0 = bench_now_ns();
    for (uint32_t t = 0; t < threads; t++)
      pthread_join(tid[t], NULL);
    const double ns = bench_now_ns() - t0;
    for (uint32_t t = 0; t < threads; t++)
      sink += args[t].sum;
    pthread_barrier_destroy(&start);
    const double gbs = (double)per * 8 * threads / ns;
    if (gbs > best)
      best = gbs;
  }
  (void)sink;
  return best;
}

static double probe(uint32_t threads, int reps)
{
  uint64_t *buf = malloc(PROBE_BYTES);
  if (!buf)
    return 0.0;
  for (size_t i = 0; i < PROBE_BYTES / 8; i++)
    buf[i] = i * 0x9e3779b97f4a7c15ull;
  const double gbs = probe_bandwidth(buf, PROBE_BYTES, threads, reps);
  free(buf);
  return gbs;
}

static unsigned char *flush_buf;
static void flush_cache(void)
{
  for (size_t i = 0; i < FLUSH_BYTES; i += 64)
    flush_buf[i]++;
}

/* ---------------------------------------------------------------- engines */
typedef struct bench_run {
  pkv_engine *e;
  pkv_batch *b;
  size_t elt;
  void *q, *k, *v, *out;
} bench_run;

static int make_engine(bench_run *r, int32_t dtype, uint32_t threads, uint64_t num_blocks)
{
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = HEAD_DIM;
  p.dtype = dtype, p.device = PKV_DEVICE_CPU, p.block_size = BLOCK;
  p.num_blocks = (uint32_t)num_blocks, p.num_threads = threads, p.enable_prefix_caching = 0;
  memset(r, 0, sizeof *r);
  r->elt = dtype == PKV_DTYPE_F32 ? 4 : 2;
  const pkv_status s = pkv_engine_create(&p, &r->e);
  return s == PKV_OK ? 0 : bench_fail(NULL, "pkv_engine_create", s);
}

/* Small random values of the dtype (bf16 or f16 bits), so no lane is a NaN or a denormal. */
static void fill_values(uint16_t *dst, size_t n, int32_t dtype, uint64_t *state)
{
  for (size_t i = 0; i < n; i++) {
    const uint16_t mant = (uint16_t)(bench_next(state) & (dtype == PKV_DTYPE_BF16 ? 0x7f : 0x3ff));
    const uint16_t sign = (uint16_t)((i & 1) << 15);
    dst[i] = (uint16_t)(sign | (dtype == PKV_DTYPE_BF16 ? 0x3e00 : 0x3000) | mant); /* ~0.1..0.25 */
  }
}

/* num_seqs prompts of ctx tokens, computed by writing their K/V into the pool; then one appended
 * token each and an open decode batch with q/k/v/out for it (or, decode 0, the prompts' batch). */
static int setup_batch(bench_run *r, int32_t dtype, uint32_t num_seqs, uint32_t ctx, int decode)
{
  uint64_t ids[MAX_SEQS], state = 7;
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  for (uint32_t s = 0; s < num_seqs; s++) {
    for (uint32_t i = 0; i <= ctx; i++)
      tokens[i] = bench_token(&state);
    const pkv_status st = pkv_allocate(r->e, tokens, ctx, NULL, &ids[s], NULL);
    if (st != PKV_OK) {
      free(tokens);
      return bench_fail(r->e, "pkv_allocate", st);
    }
  }
  struct pkv_pool_info pool;
  memset(&pool, 0, sizeof pool);
  pool.struct_size = sizeof pool;
  const pkv_status ps = pkv_pool_info(r->e, &pool);
  if (ps != PKV_OK) {
    free(tokens);
    return bench_fail(r->e, "pkv_pool_info", ps);
  }
  /* Every block the same random contents: cheap to write, and the reads stay real. */
  uint16_t *block = malloc(pool.block_stride * 2);
  fill_values(block, pool.block_stride, dtype, &state);
  for (uint64_t blk = 0; decode && blk < pool.num_blocks; blk++) {
    memcpy((char *)pool.k_base + blk * pool.block_stride * 2, block, pool.block_stride * 2);
    memcpy((char *)pool.v_base + blk * pool.block_stride * 2, block, pool.block_stride * 2);
  }
  free(block);
  const pkv_status st = bench_open_batch(r->e, ids, num_seqs, tokens + ctx, decode, &r->b);
  free(tokens);
  if (st != PKV_OK)
    return bench_fail(r->e, "building the batch", st);
  const size_t rows = decode ? num_seqs : (size_t)num_seqs * ctx;
  r->q = malloc(rows * Q_HEADS * HEAD_DIM * r->elt);
  r->out = malloc(rows * Q_HEADS * HEAD_DIM * r->elt);
  r->k = malloc(rows * KV_HEADS * HEAD_DIM * r->elt);
  r->v = malloc(rows * KV_HEADS * HEAD_DIM * r->elt);
  fill_values(r->q, rows * Q_HEADS * HEAD_DIM, dtype, &state);
  fill_values(r->k, rows * KV_HEADS * HEAD_DIM, dtype, &state);
  fill_values(r->v, rows * KV_HEADS * HEAD_DIM, dtype, &state);
  return 0;
}

static void free_run(bench_run *r)
{
  pkv_batch_abort(r->b);
  pkv_engine_destroy(r->e);
  free(r->q), free(r->k), free(r->v), free(r->out);
}

static double cpu_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median seconds of `runs` pkv_attention calls after one warm-up; < 0 on failure. *busy: the
 * process's CPU time over the calls' wall time * threads (well below 100%: waits, or a machine
 * busy with other work). */
static double time_calls(bench_run *r, uint32_t runs, uint32_t threads, double *busy)
{
  double t[32], wall = 0.0, cpu = 0.0;
  for (uint32_t i = 0; i <= runs; i++) {
    if (i == 1 && t[0] > 1.0 && runs > 3)
      runs = 3; /* calls of seconds: the median of 3 is enough */
    flush_cache();
    const double c0 = cpu_seconds(), t0 = bench_now_ns();
    const pkv_status s = pkv_attention(r->b, 0, r->q, r->k, r->v, r->out);
    t[i] = (bench_now_ns() - t0) * 1e-9;
    if (i > 0)
      wall += t[i], cpu += cpu_seconds() - c0;
    if (s != PKV_OK)
      return bench_fail(r->e, "pkv_attention", s);
  }
  *busy = wall > 0 ? cpu / (wall * threads) : 0.0;
  return bench_median(t + 1, runs);
}

static const char *dtype_name(int32_t d) { return d == PKV_DTYPE_BF16 ? "bf16" : "f16"; }

int main(int argc, char **argv)
{
  int quick = 0;
  uint32_t threads = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = (uint32_t)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  if (threads < 1 || threads > 64)
    threads = 1;
  flush_buf = calloc(FLUSH_BYTES, 1);
  const uint32_t runs = quick ? 3 : 7;
  const double probe0 = probe(threads, quick ? 3 : 5);
  printf("pkv bench_attention%s: CPU, %u threads; 1 layer, %d q heads / %d kv heads / head_dim %d, "
         "block size %d\n", quick ? " --quick" : "", threads, Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK);
  printf("read-bandwidth probe (sum over 1 GiB, %u threads, best of %d): %.1f GB/s\n\n", threads,
         quick ? 3 : 5, probe0);
  printf("decode: 1 new token per sequence; GB/s = K/V bytes read / median time\n");
  printf("%-5s %5s %8s %10s %10s %8s %9s %6s\n", "dtype", "seqs", "context", "median ms",
         "K/V MiB", "GB/s", "of probe", "busy");
  const uint32_t all_seqs[] = {1, 8, 64}, all_ctx[] = {512, 2048, 4096, 16384};
  const int32_t dtypes[] = {PKV_DTYPE_BF16, PKV_DTYPE_F16};
  double gbs_table[2][3][4] = {{{0}}};
  int rc = 0;
  for (int d = 0; d < 2; d++)
    for (int si = 0; si < 3; si++)
      for (int ci = 0; ci < 4; ci++) {
        const uint32_t seqs = all_seqs[si], ctx = all_ctx[ci];
        const uint64_t blocks = (uint64_t)seqs * ((ctx + BLOCK) / BLOCK) + 1;
        const double pool_bytes = (double)blocks * BLOCK * KV_HEADS * HEAD_DIM * 2 * 2;
        if (pool_bytes > POOL_LIMIT_BYTES || (quick && (seqs == 64 || ctx == 16384)))
          continue;
        bench_run r;
        if (make_engine(&r, dtypes[d], threads, blocks) || setup_batch(&r, dtypes[d], seqs, ctx, 1)) {
          free_run(&r);
          rc = 1;
          continue;
        }
        double busy = 0.0;
        const double sec = time_calls(&r, runs, threads, &busy);
        free_run(&r);
        const double bytes = (double)seqs * 2 * (ctx + 1) * KV_HEADS * HEAD_DIM * 2;
        const double gbs = sec > 0 ? bytes / sec * 1e-9 : 0.0;
        gbs_table[d][si][ci] = gbs;
        printf("%-5s %5u %8u %10.3f %10.1f %8.1f %8.0f%% %5.0f%%\n", dtype_name(dtypes[d]), seqs,
               ctx, sec * 1e3, bytes / 1048576.0, gbs, 100.0 * gbs / probe0, 100.0 * busy);
        fflush(stdout);
      }
  printf("\nprefill: one prompt, causal; GFLOP/s = 4 * q_heads * head_dim * n(n+1)/2 / median time\n");
  printf("%-5s %7s %10s %9s %6s\n", "dtype", "tokens", "median ms", "GFLOP/s", "busy");
  const uint32_t n = 2048;
  for (int d = 0; d < 2; d++) {
    bench_run r;
    if (make_engine(&r, dtypes[d], threads, n / BLOCK + 1) || setup_batch(&r, dtypes[d], 1, n, 0)) {
      free_run(&r);
      rc = 1;
      continue;
    }
    double busy = 0.0;
    const double sec = time_calls(&r, quick ? 3 : 5, threads, &busy);
    free_run(&r);
    const double flops = 4.0 * Q_HEADS * HEAD_DIM * ((double)n * (n + 1) / 2);
    printf("%-5s %7u %10.1f %9.1f %5.0f%%\n", dtype_name(dtypes[d]), n, sec * 1e3,
           sec > 0 ? flops / sec * 1e-9 : 0.0, 100.0 * busy);
  }
  const double probe1 = probe(threads, quick ? 3 : 5);
  printf("\nread-bandwidth probe again at the end: %.1f GB/s (start %.1f)\n", probe1, probe0);
  double worst = 1e9;
  for (int d = 0; d < 2; d++)
    for (int si = 0; si < 3; si++)
      for (int ci = 1; ci < 4; ci++)
        if (gbs_table[d][si][ci] > 0 && gbs_table[d][si][ci] < worst)
          worst = gbs_table[d][si][ci];
  if (worst < 1e9)
    printf("decode, contexts >= 2k: lowest %.1f GB/s = %.0f%% of the better probe (target 70%%)\n",
           worst, 100.0 * worst / (probe0 > probe1 ? probe0 : probe1));
  free(flush_buf);
  return rc;
}
