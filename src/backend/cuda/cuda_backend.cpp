// CUDA backend glue: device checks, memory queries, the device pool, and the step's launches
// (kernels/ holds the kernels). A batch's arrays, every KV group's, go to the device once, in
// plan(); fp8 scales once per layer, at its first attention. An MLA pool (shape.mla()) is K alone
// (the latents): no V pool, the host tier, copies and the store's payload are K only, and
// attention runs kernels/mla_attention.cu. A sparse-attention engine's MLA layers live in pages
// (DESIGN.md §14): the same kernels at the layer's offset, kernels/indexer.cu for the indexer
// keys beside the latents, kernels/sparse_mla.cu for attention over the selected keys.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/copy_plan.h"
#include "backend/cuda/sink_table.h"
#include "cache_ops.cuh"
#include "decode_attention.cuh"
#include "indexer.cuh"
#include "mla_attention.cuh"
#include "prefill_attention.cuh"
#include "sparse_mla.cuh"
#include "status.h"

namespace pkv {
namespace {

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_cuda(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return;
  pkv_status s = err == cudaErrorMemoryAllocation ? PKV_ERR_OUT_OF_MEMORY : PKV_ERR_DEVICE;
  fail(s, "%s: %s", what, cudaGetErrorString(err));
}

// A device buffer that only grows.
class DeviceBuffer {
 public:
  ~DeviceBuffer() { cudaFree(ptr_); }
  void *get(size_t bytes) {
    if (bytes > size_) {
      cudaFree(ptr_);
      ptr_ = nullptr;
      size_ = 0;
      check_cuda(cudaMalloc(&ptr_, bytes), "allocating a device workspace");
      size_ = bytes;
    }
    return ptr_;
  }

 private:
  void *ptr_ = nullptr;
  size_t size_ = 0;
};

// fp8: every layer's K and V scales on the device, [layers][tensors][kv_heads] (tensors 2, or 1
// for the MLA latent: K's alone), and the same in pinned host memory, from which each layer's are
// uploaded (asynchronously: no wait on the stream) when the attention call's differ from what was
// uploaded. pkv_set_kv_scales is refused once a
// sequence exists, so that is once per layer, before any of its KV is written, and a slot of the
// staging copy is never rewritten while its upload may be pending.
class ScaleTable {
 public:
  ~ScaleTable() { release(); }
  // Room for num_layers layers of kv_heads heads; once (the shape of an engine never changes).
  void reserve(size_t num_layers, size_t kv_heads, size_t tensors) {
    if (dev_) return;
    heads_ = kv_heads, layers_ = num_layers, tensors_ = tensors;
    const size_t bytes = tensors_ * layers_ * heads_ * sizeof(float);
    cudaError_t err = cudaMalloc(&dev_, bytes);
    if (err == cudaSuccess)
      err = cudaHostAlloc(reinterpret_cast<void **>(&host_), bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      release();
      check_cuda(err, "allocating the fp8 scales");
    }
    std::fill(host_, host_ + tensors_ * layers_ * heads_,
              0.f);  // scales are > 0: nothing uploaded yet
  }
  // The device copy of layer's scales, k then v ([tensors][kv_heads]); v is null with one tensor.
  const float *layer(uint32_t layer, const float *k, const float *v, cudaStream_t stream) {
    PKV_ASSERT(dev_ && layer < layers_ && k && (v != nullptr) == (tensors_ == 2));
    float *h = host_ + tensors_ * heads_ * layer;
    float *d = static_cast<float *>(dev_) + tensors_ * heads_ * layer;
    const size_t bytes = heads_ * sizeof(float);
    if (std::memcmp(h, k, bytes) != 0 || (v && std::memcmp(h + heads_, v, bytes) != 0)) {
      std::memcpy(h, k, bytes);
      if (v) std::memcpy(h + heads_, v, bytes);
      check_cuda(cudaMemcpyAsync(d, h, tensors_ * bytes, cudaMemcpyHostToDevice, stream),
                 "uploading fp8 scales");
    }
    return d;
  }

