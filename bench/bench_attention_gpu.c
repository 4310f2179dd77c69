/*
 * bench_attention_gpu.c - how close pkv_attention on a CUDA device runs to its memory bandwidth.
 *
 * The GPU twin of bench_attention.c, same shapes: decode GB/s (pools beyond free device memory
 * skipped) as % of the theoretical bandwidth (2 * memory clock * bus width / 8), or else of a
 * device-to-device cudaMemcpy probe, for bf16 and f16 caches, fp8 caches (e4m3, e5m2) under a
 * bf16 model, and a sliding window of WINDOW keys (bf16 and e4m3): GB/s counts the K/V bytes the
 * kernels read (one byte an element for fp8, the window's keys only); prefill GFLOP/s (2k, 8k
 * tokens; bf16, f16, an e4m3 cache, a window) as % of the tensor-core peak; then MLA decode
 * (bench_mla_gpu.c: 128 q heads over a bf16 latent of 512 + 64) in GB/s of latents read and
 * TFLOP/s; then sparse MLA decode at 32k .. 128k against dense MLA at the same context
 * (bench_attention_gpu_sparse.c: DeepSeek V3.2's indexer and top-k 2048); then write_kv alone
 * (bench_write_kv_gpu.cpp) and a whole decode step of a 32-layer model (bench_step_gpu.c: host
 * time per step, launches per layer, syncs per step, its CUDA graph's replay). All buffers on the
 * device; calls on our stream (pkv_engine_set_stream), timed by cudaEvents: a warm-up (it uploads
 * the batch), then the median of several, L2 flushed (untimed memset) before each. Lines that
 * start with "roofline" are for scripts/gpu-check.sh's table (roofline.py): the peak and where it
 * came from, then one kernel's GB/s a line. Without a usable GPU it says so and exits 0.
 * Usage: bench_attention_gpu [--quick]. Not a test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <pkv/pkv.h>

#include "bench_attention_gpu.h"
#include "bench_attention_gpu_sparse.h"
#include "bench_mla_gpu.h"
#include "bench_step_gpu.h"
#include "bench_util.h"

enum {
  Q_HEADS = 32,
  KV_HEADS = 8,
  HEAD_DIM = 128,
  BLOCK = 16,
  MAX_SEQS = 64,
  MAX_RUNS = 31,
  WINDOW = 1024
};
#define FLUSH_BYTES ((size_t)256 << 20) /* more than the L2 of any device we run on */
#define PROBE_BYTES ((size_t)1 << 30)
#define FILL_CHUNK ((size_t)8 << 20)

static cudaStream_t stream;
static void *flush_dev;

cudaStream_t bench_gpu_stream(void) { return stream; }

void bench_gpu_roofline(const char *kernel, const char *shape, double gbs) {
  printf("roofline\t%s\t%s\t%.1f\n", kernel, shape, gbs);
}

int bench_gpu_cuda_fail(cudaError_t err, const char *what) {
  fprintf(stderr, "bench_attention_gpu: %s: %s\n", what, cudaGetErrorString(err));
  return -1;
}

static int is_fp8(int32_t dtype) {
  return dtype == PKV_DTYPE_FP8_E4M3 || dtype == PKV_DTYPE_FP8_E5M2;
}

/* Bytes of one element of a cache of this dtype. */
static size_t elem_bytes(int32_t dtype) { return is_fp8(dtype) ? 1 : 2; }

/* Small random values of the dtype (bf16 or f16 bits; fp8 codes two to a uint16_t). */
static void fill_values(uint16_t *dst, size_t n, int32_t dtype, uint64_t *state) {
  for (size_t i = 0; i < n; i++) {
    const uint64_t r = bench_next(state);
    if (is_fp8(dtype)) { /* codes 0x20..0x3f, both signs: ~0.1..2 (e4m3), ~0.01..2 (e5m2) */
      dst[i] = (uint16_t)(0x2020 | (r & 0x1f1f) | (i & 1 ? 0x8080 : 0));
      continue;
    }
    const uint16_t mant = (uint16_t)(r & (dtype == PKV_DTYPE_BF16 ? 0x7f : 0x3ff));
    const uint16_t sign = (uint16_t)((i & 1) << 15);
    dst[i] = (uint16_t)(sign | (dtype == PKV_DTYPE_BF16 ? 0x3e00 : 0x3000) | mant); /* ~0.1..0.25 */
  }
}

