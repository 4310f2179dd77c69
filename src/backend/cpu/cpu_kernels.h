// The CPU backend's compute: write_kv, copy_blocks and paged attention (decode and prefill alike:
// causal attention of each new token over its sequence's context, or its window's part of it),
// fp32 accumulation, online softmax, all q heads of a kv head together (GQA reads K/V once), the
// context split across threads when there are few sequences. fp8 caches are quantized by
// write_kv and converted to floats (times their head's scale) as attention reads them.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "pkv/pkv.h"

namespace pkv {

struct IndexerCall;  // backend.h

constexpr uint32_t kAttnChunk = 16;        // keys converted to fp32 at a time
constexpr uint32_t kAttnPrefillRows = 32;  // new tokens per item when a sequence has several
// An item's rows: kAttnPrefillRows, fewer when one kv head has many q heads (MLA's 128 share one
// latent): an item's state (rows x q heads x head_dim floats) stays near the core's cache.
inline uint32_t attn_tile_rows(uint32_t group) {
  return group <= 8 ? kAttnPrefillRows : group >= 256 ? 1 : 256 / group;
}

// One work item: new tokens [row0, row0 + rows) of a sequence, kv heads [head, head +
// num_heads) (all their q heads: contiguous in q and out), keys (positions) [key0, key1): the
// keys some row of the tile sees, never one outside every row's window. With num_splits > 1 its
// (max, sum, acc) go to partials + part, and the num_splits consecutive items of the tile are
// merged after.
struct AttnItem {
  uint32_t seq, head, num_heads, row0, rows, key0, key1;  // kv heads [head, head + num_heads)
  int64_t part;
  uint32_t num_splits;
};

struct AttnWork {
  const AttnItem *items;
  size_t num_items;
  const size_t *split_tiles;  // the first item of every split tile
  size_t num_split_tiles;
  float *partials;
  float *const *scratch;  // per thread, attention_scratch_floats() each
};

// Where one tier's blocks are: K and V, each [layers][blocks][block bytes] (MLA: v null).
struct CpuTier {
  char *k, *v;
  uint64_t layer_bytes;
};

// A step's batch, host arrays (pkv_batch_view's), with a slot mapping and block tables per KV
// group. A windowed group's tables hold -1 for blocks it gave back: no new token's window
// reaches them, and nothing here reads them.
struct CpuStep {
  uint32_t num_seqs, num_tokens, block_size, max_blocks_per_seq, num_groups;
  const int32_t *query_start;         // [num_seqs + 1]
  const int32_t *context_lens;        // [num_seqs]
  const int64_t *group_slot_mapping;  // [num_groups][num_tokens], -1 = skip
  const int32_t *group_block_tables;  // [num_groups][num_seqs][max_blocks_per_seq], -1 = none

  const int64_t *slot_mapping(uint32_t group) const {
    return group_slot_mapping + size_t(group) * num_tokens;
  }
  const int32_t *block_table(uint32_t group, uint32_t seq) const {
    return group_block_tables + (size_t(group) * num_seqs + seq) * max_blocks_per_seq;
  }
};

// One layer's call. Caches: [num_blocks] blocks, block_stride bytes apart (0: dense), each
// [block_size][kv_heads][head_dim] of kv_dtype for K ([block_size][kv_heads][v_dim] for V).
// q: [num_tokens][q_heads][head_dim]; k: [num_tokens][kv_heads][head_dim] of dtype, v the same
// with v_dim; out: [num_tokens][q_heads][v_dim]. MLA: one latent per token (kv_heads 1), v null,
// v_cache == k_cache (V is the first v_dim values of each latent's row) and v_scale == k_scale.
// K = V (Gemma 4's k_eq_v): as MLA's view, v null, v_cache == k_cache, v_dim == head_dim, but
// kv_heads and mla false. Shapes may differ from call to call within one step.
struct CpuLayer {
  void *k_cache, *v_cache;
  uint32_t q_heads, kv_heads, head_dim;  // head_dim a multiple of 8: at most 256, or 640 for MLA
  uint32_t v_dim;                        // V's and out's values per head: head_dim, or kv_lora_rank
  bool mla;
  int32_t dtype;                   // PKV_DTYPE_* of q, k, v and out
  int32_t kv_dtype;                // the caches': dtype or PKV_DTYPE_FP8_*
  uint32_t group;                  // the KV group whose slot mapping and tables it uses
  uint32_t window;                 // keys a token sees, itself included; 0 = all
  float scale;                     // softmax
  const float *k_scale, *v_scale;  // fp8: [kv_heads], a stored code means value * scale
  const void *q, *k, *v;
  void *out;
  uint64_t block_stride = 0;     // bytes from one block of K (and of V) to the next; 0: dense,
                                 // block_size * kv_heads * head_dim (V: v_dim) * element bytes
  uint32_t chunk = 0;            // chunked local: a token at p sees keys p / chunk * chunk .. p;
                                 // 0 = none; never with window
  float softcap = 0.0f;          // c > 0: each scaled score s becomes c * tanh(s / c); 0 = none
  const float *sinks = nullptr;  // [q_heads] logits joining every softmax denominator, or null

