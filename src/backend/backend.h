// The backend interface: where the KV pool lives and how much memory the device has.
// The compute half (write_kv, attention, copy_blocks) joins this interface with the kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pkv/pkv.h"

namespace pkv {

struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // what can still be allocated (host: MemAvailable)
};

// K and V pools, each [layers][num_blocks][block_size][kv_heads][head_dim] (NHD).
struct PoolShape {
  uint32_t num_layers, num_blocks, block_size, kv_heads, head_dim, dtype_bytes;
  uint64_t bytes_per_pool() const {
    return uint64_t(num_layers) * num_blocks * block_size * kv_heads * head_dim * dtype_bytes;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int32_t device() const = 0;  // PKV_DEVICE_CPU or PKV_DEVICE_CUDA
  virtual void *k_pool() const = 0;
  virtual void *v_pool() const = 0;
};

// Host memory from /proc/meminfo.
MemoryInfo host_memory();

// CPU pool: anonymous memory, committed lazily as blocks are first written. Throws
// PKV_ERR_OUT_OF_MEMORY when the address space cannot be had.
std::unique_ptr<Backend> make_cpu_backend(const PoolShape &shape);

// True when the build has CUDA and device_id is a usable GPU; else false with the reason.
// Makes the first CUDA call of the process (never at load time).
bool cuda_usable(int32_t device_id, std::string *why);
// Device memory (cudaMemGetInfo). Throws PKV_ERR_NO_DEVICE / PKV_ERR_DEVICE.
MemoryInfo cuda_memory(int32_t device_id);
// Device pool (cudaMalloc). Throws PKV_ERR_NO_DEVICE / PKV_ERR_OUT_OF_MEMORY.
std::unique_ptr<Backend> make_cuda_backend(int32_t device_id, const PoolShape &shape);

// AUTO -> CUDA when usable, else CPU; CUDA when not usable -> PKV_ERR_NO_DEVICE.
int32_t resolve_device(int32_t device, int32_t device_id);

}  // namespace pkv
