// The CUDA backend's memory for a step (DESIGN.md §6, "no stall in a step"): device buffers sized
// when the engine is created, and pinned staging slots used in turn, each guarded by an event, so
// the host queues a step's uploads without waiting for the device. Every wait of the host and
// every allocation is counted (pkv_stats.num_host_waits, num_device_allocs): after create they
// happen only where a step outgrows the bounds the engine was created with. Host code over the
// CUDA runtime API (the emulator provides it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "status.h"

namespace pkv {

// What the backend did that can stall the host: waits (stream and event syncs, and the implicit
// one of cudaFree) and allocations (cudaMalloc, cudaHostAlloc).
struct CudaCounters {
  uint64_t host_waits = 0;
  uint64_t allocs = 0;
};

inline void check_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  pkv_status s = err == cudaErrorMemoryAllocation ? PKV_ERR_OUT_OF_MEMORY : PKV_ERR_DEVICE;
  fail(s, "%s: %s", what, cudaGetErrorString(err));
}

// A device buffer that only grows. Growing frees the old one (cudaFree waits for the device) and
// allocates anew: both counted. Reserved at create for the engine's bounds, so a step within them
// never grows it.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(CudaCounters *counters) : counters_(counters) {}
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() { cudaFree(ptr_); }
  void *get(size_t bytes, const char *what) {
    if (bytes <= size_) return ptr_;
    if (ptr_) {
      ++counters_->host_waits;
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    size_ = 0;
    ++counters_->allocs;
    check_cuda(cudaMalloc(&ptr_, bytes), what);
    size_ = bytes;
    return ptr_;
  }
  void *ptr() const { return ptr_; }
  size_t size() const { return size_; }

 private:
  CudaCounters *counters_;
  void *ptr_ = nullptr;
  size_t size_ = 0;
};

// Pinned host slots for uploads, used in turn. acquire() hands out the next slot once the copies
// that read it last have run (its event; a host wait, counted, only when the device is kSlots
// uploads behind); the caller fills it, queues its copies from it, then calls queued() to record
// the slot's event after them. Pinned, so cudaMemcpyAsync from it is truly asynchronous and may
// be captured in a CUDA graph.
class StagingRing {
 public:
  static constexpr int kSlots = 3;
  explicit StagingRing(CudaCounters *counters) : counters_(counters) {}
  StagingRing(const StagingRing &) = delete;
  StagingRing &operator=(const StagingRing &) = delete;
  ~StagingRing() {
    for (Slot &s : slots_) {
      if (s.event) cudaEventDestroy(s.event);
      if (s.host) cudaFreeHost(s.host);
    }
  }
  // Every slot at least `bytes` (at create: the bound of one step's upload).
  void reserve(size_t bytes, const char *what) {
    for (int i = 0; i < kSlots; ++i) grow(slots_[i], bytes, what);
  }
  // The next slot, with room for `bytes`, free to write.
  char *acquire(size_t bytes, const char *what) {
    Slot &s = slots_[next_];
    if (s.pending) {
      const cudaError_t q = cudaEventQuery(s.event);
      if (q == cudaErrorNotReady) {
        ++counters_->host_waits;
        check_cuda(cudaEventSynchronize(s.event), what);
      } else {
        check_cuda(q, what);
      }
      s.pending = false;
    }
    grow(s, bytes, what);
    return s.host;
  }
  // The copies from the slot acquire() gave are queued on stream: mark its reuse after them.
  void queued(cudaStream_t stream, const char *what) {
    Slot &s = slots_[next_];
    check_cuda(cudaEventRecord(s.event, stream), what);
    s.pending = true;
    next_ = (next_ + 1) % kSlots;
  }

 private:
  struct Slot {
    char *host = nullptr;
    size_t bytes = 0;
    cudaEvent_t event = nullptr;
    bool pending = false;  // a recorded event not yet seen complete
  };
  void grow(Slot &s, size_t bytes, const char *what) {
    if (!s.event) {
      check_cuda(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming), what);
    }
    if (bytes <= s.bytes && s.host) return;
    if (s.host) cudaFreeHost(s.host);  // acquire() waited for its copies
    s.host = nullptr;
    s.bytes = 0;
    ++counters_->allocs;
    check_cuda(
        cudaHostAlloc(reinterpret_cast<void **>(&s.host), bytes ? bytes : 1, cudaHostAllocDefault),
        what);
    s.bytes = bytes;
  }
  CudaCounters *counters_;
  Slot slots_[kSlots];
  int next_ = 0;
};

}  // namespace pkv
