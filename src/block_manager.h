// The block manager (DESIGN.md §4, §11): which physical blocks each sequence uses, in the device
// pool and the host tier.
//
// In each tier a block is free (ref 0, nothing reusable), cached (ref 0, sealed KV a prefix node
// points at, evictable) or used (ref >= 1); see block_pool.h. Allocation takes the head of
// the pool's free list; a release appends the sequence's sealed blocks to the tail in reverse
// table order (its tail blocks are evicted first) and puts unsealed ones at the head (reused
// first). With a host tier, a sealed block evicted from the pool is offloaded: copied into a
// host-tier block that its node keeps (host cached blocks have their own LRU list), and a later
// prefix hit on that node loads it back into a pool block. Host-tier blocks in use (ref >= 1)
// hold swapped-out sequences. Every call is all-or-nothing: it checks that enough free blocks
// exist before it changes anything, and it is O(blocks touched), never O(pool).
//
// KV groups (DESIGN.md §12): a sequence has one table per group, all in the one pool, and each
// group caches its own blocks of a prefix (prefix-tree roots per salt and group). Each group has a
// kind (block_kinds.h: full, sliding window, chunked, shared) whose rules say which blocks it
// holds: with next the first token to compute, block j is held iff j >= first_held(g, next) - the
// kind's first block needed, but never past the last sealed block (the parent of the next block
// sealed); given-back entries are -1. A shared group holds none: every entry is -1.
//
// Recurrent state (DESIGN.md §13): with STATE layers, a prefix node of the anchor group (the first
// group holding blocks, a full one when there is one) may hold a checkpoint of the state at its
// block's end (state_checkpoints.h), and a hit of h blocks also needs one at boundary h.
//
// The core is block_manager.cpp; admission and the kinds' rules block_manager_admit.cpp; the host
// tier block_manager_host.cpp; the state's checkpoints block_manager_state.cpp; store staging
// tiers/store_staging.cpp; the invariants block_manager_check.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "prefix_tree.h"
#include "backend/copy_kind.h"
#include "block_kinds.h"
#include "block_pool.h"
#include "state_checkpoints.h"