 private:
  void release() {
    cudaFree(dev_);
    if (host_) cudaFreeHost(host_);
    dev_ = nullptr, host_ = nullptr;
  }
  void *dev_ = nullptr;
  float *host_ = nullptr;
  size_t heads_ = 0, layers_ = 0, tensors_ = 2;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int32_t device_id, const PoolShape &shape) : device_id_(device_id), shape_(shape) {
    // Layers and kv heads are grid dimensions of the kernels.
    PKV_REQUIRE(shape.num_layers <= PKV_CUDA_MAX_GRID && shape.kv_heads <= PKV_CUDA_MAX_GRID,
                "a CUDA engine takes at most %d layers and kv heads per rank (%u, %u given)",
                PKV_CUDA_MAX_GRID, shape.num_layers, shape.kv_heads);
    check_cuda(cudaSetDevice(device_id), "cudaSetDevice");
    check_cuda(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_id),
               "reading the SM count");
    check_cuda(
        cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id),
        "reading the shared memory limit");
    PKV_ASSERT(shape.tensors == 1 || shape.tensors == 2);
    const uint64_t bytes = shape.bytes_per_pool();
    check_cuda(cudaMalloc(&k_, bytes), "allocating the K pool");
    cudaError_t err = shape.tensors == 1 ? cudaSuccess : cudaMalloc(&v_, bytes);  // MLA, pages
    // The host tier: pinned and mapped, K then V (MLA: K) in one allocation. The copy kernels
    // read and write it over the bus through its device pointer (the same address under UVA).
    if (err == cudaSuccess && shape.host_num_blocks)
      err = cudaHostAlloc(&host_, shape.tensors * shape.host_bytes.pool, cudaHostAllocMapped);
    if (err == cudaSuccess && host_) err = cudaHostGetDevicePointer(&host_dev_, host_, 0);
    // The state slots (cudaMalloc's 256-byte alignment keeps each part aligned), zeroed once.
    const uint64_t state_bytes = uint64_t(shape.num_state_slots) * shape.state_slot_bytes;
    if (err == cudaSuccess && state_bytes) err = cudaMalloc(&state_, state_bytes);
    if (err == cudaSuccess && state_bytes) err = cudaMemset(state_, 0, state_bytes);
    // Swapped-out states and offloaded checkpoints: pinned host slots, moved by cudaMemcpyAsync.
    const uint64_t host_state_bytes = uint64_t(shape.num_host_state_slots) * shape.state_slot_bytes;
    if (err == cudaSuccess && host_state_bytes)
      err = cudaHostAlloc(&host_state_, host_state_bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      release();
      check_cuda(err, "allocating the KV pool and its host tier");
    }
  }
  ~CudaBackend() override { release(); }
  int32_t device() const override { return PKV_DEVICE_CUDA; }
  const char *kernels() const override { return "cuda"; }
  void *k_pool() const override { return k_; }
  void *state_pool() const override { return state_; }
  void *host_state_pool() const override { return host_state_; }
  void *v_pool() const override { return v_; }
  void *host_k_pool() const override { return host_; }
  void *host_v_pool() const override {
    return host_ && shape_.tensors == 2 ? static_cast<char *>(host_) + shape_.host_bytes.pool
                                        : nullptr;
  }
  // pkv's buffers (the batch's arrays, the split workspace, the copy pairs) are reused by later
  // calls on the new stream: the work queued on the old one must be done with them first.
  void set_stream(void *stream) override {
    cudaStream_t next = static_cast<cudaStream_t>(stream);
    if (next == stream_) return;
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    check_cuda(cudaStreamSynchronize(stream_), "waiting for pkv's work on the previous stream");
    stream_ = next;
  }

  // One plan (copy_plan.h): waves of independent copies, each at most one launch per direction;
  // all pairs uploaded at once; one wait at the end, as pairs_buf_ is reused by the next call.
  void copy_blocks(const int32_t *src, const int32_t *dst, const int32_t *kind,
                   uint32_t n) override {
    const SplitCopies c = split_copies(src, dst, kind, n);
    CopyPlan plan;
    if (!plan_block_copies(c.src.data(), c.dst.data(), c.kind.data(), uint32_t(c.src.size()),
                           &plan))
      fail(PKV_ERR_INTERNAL, "copy_blocks: a queued copy of an unknown kind");
    if (!c.state_src.empty()) copy_states(c);
    if (plan.launches.empty()) {
      if (!c.state_src.empty()) check_cuda(cudaStreamSynchronize(stream_), "copy_blocks");
      return;
    }
    for (const CopyLaunch &l : plan.launches)
      PKV_ASSERT(host_dev_ || l.direction == CopyDirection::device_to_device);
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    const cuda::KvPool pool{k_, v_, int32_t(shape_.num_layers), int64_t(shape_.layer_bytes()),
                            int64_t(shape_.block_bytes())};
    char *host = static_cast<char *>(host_dev_);
    const cuda::KvPool host_tier{host, host && v_ ? host + shape_.host_bytes.pool : nullptr,
                                 int32_t(shape_.num_layers), int64_t(shape_.host_bytes.layer),
                                 int64_t(shape_.block_bytes())};
    const size_t bytes = plan.pairs.size() * sizeof(int32_t);
    int32_t *pairs = static_cast<int32_t *>(pairs_buf_.get(bytes));
    check_cuda(cudaMemcpyAsync(pairs, plan.pairs.data(), bytes, cudaMemcpyHostToDevice, stream_),
               "uploading block copies");
    for (const CopyLaunch &l : plan.launches) {
      const cuda::KvPool &from = l.direction == CopyDirection::host_to_device ? host_tier : pool;
      const cuda::KvPool &to = l.direction == CopyDirection::device_to_host ? host_tier : pool;
      check_cuda(cuda::launch_copy_tier_blocks(from, to, pairs + 2 * size_t(l.first_pair),
                                               int32_t(l.num_pairs), stream_),
                 "copy_blocks");
    }
    check_cuda(cudaStreamSynchronize(stream_), "copy_blocks");
  }

  // Whole state slots, in order on the stream (a copy may read an earlier one's destination):
  // device to device, or to and from the pinned host slots of swapped-out sequences; the caller
  // waits for the stream.
  void copy_states(const SplitCopies &c) {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    for (size_t i = 0; i < c.state_src.size(); ++i) {
      const int32_t k = c.state_kind[i];
      const bool from_host = state_reads_host(k), to_host = state_writes_host(k);
      if (!from_host && !to_host && c.state_src[i] == c.state_dst[i]) continue;
      const cudaMemcpyKind dir = from_host ? cudaMemcpyHostToDevice
                                 : to_host ? cudaMemcpyDeviceToHost
                                           : cudaMemcpyDeviceToDevice;
      check_cuda(cudaMemcpyAsync(state_slot(to_host, c.state_dst[i]),
                                 state_slot(from_host, c.state_src[i]), shape_.state_slot_bytes,
                                 dir, stream_),
                 "copying state slots");
    }
  }
  // Slot `slot` of the device's state slots, or of the host's.
  char *state_slot(bool host, int32_t slot) const {
    PKV_ASSERT(slot >= 0 &&
               uint32_t(slot) < (host ? shape_.num_host_state_slots : shape_.num_state_slots));
    return static_cast<char *>(host ? host_state_ : state_) +
           uint64_t(slot) * shape_.state_slot_bytes;
  }

  void read_block(int32_t block, void *dst) override {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    // Every layer's K (then V) of the block: a strided run per layer, into the payload's layout
    // (layer by layer, K then V; MLA: K): destination pitch `tensors` blocks.
    const size_t bb = shape_.block_bytes(), tensors = shape_.tensors;
    char *out = static_cast<char *>(dst);
    const char *pools[2] = {static_cast<const char *>(k_), static_cast<const char *>(v_)};
    for (size_t kv = 0; kv < tensors; ++kv)
      check_cuda(cudaMemcpy2DAsync(out + kv * bb, tensors * bb, pools[kv] + bb * size_t(block),
                                   shape_.layer_bytes(), bb, shape_.num_layers,
                                   cudaMemcpyDeviceToHost, stream_),
                 "reading a block for the store");
    check_cuda(cudaStreamSynchronize(stream_), "reading a block for the store");
  }

  void read_state(int32_t slot, void *dst) override {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    check_cuda(cudaMemcpyAsync(dst, state_slot(false, slot), shape_.state_slot_bytes,
                               cudaMemcpyDeviceToHost, stream_),
               "reading a state slot for the store");
    check_cuda(cudaStreamSynchronize(stream_), "reading a state slot for the store");
  }

  // The step's arrays, packed into one device buffer with one copy: [groups][tokens] slot
  // mappings (int64), then query_start, context_lens, block_indptr, and [groups] block indices
  // in indptr form (int32; a windowed group's -1 entries are never read). Decode plans are made
  // per window at its first layer; the workspace is sized here for any of them. MLA (one group,
  // no window): its plan is made here.
  void plan(const pkv_batch_view &v) override {
    PKV_REQUIRE(v.num_seqs <= PKV_CUDA_MAX_GRID, "a CUDA batch holds at most %d sequences, not %u",
                PKV_CUDA_MAX_GRID, v.num_seqs);
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    const size_t groups = v.num_kv_groups ? v.num_kv_groups : 1;
    const size_t n_seq = v.num_seqs, n_tok = v.num_tokens,
                 n_blocks = size_t(v.block_indptr[v.num_seqs]);
    PKV_ASSERT(groups == 1 || (v.group_slot_mapping && v.group_block_tables));
    if (cuda::is_fp8(cuda::DType(shape_.kv_dtype)))  // by the model's layer; pages: K and V
      scales_.reserve(shape_.model_layers, shape_.kv_heads, shape_.mla() ? 1 : 2);
    std::vector<int64_t> slots(v.slot_mapping, v.slot_mapping + n_tok);
    for (size_t g = 1; g < groups; ++g)
      slots.insert(slots.end(), v.group_slot_mapping + g * n_tok,
                   v.group_slot_mapping + (g + 1) * n_tok);
    std::vector<int32_t> ints;
    ints.insert(ints.end(), v.query_start, v.query_start + n_seq + 1);
    ints.insert(ints.end(), v.context_lens, v.context_lens + n_seq);
    ints.insert(ints.end(), v.block_indptr, v.block_indptr + n_seq + 1);
    ints.insert(ints.end(), v.block_indices, v.block_indices + n_blocks);
    for (size_t g = 1; g < groups; ++g)
      for (size_t i = 0; i < n_seq; ++i) {  // the padded [seqs][max_blocks_per_seq] table, packed
        const int32_t *row = v.group_block_tables + (g * n_seq + i) * v.max_blocks_per_seq;
        ints.insert(ints.end(), row, row + (v.block_indptr[i + 1] - v.block_indptr[i]));
      }
    const size_t slot_bytes = slots.size() * sizeof(int64_t),
                 int_bytes = ints.size() * sizeof(int32_t);
    char *d = static_cast<char *>(batch_buf_.get(slot_bytes + int_bytes + 16));
    std::vector<char> host(slot_bytes + int_bytes);
    std::memcpy(host.data(), slots.data(), slot_bytes);
    std::memcpy(host.data() + slot_bytes, ints.data(), int_bytes);
    check_cuda(cudaMemcpyAsync(d, host.data(), host.size(), cudaMemcpyHostToDevice, stream_),
               "uploading the batch");
    check_cuda(cudaStreamSynchronize(stream_), "uploading the batch");  // `host` dies here
    const int64_t *d_slots = reinterpret_cast<const int64_t *>(d);
    const int32_t *di = reinterpret_cast<const int32_t *>(d + slot_bytes);
    groups_.clear();
    for (size_t g = 0; g < groups; ++g)
      groups_.push_back(StepGroup{
          d_slots + g * n_tok,
          cuda::BatchView{int32_t(v.num_seqs), int32_t(v.num_tokens), int32_t(v.max_query_len),
                          int32_t(v.max_context_len), di, di + n_seq + 1, di + 2 * n_seq + 1,
                          di + 3 * n_seq + 2 + g * n_blocks}});
    decode_plans_.clear();
    mla_planned_ = false;
    size_t ws = 0;
    if (shape_.mla()) {
      PKV_ASSERT(groups == 1);
      mla_plan_ =
          cuda::plan_mla(groups_[0].batch, int32_t(shape_.q_heads), int32_t(shape_.kv_lora_rank),
                         int32_t(shape_.head_dim), num_sms_, size_t(max_smem_));
      ws = mla_plan_.workspace_bytes;
    } else {
      ws = cuda::decode_workspace_bound(groups_[0].batch, int32_t(shape_.q_heads),
                                        int32_t(shape_.kv_heads), int32_t(shape_.head_dim),
                                        num_sms_);
    }
    workspace_ptr_ = ws ? workspace_.get(ws) : nullptr;
    workspace_bytes_ = ws;
  }

  void attention(const AttentionCall &call) override {
    if (shape_.mla() || call.mla) return mla_attention(call);
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    for (const void *p : {call.q, call.k, call.v, static_cast<const void *>(call.out)})
      PKV_REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                  "q, k, v and out must be 16-byte aligned on CUDA");
    PKV_ASSERT(call.group < groups_.size() && call.window <= INT32_MAX && call.chunk <= INT32_MAX);
    const StepGroup &g = groups_[call.group];
    // Refused before anything is written: the CUDA kernels stage K and V tiles of one width.
    if (call.v_dim != call.head_dim)
      fail(PKV_ERR_UNSUPPORTED,
           "layer %u: the CUDA kernels take V as wide as K (v_head_dim %u, head_dim %u); run the "
           "layer on the CPU backend or with the host's kernels over the pool (pkv_layer_info)",
           call.layer, call.v_dim, call.head_dim);
    const cuda::KvLayer layer = kv_layer(call);
    const int32_t q_heads = int32_t(shape_.q_heads);
    if (call.write)  // a SHARED layer attends over its source's KV and writes none
      check_cuda(cuda::launch_write_kv(layer, call.k, layer.v ? call.v : nullptr, g.slots,
                                       g.batch.num_tokens, stream_),
                 "write_kv");
    check_cuda(cuda::launch_decode_attention(layer, g.batch, call.q, call.out, q_heads, call.scale,
                                             decode_plan(g.batch, layer, q_heads), workspace_ptr_,
                                             stream_),
               "decode attention");
    if (g.batch.max_query_len > 1)
      check_cuda(cuda::launch_prefill_attention(layer, g.batch, call.q, call.out, q_heads,
                                                call.scale, stream_),
                 "prefill attention");
  }

  void indexer_write(const IndexerCall &call) override {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    PKV_REQUIRE(aligned16(call.k), "k must be 16-byte aligned on CUDA");
    const cuda::IndexerLayer layer = indexer_layer(call);
    const StepGroup &g = step_group(call.group);
    check_cuda(
        cuda::launch_indexer_write(layer, call.k, g.slots, g.batch.num_tokens, call.ue8m0, stream_),
        "indexer write");
  }

  // Scores a wave of tokens at a time into a workspace of at most kIndexerWorkspace bytes
  // (one token's row at least), then selects each token's top keys (kernels/indexer.cu).
  void indexer_topk(const IndexerCall &call) override {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    for (const void *p :
         {call.q, static_cast<const void *>(call.weights), static_cast<const void *>(call.out)})
      PKV_REQUIRE(aligned16(p), "q, weights and out must be 16-byte aligned on CUDA");
    const cuda::IndexerLayer layer = indexer_layer(call);
    const StepGroup &g = step_group(call.group);
    const cuda::IndexerTopkPlan plan = cuda::plan_indexer_topk(g.batch, kIndexerWorkspace);
    void *ws = index_ws_.get(plan.workspace_bytes);
    check_cuda(
        cuda::launch_indexer_topk(layer, g.batch, call.q, call.weights, int32_t(call.heads),
                                  int32_t(call.topk), call.slots, call.out, plan, ws, stream_),
        "indexer top-k");
  }

 private:
  // MLA: the latents of the new tokens into their slots (K alone), then attention over them:
  // dense (every key), or sparse over call.indices (pkv_sparse_mla_attention). The MLA pool
  // (shape_.mla()) holds one layer per slot; pages (a sparse-attention engine's) hold the layer
  // at call.k_offset of each page.
  void mla_attention(const AttentionCall &call) {
    check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
    for (const void *p : {call.q, call.k, static_cast<const void *>(call.out),
                          static_cast<const void *>(call.indices)})
      PKV_REQUIRE(aligned16(p), call.indices
                                    ? "q, k, indices and out must be 16-byte aligned on CUDA"
                                    : "q, k and out must be 16-byte aligned on CUDA");
    PKV_REQUIRE(
        !call.v,
        "pkv_attention on an MLA cache takes v NULL (V is the latents' first kv_lora_rank)");
    // The MLA pool's slot is its layer dimension; a page's (slot > 0 for the second layer of a
    // page) is not: pages place a layer by its k_offset.
    PKV_ASSERT(call.window == 0 && (!shape_.mla() || call.slot < shape_.num_layers));
    const StepGroup &g = step_group(call.group);
    const cuda::KvLayer layer = mla_layer(call);
    const int32_t rank = int32_t(shape_.mla() ? shape_.kv_lora_rank : call.v_dim);
    check_cuda(cuda::launch_write_kv(layer, call.k, nullptr, g.slots, g.batch.num_tokens, stream_),
               "write_kv");
    if (call.indices) {
      const cuda::SparseMlaPlan plan = cuda::plan_sparse_mla(
          g.batch.num_tokens, int32_t(shape_.q_heads), rank, int32_t(call.topk), num_sms_);
      void *ws = plan.workspace_bytes ? sparse_ws_.get(plan.workspace_bytes) : nullptr;
      check_cuda(
          cuda::launch_sparse_mla(layer, rank, g.batch, call.q, call.indices, int32_t(call.topk),
                                  call.out, int32_t(shape_.q_heads), call.scale, plan, ws, stream_),
          "sparse MLA attention");
      return;
    }
    check_cuda(cuda::launch_mla_attention(
                   layer, rank, g.batch, call.q, call.out, int32_t(shape_.q_heads), call.scale,
                   mla_plan(g.batch, layer.head_dim, rank), workspace_ptr_, stream_),
               "MLA attention");
  }

  // The kernels' view of an MLA layer's latents. Pages: the layer's offset and the page stride,
  // refused (before anything is written) where the kernels' 16-byte loads would not be aligned.
  cuda::KvLayer mla_layer(const AttentionCall &call) {
    const bool pages = !shape_.mla();
    if (pages && (call.k_offset % 16 || call.block_stride % 16))
      fail(PKV_ERR_UNSUPPORTED,
           "layer %u: its latents start %llu bytes into a page of %llu bytes; the CUDA kernels "
           "need both to be multiples of 16 (a block_size that is a multiple of 4 makes them so "
           "for DeepSeek V3.2 and GLM-5), or run the layer with the host's kernels over the "
           "pool (pkv_layer_info)",
           call.layer, static_cast<unsigned long long>(call.k_offset),
           static_cast<unsigned long long>(call.block_stride));
    char *base = static_cast<char *>(k_) +
                 (pages ? call.k_offset : uint64_t(call.slot) * shape_.layer_bytes());
    cuda::KvLayer layer{base,
                        nullptr,
                        int32_t(shape_.block_size),
                        1,
                        int32_t(pages ? call.head_dim : shape_.head_dim),
                        cuda::DType(shape_.dtype),
                        cuda::DType(shape_.kv_dtype),
                        nullptr,
                        nullptr,
                        0};
    layer.block_stride = pages ? int64_t(call.block_stride) : 0;
    // The scale table holds K and V of every layer for pages (tensors 2): an MLA layer's V
    // scale is its K scale (AttentionCall::v_scale), the latents' one scale.
    if (cuda::is_fp8(layer.kv_dtype))
      layer.k_scale =
          scales_.layer(call.layer, call.k_scale, pages ? call.k_scale : nullptr, stream_);
    return layer;
  }

  // The step's MLA plan: made in plan() for the MLA pool, at the first MLA layer for pages (the
  // workspace grows here when it needs more than plan() reserved).
  const cuda::MlaPlan &mla_plan(const cuda::BatchView &batch, int32_t width, int32_t rank) {
    if (shape_.mla() || mla_planned_) return mla_plan_;
    mla_plan_ =
        cuda::plan_mla(batch, int32_t(shape_.q_heads), rank, width, num_sms_, size_t(max_smem_));
    mla_planned_ = true;
    if (mla_plan_.workspace_bytes > workspace_bytes_) {
      workspace_ptr_ = workspace_.get(mla_plan_.workspace_bytes);
      workspace_bytes_ = mla_plan_.workspace_bytes;
    }
    return mla_plan_;
  }

  // The kernels' view of an indexer layer (pages at the call's offsets), refused where the
  // offsets would misalign the kernels' loads (an odd block_size's fp8 scales, for one).
  cuda::IndexerLayer indexer_layer(const IndexerCall &call) const {
    const bool fp8 = call.index_dtype != PKV_DTYPE_BF16;
    if (call.key_offset % 16 || call.block_stride % 16 || (fp8 && call.scale_offset % 4))
      fail(PKV_ERR_UNSUPPORTED,
           "layer %u: its indexer keys start %llu bytes into a page of %llu bytes; the CUDA "
           "kernels need both to be multiples of 16 (a block_size that is a multiple of 4 makes "
           "them so), or run the indexer with the host's kernels over the pool (pkv_layer_info)",
           call.layer, static_cast<unsigned long long>(call.key_offset),
           static_cast<unsigned long long>(call.block_stride));
    if (call.dim % PKV_ATTENTION_HEAD_DIM_ALIGN || call.dim > PKV_INDEXER_MAX_HEAD_DIM)
      fail(PKV_ERR_UNSUPPORTED, "layer %u: index_head_dim %u is outside the CUDA kernels' limits",
           call.layer, call.dim);
    cuda::IndexerLayer l{};
    l.pages = k_;
    l.key_offset = int64_t(call.key_offset), l.scale_offset = int64_t(call.scale_offset);
    l.block_stride = int64_t(call.block_stride);
    l.block_size = int32_t(shape_.block_size), l.dim = int32_t(call.dim);
    l.dtype = cuda::DType(shape_.dtype);
    l.index_dtype = fp8 ? cuda::DType::fp8_e4m3 : cuda::DType::bf16;
    return l;
  }

  void release() {
    cudaSetDevice(device_id_);
    cudaFree(k_);
    cudaFree(v_);
    cudaFree(state_);
    if (host_) cudaFreeHost(host_);
    if (host_state_) cudaFreeHost(host_state_);
    k_ = v_ = host_ = host_dev_ = state_ = host_state_ = nullptr;
  }

  // The kernels' view of the call's layer (kernels/kv_types.cuh): its own heads and widths, where
  // its K and V blocks are (v null when V is K: the same bytes), its window or chunk, soft-cap,
  // and sinks on the device (uploaded at the layer's first call).
  cuda::KvLayer kv_layer(const AttentionCall &call) {
    char *k_pool = static_cast<char *>(k_);
    char *v_pool = static_cast<char *>(call.v_in_k_pool ? k_ : v_);
    const bool v_is_k = call.v_in_k_pool && call.v_offset == call.k_offset;
    cuda::KvLayer layer{k_pool + call.k_offset,
                        v_is_k ? nullptr : v_pool + call.v_offset,
                        int32_t(shape_.block_size),
                        int32_t(call.kv_heads),
                        int32_t(call.head_dim),
                        cuda::DType(shape_.dtype),
                        cuda::DType(shape_.kv_dtype),
                        nullptr,
                        nullptr,
                        int32_t(call.window)};
    layer.block_stride = call.dense_stride ? 0 : int64_t(call.block_stride);
    layer.v_dim = int32_t(call.v_dim), layer.chunk = int32_t(call.chunk);
    layer.softcap = call.softcap;
    if (call.sinks)
      check_cuda(sinks_.layer(call.layer, call.sinks, shape_.q_heads, stream_, &layer.sinks),
                 "uploading attention sinks");
    if (cuda::is_fp8(layer.kv_dtype)) {
      const float *scales = scales_.layer(call.layer, call.k_scale, call.v_scale, stream_);
      layer.k_scale = scales, layer.v_scale = scales + shape_.kv_heads;
    }
    return layer;
  }

  // The step's decode split for layers of this span (window or chunk) and shape, made once per
  // step and kind. Layers that differ in kv heads want different splits, so the workspace grows
  // here when a plan needs more than plan() reserved (cudaFree waits for the work queued on it).
  const cuda::DecodePlan &decode_plan(const cuda::BatchView &batch, const cuda::KvLayer &layer,
                                      int32_t q_heads) {
    const int32_t span = layer.chunk ? layer.chunk : layer.window;
    for (const StepPlan &p : decode_plans_)
      if (p.span == span && p.kv_heads == layer.kv_heads && p.plan.head_dim == layer.head_dim &&
          p.plan.q_heads == q_heads)
        return p.plan;
    const cuda::DecodePlan plan =
        cuda::plan_decode(batch, q_heads, layer.kv_heads, layer.head_dim, span, num_sms_);
    if (plan.workspace_bytes > workspace_bytes_) {
      workspace_ptr_ = workspace_.get(plan.workspace_bytes);
      workspace_bytes_ = plan.workspace_bytes;
    }
    decode_plans_.push_back({span, layer.kv_heads, plan});
    return decode_plans_.back().plan;
  }

  // One KV group's view of the step on the device.
  struct StepGroup {
    const int64_t *slots;   // [num_tokens]
    cuda::BatchView batch;  // block_indices: the group's
  };
  const StepGroup &step_group(uint32_t group) const {
    PKV_ASSERT(group < groups_.size());
    return groups_[group];
  }

  int32_t device_id_;
  PoolShape shape_;
  int num_sms_ = 0, max_smem_ = 0;
  void *k_ = nullptr;
  void *v_ = nullptr;
  void *host_ = nullptr;        // the host tier, for the host (host_k_pool)
  void *host_dev_ = nullptr;    // the same memory, for kernels
  void *state_ = nullptr;       // the state slots (PoolShape::num_state_slots), device memory
  void *host_state_ = nullptr;  // host state slots (swapped, offloaded), pinned host memory
  cudaStream_t stream_ = nullptr;
  DeviceBuffer batch_buf_, workspace_, pairs_buf_;
  // decode_workspace_bound bytes of the pool's shape (any window's plan fits), or more when a
  // layer's shape asked for it (decode_plan).
  void *workspace_ptr_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<StepGroup> groups_;  // [num_kv_groups] of the planned step
  struct StepPlan {
    int32_t span, kv_heads;  // the layers it serves (with plan.q_heads, plan.head_dim)
    cuda::DecodePlan plan;
  };
  std::vector<StepPlan> decode_plans_;  // of the step
  cuda::MlaPlan mla_plan_{};            // MLA: the step's
  bool mla_planned_ = false;            // pages: mla_plan_ is the step's
  // The indexer's top-k scores (at most kIndexerWorkspace bytes: longer prefills run in waves).
  static constexpr size_t kIndexerWorkspace = size_t(256) << 20;
  DeviceBuffer index_ws_;
  DeviceBuffer sparse_ws_;  // sparse MLA's split rows (SparseMlaPlan)
  ScaleTable scales_;
  SinkTable sinks_;
};

}  // namespace

