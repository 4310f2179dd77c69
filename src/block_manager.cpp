// BlockManager (block_manager.h): the pool's blocks, taking and evicting them, admission through
// the prefix cache, append / fork / free / truncate, and sealing. The tiers beside the pool are in
// block_manager_tiers.cpp, the invariants' check in block_manager_check.cpp.
#include "block_manager.h"

#include <algorithm>

#include "block_hash.h"
#include "kv_groups.h"
#include "params.h"
#include "status.h"

namespace pkv {

static_assert(BlockPool::kNoNode == kNoNode, "one 'no node' value for the pools and the tree");

BlockManager::BlockManager(uint32_t num_blocks, uint32_t block_size, bool prefix_caching,
                           uint64_t hash_seed, bool constant_hash, uint32_t host_num_blocks,
                           bool offload, std::vector<uint32_t> group_windows)
    : windows_(std::move(group_windows)),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      offload_(offload && prefix_caching && host_num_blocks > 0),
      seed_(hash_seed),
      pool_(num_blocks),
      host_(host_num_blocks),
      tree_(block_size, hash_seed, constant_hash, size_t(num_blocks) + host_num_blocks) {}

// ---------------------------------------------------------------- taking and evicting blocks

int32_t BlockManager::pop_free() {
  const int32_t block = pool_.head();
  PKV_ASSERT(block >= 0);
  if (pool_.node(block) != kNoNode) evict(block, offload_);
  return pool_.take();
}

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
    if ((c.kind == PKV_COPY_OFFLOAD || c.kind == PKV_COPY_SWAP_OUT) && c.dst == host) return;
  const uint32_t node = host_.node(host);
  EvictedHostBlock ev{nullptr, {}, host, tree_.hash(node), tree_.hash(tree_.parent(node))};
  std::vector<uint32_t> chain;  // the node and its ancestors up to the root
  for (uint32_t n = node; !tree_.is_root(n); n = tree_.parent(n)) chain.push_back(n);
  ev.salt = &tree_.root_salt(tree_.parent(chain.back()));
  ev.tokens.reserve(chain.size() * block_size_);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    ev.tokens.insert(ev.tokens.end(), tree_.tokens(*it), tree_.tokens(*it) + block_size_);
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
  tree_.clear_host(node);
  stats_.num_host_evictions++;
}

void BlockManager::drop_ref(int32_t block) {
  if (pool_.drop_ref(block)) forget_device_twin(block);  // its KV may be overwritten from now on
}

void BlockManager::check_space(uint32_t needed, const char *what) const {
  if (needed > pool_.num_free())
    fail(PKV_ERR_NO_SPACE, "%s needs %u free blocks, %u are free (of %u)", what, needed,
         pool_.num_free(), pool_.num_blocks());
}

// ---------------------------------------------------------------- admission

bool BlockManager::any_windowed() const {
  return std::any_of(windows_.begin(), windows_.end(), [](uint32_t w) { return w != 0; });
}

uint32_t BlockManager::first_held(uint32_t group, uint64_t next) const {
  const uint32_t w = windows_[group];
  if (!w) return 0;
  const uint32_t first = window_start(w, next) / block_size_;
  if (!prefix_caching_) return first;
  const uint32_t sealed = static_cast<uint32_t>(next / block_size_);
  return std::min(first, sealed ? sealed - 1 : 0);
}

uint64_t BlockManager::peak_blocks(uint32_t prompt, uint64_t total) const {
  uint64_t at_end = 0;
  for (uint32_t w : windows_) at_end += group_blocks_for(w, total, block_size_);
  return std::max<uint64_t>(uint64_t(num_groups()) * blocks_for_tokens(prompt, block_size_),
                            at_end);
}

