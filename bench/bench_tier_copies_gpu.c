/*
 * bench_tier_copies_gpu.c - bench_tier_copies --device cuda: the host tier's block copies on a
 * CUDA engine (one batched kernel per direction that reads or writes the pinned, mapped host tier
 * over the bus: kernels/cache_ops.cuh launch_copy_tier_blocks), against the DMA engines: one
 * cudaMemcpyAsync of the same bytes each for K and V between the same pinned host tier and the
 * pool. The same shape as the CPU table (Llama-3-8B: 2 MiB blocks of 64 strided 32 KiB runs), so
 * the kernel gathers runs where the DMA reference copies two contiguous ranges: the best case a
 * copy engine has. GPU time by events on the engine's stream around pkv_batch_copy (the step's
 * copies; one launch a direction), median of REPS.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench_tier_copies.h"
#include "bench_util.h"

enum { REPS = 5, BS = 16 };

typedef struct gpu_bench {
  pkv_engine *e;
  cudaStream_t stream;
  struct pkv_pool_info info;
  uint64_t block_bytes;
  int32_t *tokens;
} gpu_bench;

static int cuda_fail(cudaError_t err, const char *what) {
  fprintf(stderr, "bench_tier_copies: %s: %s\n", what, cudaGetErrorString(err));
  return -1;
}

/* GPU ms of the step's queued copies (pkv_batch_copy on a one-token batch); < 0 on failure. */
static double copies_ms(gpu_bench *b, uint64_t one, double *host_ns) {
  pkv_batch *batch = NULL;
  const int32_t t = 7;
  cudaEvent_t e0, e1;
  if (pkv_append(b->e, one, &t, 1) != PKV_OK ||
      pkv_batch_begin(b->e, &one, NULL, 1, &batch) != PKV_OK)
    return bench_fail(b->e, "batch", PKV_ERR_INTERNAL), -1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  cudaEventRecord(e0, b->stream);
  const double t0 = bench_now_ns();
  const pkv_status s = pkv_batch_copy(batch);
  *host_ns = bench_now_ns() - t0;
  cudaEventRecord(e1, b->stream);
  float ms = -1.f;
  if (cudaEventSynchronize(e1) != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
    ms = -1.f;
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  if (s != PKV_OK || pkv_batch_end(batch) != PKV_OK)
    return bench_fail(b->e, "pkv_batch_copy", s), -1;
  return ms;
}

/* GPU ms of copying n blocks' bytes of K and of V by cudaMemcpyAsync, host tier <-> pool. */
static double dma_ms(gpu_bench *b, uint32_t n, int to_device) {
  const size_t half = (size_t)n * b->block_bytes / 2;
  char *dev[2] = {b->info.k_base, b->info.v_base},
       *host[2] = {b->info.host_k_base, b->info.host_v_base};
  double v[REPS];
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (int r = 0; r < REPS; r++) {
    float ms = 0.f;
    cudaEventRecord(e0, b->stream);
    for (int i = 0; i < 2; i++)
      cudaMemcpyAsync(to_device ? dev[i] : host[i], to_device ? host[i] : dev[i], half,
                      to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, b->stream);
    cudaEventRecord(e1, b->stream);
    const cudaError_t err = cudaEventSynchronize(e1);
    if (err != cudaSuccess || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess) {
      cuda_fail(err, "cudaMemcpyAsync");
      ms = -1.f;
    }
    v[r] = ms;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return bench_median(v, REPS);
}

/* One row: n blocks swapped out and in REPS times; prints it. 0 or -1. */
static int gpu_row(gpu_bench *b, uint32_t n, uint32_t max_blocks) {
  double out[REPS], in[REPS], calls[REPS];
  uint64_t seq = 0, one = 0;
  if (pkv_allocate(b->e, b->tokens, n * BS, NULL, &seq, NULL) != PKV_OK ||
      pkv_allocate(b->e, b->tokens, 1, NULL, &one, NULL) != PKV_OK)
    return bench_fail(b->e, "pkv_allocate", PKV_ERR_NO_SPACE);
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_ns(), host_out = 0, host_in = 0;
    if (pkv_swap_out(b->e, seq) != PKV_OK)
      return bench_fail(b->e, "pkv_swap_out", PKV_ERR_INTERNAL);
    calls[r] = bench_now_ns() - t0;
    out[r] = copies_ms(b, one, &host_out);
    t0 = bench_now_ns();
    if (pkv_swap_in(b->e, seq) != PKV_OK) return bench_fail(b->e, "pkv_swap_in", PKV_ERR_INTERNAL);
    calls[r] += bench_now_ns() - t0;
    in[r] = copies_ms(b, one, &host_in);
    if (out[r] < 0 || in[r] < 0) return -1;
    calls[r] = (calls[r] + host_out + host_in) / (2.0 * n);
  }
  pkv_release(b->e, seq);
  pkv_release(b->e, one);
  const double gb = (double)n * b->block_bytes * 1e-6; /* bytes * 1e-6 / ms = GB/s */
  const double o = gb / bench_median(out, REPS), i = gb / bench_median(in, REPS);
  const double dma_o = gb / dma_ms(b, n, 0), dma_i = gb / dma_ms(b, n, 1);
  printf("%7u %10.1f %10.2f %10.2f %10.2f %10.2f %7.0f%% %7.0f%% %12.0f\n", n,
         n * b->block_bytes / 1048576.0, o, i, dma_o, dma_i, 100 * o / dma_o, 100 * i / dma_i,
         bench_median(calls, REPS));
  if (n == max_blocks) {
    printf("roofline\ttier copies, swap-out (kernel)\t%u blocks of 2 MiB\t%.1f\t%.1f\tDMA\n", n, o,
           dma_o);
    printf("roofline\ttier copies, swap-in (kernel)\t%u blocks of 2 MiB\t%.1f\t%.1f\tDMA\n", n, i,
           dma_i);
  }
  return 0;
}

int bench_tier_copies_gpu(uint32_t max_blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 32, p.num_q_heads = 32, p.num_kv_heads = 8, p.head_dim = 128;
  p.dtype = PKV_DTYPE_BF16, p.block_size = BS, p.device = PKV_DEVICE_CUDA, p.device_id = 0;
  p.num_blocks = max_blocks + 2, p.host_num_blocks = max_blocks;
  gpu_bench b;
  memset(&b, 0, sizeof b);
  pkv_status s = pkv_engine_create(&p, &b.e);
  if (s == PKV_ERR_NO_DEVICE) {
    printf("bench_tier_copies --device cuda: no CUDA device: %s\n", pkv_last_error());
    return 0;
  }
  if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s) != 0;
  cudaError_t err = cudaStreamCreate(&b.stream);
  if (err != cudaSuccess) return pkv_engine_destroy(b.e), cuda_fail(err, "cudaStreamCreate") != 0;
  pkv_engine_set_stream(b.e, b.stream);
  b.info.struct_size = sizeof b.info;
  pkv_pool_info(b.e, &b.info);
  b.block_bytes = 2 * b.info.bytes_per_pool / b.info.num_blocks;
  b.tokens = malloc(sizeof(int32_t) * (max_blocks + 1) * BS);
  uint64_t rng = 1;
  for (uint32_t i = 0; i < (max_blocks + 1) * BS; i++) b.tokens[i] = bench_token(&rng);
  bench_calibrate_clock();
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) strcpy(prop.name, "?");
  printf("pkv bench_tier_copies --device cuda: %s; blocks of %.2f MiB (32 layers x K,V strided "
         "runs of %.0f KiB); pkv: one kernel a direction over the mapped host tier; DMA: "
         "cudaMemcpyAsync of K's and V's bytes, contiguous; GB/s by cudaEvents, median of %d\n\n",
         prop.name, b.block_bytes / 1048576.0, b.block_bytes / 64 / 1024.0, REPS);
  printf("%7s %10s %10s %10s %10s %10s %8s %8s %12s\n", "blocks", "MiB", "out GB/s", "in GB/s",
         "DMA out", "DMA in", "out/DMA", "in/DMA", "pkv ns/block");
  int rc = 0;
  for (uint32_t n = 1; n <= max_blocks && rc == 0; n *= 4) rc = gpu_row(&b, n, max_blocks);
  free(b.tokens);
  pkv_engine_destroy(b.e);
  cudaStreamDestroy(b.stream);
  return rc ? 1 : 0;
}
