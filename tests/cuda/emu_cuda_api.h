// The demo's cuda_api table (tools/cuda_api.h) filled from the CUDA emulator's runtime and cuBLAS
// subset (tests/simt), as cuda_api_load fills it from libcudart and libcublas with dlsym.
#pragma once

#include <cstddef>

extern "C" {
#include "cuda_api.h"
}

// cuda_api_resolve's resolver over the emulator's functions by their CUDA names; ctx: a name to
// pretend missing (const char *), or nullptr.
void *emu_cuda_symbol(void *ctx, const char *name);

// cuda_api_load's stand-in: 0, or -1 with the name the emulator lacks in error[cap].
extern "C" int emu_cuda_api_load(cuda_api *api, char *error, size_t cap);