bool cuda_usable(int32_t device_id, std::string *why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // cudaErrorNoDevice, or cudaErrorInsufficientDriver where no NVIDIA driver is loaded at all:
    // either way no GPU can be used here; the runtime's words follow for the rest.
    *why = std::string("no CUDA GPU was found (the CUDA runtime says: ") + cudaGetErrorString(err) +
           ")";
    cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  if (count <= 0) {
    *why = "no CUDA GPU was found";
    return false;
  }
  if (device_id < 0 || device_id >= count) {
    *why = "this machine has " + std::to_string(count) + " CUDA GPUs (device_id 0 .. " +
           std::to_string(count - 1) + ")";
    return false;
  }
  return true;
}

MemoryInfo cuda_memory(int32_t device_id) {
  std::string why;
  if (!cuda_usable(device_id, &why))
    fail(PKV_ERR_NO_DEVICE, "no usable CUDA device: %s", why.c_str());
  check_cuda(cudaSetDevice(device_id), "cudaSetDevice");
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  return MemoryInfo{total_bytes, free_bytes};
}

std::unique_ptr<Backend> make_cuda_backend(int32_t device_id, const PoolShape &shape) {
  std::string why;
  if (!cuda_usable(device_id, &why))
    fail(PKV_ERR_NO_DEVICE, "no usable CUDA device: %s", why.c_str());
  return std::make_unique<CudaBackend>(device_id, shape);
}

}  // namespace pkv
