// simt.h: run pkv's CUDA kernel sources on the CPU, as C++ (DESIGN.md §6, §9).
//
// A kernel .cu is turned into .cpp by cu2cpp.py (only `k<<<grid, block, smem, stream>>>(args)`
// and `extern __shared__` are rewritten) and compiled by g++ with `-include simt.h`. The types come
// from CUDA's own headers (cuda_runtime_api.h, cuda_fp16.h, cuda_bf16.h compile as host code);
// this header supplies what only nvcc knows: thread indices, barriers, warp collectives, shared
// memory, intrinsics. simt_sched.cpp runs each CUDA thread as a fiber; the threads of a block take
// turns and meet at real barriers:
//   - __syncthreads(): every thread of the block must reach the same call site; a thread that
//     exits or waits at another barrier while others wait aborts the run with the sites named.
//   - __shfl_*_sync / __ballot_sync / __syncwarp(mask): wait for exactly the lanes of mask, at
//     the same call site; a lane of the mask that exited aborts. mma.sync (kernels/mma.cuh)
//     waits for the whole warp the same way, then multiplies the lanes' fragments.
//   - static __shared__ is per worker thread storage (one block runs at a time per worker);
//     dynamic shared memory is filled with 0xFF (NaN) at each block start, with a guard page.
// Environment: SIMT_ORDER=forward|reverse|random (order fibers resume in), SIMT_SEED=n,
// SIMT_THREADS=n (blocks run on n host threads; default 1), SIMT_STREAMS=immediate|deferred (when
// stream work runs; streams, events and graph capture: simt_stream.h).
#pragma once

#include <cuda_runtime_api.h>
#include <math.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __shared__
#define __shared__ static thread_local
#define __launch_bounds__(...)

namespace simt {

struct ThreadCtx {
  uint3 tid;
  uint32_t linear, lane, warp;
};

extern thread_local ThreadCtx *tls_thread;
extern thread_local uint3 tls_block_idx;
extern thread_local dim3 tls_block_dim;
extern thread_local dim3 tls_grid_dim;

void *dynamic_smem();

enum class Op { shfl_idx, shfl_xor, shfl_up, shfl_down, sync, ballot, any, all, mma };
uint64_t warp_op(Op op, unsigned mask, uint64_t value, int param, int width, const char *file,
                 int line);
void sync_threads(const char *file, int line);

struct Site {
  const char *file;
  int line;
};

struct SyncThreads : Site {
  void operator()() const { sync_threads(file, line); }
};

template <Op kOp> struct Shfl : Site {
  template <class T> T operator()(unsigned mask, T var, int param, int width = 32) const {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a wide type");
    uint64_t bits = 0;
    std::memcpy(&bits, &var, sizeof(T));
    bits = warp_op(kOp, mask, bits, param, width, file, line);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
  }
};

template <Op kOp> struct Vote : Site {
  unsigned operator()(unsigned mask, int pred) const {
    return unsigned(warp_op(kOp, mask, pred != 0, 0, 32, file, line));
  }
};

struct SyncWarp : Site {
  void operator()(unsigned mask = 0xffffffffu) const {
    warp_op(Op::sync, mask, 0, 0, 32, file, line);
  }
};

// Kernel launch, the target of cu2cpp's rewrite of `k<<<cfg>>>(args)`.
struct LaunchConfig {
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr)
      : grid(g), block(b), smem(s), stream(st) {}
};

void run_grid(const LaunchConfig &cfg, const void *kernel_id, void (*body)(void *), void *arg);

// Checks the configuration, then runs `run` (the grid) now, queues it on cfg.stream (deferred
// mode) or records it in the stream's capture (simt_stream.cpp, simt_stream.h).
void submit_launch(const LaunchConfig &cfg, const void *kernel_id, std::function<void()> run);

