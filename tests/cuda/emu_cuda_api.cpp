// The demo's cuda_api table from the CUDA emulator (emu_cuda_api.h).
#include "emu_cuda_api.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstring>

namespace {

struct Symbol {
  const char *name;
  void *fn;
};

// The emulator's functions by their CUDA names, as dlsym would find them in the libraries.
const Symbol kSymbols[] = {
    {"cudaGetDeviceCount", reinterpret_cast<void *>(&cudaGetDeviceCount)},
    {"cudaSetDevice", reinterpret_cast<void *>(&cudaSetDevice)},
    {"cudaMalloc", reinterpret_cast<void *>(&cudaMalloc)},
    {"cudaFree", reinterpret_cast<void *>(&cudaFree)},
    {"cudaHostAlloc", reinterpret_cast<void *>(&cudaHostAlloc)},
    {"cudaFreeHost", reinterpret_cast<void *>(&cudaFreeHost)},
    {"cudaHostGetDevicePointer", reinterpret_cast<void *>(&cudaHostGetDevicePointer)},
    {"cudaMemcpy", reinterpret_cast<void *>(&cudaMemcpy)},
    {"cudaStreamCreateWithFlags", reinterpret_cast<void *>(&cudaStreamCreateWithFlags)},
    {"cudaStreamDestroy", reinterpret_cast<void *>(&cudaStreamDestroy)},
    {"cudaStreamSynchronize", reinterpret_cast<void *>(&cudaStreamSynchronize)},
    {"cudaGetErrorString", reinterpret_cast<void *>(&cudaGetErrorString)},
    {"cublasCreate_v2", reinterpret_cast<void *>(&cublasCreate_v2)},
    {"cublasDestroy_v2", reinterpret_cast<void *>(&cublasDestroy_v2)},
    {"cublasSetStream_v2", reinterpret_cast<void *>(&cublasSetStream_v2)},
    {"cublasSetMathMode", reinterpret_cast<void *>(&cublasSetMathMode)},
    {"cublasSgemm_v2", reinterpret_cast<void *>(&cublasSgemm_v2)},
};

}  // namespace

void *emu_cuda_symbol(void *ctx, const char *name) {
  const char *skip = static_cast<const char *>(ctx);
  if (skip && std::strcmp(skip, name) == 0) return nullptr;
  for (const Symbol &s : kSymbols)
    if (std::strcmp(s.name, name) == 0) return s.fn;
  return nullptr;
}

int emu_cuda_api_load(cuda_api *api, char *error, size_t cap) {
  return cuda_api_resolve(api, emu_cuda_symbol, nullptr, error, cap);
}
