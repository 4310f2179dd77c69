// The CUDA backend's graph steps (cuda_backend_graph.cpp), run by test_cuda_backend.cpp.
#pragma once

// 0 when the decode loop under capture matched the reference and the steps neither waited nor
// allocated; 1 otherwise. Throws what the backend throws.
int run_graph_backend_cases();
