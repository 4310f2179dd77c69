// The CUDA backend's MLA, sparse MLA and indexer launches (cuda_backend.h). An MLA pool
// (shape.mla()) holds one layer's latents per slot; a sparse-attention engine's MLA layers live in
// pages (DESIGN.md §14): the same kernels at the layer's offset, kernels/indexer.cu for the
// indexer keys beside the latents, kernels/sparse_mla.cu for attention over the selected keys.
// Their workspaces were sized at create for the engine's bounds; past them they grow (counted).
#include <cstdint>

#include "backend/cuda/cuda_backend.h"
#include "cache_ops.cuh"
#include "sparse_mla.cuh"
#include "status.h"

namespace pkv {
namespace {

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void CudaBackend::indexer_write(const IndexerCall &call) {
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
void CudaBackend::indexer_topk(const IndexerCall &call) {
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  for (const void *p :
       {call.q, static_cast<const void *>(call.weights), static_cast<const void *>(call.out)})
    PKV_REQUIRE(aligned16(p), "q, weights and out must be 16-byte aligned on CUDA");
  const cuda::IndexerLayer layer = indexer_layer(call);
  const StepGroup &g = step_group(call.group);
  const cuda::IndexerTopkPlan plan = cuda::plan_indexer_topk(g.batch, kIndexerWorkspace);
  void *ws = index_ws_.get(plan.workspace_bytes, "allocating the indexer's workspace");
  check_cuda(cuda::launch_indexer_topk(layer, g.batch, call.q, call.weights, int32_t(call.heads),
                                       int32_t(call.topk), call.slots, call.out, plan, ws, stream_),
             "indexer top-k");
}

// MLA: the latents of the new tokens into their slots (K alone), then attention over them:
// dense (every key), or sparse over call.indices (pkv_sparse_mla_attention). The MLA pool
// (shape_.mla()) holds one layer per slot; pages (a sparse-attention engine's) hold the layer
// at call.k_offset of each page.
void CudaBackend::mla_attention(const AttentionCall &call) {
  check_cuda(cudaSetDevice(device_id_), "cudaSetDevice");
  for (const void *p : {call.q, call.k, static_cast<const void *>(call.out),
                        static_cast<const void *>(call.indices)})
    PKV_REQUIRE(aligned16(p), call.indices ? "q, k, indices and out must be 16-byte aligned on CUDA"
                                           : "q, k and out must be 16-byte aligned on CUDA");
  PKV_REQUIRE(!call.v,
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
    void *ws = plan.workspace_bytes
                   ? sparse_ws_.get(plan.workspace_bytes, "allocating sparse MLA's workspace")
                   : nullptr;
    check_cuda(
        cuda::launch_sparse_mla(layer, rank, g.batch, call.q, call.indices, int32_t(call.topk),
                                call.out, int32_t(shape_.q_heads), call.scale, plan, ws, stream_),
        "sparse MLA attention");
    return;
  }
  const cuda::MlaPlan &plan = mla_plan(g.batch, layer.head_dim, rank);  // sets mla_ws_
  check_cuda(
      cuda::launch_mla_attention(layer, rank, g.batch, call.q, call.out, int32_t(shape_.q_heads),
                                 call.scale, plan, mla_ws_, stream_),
      "MLA attention");
}

// The kernels' view of an MLA layer's latents. Pages: the layer's offset and the page stride,
// refused (before anything is written) where the kernels' 16-byte loads would not be aligned.
cuda::KvLayer CudaBackend::mla_layer(const AttentionCall &call) {
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
  if (cuda::is_fp8(layer.kv_dtype)) {
    const float *parts[2] = {call.k_scale, call.k_scale};
    check_cuda(scales_.row(call.layer, parts, pages ? 2 : 1, stream_, &layer.k_scale),
               "uploading fp8 scales");
  }
  return layer;
}

// The step's MLA plan: made in plan_step() for the MLA pool, at the first MLA layer for pages
// (the workspace, sized at create for the bounds, grows here past them: counted).
const cuda::MlaPlan &CudaBackend::mla_plan(const cuda::BatchView &batch, int32_t width,
                                           int32_t rank) {
  if (shape_.mla() || mla_planned_) return mla_plan_;
  mla_plan_ =
      cuda::plan_mla(batch, int32_t(shape_.q_heads), rank, width, num_sms_, size_t(max_smem_));
  mla_planned_ = true;
  mla_ws_ = workspace(mla_plan_.workspace_bytes);
  return mla_plan_;
}

// The kernels' view of an indexer layer (pages at the call's offsets), refused where the
// offsets would misalign the kernels' loads (an odd block_size's fp8 scales, for one).
cuda::IndexerLayer CudaBackend::indexer_layer(const IndexerCall &call) const {
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

}  // namespace pkv
