// BlockManager's checkpoints of the recurrent state (block_manager.h, DESIGN.md §13): where a
// sequence wants one, the capture at a boundary, and their eviction. Admission's hit rule is in
// block_manager_admit.cpp.
#include <algorithm>

#include "block_manager.h"
#include "status.h"

namespace pkv {

void BlockManager::enable_state(int32_t first_slot, uint32_t count, uint32_t policy,
                                uint32_t interval, int32_t host_first, uint32_t host_count) {
  PKV_ASSERT(!has_state_ && tree_.num_nodes() == 0);
  has_state_ = true;
  // The anchor: a full group's node exists for every block of a hit; any group holding blocks
  // has one for block h-1 of a hit of h (its window always reaches the block before h).
  anchor_ = num_groups();
  for (uint32_t g = 0; g < num_groups() && anchor_ == num_groups(); ++g)
    if (kinds_[g].kind == BlockKind::kFull) anchor_ = g;
  for (uint32_t g = 0; g < num_groups() && anchor_ == num_groups(); ++g)
    if (holds_blocks(g)) anchor_ = g;
  PKV_ASSERT(anchor_ < num_groups());  // an all-STATE model is refused at create
  if (!prefix_caching_ || policy == PKV_STATE_CHECKPOINT_NONE || count == 0) {
    serves_hits_ = false;  // a hit without the state at its boundary would be wrong
    return;
  }
  checkpoint_interval_ = policy == PKV_STATE_CHECKPOINT_EVERY ? interval : 0;
  checkpoints_ = StateCheckpoints(first_slot, count);
  if (host_count) host_checkpoints_ = StateCheckpoints(host_first, host_count);
  tree_.on_state_orphaned([this](uint32_t node) {
    drop_checkpoint(node);
    stats_.num_state_checkpoint_evictions++;
  });
}

bool BlockManager::wants_checkpoint(uint32_t b, uint32_t end, uint32_t branch) const {
  if (!checkpoints_.enabled() || b == 0) return false;
  return b == end || b == branch || (checkpoint_interval_ && b % checkpoint_interval_ == 0);
}

uint64_t BlockManager::next_checkpoint(uint32_t computed, uint32_t end, uint32_t branch) const {
  if (!checkpoints_.enabled()) return UINT64_MAX;
  const uint64_t now = computed / block_size_;  // boundaries up to now are behind
  uint64_t b = UINT64_MAX;
  if (end > now) b = end;
  if (branch > now) b = std::min<uint64_t>(b, branch);
  if (checkpoint_interval_)
    b = std::min(b, (now / checkpoint_interval_ + 1) * checkpoint_interval_);
  return b == UINT64_MAX ? b : b * block_size_;
}

BlockManager::Capture BlockManager::capture(const SeqTables &tables, uint32_t b) {
  PKV_ASSERT(checkpoints_.enabled() && b >= 1 && tables.size() == num_groups());
  const BlockTable &t = tables[anchor_];
  PKV_ASSERT(t.num_sealed >= b && t.ids[b - 1] >= 0);
  const uint32_t node = pool_.node(t.ids[b - 1]);
  PKV_ASSERT(node != kNoNode);
  Capture c;
  const int32_t held = tree_.state(node);
  if (held != kNoCheckpoint && !is_host_checkpoint(held)) {
    checkpoints_.touch(held);
    return c;
  }
  // An offloaded checkpoint of this boundary is as exact as a new one, but the new one is on the
  // device, where the next hit restores it without a host copy: it replaces the host one.
  if (held != kNoCheckpoint) drop_checkpoint(node);
  c.slot = checkpoints_.free_slot();
  if (c.slot == StateCheckpoints::kNone) {
    c.slot = checkpoints_.oldest();
    c.offload_to = offload_checkpoint(checkpoints_.node(c.slot), c.slot);
  }
  tree_.set_state(node, c.slot);
  checkpoints_.hold(c.slot, node);
  stats_.num_state_checkpoints_taken++;
  checkpoint_event(node, true, PKV_TIER_DEVICE);
  return c;
}

int32_t BlockManager::offload_checkpoint(uint32_t node, int32_t slot) {
  PKV_ASSERT(tree_.state(node) == slot);
  if (!host_checkpoints_.enabled()) {
    drop_checkpoint(node);
    stats_.num_state_checkpoint_evictions++;
    return -1;
  }
  int32_t host = host_checkpoints_.free_slot();
  if (host == StateCheckpoints::kNone) {
    host = host_checkpoints_.oldest();
    drop_checkpoint(host_checkpoints_.node(host));
    stats_.num_state_checkpoint_evictions++;
  }
  checkpoint_event(node, false, PKV_TIER_DEVICE);
  tree_.clear_state(node);
  checkpoints_.release(slot);
  tree_.set_state(node, host_checkpoint_ref(host));
  host_checkpoints_.hold(host, node);
  stats_.num_state_checkpoints_offloaded++;
  checkpoint_event(node, true, PKV_TIER_HOST);
  return host;
}

void BlockManager::drop_checkpoint(uint32_t node) {
  const int32_t ref = tree_.state(node);
  const bool host = is_host_checkpoint(ref);
  checkpoint_event(node, false, host ? PKV_TIER_HOST : PKV_TIER_DEVICE);
  tree_.clear_state(node);
  (host ? host_checkpoints_ : checkpoints_).release(checkpoint_slot(ref));
}

std::pair<uint64_t, uint64_t> BlockManager::anchor_hashes(const SeqTables &tables,
                                                          uint32_t b) const {
  const BlockTable &t = tables[anchor_];
  PKV_ASSERT(b >= 1 && t.num_sealed >= b && t.ids[b - 1] >= 0);
  const uint32_t node = pool_.node(t.ids[b - 1]);
  PKV_ASSERT(node != kNoNode);
  return {tree_.hash(node), tree_.hash(tree_.parent(node))};
}

// A checkpoint stored or removed is an event of the state's group (numbered after the KV groups),
// in the tier that holds it, named by its node's hash: a router learns which prefixes can restore
// a state.
void BlockManager::checkpoint_event(uint32_t node, bool stored, int32_t tier) const {
  if (!events_) return;
  const uint32_t parent = tree_.parent(node);
  if (stored)
    events_->stored(tree_.hash(node), tree_.hash(parent), tree_.is_root(parent), tree_.tokens(node),
                    tier, num_groups(), tree_.lora_id(node), tree_.extra(node));
  else
    events_->removed(tree_.hash(node), tree_.hash(parent), tier, num_groups(), tree_.lora_id(node),
                     count_block_extra(tree_.extra(node)));
}

void BlockManager::check_checkpoints() const {
  if (!checkpoints_.enabled()) return;
  checkpoints_.check();
  if (host_checkpoints_.enabled()) host_checkpoints_.check();
  uint32_t held = 0, host_held = 0;
  for (uint32_t n = 0; n < tree_.capacity(); ++n) {
    if (!tree_.is_live(n) || tree_.state(n) == kNoCheckpoint) continue;
    const int32_t ref = tree_.state(n), slot = checkpoint_slot(ref);
    const bool host = is_host_checkpoint(ref);
    const StateCheckpoints &tier = host ? host_checkpoints_ : checkpoints_;
    if (!tier.owns(slot) || tier.node(slot) != n || tree_.group(n) != anchor_)
      fail(PKV_ERR_INTERNAL, "prefix node %u names %s checkpoint slot %d, which it does not hold",
           n, host ? "host" : "device", slot);
    (host ? host_held : held)++;
  }
  if (held != checkpoints_.num_held() || host_held != host_checkpoints_.num_held())
    fail(PKV_ERR_INTERNAL,
         "%u prefix nodes hold device checkpoints and %u host ones; %u and %u slots are held", held,
         host_held, checkpoints_.num_held(), host_checkpoints_.num_held());
}

void BlockManager::forgo_restore() {
  if (last_checkpoint_ == kNoCheckpoint) return;
  stats_.num_state_restores--;
  stats_.num_state_restores_from_host -= is_host_checkpoint(last_checkpoint_);
  last_checkpoint_ = kNoCheckpoint;
}

}  // namespace pkv
