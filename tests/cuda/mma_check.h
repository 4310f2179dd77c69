// The test kernel of mma_check.cu, for test_mma.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

// d = a b + c by mma_m16n8k16 `times` times in a row (d = a b + d after the first), on one
// warp; a [16][16] and b [16][8] of f16 (or bf16) bits, c and d [16][8] fp32, all row major in
// device memory. Asynchronous; returns the launch status.
cudaError_t launch_mma_check(bool bf16, const uint16_t *a, const uint16_t *b, const float *c,
                             float *d, int times);
