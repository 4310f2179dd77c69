/*
 * bench_tier_copies - the host tier's block copies on a CPU engine: GB/s of swap-outs (pool to
 * host tier) and swap-ins (back) of batches of 1 to 1024 blocks, next to a plain memcpy of the
 * same bytes in the same run, and pkv's own cost per block (the pkv_swap_out / pkv_swap_in calls,
 * which only plan the copies). Llama-3-8B's KV shape: 2 MiB blocks (32 layers, 8 kv heads of 128,
 * bf16, block size 16), so a block is 64 strided runs of 32 KiB, as in the pool's layout.
 * --device cuda (CUDA builds): the same on a CUDA engine, its copy kernel against cudaMemcpyAsync
 * (bench_tier_copies_gpu.c).
 *
 *   build/bench/bench_tier_copies [--quick] [--threads N] [--device cpu|cuda]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_tier_copies.h"
#include "bench_util.h"

enum { MAX_BLOCKS = 1024, REPS = 5, BS = 16 };

typedef struct bench {
  pkv_engine *e;
  uint64_t block_bytes;
  int32_t *tokens;
} bench;

/* A step whose only work is the queued copies: a one-token sequence and pkv_batch_copy. */
static double copies_ns(bench *b, uint64_t one) {
  pkv_batch *batch = NULL;
  int32_t t = 7;
  if (pkv_append(b->e, one, &t, 1) != PKV_OK ||
      pkv_batch_begin(b->e, &one, NULL, 1, &batch) != PKV_OK)
    return bench_fail(b->e, "batch", PKV_ERR_INTERNAL), -1;
  const double t0 = bench_now_ns();
  pkv_status s = pkv_batch_copy(batch);
  const double ns = bench_now_ns() - t0;
  if (s != PKV_OK || pkv_batch_end(batch) != PKV_OK)
    return bench_fail(b->e, "pkv_batch_copy", s), -1;
  return ns;
}

/* Median GB/s of swapping n blocks out and in, and pkv's ns per block in the calls. */
static int measure(bench *b, uint32_t n, double *out_gbs, double *in_gbs, double *call_ns) {
  double out[REPS], in[REPS], calls[REPS];
  uint64_t seq = 0, one = 0;
  if (pkv_allocate(b->e, b->tokens, n * BS, NULL, &seq, NULL) != PKV_OK ||
      pkv_allocate(b->e, b->tokens, 1, NULL, &one, NULL) != PKV_OK)
    return bench_fail(b->e, "pkv_allocate", PKV_ERR_NO_SPACE);
  for (int r = 0; r < REPS; r++) {
    double t0 = bench_now_ns();
    if (pkv_swap_out(b->e, seq) != PKV_OK)
      return bench_fail(b->e, "pkv_swap_out", PKV_ERR_INTERNAL);
    calls[r] = bench_now_ns() - t0;
    out[r] = copies_ns(b, one);
    t0 = bench_now_ns();
    if (pkv_swap_in(b->e, seq) != PKV_OK) return bench_fail(b->e, "pkv_swap_in", PKV_ERR_INTERNAL);
    calls[r] += bench_now_ns() - t0;
    in[r] = copies_ns(b, one);
    if (out[r] < 0 || in[r] < 0) return -1;
    calls[r] /= 2.0 * n;
  }
  const double bytes = (double)n * b->block_bytes;
  *out_gbs = bytes / bench_median(out, REPS);
  *in_gbs = bytes / bench_median(in, REPS);
  *call_ns = bench_median(calls, REPS);
  pkv_release(b->e, seq);
  pkv_release(b->e, one);
  return 0;
}

/* Median GB/s of one memcpy of n blocks' bytes between two buffers already touched. */
static double memcpy_gbs(char *dst, const char *src, uint64_t bytes) {
  double v[REPS];
  for (int r = 0; r < REPS; r++) {
    const double t0 = bench_now_ns();
    memcpy(dst, src, bytes);
    v[r] = bench_now_ns() - t0;
  }
  return (double)bytes / bench_median(v, REPS);
}

int main(int argc, char **argv) {
  int quick = 0, cuda = 0;
  uint32_t threads = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
      threads = (uint32_t)atoi(argv[++i]);
    else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
             (strcmp(argv[i + 1], "cpu") == 0 || strcmp(argv[i + 1], "cuda") == 0))
      cuda = strcmp(argv[++i], "cuda") == 0;
    else {
      fprintf(stderr, "usage: %s [--quick] [--threads N] [--device cpu|cuda]\n", argv[0]);
      return 2;
    }
  }
  const uint32_t max_blocks = quick ? 64 : MAX_BLOCKS;
  if (cuda) {
#ifdef PKV_BENCH_CUDA
    return bench_tier_copies_gpu(max_blocks);
#else
    fprintf(stderr,
            "%s: --device cuda: this build has no CUDA backend (configure with nvcc on "
            "PATH and -Dgpu=enabled)\n",
            argv[0]);
    return 2;
#endif
  }
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 32, p.num_q_heads = 32, p.num_kv_heads = 8, p.head_dim = 128;
  p.dtype = PKV_DTYPE_BF16, p.block_size = BS, p.device = PKV_DEVICE_CPU, p.num_threads = threads;
  p.num_blocks = max_blocks + 2, p.host_num_blocks = max_blocks;
  bench b = {0};
  pkv_status s = pkv_engine_create(&p, &b.e);
  if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s), 1;
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  pkv_pool_info(b.e, &info);
  b.block_bytes = 2 * info.bytes_per_pool / info.num_blocks;
  /* Touch both tiers once, so no run pays first-touch page faults. */
  memset(info.k_base, 1, 2 * info.bytes_per_pool);
  memset(info.host_k_base, 1, 2 * info.host_bytes_per_pool);
  b.tokens = malloc(sizeof(int32_t) * (max_blocks + 1) * BS);
  uint64_t rng = 1;
  for (uint32_t i = 0; i < (max_blocks + 1) * BS; i++) b.tokens[i] = bench_token(&rng);
  char *src = malloc(max_blocks * b.block_bytes), *dst = malloc(max_blocks * b.block_bytes);
  memset(src, 2, max_blocks * b.block_bytes);
  memset(dst, 3, max_blocks * b.block_bytes);
  bench_calibrate_clock();

  printf(
      "pkv bench_tier_copies: CPU engine, %s threads (memcpy: 1); blocks of %.2f MiB (32 layers x "
      "K,V strided runs of %.0f KiB)\n\n",
      threads ? argv[argc - 1] : "one per core:", b.block_bytes / 1048576.0,
      b.block_bytes / 64 / 1024.0);
  printf("%7s %10s %12s %12s %12s %9s %9s %12s\n", "blocks", "MiB", "out GB/s", "in GB/s",
         "memcpy GB/s", "out/memcpy", "in/memcpy", "pkv ns/block");
  int rc = 0;
  for (uint32_t n = 1; n <= max_blocks && rc == 0; n *= 4) {
    double out = 0, in = 0, call = 0;
    rc = measure(&b, n, &out, &in, &call);
    if (rc) break;
    const double mc = memcpy_gbs(dst, src, n * b.block_bytes);
    printf("%7u %10.1f %12.2f %12.2f %12.2f %8.0f%% %8.0f%% %12.0f\n", n,
           n * b.block_bytes / 1048576.0, out, in, mc, 100 * out / mc, 100 * in / mc, call);
  }
  free(src), free(dst), free(b.tokens);
  pkv_engine_destroy(b.e);
  return rc ? 1 : 0;
}
