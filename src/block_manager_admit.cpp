// BlockManager's admission (block_manager.h): the kinds' rules per group (block_kinds.h), the
// walk of a prompt through the prefix tree, the plan of an admission and its reservation.
#include "block_manager.h"

#include <algorithm>

#include "block_hash.h"
#include "params.h"
#include "status.h"

namespace pkv {

// ---------------------------------------------------------------- the kinds' rules

bool BlockManager::any_windowed() const {
  return std::any_of(kinds_.begin(), kinds_.end(),
                     [](const GroupKind &k) { return k.rules().gives_back; });
}

uint32_t BlockManager::first_held(uint32_t group, uint64_t next) const {
  const GroupKind &k = kinds_[group];
  const uint32_t first = k.first_needed(next, block_size_);
  if (!prefix_caching_ || !k.rules().holds_blocks || first == 0) return first;
  // The last sealed block stays: it is the parent of the next block sealed.
  const uint32_t sealed = static_cast<uint32_t>(next / block_size_);
  return std::min(first, sealed ? sealed - 1 : 0);
}

bool BlockManager::admits_per_chunk() const {
  return std::any_of(kinds_.begin(), kinds_.end(), [](const GroupKind &k) {
    return k.rules().gives_back && k.rules().holds_blocks;
  });
}

uint64_t BlockManager::peak_blocks(uint32_t prompt, uint64_t total, uint32_t max_chunk) const {
  uint64_t at_end = 0, holding = 0, per_chunk = 0;
  const uint64_t bs = block_size_, all = (total + bs - 1) / bs;
  for (const GroupKind &k : kinds_) {
    at_end += k.max_blocks(total, block_size_);
    holding += k.rules().holds_blocks;
    if (!max_chunk || !k.rules().holds_blocks) continue;
    // Per chunk of up to B = max_chunk tokens, a group's own peak is the larger of its decode
    // peak and its peak while a chunk is reserved, not yet computed (what fell out of the
    // window is given back only then): the kind's rule (window + B - 1 keys for a window,
    // chunk + B - 1 for a chunk: block_kind_*.h), or, with prefix caching, the core's rule that
    // the last sealed block stays (first_held): from the block before the chunk's first, at
    // worst at its block's last slot, ceil((bs - 1 + B) / bs) + 1 blocks. Full groups: all.
    uint64_t chunk = k.max_blocks_chunk(total, max_chunk, block_size_);
    if (prefix_caching_ && k.rules().gives_back)
      chunk = std::max(chunk, std::min(all, (bs - 1 + max_chunk + bs - 1) / bs + 1));
    per_chunk += std::max(k.max_blocks(total, block_size_), chunk);
  }
  // Each group's peak, summed: the full groups' is at the end, a windowed group's may come at
  // any chunk of a prefill or of a recompute after preemption (whose tokens reach total - 1), so
  // the sum bounds every step and no request that can run is refused by more than a block or
  // two per windowed group (the chunk's alignment at the end).
  if (max_chunk) return per_chunk;
  return std::max<uint64_t>(holding * blocks_for_tokens(prompt, block_size_), at_end);
}

// ---------------------------------------------------------------- admission

void BlockManager::walk(uint32_t group, const PrefixKeys &keys, const int32_t *tokens,
                        uint32_t max_hits, std::vector<uint32_t> *nodes,
                        std::vector<int32_t> *picks) const {
  uint32_t node = tree_.find_root(keys, group);
  if (node == kNoNode || !max_hits) return;
  const bool windowed = kinds_[group].rules().gives_back;
  // The chained hashes do not depend on the tree, so the walk computes them kAhead blocks
  // early and starts loading those blocks' table slots and node tokens from memory.
  constexpr uint32_t kAhead = 8;
  uint64_t ahead[kAhead];
  std::string ahead_extra[kAhead];  // each block's extra bytes, made once (empty for text)
  uint64_t last = tree_.hash(node);
  uint32_t hashed = 0;  // blocks whose hash is computed (and slot prefetched)
  nodes->reserve(max_hits);
  picks->reserve(max_hits);
  for (uint32_t j = 0; j < max_hits; ++j) {
    // The window grows with the hits: a prompt that misses at once hashes one block or two.
    const uint32_t want = std::min({max_hits, j + 1 + kAhead - 1, 2 * j + 2});
    for (; hashed < want; ++hashed) {
      std::string &extra = ahead_extra[hashed % kAhead];
      extra = keys.block_extra(hashed * block_size_, block_size_);
      last = block_hash(seed_, last, tokens + size_t(hashed) * block_size_, block_size_,
                        extra.data(), extra.size());
      ahead[hashed % kAhead] = last;
      tree_.prefetch_slot(node, last);
    }
    const uint64_t hash = ahead[j % kAhead];
    if (j + kAhead / 2 < hashed) tree_.prefetch_node(node, ahead[(j + kAhead / 2) % kAhead]);
    const uint32_t child =
        tree_.find_child(node, hash, tokens + size_t(j) * block_size_, ahead_extra[j % kAhead]);
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

BlockManager::Admission BlockManager::plan_admission(const PrefixKeys &keys, const int32_t *tokens,
                                                     uint32_t n, uint32_t max_chunk) const {
  PKV_ASSERT(max_chunk > 0);
  Admission plan;
  const uint32_t groups = num_groups();
  uint32_t limit = max_hits(n);
  plan.groups.resize(groups);
  for (uint32_t g = 0; g < groups && limit; ++g) {
    if (!holds_blocks(g)) continue;  // a hit needs nothing of a shared group
    GroupHits &gh = plan.groups[g];
    walk(g, keys, tokens, limit, &gh.nodes, &gh.blocks);
    limit = std::min<uint32_t>(limit, gh.blocks.size());  // no node past the walk's end
  }
  // Groups that give blocks back: a hit of h blocks needs blocks first_held .. h-1 (their kind's
  // rule). missing[g][j]: blocks before j holding no KV, so each boundary is tried in O(groups).
  // (Nothing is allocated without windows: an admission's cost is flat, DESIGN.md §10.)
  const bool windowed = any_windowed();
  std::vector<std::vector<uint32_t>> missing;
  auto partial = [&](uint32_t g) { return kinds_[g].rules().gives_back && holds_blocks(g); };
  if (windowed && limit) {
    missing.resize(groups);
    for (uint32_t g = 0; g < groups; ++g) {
      if (!partial(g)) continue;
      missing[g].assign(limit + 1, 0);
      for (uint32_t j = 0; j < limit; ++j)
        missing[g][j + 1] = missing[g][j] + (plan.groups[g].blocks[j] == -2);
    }
  }
  auto kv_holds = [&](uint32_t h) {
    if (!windowed) return true;
    for (uint32_t g = 0; g < groups; ++g)
      if (partial(g) && missing[g][h] != missing[g][first_held(g, uint64_t(h) * block_size_)])
        return false;
    return true;
  };
  uint32_t h = limit;
  while (h > 0 && !kv_holds(h)) --h;
  plan.kv_hits = h;
  if (has_state_ && h) {
    // The recurrent state (DESIGN.md §13): a hit also needs a checkpoint at its boundary, held
    // by the anchor group's node of block h-1.
    const std::vector<uint32_t> &nodes = plan.groups[anchor_].nodes;
    while (h > 0 && !(tree_.state(nodes[h - 1]) != kNoCheckpoint && kv_holds(h))) --h;
    plan.checkpoint = h ? tree_.state(nodes[h - 1]) : kNoCheckpoint;
  }
  plan.num_hits = h;
  // The hit and the first chunk get slots (a hit leaves at least one token to compute).
  plan.num_tokens = uint32_t(std::min<uint64_t>(n, uint64_t(h) * block_size_ + max_chunk));
  const uint32_t total = blocks_for_tokens(plan.num_tokens, block_size_);
  plan.num_blocks = total;
  for (uint32_t g = 0; g < groups; ++g) {
    GroupHits &gh = plan.groups[g];
    if (!holds_blocks(g)) {  // all of its table given back: nothing hit, nothing new
      gh.first = total;
      continue;
    }
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

std::unordered_set<int32_t> BlockManager::host_hits(const Admission &plan) const {
  std::unordered_set<int32_t> out;
  for (const GroupHits &gh : plan.groups)
    for (size_t i = 0; i < gh.blocks.size(); ++i)
      if (gh.blocks[i] < 0) out.insert(tree_.host(gh.nodes[i]));
  return out;
}

void BlockManager::reserve(SeqTables &tables, const Admission &plan) {
  const uint32_t total = plan.num_blocks;
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
  prefetch_pops(plan.num_loads + plan.num_new_blocks);
  for (uint32_t g = 0; g < num_groups(); ++g) {
    const GroupHits &gh = plan.groups[g];
    BlockTable &table = out[g];
    table.ids.assign(gh.first, -1);  // before the window or chunk (a shared group: all): not held
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
    while (table.ids.size() < total) table.ids.push_back(pop_free());  // none when shared
    table.num_sealed = plan.num_hits;
  }
  for (const GroupHits &gh : plan.groups)  // back to the host tier's LRU, as its newest
    for (size_t i = 0; i < gh.blocks.size(); ++i)
      if (gh.blocks[i] < 0) host_.drop_ref(tree_.host(gh.nodes[i]));
  tables.swap(out);
}

uint32_t BlockManager::admit(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens,
                             uint32_t n, uint32_t max_chunk) {
  PKV_ASSERT(tables.empty() && n > 0);
  Admission plan = plan_admission(keys, tokens, n, max_chunk);
  check_space(plan.num_free_needed, "admitting the prompt");
  reserve(tables, plan);
  const uint32_t hit_tokens = plan.num_hits * block_size_;
  if (prefix_caching_) {
    // A hit token is served by the host tier when a group loaded its block, and by the store
    // when one of those loads is a block the store gave (its first load since it was staged).
    std::vector<uint8_t> loaded(plan.num_hits, 0);  // 1: the host tier's, 2: the store's
    for (const GroupHits &gh : plan.groups)
      for (size_t i = 0; i < gh.blocks.size(); ++i) {
        if (gh.blocks[i] >= 0) continue;
        uint8_t &from = host_from_store_[tree_.host(gh.nodes[i])];
        loaded[gh.first + i] = std::max<uint8_t>(loaded[gh.first + i], from ? 2 : 1);
        from = 0;
      }
    stats_.prefix_query_tokens += n;
    stats_.prefix_hit_tokens += hit_tokens;
    for (uint8_t l : loaded)
      (l == 2 ? stats_.store_hit_tokens : stats_.host_hit_tokens) += l ? block_size_ : 0;
  }
  last_loads_ = plan.num_loads;
  last_tokens_ = plan.num_tokens;
  last_checkpoint_ = plan.checkpoint;
  last_kv_hits_ = plan.kv_hits;
  if (has_state_ && prefix_caching_) {
    // The checkpoint's node holds a hit block (referenced now): no pop above could evict it.
    if (plan.checkpoint != kNoCheckpoint) {
      const bool host = is_host_checkpoint(plan.checkpoint);
      (host ? host_checkpoints_ : checkpoints_).touch(checkpoint_slot(plan.checkpoint));
      stats_.num_state_restores++;
      stats_.num_state_restores_from_host += host;
    }
    stats_.state_fallback_tokens += uint64_t(plan.kv_hits - plan.num_hits) * block_size_;
  }
  return hit_tokens;
}

}  // namespace pkv
