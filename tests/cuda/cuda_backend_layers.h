// The CUDA backend's cases of unequal layers in a paged pool (cuda_backend_layers.cpp), run by
// test_cuda_backend.cpp.
#pragma once

#include <cstdint>

// Runs them with seeds from `seed` on; the number that failed. Throws what the backend throws.
int run_layers_backend_cases(uint64_t seed);