void BlockManager::walk(uint32_t group, const std::string &salt, const int32_t *tokens,
                        uint32_t max_hits, std::vector<uint32_t> *nodes,
                        std::vector<int32_t> *picks) const {
  uint32_t node = tree_.find_root(salt, group);
  if (node == kNoNode || !max_hits) return;
  const bool windowed = windows_[group] != 0;
  // The chained hashes do not depend on the tree, so the walk computes them kAhead blocks
  // early and starts loading those blocks' table slots and node tokens from memory.
  constexpr uint32_t kAhead = 8;
  uint64_t ahead[kAhead];
  uint64_t last = tree_.hash(node);
  uint32_t hashed = 0;  // blocks whose hash is computed (and slot prefetched)
  nodes->reserve(max_hits);
  picks->reserve(max_hits);
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
    const uint32_t child = tree_.find_child(node, hash, tokens + size_t(j) * block_size_);
    if (child == kNoNode) break;
    // Prefer a copy already in use: reviving a cached one would take it off the free list.
    // A node held only in the host tier is loaded into a new pool block.
    int32_t pick = -1;
    for (int32_t c : tree_.copies(child)) {
      if (pool_.ref(c) > 0) {
        pick = c;
        break;
      }
      if (pick < 0) pick = c;
    }
    if (pick < 0 && tree_.host(child) < 0) {
      if (!windowed) break;  // a windowed group may not need this block: the walk goes on
      pick = -2;
    }
    nodes->push_back(child);
    picks->push_back(pick);
    node = child;
  }
}

BlockManager::Admission BlockManager::plan_admission(const std::string &salt, const int32_t *tokens,
                                                     uint32_t n) const {
  Admission plan;
  const uint32_t groups = num_groups();
  const uint32_t total = blocks_for_tokens(n, block_size_);
  // At least the last token is computed: a prompt of whole blocks recomputes its last block.
  uint32_t limit = prefix_caching_ ? (n - 1) / block_size_ : 0;
  plan.groups.resize(groups);
  for (uint32_t g = 0; g < groups && limit; ++g) {
    GroupHits &gh = plan.groups[g];
    walk(g, salt, tokens, limit, &gh.nodes, &gh.blocks);
    limit = std::min<uint32_t>(limit, gh.blocks.size());  // no node past the walk's end
  }
  uint32_t h = limit;
  if (any_windowed() && h) {
    // Windowed groups: a hit of h blocks needs blocks first_held .. h-1. missing[g][j]: blocks
    // before j holding no KV, so each boundary is tried in O(groups).
    std::vector<std::vector<uint32_t>> missing(groups);
    for (uint32_t g = 0; g < groups; ++g) {
      if (!windows_[g]) continue;
      missing[g].assign(limit + 1, 0);
      for (uint32_t j = 0; j < limit; ++j)
        missing[g][j + 1] = missing[g][j] + (plan.groups[g].blocks[j] == -2);
    }
    for (; h > 0; --h) {
      bool ok = true;
      for (uint32_t g = 0; g < groups && ok; ++g)
        if (windows_[g]) ok = missing[g][h] == missing[g][first_held(g, uint64_t(h) * block_size_)];
      if (ok) break;
    }
  }
  plan.num_hits = h;
  for (uint32_t g = 0; g < groups; ++g) {
    GroupHits &gh = plan.groups[g];
    gh.first = first_held(g, uint64_t(h) * block_size_);
    gh.blocks.resize(std::min<size_t>(gh.blocks.size(), h));
    gh.nodes.resize(gh.blocks.size());
    if (gh.first) {
      gh.blocks.erase(gh.blocks.begin(), gh.blocks.begin() + gh.first);
      gh.nodes.erase(gh.nodes.begin(), gh.nodes.begin() + gh.first);
    }
    for (int32_t b : gh.blocks) {
      PKV_ASSERT(b != -2);
      if (b < 0) plan.num_loads++;
      if (b < 0 || pool_.ref(b) == 0) plan.num_free_needed++;
    }
    plan.num_new_blocks += total - h;
  }
  plan.num_free_needed += plan.num_new_blocks;
  return plan;
}

