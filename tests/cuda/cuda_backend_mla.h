// The CUDA backend's MLA cases (cuda_backend_mla.cpp), run by test_cuda_backend.cpp.
#pragma once

#include <cstdint>

// Runs them with seeds from `seed` on; the number that failed. Throws what the backend throws.
int run_mla_backend_cases(uint64_t seed);