namespace pkv {

// Makes room for n more elements with geometric growth, so the push_backs after it cannot throw
// (all-or-nothing) and repeated appends stay amortized O(1).
template <class T> void make_room(std::vector<T> &v, size_t n) {
  if (v.size() + n > v.capacity()) v.reserve(std::max(v.size() + n, 2 * v.capacity()));
}

// A sequence's blocks in one KV group, as the block manager keeps them. The owner (a Sequence)
// keeps the tokens; every call that needs them is passed them.
struct BlockTable {
  std::vector<int32_t> ids;  // physical blocks, in token order; -1: given back (block_kinds.h)
  uint32_t num_sealed = 0;   // leading blocks that are (or, given back, were) copies of
                             // prefix-tree nodes
};
// A sequence's tables, one per KV group; empty while it holds no blocks.
using SeqTables = std::vector<BlockTable>;

// A table's owner as check() sees it.
struct TableOwner {
  uint64_t id;
  const SeqTables *tables;
  const PrefixKeys *keys;
  const int32_t *tokens;
  uint32_t num_slotted;   // tokens the tables must cover (0 when they hold no blocks)
  uint32_t num_computed;  // of which computed
  // Where its windows are measured (first_held): its computed tokens, or a receiving
  // sequence's remote ones (it holds no block their windows do not reach)
  uint32_t window_next;
  const std::vector<int32_t> *host_table;  // host-tier blocks (swapped out), else empty
};

// A queued block copy; ids are in the tiers its kind names (PKV_COPY_*). Its source may be given
// up and handed out again at once: the copies of a step come, in order, before any write of it,
// so the copy reads the block before its new owner writes it (vLLM's blocks_to_swap_out).
struct BlockCopy {
  int32_t src;
  int32_t dst;
  int32_t kind;
};

// A prefix block leaving the host tier (for the store's write-back): its salt and adapter, the
// tokens of its prefix up to and including it and their blocks' extra bytes (empty when none has
// any), its host-tier block (its bytes are valid until the call returns) and its canonical
// hashes.
struct EvictedHostBlock {
  const std::string *salt;
  uint64_t lora_id;
  uint32_t group;  // its KV group
  std::vector<std::string> extras;
  std::vector<int32_t> tokens;
  int32_t host;
  uint64_t hash, parent_hash;
};

// A block sealed into a new prefix node (for the store's write-through): its pool block, its
// index in the sequence, and the node's canonical hashes (for KV events).
struct SealedBlock {
  int32_t block;
  uint32_t index;
  uint64_t hash, parent_hash;
  uint32_t group;  // its KV group
};

struct BlockStats {
  uint64_t prefix_query_tokens = 0;
  uint64_t prefix_hit_tokens = 0;
  uint64_t num_evictions = 0;
  uint64_t num_cow_copies = 0;
  uint64_t num_preemptions = 0;
  uint64_t num_swapped_out_blocks = 0;
  uint64_t num_swapped_in_blocks = 0;
  uint64_t host_hit_tokens = 0;   // of prefix_hit_tokens, loaded from the host tier
  uint64_t store_hit_tokens = 0;  // of prefix_hit_tokens, the store's blocks' first loads
  uint64_t num_offloaded_blocks = 0;
  uint64_t num_loaded_blocks = 0;
  uint64_t num_host_evictions = 0;
  uint64_t num_state_checkpoints_taken = 0;
  uint64_t num_state_checkpoint_evictions = 0;
  uint64_t num_state_restores = 0;
  uint64_t state_fallback_tokens = 0;
  uint64_t num_state_checkpoints_offloaded = 0;
  uint64_t num_state_restores_from_host = 0;
  // num_evictions by the priority the block had when evicted: [priority -
  // PKV_CACHE_PRIORITY_MIN]
  uint64_t num_evictions_by_priority[PKV_CACHE_PRIORITY_MAX - PKV_CACHE_PRIORITY_MIN + 1] = {};
};

class BlockManager {
 public:
  // offload: sealed blocks evicted from the pool go to the host tier (when it has blocks).
  // kinds: each KV group's kind (group_kinds(KvGroups)); one full-attention group by default.
  BlockManager(uint32_t num_blocks, uint32_t block_size, bool prefix_caching, uint64_t hash_seed,
               bool constant_hash, uint32_t host_num_blocks, bool offload,
               std::vector<GroupKind> kinds = {GroupKind{}});

  // One group's hits of an admission: blocks [first, num_hits) of the prompt (a group that gives
  // blocks back needs none before first; a shared group's first is the prompt's block count).
  struct GroupHits {
    uint32_t first = 0;
    std::vector<int32_t> blocks;  // the pool block of each hit; -1: a load from the host tier
    std::vector<uint32_t> nodes;  // the prefix node of each hit
  };
  // What admitting these tokens under this salt would take: the cached blocks it would reuse and
  // how many free blocks it would consume. A hit of h blocks needs every group to hold blocks
  // first_held(g, h * block_size) .. h-1 (its kind's rule: all of them under full attention);
  // the longest h that every group allows is taken, trying each block boundary.
  struct Admission {
    uint32_t num_hits = 0;          // leading blocks of the prompt the cache serves
    uint32_t num_tokens = 0;        // the tokens given slots: the prompt, or its hit + first chunk
    uint32_t num_blocks = 0;        // their blocks: each table's length
    std::vector<GroupHits> groups;  // [num_groups]
    uint32_t num_loads = 0;
    uint32_t num_new_blocks = 0;  // in all groups
    uint32_t num_free_needed =
        0;  // new blocks + loads + cached hit blocks revived from the free list
    // With STATE layers: the hit the KV alone allows, and the checkpoint at boundary num_hits
    // that the new working state starts from (a CheckpointRef; -1: none, computed from token 0).
    uint32_t kv_hits = 0;
    int32_t checkpoint = -1;
  };
  // max_chunk: admission per chunk (DESIGN.md §7) gives slots to the hit and the next max_chunk
  // tokens only (the rest get theirs from reserve_slots, chunk by chunk); UINT32_MAX: all n.
  Admission plan_admission(const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                           uint32_t max_chunk = UINT32_MAX) const;
  // The host-tier blocks a plan's hits would load, in every group.
  std::unordered_set<int32_t> host_hits(const Admission &plan) const;