void BlockManager::reserve(SeqTables &tables, const Admission &plan) {
  const uint32_t total = plan.num_hits + plan.num_new_blocks / num_groups();
  // Room first (a load, and an offload per eviction): nothing below can throw.
  SeqTables out(num_groups());
  for (BlockTable &t : out) t.ids.reserve(total);
  make_room(pending_copies_, 2 * (size_t(plan.num_loads) + plan.num_new_blocks));
  // Hits first: they leave the free lists before any pop could evict them (host copies to load
  // are held the same way until their loads are queued).
  for (const GroupHits &gh : plan.groups)
    for (size_t i = 0; i < gh.blocks.size(); ++i) {
      if (gh.blocks[i] >= 0)
        add_ref(gh.blocks[i]);
      else
        host_.add_ref(tree_.host(gh.nodes[i]));
    }
  for (uint32_t g = 0; g < num_groups(); ++g) {
    const GroupHits &gh = plan.groups[g];
    BlockTable &table = out[g];
    table.ids.assign(gh.first, -1);  // before the window: not held
    for (size_t i = 0; i < gh.blocks.size(); ++i) {
      if (gh.blocks[i] >= 0) {
        table.ids.push_back(gh.blocks[i]);
        continue;
      }
      const uint32_t node = gh.nodes[i];
      const int32_t block = pop_free();
      pending_copies_.push_back({tree_.host(node), block, PKV_COPY_LOAD});
      pool_.set_node(block, node);  // a sealed copy from now on: the load precedes any read
      tree_.add_copy(node, block);
      table.ids.push_back(block);
      stats_.num_loaded_blocks++;
    }
    while (table.ids.size() < total) table.ids.push_back(pop_free());
    table.num_sealed = plan.num_hits;
  }
  for (const GroupHits &gh : plan.groups)  // back to the host tier's LRU, as its newest
    for (size_t i = 0; i < gh.blocks.size(); ++i)
      if (gh.blocks[i] < 0) host_.drop_ref(tree_.host(gh.nodes[i]));
  tables.swap(out);
}

uint32_t BlockManager::admit(SeqTables &tables, const std::string &salt, const int32_t *tokens,
                             uint32_t n) {
  PKV_ASSERT(tables.empty() && n > 0);
  Admission plan = plan_admission(salt, tokens, n);
  check_space(plan.num_free_needed, "admitting the prompt");
  reserve(tables, plan);
  const uint32_t hit_tokens = plan.num_hits * block_size_;
  if (prefix_caching_) {
    // A hit token is served by the host tier when a group loaded its block.
    std::vector<bool> loaded(plan.num_hits, false);
    for (const GroupHits &gh : plan.groups)
      for (size_t i = 0; i < gh.blocks.size(); ++i)
        if (gh.blocks[i] < 0) loaded[gh.first + i] = true;
    stats_.prefix_query_tokens += n;
    stats_.prefix_hit_tokens += hit_tokens;
    stats_.host_hit_tokens +=
        uint64_t(std::count(loaded.begin(), loaded.end(), true)) * block_size_;
  }
  last_loads_ = plan.num_loads;
  return hit_tokens;
}

// ---------------------------------------------------------------- append, fork, free

void BlockManager::reserve_slots(SeqTables &tables, uint32_t num_slotted, uint32_t n) {
  PKV_ASSERT(tables.size() == num_groups());
  const uint32_t need = blocks_for_tokens(uint64_t(num_slotted) + n, block_size_) -
                        static_cast<uint32_t>(tables[0].ids.size());
  // Writing into a partly filled last block that another sequence also references (a fork), or
  // that is a prefix node's sealed copy (a block a truncation cut short), would change KV others
  // read: copy it first. (The block of the next token is held in every group, windowed or not.)
  // Asked again while applying: a group's pops never touch another group's last block (in use).
  auto cow = [&](const BlockTable &t) {
    return num_slotted % block_size_ != 0 &&
           (pool_.ref(t.ids.back()) > 1 || pool_.node(t.ids.back()) != kNoNode);
  };
  uint32_t needed = 0;
  for (const BlockTable &t : tables) needed += need + (cow(t) ? 1 : 0);
  check_space(needed, "appending the tokens");
  for (BlockTable &t : tables) make_room(t.ids, need);
  make_room(pending_copies_, 2 * size_t(needed));  // the copies-on-write, an offload per eviction
  for (BlockTable &t : tables) reserve_group_slots(t, num_slotted, need, cow(t));
}

void BlockManager::reserve_group_slots(BlockTable &table, uint32_t num_slotted, uint32_t need,
                                       bool cow) {
  if (cow) {
    int32_t src = table.ids.back();
    int32_t dst = pop_free();
    pending_copies_.push_back({src, dst, PKV_COPY_COW});
    drop_ref(src);
    table.ids.back() = dst;
    stats_.num_cow_copies++;
  } else if (num_slotted % block_size_ != 0) {
    forget_device_twin(table.ids.back());  // about to be written: no longer its twin's KV
  }
  for (uint32_t i = 0; i < need; ++i) table.ids.push_back(pop_free());
}

