// The CUDA runtime calls the launchers and tests use, on host memory. "Device" memory is filled
// with 0xFF bytes (NaN in f32, f16 and bf16) so a read of anything never written shows, and ends
// at a guard page (without ASan; with it, ASan's own redzones do the job). Pinned host memory
// (cudaHostAlloc) is the same, kept apart so cudaFree / cudaFreeHost of the wrong kind fail; its
// device pointer (cudaHostGetDevicePointer) is the host pointer, as under UVA. Streams, events,
// async copies and graphs are in simt_stream.cpp, simt_event.cpp and simt_graph.cpp
// (simt_stream.h): the allocations and synchronous copies here first ask them whether a capture
// forbids the call, and run the pending work they imply.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

#include "simt.h"
#include "simt_arch.h"
#include "simt_internal.h"

namespace simt {
namespace {

constexpr size_t kDefaultSmem = 48u << 10;

std::mutex g_mu;
std::map<const void *, size_t> g_smem_limit;  // cudaFuncSetAttribute
struct HostAlloc {
  std::pair<void *, size_t> mapping;  // (mapping, mapping bytes)
  size_t bytes;
};
std::map<const void *, HostAlloc> g_allocs;       // cudaMalloc: ptr -> its allocation
std::map<const void *, HostAlloc> g_host_allocs;  // cudaHostAlloc: ptr -> its allocation
thread_local int tls_error = cudaSuccess;

[[maybe_unused]] size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

// `bytes` of 0xFF that end 256-aligned right before a PROT_NONE page (or malloc under ASan).
void *guarded_alloc(size_t bytes, std::pair<void *, size_t> *mapping) {
#if defined(__SANITIZE_ADDRESS__)
  void *p = nullptr;  // exactly `bytes`, so ASan sees an overflow of even one byte
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return nullptr;
  *mapping = {p, 0};
  memset(p, 0xFF, bytes);
  return p;
#else
  size_t body = round_up(bytes ? bytes : 1, 256);
  size_t page = size_t(sysconf(_SC_PAGESIZE)), len = round_up(body, page) + page;
  void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  char *guard = static_cast<char *>(m) + len - page;
  mprotect(guard, page, PROT_NONE);
  *mapping = {m, len};
  memset(guard - body, 0xFF, body);
  return guard - body;
#endif
}

void guarded_free(const std::pair<void *, size_t> &mapping) {
  if (mapping.second == 0)
    free(mapping.first);
  else
    munmap(mapping.first, mapping.second);
}

struct Smem {
  void *ptr = nullptr;
  size_t bytes = 0;
  std::pair<void *, size_t> mapping{nullptr, 0};
};
thread_local Smem tls_smem;

}  // namespace

void set_last_error(int err) { tls_error = err; }

MemKind memory_kind(const void *p) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (const auto *allocs : {&g_allocs, &g_host_allocs}) {
    auto it = allocs->upper_bound(p);
    if (it == allocs->begin()) continue;
    --it;
    const char *base = static_cast<const char *>(it->first);
    if (static_cast<const char *>(p) < base + (it->second.bytes ? it->second.bytes : 1))
      return allocs == &g_allocs ? MemKind::device : MemKind::pinned;
  }
  return MemKind::pageable;
}

size_t max_dynamic_smem(const void *kernel_id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_smem_limit.find(kernel_id);
  return it == g_smem_limit.end() ? kDefaultSmem : it->second;
}

void prepare_dynamic_smem(size_t bytes) {
  Smem &s = tls_smem;
  if (s.bytes != bytes || !s.ptr) {
    if (s.ptr) guarded_free(s.mapping);
    s.ptr = guarded_alloc(bytes, &s.mapping);
    s.bytes = bytes;
    if (!s.ptr) die("cannot allocate %zu bytes of shared memory", bytes);
  }
  memset(s.ptr, 0xFF, bytes);
}

