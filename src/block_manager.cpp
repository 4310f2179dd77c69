// BlockManager's core (block_manager.h): the pool's blocks and their ref counts, append (with
// copy-on-write) / fork / free / truncate, and sealing. Admission through the prefix cache and
// the kinds' rules are in block_manager_admit.cpp, the host tier in block_manager_host.cpp, the
// blocks staged from the store in tiers/store_staging.cpp, the invariants in
// block_manager_check.cpp.
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
                           bool offload, std::vector<GroupKind> kinds)
    : kinds_(std::move(kinds)),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      offload_(offload && prefix_caching && host_num_blocks > 0),
      host_from_store_(host_num_blocks, 0),
      seed_(hash_seed),
      pool_(num_blocks),
      host_(host_num_blocks),
      tree_(block_size, hash_seed, constant_hash, size_t(num_blocks) + host_num_blocks) {}

// ---------------------------------------------------------------- taking and evicting blocks

int32_t BlockManager::pop_free() {
  if (ahead_left_) {  // a reservation's pops: keep the loads ahead of them going
    ahead_left_--;
    advance_ahead();
  }
  const int32_t block = pool_.head();
  PKV_ASSERT(block >= 0);
  if (pool_.node(block) != kNoNode) {
    count_eviction(block);
    evict(block, offload_);
  }
  return pool_.take();
}

// A full pool's free list is its cached blocks in LRU order, at random places in arrays as large
// as the pool; each pop evicts one, reading its list entry, its prefix node (copies inline), its
// parent's entry (a child less) and its child-table slot. Read pop after pop, those misses came
// in series and made admission cost grow with the pool (0.3.0: 1.7x from 4k to 512k blocks,
// bench_block_manager). So while a reservation pops, two cursors run ahead on the list: the far
// one (2 * kAhead pops ahead) asks for the node's entry, the near one (kAhead ahead) reads it,
// now in cache, and asks for the node's slot and its parent's entry; each pop then finds its
// lines loaded. Only hints: nothing changes. (A ring of the order cached blocks joined, read
// ahead instead of walking the list, was tried: its guesses were exact, and it measured no
// faster. At 512k blocks the prefetches wait for free miss buffers: the lines a request touches
// cost, not the order it reaches them in.)
void BlockManager::prefetch_pops(uint32_t n) {
  ahead_left_ = pool_.num_cached() ? n : 0;  // no cached block: no eviction to prepare
  ahead_far_ = ahead_near_ = ahead_left_ ? pool_.head() : -1;
  for (uint32_t i = 0; i < 2 * kAhead && ahead_far_ >= 0; ++i) advance_far();
  for (uint32_t i = 0; i < kAhead && ahead_near_ >= 0; ++i) advance_near();
}

void BlockManager::advance_far() {
  const uint32_t node = pool_.node(ahead_far_);
  if (node != kNoNode) tree_.prefetch_node_entry(node);  // an address only
  ahead_far_ = pool_.next_free(ahead_far_);
}

void BlockManager::advance_near() {
  const uint32_t node = pool_.node(ahead_near_);
  if (node != kNoNode) {
    tree_.prefetch_slot(tree_.parent(node), tree_.hash(node));
    tree_.prefetch_node_entry(tree_.parent(node));  // its child count drops
  }
  ahead_near_ = pool_.next_free(ahead_near_);
}

void BlockManager::advance_ahead() {
  if (ahead_far_ >= 0) advance_far();
  if (ahead_near_ >= 0) advance_near();
}

void BlockManager::drop_ref(int32_t block) {
  // At 0 its KV may be overwritten from now on: no longer a twin.
  if (pool_.drop_ref(block, releasing_)) forget_device_twin(block);
}