void BlockManager::fork(const SeqTables &copy) {
  for (const BlockTable &t : copy)
    for (int32_t b : t.ids)
      if (b >= 0) add_ref(b);
}

void BlockManager::free(SeqTables &tables) {
  // Reverse table order: the sequence's last blocks reach the free list's tail first, so they
  // are evicted before its first blocks, which other prompts are likelier to share.
  for (BlockTable &t : tables)
    for (auto it = t.ids.rbegin(); it != t.ids.rend(); ++it)
      if (*it >= 0) drop_ref(*it);
  tables.clear();
}

void BlockManager::truncate(SeqTables &tables, const std::string &salt, const int32_t *tokens,
                            uint32_t keep, uint32_t computed, size_t taken) {
  if (tables.empty()) return;
  const uint32_t need = blocks_for_tokens(keep, block_size_);
  const uint64_t next = std::min(computed, keep);
  // Windowed groups take back the blocks the kept tokens' window needs again, from the prefix
  // cache, as an admission would: all are found (and room for the loads) before anything changes.
  struct Revive {
    uint32_t group, index, node;
    int32_t block;  // the pool copy shared, or -1: a load from the host tier
  };
  std::vector<Revive> revive;
  uint32_t needed = 0;
  for (uint32_t g = 0; g < num_groups(); ++g) {
    if (!windows_[g]) continue;
    const BlockTable &t = tables[g];
    const uint32_t first = first_held(g, next);
    uint32_t end = first;
    while (end < need && t.ids[end] < 0) end++;
    if (end == first) continue;
    std::vector<uint32_t> nodes;
    std::vector<int32_t> picks;
    if (prefix_caching_) walk(g, salt, tokens, end, &nodes, &picks);
    for (uint32_t j = first; j < end; ++j) {
      if (j >= picks.size() || picks[j] == -2)
        fail(
            PKV_ERR_STATE,
            "truncating to %u tokens needs block %u of KV group %u (window %u) again, and no tier holds its "
            "KV any more: preempt and resume the sequence instead (it recomputes)",
            keep, j, g, windows_[g]);
      revive.push_back({g, j, nodes[j], picks[j]});
      needed += picks[j] < 0 || pool_.ref(picks[j]) == 0;
    }
  }
  if (!revive.empty()) {
    check_space(needed, "taking back the blocks of the window");
    make_room(pending_copies_, 2 * revive.size());  // a load, an offload per eviction
    // Held first, so no pop below evicts one: pool copies, and host copies to load (a pop's
    // offload may otherwise take the host block before its load is queued), as reserve() does.
    // (No load happens here today: windows and a host tier are refused together.)
    for (const Revive &r : revive) {
      if (r.block >= 0)
        add_ref(r.block);
      else
        host_.add_ref(tree_.host(r.node));
    }
    for (const Revive &r : revive) {
      int32_t block = r.block;
      if (block < 0) {
        block = pop_free();
        pending_copies_.push_back({tree_.host(r.node), block, PKV_COPY_LOAD});
        pool_.set_node(block, r.node);
        tree_.add_copy(r.node, block);
        stats_.num_loaded_blocks++;
      }
      tables[r.group].ids[r.index] = block;
    }
    for (const Revive &r : revive)  // back to the host tier's LRU, as its newest: a use
      if (r.block < 0) host_.drop_ref(tree_.host(r.node));
  }
  for (BlockTable &t : tables) truncate_group(t, keep, taken);
}

void BlockManager::truncate_group(BlockTable &table, uint32_t keep, size_t taken) {
  const size_t need = blocks_for_tokens(keep, block_size_);
  // From the end: the last blocks reach the free list's tail first, as in free().
  while (table.ids.size() > need) {
    const int32_t b = table.ids.back();
    table.ids.pop_back();
    if (b < 0) continue;
    drop_ref(b);
    if (pool_.ref(b) == 0) undo_copy_into(b, taken);
  }
  table.num_sealed = std::min(table.num_sealed, keep / block_size_);
}

