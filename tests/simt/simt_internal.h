// Internal to the emulator runtime (simt_sched.cpp, simt_runtime.cpp, simt_stream.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace simt {

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Shared memory of the block running on this host thread: dynamic_smem() points at `bytes`
// filled with 0xFF, ending at a guard page.
void prepare_dynamic_smem(size_t bytes);

// Maximum dynamic shared memory allowed for a kernel (cudaFuncSetAttribute), default 48 KiB.
size_t max_dynamic_smem(const void *kernel_id);

// Records a launch error for cudaGetLastError.
void set_last_error(int err);

// The checks a launch makes before it is queued (grid, block and shared memory limits).
struct LaunchConfig;
bool launch_config_ok(const LaunchConfig &cfg, const void *kernel_id);

// Where a pointer points (simt_runtime.cpp): a cudaMalloc allocation, a cudaHostAlloc one, or
// neither (pageable host memory).
enum class MemKind { device, pinned, pageable };
MemKind memory_kind(const void *p);

// simt_stream.cpp's side of the synchronous runtime calls. Each returns a cudaError_t:
// cudaErrorStreamCaptureUnsupported when a capture forbids the call now (counted, the capture
// invalidated), else cudaSuccess once the call's implicit sync ran the pending work.
enum class HostCall { malloc, free, host_alloc, host_free };
int host_call(HostCall call, const char *api);  // frees sync the device; counted
int sync_call(const char *api);                 // a synchronous cudaMemcpy / cudaMemset

// Completes an mma.sync of a warp (simt_mma.cpp): lanes[l] is lane l's collective value, the
// address of its fragments.
void mma_complete(const uint64_t (&lanes)[32]);

}  // namespace simt
