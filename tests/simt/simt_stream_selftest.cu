// Kernels for the emulator's stream, event and capture test (test_simt_stream.cpp). Not part of
// pkv.
#include "simt_stream_selftest.cuh"

namespace {

__global__ void __launch_bounds__(64) affine_kernel(int *x, int mul, int add, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = x[i] * mul + add;
}

__global__ void __launch_bounds__(64)
    add_kernel(float *out, const float *in, const float *bias, float scalar, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] + bias[i] + scalar;
}

}  // namespace

void stream_affine(int *x, int mul, int add, int n, cudaStream_t stream) {
  affine_kernel<<<(n + 63) / 64, 64, 0, stream>>>(x, mul, add, n);
}

void stream_add(float *out, const float *in, const float *bias, float scalar, int n,
                cudaStream_t stream) {
  add_kernel<<<(n + 63) / 64, 64, 0, stream>>>(out, in, bias, scalar, n);
}