  // Gives empty tables the blocks of n tokens (of the hit and max_chunk more: plan_admission):
  // prefix hits (pool blocks shared, host-tier ones loaded into new pool blocks), then new
  // blocks. Returns the tokens whose KV the hits hold. Throws PKV_ERR_NO_SPACE with nothing
  // changed.
  uint32_t admit(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                 uint32_t max_chunk = UINT32_MAX);
  // The tokens the last successful admit gave slots to.
  uint32_t last_admission_tokens() const { return last_tokens_; }
  // Of the last successful admit's hits, how many were loaded from the host tier.
  uint32_t last_admission_loads() const { return last_loads_; }
  // The last successful admit's checkpoint (a CheckpointRef, state_checkpoints.h; -1: none) and
  // the hit its KV alone allowed (blocks).
  int32_t last_admission_checkpoint() const { return last_checkpoint_; }
  uint32_t last_admission_kv_hits() const { return last_kv_hits_; }
  // The last admission does not restore its checkpoint after all (a receiving request's state
  // arrives from elsewhere): it is not counted as a restore.
  void forgo_restore();

  // ---------------------------------------------------------------- recurrent state
  // An engine with STATE layers: checkpoint slots first .. first + count - 1 of the state region,
  // taken where the policy (PKV_STATE_CHECKPOINT_*, interval for EVERY) wants them. Without
  // prefix caching, or with policy NONE or no slots, there are none and no admission hits.
  // host_count host state slots from host_first take the checkpoints evicted from the device
  // (offload; 0: they are dropped).
  void enable_state(int32_t first_slot, uint32_t count, uint32_t policy, uint32_t interval,
                    int32_t host_first = 0, uint32_t host_count = 0);
  bool has_state() const { return has_state_; }
  // Whether a sequence wants a checkpoint at block boundary b, given the last boundary of its
  // prompt (end) and where its prompt's cached KV ended without a checkpoint (branch; 0: none).
  bool wants_checkpoint(uint32_t b, uint32_t end, uint32_t branch) const;
  // The first token count after `computed` that is a boundary the sequence wants (a chunk that
  // reaches it ends there); UINT64_MAX when none.
  uint64_t next_checkpoint(uint32_t computed, uint32_t end, uint32_t branch) const;
  // A sequence's computed tokens reached boundary b (blocks, sealed): slot is the checkpoint slot
  // to copy its working state into, now held by the node of its block b-1 (a free slot, else the
  // least recently used one's, evicted), or -1 when that node holds one already. When the
  // evicted checkpoint was offloaded, offload_to is the host state slot its state goes to first
  // (a STATE_OUT copy queued before the capture's copy), else -1. Cannot fail.
  struct Capture {
    int32_t slot = -1, offload_to = -1;
  };
  Capture capture(const SeqTables &tables, uint32_t b);
  uint32_t num_checkpoints_held() const { return checkpoints_.num_held(); }
  uint32_t num_host_checkpoints_held() const { return host_checkpoints_.num_held(); }
  // The hash of the anchor group's block b-1 of tables (sealed) and of its parent: a
  // checkpoint's event names them.
  std::pair<uint64_t, uint64_t> anchor_hashes(const SeqTables &tables, uint32_t b) const;
  // Reserves slots for n more tokens after the table's first num_slotted: new blocks, and a
  // copy-on-write of a shared, partly filled last block. Throws PKV_ERR_NO_SPACE with nothing
  // changed.
  void reserve_slots(SeqTables &tables, uint32_t num_slotted, uint32_t n);
  // A copy of tables (a fork) takes a reference on each of their blocks.
  void fork(const SeqTables &copy);
  // Drops every block reference of the tables, which become empty.
  void free(SeqTables &tables);
  // Rollback (pkv_truncate): the tables keep the blocks of their first `keep` tokens; the others'
  // references go, as free() drops them (sealed ones stay cached). A copy-on-write into a block
  // that goes free is dropped from the queue, unless it is among the first `taken` copies (an open
  // batch's) or a later copy reads that block. A sealed block cut short stays its node's copy:
  // the next write into it copies it first (reserve_slots). computed: the sequence's computed
  // tokens before the cut. A sliding or chunked group takes back, from the prefix cache, the blocks it gave
  // back that the kept tokens' window needs again (pool copies shared, host-tier ones loaded);
  // when one is no longer cached anywhere: PKV_ERR_STATE, or PKV_ERR_NO_SPACE for the loads, with
  // nothing changed. Without windows it cannot fail.
  void truncate(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens, uint32_t keep,
                uint32_t computed, size_t taken);
  // Swap-out: the tables' KV moves to host-tier blocks and the tables become empty; host (empty
  // before) gets every group's table in group order, each as long as the tables were, with -1
  // where a group held no block (a window's or chunk's given-back blocks, a shared group's).
  // Swap-in: back into pool blocks, the -1 entries kept; the caller then seals the tables again
  // (seal() with the computed tokens: their nodes found or made anew). A block with a twin in the
  // other tier (the same KV, from an earlier move of a sharer) is not copied again.
  // PKV_ERR_UNSUPPORTED without a host tier, PKV_ERR_NO_SPACE with nothing changed.
  void swap_out(SeqTables &tables, std::vector<int32_t> &host);
  void swap_in(std::vector<int32_t> &host, SeqTables &tables);
  // Drops the references of a swapped-out table's host blocks; it becomes empty.
  void free_host(std::vector<int32_t> &host);
  // Seals the tables' full, computed blocks (of num_computed tokens) into the prefix tree; then
  // groups give back the blocks before first_held (their kinds' rule).
  void seal(SeqTables &tables, const PrefixKeys &keys, const int32_t *tokens,
            uint32_t num_computed);
  // Windowed groups give back the blocks before first_held(g, next): seal()'s rule, and a
  // receiving sequence's at admission (the blocks its remote tokens' window no longer reaches
  // are never written; seal() then makes their nodes without KV). Cannot fail.
  void give_back_behind(SeqTables &tables, uint64_t next);
  // While collect is on, seal() records the blocks that made new prefix nodes; take_sealed()
  // hands them over (and forgets them).
  void collect_sealed(bool collect) { collect_sealed_ = collect; }
  // Called with each offloaded block the host tier drops, before its host block is reused (a
  // block whose offload copy is still queued is skipped: its bytes are not there yet).
  void on_host_evict(std::function<void(const EvictedHostBlock &)> f) {
    on_host_evict_ = std::move(f);
  }
  // f for every offloaded block the host tier holds now (the same skip), oldest first: a
  // write-back store's flush at shutdown.
  void for_each_host_cached(const std::function<void(const EvictedHostBlock &)> &f) const;
  std::vector<SealedBlock> take_sealed() { return std::move(sealed_); }

