// The exact block-level prefix cache (DESIGN.md §4).
//
// A node is one full block of tokens under one exact prefix: (parent node, tokens, the block's
// extra bytes: the extra keys overlapping it, PrefixKeys::block_extra). Roots are one per (cache
// salt, LoRA adapter id, KV group) and hold no tokens: each KV group (DESIGN.md §12) caches its
// own blocks of a prefix, under the canonical root hash of the salt and adapter. A node keeps the
// pool blocks whose KV holds it (its copies) and at most one host-tier block (its offloaded copy,
// DESIGN.md §11). Children are found through one table keyed by the block's canonical hash, which
// chains its parent's (node_table.h), and the parent, tokens and extra bytes are compared on
// every hit, so a hash collision, a crafted collision or a block reused under another prefix can
// never serve wrong KV. Nodes without copies in either tier and without children are removed,
// up the tree. With STATE layers, a node may also name a checkpoint slot of the recurrent state at
// its block's end (DESIGN.md §13): it goes when the node's last copy in either tier goes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "huge_pages.h"
#include "kv_events.h"
#include "node_table.h"
#include "prefix_keys.h"

namespace pkv {

constexpr uint32_t kNoNode = UINT32_MAX;

// A prefix node's pool copies. Nearly always one: it is held in the node itself, so sealing
// allocates nothing and an eviction reads no second cache line (a std::vector here cost a malloc
// per sealed block and a pointer chase per eviction, about a tenth of an admission). A second
// copy (the same block computed twice, e.g. by two prompts admitted before either sealed) moves
// the list to the heap.
class CopyList {
 public:
  const int32_t *begin() const { return more_ ? more_->data() : &one_; }
  const int32_t *end() const { return begin() + size(); }
  size_t size() const { return more_ ? more_->size() : size_t(one_ >= 0); }
  bool empty() const { return size() == 0; }
  void push_back(int32_t block);
  // Removes block, which must be listed; order is not kept.
  void remove(int32_t block);

 private:
  int32_t one_ = -1;                            // the only copy, while more_ is null
  std::unique_ptr<std::vector<int32_t>> more_;  // all copies, once there were two
};

class PrefixTree {
 public:
  // expected_nodes sizes the child table up front (the pool's block count): no rehash in steps.
  PrefixTree(uint32_t block_size, uint64_t seed, bool constant_hash, size_t expected_nodes);
  // Where STORED (a node's first copy in a tier) and REMOVED (its last copy in a tier gone)
  // events go, with the tier as their medium; may be null.
  void set_events(KvEvents *events) { events_ = events; }

  // The root of keys' salt and adapter in a KV group, or kNoNode when no block was ever sealed
  // under it (keys' extra keys name blocks, not roots).
  uint32_t find_root(const PrefixKeys &keys, uint32_t group = 0) const;
  uint32_t get_or_add_root(const PrefixKeys &keys, uint32_t group = 0);
  // The salt and adapter of a root (a node whose parent is kNoNode).
  const std::string &root_salt(uint32_t root) const { return root_salts_.at(root).salt; }
  uint64_t root_lora(uint32_t root) const { return root_salts_.at(root).lora_id; }
  // The KV group of a node (its root's), its adapter (its root's), its extra bytes.
  uint32_t group(uint32_t node) const { return nodes_[node].group; }
  uint64_t lora_id(uint32_t node) const { return nodes_[node].lora_id; }
  const std::string &extra(uint32_t node) const;

  // The canonical hash of the child of `parent` holding `tokens` (block_size of them) and the
  // block's extra bytes.
  uint64_t child_hash(uint32_t parent, const int32_t *tokens,
                      const std::string &extra = kNoExtra) const;
  // The child of parent holding exactly these tokens and extra bytes, whose canonical hash is
  // `hash`; kNoNode if none.
  uint32_t find_child(uint32_t parent, uint64_t hash, const int32_t *tokens,
                      const std::string &extra = kNoExtra) const;
  uint32_t add_child(uint32_t parent, uint64_t hash, const int32_t *tokens,
                     const std::string &extra = kNoExtra);
  // Lookups of a prompt's blocks know every canonical hash up front (it chains hashes, not
  // nodes), so they can start loading the table slots and tokens of blocks ahead.
  void prefetch_slot(uint32_t parent, uint64_t hash) const {
    children_.prefetch(map_key(parent, hash));
  }
  void prefetch_node(uint32_t parent, uint64_t hash) const {
    uint32_t n = children_.peek(map_key(parent, hash));
    if (n != NodeTable::kEmpty) {
      __builtin_prefetch(&nodes_[n]);
      __builtin_prefetch(tokens(n));
    }
  }

