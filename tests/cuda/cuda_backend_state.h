// The CUDA backend's state slots (cuda_backend_state.cpp), run by test_cuda_backend.cpp.
#pragma once

// The number of cases that failed. Throws what the backend throws.
int run_state_backend_cases();
