// Engine's sparse attention (DESIGN.md §14): DeepSeek V3.2 / GLM-5's indexer on an MLA layer.
// pkv_indexer_write quantizes the new tokens' indexer keys into their pages, pkv_indexer_topk
// scores each new token's context with them and keeps its top keys, pkv_sparse_mla_attention
// runs MLA over those keys only. Each is a call of the open batch, as pkv_attention is.
#include "engine.h"
#include "status.h"

namespace pkv {

LayerSpec Engine::indexed_layer(uint32_t layer, const char *call) const {
  PKV_REQUIRE(layer < params_.num_layers, "layer %u of %u", layer, params_.num_layers);
  const LayerSpec s = layer_spec(layer);
  PKV_REQUIRE(s.indexed(),
              "%s: layer %u has no indexer (its pkv_layer_spec.index_head_dim is 0; only an MLA "
              "layer of a sparse-attention model has one)",
              call, layer);
  if (s.index_dim % PKV_ATTENTION_HEAD_DIM_ALIGN || s.index_dim > PKV_INDEXER_MAX_HEAD_DIM)
    fail(PKV_ERR_UNSUPPORTED,
         "%s supports index_head_dim multiples of %d up to %d, not %u (pkv_layer_info says where "
         "the keys are, for the host's kernels)",
         call, PKV_ATTENTION_HEAD_DIM_ALIGN, PKV_INDEXER_MAX_HEAD_DIM, s.index_dim);
  return s;
}

void Engine::prepare_step(uint32_t rank) {
  PKV_ASSERT(open_);
  do_copies();  // before any write of the step, for every layer (and rank) at once
  if (!open_->planned[rank]) {
    pools_[rank].backend->plan(open_->batch->view());
    open_->planned[rank] = 1;
  }
}

IndexerCall Engine::indexer_call(uint32_t layer, const LayerSpec &s, uint32_t rank) const {
  const RankPool &rp = stage_rank(rank, layer);
  IndexerCall c;
  c.layer = layer;
  c.group = rp.groups.layer_group(layer);
  c.dim = s.index_dim;
  c.index_dtype = int32_t(s.index_dtype);
  c.heads = s.index_heads;
  c.topk = s.index_topk;
  const LayerPlace at = layer_place(rp.layout, rp.groups, s, params_.block_size);
  c.key_offset = at.index_offset;
  c.scale_offset = at.index_scale_offset;
  c.block_stride = at.block_stride;
  return c;
}

void Engine::indexer_write(uint32_t layer, const void *k, uint32_t flags) {
  const LayerSpec s = indexed_layer(layer, "pkv_indexer_write");
  PKV_REQUIRE(k != nullptr, "k (the new tokens' indexer keys) must not be NULL");
  PKV_REQUIRE((flags & ~uint32_t(PKV_INDEXER_SCALE_UE8M0)) == 0,
              "flags 0x%x: only PKV_INDEXER_SCALE_UE8M0 (1)", flags);
  const uint32_t rank = compute_rank("pkv_indexer_write");
  IndexerCall c = indexer_call(layer, s, rank);
  c.k = k;
  c.ue8m0 = flags & PKV_INDEXER_SCALE_UE8M0;
  prepare_step(rank);
  pools_[rank].backend->indexer_write(c);
}

void Engine::indexer_topk(uint32_t layer, const void *q, const float *weights, uint32_t out_kind,
                          int32_t *out) {
  const LayerSpec s = indexed_layer(layer, "pkv_indexer_topk");
  PKV_REQUIRE(q && weights && out, "q, weights and out must not be NULL");
  PKV_REQUIRE(out_kind == PKV_TOPK_POSITIONS || out_kind == PKV_TOPK_SLOTS,
              "out_kind %u is not PKV_TOPK_POSITIONS (0) or PKV_TOPK_SLOTS (1)", out_kind);
  const uint32_t rank = compute_rank("pkv_indexer_topk");
  IndexerCall c = indexer_call(layer, s, rank);
  c.q = q;
  c.weights = weights;
  c.out = out;
  c.slots = out_kind == PKV_TOPK_SLOTS;
  prepare_step(rank);
  pools_[rank].backend->indexer_topk(c);
}

void Engine::sparse_attention(uint32_t layer, const void *q, const void *k, const int32_t *indices,
                              void *out) {
  const LayerSpec s = indexed_layer(layer, "pkv_sparse_mla_attention");
  check_attention(layer, s, q, k, nullptr, out);
  PKV_REQUIRE(indices != nullptr,
              "indices (pkv_indexer_topk's positions, [num_tokens][index_topk]) must not be NULL");
  const uint32_t rank = compute_rank("pkv_sparse_mla_attention");
  AttentionCall call = attention_call(layer, s, rank);  // refuses another stage's layer
  prepare_step(rank);
  call.q = q, call.k = k, call.out = out;
  call.indices = indices;
  call.topk = s.index_topk;
  pools_[rank].backend->attention(call);
}

}  // namespace pkv
