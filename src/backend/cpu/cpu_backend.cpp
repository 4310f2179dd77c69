// CPU backend: the pool in host memory. The compute half (threads + SIMD) joins with the kernels.
#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "backend/backend.h"
#include "status.h"

namespace pkv {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const PoolShape &shape) : bytes_(shape.bytes_per_pool()) {
    // One mapping for K then V. Anonymous pages are zero and committed on first write, so a
    // pool sized from the host's free memory costs only the blocks actually used.
    void *p = mmap(nullptr, 2 * bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fail(PKV_ERR_OUT_OF_MEMORY, "cannot map a %llu-byte KV pool: %s",
           (unsigned long long)(2 * bytes_), std::strerror(errno));
    base_ = static_cast<char *>(p);
  }
  ~CpuBackend() override { munmap(base_, 2 * bytes_); }
  int32_t device() const override { return PKV_DEVICE_CPU; }
  void *k_pool() const override { return base_; }
  void *v_pool() const override { return base_ + bytes_; }

 private:
  uint64_t bytes_;
  char *base_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const PoolShape &shape) {
  return std::make_unique<CpuBackend>(shape);
}

}  // namespace pkv