void BlockManager::undo_copy_into(int32_t block, size_t taken) {
  // A copy-on-write only a dropped table needed: nobody will read what it writes, and the block
  // may go to a new owner now. Kept when a batch holds it or a later copy reads the block.
  for (size_t i = pending_copies_.size(); i-- > taken;) {
    const BlockCopy &c = pending_copies_[i];
    if (c.kind != PKV_COPY_COW || c.dst != block) continue;
    for (size_t j = i + 1; j < pending_copies_.size(); ++j)
      if (!copy_reads_host_tier(pending_copies_[j].kind) && pending_copies_[j].src == block) return;
    pending_copies_.erase(pending_copies_.begin() + long(i));
    return;
  }
}

// ---------------------------------------------------------------- sealing

void BlockManager::seal(SeqTables &tables, const std::string &salt, const int32_t *tokens,
                        uint32_t num_computed) {
  for (uint32_t g = 0; g < tables.size(); ++g) {
    BlockTable &t = tables[g];
    seal_group(g, t, salt, tokens, num_computed);
    if (!windows_[g]) continue;
    // Blocks before the window go back (sealed ones stay cached for other prompts), the latest
    // first as in free(); those before them went back earlier.
    const uint32_t first = std::min<uint32_t>(first_held(g, num_computed), t.ids.size());
    for (uint32_t j = first; j-- > 0 && t.ids[j] >= 0;) {
      drop_ref(t.ids[j]);
      t.ids[j] = -1;
    }
  }
}

void BlockManager::seal_group(uint32_t group, BlockTable &table, const std::string &salt,
                              const int32_t *tokens, uint32_t num_computed) {
  if (!prefix_caching_) return;
  const uint32_t full = num_computed / block_size_;
  // Chunks of blocks: their chained hashes first (they need no tree), with their table slots
  // prefetched, then the inserts, which then rarely wait on memory.
  constexpr uint32_t kChunk = 32;
  uint64_t hashes[kChunk];
  uint32_t j = table.num_sealed;
  // The last sealed block is held in every group (first_held): the parent of the next one.
  uint64_t parent_hash = j == 0 ? root_hash(seed_, salt.data(), salt.size())
                                : tree_.hash(pool_.node(table.ids[j - 1]));
  while (j < full) {
    const uint32_t n = std::min(kChunk, full - j);
    for (uint32_t i = 0; i < n; ++i) {
      parent_hash =
          block_hash(seed_, parent_hash, tokens + size_t(j + i) * block_size_, block_size_);
      hashes[i] = parent_hash;
      tree_.prefetch_slot(kNoNode, parent_hash);  // a hint: exact unless PKV_DEBUG_CONSTANT_HASH
    }
    for (uint32_t i = 0; i < n; ++i, ++j) {
      const int32_t block = table.ids[j];
      if (pool_.node(block) != kNoNode) continue;  // shared with a sequence that sealed it
      const int32_t *block_tokens = tokens + size_t(j) * block_size_;
      const uint32_t parent =
          j == 0 ? tree_.get_or_add_root(salt, group) : pool_.node(table.ids[j - 1]);
      PKV_ASSERT(parent != kNoNode);
      uint32_t node = tree_.find_child(parent, hashes[i], block_tokens);
      // Same-step duplicates (two prompts computed the same block) become copies of one node.
      if (node == kNoNode) {
        node = tree_.add_child(parent, hashes[i], block_tokens);
        if (collect_sealed_) sealed_.push_back({block, j, hashes[i], tree_.hash(parent)});
      }
      tree_.add_copy(node, block);
      pool_.set_node(block, node);
    }
  }
  if (full > table.num_sealed) table.num_sealed = full;
}

void BlockManager::reset_cache() {
  // Sealed blocks in use keep their nodes; if there are none, the cache ends empty and one
  // ALL_CLEARED says so instead of an event per node. Both tiers are cleared; nothing is offloaded.
  uint32_t sealed_in_use = 0;
  for (uint32_t b = 0; b < pool_.num_blocks(); ++b)
    sealed_in_use += pool_.ref(int32_t(b)) > 0 && pool_.node(int32_t(b)) != kNoNode;
  const bool all = sealed_in_use == 0;
  if (events_ && all) events_->mute(true);
  pool_.for_each_free([&](int32_t b) {
    if (pool_.node(b) != kNoNode) evict(b, false);
    return true;
  });
  host_.for_each_free([&](int32_t h) {
    if (host_.node(h) != kNoNode) evict_host(h);
    return true;
  });
  if (events_ && all) {
    events_->mute(false);
    events_->all_cleared();
  }
}

}  // namespace pkv