  // The store tier's fetched blocks enter the prefix tree as nodes held in the host tier, so a
  // later admission loads them like offloaded ones. Blocks [from, from + n) of tokens in KV group
  // `group`: each gets a node held in a host-tier block (host_out[i] for block from + i) that the
  // caller fills at once with the block's K/V, or -1 where a node already holds the block's KV in
  // a tier. Blocks before `from` are the hit's parents: a group that needs every block must hold
  // them (else nothing is staged); a windowed group's may hold no KV, and their nodes are made
  // (without KV, kept by the staged child) when missing. Host blocks in `keep`, those a queued
  // copy reads or writes, and those on the prompt's path are not taken; those given are added to
  // keep (the next group's staging keeps them). Returns how many leading blocks got a node or had
  // one (fewer than n when the host tier has no room). Emits a STORED event of medium STORE for
  // each block given.
  uint32_t stage_from_store(const PrefixKeys &keys, const int32_t *tokens, uint32_t group,
                            uint32_t from, uint32_t n, std::unordered_set<int32_t> *keep,
                            std::vector<int32_t> *host_out);
  // A checkpoint of the state at boundary h fetched from the store, for n tokens whose first h
  // blocks a node holds in a tier and no checkpoint at h or later serves: the anchor node of block
  // h-1 takes a host checkpoint slot (a free one, else the least recently used one's, dropped)
  // that the caller fills at once, or -1 (nothing changed) when there is none, or the slot is
  // busy (a queued copy reads or writes it), or the blocks are no longer held. Emits a STORED
  // event of medium STORE in the state's group.
  int32_t stage_checkpoint(const PrefixKeys &keys, const int32_t *tokens, uint32_t n, uint32_t h,
                           const std::function<bool(int32_t)> &busy);
  void count_preemption() { stats_.num_preemptions++; }

