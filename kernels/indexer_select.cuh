// The indexer's selection (indexer.cu): one CTA keeps the topk best of a token's n scores, in
// position order. Scores become order-preserving 32-bit keys (a NaN the lowest, -0 as +0, so
// keys tie exactly when scores compare equal or are both NaN); four 8-bit radix passes find the
// k-th key T and how many keys equal to T are kept; a final pass emits, position by position,
// every key above T and the first of those equal to it (pkv.h: the lower position wins a tie).
// No step depends on the order threads run in. Included by .cu files only.
#pragma once

#include "sparse_common.cuh"

namespace pkv::cuda::dev {

constexpr int kSelectThreads = 512;
constexpr int kSelectWarps = kSelectThreads / 32;

// Higher scores get higher keys; a NaN gets 0, below every number's.
__device__ __forceinline__ uint32_t order_key(float s) {
  if (s != s) return 0;
  const uint32_t b = s == 0.f ? 0u : float_bits(s);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

// x's exclusive prefix sum over the CTA in thread order, and the CTA's total. Every thread calls
// it; scratch holds kSelectWarps + 1 values.
__device__ __forceinline__ uint32_t cta_exclusive_sum(uint32_t x, uint32_t *scratch,
                                                      uint32_t *total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t incl = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  __syncthreads();  // scratch's previous use is done
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t run = 0;
    for (int w = 0; w < kSelectWarps; ++w) {
      const uint32_t v = scratch[w];
      scratch[w] = run;
      run += v;
    }
    scratch[kSelectWarps] = run;
  }
  __syncthreads();
  *total = scratch[kSelectWarps];
  return scratch[warp] + incl - x;
}

// The k-th largest key of scores[0 .. n) (n > k >= 1) and how many keys equal to it are kept.
__device__ __forceinline__ void radix_threshold(const float *scores, int n, int k, uint32_t *key,
                                                uint32_t *take_equal) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t s_prefix, s_want;
  uint32_t prefix = 0, mask = 0, want = uint32_t(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kSelectThreads) hist[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kSelectThreads) {
      const uint32_t x = order_key(scores[i]);
      if ((x & mask) == prefix) atomicAdd(&hist[(x >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the digit where the count from the top reaches want
      uint32_t above = 0;
      for (int d = 255; d >= 0; --d) {
        if (above + hist[d] >= want) {
          s_prefix = prefix | uint32_t(d) << shift;
          s_want = want - above;
          break;
        }
        above += hist[d];
      }
    }
    __syncthreads();
    prefix = s_prefix, want = s_want, mask |= 255u << shift;
  }
  *key = prefix, *take_equal = want;
}

// out[0 .. topk) = the kept keys' positions ascending (blocks non-null: their slots, blocks[pos /
// block_size] * block_size + pos % block_size), then -1 when n <= topk (all of them kept).
__device__ __forceinline__ void select_top(const float *scores, int n, int topk, int32_t *out,
                                           const int32_t *blocks, int32_t block_size) {
  auto index = [&](int pos) {
    return blocks ? blocks[pos / block_size] * block_size + pos % block_size : pos;
  };
  if (n <= topk) {
    for (int i = threadIdx.x; i < topk; i += kSelectThreads) out[i] = i < n ? index(i) : -1;
    return;
  }
  __shared__ uint32_t scratch[kSelectWarps + 1];
  uint32_t threshold, take_equal;
  radix_threshold(scores, n, topk, &threshold, &take_equal);
  uint32_t equal_seen = 0, emitted = 0;
  for (int base = 0; base < n && emitted < uint32_t(topk); base += kSelectThreads) {
    const int i = base + threadIdx.x;
    const uint32_t x = i < n ? order_key(scores[i]) : 0;
    const bool above = i < n && x > threshold, equal = i < n && x == threshold;
    uint32_t equal_total, take_total;
    const uint32_t equal_rank = equal_seen + cta_exclusive_sum(equal, scratch, &equal_total);
    const bool take = above || (equal && equal_rank < take_equal);
    const uint32_t at = emitted + cta_exclusive_sum(take, scratch, &take_total);
    if (take) out[at] = index(i);
    equal_seen += equal_total, emitted += take_total;
  }
}

}  // namespace pkv::cuda::dev
