// The prefill kernel's state for one item (cpu_prefill.cpp): its query vectors, what each sees,
// the running softmax and output, the scratch they live in, and the parts both engines share
// (row loads, the prefetcher, the chunk's row max).
#pragma once

#ifndef PKV_CPU_VARIANT
#error "prefill_tile.h belongs to the CPU kernel variants (PKV_CPU_VARIANT)"
#endif
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "prefill_tile.h needs AVX2, FMA and F16C"
#endif

#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "backend/cpu/cpu_kernels.h"
#include "backend/cpu/dtype_cvt.h"
#include "backend/cpu/f32_lanes.h"
#include "backend/cpu/fp8.h"
#include "backend/cpu/vec8.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
// Internal linkage: only cpu_prefill.cpp includes this, and no other file of the variant may
// see (or clash with) these names.
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
constexpr uint32_t kMaxChunk = 128;  // keys per chunk (fewer when the scratch is short)

inline uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

// [first, last) = value. Not std::fill: an out-of-line copy of a library template could be
// merged across variants by the linker (cpu_attention.cpp).
template <class T> inline void fill_range(T *first, T *last, T value) {
  for (; first != last; ++first) *first = value;
}

// Carves 64-byte aligned arrays out of the thread's scratch.
struct Arena {
  float *next;
  float *take(size_t floats) {
    float *p = next;
    next += round_up(static_cast<uint32_t>(floats), 16);
    return p;
  }
  static float *align(float *p) {
    return reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
  }
};

// Prefetches the next chunk's K and V rows a few at a time between micro-kernel calls: a kv
// head's row is a short run every kv_heads * head_dim, a stride the hardware prefetchers follow
// poorly, and a whole chunk requested at once would overflow the miss queues.
struct Prefetcher {
  const char **rows;  // [2 * kMaxChunk]
  uint32_t count = 0, next = 0, bytes = 0, per_call = 1;
  void step() {
    for (uint32_t c = 0; c < per_call && next < count; ++c, ++next)
      for (uint32_t b = 0; b < bytes; b += 64) _mm_prefetch(rows[next] + b, _MM_HINT_T0);
  }
  void finish() {
    while (next < count) step();
  }
};

// One item: its query vectors i = r * group + g (row r, the kv head's q head g), padded to rgp,
// a multiple of kLanes (the padding has zero queries and sees no key). hd: the values of a query
// and a key; vd: of a value and an output row (hd, or MLA's kv_lora_rank: V is the first vd of
// each latent); hdp: vd rounded up to 16, the row length of O and of the packed V; widep: the
// larger of hd and vd rounded up to 16, a scratch row.
struct Tile {
  uint32_t hd, vd, hdp, widep, group, rows, rg, rgp, chunk;
  uint32_t token0, first_pos, lo_last;  // lo_last: the last row's first key (the largest)
  const int32_t *blocks;                // the sequence's block table
  uint64_t block;                       // elements from one block of the cache to the next
  int32_t *lo, *pos;                    // [rgp]: query vector i sees keys [lo[i], pos[i]]
  float *m, *l, *alpha;                 // [rgp]: running max (log2 units), sum; chunk's rescale
  float *o;                             // [rgp][hdp]: running output
  Prefetcher pf;                        // the next chunk's rows
};

// The cache row of key `key` of kv head `head`: [num_blocks] blocks t.block elements apart, each
// [block_size][kv_heads][head_dim] (V's rows are K's width: prefill_item declines others).
template <class C>
inline const C *cache_row(const void *cache, const Tile &t, const CpuStep &step,
                          const CpuLayer &layer, uint32_t head, uint32_t key) {
  const int64_t block = t.blocks[key / step.block_size];
  return static_cast<const C *>(cache) + block * int64_t(t.block) +
         (size_t(key % step.block_size) * layer.kv_heads + head) * layer.head_dim;
}

// n elements (a multiple of 8) of a cache or model dtype to floats (fp8: the codes' values, unscaled).
inline void to_f32(const Bf16 *src, float *dst, uint32_t n) {
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, load8(src + d));
}
inline void to_f32(const _Float16 *src, float *dst, uint32_t n) {
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, load8(src + d));
}
template <class C> inline void to_f32(const C *src, float *dst, uint32_t n) {
  fp8_row(src, dst, n, 1.0f);
}

// Scales the chunk's scores of query vectors [i0, i0 + kLanes) by sc (kCap: then caps them at
// cap, log2 units; keys a vector does not see become -inf when masked), updates their running
// max and rescale; returns the max to subtract (0 where no key was seen yet: exp2(-inf - 0) is 0).
template <bool kCap>
inline Lanes chunk_max(Tile &t, float *s, uint32_t n, uint32_t i0, uint32_t key, float sc,
                       float cap, bool masked) {
  const Lanes scale = lanes_splat(sc), neg_inf = lanes_splat(kNegInf);
  const Lanes c = lanes_splat(cap), inv_c = lanes_splat(kCap ? 1.0f / cap : 0.0f);
  Lanes mx = neg_inf;
  for (uint32_t j = 0; j < n; ++j) {
    float *row = s + size_t(j) * t.rgp + i0;
    Lanes v = lanes_mul(lanes_load(row), scale);
    if constexpr (kCap) v = lanes_softcap(v, c, inv_c);
    if (masked) v = lanes_keep(lanes_visible(t.lo + i0, t.pos + i0, int32_t(key + j)), v, neg_inf);
    lanes_store(row, v);
    mx = lanes_max(mx, v);
  }
  const Lanes m_old = lanes_load(t.m + i0), m_new = lanes_max(m_old, mx);
  const Lanes m_use = lanes_if_eq(m_new, neg_inf, lanes_zero(), m_new);
  lanes_store(t.alpha + i0, lanes_exp2(lanes_sub(m_old, m_use)));
  lanes_store(t.m + i0, m_new);
  return m_use;
}

}  // namespace
}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
