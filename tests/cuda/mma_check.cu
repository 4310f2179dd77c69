// A test kernel for kernels/mma.cuh (test_mma.cpp): one warp multiplies whole matrices held in
// memory, each lane gathering its fragments by the PTX ISA's layouts as written here (not
// through the attention kernels' code). Built by the emulator for suite emu, by nvcc for gpu.
#include "mma.cuh"
#include "mma_check.h"

namespace {

using pkv::cuda::dev::mma_m16n8k16;
using pkv::cuda::dev::pack_bits;

// d = a b + c, then d = a b + d: a [16][16] and b [16][8] row major 16-bit elements, c and d
// [16][8] fp32 row major.
template <class T>
__global__ void __launch_bounds__(32)
    mma_check_kernel(const uint16_t *a, const uint16_t *b, const float *c, float *d, int times) {
  const int lane = threadIdx.x, group = lane / 4, tig = lane % 4;
  uint32_t fa[4], fb[2];
  float fd[4];
  for (int i = 0; i < 4; ++i) {
    const int row = group + 8 * (i % 2), col = 2 * tig + 8 * (i / 2);
    fa[i] = pack_bits(a[row * 16 + col], a[row * 16 + col + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    const int row = 2 * tig + 8 * i;
    fb[i] = pack_bits(b[row * 8 + group], b[(row + 1) * 8 + group]);
  }
  for (int i = 0; i < 4; ++i) fd[i] = c[(group + 8 * (i / 2)) * 8 + 2 * tig + i % 2];
  for (int t = 0; t < times; ++t) mma_m16n8k16<T>(fd, fa, fb);
  for (int i = 0; i < 4; ++i) d[(group + 8 * (i / 2)) * 8 + 2 * tig + i % 2] = fd[i];
}

}  // namespace

cudaError_t launch_mma_check(bool bf16, const uint16_t *a, const uint16_t *b, const float *c,
                             float *d, int times) {
  if (bf16)
    mma_check_kernel<__nv_bfloat16><<<1, 32>>>(a, b, c, d, times);
  else
    mma_check_kernel<__half><<<1, 32>>>(a, b, c, d, times);
  return cudaGetLastError();
}
