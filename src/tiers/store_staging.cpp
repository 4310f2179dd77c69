// BlockManager's store staging (block_manager.h, DESIGN.md §11): blocks fetched from the store
// tier enter the prefix tree as nodes held in the host tier. It lives beside the store it serves
// and belongs to the block manager's layer (tests/layers/check_layers.py).
#include "block_hash.h"
#include "block_manager.h"
#include "status.h"

namespace pkv {

uint32_t BlockManager::stage_from_store(const PrefixKeys &keys, const int32_t *tokens,
                                        uint32_t group, uint32_t from, uint32_t n,
                                        std::unordered_set<int32_t> *keep,
                                        std::vector<int32_t> *host_out) {
  host_out->clear();
  if (!prefix_caching_ || host_.num_blocks() == 0 || n == 0 || !holds_blocks(group)) return 0;
  const bool windowed = kinds_[group].rules().gives_back;
  const uint32_t end = from + n;
  // The path's hashes and extra bytes (they need no tree), then a walk that counts the blocks to
  // stage. Host blocks that may not take new contents now: those a queued copy reads or writes
  // (their bytes are not yet what the queue says they will be), those on the path, and keep.
  std::vector<uint64_t> hashes(end);
  std::vector<std::string> extras(end);
  const uint64_t root = root_hash(seed_, keys.salt.data(), keys.salt.size(), keys.lora_id);
  uint64_t h = root;
  for (uint32_t j = 0; j < end; ++j) {
    extras[j] = keys.block_extra(j * block_size_, block_size_);
    h = block_hash(seed_, h, tokens + size_t(j) * block_size_, block_size_, extras[j].data(),
                   extras[j].size());
    hashes[j] = h;
  }
  auto holds_kv = [&](uint32_t node) {
    return node != kNoNode && (!tree_.copies(node).empty() || tree_.host(node) >= 0);
  };
  std::unordered_set<int32_t> busy(keep->begin(), keep->end());
  for (const BlockCopy &c : pending_copies_) {
    if (copy_reads_host(c.kind)) busy.insert(c.src);
    if (copy_writes_host(c.kind)) busy.insert(c.dst);
  }
  uint32_t need = 0;
  uint32_t node = tree_.find_root(keys, group);
  for (uint32_t j = 0; j < end; ++j) {
    const uint32_t child =
        node != kNoNode
            ? tree_.find_child(node, hashes[j], tokens + size_t(j) * block_size_, extras[j])
            : kNoNode;
    if (child != kNoNode && tree_.host(child) >= 0) busy.insert(tree_.host(child));
    if (j < from && !windowed && !holds_kv(child)) return 0;  // the hit cannot reach from
    if (j >= from) need += !holds_kv(child);
    node = child;
  }
  // The host blocks first: their evictions may remove nodes (a node left with no KV and no
  // child), so the path is walked again after them, and no eviction happens during that walk.
  std::vector<int32_t> held;  // taken (ref 1) until the end
  held.reserve(need);
  while (held.size() < need) {
    int32_t host = -1;
    host_.for_each_free([&](int32_t b) {
      if (busy.count(b)) return true;
      host = b;
      return false;
    });
    if (host < 0) break;
    if (host_.node(host) != kNoNode) evict_host(host);
    host_.take(host);
    held.push_back(host);
    busy.insert(host);
  }
  host_out->reserve(n);
  size_t used = 0;
  uint32_t parent = tree_.find_root(keys, group);
  uint32_t missing = parent == kNoNode ? 0 : UINT32_MAX;  // the first block without a node
  uint32_t done = 0;
  for (uint32_t j = 0; j < end; ++j) {
    const int32_t *block_tokens = tokens + size_t(j) * block_size_;
    uint32_t child = missing == UINT32_MAX
                         ? tree_.find_child(parent, hashes[j], block_tokens, extras[j])
                         : kNoNode;
    if (j < from) {
      if (child == kNoNode && missing == UINT32_MAX) missing = j;
      parent = child;
      continue;
    }
    if (holds_kv(child)) {
      host_out->push_back(-1);  // held here already
      parent = child;
      done++;
      continue;
    }
    if (used == held.size()) break;  // no room left: the hit stops here
    // Nodes before it that are missing (a window's blocks given back and evicted) are made now,
    // without KV: the staged child keeps them.
    if (missing != UINT32_MAX) {
      parent = tree_.get_or_add_root(keys, group);
      for (uint32_t i = 0; i < missing; ++i)
        parent = tree_.find_child(parent, hashes[i], tokens + size_t(i) * block_size_, extras[i]);
      for (uint32_t i = missing; i < j; ++i)
        parent = tree_.add_child(parent, hashes[i], tokens + size_t(i) * block_size_, extras[i]);
      missing = UINT32_MAX;
    }
    if (child == kNoNode) child = tree_.add_child(parent, hashes[j], block_tokens, extras[j]);
    const int32_t host = held[used++];
    host_.set_node(host, child);
    tree_.set_host(child, host);
    keep->insert(host);
    host_from_store_[host] = 1;
    staged_from_store_ = true;
    if (events_)
      events_->stored(hashes[j], j ? hashes[j - 1] : root, j == 0, block_tokens, PKV_TIER_STORE,
                      group, keys.lora_id, extras[j]);
    host_out->push_back(host);
    parent = child;
    done++;
  }
  for (size_t i = 0; i < held.size(); ++i) host_.drop_ref(held[i]);  // cached: the newest
  return done;
}

int32_t BlockManager::stage_checkpoint(const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                                       uint32_t h, const std::function<bool(int32_t)> &busy) {
  if (!host_checkpoints_.enabled() || h == 0 || h > max_hits(n)) return -1;
  std::vector<uint32_t> nodes;
  std::vector<int32_t> picks;
  walk(anchor_, keys, tokens, h, &nodes, &picks);
  if (nodes.size() < h) return -1;  // its KV went meanwhile (an async fetch's staging)
  const uint32_t node = nodes[h - 1];
  if (tree_.state(node) != kNoCheckpoint) return -1;  // one came meanwhile
  int32_t slot = host_checkpoints_.free_slot();
  if (slot == StateCheckpoints::kNone) slot = host_checkpoints_.oldest();
  if (busy(slot)) return -1;
  if (host_checkpoints_.node(slot) != kNoNode) {
    drop_checkpoint(host_checkpoints_.node(slot));
    stats_.num_state_checkpoint_evictions++;
  }
  tree_.set_state(node, host_checkpoint_ref(slot));
  host_checkpoints_.hold(slot, node);
  checkpoint_event(node, true, PKV_TIER_STORE);
  return slot;
}

}  // namespace pkv
