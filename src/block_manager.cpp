#include "block_manager.h"

#include <algorithm>
#include <cstring>

#include "block_hash.h"
#include "status.h"

namespace pkv {
namespace {

// Makes room for n more elements with geometric growth, so the push_backs after it cannot throw
// (all-or-nothing) and repeated appends stay amortized O(1).
template <class T> void make_room(std::vector<T> &v, size_t n) {
  if (v.size() + n > v.capacity()) v.reserve(std::max(v.size() + n, 2 * v.capacity()));
}

}  // namespace

BlockManager::BlockManager(uint32_t num_blocks, uint32_t block_size, bool prefix_caching,
                           uint64_t hash_seed, bool constant_hash)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      prefix_caching_(prefix_caching),
      blocks_(size_t(num_blocks) + 1),
      num_free_(num_blocks),
      seed_(hash_seed),
      tree_(block_size, hash_seed, constant_hash, num_blocks) {
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

void BlockManager::reserve(Sequence &seq, const Admission &plan) {
  seq.block_table.reserve(plan.hit_blocks.size() + plan.num_new_blocks);
  // Hits first: they leave the free list before any pop could evict them.
  for (int32_t b : plan.hit_blocks) {
    add_ref(b);
    seq.block_table.push_back(b);
  }
  for (uint32_t i = 0; i < plan.num_new_blocks; ++i) seq.block_table.push_back(pop_free());
}

void BlockManager::admit(Sequence &seq) {
  PKV_ASSERT(seq.block_table.empty() && !seq.tokens.empty());
  Admission plan = plan_admission(seq.salt, seq.tokens.data(), seq.num_tokens());
  check_space(plan.num_free_needed, "admitting the prompt");
  reserve(seq, plan);
  const uint32_t hit_tokens = static_cast<uint32_t>(plan.hit_blocks.size()) * block_size_;
  seq.num_cached = hit_tokens;
  seq.num_computed = hit_tokens;
  seq.num_sealed_blocks = static_cast<uint32_t>(plan.hit_blocks.size());
  if (prefix_caching_) {
    stats_.prefix_query_tokens += seq.num_tokens();
    stats_.prefix_hit_tokens += hit_tokens;
  }
}

// ---------------------------------------------------------------- append, fork, free

void BlockManager::append(Sequence &seq, const int32_t *tokens, uint32_t n) {
  const uint32_t old_len = seq.num_tokens();
  const uint32_t have = static_cast<uint32_t>(seq.block_table.size());
  const uint32_t need = blocks_for_tokens(uint64_t(old_len) + n, block_size_) - have;
  // Writing into a partly filled last block that another sequence also references (a fork)
  // would change that sequence's KV: copy it first.
  const bool cow = old_len % block_size_ != 0 && blocks_[seq.block_table.back()].ref > 1;
  check_space(need + (cow ? 1 : 0), "appending the tokens");
  make_room(seq.tokens, n);
  make_room(seq.block_table, need);
  make_room(pending_copies_, 1);
  if (cow) {
    int32_t src = seq.block_table.back();
    int32_t dst = pop_free();
    pending_copies_.push_back({src, dst});
    drop_ref(src);
    seq.block_table.back() = dst;
    stats_.num_cow_copies++;
  }
  for (uint32_t i = 0; i < need; ++i) seq.block_table.push_back(pop_free());
  seq.tokens.insert(seq.tokens.end(), tokens, tokens + n);
}

void BlockManager::fork(const Sequence &child) {
  for (int32_t b : child.block_table) add_ref(b);
}

void BlockManager::free_blocks(Sequence &seq) {
  // Reverse table order: the sequence's last blocks reach the free list's tail first, so they
  // are evicted before its first blocks, which other prompts are likelier to share.
  for (auto it = seq.block_table.rbegin(); it != seq.block_table.rend(); ++it) drop_ref(*it);
  seq.block_table.clear();
  seq.num_computed = 0;
  seq.num_sealed_blocks = 0;
}

// ---------------------------------------------------------------- sealing

void BlockManager::seal(Sequence &seq) {
  if (!prefix_caching_) return;
  const uint32_t full = seq.num_computed / block_size_;
  // Chunks of blocks: their chained hashes first (they need no tree), with their table slots
  // prefetched, then the inserts, which then rarely wait on memory.
  constexpr uint32_t kChunk = 32;
  uint64_t hashes[kChunk];
  uint32_t j = seq.num_sealed_blocks;
  uint64_t parent_hash = j == 0 ? root_hash(seed_, seq.salt.data(), seq.salt.size())
                                : tree_.hash(blocks_[seq.block_table[j - 1]].node);
  while (j < full) {
    const uint32_t n = std::min(kChunk, full - j);
    for (uint32_t i = 0; i < n; ++i) {
      parent_hash = block_hash(seed_, parent_hash, seq.tokens.data() + size_t(j + i) * block_size_, block_size_);
      hashes[i] = parent_hash;
      tree_.prefetch_slot(kNoNode, parent_hash);  // a hint: exact unless PKV_DEBUG_CONSTANT_HASH
    }
    for (uint32_t i = 0; i < n; ++i, ++j) {
      const int32_t block = seq.block_table[j];
      if (blocks_[block].node != kNoNode) continue;  // shared with a sequence that sealed it
      const int32_t *block_tokens = seq.tokens.data() + size_t(j) * block_size_;
      const uint32_t parent = j == 0 ? tree_.get_or_add_root(seq.salt) : blocks_[seq.block_table[j - 1]].node;
      PKV_ASSERT(parent != kNoNode);
      uint32_t node = tree_.find_child(parent, hashes[i], block_tokens);
      // Same-step duplicates (two prompts computed the same block) become copies of one node.
      if (node == kNoNode) node = tree_.add_child(parent, hashes[i], block_tokens);
      tree_.add_copy(node, block);
      blocks_[block].node = node;
    }
  }
  if (full > seq.num_sealed_blocks) seq.num_sealed_blocks = full;
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

// ---------------------------------------------------------------- copies

std::vector<BlockCopy> BlockManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(pending_copies_);
  return out;
}

void BlockManager::return_copies(std::vector<BlockCopy> copies) {
  // Copies queued meanwhile come after the returned ones: order matters for chained copies.
  copies.insert(copies.end(), pending_copies_.begin(), pending_copies_.end());
  pending_copies_.swap(copies);
}

}  // namespace pkv

// ---------------------------------------------------------------- invariants (O(pool): tests)

namespace pkv {

void BlockManager::check(const std::unordered_map<uint64_t, Sequence> &seqs) const {
  std::vector<int64_t> refs(num_blocks_, 0);
  for (const auto &[id, seq] : seqs) {
    const uint32_t expect = seq.preempted ? 0 : blocks_for_tokens(seq.num_tokens(), block_size_);
    if (seq.block_table.size() != expect)
      fail(PKV_ERR_INTERNAL, "seq %llu: %zu blocks for %u tokens", (unsigned long long)id,
           seq.block_table.size(), seq.num_tokens());
    if (seq.num_computed > seq.num_tokens())
      fail(PKV_ERR_INTERNAL, "seq %llu: more computed than tokens", (unsigned long long)id);
    if (prefix_caching_ && seq.num_sealed_blocks != seq.num_computed / block_size_)
      fail(PKV_ERR_INTERNAL, "seq %llu: %u sealed blocks, %u full computed ones",
           (unsigned long long)id, seq.num_sealed_blocks, seq.num_computed / block_size_);
    for (int32_t b : seq.block_table) {
      if (b < 0 || uint32_t(b) >= num_blocks_)
        fail(PKV_ERR_INTERNAL, "seq %llu: block id %d out of range", (unsigned long long)id, b);
      refs[b]++;
    }
    // Sealed blocks are copies of the nodes of exactly this sequence's prefix.
    uint32_t parent = seq.num_sealed_blocks ? tree_.find_root(seq.salt) : kNoNode;
    for (uint32_t j = 0; j < seq.num_sealed_blocks; ++j) {
      uint32_t node = blocks_[seq.block_table[j]].node;
      if (node == kNoNode || !tree_.is_live(node) || tree_.parent(node) != parent ||
          std::memcmp(tree_.tokens(node), seq.tokens.data() + size_t(j) * block_size_,
                      sizeof(int32_t) * block_size_) != 0)
        fail(PKV_ERR_INTERNAL, "seq %llu: block %u is not a copy of its prefix's node",
             (unsigned long long)id, j);
      parent = node;
    }
    // No write into a shared or sealed block: every slot still to compute is in a private block.
    const uint32_t end = seq.preempted ? 0 : seq.num_tokens();  // preempted: no blocks
    for (uint32_t pos = seq.num_computed; pos < end; ++pos) {
      int32_t b = seq.block_table[pos / block_size_];
      if (blocks_[b].ref != 1 || blocks_[b].node != kNoNode)
        fail(PKV_ERR_INTERNAL, "seq %llu: uncomputed token %u lies in shared or sealed block %d",
             (unsigned long long)id, pos, b);
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
  tree_.check();
}

}  // namespace pkv
