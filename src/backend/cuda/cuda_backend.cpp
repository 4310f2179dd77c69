// CUDA backend glue: device checks, memory queries and the device pool. Kernels live in kernels/.
#include <cuda_runtime_api.h>

#include "backend/backend.h"
#include "status.h"

namespace pkv {
namespace {

void check_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  pkv_status s = err == cudaErrorMemoryAllocation ? PKV_ERR_OUT_OF_MEMORY : PKV_ERR_DEVICE;
  fail(s, "%s: %s", what, cudaGetErrorString(err));
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(int32_t device_id, const PoolShape &shape) : device_id_(device_id) {
    check_cuda(cudaSetDevice(device_id), "cudaSetDevice");
    const uint64_t bytes = shape.bytes_per_pool();
    check_cuda(cudaMalloc(&k_, bytes), "allocating the K pool");
    cudaError_t err = cudaMalloc(&v_, bytes);
    if (err != cudaSuccess) {
      cudaFree(k_);
      check_cuda(err, "allocating the V pool");
    }
  }
  ~CudaBackend() override {
    cudaSetDevice(device_id_);
    cudaFree(k_);
    cudaFree(v_);
  }
  int32_t device() const override { return PKV_DEVICE_CUDA; }
  void *k_pool() const override { return k_; }
  void *v_pool() const override { return v_; }
  void copy_blocks(const int32_t *, const int32_t *, uint32_t n) override {
    if (n) fail(PKV_ERR_UNSUPPORTED, "copy_blocks on CUDA is not wired yet");
  }
  void attention(const StepView &, const AttentionCall &) override {
    fail(PKV_ERR_UNSUPPORTED, "pkv_attention on CUDA is not wired yet");
  }
  void set_stream(void *stream) override { stream_ = stream; }

 private:
  int32_t device_id_;
  void *k_ = nullptr;
  void *v_ = nullptr;
  void *stream_ = nullptr;
};

}  // namespace

bool cuda_usable(int32_t device_id, std::string *why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    *why = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return false;
  }
  if (device_id < 0 || device_id >= count) {
    *why = "device " + std::to_string(device_id) + " of " + std::to_string(count) + " GPUs";
    return false;
  }
  return true;
}

MemoryInfo cuda_memory(int32_t device_id) {
  std::string why;
  if (!cuda_usable(device_id, &why)) fail(PKV_ERR_NO_DEVICE, "no usable CUDA device: %s", why.c_str());
  check_cuda(cudaSetDevice(device_id), "cudaSetDevice");
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return MemoryInfo{total_bytes, free_bytes};
}

std::unique_ptr<Backend> make_cuda_backend(int32_t device_id, const PoolShape &shape) {
  std::string why;
  if (!cuda_usable(device_id, &why)) fail(PKV_ERR_NO_DEVICE, "no usable CUDA device: %s", why.c_str());
  return std::make_unique<CudaBackend>(device_id, shape);
}

}  // namespace pkv
