// Internal to the emulator runtime (simt_sched.cpp, simt_runtime.cpp).
#pragma once

#include <cstddef>

namespace simt {

[[noreturn]] void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Shared memory of the block running on this host thread: dynamic_smem() points at `bytes`
// filled with 0xFF, ending at a guard page.
void prepare_dynamic_smem(size_t bytes);

// Maximum dynamic shared memory allowed for a kernel (cudaFuncSetAttribute), default 48 KiB.
size_t max_dynamic_smem(const void *kernel_id);

// Records a launch error for cudaGetLastError.
void set_last_error(int err);

}  // namespace simt
