// bench_write_kv_gpu.cpp - the write_kv kernel alone (vLLM's reshape_and_cache): new tokens' K
// and V rows into their slots of one layer of Llama-3-8B's paged pool (8 kv heads x 128, block
// size 16), bf16 and an e4m3 pool. pkv_attention runs it inside each call, so it is timed here
// through its launcher (kernels/cache_ops.cuh, linked from the kernels' static library: one
// launch a call, counted by this file). Slots are a random permutation of whole blocks, as after
// a while of serving. GB/s = bytes the kernel must move (k and v read, the pool's rows written)
// / median time, the L2 flushed before each call.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cache_ops.cuh"

extern "C" {
#include "bench_attention_gpu.h"
#include "bench_step_gpu.h"
#include "bench_util.h"
}

namespace {

constexpr int kKvHeads = 8, kHeadDim = 128, kBlock = 16, kRuns = 15;
using pkv::cuda::DType;

struct WriteCase {
  int32_t tokens;
  DType pool;
};

// Median seconds of kRuns launches after a warm-up; < 0 on failure.
double time_writes(const pkv::cuda::KvLayer &layer, const void *k, const void *v,
                   const int64_t *slots, int32_t tokens) {
  std::vector<double> t(kRuns);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  double result = -1;
  for (int i = 0; i <= kRuns; i++) {
    bench_gpu_flush_l2(uint32_t(i));
    cudaEventRecord(e0, bench_gpu_stream());
    cudaError_t err = pkv::cuda::launch_write_kv(layer, k, v, slots, tokens, bench_gpu_stream());
    cudaEventRecord(e1, bench_gpu_stream());
    float ms = 0.f;
    if (err == cudaSuccess) err = cudaEventSynchronize(e1);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, e0, e1);
    if (err != cudaSuccess) {
      bench_gpu_cuda_fail(err, "launch_write_kv");
      break;
    }
    if (i > 0) t[i - 1] = ms * 1e-3;
    if (i == kRuns) result = bench_median(t.data(), kRuns);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return result;
}

// One row: buffers, a slot mapping over shuffled blocks, the timing; GB/s or < 0.
double run_case(const WriteCase &c, uint64_t *state) {
  const size_t row = size_t(kKvHeads) * kHeadDim;
  const bool fp8 = c.pool == DType::fp8_e4m3;
  const int32_t blocks = (c.tokens + kBlock - 1) / kBlock * 4;  // the pool 4x the tokens' blocks
  const size_t in_bytes = size_t(c.tokens) * row * 2, pool_bytes = size_t(blocks) * kBlock * row;
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  for (int32_t b = 0; b < blocks; b++) order[size_t(b)] = b;
  for (int32_t b = blocks - 1; b > 0; b--)
    std::swap(order[size_t(b)], order[bench_next(state) % uint64_t(b + 1)]);
  std::vector<int64_t> slots(static_cast<size_t>(c.tokens));
  for (int32_t t = 0; t < c.tokens; t++)
    slots[size_t(t)] = int64_t(order[size_t(t / kBlock)]) * kBlock + t % kBlock;
  void *k = nullptr, *v = nullptr, *kc = nullptr, *vc = nullptr, *dslots = nullptr;
  float *scales = nullptr;
  const std::vector<float> scale_values(kKvHeads, 1.f / 64);  // values ~0.1 .. 0.25: codes ~6 .. 16
  const size_t elem = fp8 ? 1 : 2;
  cudaError_t err;
  double gbs = -1;
  if ((err = cudaMalloc(&k, in_bytes)) || (err = cudaMalloc(&v, in_bytes)) ||
      (err = cudaMalloc(&kc, pool_bytes * elem)) || (err = cudaMalloc(&vc, pool_bytes * elem)) ||
      (err = cudaMalloc(&dslots, slots.size() * sizeof(int64_t))) ||
      (err = cudaMalloc(reinterpret_cast<void **>(&scales), sizeof(float) * kKvHeads)) ||
      (err = cudaMemcpy(dslots, slots.data(), slots.size() * sizeof(int64_t),
                        cudaMemcpyHostToDevice)) ||
      (err = cudaMemcpy(scales, scale_values.data(), sizeof(float) * kKvHeads,
                        cudaMemcpyHostToDevice))) {
    bench_gpu_cuda_fail(err, "write_kv buffers");
  } else if (bench_gpu_fill(k, in_bytes, PKV_DTYPE_BF16, state) == 0 &&
             bench_gpu_fill(v, in_bytes, PKV_DTYPE_BF16, state) == 0) {
    pkv::cuda::KvLayer layer{};
    layer.k = kc, layer.v = vc, layer.block_size = kBlock, layer.kv_heads = kKvHeads;
    layer.head_dim = kHeadDim, layer.dtype = DType::bf16, layer.kv_dtype = c.pool;
    layer.k_scale = fp8 ? scales : nullptr, layer.v_scale = fp8 ? scales : nullptr;
    const double sec = time_writes(layer, k, v, static_cast<const int64_t *>(dslots), c.tokens);
    const double bytes = double(c.tokens) * row * 2 * (2 + elem) + double(c.tokens) * 8;
    if (sec > 0) gbs = bytes / sec * 1e-9;
  }
  cudaFree(k), cudaFree(v), cudaFree(kc), cudaFree(vc), cudaFree(dslots), cudaFree(scales);
  return gbs;
}

}  // namespace

extern "C" int bench_write_kv_gpu_table(double ref_gbs, const char *ref_name, int quick) {
  std::printf(
      "\nwrite_kv (launch_write_kv alone, 1 launch a call): %d kv heads x %d, bf16 rows, block "
      "%d, slots over shuffled blocks; GB/s = (k, v read + pool rows written + slots) / median\n",
      kKvHeads, kHeadDim, kBlock);
  std::printf("%-5s %7s %9s %8s %9s\n", "pool", "tokens", "MiB", "GB/s", ref_name);
  const WriteCase cases[] = {{64, DType::bf16},
                             {2048, DType::bf16},
                             {16384, DType::bf16},
                             {2048, DType::fp8_e4m3},
                             {16384, DType::fp8_e4m3}};
  uint64_t state = 17;
  int rc = 0;
  for (const WriteCase &c : cases) {
    if (quick && c.tokens > 2048) continue;
    const double gbs = run_case(c, &state);
    const bool fp8 = c.pool == DType::fp8_e4m3;
    const double mib = double(c.tokens) * kKvHeads * kHeadDim * 2 * (fp8 ? 3 : 4) / 1048576.0;
    if (gbs <= 0) {
      std::printf("%-5s %7d failed\n", fp8 ? "e4m3" : "bf16", c.tokens);
      rc = 1;
      continue;
    }
    std::printf("%-5s %7d %9.1f %8.1f %8.0f%%\n", fp8 ? "e4m3" : "bf16", c.tokens, mib, gbs,
                100.0 * gbs / ref_gbs);
    char shape[48];
    std::snprintf(shape, sizeof shape, "%d tokens, %s pool", c.tokens, fp8 ? "e4m3" : "bf16");
    if (c.tokens >= 2048) bench_gpu_roofline("write_kv", shape, gbs);
    std::fflush(stdout);
  }
  return rc;
}