  // Starts loading the entry and token line of the k-th node add_child will make from now (the
  // free list's: a seal's inserts write them).
  void prefetch_new_node(size_t k) const {
    if (k >= free_nodes_.size()) return;
    const uint32_t id = free_nodes_[free_nodes_.size() - 1 - k];
    __builtin_prefetch(&nodes_[id], 1);
    __builtin_prefetch(&tokens_[size_t(id) * block_size_], 1);
  }
  // Starts loading a node's entry (its one cache line).
  void prefetch_node_entry(uint32_t node) const { __builtin_prefetch(&nodes_[node]); }

  void add_copy(uint32_t node, int32_t block);
  // Removes a copy; a node left with no copies and no children is removed, and so on upwards.
  void remove_copy(uint32_t node, int32_t block);
  // The node's host-tier copy: set when it has none; cleared as remove_copy.
  void set_host(uint32_t node, int32_t host_block);
  void clear_host(uint32_t node);
  int32_t host(uint32_t node) const { return nodes_[node].host; }

  // The checkpoint of the recurrent state at the end of the node's block: a CheckpointRef
  // (state_checkpoints.h, device or host slot), kNoCheckpoint (-1) when none. Only a node with a
  // copy in either tier holds one.
  int32_t state(uint32_t node) const { return nodes_[node].state; }
  void set_state(uint32_t node, int32_t slot);
  void clear_state(uint32_t node);
  // Called when a node holding a checkpoint loses its last copy in either tier, before the node
  // may be removed; f must clear_state(node).
  void on_state_orphaned(std::function<void(uint32_t)> f) { on_state_orphaned_ = std::move(f); }

  const CopyList &copies(uint32_t node) const { return nodes_[node].copies; }
  uint64_t hash(uint32_t node) const { return nodes_[node].hash; }
  uint32_t parent(uint32_t node) const { return nodes_[node].parent; }
  const int32_t *tokens(uint32_t node) const { return &tokens_[size_t(node) * block_size_]; }
  bool is_live(uint32_t node) const { return node < nodes_.size() && nodes_[node].live; }
  bool is_root(uint32_t node) const { return nodes_[node].parent == kNoNode; }
  size_t num_nodes() const { return num_live_; }  // roots excluded
  size_t capacity() const { return nodes_.size(); }
  uint32_t num_children(uint32_t node) const { return nodes_[node].num_children; }

  // Structural self-check for pkv_engine_check: throws Error(PKV_ERR_INTERNAL) on a violation.
  void check() const;

 private:
  // One cache line: an eviction or a hit reads one line of the node.
  struct alignas(64) Node {
    uint32_t parent = kNoNode;
    uint32_t num_children = 0;
    uint32_t group = 0;
    bool live = false;
    bool has_extra = false;  // its extra bytes are in extras_
    uint64_t lora_id = 0;    // its root's
    uint64_t hash = 0;       // canonical hash
    CopyList copies;         // pool blocks
    int32_t host = -1;       // host-tier block, -1 when none
    int32_t state = -1;      // CheckpointRef of the recurrent state, -1 when none
  };

  struct RootKey {
    std::string salt;
    uint64_t lora_id;
    uint32_t group;
  };
  static std::string root_key(const std::string &salt, uint64_t lora_id, uint32_t group);
  bool same_block(uint32_t node, uint32_t parent, const int32_t *tokens,
                  const std::string &extra) const;
  uint64_t map_key(uint32_t parent, uint64_t hash) const;
  uint32_t new_node();
  void maybe_remove(uint32_t node);
  void orphan_state(uint32_t node);

  KvEvents *events_ = nullptr;
  std::function<void(uint32_t)> on_state_orphaned_;
  uint32_t block_size_;
  uint64_t seed_;
  bool constant_hash_;
  // Huge pages: a request reads and writes nodes at random places (huge_pages.h).
  std::vector<Node, HugePageAllocator<Node>> nodes_;
  std::vector<int32_t, HugePageAllocator<int32_t>> tokens_;  // [node][block_size]
  std::vector<uint32_t> free_nodes_;
  size_t num_live_ = 0;
  NodeTable children_;                               // map_key(parent, hash) -> node
  std::unordered_map<std::string, uint32_t> roots_;  // root_key(salt, lora, group) -> root
  std::unordered_map<uint32_t, RootKey> root_salts_;
  // The extra bytes of the nodes that have them (multimodal prompts): a side table keeps the
  // nodes of text prompts as small as before.
  std::unordered_map<uint32_t, std::string> extras_;
};

}  // namespace pkv
