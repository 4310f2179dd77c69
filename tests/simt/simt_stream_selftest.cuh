// Host entry points of simt_stream_selftest.cu: kernels for the emulator's stream, event and
// capture test (test_simt_stream.cpp), each launched on a given stream.
#pragma once

#include <cuda_runtime_api.h>

// x[i] = x[i] * mul + add for i < n (one block of 64 threads per 64 elements).
void stream_affine(int *x, int mul, int add, int n, cudaStream_t stream);
// out[i] = in[i] + bias[i] + scalar for i < n.
void stream_add(float *out, const float *in, const float *bias, float scalar, int n,
                cudaStream_t stream);
