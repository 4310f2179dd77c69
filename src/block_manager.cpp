#include "block_manager.h"

#include <algorithm>
#include <cstring>

#include "block_hash.h"
#include "params.h"
#include "status.h"

namespace pkv {

BlockManager::BlockManager(uint32_t num_blocks, uint32_t block_size, bool prefix_caching,
                           uint64_t hash_seed, bool constant_hash, uint32_t host_num_blocks)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      blocks_(size_t(num_blocks) + 1),
      num_free_(num_blocks),
      seed_(hash_seed),
      tree_(block_size, hash_seed, constant_hash, num_blocks),
      host_(host_num_blocks) {
  // Initially every block is free, in id order: block 0 is allocated first.
  const int32_t s = sentinel();
  blocks_[s].prev = blocks_[s].next = s;
  for (int32_t b = 0; b < s; ++b) list_insert_after(blocks_[s].prev, b);
}

// ---------------------------------------------------------------- free list

void BlockManager::list_insert_after(int32_t at, int32_t block) {
  int32_t next = blocks_[at].next;
  blocks_[block].prev = at;
  blocks_[block].next = next;
  blocks_[at].next = block;
  blocks_[next].prev = block;
}

void BlockManager::list_remove(int32_t block) {
  Block &b = blocks_[block];
  blocks_[b.prev].next = b.next;
  blocks_[b.next].prev = b.prev;
  b.prev = b.next = -1;
}

int32_t BlockManager::pop_free() {
  int32_t block = blocks_[sentinel()].next;
  PKV_ASSERT(block != sentinel());
  Block &b = blocks_[block];
  list_remove(block);
  num_free_--;
  if (b.node != kNoNode) {  // eviction: the block's KV is about to be overwritten
    num_cached_--;
    tree_.remove_copy(b.node, block);
    b.node = kNoNode;
    stats_.num_evictions++;
  }
  b.ref = 1;
  return block;
}

void BlockManager::add_ref(int32_t block) {
  Block &b = blocks_[block];
  if (b.ref++ == 0) {
    list_remove(block);
    num_free_--;
    if (b.node != kNoNode) num_cached_--;
  }
}

void BlockManager::drop_ref(int32_t block) {
  Block &b = blocks_[block];
  PKV_ASSERT(b.ref > 0);
  if (--b.ref > 0) return;
  forget_device_twin(block);  // its KV may be overwritten from now on
  num_free_++;
  if (b.node != kNoNode) {
    num_cached_++;
    list_insert_after(blocks_[sentinel()].prev, block);  // tail: evicted last
  } else {
    list_insert_after(sentinel(), block);  // head: holds nothing worth keeping
  }
}

void BlockManager::check_space(uint32_t needed, const char *what) const {
  if (needed > num_free_)
    fail(PKV_ERR_NO_SPACE, "%s needs %u free blocks, %u are free (of %u)", what, needed,
         num_free_, num_blocks_);
}

// ---------------------------------------------------------------- admission

BlockManager::Admission BlockManager::plan_admission(const std::string &salt,
                                                     const int32_t *tokens, uint32_t n) const {
  Admission plan;
  const uint32_t total = blocks_for_tokens(n, block_size_);
  // At least the last token is computed: a prompt of whole blocks recomputes its last block.
  const uint32_t max_hits = (n - 1) / block_size_;
  uint32_t node = prefix_caching_ ? tree_.find_root(salt) : kNoNode;
  if (node != kNoNode && max_hits) {
    // The chained hashes do not depend on the tree, so the walk computes them kAhead blocks
    // early and starts loading those blocks' table slots and node tokens from memory.
    constexpr uint32_t kAhead = 8;
    uint64_t ahead[kAhead];
    uint64_t last = tree_.hash(node);
    uint32_t hashed = 0;  // blocks whose hash is computed (and slot prefetched)
    plan.hit_blocks.reserve(max_hits);
    for (uint32_t j = 0; j < max_hits; ++j) {
      // The window grows with the hits: a prompt that misses at once hashes one block or two.
      const uint32_t want = std::min({max_hits, j + 1 + kAhead - 1, 2 * j + 2});
      for (; hashed < want; ++hashed) {
        last = block_hash(seed_, last, tokens + size_t(hashed) * block_size_, block_size_);
        ahead[hashed % kAhead] = last;
        tree_.prefetch_slot(node, last);
      }
      const uint64_t hash = ahead[j % kAhead];
      if (j + kAhead / 2 < hashed) tree_.prefetch_node(node, ahead[(j + kAhead / 2) % kAhead]);
      const int32_t *block_tokens = tokens + size_t(j) * block_size_;
      uint32_t child = tree_.find_child(node, hash, block_tokens);
      if (child == kNoNode || tree_.copies(child).empty()) break;
      // Prefer a copy already in use: reviving a cached one would take it off the free list.
      int32_t pick = -1;
      for (int32_t c : tree_.copies(child)) {
        if (blocks_[c].ref > 0) { pick = c; break; }
        if (pick < 0) pick = c;
      }
      if (blocks_[pick].ref == 0) plan.num_free_needed++;
      plan.hit_blocks.push_back(pick);
      node = child;
    }
  }
  plan.num_new_blocks = total - static_cast<uint32_t>(plan.hit_blocks.size());
  plan.num_free_needed += plan.num_new_blocks;
  return plan;
}

void BlockManager::reserve(BlockTable &table, const Admission &plan) {
  table.ids.reserve(plan.hit_blocks.size() + plan.num_new_blocks);
  // Hits first: they leave the free list before any pop could evict them.
  for (int32_t b : plan.hit_blocks) {
    add_ref(b);
    table.ids.push_back(b);
  }
  for (uint32_t i = 0; i < plan.num_new_blocks; ++i) table.ids.push_back(pop_free());
}

uint32_t BlockManager::admit(BlockTable &table, const std::string &salt, const int32_t *tokens,
                             uint32_t n) {
  PKV_ASSERT(table.ids.empty() && n > 0);
  Admission plan = plan_admission(salt, tokens, n);
  check_space(plan.num_free_needed, "admitting the prompt");
  reserve(table, plan);
  table.num_sealed = static_cast<uint32_t>(plan.hit_blocks.size());
  const uint32_t hit_tokens = table.num_sealed * block_size_;
  if (prefix_caching_) {
    stats_.prefix_query_tokens += n;
    stats_.prefix_hit_tokens += hit_tokens;
  }
  return hit_tokens;
}

// ---------------------------------------------------------------- append, fork, free

void BlockManager::reserve_slots(BlockTable &table, uint32_t num_slotted, uint32_t n) {
  const uint32_t have = static_cast<uint32_t>(table.ids.size());
  const uint32_t need = blocks_for_tokens(uint64_t(num_slotted) + n, block_size_) - have;
  // Writing into a partly filled last block that another sequence also references (a fork)
  // would change that sequence's KV: copy it first.
  const bool cow = num_slotted % block_size_ != 0 && blocks_[table.ids.back()].ref > 1;
  check_space(need + (cow ? 1 : 0), "appending the tokens");
  make_room(table.ids, need);
  make_room(pending_copies_, 1);
  if (cow) {
    int32_t src = table.ids.back();
    int32_t dst = pop_free();
    // A copy-on-write source is not held: the sharers that keep it are no reason to copy again
    // when they append, and one freed meanwhile is overwritten only after the step's copies.
    pending_copies_.push_back({src, dst, PKV_COPY_COW});
    drop_ref(src);
    table.ids.back() = dst;
    stats_.num_cow_copies++;
  } else if (num_slotted % block_size_ != 0) {
    forget_device_twin(table.ids.back());  // about to be written: no longer its twin's KV
  }
  for (uint32_t i = 0; i < need; ++i) table.ids.push_back(pop_free());
}

void BlockManager::fork(const BlockTable &copy) {
  for (int32_t b : copy.ids) add_ref(b);
}

void BlockManager::free(BlockTable &table) {
  // Reverse table order: the sequence's last blocks reach the free list's tail first, so they
  // are evicted before its first blocks, which other prompts are likelier to share.
  for (auto it = table.ids.rbegin(); it != table.ids.rend(); ++it) drop_ref(*it);
  table.ids.clear();
  table.num_sealed = 0;
}

// ---------------------------------------------------------------- sealing

void BlockManager::seal(BlockTable &table, const std::string &salt, const int32_t *tokens,
                        uint32_t num_computed) {
  if (!prefix_caching_) return;
  const uint32_t full = num_computed / block_size_;
  // Chunks of blocks: their chained hashes first (they need no tree), with their table slots
  // prefetched, then the inserts, which then rarely wait on memory.
  constexpr uint32_t kChunk = 32;
  uint64_t hashes[kChunk];
  uint32_t j = table.num_sealed;
  uint64_t parent_hash = j == 0 ? root_hash(seed_, salt.data(), salt.size())
                                : tree_.hash(blocks_[table.ids[j - 1]].node);
  while (j < full) {
    const uint32_t n = std::min(kChunk, full - j);
    for (uint32_t i = 0; i < n; ++i) {
      parent_hash = block_hash(seed_, parent_hash, tokens + size_t(j + i) * block_size_, block_size_);
      hashes[i] = parent_hash;
      tree_.prefetch_slot(kNoNode, parent_hash);  // a hint: exact unless PKV_DEBUG_CONSTANT_HASH
    }
    for (uint32_t i = 0; i < n; ++i, ++j) {
      const int32_t block = table.ids[j];
      if (blocks_[block].node != kNoNode) continue;  // shared with a sequence that sealed it
      const int32_t *block_tokens = tokens + size_t(j) * block_size_;
      const uint32_t parent = j == 0 ? tree_.get_or_add_root(salt) : blocks_[table.ids[j - 1]].node;
      PKV_ASSERT(parent != kNoNode);
      uint32_t node = tree_.find_child(parent, hashes[i], block_tokens);
      // Same-step duplicates (two prompts computed the same block) become copies of one node.
      if (node == kNoNode) node = tree_.add_child(parent, hashes[i], block_tokens);
      tree_.add_copy(node, block);
      blocks_[block].node = node;
    }
  }
  if (full > table.num_sealed) table.num_sealed = full;
}

void BlockManager::reset_cache() {
  // Sealed blocks in use keep their nodes; if there are none, the cache ends empty and one
  // ALL_CLEARED says so instead of an event per node.
  uint32_t sealed_in_use = 0;
  for (uint32_t b = 0; b < num_blocks_; ++b) sealed_in_use += blocks_[b].ref > 0 && blocks_[b].node != kNoNode;
  const bool all = sealed_in_use == 0;
  if (events_ && all) events_->mute(true);
  for (int32_t b = blocks_[sentinel()].next; b != sentinel(); b = blocks_[b].next) {
    Block &blk = blocks_[b];
    if (blk.node == kNoNode) continue;
    tree_.remove_copy(blk.node, b);
    blk.node = kNoNode;
    num_cached_--;
    stats_.num_evictions++;
  }
  if (events_ && all) {
    events_->mute(false);
    events_->all_cleared();
  }
}

// ---------------------------------------------------------------- copies and the host tier

void BlockManager::copies_done(size_t n) {
  PKV_ASSERT(n <= pending_copies_.size());
  for (size_t i = 0; i < n; ++i) {
    const BlockCopy &c = pending_copies_[i];
    if (c.kind == PKV_COPY_SWAP_IN) drop_host_ref(c.src);
    if (c.kind == PKV_COPY_SWAP_OUT && c.holds) drop_ref(c.src);
  }
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
  if (!host_.drop_ref(host)) return;
  forget_host_twin(host);
  release_holds_into(host);
}

void BlockManager::release_holds_into(int32_t host) {
  // Without this a released swapped sequence's pool blocks stayed held until some step ran:
  // with no other sequence, forever.
  for (BlockCopy &c : pending_copies_)
    if (c.kind == PKV_COPY_SWAP_OUT && c.dst == host && c.holds) {
      c.holds = false;
      drop_ref(c.src);
    }
}

void BlockManager::swap_out(BlockTable &table, std::vector<int32_t> &host) {
  if (host_.num_blocks() == 0)
    fail(PKV_ERR_UNSUPPORTED, "swapping out needs a host tier (host_num_blocks or host_cache_bytes)");
  PKV_ASSERT(host.empty());
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
    const int32_t h = host_.pop_free();
    pending_copies_.push_back({d, h, PKV_COPY_SWAP_OUT});  // the table's reference now holds d
    add_twins(d, h);
    host.push_back(h);
    stats_.num_swapped_out_blocks++;
  }
  table.ids.clear();
  table.num_sealed = 0;
}