template <class... P, class... A>
void launch(const LaunchConfig &cfg, void (*kernel)(P...), A &&...args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  // Arguments are converted to the parameter types once, like a real launch, and kept by value
  // until the grid runs: a queued launch runs later, a captured one at each graph replay, with
  // the values of the launch. Each thread gets its own copy through the call.
  using Params = std::tuple<std::decay_t<P>...>;
  auto params = std::make_shared<const Params>(std::forward<A>(args)...);
  const void *id = reinterpret_cast<const void *>(kernel);
  submit_launch(cfg, id, [cfg, id, kernel, params] {
    struct Ctx {
      void (*kernel)(P...);
      const Params *params;
    } ctx{kernel, params.get()};
    run_grid(
        cfg, id,
        [](void *p) {
          auto *c = static_cast<Ctx *>(p);
          std::apply(c->kernel, *c->params);
        },
        &ctx);
  });
}

// Tensor cores: mma.sync.aligned.m16n8k16.row.col.f32 with f16 or bf16 operands, d += a b,
// fragments as the PTX ISA lays them out (kernels/mma.cuh, which calls this where nvcc runs the
// instruction; simt_mma.cpp). A collective of all 32 lanes of the warp, at one call site.
enum class MmaType { f16, bf16 };
void mma_m16n8k16(MmaType type, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                  const char *file, int line);

}  // namespace simt

#define SIMT_MMA 1
#define threadIdx (::simt::tls_thread->tid)
#define blockIdx (::simt::tls_block_idx)
#define blockDim (::simt::tls_block_dim)
#define gridDim (::simt::tls_grid_dim)
#define warpSize 32

#define __syncthreads      \
  ::simt::SyncThreads {    \
    { __FILE__, __LINE__ } \
  }
#define __syncwarp         \
  ::simt::SyncWarp {       \
    { __FILE__, __LINE__ } \
  }
#define __shfl_sync                    \
  ::simt::Shfl<::simt::Op::shfl_idx> { \
    { __FILE__, __LINE__ }             \
  }
#define __shfl_xor_sync                \
  ::simt::Shfl<::simt::Op::shfl_xor> { \
    { __FILE__, __LINE__ }             \
  }
#define __shfl_up_sync                \
  ::simt::Shfl<::simt::Op::shfl_up> { \
    { __FILE__, __LINE__ }            \
  }
#define __shfl_down_sync                \
  ::simt::Shfl<::simt::Op::shfl_down> { \
    { __FILE__, __LINE__ }              \
  }
#define __ballot_sync                \
  ::simt::Vote<::simt::Op::ballot> { \
    { __FILE__, __LINE__ }           \
  }
#define __any_sync                \
  ::simt::Vote<::simt::Op::any> { \
    { __FILE__, __LINE__ }        \
  }
#define __all_sync                \
  ::simt::Vote<::simt::Op::all> { \
    { __FILE__, __LINE__ }        \
  }

// Intrinsics: the CPU's own math, same names as CUDA's device functions.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __fdiv_rn(float a, float b) { return a / b; }  // IEEE division: the CPU's own
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
inline unsigned __float_as_uint(float x) {
  unsigned i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline float __uint_as_float(unsigned i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
template <class T> inline T __ldg(const T *p) { return *p; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// Atomics: blocks may run on several host threads, so these are real atomics.
template <class T> inline T simt_atomic_rmw(T *p, T (*f)(T, T), T v) {
  T old, next;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do {
    next = f(old, v);
  } while (!__atomic_compare_exchange(p, &old, &next, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return old;
}
template <class T> inline T atomicAdd(T *p, T v) {
  return simt_atomic_rmw<T>(
      p, [](T a, T b) { return T(a + b); }, v);
}
template <class T> inline T atomicSub(T *p, T v) {
  return simt_atomic_rmw<T>(
      p, [](T a, T b) { return T(a - b); }, v);
}
template <class T> inline T atomicMax(T *p, T v) {
  return simt_atomic_rmw<T>(
      p, [](T a, T b) { return a < b ? b : a; }, v);
}
template <class T> inline T atomicMin(T *p, T v) {
  return simt_atomic_rmw<T>(
      p, [](T a, T b) { return b < a ? b : a; }, v);
}
template <class T> inline T atomicExch(T *p, T v) {
  return simt_atomic_rmw<T>(
      p, [](T, T b) { return b; }, v);
}
template <class T> inline T atomicCAS(T *p, T expected, T desired) {
  __atomic_compare_exchange(p, &expected, &desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return expected;
}
