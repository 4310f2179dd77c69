// Internal to the emulator runtime (simt_sched.cpp, simt_runtime.cpp).
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

// Completes an mma.sync of a warp (simt_mma.cpp): lanes[l] is lane l's collective value, the
// address of its fragments.
void mma_complete(const uint64_t (&lanes)[32]);

}  // namespace simt
