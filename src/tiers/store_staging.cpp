// BlockManager's store staging (block_manager.h, DESIGN.md §11): blocks fetched from the store
// tier enter the prefix tree as nodes held in the host tier. It lives beside the store it serves
// and belongs to the block manager's layer (tests/layers/check_layers.py).
#include <unordered_set>

#include "block_hash.h"
#include "block_manager.h"
#include "status.h"

namespace pkv {

uint32_t BlockManager::stage_from_store(const PrefixKeys &keys, const int32_t *tokens,
                                        const Admission &plan, uint32_t fetched, uint32_t n,
                                        std::vector<int32_t> *host_out) {
  host_out->clear();
  if (!prefix_caching_ || host_.num_blocks() == 0 || n == 0) return 0;
  PKV_ASSERT(num_groups() == 1);  // the engine allows a store with one KV group only
  const std::vector<int32_t> &hit_blocks = plan.groups[0].blocks;
  const std::vector<uint32_t> &hit_nodes = plan.groups[0].nodes;
  const uint32_t first = plan.num_hits;
  // Host blocks that may not take new contents now: those a queued copy reads or writes (their
  // bytes are not yet what the queue says they will be), and the prompt's own host-tier hits.
  std::unordered_set<int32_t> busy;
  for (const BlockCopy &c : pending_copies_) {
    if (copy_reads_host(c.kind)) busy.insert(c.src);
    if (copy_writes_host(c.kind)) busy.insert(c.dst);
  }
  for (size_t i = 0; i < hit_blocks.size(); ++i)
    if (hit_blocks[i] < 0) busy.insert(tree_.host(hit_nodes[i]));
  host_out->reserve(n);
  std::vector<int32_t> held;  // host blocks taken, held (ref 1) until the end
  // The root is made only when a node is added under it: an empty one may not stay.
  uint32_t parent = first ? hit_nodes[first - 1] : tree_.find_root(keys);
  uint64_t parent_hash = parent != kNoNode
                             ? tree_.hash(parent)
                             : root_hash(seed_, keys.salt.data(), keys.salt.size(), keys.lora_id);
  uint32_t done = 0;
  for (; done < n; ++done) {
    const int32_t *block_tokens = tokens + size_t(first + done) * block_size_;
    const std::string extra = keys.block_extra((first + done) * block_size_, block_size_);
    const uint64_t hash =
        block_hash(seed_, parent_hash, block_tokens, block_size_, extra.data(), extra.size());
    uint32_t node =
        parent != kNoNode ? tree_.find_child(parent, hash, block_tokens, extra) : kNoNode;
    if (node != kNoNode && (!tree_.copies(node).empty() || tree_.host(node) >= 0)) {
      host_out->push_back(-1);  // held here already (past a node kept only by its children)
      if (tree_.host(node) >= 0) busy.insert(tree_.host(node));  // on the path: kept
      parent = node;
      parent_hash = hash;
      continue;
    }
    if (first + done < fetched) break;  // held by no tier, and not fetched: the hit stops here
    int32_t host = -1;
    host_.for_each_free([&](int32_t h) {
      if (busy.count(h)) return true;
      host = h;
      return false;
    });
    if (host < 0) break;
    if (host_.node(host) != kNoNode) {
      evict_host(host);
      // That may have removed nodes left with nothing: the node found (kept only by the subtree
      // just dropped) and, for the first block, the salt's root. Look them up again. (A later
      // block's parent holds a copy or a held host block, and is kept.)
      if (first + done == 0) parent = tree_.find_root(keys);
      node = parent != kNoNode ? tree_.find_child(parent, hash, block_tokens, extra) : kNoNode;
    }
    host_.take(host);
    held.push_back(host);
    if (parent == kNoNode) parent = tree_.get_or_add_root(keys);
    if (node == kNoNode) node = tree_.add_child(parent, hash, block_tokens, extra);
    host_.set_node(host, node);
    tree_.set_host(node, host);
    staged_from_store_ = true;
    if (events_)
      events_->stored(hash, parent_hash, first + done == 0, block_tokens, PKV_TIER_STORE, 0,
                      keys.lora_id, extra);
    host_out->push_back(host);
    parent = node;
    parent_hash = hash;
  }
  for (int32_t h : held) host_.drop_ref(h);  // cached: the host tier's newest
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