void *dynamic_smem() {
  if (!tls_smem.ptr) die("dynamic shared memory used outside a kernel");
  return tls_smem.ptr;
}

}  // namespace simt

using simt::g_allocs;
using simt::g_mu;

extern "C" {

cudaError_t cudaMalloc(void **p, size_t bytes) {
  if (cudaError_t e = cudaError_t(simt::host_call(simt::HostCall::malloc, "cudaMalloc"))) return e;
  std::pair<void *, size_t> mapping;
  void *ptr = simt::guarded_alloc(bytes, &mapping);
  if (!ptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(g_mu);
  g_allocs[ptr] = {mapping, bytes};
  *p = ptr;
  return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
  if (!p) return cudaSuccess;
  if (cudaError_t e = cudaError_t(simt::host_call(simt::HostCall::free, "cudaFree"))) return e;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_allocs.find(p);
  if (it == g_allocs.end()) return cudaErrorInvalidValue;
  simt::guarded_free(it->second.mapping);
  g_allocs.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int) {
  if (cudaError_t e = cudaError_t(simt::host_call(simt::HostCall::host_alloc, "cudaHostAlloc")))
    return e;
  std::pair<void *, size_t> mapping;
  void *ptr = simt::guarded_alloc(bytes, &mapping);
  if (!ptr) return cudaErrorMemoryAllocation;
  std::lock_guard<std::mutex> lock(g_mu);
  simt::g_host_allocs[ptr] = {mapping, bytes};
  *p = ptr;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
  if (!p) return cudaSuccess;
  if (cudaError_t e = cudaError_t(simt::host_call(simt::HostCall::host_free, "cudaFreeHost")))
    return e;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = simt::g_host_allocs.find(p);
  if (it == simt::g_host_allocs.end()) return cudaErrorInvalidValue;
  simt::guarded_free(it->second.mapping);
  simt::g_host_allocs.erase(it);
  return cudaSuccess;
}

// Any address inside a cudaHostAlloc allocation; flags must be 0, as CUDA requires.
cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned int flags) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = simt::g_host_allocs.upper_bound(host);
  if (flags != 0 || it == simt::g_host_allocs.begin()) return cudaErrorInvalidValue;
  --it;
  const char *base = static_cast<const char *>(it->first), *h = static_cast<const char *>(host);
  if (h >= base + (it->second.bytes ? it->second.bytes : 1)) return cudaErrorInvalidValue;
  *device = host;
  return cudaSuccess;
}

// Synchronous: after the null stream's pending work (simt_stream.cpp; the async copies are there).
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
  if (cudaError_t e = cudaError_t(simt::sync_call("cudaMemcpy"))) return e;
  if (n) memmove(dst, src, n);
  return cudaSuccess;
}

// The host's memory stands for the device's.
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  *total_bytes = size_t(sysconf(_SC_PHYS_PAGES)) * page;
  *free_bytes = size_t(sysconf(_SC_AVPHYS_PAGES)) * page;
  return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t n) {
  if (cudaError_t e = cudaError_t(simt::sync_call("cudaMemset"))) return e;
  if (n) memset(p, value, n);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = cudaError_t(simt::tls_error);
  simt::tls_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return cudaError_t(simt::tls_error); }

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error (simt)";
    case cudaErrorInvalidValue:
      return "invalid argument (simt)";
    case cudaErrorMemoryAllocation:
      return "out of memory (simt)";
    case cudaErrorInvalidConfiguration:
      return "invalid launch configuration (simt)";
    default:
      return "error (simt)";
  }
}

cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return cudaSuccess;
}

// The device SIMT_ARCH names (simt_arch.h).
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
  switch (attr) {
    case cudaDevAttrMultiProcessorCount:
      *value = simt::arch().sms;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(simt::arch().max_smem_optin);
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = simt::arch().major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = simt::arch().minor;
      return cudaSuccess;
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > simt::arch().max_smem_optin) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_mu);
  simt::g_smem_limit[func] = size_t(value);
  return cudaSuccess;
}

}  // extern "C"
