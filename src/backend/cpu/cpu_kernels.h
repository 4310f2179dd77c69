// The CPU backend's compute: write_kv, copy_blocks and paged attention (decode and prefill alike:
// causal attention of each new token over its sequence's whole context), fp32 accumulation,
// online softmax, all q heads of a kv head together (GQA reads K/V once), the context split
// across threads when there are few sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace pkv {

// A step's batch, host arrays (pkv_batch_view's).
struct CpuStep {
  uint32_t num_seqs, num_tokens, block_size;
  const int32_t *query_start;    // [num_seqs + 1]
  const int32_t *context_lens;   // [num_seqs]
  const int32_t *block_indptr;   // [num_seqs + 1]
  const int32_t *block_indices;  // seq i's blocks: [block_indptr[i] .. block_indptr[i + 1])
  const int64_t *slot_mapping;   // [num_tokens], -1 = skip
};

// One layer's call. Caches: [num_blocks][block_size][kv_heads][head_dim].
// q, out: [num_tokens][q_heads][head_dim]; k, v: [num_tokens][kv_heads][head_dim].
struct CpuLayer {
  void *k_cache, *v_cache;
  uint32_t q_heads, kv_heads, head_dim;  // head_dim a multiple of 8, at most 256
  int32_t dtype;                         // PKV_DTYPE_*
  float scale;
  const void *q, *k, *v;
  void *out;
};

class CpuKernels {
 public:
  explicit CpuKernels(uint32_t num_threads) : pool_(num_threads) {}
  uint32_t num_threads() const { return pool_.num_threads(); }

  void write_kv(const CpuStep &step, const CpuLayer &layer);
  void attention(const CpuStep &step, const CpuLayer &layer);
  // For every layer, block src -> dst in order (a later pair may read an earlier one's dst).
  void copy_blocks(void *k_pool, void *v_pool, uint32_t num_layers, uint64_t layer_bytes,
                   uint64_t block_bytes, const int32_t *src, const int32_t *dst, uint32_t n);

 private:
  ThreadPool pool_;
  std::vector<float> partials_;             // split results waiting for the merge
  std::vector<std::vector<float>> scratch_;  // per thread
};

}  // namespace pkv
