// A step's arrays as the CUDA backend uploads them (DESIGN.md §6): one buffer of
//   [groups][tok_cap] slot mappings (int64, -1 = no slot),
//   query_start [seq_cap + 1], context_lens [seq_cap], block_indptr [seq_cap + 1] (int32),
//   [groups][blk_cap] block indices (int32, indptr form; a windowed group's -1 entries kept).
// An eager step's caps are its own sizes: the arrays are packed and go up in one copy. A graph
// step (pkv_batch_plan_graph) is padded to its bucket: caps are the bucket's, so every address a
// captured kernel reads is the same from one replay to the next, and padding sequences have no
// tokens, no context and no blocks (the kernels skip them). Pure host code, no CUDA:
// tests/cuda/test_step_arrays.cpp checks it without a device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

struct StepLayout {
  size_t groups = 1, tok_cap = 0, seq_cap = 0, blk_cap = 0;
  size_t ints_offset() const { return groups * tok_cap * sizeof(int64_t); }
  size_t indices_offset() const { return ints_offset() + (3 * seq_cap + 2) * sizeof(int32_t); }
  size_t bytes() const { return indices_offset() + groups * blk_cap * sizeof(int32_t); }
  // Offsets of the int32 arrays, in int32 elements from ints_offset().
  size_t context_lens_at() const { return seq_cap + 1; }
  size_t indptr_at() const { return 2 * seq_cap + 1; }
  size_t indices_at(size_t g) const { return 3 * seq_cap + 2 + g * blk_cap; }
};

// One copy of the packed buffer: bytes [offset, offset + bytes) of host and device alike.
struct StepRange {
  size_t offset, bytes;
};

// The layout of view's step: packed (bucket 0), or padded to `bucket` sequences and tokens with
// room for blocks_per_seq blocks each.
inline StepLayout step_layout(const pkv_batch_view &v, uint32_t bucket, uint32_t blocks_per_seq) {
  StepLayout l;
  l.groups = v.num_kv_groups ? v.num_kv_groups : 1;
  if (bucket == 0) {
    l.tok_cap = v.num_tokens, l.seq_cap = v.num_seqs;
    l.blk_cap = size_t(v.block_indptr[v.num_seqs]);
  } else {
    l.tok_cap = bucket, l.seq_cap = bucket;
    l.blk_cap = size_t(bucket) * blocks_per_seq;
  }
  return l;
}

// Writes view's arrays into out (l.bytes() bytes, host memory) in layout l, and returns the
// ranges to upload: the whole buffer when packed; when padded, the slots and the int32 arrays
// whole (padding included) and each group's used block indices. The caller checked that the step
// fits l (tokens, sequences and blocks within the caps).
inline std::vector<StepRange> pack_step(const pkv_batch_view &v, const StepLayout &l, char *out) {
  const size_t n_tok = v.num_tokens, n_seq = v.num_seqs;
  const size_t n_blocks = size_t(v.block_indptr[n_seq]);
  int64_t *slots = reinterpret_cast<int64_t *>(out);
  for (size_t g = 0; g < l.groups; ++g) {
    const int64_t *src = g == 0 ? v.slot_mapping : v.group_slot_mapping + g * n_tok;
    std::memcpy(slots + g * l.tok_cap, src, n_tok * sizeof(int64_t));
    for (size_t t = n_tok; t < l.tok_cap; ++t) slots[g * l.tok_cap + t] = -1;
  }
  int32_t *ints = reinterpret_cast<int32_t *>(out + l.ints_offset());
  std::memcpy(ints, v.query_start, (n_seq + 1) * sizeof(int32_t));
  std::memcpy(ints + l.context_lens_at(), v.context_lens, n_seq * sizeof(int32_t));
  std::memcpy(ints + l.indptr_at(), v.block_indptr, (n_seq + 1) * sizeof(int32_t));
  for (size_t i = n_seq; i < l.seq_cap; ++i) {  // padding: no tokens, no context, no blocks
    ints[i + 1] = int32_t(n_tok);
    ints[l.context_lens_at() + i] = 0;
    ints[l.indptr_at() + i + 1] = int32_t(n_blocks);
  }
  std::memcpy(ints + l.indices_at(0), v.block_indices, n_blocks * sizeof(int32_t));
  for (size_t g = 1; g < l.groups; ++g) {
    int32_t *dst = ints + l.indices_at(g);
    for (size_t i = 0; i < n_seq; ++i) {  // the padded [seqs][max_blocks_per_seq] table, packed
      const int32_t *row = v.group_block_tables + (g * n_seq + i) * v.max_blocks_per_seq;
      const size_t n = size_t(v.block_indptr[i + 1] - v.block_indptr[i]);
      std::memcpy(dst + v.block_indptr[i], row, n * sizeof(int32_t));
    }
  }
  if (n_tok == l.tok_cap && n_seq == l.seq_cap && n_blocks == l.blk_cap) return {{0, l.bytes()}};
  std::vector<StepRange> ranges{{0, l.indices_offset()}};
  for (size_t g = 0; g < l.groups && n_blocks; ++g)
    ranges.push_back(
        {l.indices_offset() + g * l.blk_cap * sizeof(int32_t), n_blocks * sizeof(int32_t)});
  return ranges;
}

}  // namespace pkv