void BlockManager::swap_in(std::vector<int32_t> &host, BlockTable &table) {
  PKV_ASSERT(table.ids.empty());
  uint32_t need = 0;
  for (int32_t h : host) need += device_twin_.count(h) == 0;
  check_space(need, "swapping in");
  table.ids.reserve(host.size());
  make_room(pending_copies_, need);
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
    pending_copies_.push_back({h, d, PKV_COPY_SWAP_IN});  // the table's reference now holds h
    add_twins(d, h);
    table.ids.push_back(d);
    stats_.num_swapped_in_blocks++;
  }
  host.clear();
}

void BlockManager::free_host(std::vector<int32_t> &host) {
  for (int32_t h : host) drop_host_ref(h);
  host.clear();
}

}  // namespace pkv

// ---------------------------------------------------------------- invariants (O(pool): tests)

namespace pkv {

void BlockManager::check(const std::vector<TableOwner> &owners) const {
  std::vector<int64_t> refs(num_blocks_, 0), host_refs(host_.num_blocks(), 0), held(num_blocks_, 0);
  for (const BlockCopy &c : pending_copies_) {  // a queued copy between the tiers holds its source
    if (c.kind == PKV_COPY_SWAP_IN) host_refs.at(c.src)++;
    if (c.kind == PKV_COPY_SWAP_OUT && c.holds) refs.at(c.src)++, held.at(c.src)++;
  }
  for (const TableOwner &o : owners) {
    for (int32_t h : *o.host_table) {
      if (h < 0 || uint32_t(h) >= host_.num_blocks())
        fail(PKV_ERR_INTERNAL, "seq %llu: host block id %d out of range", (unsigned long long)o.id, h);
      host_refs[h]++;
    }
    const unsigned long long id = o.id;
    const BlockTable &t = *o.table;
    if (t.ids.size() != blocks_for_tokens(o.num_slotted, block_size_))
      fail(PKV_ERR_INTERNAL, "seq %llu: %zu blocks for %u tokens", id, t.ids.size(), o.num_slotted);
    if (o.num_computed > o.num_slotted)
      fail(PKV_ERR_INTERNAL, "seq %llu: more computed than tokens with a slot", id);
    if (prefix_caching_ && t.num_sealed != o.num_computed / block_size_)
      fail(PKV_ERR_INTERNAL, "seq %llu: %u sealed blocks, %u full computed ones", id, t.num_sealed,
           o.num_computed / block_size_);
    for (int32_t b : t.ids) {
      if (b < 0 || uint32_t(b) >= num_blocks_) fail(PKV_ERR_INTERNAL, "seq %llu: block id %d out of range", id, b);
      refs[b]++;
    }
    // Sealed blocks are copies of the nodes of exactly this sequence's prefix.
    uint32_t parent = t.num_sealed ? tree_.find_root(*o.salt) : kNoNode;
    for (uint32_t j = 0; j < t.num_sealed; ++j) {
      uint32_t node = blocks_[t.ids[j]].node;
      if (node == kNoNode || !tree_.is_live(node) || tree_.parent(node) != parent ||
          std::memcmp(tree_.tokens(node), o.tokens + size_t(j) * block_size_, sizeof(int32_t) * block_size_) != 0)
        fail(PKV_ERR_INTERNAL, "seq %llu: block %u is not a copy of its prefix's node", id, j);
      parent = node;
    }
    // No write into a shared or sealed block: every slot still to compute is in a private block.
    // A pending swap-out copy's hold is no sharer: it reads the block before the step's writes
    // (a sequence swapped back in before its copies are done takes its held blocks back).
    for (uint32_t pos = o.num_computed; pos < o.num_slotted; ++pos) {
      int32_t b = t.ids[pos / block_size_];
      if (blocks_[b].ref - held[b] != 1 || blocks_[b].node != kNoNode)
        fail(PKV_ERR_INTERNAL, "seq %llu: uncomputed token %u lies in shared or sealed block %d", id, pos, b);
    }
  }
  uint32_t ref0 = 0, cached = 0;
  for (uint32_t b = 0; b < num_blocks_; ++b) {
    const Block &blk = blocks_[b];
    if (blk.ref != refs[b])
      fail(PKV_ERR_INTERNAL, "block %u: ref count %d, %lld table references", b, blk.ref,
           (long long)refs[b]);
    if (blk.ref == 0) ref0++;
    if (blk.ref == 0 && blk.node != kNoNode) cached++;
    if (blk.node != kNoNode) {
      const auto &c = tree_.is_live(blk.node) ? tree_.copies(blk.node) : std::vector<int32_t>{};
      if (std::count(c.begin(), c.end(), int32_t(b)) != 1)
        fail(PKV_ERR_INTERNAL, "block %u: not listed once among its node's copies", b);
    }
  }
  for (uint32_t n = 0; n < tree_.capacity(); ++n) {
    if (!tree_.is_live(n)) continue;
    for (int32_t c : tree_.copies(n))
      if (c < 0 || uint32_t(c) >= num_blocks_ || blocks_[c].node != n)
        fail(PKV_ERR_INTERNAL, "prefix node %u lists block %d that is not its copy", n, c);
  }
  if (ref0 != num_free_ || cached != num_cached_)
    fail(PKV_ERR_INTERNAL, "counters: free %u (actual %u), cached %u (actual %u)", num_free_,
         ref0, num_cached_, cached);
  // The free list holds exactly the ref-0 blocks, linked both ways.
  uint32_t walked = 0;
  for (int32_t b = blocks_[sentinel()].next; b != sentinel(); b = blocks_[b].next) {
    if (b < 0 || uint32_t(b) >= num_blocks_ || blocks_[b].ref != 0 || ++walked > num_free_)
      fail(PKV_ERR_INTERNAL, "free list holds block %d wrongly or loops", b);
    if (blocks_[blocks_[b].next].prev != b) fail(PKV_ERR_INTERNAL, "free list links broken at %d", b);
  }
  if (walked != num_free_) fail(PKV_ERR_INTERNAL, "free list holds %u of %u free blocks", walked, num_free_);
  for (uint32_t h = 0; h < host_.num_blocks(); ++h)
    if (host_.ref(h) != host_refs[h])
      fail(PKV_ERR_INTERNAL, "host block %u: ref count %d, %lld references", h, host_.ref(h),
           (long long)host_refs[h]);
  host_.check();
  if (host_twin_.size() != device_twin_.size())
    fail(PKV_ERR_INTERNAL, "twins: %zu pool blocks, %zu host blocks", host_twin_.size(), device_twin_.size());
  for (const auto &[d, h] : host_twin_) {
    auto back = device_twin_.find(h);
    if (back == device_twin_.end() || back->second != d || blocks_[d].ref == 0 || host_.ref(h) == 0)
      fail(PKV_ERR_INTERNAL, "twins: pool block %d and host block %d disagree or one is free", d, h);
  }
  tree_.check();
}

}  // namespace pkv