/* bench_attention_gpu.h: a random chunk uploaded, then doubled in place on the device. */
int bench_gpu_fill(void *dst, size_t bytes, int32_t dtype, uint64_t *state) {
  const size_t chunk = bytes < FILL_CHUNK ? bytes : FILL_CHUNK;
  uint16_t *host = malloc(chunk);
  fill_values(host, chunk / 2, dtype, state);
  cudaError_t err = cudaMemcpy(dst, host, chunk, cudaMemcpyHostToDevice);
  free(host);
  for (size_t done = chunk, n; err == cudaSuccess && done < bytes; done += n) {
    n = bytes - done < done ? bytes - done : done;
    err = cudaMemcpy((char *)dst + done, dst, n, cudaMemcpyDeviceToDevice);
  }
  return err == cudaSuccess ? 0 : bench_gpu_cuda_fail(err, "filling device memory");
}

/* Best GB/s (bytes read + written) of `reps` device-to-device copies of PROBE_BYTES / 2. */
static double probe(int reps) {
  void *buf = NULL;
  cudaEvent_t e0, e1;
  const size_t half = PROBE_BYTES / 2;
  double best = 0.0;
  if (cudaMalloc(&buf, PROBE_BYTES) != cudaSuccess) return 0.0;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int r = 0; r <= reps; r++) {
    cudaEventRecord(e0, stream);
    cudaMemcpyAsync((char *)buf + half, buf, half, cudaMemcpyDeviceToDevice, stream);
    cudaEventRecord(e1, stream);
    float ms = 0.0f;
    if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
      break;
    const double gbs = 2.0 * (double)half / (ms * 1e-3) * 1e-9;
    if (r > 0 && gbs > best) /* r == 0: warm-up */
      best = gbs;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  cudaFree(buf);
  return best;
}

/* ---------------------------------------------------------------- engines */
/* What one decode row measures: the model's dtype, the cache's (0 = the same), the window. */
typedef struct kv_config {
  int32_t dtype, kv_dtype;
  uint32_t window;
} kv_config;

/* fp8 caches get scales of 1/64 (values ~0.002..0.03 in the model), set before any sequence. */
static pkv_status make_engine(bench_run *r, kv_config c, uint64_t num_blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = HEAD_DIM;
  p.dtype = c.dtype, p.kv_dtype = c.kv_dtype, p.sliding_window = c.window;
  p.device = PKV_DEVICE_CUDA, p.device_id = 0, p.block_size = BLOCK;
  p.num_blocks = (uint32_t)num_blocks, p.enable_prefix_caching = 0;
  memset(r, 0, sizeof *r);
  pkv_status s = pkv_engine_create(&p, &r->e);
  if (s == PKV_OK && is_fp8(c.kv_dtype)) {
    float scales[KV_HEADS];
    for (int h = 0; h < KV_HEADS; h++) scales[h] = 1.0f / 64;
    s = pkv_set_kv_scales(r->e, 0, scales, scales);
  }
  return s != PKV_OK ? s : pkv_engine_set_stream(r->e, stream);
}

/* num_seqs prompts of ctx tokens, computed by writing their K/V into the pool; then one appended
 * token each and an open decode batch with q/k/v/out for it (or, decode 0, the prompts' batch). */
static int setup_batch(bench_run *r, kv_config c, uint32_t num_seqs, uint32_t ctx, int decode) {
  const int32_t dtype = c.dtype, kv_dtype = c.kv_dtype ? c.kv_dtype : c.dtype;
  uint64_t ids[MAX_SEQS], state = 7;
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  pkv_status st = PKV_OK;
  for (uint32_t s = 0; st == PKV_OK && s < num_seqs; s++) {
    for (uint32_t i = 0; i <= ctx; i++) tokens[i] = bench_token(&state);
    st = pkv_allocate(r->e, tokens, ctx, NULL, &ids[s], NULL);
  }
  /* The whole pool (K and V) random: one chunk uploaded, then copied on the device. */
  struct pkv_pool_info pool = {.struct_size = sizeof pool};
  if (st == PKV_OK) st = pkv_pool_info(r->e, &pool);
  if (st == PKV_OK && decode &&
      (bench_gpu_fill(pool.k_base, pool.bytes_per_pool, kv_dtype, &state) ||
       bench_gpu_fill(pool.v_base, pool.bytes_per_pool, kv_dtype, &state))) {
    free(tokens);
    return -1;
  }
  if (st == PKV_OK) st = bench_open_batch(r->e, ids, num_seqs, tokens + ctx, decode, &r->b);
  free(tokens);
  if (st != PKV_OK) return bench_fail(r->e, "building the batch", st);
  const size_t rows = decode ? num_seqs : (size_t)num_seqs * ctx;
  const size_t qb = rows * Q_HEADS * HEAD_DIM * 2, kb = rows * KV_HEADS * HEAD_DIM * 2; /* 16-bit */
  cudaError_t err;
  if ((err = cudaMalloc(&r->q, qb)) || (err = cudaMalloc(&r->out, qb)) ||
      (err = cudaMalloc(&r->k, kb)) || (err = cudaMalloc(&r->v, kb)))
    return bench_gpu_cuda_fail(err, "cudaMalloc of q/k/v/out");
  return bench_gpu_fill(r->q, qb, dtype, &state) || bench_gpu_fill(r->k, kb, dtype, &state) ||
                 bench_gpu_fill(r->v, kb, dtype, &state)
             ? -1
             : 0;
}

