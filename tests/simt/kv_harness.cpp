// Shared test harness: see kv_harness.h.
#include "kv_harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace kvtest {

const char *dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::f16 ? "f16" : "bf16";
}

// Host buffers are bytes (std::vector<unsigned char>): elements are copied out and in, never read
// through a pointer of another type.
template <class E>
E load_as(const void *p, size_t i) {
  E e;
  std::memcpy(&e, static_cast<const unsigned char *>(p) + i * sizeof(E), sizeof(E));
  return e;
}
template <class E>
void store_as(void *p, size_t i, E e) {
  std::memcpy(static_cast<unsigned char *>(p) + i * sizeof(E), &e, sizeof(E));
}

double load_elem(DType t, const void *p, size_t i) {
  switch (t) {
    case DType::f32:
      return load_as<float>(p, i);
    case DType::f16:
      return __half2float(load_as<__half>(p, i));
    default:
      return __bfloat162float(load_as<__nv_bfloat16>(p, i));
  }
}

void store_elem(DType t, void *p, size_t i, double x) {
  switch (t) {
    case DType::f32:
      return store_as(p, i, float(x));
    case DType::f16:
      return store_as(p, i, __float2half_rn(float(x)));
    default:
      return store_as(p, i, __float2bfloat16_rn(float(x)));
  }
}

void tolerances(DType t, double *atol, double *rtol) {
  if (t == DType::f32)
    *atol = 2e-5, *rtol = 2e-4;
  else if (t == DType::f16)
    *atol = 1e-3, *rtol = 2e-3;
  else
    *atol = 8e-3, *rtol = 8e-3;
}

void check_cuda(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

DevBuf::DevBuf(size_t bytes) { check_cuda(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc"); }
DevBuf::~DevBuf() { cudaFree(p_); }
void DevBuf::upload(const void *src, size_t bytes) {
  check_cuda(cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice), "upload");
}
void DevBuf::download(void *dst, size_t bytes) const {
  check_cuda(cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost), "download");
}

int require_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  return 0;
}

}  // namespace kvtest
