/*
 * bench_attention.c - how close pkv_attention on the CPU runs to the machine's memory bandwidth.
 *
 * Decode: 1, 8 and 64 sequences of 512, 2k, 4k and 16k tokens of context (combos whose pool
 * would pass ~4 GiB skipped), bf16 and f16 KV, and fp8 e4m3 KV under a bf16 model, a Llama-like
 * layer (32 q heads, 8 kv heads, head_dim 128, block size 16), one new token per sequence; then
 * 1 and 8 sequences at 32k tokens of context under a sliding window of 4096, bf16 and e4m3 KV.
 * Achieved bandwidth counts the K/V bytes one call must read: 2 * keys * kv_heads * head_dim *
 * kv bytes per sequence, keys = context + 1, or the window (what a windowed layer reads). fp8
 * halves the bytes of bf16: its calls should take about half the time where bf16 runs near the
 * bandwidth, and a window of 4096 at 32k about what a 4k context takes.
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
  size_t elt, kv_elt; /* bytes of an element of q, k, v, out; of the pool */
  void *q, *k, *v, *out;
} bench_run;

/* The KV kinds the decode table runs: the model's dtype, the cache's (0 = the model's). */
typedef struct kv_kind {
  const char *name;
  int32_t dtype, kv_dtype;
} kv_kind;