void bench_gpu_free_run(bench_run *r) {
  pkv_batch_abort(r->b);
  pkv_engine_destroy(r->e);
  cudaFree(r->q), cudaFree(r->k), cudaFree(r->v), cudaFree(r->out);
}

/* An engine of num_blocks and its batch (setup_batch); 0, or -1 with everything freed. */
static int open_run(bench_run *r, kv_config c, uint64_t num_blocks, uint32_t seqs, uint32_t ctx,
                    int decode) {
  const pkv_status s = make_engine(r, c, num_blocks);
  if (s != PKV_OK) bench_fail(r->e, "pkv_engine_create", s);
  if (s != PKV_OK || setup_batch(r, c, seqs, ctx, decode)) {
    bench_gpu_free_run(r);
    return -1;
  }
  return 0;
}

void bench_gpu_flush_l2(uint32_t i) {
  cudaMemsetAsync(flush_dev, (int)(i & 0xff), FLUSH_BYTES, stream);
}

/* bench_attention_gpu.h; cudaEvents on the engine's stream around each call. */
double bench_gpu_time_calls(bench_run *r, uint32_t runs) {
  double t[MAX_RUNS + 1], result = -1.0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (uint32_t i = 0; i <= runs; i++) {
    cudaMemsetAsync(flush_dev, (int)(i & 0xff), FLUSH_BYTES, stream);
    cudaEventRecord(e0, stream);
    const pkv_status s = pkv_attention(r->b, 0, r->q, r->k, r->v, r->out);
    cudaEventRecord(e1, stream);
    float ms = 0.0f;
    cudaEventSynchronize(e1); /* when it fails, so does cudaEventElapsedTime */
    const cudaError_t err = cudaEventElapsedTime(&ms, e0, e1);
    if (s != PKV_OK || err != cudaSuccess) {
      s != PKV_OK ? bench_fail(r->e, "pkv_attention", s)
                  : bench_gpu_cuda_fail(err, "timing pkv_attention");
      break;
    }
    t[i] = ms * 1e-3;
    if (i == runs) result = bench_median(t + 1, runs);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return result;
}

static const char *dtype_name(int32_t d) {
  return d == PKV_DTYPE_BF16       ? "bf16"
         : d == PKV_DTYPE_F16      ? "f16"
         : d == PKV_DTYPE_FP8_E4M3 ? "e4m3"
                                   : "e5m2";
}

static int no_device(const char *why) {
  printf("bench_attention_gpu: no CUDA device: %s\n", why);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 || (argc == 2 && strcmp(argv[1], "--quick") != 0)) {
    fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
    return 2;
  }
  const int quick = argc == 2;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    return no_device(err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount: 0");
  bench_run r;
  const kv_config bf16 = {PKV_DTYPE_BF16, 0, 0};
  const pkv_status ps = make_engine(&r, bf16, 1);                  /* does pkv see it too? */
  if (ps == PKV_ERR_NO_DEVICE) return no_device(pkv_last_error()); /* r.e is NULL */
  pkv_engine_destroy(r.e);
  if (ps != PKV_OK) return bench_fail(NULL, "pkv_engine_create", ps) != 0;
  if ((err = cudaSetDevice(0)) || (err = cudaStreamCreate(&stream)) ||
      (err = cudaMalloc(&flush_dev, FLUSH_BYTES))) {
    bench_gpu_cuda_fail(err, "setting up the device");
    return 1;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) strcpy(prop.name, "?");
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) != cudaSuccess)
    clock_khz = bus_bits = 0;
  const double peak = 2.0 * clock_khz * 1e3 * bus_bits / 8 * 1e-9; /* GB/s; 0 if unknown */
  const double probe0 = probe(quick ? 3 : 5);
  const double ref = peak > 0 ? peak : probe0;
  const char *ref_name = peak > 0 ? "of peak" : "of probe"; /* % column */
  printf("pkv bench_attention_gpu%s: %s; 1 layer, %d q heads / %d kv heads / head_dim %d, "
         "block size %d\n",
         quick ? " --quick" : "", prop.name, Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK);
  if (peak > 0) {
    printf("peak bandwidth (2 * %d kHz * %d bits / 8): %.1f GB/s\n", clock_khz, bus_bits, peak);
    printf(
        "roofline-peak\t%.1f\tcudaDevAttrMemoryClockRate %d kHz x cudaDevAttrGlobalMemoryBusWidth "
        "%d bits\n",
        peak, clock_khz, bus_bits);
  } else {
    printf("peak bandwidth: unknown (no memory clock / bus width attributes)\n");
  }
  printf("roofline-device\t%s\n", prop.name);
  printf("device-to-device copy probe (512 MiB, read + written, best of %d): %.1f GB/s\n\n",
         quick ? 3 : 5, probe0);
  printf("decode: 1 new token per sequence; GB/s = K/V bytes read (the window's keys, at the "
         "cache's element size) / median time\n");
  printf("%-5s %-5s %6s %5s %8s %10s %10s %8s %9s\n", "model", "cache", "window", "seqs", "context",
         "median ms", "K/V MiB", "GB/s", ref_name);
  const uint32_t all_seqs[] = {1, 8, 64}, all_ctx[] = {512, 2048, 4096, 16384};
  const kv_config configs[] = {
      {PKV_DTYPE_BF16, 0, 0},
      {PKV_DTYPE_F16, 0, 0},
      {PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3, 0},
      {PKV_DTYPE_BF16, PKV_DTYPE_FP8_E5M2, 0},
      {PKV_DTYPE_BF16, 0, WINDOW},
      {PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3, WINDOW},
  };
  enum { NUM_CONFIGS = sizeof configs / sizeof configs[0] };
  double worst[NUM_CONFIGS];
  int rc = 0;
  for (int k = 0; k < NUM_CONFIGS; k++) {
    const kv_config c = configs[k];
    const int32_t kv_dtype = c.kv_dtype ? c.kv_dtype : c.dtype;
    worst[k] = 1e9;
    for (int si = 0; si < 3; si++)
      for (int ci = 0; ci < 4; ci++) {
        const uint32_t seqs = all_seqs[si], ctx = all_ctx[ci];
        const uint64_t blocks = (uint64_t)seqs * ((ctx + BLOCK) / BLOCK) + 1;
        const double pool_bytes =
            (double)blocks * BLOCK * KV_HEADS * HEAD_DIM * 2 * elem_bytes(kv_dtype);
        size_t free_bytes = 0, total_bytes = 0;
        cudaMemGetInfo(&free_bytes, &total_bytes);
        if (pool_bytes > 0.8 * (double)free_bytes || (quick && (seqs == 64 || ctx == 16384)) ||
            (c.window && ctx < 2 * c.window)) /* a window well inside the context */
          continue;
        if (open_run(&r, c, blocks, seqs, ctx, 1)) {
          rc = 1;
          continue;
        }
        const double sec = bench_gpu_time_calls(&r, quick ? 5 : 15);
        bench_gpu_free_run(&r);
        const uint32_t keys = c.window && c.window < ctx + 1 ? c.window : ctx + 1;
        const double bytes = (double)seqs * 2 * keys * KV_HEADS * HEAD_DIM * elem_bytes(kv_dtype);
        const double gbs = sec > 0 ? bytes / sec * 1e-9 : 0.0;
        rc |= sec <= 0;
        if (ctx >= 2048 && gbs > 0 && gbs < worst[k]) worst[k] = gbs;
        printf("%-5s %-5s %6u %5u %8u %10.4f %10.1f %8.1f %8.0f%%\n", dtype_name(c.dtype),
               dtype_name(kv_dtype), c.window, seqs, ctx, sec * 1e3, bytes / 1048576.0, gbs,
               100.0 * gbs / ref);
        if (ctx == 16384 && gbs > 0 && (k == 0 || seqs == 64)) { /* long contexts */
          char kernel[48], shape[48];
          snprintf(kernel, sizeof kernel, c.window ? "decode %s window %u" : "decode %s",
                   dtype_name(kv_dtype), c.window);
          snprintf(shape, sizeof shape, "%u seqs x %uk", seqs, ctx / 1024);
          bench_gpu_roofline(kernel, shape, gbs);
        }
        fflush(stdout);
      }
  }
  /* Prefill runs on tensor cores (mma.sync m16n8k16, fp32 accumulation) for f16 / bf16 models:
   * % of the device's dense f16 / bf16 tensor-core peak, SMs * clock * FLOP per SM per clock
   * (sm_80: 2048, sm_90: 4096; mma.sync reaches only part of sm_90's, whose full rate needs
   * wgmma), or "?" on other devices. FLOPs count the keys each token sees (its window). */
  int sms = 0, clock_sm_khz = 0, major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&clock_sm_khz, cudaDevAttrClockRate, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0) != cudaSuccess)
    sms = clock_sm_khz = 0;
  const double per_clock = major == 9 ? 4096 : major == 8 && minor == 0 ? 2048 : 0;
  const double tc_peak = sms * (clock_sm_khz * 1e3) * per_clock * 1e-9; /* GFLOP/s */
  if (tc_peak > 0)
    printf("\ntensor-core peak (dense f16/bf16, %d SMs * %d kHz * %.0f FLOP): %.1f TFLOP/s\n", sms,
           clock_sm_khz, per_clock, tc_peak * 1e-3);
  printf("\nprefill: one causal prompt on tensor cores; GFLOP/s = 4 * q_heads * head_dim * (keys "
         "the tokens see) / median\n");
  printf("%-5s %-5s %6s %7s %10s %9s %8s\n", "model", "cache", "window", "tokens", "median ms",
         "GFLOP/s", "of peak");
  const kv_config prefills[] = {
      {PKV_DTYPE_BF16, 0, 0},
      {PKV_DTYPE_F16, 0, 0},
      {PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3, 0},
      {PKV_DTYPE_BF16, 0, WINDOW},
  };
  for (int k = 0; k < (int)(sizeof prefills / sizeof prefills[0]); k++)
    for (uint32_t n = 2048; n <= 8192; n *= 4) {
      const kv_config c = prefills[k];
      if (open_run(&r, c, n / BLOCK + 1, 1, n, 0)) {
        rc = 1;
        continue;
      }
      const double sec = bench_gpu_time_calls(&r, quick ? 3 : 7);
      bench_gpu_free_run(&r);
      const double w = c.window ? c.window : n; /* keys: p + 1 up to the window */
      const double seen = w >= n ? (double)n * (n + 1) / 2 : w * (w + 1) / 2 + (n - w) * w;
      const double gflops = sec > 0 ? 4.0 * Q_HEADS * HEAD_DIM * seen / sec * 1e-9 : 0.0;
      rc |= sec <= 0;
      printf("%-5s %-5s %6u %7u %10.3f %9.1f", dtype_name(c.dtype),
             dtype_name(c.kv_dtype ? c.kv_dtype : c.dtype), c.window, n, sec * 1e3, gflops);
      if (tc_peak > 0)
        printf(" %7.0f%%\n", 100.0 * gflops / tc_peak);
      else
        printf(" %8s\n", "?");
      fflush(stdout);
    }
  rc |= bench_mla_decode_table(ref, ref_name, tc_peak, quick);
  rc |= bench_sparse_gpu_table(ref, ref_name, quick);
  rc |= bench_write_kv_gpu_table(ref, ref_name, quick);
  rc |= bench_step_gpu_table(quick);
  printf("\ndecode, contexts >= 2k, lowest GB/s (%s %.1f GB/s):\n", ref_name, ref);
  for (int k = 0; k < NUM_CONFIGS; k++)
    if (worst[k] < 1e9)
      printf("  %-5s cache %-5s window %5u: %8.1f GB/s = %3.0f%%\n", dtype_name(configs[k].dtype),
             dtype_name(configs[k].kv_dtype ? configs[k].kv_dtype : configs[k].dtype),
             configs[k].window, worst[k], 100.0 * worst[k] / ref);
  cudaFree(flush_dev);
  cudaStreamDestroy(stream);
  return rc;
}
