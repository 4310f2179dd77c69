// What the sparse-attention kernels share (indexer.cu, sparse_mla.cu): where a new token is, its
// sequence and its position, from the batch. Included by .cu files only.
#pragma once

#include "device_common.cuh"

namespace pkv::cuda::dev {

struct TokenPlace {
  int32_t seq, pos;  // its sequence, its position there (its keys: 0 .. pos)
};

// Token t (a row of q) of the batch: the sequence whose rows hold it (a binary search of
// query_start), and its position: the new tokens are the last of context_lens.
__device__ __forceinline__ TokenPlace token_place(const BatchView &b, int32_t t) {
  int32_t lo = 0, hi = b.num_seqs - 1;  // the last seq with query_start <= t
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (b.query_start[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const int32_t rows = b.query_start[lo + 1] - b.query_start[lo];
  return TokenPlace{lo, b.context_lens[lo] - rows + (t - b.query_start[lo])};
}

}  // namespace pkv::cuda::dev