  // ---------------------------------------------------------------- retention (DESIGN.md §4)
  // (block_manager_retain.cpp.) The engine's clock (ms), set once per engine call.
  void set_now(uint64_t ms) { pool_.set_now(ms); }
  // While a Releasing lives, the blocks its sequence releases keep (at least) its retention.
  class Releasing {
   public:
    Releasing(BlockManager &m, Retention r) : m_(m), was_(m.releasing_) { m.releasing_ = r; }
    ~Releasing() { m_.releasing_ = was_; }
    Releasing(const Releasing &) = delete;
    Releasing &operator=(const Releasing &) = delete;

   private:
    BlockManager &m_;
    Retention was_;
  };
  // pkv_cache_set_priority: every pool copy of every node of the prompt's full blocks, in every
  // group, takes r (BlockPool::set_retention); returns how many.
  uint32_t set_priority(const PrefixKeys &keys, const int32_t *tokens, uint32_t n, Retention r);
  // pkv_cache_pin: references on the pool blocks a hit of the prompt's longest cached prefix of
  // full blocks needs; *out_tokens its tokens. PKV_ERR_NO_SPACE past PKV_MAX_PINNED_PERCENT,
  // nothing changed. Returns the pin's id.
  uint64_t pin(const PrefixKeys &keys, const int32_t *tokens, uint32_t n, uint32_t *out_tokens);
  // pkv_cache_unpin: PKV_ERR_NOT_FOUND for an unknown pin.
  void unpin(uint64_t pin);
  uint32_t num_pins() const { return static_cast<uint32_t>(pins_.size()); }
  uint32_t num_pinned_blocks() const { return static_cast<uint32_t>(pinned_.size()); }
  // Evicts every cached block (pkv_reset_prefix_cache); events as documented there.
  void reset_cache();
  void set_events(KvEvents *events) {
    events_ = events;
    tree_.set_events(events);
  }

  // Copies queued and not yet done, in order. A batch lists those queued before it began.
  const std::vector<BlockCopy> &pending_copies() const { return pending_copies_; }
  // The first n pending copies are done: their sources are released.
  void copies_done(size_t n);

