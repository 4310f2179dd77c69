// Kernels that exercise the emulator itself (test_simt.cpp): warp collectives, barriers, shared
// memory, atomics, and the misuses it must refuse. Not part of pkv.
#include <cstdint>

#include "simt_selftest.cuh"

namespace {

// out[tid * 6 + i]: xor-sum over the warp, lane 3's value, up/down by 1 within 8 lanes, ballot of
// odd lanes, lane of the next block thread read through static shared memory.
__global__ void __launch_bounds__(64) collectives_kernel(int *out) {
  __shared__ int ring[64];
  const int tid = threadIdx.x, lane = tid % 32;
  int sum = tid;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int *o = out + tid * 6;
  o[0] = sum;
  o[1] = __shfl_sync(0xffffffffu, tid, 3);
  o[2] = __shfl_up_sync(0xffffffffu, tid, 1, 8);
  o[3] = __shfl_down_sync(0xffffffffu, tid, 1, 8);
  o[4] = int(__ballot_sync(0xffffffffu, lane % 2));
  ring[tid] = tid;
  __syncthreads();
  o[5] = ring[(tid + 1) % 64];
}

__global__ void __launch_bounds__(64) atomic_kernel(int *counter) { atomicAdd(counter, 1); }

__global__ void __launch_bounds__(32) smem_poison_kernel(float *out) {
  extern __shared__ float dyn[];
  out[threadIdx.x] = dyn[threadIdx.x];
}

__global__ void __launch_bounds__(32) divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

__global__ void __launch_bounds__(32) exit_before_barrier_kernel() {
  if (threadIdx.x == 5) return;
  __syncthreads();
}

__global__ void __launch_bounds__(32) exited_lane_kernel(int *out) {
  if (threadIdx.x == 3) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, int(threadIdx.x), 1);
}

__global__ void __launch_bounds__(32) bad_mask_kernel(int *out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, int(threadIdx.x), 1);
}

}  // namespace

void selftest_collectives(int *out) { collectives_kernel<<<1, 64>>>(out); }
void selftest_atomic(int *counter) { atomic_kernel<<<dim3(4, 2), 64>>>(counter); }
void selftest_smem_poison(float *out) { smem_poison_kernel<<<1, 32, 32 * sizeof(float)>>>(out); }
void selftest_divergent_barrier() { divergent_barrier_kernel<<<1, 32>>>(); }
void selftest_exit_before_barrier() { exit_before_barrier_kernel<<<1, 32>>>(); }
void selftest_exited_lane(int *out) { exited_lane_kernel<<<1, 32>>>(out); }
void selftest_bad_mask(int *out) { bad_mask_kernel<<<1, 32>>>(out); }
void selftest_too_many_threads() { atomic_kernel<<<1, 2048>>>(nullptr); }
