// BlockManager's host tier (block_manager.h, DESIGN.md §11): offload of evicted sealed blocks,
// the host tier's own evictions, the copies a step carries, the twins, swapping out and in.
#include "block_manager.h"

#include "block_hash.h"
#include "status.h"

namespace pkv {

// ---------------------------------------------------------------- offload and host-tier eviction

int32_t BlockManager::pop_host() {
  const int32_t host = host_.head();
  PKV_ASSERT(host >= 0);
  if (host_.node(host) != kNoNode) evict_host(host);
  return host_.take();
}

void BlockManager::evict(int32_t block, bool offload) {
  const uint32_t node = pool_.node(block);
  if (offload && tree_.host(node) < 0 && host_.num_free() > 0) {
    // The copy is queued before anything the block's next owner writes (see BlockCopy).
    const int32_t host = pop_host();
    pending_copies_.push_back({block, host, PKV_COPY_OFFLOAD});
    host_.set_node(host, node);
    tree_.set_host(node, host);
    host_.drop_ref(host);  // cached: the newest of the host tier's LRU
    stats_.num_offloaded_blocks++;
  } else if (offload && tree_.host(node) >= 0) {
    // A re-offload: the host copy holds these bytes already, and becomes the newest, as this pool
    // copy was used more recently than the host copy was made (issue 26: it kept the age of its
    // first offload and could be the first block dropped).
    host_.touch(tree_.host(node));
  }
  pool_.set_node(block, kNoNode);
  tree_.remove_copy(node, block);
  stats_.num_evictions++;
}

void BlockManager::report_host_block(int32_t host,
                                     const std::function<void(const EvictedHostBlock &)> &f) const {
  for (const BlockCopy &c : pending_copies_)  // its bytes are still to come from a queued copy
    if (copy_writes_host(c.kind) && c.dst == host) return;
  const uint32_t node = host_.node(host);
  EvictedHostBlock ev{nullptr, 0,    tree_.group(node), {},
                      {},      host, tree_.hash(node),  tree_.hash(tree_.parent(node))};
  std::vector<uint32_t> chain;  // the node and its ancestors up to the root
  bool any_extra = false;
  for (uint32_t n = node; !tree_.is_root(n); n = tree_.parent(n)) {
    chain.push_back(n);
    any_extra = any_extra || !tree_.extra(n).empty();
  }
  ev.salt = &tree_.root_salt(tree_.parent(chain.back()));
  ev.lora_id = tree_.lora_id(node);
  ev.tokens.reserve(chain.size() * block_size_);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    ev.tokens.insert(ev.tokens.end(), tree_.tokens(*it), tree_.tokens(*it) + block_size_);
    if (any_extra) ev.extras.push_back(tree_.extra(*it));
  }
  f(ev);
}

void BlockManager::for_each_host_cached(
    const std::function<void(const EvictedHostBlock &)> &f) const {
  host_.for_each_free([&](int32_t h) {
    if (host_.node(h) != kNoNode) report_host_block(h, f);
    return true;
  });
}

void BlockManager::evict_host(int32_t host) {
  const uint32_t node = host_.node(host);
  if (on_host_evict_) report_host_block(host, on_host_evict_);
  host_.set_node(host, kNoNode);
  host_from_store_[host] = 0;
  tree_.clear_host(node);
  stats_.num_host_evictions++;
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
  PKV_ASSERT(host.empty() && tables.size() == num_groups());
  // Every group's table moves, in group order, into one host table (block_manager.h); an entry
  // a windowed or shared group does not hold stays -1 and takes no host block.
  uint32_t need = 0;
  size_t entries = 0;
  for (const BlockTable &t : tables) {
    entries += t.ids.size();
    for (int32_t d : t.ids) need += d >= 0 && host_twin_.count(d) == 0;
  }
  if (need > host_.num_free())
    fail(PKV_ERR_NO_SPACE, "swapping out needs %u free host-tier blocks, %u are free (of %u)", need,
         host_.num_free(), host_.num_blocks());
  // Room first: nothing below can fail.
  host.reserve(entries);
  make_room(pending_copies_, need);
  host_twin_.reserve(host_twin_.size() + need);
  device_twin_.reserve(device_twin_.size() + need);
  for (const BlockTable &table : tables)
    for (int32_t d : table.ids) {
      if (d < 0) {
        host.push_back(-1);
        continue;
      }
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
  PKV_ASSERT(tables.empty() && host.size() % num_groups() == 0);
  const size_t n = host.size() / num_groups();  // each group's entries (swap_out's order)
  SeqTables out(num_groups());
  uint32_t need = 0;
  for (int32_t h : host) need += h >= 0 && device_twin_.count(h) == 0;
  check_space(need, "swapping in");
  for (BlockTable &t : out) t.ids.reserve(n);
  make_room(pending_copies_, 2 * size_t(need));  // a swap-in, an offload per eviction
  host_twin_.reserve(host_twin_.size() + need);
  device_twin_.reserve(device_twin_.size() + need);
  for (size_t i = 0; i < host.size(); ++i) {
    const int32_t h = host[i];
    std::vector<int32_t> &ids = out[i / n].ids;
    if (h < 0) {
      ids.push_back(-1);
      continue;
    }
    auto twin = device_twin_.find(h);
    if (twin != device_twin_.end()) {  // the same KV is still in a pool block: share it
      add_ref(twin->second);
      ids.push_back(twin->second);
      drop_host_ref(h);
      continue;
    }
    const int32_t d = pop_free();
    pending_copies_.push_back({h, d, PKV_COPY_SWAP_IN});
    add_twins(d, h);  // for the swapped-out sharers of h
    drop_host_ref(h);
    ids.push_back(d);
    stats_.num_swapped_in_blocks++;
  }
  host.clear();
  tables.swap(out);
}

void BlockManager::free_host(std::vector<int32_t> &host) {
  for (int32_t h : host)
    if (h >= 0) drop_host_ref(h);
  host.clear();
}

}  // namespace pkv
