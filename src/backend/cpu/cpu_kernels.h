// The CPU backend's compute: write_kv, copy_blocks and paged attention (decode and prefill alike:
// causal attention of each new token over its sequence's whole context), fp32 accumulation,
// online softmax, all q heads of a kv head together (GQA reads K/V once), the context split
// across threads when there are few sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"

namespace pkv {

constexpr uint32_t kAttnChunk = 16;        // keys converted to fp32 at a time
constexpr uint32_t kAttnPrefillRows = 16;  // new tokens per item when a sequence has several

// One work item: new tokens [row0, row0 + rows) of a sequence, kv heads [head, head +
// num_heads) (all their q heads: contiguous in q and out),
// keys [key0, key1). With num_splits > 1 its (max, sum, acc) go to partials + part, and the
// num_splits consecutive items of the tile are merged after.
struct AttnItem {
  uint32_t seq, head, num_heads, row0, rows, key0, key1;  // kv heads [head, head + num_heads)
  int64_t part;
  uint32_t num_splits;
};

struct AttnWork {
  const AttnItem *items;
  size_t num_items;
  const size_t *groups;  // the first item of every split tile
  size_t num_groups;
  float *partials;
  float *const *scratch;  // per thread, attention_scratch_floats() each
};


// Where one tier's blocks are: K and V, each [layers][blocks][block bytes].
struct CpuTier {
  char *k, *v;
  uint64_t layer_bytes;
};

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
  explicit CpuKernels(uint32_t num_threads);
  uint32_t num_threads() const { return pool_.num_threads(); }
  const char *isa() const { return isa_; }  // the attention variant picked for this CPU

  // The work items of a step, for every layer of it (they depend on the shape, not the layer).
  void plan(const CpuStep &step, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim);
  void write_kv(const CpuStep &step, const CpuLayer &layer);
  void attention(const CpuStep &step, const CpuLayer &layer);  // of the planned step
  // For every layer, block src[c] -> dst[c] in order (a later pair may read an earlier one's
  // dst), each in the tier its kind names (PKV_COPY_*): tiers[0] the pool, tiers[1] the host tier.
  void copy_blocks(const CpuTier (&tiers)[2], uint32_t num_layers, uint64_t block_bytes,
                   const int32_t *src, const int32_t *dst, const int32_t *kind, uint32_t n);

 private:
  using AttentionFn = void (*)(const CpuStep &, const CpuLayer &, const AttnWork &, ThreadPool &);

  ThreadPool pool_;
  AttentionFn attention_;
  const char *isa_ = "baseline";
  std::vector<AttnItem> items_;
  std::vector<size_t> groups_;               // first item of each split tile
  std::vector<float> partials_;              // split results waiting for the merge
  std::vector<std::vector<float>> scratch_;  // per thread
  std::vector<float *> scratch_ptrs_;
};

}  // namespace pkv
