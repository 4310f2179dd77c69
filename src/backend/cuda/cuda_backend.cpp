// CUDA backend glue (cuda_backend.h): device checks, memory queries, the device pool and its host
// tier, block copies, a step's plan, and the attention launches (kernels/ holds the kernels). A
// batch's arrays, every KV group's, go to the device once per step, from a pinned staging slot
// (plan_step); fp8 scales and sinks once per layer, at its first attention. An MLA pool
// (shape.mla()) is K alone (the latents): no V pool, the host tier, copies and the store's payload
// are K only. A sparse-attention engine's MLA layers live in pages (DESIGN.md §14); their
// launches are in cuda_backend_mla.cpp.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda/copy_plan.h"
#include "backend/cuda/step_arrays.h"
#include "cache_ops.cuh"
#include "prefill_attention.cuh"
#include "sparse_mla.cuh"
#include "status.h"

namespace pkv {

CudaBackend::CudaBackend(int32_t device_id, const PoolShape &shape)
    : device_id_(device_id), shape_(shape) {
  // Layers and kv heads are grid dimensions of the kernels.
  PKV_REQUIRE(shape.num_layers <= PKV_CUDA_MAX_GRID && shape.kv_heads <= PKV_CUDA_MAX_GRID,
              "a CUDA engine takes at most %d layers and kv heads per rank (%u, %u given)",
              PKV_CUDA_MAX_GRID, shape.num_layers, shape.kv_heads);
  check_cuda(cudaSetDevice(device_id), "cudaSetDevice");
  check_cuda(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_id),
             "reading the SM count");
  check_cuda(cudaDeviceGetAttribute(&max_smem_, cudaDevAttrMaxSharedMemoryPerBlockOptin, device_id),
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
  // fp8 scales by the model's layer (pages: K and V), sinks when a layer has them.
  if (err == cudaSuccess && cuda::is_fp8(cuda::DType(shape.kv_dtype)))
    err = scales_.reserve(shape.model_layers, shape.kv_heads * (shape.mla() ? 1 : 2));
  if (err == cudaSuccess && shape.sinks) err = sinks_.reserve(shape.model_layers, shape.q_heads);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&host_copies_, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    release();
    check_cuda(err, "allocating the KV pool and its host tier");
  }
  try {
    reserve_step_buffers();
  } catch (...) {
    release();
    throw;
  }
  counters_ = CudaCounters{};  // what create allocated is not a step's
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() {
  cudaSetDevice(device_id_);
  cudaFree(k_);
  cudaFree(v_);
  cudaFree(state_);
  if (host_) cudaFreeHost(host_);
  if (host_state_) cudaFreeHost(host_state_);
  if (host_copies_) cudaEventDestroy(host_copies_);
  k_ = v_ = host_ = host_dev_ = state_ = host_state_ = nullptr;
  host_copies_ = nullptr;
}

// The bounds' buffers: a step of at most max_num_seqs sequences, max_num_batched_tokens tokens
// and max_blocks_per_seq blocks each (a graph step's bucket: at most max_num_seqs) fits them.
// The block tables' room is capped at kMaxTableBytes per group (an engine without max_model_len
// would otherwise reserve max_num_seqs * num_blocks entries); a step past it grows, counted.
void CudaBackend::reserve_step_buffers() {
  constexpr size_t kMaxTableBytes = size_t(64) << 20;
  StepLayout l;
  l.groups = shape_.num_kv_groups ? shape_.num_kv_groups : 1;
  l.seq_cap = std::max<size_t>(shape_.max_num_seqs, 1);
  l.tok_cap = std::max<size_t>(shape_.max_num_batched_tokens, l.seq_cap);
  l.blk_cap = std::min(l.seq_cap * shape_.max_blocks_per_seq, kMaxTableBytes / sizeof(int32_t));
  batch_buf_.get(l.bytes(), "allocating the step's arrays");
  batch_staging_.reserve(l.bytes(), "allocating the step's staging memory");
  // Copies per step: pairs of (src, dst) ids; swaps of more blocks grow them (counted).
  const size_t pairs =
      std::min<size_t>(uint64_t(shape_.num_blocks) + shape_.host_num_blocks, 65536);
  pairs_buf_.get(2 * sizeof(int32_t) * pairs, "allocating block copies");
  pairs_staging_.reserve(2 * sizeof(int32_t) * pairs, "allocating block copies");
  if (const size_t ws = workspace_bound()) workspace_.get(ws, "allocating the attention workspace");
  if (shape_.index_topk) {
    const int64_t keys = int64_t(shape_.max_blocks_per_seq) * shape_.block_size;
    const size_t scores = size_t(l.tok_cap) * size_t(std::max<int64_t>(keys, 1)) * sizeof(float);
    index_ws_.get(std::min(scores, kIndexerWorkspace), "allocating the indexer's workspace");
    size_t sparse = 0;
    for (uint32_t t = 1; t <= l.tok_cap; ++t)
      sparse = std::max(sparse, cuda::plan_sparse_mla(int32_t(t), int32_t(shape_.q_heads),
                                                      int32_t(shape_.head_dim),
                                                      int32_t(shape_.index_topk), num_sms_)
                                    .workspace_bytes);
    if (sparse) sparse_ws_.get(sparse, "allocating sparse MLA's workspace");
  }
}

// The most workspace any step within the bounds asks for: decode splits of any layer's shape (kv
// heads dividing the q heads, head_dim at most the pool's widest) and window, or MLA's (pages:
// the widest latent; either tile). The plans are host arithmetic: trying every batch size is
// cheap and exact.
size_t CudaBackend::workspace_bound() const {
  const int32_t keys = int32_t(std::min<int64_t>(
      int64_t(shape_.max_blocks_per_seq) * shape_.block_size, int64_t(INT32_MAX)));
  const int32_t q_heads = int32_t(shape_.q_heads), head_dim = int32_t(shape_.head_dim);
  size_t ws = 0;
  for (uint32_t n = 1; n <= std::max<uint32_t>(shape_.max_num_seqs, 1); ++n) {
    cuda::BatchView b{};
    b.num_seqs = int32_t(n), b.num_tokens = int32_t(n), b.max_query_len = 1;
    b.max_context_len = std::max(keys, 1);
    if (shape_.mla() || shape_.index_topk) {
      const int32_t rank = int32_t(shape_.mla() ? shape_.kv_lora_rank : shape_.head_dim);
      for (int32_t width : {head_dim, 16})
        ws = std::max(
            ws,
            cuda::plan_mla(b, q_heads, rank, width, num_sms_, size_t(max_smem_)).workspace_bytes);
    }
    if (shape_.mla()) continue;
    for (int32_t kv = 1; kv <= int32_t(shape_.kv_heads); ++kv)
      if (q_heads % kv == 0)
        ws = std::max(ws, cuda::decode_workspace_bound(b, q_heads, kv, head_dim, num_sms_));
  }
  return ws;
}

// pkv's buffers (the batch's arrays, the workspaces, the copy pairs) are reused by later calls on
// the new stream: the work queued on the old one must be done with them first.
void CudaBackend::set_stream(void *stream) {
  cudaStream_t next = static_cast<cudaStream_t>(stream);
  if (next == stream_) return;
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  ++counters_.host_waits;
  check_cuda(cudaStreamSynchronize(stream_), "waiting for pkv's work on the previous stream");
  stream_ = next;
}

// One plan (copy_plan.h): waves of independent copies, each at most one launch per direction;
// all pairs uploaded at once from a pinned slot. No wait: the copies stay in order on the
// stream before the step's kernels; the host waits for them only before it touches host-tier
// memory itself (wait_host_tier).
void CudaBackend::copy_blocks(const int32_t *src, const int32_t *dst, const int32_t *kind,
                              uint32_t n) {
  const SplitCopies c = split_copies(src, dst, kind, n);
  CopyPlan plan;
  if (!plan_block_copies(c.src.data(), c.dst.data(), c.kind.data(), uint32_t(c.src.size()), &plan))
    fail(PKV_ERR_INTERNAL, "copy_blocks: a queued copy of an unknown kind");
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  bool touches_host = false;
  if (!c.state_src.empty()) {
    copy_states(c);
    for (int32_t k : c.state_kind) touches_host |= state_reads_host(k) || state_writes_host(k);
  }
  if (!plan.launches.empty()) {
    for (const CopyLaunch &l : plan.launches) {
      PKV_ASSERT(host_dev_ || l.direction == CopyDirection::device_to_device);
      touches_host |= l.direction != CopyDirection::device_to_device;
    }
    const cuda::KvPool pool{k_, v_, int32_t(shape_.num_layers), int64_t(shape_.layer_bytes()),
                            int64_t(shape_.block_bytes())};
    char *host = static_cast<char *>(host_dev_);
    const cuda::KvPool host_tier{host, host && v_ ? host + shape_.host_bytes.pool : nullptr,
                                 int32_t(shape_.num_layers), int64_t(shape_.host_bytes.layer),
                                 int64_t(shape_.block_bytes())};
    const size_t bytes = plan.pairs.size() * sizeof(int32_t);
    int32_t *pairs = static_cast<int32_t *>(pairs_buf_.get(bytes, "allocating block copies"));
    char *staged = pairs_staging_.acquire(bytes, "staging block copies");
    std::memcpy(staged, plan.pairs.data(), bytes);
    check_cuda(cudaMemcpyAsync(pairs, staged, bytes, cudaMemcpyHostToDevice, stream_),
               "uploading block copies");
    pairs_staging_.queued(stream_, "uploading block copies");
    for (const CopyLaunch &l : plan.launches) {
      const cuda::KvPool &from = l.direction == CopyDirection::host_to_device ? host_tier : pool;
      const cuda::KvPool &to = l.direction == CopyDirection::device_to_host ? host_tier : pool;
      check_cuda(cuda::launch_copy_tier_blocks(from, to, pairs + 2 * size_t(l.first_pair),
                                               int32_t(l.num_pairs), stream_),
                 "copy_blocks");
    }
  }
  if (touches_host) {
    check_cuda(cudaEventRecord(host_copies_, stream_), "copy_blocks");
    host_copies_pending_ = true;
  }
}

void CudaBackend::wait_host_tier() {
  if (!host_copies_pending_) return;
  const cudaError_t q = cudaEventQuery(host_copies_);
  if (q == cudaErrorNotReady) {
    ++counters_.host_waits;
    check_cuda(cudaEventSynchronize(host_copies_), "waiting for copies of the host tier");
  } else {
    check_cuda(q, "waiting for copies of the host tier");
  }
  host_copies_pending_ = false;
}

// Whole state slots, in order on the stream (a copy may read an earlier one's destination):
// device to device, or to and from the pinned host slots of swapped-out sequences.
void CudaBackend::copy_states(const SplitCopies &c) {
  for (size_t i = 0; i < c.state_src.size(); ++i) {
    const int32_t k = c.state_kind[i];
    const bool from_host = state_reads_host(k), to_host = state_writes_host(k);
    if (!from_host && !to_host && c.state_src[i] == c.state_dst[i]) continue;
    const cudaMemcpyKind dir = from_host ? cudaMemcpyHostToDevice
                               : to_host ? cudaMemcpyDeviceToHost
                                         : cudaMemcpyDeviceToDevice;
    check_cuda(
        cudaMemcpyAsync(state_slot(to_host, c.state_dst[i]), state_slot(from_host, c.state_src[i]),
                        shape_.state_slot_bytes, dir, stream_),
        "copying state slots");
  }
}

// Slot `slot` of the device's state slots, or of the host's.
char *CudaBackend::state_slot(bool host, int32_t slot) const {
  PKV_ASSERT(slot >= 0 &&
             uint32_t(slot) < (host ? shape_.num_host_state_slots : shape_.num_state_slots));
  return static_cast<char *>(host ? host_state_ : state_) +
         uint64_t(slot) * shape_.state_slot_bytes;
}

// Synchronous by contract (the store's payload is host memory the caller reads next): a host
// wait, counted.
void CudaBackend::read_block(int32_t block, void *dst) {
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
  ++counters_.host_waits;
  check_cuda(cudaStreamSynchronize(stream_), "reading a block for the store");
}

void CudaBackend::read_state(int32_t slot, void *dst) {
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  check_cuda(cudaMemcpyAsync(dst, state_slot(false, slot), shape_.state_slot_bytes,
                             cudaMemcpyDeviceToHost, stream_),
             "reading a state slot for the store");
  ++counters_.host_waits;
  check_cuda(cudaStreamSynchronize(stream_), "reading a state slot for the store");
}

// The step's arrays (step_arrays.h) into the device buffer, from the next pinned staging slot,
// with no wait. Eager (bucket 0): packed, one copy. Graph: padded to the bucket, the grids sized
// by the bucket and the engine's longest sequence (max_blocks_per_seq), so a captured layer's
// launches read the same addresses and run the same grids after every plan of that bucket. The
// workspace was sized at create for both; a step past the bounds grows it here (counted).
void CudaBackend::plan_step(const pkv_batch_view &v, uint32_t bucket) {
  const uint32_t seqs = bucket ? bucket : v.num_seqs;
  PKV_REQUIRE(seqs <= PKV_CUDA_MAX_GRID, "a CUDA batch holds at most %d sequences, not %u",
              PKV_CUDA_MAX_GRID, seqs);
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  const StepLayout l = step_layout(v, bucket, shape_.max_blocks_per_seq);
  PKV_ASSERT(l.groups == 1 || (v.group_slot_mapping && v.group_block_tables));
  PKV_ASSERT(!bucket || (v.num_tokens == v.num_seqs && v.num_seqs <= bucket));
  for (uint32_t i = 0; bucket && i < v.num_seqs; ++i)  // windowed groups alone: no length bound
    if (uint32_t(v.block_indptr[i + 1] - v.block_indptr[i]) > shape_.max_blocks_per_seq)
      fail(PKV_ERR_UNSUPPORTED,
           "pkv_batch_plan_graph: sequence %u of the batch has %d blocks, more than the %u a "
           "graph step has room for (max_model_len / block_size, or num_blocks without it); "
           "create the engine with max_model_len, or run this step without a graph",
           i, v.block_indptr[i + 1] - v.block_indptr[i], shape_.max_blocks_per_seq);
  // Within the bounds the buffer of create; an eager step past them the overflow buffer. A
  // graph step never moves: past the bounds it is refused, before anything is queued.
  if (bucket && l.bytes() > batch_buf_.size())
    fail(PKV_ERR_UNSUPPORTED,
         "pkv_batch_plan_graph: a bucket of %u sequences of up to %u blocks needs %zu bytes of "
         "step arrays on the device, past the %zu made at create (block tables are capped at 64 "
         "MiB a KV group); plan a smaller bucket, or create the engine with a smaller "
         "max_model_len",
         bucket, shape_.max_blocks_per_seq, l.bytes(), batch_buf_.size());
  char *d =
      static_cast<char *>(l.bytes() <= batch_buf_.size()
                              ? batch_buf_.ptr()
                              : batch_overflow_.get(l.bytes(), "allocating the step's arrays"));
  char *h = batch_staging_.acquire(l.bytes(), "staging the step's arrays");
  for (const StepRange &r : pack_step(v, l, h))
    check_cuda(
        cudaMemcpyAsync(d + r.offset, h + r.offset, r.bytes, cudaMemcpyHostToDevice, stream_),
        "uploading the batch");
  batch_staging_.queued(stream_, "uploading the batch");
  const int64_t *d_slots = reinterpret_cast<const int64_t *>(d);
  const int32_t *di = reinterpret_cast<const int32_t *>(d + l.ints_offset());
  const int32_t keys =
      int32_t(std::min<int64_t>(int64_t(shape_.max_blocks_per_seq) * shape_.block_size, INT32_MAX));
  groups_.clear();
  for (size_t g = 0; g < l.groups; ++g)
    groups_.push_back(StepGroup{
        d_slots + g * l.tok_cap,
        cuda::BatchView{int32_t(l.seq_cap), int32_t(l.tok_cap),
                        bucket ? 1 : int32_t(v.max_query_len),
                        bucket ? std::max(keys, 1) : int32_t(v.max_context_len), di,
                        di + l.context_lens_at(), di + l.indptr_at(), di + l.indices_at(g)}});
  graph_step_ = bucket != 0;
  decode_plans_.clear();
  mla_planned_ = false;
  if (shape_.mla()) {
    PKV_ASSERT(l.groups == 1);
    mla_plan_ =
        cuda::plan_mla(groups_[0].batch, int32_t(shape_.q_heads), int32_t(shape_.kv_lora_rank),
                       int32_t(shape_.head_dim), num_sms_, size_t(max_smem_));
    mla_ws_ = workspace(mla_plan_.workspace_bytes);
  }
}

// Workspace of `bytes` for a step's launches: the buffer made at create for the bounds, which
// never moves (a captured graph's launches keep reading it); past the bounds (an eager step only)
// the overflow buffer, grown here (counted; cudaFree waits for the launches that used it).
void *CudaBackend::workspace(size_t bytes) {
  if (bytes <= workspace_.size()) return workspace_.ptr();
  if (graph_step_)
    fail(PKV_ERR_INTERNAL, "a graph step's workspace (%zu bytes) is past the bound of create (%zu)",
         bytes, workspace_.size());
  return workspace_overflow_.get(bytes, "allocating the attention workspace");
}

const CudaBackend::StepGroup &CudaBackend::step_group(uint32_t group) const {
  PKV_ASSERT(group < groups_.size());
  return groups_[group];
}

void CudaBackend::attention(const AttentionCall &call) {
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
  const StepPlan &plan = decode_plan(g.batch, layer, q_heads);
  check_cuda(cuda::launch_decode_attention(layer, g.batch, call.q, call.out, q_heads, call.scale,
                                           plan.plan, plan.ws, stream_),
             "decode attention");
  if (g.batch.max_query_len > 1)
    check_cuda(cuda::launch_prefill_attention(layer, g.batch, call.q, call.out, q_heads, call.scale,
                                              stream_),
               "prefill attention");
}

// The kernels' view of the call's layer (kernels/kv_types.cuh): its own heads and widths, where
// its K and V blocks are (v null when V is K: the same bytes), its window or chunk, soft-cap,
// and sinks and fp8 scales on the device (uploaded at the layer's first call).
cuda::KvLayer CudaBackend::kv_layer(const AttentionCall &call) {
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
  if (call.sinks) {
    if (!sinks_.reserved()) {  // a shape that said no sinks (PoolShape::sinks): made now
      ++counters_.allocs;
      check_cuda(sinks_.reserve(shape_.model_layers, shape_.q_heads), "allocating sinks");
    }
    check_cuda(sinks_.row(call.layer, &call.sinks, 1, stream_, &layer.sinks),
               "uploading attention sinks");
  }
  if (cuda::is_fp8(layer.kv_dtype)) {
    // The table's row is [K][V] of the pool's kv heads (the engine's scales have as many).
    const float *parts[2] = {call.k_scale, call.v_scale};
    const float *scales = nullptr;
    check_cuda(scales_.row(call.layer, parts, 2, stream_, &scales), "uploading fp8 scales");
    layer.k_scale = scales, layer.v_scale = scales + shape_.kv_heads;
  }
  return layer;
}

// The step's decode split for layers of this span (window or chunk) and shape, made once per
// step and kind. A graph step's batch is the bucket's with the engine's longest context, so
// its plans are the same at every plan of the bucket. The workspace was sized at create for
// every shape within the bounds (workspace()).
const CudaBackend::StepPlan &CudaBackend::decode_plan(const cuda::BatchView &batch,
                                                      const cuda::KvLayer &layer, int32_t q_heads) {
  const int32_t span = layer.chunk ? layer.chunk : layer.window;
  for (const StepPlan &p : decode_plans_)
    if (p.span == span && p.kv_heads == layer.kv_heads && p.plan.head_dim == layer.head_dim &&
        p.plan.q_heads == q_heads)
      return p;
  const cuda::DecodePlan plan =
      cuda::plan_decode(batch, q_heads, layer.kv_heads, layer.head_dim, span, num_sms_);
  decode_plans_.push_back({span, layer.kv_heads, plan, workspace(plan.workspace_bytes)});
  return decode_plans_.back();
}

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
