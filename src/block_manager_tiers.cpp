// BlockManager and the tiers beside the pool: blocks staged from the store tier, the copies a
// step carries, and the host tier's twins, swapping out and in (block_manager.h; the pool's own
// rules are in block_manager.cpp).
#include "block_manager.h"

#include <unordered_set>

#include "block_hash.h"
#include "status.h"

namespace pkv {

// ---------------------------------------------------------------- the store tier's blocks

uint32_t BlockManager::stage_from_store(const std::string &salt, const int32_t *tokens,
                                        const Admission &plan, uint32_t n,
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
    if (c.kind == PKV_COPY_LOAD || c.kind == PKV_COPY_SWAP_IN) busy.insert(c.src);
    if (c.kind == PKV_COPY_OFFLOAD || c.kind == PKV_COPY_SWAP_OUT) busy.insert(c.dst);
  }
  for (size_t i = 0; i < hit_blocks.size(); ++i)
    if (hit_blocks[i] < 0) busy.insert(tree_.host(hit_nodes[i]));
  host_out->reserve(n);
  std::vector<int32_t> held;  // host blocks taken, held (ref 1) until the end
  // The root is made only when a node is added under it: an empty one may not stay.
  uint32_t parent = first ? hit_nodes[first - 1] : tree_.find_root(salt);
  uint64_t parent_hash =
      parent != kNoNode ? tree_.hash(parent) : root_hash(seed_, salt.data(), salt.size());
  uint32_t done = 0;
  for (; done < n; ++done) {
    const int32_t *block_tokens = tokens + size_t(first + done) * block_size_;
    const uint64_t hash = block_hash(seed_, parent_hash, block_tokens, block_size_);
    uint32_t node = parent != kNoNode ? tree_.find_child(parent, hash, block_tokens) : kNoNode;
    if (node != kNoNode && (!tree_.copies(node).empty() || tree_.host(node) >= 0)) {
      host_out->push_back(-1);  // held here already (past a node kept only by its children)
      if (tree_.host(node) >= 0) busy.insert(tree_.host(node));  // on the path: kept
      parent = node;
      parent_hash = hash;
      continue;
    }
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
      if (first + done == 0) parent = tree_.find_root(salt);
      node = parent != kNoNode ? tree_.find_child(parent, hash, block_tokens) : kNoNode;
    }
    host_.take(host);
    held.push_back(host);
    if (parent == kNoNode) parent = tree_.get_or_add_root(salt);
    if (node == kNoNode) node = tree_.add_child(parent, hash, block_tokens);
    host_.set_node(host, node);
    tree_.set_host(node, host);
    if (events_)
      events_->stored(hash, parent_hash, first + done == 0, block_tokens, PKV_TIER_STORE, 0);
    host_out->push_back(host);
    parent = node;
    parent_hash = hash;
  }
  for (int32_t h : held) host_.drop_ref(h);  // cached: the host tier's newest
  return done;
}

// ---------------------------------------------------------------- copies and the host tier

void BlockManager::copies_done(size_t n) {
  PKV_ASSERT(n <= pending_copies_.size());
  pending_copies_.erase(pending_copies_.begin(), pending_copies_.begin() + n);
}

void BlockManager::add_twins(int32_t device, int32_t host) {
  host_twin_[device] = host;
  device_twin_[host] = device;
}

void BlockManager::forget_device_twin(int32_t device) {
  auto it = host_twin_.find(device);
  if (it == host_twin_.end()) return;
  device_twin_.erase(it->second);
  host_twin_.erase(it);
}

void BlockManager::forget_host_twin(int32_t host) {
  auto it = device_twin_.find(host);
  if (it == device_twin_.end()) return;
  host_twin_.erase(it->second);
  device_twin_.erase(it);
}

void BlockManager::drop_host_ref(int32_t host) {
  if (host_.drop_ref(host)) forget_host_twin(host);
}

void BlockManager::swap_out(SeqTables &tables, std::vector<int32_t> &host) {
  if (host_.num_blocks() == 0)
    fail(PKV_ERR_UNSUPPORTED,
         "swapping out needs a host tier (host_num_blocks or host_cache_bytes)");
  PKV_ASSERT(host.empty() && tables.size() == 1 &&
             !any_windowed());  // the engine allows no host tier with windows
  BlockTable &table = tables[0];
  uint32_t need = 0;
  for (int32_t d : table.ids) need += host_twin_.count(d) == 0;
  if (need > host_.num_free())
    fail(PKV_ERR_NO_SPACE, "swapping out needs %u free host-tier blocks, %u are free (of %u)", need,
         host_.num_free(), host_.num_blocks());
  // Room first: nothing below can fail.
  host.reserve(table.ids.size());
  make_room(pending_copies_, need);
  host_twin_.reserve(host_twin_.size() + need);
  device_twin_.reserve(device_twin_.size() + need);
  for (int32_t d : table.ids) {
    auto twin = host_twin_.find(d);
    if (twin != host_twin_.end()) {  // a sharer moved it already: share its host copy
      host_.add_ref(twin->second);
      host.push_back(twin->second);
      drop_ref(d);
      continue;
    }
    const int32_t h = pop_host();
    pending_copies_.push_back({d, h, PKV_COPY_SWAP_OUT});
    add_twins(d, h);  // for the sharers still holding d
    drop_ref(d);      // free now: the copy comes before any write of the next step
    host.push_back(h);
    stats_.num_swapped_out_blocks++;
  }
  tables.clear();
}

void BlockManager::swap_in(std::vector<int32_t> &host, SeqTables &tables) {
  PKV_ASSERT(tables.empty() && num_groups() == 1);
  SeqTables out(1);
  BlockTable &table = out[0];
  uint32_t need = 0;
  for (int32_t h : host) need += device_twin_.count(h) == 0;
  check_space(need, "swapping in");
  table.ids.reserve(host.size());
  make_room(pending_copies_, 2 * size_t(need));  // a swap-in, an offload per eviction
  host_twin_.reserve(host_twin_.size() + need);
  device_twin_.reserve(device_twin_.size() + need);
  for (int32_t h : host) {
    auto twin = device_twin_.find(h);
    if (twin != device_twin_.end()) {  // the same KV is still in a pool block: share it
      add_ref(twin->second);
      table.ids.push_back(twin->second);
      drop_host_ref(h);
      continue;
    }
    const int32_t d = pop_free();
    pending_copies_.push_back({h, d, PKV_COPY_SWAP_IN});
    add_twins(d, h);  // for the swapped-out sharers of h
    drop_host_ref(h);
    table.ids.push_back(d);
    stats_.num_swapped_in_blocks++;
  }
  host.clear();
  tables.swap(out);
}

void BlockManager::free_host(std::vector<int32_t> &host) {
  for (int32_t h : host) drop_host_ref(h);
  host.clear();
}

}  // namespace pkv