  size_t cache_elt() const {
    return kv_dtype == PKV_DTYPE_F32                                 ? 4
           : kv_dtype == PKV_DTYPE_F16 || kv_dtype == PKV_DTYPE_BF16 ? 2
                                                                     : 1;
  }
  // V's values per head in its cache rows: MLA's and K = V's are K's rows.
  uint32_t v_row() const { return v_cache == k_cache ? head_dim : v_dim; }
  // Elements from one block of K (V) to the next.
  uint64_t k_block_elts(uint32_t block_size) const {
    return block_stride ? block_stride / cache_elt() : uint64_t(block_size) * kv_heads * head_dim;
  }
  uint64_t v_block_elts(uint32_t block_size) const {
    return block_stride ? block_stride / cache_elt() : uint64_t(block_size) * kv_heads * v_row();
  }
  // The first key a token at pos sees (window or chunk).
  uint32_t first_key(uint32_t pos) const {
    if (chunk) return pos / chunk * chunk;
    return window && pos >= window ? pos - window + 1 : 0;
  }
};

// One build of the attention math for an instruction set (cpu_attention.h).
struct CpuVariant {
  const char *name;  // pkv_pool_info.kernels
  void (*attention)(const CpuStep &, const CpuLayer &, const AttnWork &, ThreadPool &);
  void (*quantize)(const void *, int32_t, int32_t, uint8_t *, uint32_t, float);
  // Sparse attention's math (cpu_attention.h: indexer_scores8, sparse_attend)
  void (*indexer_scores8)(const float *, const float *, uint32_t, uint32_t, const float *,
                          const float *, float *);
  void (*sparse_attend)(const float *, uint32_t, uint32_t, uint32_t, const float *, uint32_t, float,
                        float *, float *);
};

// The variant this process runs: the best this CPU's CPUID (and the OS's saved vector state)
// allows, or the one the environment variable PKV_CPU_ISA names. Fails with
// PKV_ERR_INVALID_ARGUMENT for a name it does not know and PKV_ERR_UNSUPPORTED for a variant
// this CPU cannot run (the tests skip those), each message naming the variable.
const CpuVariant &cpu_variant();

class CpuKernels {
 public:
  CpuKernels(uint32_t num_threads, const CpuVariant &variant);
  uint32_t num_threads() const { return pool_.num_threads(); }
  const char *isa() const { return variant_.name; }  // the attention variant it runs

  // Prepares a step; the shape given sizes the threads' scratch ahead of the first call. Work
  // items depend on the group, the shape (q and kv heads, v_dim) and the window or chunk, not
  // the layer: they are made at the first call of each (group, shape, window) and kept for the
  // other layers of the step that match it, so the layers of one step may differ in shape.
  void plan(const CpuStep &step, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
            uint32_t v_dim);
  void write_kv(const CpuStep &step, const CpuLayer &layer);
  void attention(const CpuStep &step, const CpuLayer &layer);  // of the planned step
  // The keys the planned items of `group` read per kv head (a decode's items count once for all
  // heads): what a test checks the window against. 0 before the group's first call.
  uint64_t planned_keys(uint32_t group) const;
  // For every layer, block src[c] -> dst[c] in order (a later pair may read an earlier one's
  // dst), each in the tier its kind names (PKV_COPY_*): tiers[0] the pool, tiers[1] the host tier.
  // tensors: 2 (K and V) or 1 (K: the MLA latents).
  void copy_blocks(const CpuTier (&tiers)[2], uint32_t num_layers, uint32_t tensors,
                   uint64_t block_bytes, const int32_t *src, const int32_t *dst,
                   const int32_t *kind, uint32_t n);
  // Sparse attention (cpu_indexer.cpp, DESIGN.md §14) on the planned step: pool is the pages'
  // base, dtype the model's (c.k, c.q). sparse_mla is attention()'s MLA restricted to indices
  // [tokens][topk] (positions; those outside 0 .. a token's own skipped).
  void indexer_write(const CpuStep &step, char *pool, const IndexerCall &c, int32_t dtype);
  void indexer_topk(const CpuStep &step, const char *pool, const IndexerCall &c, int32_t dtype);
  void sparse_mla(const CpuStep &step, const CpuLayer &layer, const int32_t *indices,
                  uint32_t topk);

 private:
  // The items of one (KV group, shape, window or chunk) of the planned step.
  struct GroupPlan {
    bool ready = false;
    uint32_t group = 0, q_heads = 0, kv_heads = 0, v_dim = 0, window = 0, chunk = 0;
    std::vector<AttnItem> items;
    std::vector<size_t> split_tiles;  // first item of each split tile
    bool fits(const CpuLayer &l) const {
      return ready && group == l.group && q_heads == l.q_heads && kv_heads == l.kv_heads &&
             v_dim == l.v_dim && window == l.window && chunk == l.chunk;
    }
  };
  GroupPlan &plan_for(const CpuStep &step, const CpuLayer &layer);
  void plan_group(const CpuStep &step, const CpuLayer &layer, GroupPlan &plan);
  void reserve_scratch(uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim, uint32_t v_dim);

  ThreadPool pool_;
  const CpuVariant &variant_;
  std::vector<GroupPlan> plans_;             // of the planned step, in first-call order
  std::vector<float> partials_;              // split results waiting for the merge
  std::vector<std::vector<float>> scratch_;  // per thread
  std::vector<float *> scratch_ptrs_;
};

}  // namespace pkv
