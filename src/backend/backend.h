// The backend interface: where the KV pool lives, how much memory the device has, and the KV
// side of a step (copy_blocks, then per layer write_kv + paged attention).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/copy_kind.h"
#include "pkv/pkv.h"

namespace pkv {

struct MemoryInfo {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // what can still be allocated (host: MemAvailable)
};

// K and V pools, each [layers][num_blocks][block_size][kv_heads][head_dim] (NHD): num_layers is
// the pool's layer dimension, group_layers (kv_groups.h); a model layer is one of its slots.
// MLA (tensors 1): the K pool alone holds the latents (kv_heads 1, head_dim kv_lora_rank +
// qk_rope_head_dim); there is no V pool (v_pool() and host_v_pool() are null) and copies,
// read_block and the host tier move K only. V is the view of each latent's first kv_lora_rank
// values.
struct PoolShape {
  uint32_t num_layers, num_blocks, block_size, kv_heads, head_dim;
  uint32_t dtype_bytes;  // of kv_dtype: the pool's elements
  int32_t dtype;         // the model's: q, k, v and out of pkv_attention
  int32_t kv_dtype;      // the pool's: dtype, or PKV_DTYPE_FP8_*
  uint32_t q_heads;      // per rank
  // K (or V) bytes of one block of one layer, of one layer, of the pool: from pool_layout()
  // (profiler.h), which checks them, never recomputed here.
  struct {
    uint64_t block, layer, pool;
  } bytes;
  // The host tier (0 blocks: none): the same layout with host_num_blocks blocks.
  uint32_t host_num_blocks;
  struct {
    uint64_t layer, pool;
  } host_bytes;
  uint32_t tensors = 2;       // 2 (K and V) or 1 (the MLA latent, or pages)
  uint32_t kv_lora_rank = 0;  // MLA: the values per q head of V and of pkv_attention's out
  // Layers of unequal bytes (DESIGN.md §12): the pool is num_blocks pages (num_layers 1, tensors
  // 1, bytes.block the page); each layer's K and V are where its AttentionCall says. kv_heads,
  // head_dim: the largest of any layer (scratch sizes), not a layer's.
  bool paged = false;
  uint32_t model_layers = 0;  // the model's layers (per-layer tables: fp8 scales)
  // Recurrent state (DESIGN.md §13): num_state_slots slots of state_slot_bytes (a multiple of
  // 256), beside the pool in the same memory; none without STATE layers.
  uint32_t num_state_slots = 0;
  uint64_t state_slot_bytes = 0;
  // With a host tier: num_host_state_slots slots of the same bytes in host memory (pinned on
  // CUDA) for swapped-out sequences' states (PKV_COPY_STATE_OUT / _IN).
  uint32_t num_host_state_slots = 0;
  // A step's bounds (DESIGN.md §6): the CUDA backend sizes its step buffers and workspaces for
  // them when the engine is created, so a step within them allocates nothing and never waits.
  uint32_t max_num_seqs = 0, max_num_batched_tokens = 0;
  uint32_t max_blocks_per_seq = 0;  // ceil(max_model_len / block_size), or num_blocks
  uint32_t num_kv_groups = 1;
  bool sinks = false;       // some layer has attention sinks: their device table is made
  uint32_t index_topk = 0;  // a sparse-attention engine's indexer top-k (0: none)
  bool mla() const { return tensors == 1 && !paged; }
  uint32_t v_dim() const { return mla() ? kv_lora_rank : head_dim; }
  uint64_t block_bytes() const { return bytes.block; }
  uint64_t layer_bytes() const { return bytes.layer; }
  uint64_t bytes_per_pool() const { return bytes.pool; }
};

// One layer's call of pkv_attention, on the planned step. MLA: k is the new tokens' latents
// [tokens][head_dim], v null, q [tokens][q_heads][head_dim], out [tokens][q_heads][kv_lora_rank]; every
// q head attends to the one latent (K = the latent, V = its first kv_lora_rank values).
// Layer specs (since 0.5.0): each call has its layer's own geometry and softmax; a k_eq_v layer
// has v null and reads V from K's bytes, a SHARED layer (write false) has k and v null and
// attends over its source's cache without writing.
struct AttentionCall {
  uint32_t layer;   // the model's layer
  uint32_t slot;    // its index in the pool's layer dimension (KvGroups::layer_slot)
  uint32_t group;   // its KV group: the step's slot mapping and tables to use
  uint32_t window;  // keys a token attends to, itself included; 0 = all (full attention)
  float scale;
  const float *k_scale,
      *v_scale;  // fp8 pools: [kv_heads] of this layer; else null (MLA: no v_scale)
  const void *q, *k, *v;
  void *out;
  uint32_t kv_heads, head_dim, v_dim;  // this layer's, per rank
  bool mla;                            // the latent: V is K's first v_dim values
  bool write;                          // write_kv first; false for a SHARED layer
  // Its K and V block 0 in bytes from the K pool (V: from the V pool unless v_in_k_pool), and
  // the bytes from one block to the next; dense_stride: today's layout (the kernels' 0).
  uint64_t k_offset, v_offset, block_stride;
  bool v_in_k_pool, dense_stride;
  uint32_t chunk;      // CHUNKED: a token at p sees keys floor(p / chunk) * chunk .. p; else 0
  float softcap;       // 0 = none
  const float *sinks;  // [q_heads of this rank] host memory, or null
  // Sparse MLA (pkv_sparse_mla_attention, DESIGN.md §14): each new token attends over the
  // positions indices[t][0 .. topk) of its sequence only, those outside 0 .. its position
  // skipped; null: every key (dense).
  const int32_t *indices = nullptr;
  uint32_t topk = 0;
};

// One layer's indexer call of the planned step (DESIGN.md §14). The layer's keys of block 0 are
// key_offset bytes into the K pool (pages), fp8's per-token fp32 scales scale_offset bytes,
// block_stride bytes between blocks; a block's token t at + t * key_bytes (or + 4t).
struct IndexerCall {
  uint32_t layer, group;  // the model's layer, its KV group (slot mapping, block tables)
  uint32_t dim;           // index_head_dim
  int32_t index_dtype;    // PKV_DTYPE_FP8_E4M3 or PKV_DTYPE_BF16
  uint32_t heads, topk;   // index_n_heads, index_topk
  uint64_t key_offset, scale_offset, block_stride;
  // indexer_write: the new tokens' keys [tokens][dim] of the model's dtype; ue8m0: fp8 scales
  // rounded up to powers of two.
  const void *k = nullptr;
  bool ue8m0 = false;
  // indexer_topk: q [tokens][heads][dim] of the model's dtype, weights [tokens][heads] fp32, out
  // [tokens][topk]: positions ascending (slots: their slots), then -1.
  const void *q = nullptr;
  const float *weights = nullptr;
  int32_t *out = nullptr;
  bool slots = false;
  uint32_t key_bytes() const { return dim * (index_dtype == PKV_DTYPE_BF16 ? 2 : 1); }
};

// Plan, then run (FlashInfer's habit): a step's metadata is prepared once, its layers run many
// times. The engine calls copy_blocks (when the step has copies), then plan once per batch, then
// attention for each layer, all before the batch ends.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int32_t device() const = 0;       // PKV_DEVICE_CPU or PKV_DEVICE_CUDA
  virtual const char *kernels() const = 0;  // pkv_pool_info.kernels: a static string
  virtual void *k_pool() const = 0;
  virtual void *v_pool() const = 0;
  // The host tier's K and V (host memory, pinned on CUDA); null when it has no blocks.
  virtual void *host_k_pool() const = 0;
  virtual void *host_v_pool() const = 0;
  // The state slots (num_state_slots * state_slot_bytes, 256-byte aligned); null when none.
  virtual void *state_pool() const = 0;
  // The host state slots (num_host_state_slots * state_slot_bytes); null when none.
  virtual void *host_state_pool() const = 0;
  // Block copies src[i] -> dst[i], in order, every layer, K and V (MLA: K); kind[i] (PKV_COPY_*) says
  // which tier each id is in. A PKV_COPY_STATE copy's ids are state slots: the whole slot.
  virtual void copy_blocks(const int32_t *src, const int32_t *dst, const int32_t *kind,
                           uint32_t n) = 0;
  // Pool block `block`'s K and V of every layer into dst (host memory), layer by layer, K then V
  // (bytes.block each; MLA: K only): the store tier's payload. After the work queued so far (synchronous).
  virtual void read_block(int32_t block, void *dst) = 0;
  // State slot `slot`'s state_slot_bytes into host memory dst, after the work queued before it
  // (the store's copy of a checkpoint).
  virtual void read_state(int32_t slot, void *dst) = 0;
  // Prepares a step: step's arrays (host memory) stay valid and unchanged until the batch ends.
  // With several KV groups, each group's slot mapping and tables (group_slot_mapping,
  // group_block_tables; -1 for blocks a windowed group gave back) are planned.
  virtual void plan(const pkv_batch_view &step) = 0;
  // write_kv of the planned step's new tokens into `layer`, then their causal paged attention.
  virtual void attention(const AttentionCall &call) = 0;
  // The planned step's new tokens' indexer keys into their slots (pkv_indexer_write).
  virtual void indexer_write(const IndexerCall &call) = 0;
  // Each new token's top keys over the layer's indexer cache (pkv_indexer_topk; pkv.h's rule).
  virtual void indexer_topk(const IndexerCall &call) = 0;
  // CUDA: the stream to run on from the next call on; CPU: only nullptr.
  virtual void set_stream(void *stream) = 0;
  // pkv_batch_plan_graph: plan() of a decode step padded to `bucket` sequences, into buffers at
  // addresses that stay the same from step to step, with launches whose grids depend only on
  // the bucket and the engine's bounds, so the layers' attention can be captured in a CUDA graph
  // once and replayed after each later plan_graph of the same bucket. CPU: PKV_ERR_UNSUPPORTED.
  virtual void plan_graph(const pkv_batch_view &step, uint32_t bucket) = 0;
  // Returns once the copies queued to or from the host tier have run (a host wait, counted,
  // when they have not): before the host itself reads or writes host-tier memory.
  virtual void wait_host_tier() = 0;
  // Host waits and allocations since create (pkv_stats.num_host_waits, num_device_allocs).
  virtual uint64_t host_waits() const { return 0; }
  virtual uint64_t device_allocs() const { return 0; }
};