  uint32_t num_groups() const { return static_cast<uint32_t>(kinds_.size()); }
  const GroupKind &kind(uint32_t group) const { return kinds_[group]; }
  // Whether any group gives blocks back (sliding, chunked or shared).
  bool any_windowed() const;
  // How many leading blocks of a prompt of n tokens a hit may serve (block_kinds.h's rule; 0
  // without prefix caching, and with STATE layers but no checkpoints).
  uint32_t max_hits(uint32_t n) const {
    return prefix_caching_ && serves_hits_ ? max_hit_blocks(n, block_size_) : 0;
  }
  // The first block a group holds when the next token to compute is at `next`: its kind's first
  // block needed, but never past the last sealed block (the parent of the next one sealed) when
  // prefix caching is on and the group holds blocks at all. UINT32_MAX for a shared group.
  uint32_t first_held(uint32_t group, uint64_t next) const;
  // Whether pkv_step admits requests per chunk (DESIGN.md §7): a group holds blocks and gives
  // them back behind a window or chunk, so a whole-prompt reservation would cost it more.
  bool admits_per_chunk() const;
  // The most blocks a request of prompt + max_new_tokens = total tokens holds at once.
  // max_chunk 0 (whole-prompt admission): its prompt in every group that holds blocks at
  // admission, or at its end each kind's most (GroupKind::max_blocks: the full groups' total,
  // the windowed groups' last windows). Per chunk of up to max_chunk tokens: the sum of each
  // group's own peak, min(total's blocks, max(its decode peak, its chunk peak)) (the formula
  // in block_manager_admit.cpp).
  uint64_t peak_blocks(uint32_t prompt, uint64_t total, uint32_t max_chunk = 0) const;
  uint32_t num_blocks() const { return pool_.num_blocks(); }
  uint32_t block_size() const { return block_size_; }
  uint32_t num_free() const { return pool_.num_free(); }
  uint32_t num_cached() const { return pool_.num_cached(); }
  uint32_t num_host_blocks() const { return host_.num_blocks(); }
  uint32_t num_host_free() const { return host_.num_free(); }
  uint32_t num_host_cached() const { return host_.num_cached(); }
  const BlockStats &stats() const { return stats_; }
  size_t num_prefix_nodes() const { return tree_.num_nodes(); }
  int32_t ref_count(int32_t block) const { return pool_.ref(block); }

  // Every invariant of DESIGN.md §9 against every table's owner. Throws PKV_ERR_INTERNAL.
  void check(const std::vector<TableOwner> &owners) const;

