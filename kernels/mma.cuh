// One warp-wide tensor-core multiply: mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}, D = A B +
// C with A 16 x 16, B 16 x 8, C and D 16 x 8 in fp32, f16 or bf16 A and B. The only inline PTX of
// pkv's kernels; the emulator (tests/simt) implements the same instruction from the same layouts.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"): lane l of
// the warp is group = l / 4, tig = l % 4 ("threadID_in_group"). A 32-bit register holds two
// 16-bit elements, the lower column (A, C) or row (B) in its low half.
//   A (row major)  a[i], i < 4: A[group + 8 * (i & 1)][2 * tig + 8 * (i >> 1) + {0, 1}]
//   B (col major)  b[i], i < 2: B[2 * tig + 8 * i + {0, 1}][group]
//   C, D           c[i], i < 4: C[group + 8 * (i >> 1)][2 * tig + (i & 1)]
// Every lane of the warp must call it together (the .aligned qualifier), with the same T.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace pkv::cuda::dev {

template <class T>
constexpr bool kMmaType = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// d += a b (d is C on entry, D on return).
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
  static_assert(kMmaType<T>, "mma_m16n8k16 takes f16 or bf16 operands");
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(SIMT_MMA)
  ::simt::mma_m16n8k16(std::is_same_v<T, __half> ? ::simt::MmaType::f16 : ::simt::MmaType::bf16, d,
                       a, b, __FILE__, __LINE__);
#else
  (void)d, (void)a, (void)b;  // nvcc's host pass: device code is never run there
#endif
}

// The bits of a 16-bit element, and two elements as one register (lo in the low half).
__device__ __forceinline__ uint16_t to_bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ uint16_t to_bits(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }
__device__ __forceinline__ uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return uint32_t(lo) | uint32_t(hi) << 16;
}

// lo and hi rounded to T (nearest even), packed.
template <class T> __device__ __forceinline__ uint32_t pack_rn(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>)
    return pack_bits(to_bits(__float2half_rn(lo)), to_bits(__float2half_rn(hi)));
  else
    return pack_bits(to_bits(__float2bfloat16_rn(lo)), to_bits(__float2bfloat16_rn(hi)));
}

}  // namespace pkv::cuda::dev
