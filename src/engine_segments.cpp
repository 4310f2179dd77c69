// Engine's block descriptors (DESIGN.md §10): where a block's KV is, as (base, bytes) segments a
// transport moves (NIXL, Mooncake, UCX: the host registers the pools once), and the layout
// fingerprint two engines compare before they move blocks between them.
#include <cstring>

#include "engine.h"
#include "status.h"
#include "tiers/store_format.h"

namespace pkv {

std::vector<pkv_segment> Engine::block_segments(uint32_t rank, uint32_t tier, const int32_t *blocks,
                                                uint32_t n) const {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  PKV_REQUIRE(blocks != nullptr || n == 0, "blocks is NULL with num_blocks %u", n);
  PKV_REQUIRE(tier == PKV_TIER_DEVICE || tier == PKV_TIER_HOST,
              "tier %u is not PKV_TIER_DEVICE (1) or PKV_TIER_HOST (2)", tier);
  const RankPool &rp = pools_[rank];
  const PoolShape shape = pool_shape(rp);
  const bool host = tier == PKV_TIER_HOST;
  const uint32_t num_blocks = host ? params_.host_num_blocks : params_.num_blocks;
  PKV_REQUIRE(!host || num_blocks > 0, "tier HOST: this engine has no host tier");
  char *k = static_cast<char *>(host ? rp.backend->host_k_pool() : rp.backend->k_pool());
  char *v = static_cast<char *>(host ? rp.backend->host_v_pool() : rp.backend->v_pool());
  const uint64_t layer_bytes = host ? shape.host_bytes.layer : shape.bytes.layer;
  const uint64_t bb = shape.bytes.block;
  std::vector<pkv_segment> out;
  out.reserve(size_t(n) * shape.num_layers * shape.tensors);
  for (uint32_t i = 0; i < n; ++i) {
    const int32_t b = blocks[i];
    PKV_REQUIRE(b >= 0 && uint32_t(b) < num_blocks, "blocks[%u] is %d: the %s has %u blocks", i, b,
                host ? "host tier" : "pool", num_blocks);
    for (uint32_t l = 0; l < shape.num_layers; ++l) {
      const uint64_t at = l * layer_bytes + uint64_t(b) * bb;
      out.push_back(pkv_segment{k + at, bb});
      if (shape.tensors == 2) out.push_back(pkv_segment{v + at, bb});
    }
  }
  return out;
}

std::vector<pkv_segment> Engine::seq_segments(uint32_t rank, uint64_t id, uint32_t first,
                                              uint32_t n) const {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  const Sequence &s = seq(id);
  if (!s.holds_kv() || s.tables.empty())
    fail(PKV_ERR_STATE, "sequence %llu is %s: it holds no blocks of the pool",
         (unsigned long long)id, state_name(s.state));
  const uint32_t held = static_cast<uint32_t>(s.tables[0].ids.size());
  PKV_REQUIRE(uint64_t(first) + n <= held,
              "blocks %u .. %llu of sequence %llu: it has %u blocks (pkv_seq_info.num_blocks)",
              first, (unsigned long long)first + n - 1, (unsigned long long)id, held);
  const PoolShape shape = pool_shape(pools_[rank]);
  const size_t per_block = size_t(shape.num_layers) * shape.tensors;
  std::vector<pkv_segment> out;
  out.reserve(size_t(n) * s.tables.size() * per_block);
  for (uint32_t i = first; i < first + n; ++i)
    for (const BlockTable &t : s.tables) {
      const int32_t b = i < t.ids.size() ? t.ids[i] : -1;
      if (b < 0) {  // given back by a window: held places, no bytes
        out.insert(out.end(), per_block, pkv_segment{nullptr, 0});
        continue;
      }
      const std::vector<pkv_segment> one = block_segments(rank, PKV_TIER_DEVICE, &b, 1);
      out.insert(out.end(), one.begin(), one.end());
    }
  return out;
}

std::array<uint8_t, 32> Engine::layout_fingerprint(uint32_t rank) const {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  const RankPool &rp = pools_[rank];
  const PoolShape shape = pool_shape(rp);
  // The store's fingerprint of this rank's pool (its shape, dtypes, scales, every layer's spec,
  // group and slot), with the ranks, the stage and the page: not the blocks' counts.
  std::vector<float> scales;
  const size_t row = size_t(params_.num_layers) * budget_.kv_heads_per_rank;
  if (!k_scales_.empty()) {
    scales.assign(k_scales_.begin() + rank * row, k_scales_.begin() + (rank + 1) * row);
    if (!v_scales_.empty())
      scales.insert(scales.end(), v_scales_.begin() + rank * row,
                    v_scales_.begin() + (rank + 1) * row);
  }
  LayerSpec indexer;
  for (const LayerSpec &s : specs_)
    if (s.indexed()) indexer = s;
  const std::string layout = store_layout(rp.params, specs_, rp.groups) +
                             "|segments:tp=" + std::to_string(params_.tp_size) +
                             ",pp=" + std::to_string(params_.pp_size) +
                             ",pp_rank=" + std::to_string(rp.params.pp_rank) +
                             ",layers=" + std::to_string(shape.num_layers) +
                             ",paged=" + std::to_string(shape.paged ? 1 : 0) +
                             ",window=" + std::to_string(params_.sliding_window) +
                             ",scale=" + std::to_string(softmax_scale_);
  const StoreFingerprint fp = store_fingerprint(StoreShape{
      shape.num_layers, shape.kv_heads, params_.head_dim, params_.block_size, rp.params.tp_rank,
      params_.tp_size, shape.kv_dtype, shape.block_bytes(), scales, shape.tensors,
      shape.kv_lora_rank, "", indexer.index_dim, indexer.index_dtype, layout});
  std::array<uint8_t, 32> out;
  std::memcpy(out.data(), fp.bytes, out.size());
  return out;
}

}  // namespace pkv