 private:
  int32_t pop_free();  // head of the pool's free list, evicted if cached; ref becomes 1
  // The next n pop_free() calls are one reservation's: the lines their evictions read are loaded
  // ahead of them (block_manager.cpp).
  void prefetch_pops(uint32_t n);
  void advance_ahead();
  void advance_far();
  void advance_near();
  int32_t pop_host();  // the same in the host tier
  // A cached pool block's KV is about to be overwritten: its node forgets it, after a copy to
  // the host tier when offloading and the node has none there yet.
  void evict(int32_t block, bool offload);
  void evict_host(int32_t host);
  void undo_copy_into(int32_t block, size_t taken);
  // The node's checkpoint slot (device or host) goes free (it is evicted); events say so.
  void drop_checkpoint(uint32_t node);
  // The node's device checkpoint in `slot` moves to a host state slot (the least recently used
  // one's dropped when none is free): returns it, or -1 when there are no host checkpoint slots
  // and the checkpoint is dropped instead.
  int32_t offload_checkpoint(uint32_t node, int32_t slot);
  void checkpoint_event(uint32_t node, bool stored, int32_t tier) const;
  void check_checkpoints() const;
  void report_host_block(int32_t host,
                         const std::function<void(const EvictedHostBlock &)> &f) const;
  void add_ref(int32_t block) { pool_.add_ref(block); }  // revives a ref-0 block when needed
  // At 0: cached to its class's tail (releasing_), unsealed to the head.
  void drop_ref(int32_t block);
  void count_eviction(int32_t block);  // by its priority, before evict()
  // The pins' references, counted into refs (check()); the pins' own bookkeeping checked.
  void check_pins(std::vector<int64_t> &refs) const;
  void reserve(SeqTables &tables, const Admission &plan);
  // Group g's walk of the prompt's first max_hits blocks through the prefix tree: the node of
  // each block while there is one, and the pool block a hit would use (-1: load from the host
  // tier, -2: the node holds no KV; full groups stop there).
  void walk(uint32_t group, const PrefixKeys &keys, const int32_t *tokens, uint32_t max_hits,
            std::vector<uint32_t> *nodes, std::vector<int32_t> *picks) const;
  void reserve_group_slots(uint32_t group, BlockTable &table, uint32_t num_slotted, uint32_t need,
                           bool cow);
  void seal_group(uint32_t group, BlockTable &table, const PrefixKeys &keys, const int32_t *tokens,
                  uint32_t num_computed);
  void truncate_group(BlockTable &table, uint32_t keep, size_t taken);
  bool holds_blocks(uint32_t group) const { return kinds_[group].rules().holds_blocks; }
  static constexpr uint32_t kAhead = 8;       // pops between a node's slot request and its eviction
  uint32_t ahead_left_ = 0;                   // pops of the reservation prefetch_pops began
  int32_t ahead_far_ = -1, ahead_near_ = -1;  // free-list cursors; -1: past the tail
  std::vector<GroupKind> kinds_;              // per KV group
  // Twins: a pool block and a host-tier block holding the same KV. A pair lives while both blocks
  // are referenced and the pool block is not written.
  void add_twins(int32_t device, int32_t host);
  void forget_device_twin(int32_t device);
  void forget_host_twin(int32_t host);
  void drop_host_ref(int32_t host);
  void check_space(uint32_t needed, const char *what) const;

  uint32_t block_size_;
  bool prefix_caching_;
  bool serves_hits_ = true;
  bool has_state_ = false;
  uint32_t anchor_ = 0;               // the group whose nodes hold the checkpoints
  uint32_t checkpoint_interval_ = 0;  // EVERY: blocks between checkpoints; else 0
  StateCheckpoints checkpoints_;
  StateCheckpoints host_checkpoints_;  // of host state slots: the offloaded ones
  int32_t last_checkpoint_ = -1;
  uint32_t last_kv_hits_ = 0;
  bool offload_;
  // Nodes were given host copies by stage_from_store: without offload too, they may hold one.
  bool staged_from_store_ = false;
  // [host blocks]: 1 while a block the store gave waits for its first load (an admission counts
  // it as a store hit, not a host-tier one); cleared by that load or the block's eviction.
  std::vector<uint8_t> host_from_store_;
  uint64_t seed_;
  BlockPool pool_;  // tier 0; a block's node is the prefix node it is a sealed copy of
  BlockPool host_;  // tier 1; a cached block's node is the node it holds offloaded
  PrefixTree tree_;
  KvEvents *events_ = nullptr;
  std::vector<BlockCopy> pending_copies_;
  bool collect_sealed_ = false;
  std::function<void(const EvictedHostBlock &)> on_host_evict_;
  uint32_t last_loads_ = 0;
  uint32_t last_tokens_ = 0;
  std::vector<SealedBlock> sealed_;
  std::unordered_map<int32_t, int32_t> host_twin_;    // pool block -> host-tier block
  std::unordered_map<int32_t, int32_t> device_twin_;  // host-tier block -> pool block
  BlockStats stats_;
  Retention releasing_ = kNoRetention;  // what a release gives its blocks (Releasing)
  std::unordered_map<uint64_t, std::vector<int32_t>> pins_;  // pin -> its distinct blocks
  std::unordered_map<int32_t, uint32_t> pinned_;             // block -> pins holding it
  uint64_t next_pin_ = 1;
};

}  // namespace pkv
