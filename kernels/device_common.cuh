// Device helpers shared by the kernels: dtype conversion, vector loads, warp reductions, and the
// one place where runtime dtypes and head_dim become template arguments. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fp8.cuh"
#include "kv_types.cuh"
#include "pkv/pkv.h"

namespace pkv::cuda::dev {

static_assert(PKV_ATTENTION_HEAD_DIM_ALIGN % 8 == 0, "the tiles move head_dim in load8's chunks");

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T> __device__ __forceinline__ T from_float(float x) {
  if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else
    return x;
}

// The 16-bit element whose bits are b: CUDA's bit conversion, not a cast of memory.
template <class T> __device__ __forceinline__ T from_bits(uint16_t b) {
  if constexpr (std::is_same_v<T, __half>)
    return __ushort_as_half(b);
  else
    return __ushort_as_bfloat16(b);
}

// Eight consecutive elements as floats; p is aligned to 8 elements (16 bytes for 16-bit types, 8
// for fp8 codes, which come out as their values, not yet times their scale). One or two global
// loads of up to 16 bytes. The narrow elements come out of the loaded vector by a copy of its
// bytes (which nvcc turns into register moves), never by reading it through a T pointer: that
// type punning is undefined behaviour an optimizing compiler may act on.
template <class T> __device__ __forceinline__ void load8(const T *p, float (&out)[8]) {
  if constexpr (kIsFp8<T>) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    uint8_t codes[8];
    memcpy(codes, &raw, sizeof codes);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = fp8_decode<T>(codes[i]);
  } else if constexpr (sizeof(T) == 4) {
    const float4 a = *reinterpret_cast<const float4 *>(p);
    const float4 b = *reinterpret_cast<const float4 *>(p + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4 *>(p);
    uint16_t bits[8];
    memcpy(bits, &raw, sizeof bits);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = to_float(from_bits<T>(bits[i]));
  }
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__host__ __device__ __forceinline__ int32_t ceil_div(int32_t a, int32_t b) {
  return (a + b - 1) / b;
}
__host__ __device__ __forceinline__ int32_t imin(int32_t a, int32_t b) { return a < b ? a : b; }

// The first key a token at position pos sees under a window of `window` keys (>= 1): pos -
// window + 1, or 0 near the start. Full attention passes INT32_MAX (AttnArgs::window).
__host__ __device__ __forceinline__ int32_t window_start(int32_t pos, int32_t window) {
  return pos >= window ? pos - window + 1 : 0;
}

}  // namespace pkv::cuda::dev

namespace pkv::cuda {

// Runtime dtype -> element type: calls f(T{}) and returns its result. Model dtypes only: fp8 is
// a pool's (dispatch_kv_dtype).
template <class F> cudaError_t dispatch_dtype(DType t, F &&f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(__half{});
    case DType::bf16:
      return f(__nv_bfloat16{});
    default:
      return cudaErrorInvalidValue;
  }
}

// Runtime (model dtype, pool dtype) -> element types: calls f(T{}, C{}) with C = T for a pool of
// the model's dtype, or the fp8 tag. Any other pairing is refused.
template <class F> cudaError_t dispatch_kv_dtype(DType dtype, DType kv_dtype, F &&f) {
  return dispatch_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    if (kv_dtype == dtype) return f(t, T{});
    if (kv_dtype == DType::fp8_e4m3) return f(t, Fp8E4M3{});
    if (kv_dtype == DType::fp8_e5m2) return f(t, Fp8E5M2{});
    return cudaErrorInvalidValue;
  });
}

// A head_dim bucket: D the specialized size (0: generic, head_dim read at run time) and W the
// widest head_dim its kernels take (D itself when specialized), which sizes their tiles and
// accumulators. Generic sizes up to 256 keep the tiles of before; wider ones (264 .. 512) get
// their own kernels, so the <= 256 instantiations are unchanged.
template <int D, int W = D> struct HeadDim { static constexpr int value = D, kWidth = W; };

// Runtime head_dim -> compile-time bucket (HeadDim). Never a wrong answer: unsupported sizes are
// refused here, by the limits pkv.h states for pkv_attention on a CUDA engine (load8 moves 8
// elements at a time; tiles are sized for PKV_ATTENTION_MAX_HEAD_DIM_CUDA at most).
template <class F> cudaError_t dispatch_head_dim(int32_t head_dim, F &&f) {
  if (head_dim <= 0 || head_dim > PKV_ATTENTION_MAX_HEAD_DIM_CUDA ||
      head_dim % PKV_ATTENTION_HEAD_DIM_ALIGN != 0)
    return cudaErrorInvalidValue;
  switch (head_dim) {
    case 64:
      return f(HeadDim<64>{});
    case 80:
      return f(HeadDim<80>{});
    case 96:
      return f(HeadDim<96>{});
    case 128:
      return f(HeadDim<128>{});
    case 256:
      return f(HeadDim<256>{});
    case 512:
      return f(HeadDim<512>{});
    default:
      if (head_dim <= PKV_ATTENTION_MAX_HEAD_DIM)
        return f(HeadDim<0, PKV_ATTENTION_MAX_HEAD_DIM>{});
      return f(HeadDim<0, PKV_ATTENTION_MAX_HEAD_DIM_CUDA>{});
  }
}

// Dynamic shared memory past the default 48 KiB needs the kernel's opt-in before its launch
// (sm_80 allows up to 163 KiB a block, sm_90 227 KiB). Called per launch, so every device the
// process launches on has it; a kernel within the default makes no call.
inline cudaError_t allow_smem(const void *kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

inline bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace pkv::cuda