static int make_engine(bench_run *r, const kv_kind *kind, uint32_t window, uint32_t threads,
                       uint64_t num_blocks)
{
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = HEAD_DIM;
  p.dtype = kind->dtype, p.kv_dtype = kind->kv_dtype, p.sliding_window = window;
  p.device = PKV_DEVICE_CPU, p.block_size = BLOCK;
  p.num_blocks = (uint32_t)num_blocks, p.num_threads = threads, p.enable_prefix_caching = 0;
  memset(r, 0, sizeof *r);
  r->elt = kind->dtype == PKV_DTYPE_F32 ? 4 : 2;
  r->kv_elt = kind->kv_dtype ? 1 : r->elt;
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

/* Random fp8 codes of moderate values (e4m3: 2^-4 .. 2^3; no NaN). */
static void fill_codes(uint8_t *dst, size_t n, uint64_t *state)
{
  for (size_t i = 0; i < n; i++)
    dst[i] = (uint8_t)(((i & 1) << 7) | (0x18 + bench_next(state) % 0x38));
}

/* num_seqs prompts of ctx tokens, computed by writing their K/V into the pool; then one appended
 * token each and an open decode batch with q/k/v/out for it (or, decode 0, the prompts' batch). */
static int setup_batch(bench_run *r, int32_t dtype, uint32_t num_seqs, uint32_t ctx, int decode)
{
  const size_t kv_elt = r->kv_elt;
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
  const size_t block_bytes = pool.block_stride * kv_elt;
  uint16_t *block = malloc(block_bytes);
  if (kv_elt == 1)
    fill_codes((uint8_t *)block, block_bytes, &state);
  else
    fill_values(block, pool.block_stride, dtype, &state);
  for (uint64_t blk = 0; decode && blk < pool.num_blocks; blk++) {
    memcpy((char *)pool.k_base + blk * block_bytes, block, block_bytes);
    memcpy((char *)pool.v_base + blk * block_bytes, block, block_bytes);
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

/* One decode measurement: a row of the table; GB/s, or 0 when skipped or failed (*rc = 1). */
static double decode_row(const kv_kind *kind, uint32_t seqs, uint32_t ctx, uint32_t window,
                         uint32_t threads, uint32_t runs, double probe0, int *rc)
{
  const uint64_t blocks = (uint64_t)seqs * ((ctx + BLOCK) / BLOCK) + 1;
  const size_t kv_elt = kind->kv_dtype ? 1 : 2;
  const double pool_bytes = (double)blocks * BLOCK * KV_HEADS * HEAD_DIM * kv_elt * 2;
  if (pool_bytes > POOL_LIMIT_BYTES)
    return 0.0;
  bench_run r;
  if (make_engine(&r, kind, window, threads, blocks) || setup_batch(&r, kind->dtype, seqs, ctx, 1)) {
    free_run(&r);
    *rc = 1;
    return 0.0;
  }
  double busy = 0.0;
  const double sec = time_calls(&r, runs, threads, &busy);
  free_run(&r);
  const uint32_t keys = window && window < ctx + 1 ? window : ctx + 1;
  const double bytes = (double)seqs * 2 * keys * KV_HEADS * HEAD_DIM * kv_elt;
  const double gbs = sec > 0 ? bytes / sec * 1e-9 : 0.0;
  printf("%-5s %5u %8u %6u %10.3f %10.1f %8.1f %8.0f%% %5.0f%%\n", kind->name, seqs, ctx, window,
         sec * 1e3, bytes / 1048576.0, gbs, 100.0 * gbs / probe0, 100.0 * busy);
  fflush(stdout);
  if (sec <= 0)
    *rc = 1;
  return sec > 0 ? sec : 0.0;
}

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
  printf("decode: 1 new token per sequence; GB/s = K/V bytes read (the window's keys when windowed)"
         " / median time\n");
  printf("%-5s %5s %8s %6s %10s %10s %8s %9s %6s\n", "kv", "seqs", "context", "window", "median ms",
         "K/V MiB", "GB/s", "of probe", "busy");
  const uint32_t all_seqs[] = {1, 8, 64}, all_ctx[] = {512, 2048, 4096, 16384};
  const kv_kind kinds[] = {{"bf16", PKV_DTYPE_BF16, 0}, {"f16", PKV_DTYPE_F16, 0},
                           {"e4m3", PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3}};
  double sec_table[3][3][4] = {{{0}}}; /* [kind][seqs][context] median seconds */
  int rc = 0;
  for (int d = 0; d < 3; d++)
    for (int si = 0; si < 3; si++)
      for (int ci = 0; ci < 4; ci++)
        if (!quick || (all_seqs[si] != 64 && all_ctx[ci] != 16384))
          sec_table[d][si][ci] = decode_row(&kinds[d], all_seqs[si], all_ctx[ci], 0, threads, runs, probe0, &rc);
  double win_sec[2][2] = {{0}}; /* [bf16, e4m3][1, 8 seqs] at 32k, window 4096 */
  for (int d = 0; d < 2; d++)
    for (int si = 0; si < 2; si++)
      if (!quick || si == 0)
        win_sec[d][si] = decode_row(&kinds[d ? 2 : 0], all_seqs[si], 32768, 4096, threads, runs, probe0, &rc);
  printf("\nprefill: one prompt, causal; GFLOP/s = 4 * q_heads * head_dim * n(n+1)/2 / median time\n");
  printf("%-5s %7s %10s %9s %6s\n", "kv", "tokens", "median ms", "GFLOP/s", "busy");
  const uint32_t n = 2048;
  for (int d = 0; d < 3; d++) {
    bench_run r;
    if (make_engine(&r, &kinds[d], 0, threads, n / BLOCK + 1) || setup_batch(&r, kinds[d].dtype, 1, n, 0)) {
      free_run(&r);
      rc = 1;
      continue;
    }
    double busy = 0.0;
    const double sec = time_calls(&r, quick ? 3 : 5, threads, &busy);
    free_run(&r);
    const double flops = 4.0 * Q_HEADS * HEAD_DIM * ((double)n * (n + 1) / 2);
    printf("%-5s %7u %10.1f %9.1f %5.0f%%\n", kinds[d].name, n, sec * 1e3,
           sec > 0 ? flops / sec * 1e-9 : 0.0, 100.0 * busy);
  }
  const double probe1 = probe(threads, quick ? 3 : 5);
  printf("\nread-bandwidth probe again at the end: %.1f GB/s (start %.1f)\n", probe1, probe0);
  const double best_probe = probe0 > probe1 ? probe0 : probe1;
  double worst = 1e9, ratio_sum = 0.0;
  int ratios = 0;
  for (int d = 0; d < 2; d++)
    for (int si = 0; si < 3; si++)
      for (int ci = 1; ci < 4; ci++) {
        const double sec = sec_table[d][si][ci];
        const double bytes = (double)all_seqs[si] * 2 * (all_ctx[ci] + 1) * KV_HEADS * HEAD_DIM * 2;
        if (sec > 0 && bytes / sec * 1e-9 < worst)
          worst = bytes / sec * 1e-9;
        if (d == 0 && sec > 0 && sec_table[2][si][ci] > 0)
          ratio_sum += sec_table[2][si][ci] / sec, ratios++;
      }
  if (worst < 1e9)
    printf("decode, contexts >= 2k: lowest %.1f GB/s = %.0f%% of the better probe (target 70%%)\n", worst,
           100.0 * worst / best_probe);
  if (ratios)
    printf("decode, contexts >= 2k: e4m3 KV takes %.2f of bf16 KV's time on average (half the bytes)\n",
           ratio_sum / ratios);
  for (int d = 0; d < 2; d++)
    for (int si = 0; si < 2; si++)
      if (win_sec[d][si] > 0 && sec_table[d ? 2 : 0][si][2] > 0)
        printf("decode, %s, %u seqs: context 32k with window 4096 takes %.2f of a full 4k context's time\n",
               kinds[d ? 2 : 0].name, all_seqs[si], win_sec[d][si] / sec_table[d ? 2 : 0][si][2]);
  free(flush_buf);
  return rc;
}