void BlockManager::check_space(uint32_t needed, const char *what) const {
  if (needed > pool_.num_free())
    fail(PKV_ERR_NO_SPACE, "%s needs %u free blocks, %u are free (of %u)", what, needed,
         pool_.num_free(), pool_.num_blocks());
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
  // A shared group holds no block: it takes none and copies none.
  auto cow = [&](uint32_t g) {
    const BlockTable &t = tables[g];
    return holds_blocks(g) && num_slotted % block_size_ != 0 &&
           (pool_.ref(t.ids.back()) > 1 || pool_.node(t.ids.back()) != kNoNode);
  };
  uint32_t needed = 0;
  for (uint32_t g = 0; g < num_groups(); ++g)
    needed += (holds_blocks(g) ? need : 0) + (cow(g) ? 1 : 0);
  check_space(needed, "appending the tokens");
  for (BlockTable &t : tables) make_room(t.ids, need);
  make_room(pending_copies_, 2 * size_t(needed));  // the copies-on-write, an offload per eviction
  prefetch_pops(needed);
  for (uint32_t g = 0; g < num_groups(); ++g)
    reserve_group_slots(g, tables[g], num_slotted, need, cow(g));
}

void BlockManager::reserve_group_slots(uint32_t group, BlockTable &table, uint32_t num_slotted,
                                       uint32_t need, bool cow) {
  if (!holds_blocks(group)) {
    table.ids.insert(table.ids.end(), need, -1);
    return;
  }
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

void BlockManager::truncate(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens,
                            uint32_t keep, uint32_t computed, size_t taken) {
  if (tables.empty()) return;
  const uint32_t need = blocks_for_tokens(keep, block_size_);
  const uint64_t next = std::min(computed, keep);
  // Groups that gave blocks back take back those the kept tokens' window or chunk needs again,
  // from the prefix cache, as an admission would: all are found (and room for the loads) before
  // anything changes. A shared group needs none.
  struct Revive {
    uint32_t group, index, node;
    int32_t block;  // the pool copy shared, or -1: a load from the host tier
  };
  std::vector<Revive> revive;
  uint32_t needed = 0;
  for (uint32_t g = 0; g < num_groups(); ++g) {
    if (!kinds_[g].rules().gives_back || !holds_blocks(g)) continue;
    const BlockTable &t = tables[g];
    const uint32_t first = first_held(g, next);
    uint32_t end = first;
    while (end < need && t.ids[end] < 0) end++;
    if (end == first) continue;
    std::vector<uint32_t> nodes;
    std::vector<int32_t> picks;
    if (prefix_caching_) walk(g, keys, tokens, end, &nodes, &picks);
    for (uint32_t j = first; j < end; ++j) {
      if (j >= picks.size() || picks[j] == -2)
        fail(PKV_ERR_STATE,
             "truncating to %u tokens needs block %u of KV group %u (%s of %u tokens) again, and "
             "no tier holds its KV any more: preempt and resume the sequence instead (it "
             "recomputes)",
             keep, j, g, kinds_[g].rules().name, kinds_[g].span);
      revive.push_back({g, j, nodes[j], picks[j]});
      needed += picks[j] < 0 || pool_.ref(picks[j]) == 0;
    }
  }
  if (!revive.empty()) {
    check_space(needed, "taking back the blocks of the window or chunk");
    make_room(pending_copies_, 2 * revive.size());  // a load, an offload per eviction
    // Held first, so no pop below evicts one: pool copies, and host copies to load (a pop's
    // offload may otherwise take the host block before its load is queued), as reserve() does.
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
      if (!copy_reads_host(pending_copies_[j].kind) && pending_copies_[j].src == block) return;
    pending_copies_.erase(pending_copies_.begin() + long(i));
    return;
  }
}

// ---------------------------------------------------------------- sealing

void BlockManager::seal(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens,
                        uint32_t num_computed) {
  for (uint32_t g = 0; g < tables.size(); ++g) {
    BlockTable &t = tables[g];
    seal_group(g, t, keys, tokens, num_computed);
  }
  give_back_behind(tables, num_computed);
}

void BlockManager::give_back_behind(SeqTables &tables, uint64_t next) {
  for (uint32_t g = 0; g < tables.size(); ++g) {
    if (!kinds_[g].rules().gives_back) continue;
    BlockTable &t = tables[g];
    // Blocks before the window or chunk go back (sealed ones stay cached for other prompts), the
    // latest first as in free(); those before them went back earlier.
    const uint32_t first = std::min<uint32_t>(first_held(g, next), t.ids.size());
    for (uint32_t j = first; j-- > 0 && t.ids[j] >= 0;) {
      drop_ref(t.ids[j]);
      t.ids[j] = -1;
    }
  }
}

void BlockManager::seal_group(uint32_t group, BlockTable &table, const PrefixKeys &keys,
                              const int32_t *tokens, uint32_t num_computed) {
  if (!prefix_caching_) return;
  const uint32_t full = num_computed / block_size_;
  if (!holds_blocks(group)) {  // nothing to seal: it counts the blocks its tokens fill
    table.num_sealed = std::max(table.num_sealed, full);
    return;
  }
  // Chunks of blocks: their chained hashes first (they need no tree), with their table slots
  // prefetched, then the inserts, which then rarely wait on memory.
  constexpr uint32_t kChunk = 256;  // a long prefill's blocks: the slots load while the rest hash
  uint64_t hashes[kChunk];
  uint32_t j = table.num_sealed;
  // The last sealed block is held in every group (first_held): the parent of the next one. A
  // table sealed from 0 again (a swap-in) may start with given-back blocks (-1): their nodes are
  // found, or made anew without KV (kept by the held child sealed after them), so the held ones
  // hang under their prefix as an admission's walk expects. A receiving sequence gave back its
  // hit's last block too (give_back_behind): it seals from 0 the same way.
  if (j > 0 && table.ids[j - 1] < 0) j = 0;
  uint32_t parent = j == 0 ? kNoNode : pool_.node(table.ids[j - 1]);  // kNoNode at 0: the root
  uint64_t parent_hash = j == 0 ? root_hash(seed_, keys.salt.data(), keys.salt.size(), keys.lora_id)
                                : tree_.hash(parent);
  while (j < full) {
    const uint32_t n = std::min(kChunk, full - j);
    for (uint32_t i = 0; i < n; ++i) {
      const std::string extra = keys.block_extra((j + i) * block_size_, block_size_);
      parent_hash = block_hash(seed_, parent_hash, tokens + size_t(j + i) * block_size_,
                               block_size_, extra.data(), extra.size());
      hashes[i] = parent_hash;
      tree_.prefetch_slot(kNoNode, parent_hash);  // a hint: exact unless PKV_DEBUG_CONSTANT_HASH
      tree_.prefetch_new_node(i);                 // a hint: some blocks may be sealed already
    }
    for (uint32_t i = 0; i < n; ++i, ++j) {
      const int32_t block = table.ids[j];
      if (block >= 0 && pool_.node(block) != kNoNode) {  // shared with a sequence that sealed it
        parent = pool_.node(block);
        continue;
      }
      const int32_t *block_tokens = tokens + size_t(j) * block_size_;
      if (j == 0) parent = tree_.get_or_add_root(keys, group);
      PKV_ASSERT(parent != kNoNode);
      const std::string extra = keys.block_extra(j * block_size_, block_size_);
      uint32_t node = tree_.find_child(parent, hashes[i], block_tokens, extra);
      // Same-step duplicates (two prompts computed the same block) become copies of one node.
      if (node == kNoNode) {
        node = tree_.add_child(parent, hashes[i], block_tokens, extra);
        if (collect_sealed_ && block >= 0)
          sealed_.push_back({block, j, hashes[i], tree_.hash(parent), group});
      }
      if (block >= 0) {
        tree_.add_copy(node, block);
        pool_.set_node(block, node);
      }
      parent = node;
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
  // Checkpoints are cache too, those of nodes in use included (DESIGN.md §13).
  for (StateCheckpoints *tier : {&checkpoints_, &host_checkpoints_})
    while (tier->num_held()) {
      drop_checkpoint(tier->node(tier->oldest()));
      stats_.num_state_checkpoint_evictions++;
    }
  pool_.for_each_free([&](int32_t b) {
    if (pool_.node(b) == kNoNode) return true;
    count_eviction(b);
    evict(b, false);
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
