// Engine's tiers below the pool and its events (engine.h): the store tier consulted before an
// admission, written through or back, and the KV events drained or published. The rest of
// Engine is in engine.cpp.
#include <algorithm>

#include "engine.h"
#include "status.h"

namespace pkv {

void Engine::consult_store(const PrefixKeys &keys, const int32_t *tokens, uint32_t n) {
  if (!store_ || n == 0) return;
  const BlockManager::Admission plan = blocks_.plan_admission(keys, tokens, n);
  const uint32_t max_hits = blocks_.max_hits(n);
  // The blocks past the KV the tree holds and, with STATE layers, a checkpoint past the one it
  // holds (where the hit stops), up to where that KV reaches.
  const uint32_t first = plan.kv_hits;
  const bool state = store_->has_state() && plan.num_hits < max_hits;
  // Nothing to ask, or an admission that will fail NO_SPACE either way (a store block takes a
  // pool block as a new one would): the store is not touched.
  if ((first >= max_hits && !state) || plan.num_free_needed > blocks_.num_free()) return;
  std::vector<GroupFetched> fetched;
  const uint32_t reach =
      store_->fetch_groups(store_lookup(blocks_, *store_, keys, tokens, n, plan), tokens, &fetched);
  stage_fetched(blocks_, *store_, keys, tokens, n, fetched);
  if (state && reach > plan.num_hits) {
    StoreChain chain;  // a checkpoint's key is group 0's block key (write_checkpoint)
    store_->keys(keys, tokens, reach, &chain);
    std::vector<uint8_t> value;
    const uint32_t h = store_->fetch_state(chain, tokens, plan.num_hits + 1, reach, &value);
    if (h) stage_fetched_state(blocks_, states_, *store_, keys, tokens, n, h, value);
  }
}

void Engine::enable_store_state() {
  // The fingerprint's layout: every STATE layer's parts, by layer, dtype and shape (a host that
  // changes a part's dtype or shape keeps no checkpoint of the other layout).
  std::string layout;
  for (size_t l = 0; l < specs_.size(); ++l)
    for (const StatePart &part : specs_[l].state) {
      if (!part.bytes) continue;
      layout += std::to_string(l) + ":" + std::to_string(part.dtype);
      for (uint32_t d : part.shape) layout += "," + std::to_string(d);
      layout += ";";
    }
  store_->enable_state(state_layout_.slot_bytes, layout,
                       static_cast<char *>(backend_->host_state_pool()));
}

void Engine::write_checkpoint(const Sequence &s, uint32_t b) {
  // The working slot holds the state after exactly b blocks until the next step writes it.
  std::vector<uint8_t> state(state_layout_.slot_bytes);
  backend_->read_state(s.state_slot, state.data());
  StoreChain chain;
  store_->keys(s.keys, s.tokens.data(), b, &chain);
  const uint32_t bs = params_.block_size;
  const int32_t *block_tokens = s.tokens.data() + size_t(b - 1) * bs;
  const std::pair<uint64_t, uint64_t> hashes = blocks_.anchor_hashes(s.tables, b);
  store_->write_state(
      chain, s.tokens.data(), b, state.data(),
      StoreWritten{hashes.first, hashes.second, b == 1,
                   std::vector<int32_t>(block_tokens, block_tokens + bs), s.keys.lora_id,
                   s.keys.block_extra((b - 1) * bs, bs), groups_.num_groups()});
}

void Engine::write_sealed(const Sequence &s) {
  const std::vector<SealedBlock> sealed = blocks_.take_sealed();
  if (sealed.empty()) return;
  uint32_t last = 0;
  for (const SealedBlock &b : sealed) last = std::max(last, b.index);
  std::vector<StoreChain> chains(groups_.num_groups());  // each group's that sealed a block
  const StoreShape &shape = store_->shape();
  const uint64_t offset = payload_offset(shape);
  for (const SealedBlock &b : sealed) {
    StoreChain &chain = chains[b.group];
    if (chain.keys.empty()) store_->keys(s.keys, s.tokens.data(), last + 1, &chain, b.group);
    std::vector<uint8_t> value(shape.value_bytes());
    // Every rank's slice, in rank order (DESIGN.md §10): each pool's layers, K then V.
    uint64_t at = offset;
    for (const RankPool &rp : pools_) {
      rp.backend->read_block(b.block, value.data() + at);
      at += uint64_t(pool_shape(rp).tensors) * rp.layout.num_layers * rp.layout.layer_block_bytes;
    }
    store_->encode(chain.keys[b.index + 1], chain.parents[b.index],
                   s.tokens.data() + size_t(b.index) * params_.block_size, value.data());
    const int32_t *block_tokens = s.tokens.data() + size_t(b.index) * params_.block_size;
    store_->write(
        chain.keys[b.index + 1], std::move(value),
        StoreWritten{
            b.hash, b.parent_hash, b.index == 0,
            std::vector<int32_t>(block_tokens, block_tokens + params_.block_size), s.keys.lora_id,
            s.keys.block_extra(b.index * params_.block_size, params_.block_size), b.group});
  }
}

void Engine::write_back(const EvictedHostBlock &b, bool wait) {
  // The host tier's copy, read now (host memory): its block is reused right after this call.
  const uint32_t bs = params_.block_size, index = static_cast<uint32_t>(b.tokens.size() / bs) - 1;
  StoreChain chain;
  store_->keys(*b.salt, b.lora_id, b.extras, b.tokens.data(), index + 1, &chain, b.group);
  const StoreShape &shape = store_->shape();
  std::vector<uint8_t> value(shape.value_bytes());
  store_->read_host(b.host, value.data());
  store_->encode(chain.keys[index + 1], chain.parents[index], b.tokens.data() + size_t(index) * bs,
                 value.data());
  const int32_t *block_tokens = b.tokens.data() + size_t(index) * bs;
  store_->write(chain.keys[index + 1], std::move(value),
                StoreWritten{b.hash, b.parent_hash, index == 0,
                             std::vector<int32_t>(block_tokens, block_tokens + bs), b.lora_id,
                             b.extras.empty() ? std::string() : b.extras[index], b.group},
                wait);
}

void Engine::note_store_events() {
  if (!store_) return;
  for (const StoreWritten &w : store_->take_written())
    events_.stored(w.hash, w.parent_hash, w.parent_is_root, w.tokens.data(), PKV_TIER_STORE,
                   w.group, w.lora_id, w.extra);
}

void Engine::publisher_info(struct pkv_event_publisher_info *out) const {
  if (!publisher_)
    fail(PKV_ERR_STATE, "this engine has no event publisher (pkv_engine_params.event_publisher)");
  publisher_->info(out);
}

size_t Engine::drain_events(void *out, size_t event_size, size_t cap) {
  note_store_events();
  return events_.drain(out, event_size, cap);
}

}  // namespace pkv