// A step's copy list split by what it moves: the KV block copies (in their order) and the state
// slot copies (in theirs). The two touch disjoint memory, so running one list, then the other,
// gives what the whole list gives in order.
struct SplitCopies {
  std::vector<int32_t> src, dst, kind;  // the block copies
  std::vector<int32_t> state_src, state_dst, state_kind;
};
// Inline: the CUDA backend's emulator test links cuda_backend.cpp without backend.cpp.
inline SplitCopies split_copies(const int32_t *src, const int32_t *dst, const int32_t *kind,
                                uint32_t n) {
  SplitCopies out;
  for (uint32_t i = 0; i < n; ++i) {
    if (copy_is_state(kind[i])) {
      out.state_src.push_back(src[i]);
      out.state_dst.push_back(dst[i]);
      out.state_kind.push_back(kind[i]);
      continue;
    }
    out.src.push_back(src[i]);
    out.dst.push_back(dst[i]);
    out.kind.push_back(kind[i]);
  }
  return out;
}

// Host memory from /proc/meminfo.
MemoryInfo host_memory();

// CPU pool: anonymous memory, committed lazily as blocks are first written. Throws
// PKV_ERR_OUT_OF_MEMORY when the address space cannot be had.
std::unique_ptr<Backend> make_cpu_backend(const PoolShape &shape, uint32_t num_threads);

// True when the build has CUDA and device_id is a usable GPU; else false with the reason.
// Makes the first CUDA call of the process (never at load time).
bool cuda_usable(int32_t device_id, std::string *why);
// Device memory (cudaMemGetInfo). Throws PKV_ERR_NO_DEVICE / PKV_ERR_DEVICE.
MemoryInfo cuda_memory(int32_t device_id);
// Device pool (cudaMalloc). Throws PKV_ERR_NO_DEVICE / PKV_ERR_OUT_OF_MEMORY.
std::unique_ptr<Backend> make_cuda_backend(int32_t device_id, const PoolShape &shape);

// AUTO -> CUDA when usable, else CPU; CUDA when not usable -> PKV_ERR_NO_DEVICE.
int32_t resolve_device(int32_t device, int32_t device_id);

}  // namespace pkv
