// The CUDA backend's sparse-attention cases (cuda_backend_sparse.cpp), run by
// test_cuda_backend.cpp.
#pragma once

#include <cstdint>

// Runs them with seeds from `seed` on; the number that failed. Throws what the backend throws.
int run_sparse_backend_cases(uint64_t seed);
