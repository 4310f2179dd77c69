#include "prefix_tree.h"

#include <algorithm>
#include <cstring>

#include "block_hash.h"
#include "status.h"

namespace pkv {

void CopyList::push_back(int32_t block) {
  if (more_) {
    more_->push_back(block);
  } else if (one_ < 0) {
    one_ = block;
  } else {
    more_ = std::make_unique<std::vector<int32_t>>(std::vector<int32_t>{one_, block});
    one_ = -1;
  }
}

void CopyList::remove(int32_t block) {
  if (!more_) {
    PKV_ASSERT(one_ == block);
    one_ = -1;
    return;
  }
  auto it = std::find(more_->begin(), more_->end(), block);
  PKV_ASSERT(it != more_->end());
  *it = more_->back();
  more_->pop_back();
  if (more_->size() == 1) {
    one_ = more_->front();
    more_.reset();
  }
}

PrefixTree::PrefixTree(uint32_t block_size, uint64_t seed, bool constant_hash,
                       size_t expected_nodes)
    : block_size_(block_size),
      seed_(seed),
      constant_hash_(constant_hash),
      children_(expected_nodes) {
  // Address space only: pages are committed as nodes are made, and steps never reallocate.
  nodes_.reserve(expected_nodes + 1);
  tokens_.reserve((expected_nodes + 1) * size_t(block_size));
}

uint64_t PrefixTree::map_key(uint32_t parent, uint64_t hash) const {
  // The canonical hash already chains the parent's hash, so it alone keys (parent, tokens);
  // every hit still compares the parent node and the tokens. Under PKV_DEBUG_CONSTANT_HASH every
  // block hashes alike: the key is the parent's alone and only the token compare decides.
  if (constant_hash_) return (uint64_t(parent) + 1) * 0x9E3779B97F4A7C15ull;
  return hash;
}

std::string PrefixTree::root_key(const std::string &salt, uint64_t lora_id, uint32_t group) {
  std::string key(reinterpret_cast<const char *>(&group), sizeof group);
  key.append(reinterpret_cast<const char *>(&lora_id), sizeof lora_id);
  return key.append(salt);
}

uint32_t PrefixTree::find_root(const PrefixKeys &keys, uint32_t group) const {
  auto it = roots_.find(root_key(keys.salt, keys.lora_id, group));
  return it == roots_.end() ? kNoNode : it->second;
}

uint32_t PrefixTree::get_or_add_root(const PrefixKeys &keys, uint32_t group) {
  uint32_t root = find_root(keys, group);
  if (root != kNoNode) return root;
  root = new_node();
  nodes_[root].hash = root_hash(seed_, keys.salt.data(), keys.salt.size(), keys.lora_id);
  nodes_[root].group = group;
  nodes_[root].lora_id = keys.lora_id;
  roots_.emplace(root_key(keys.salt, keys.lora_id, group), root);
  root_salts_.emplace(root, RootKey{keys.salt, keys.lora_id, group});
  return root;
}

const std::string &PrefixTree::extra(uint32_t node) const {
  return nodes_[node].has_extra ? extras_.at(node) : kNoExtra;
}

uint64_t PrefixTree::child_hash(uint32_t parent, const int32_t *tokens,
                                const std::string &extra) const {
  return block_hash(seed_, nodes_[parent].hash, tokens, block_size_, extra.data(), extra.size());
}

bool PrefixTree::same_block(uint32_t node, uint32_t parent, const int32_t *tokens,
                            const std::string &extra) const {
  const Node &n = nodes_[node];
  if (n.parent != parent || n.has_extra != !extra.empty()) return false;
  if (std::memcmp(this->tokens(node), tokens, sizeof(int32_t) * block_size_) != 0) return false;
  return !n.has_extra || extras_.at(node) == extra;
}

uint32_t PrefixTree::find_child(uint32_t parent, uint64_t hash, const int32_t *tokens,
                                const std::string &extra) const {
  uint32_t n = children_.find(map_key(parent, hash), [&](uint32_t node) {
    return same_block(node, parent, tokens, extra);
  });
  return n == NodeTable::kEmpty ? kNoNode : n;
}

uint32_t PrefixTree::new_node() {
  uint32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<uint32_t>(nodes_.size());
    nodes_.emplace_back();
    tokens_.resize(tokens_.size() + block_size_);
  }
  nodes_[id] = Node{};
  nodes_[id].live = true;
  return id;
}

uint32_t PrefixTree::add_child(uint32_t parent, uint64_t hash, const int32_t *tokens,
                               const std::string &extra) {
  PKV_ASSERT(find_child(parent, hash, tokens, extra) == kNoNode);
  if (!extra.empty()) extras_.reserve(extras_.size() + 1);  // may throw: before any change
  uint32_t id = new_node();  // may reallocate nodes_: take references after
  Node &n = nodes_[id];
  n.parent = parent;
  n.hash = hash;
  n.group = nodes_[parent].group;
  n.lora_id = nodes_[parent].lora_id;
  if (!extra.empty()) {
    n.has_extra = true;
    extras_[id] = extra;
  }
  std::memcpy(&tokens_[size_t(id) * block_size_], tokens, sizeof(int32_t) * block_size_);
  children_.insert(map_key(parent, hash), id);
  nodes_[parent].num_children++;
  num_live_++;
  return id;
}

void PrefixTree::add_copy(uint32_t node, int32_t block) {
  Node &n = nodes_[node];
  n.copies.push_back(block);
  if (n.copies.size() == 1 && events_)
    events_->stored(n.hash, nodes_[n.parent].hash, is_root(n.parent), tokens(node), PKV_TIER_DEVICE,
                    n.group, n.lora_id, extra(node));
}

void PrefixTree::remove_copy(uint32_t node, int32_t block) {
  CopyList &c = nodes_[node].copies;
  c.remove(block);
  if (c.empty() && events_)
    events_->removed(nodes_[node].hash, nodes_[nodes_[node].parent].hash, PKV_TIER_DEVICE,
                     nodes_[node].group, nodes_[node].lora_id, count_block_extra(extra(node)));
  orphan_state(node);
  maybe_remove(node);
}

void PrefixTree::set_host(uint32_t node, int32_t host_block) {
  Node &n = nodes_[node];
  PKV_ASSERT(n.host < 0 && host_block >= 0);
  n.host = host_block;
  if (events_)
    events_->stored(n.hash, nodes_[n.parent].hash, is_root(n.parent), tokens(node), PKV_TIER_HOST,
                    n.group, n.lora_id, extra(node));
}

void PrefixTree::clear_host(uint32_t node) {
  Node &n = nodes_[node];
  PKV_ASSERT(n.host >= 0);
  n.host = -1;
  if (events_)
    events_->removed(n.hash, nodes_[n.parent].hash, PKV_TIER_HOST, n.group, n.lora_id,
                     count_block_extra(extra(node)));
  orphan_state(node);
  maybe_remove(node);
}

void PrefixTree::set_state(uint32_t node, int32_t slot) {
  Node &n = nodes_[node];
  PKV_ASSERT(n.live && n.state == -1 && slot != -1 && (!n.copies.empty() || n.host >= 0));
  n.state = slot;
}

void PrefixTree::clear_state(uint32_t node) {
  PKV_ASSERT(nodes_[node].state != -1);
  nodes_[node].state = -1;
}

void PrefixTree::orphan_state(uint32_t node) {
  const Node &n = nodes_[node];
  if (n.state == -1 || !n.copies.empty() || n.host >= 0) return;
  PKV_ASSERT(on_state_orphaned_);
  on_state_orphaned_(node);
  PKV_ASSERT(nodes_[node].state == -1);
}

void PrefixTree::maybe_remove(uint32_t node) {
  while (node != kNoNode) {
    Node &n = nodes_[node];
    if (!n.copies.empty() || n.host >= 0 || n.num_children != 0) return;
    uint32_t parent = n.parent;
    if (parent == kNoNode) {
      auto it = root_salts_.find(node);
      PKV_ASSERT(it != root_salts_.end());
      roots_.erase(root_key(it->second.salt, it->second.lora_id, it->second.group));
      root_salts_.erase(it);
    } else {
      if (n.has_extra) extras_.erase(node);
      PKV_ASSERT(children_.erase(map_key(parent, n.hash), node));
      nodes_[parent].num_children--;
      num_live_--;
    }
    n = Node{};
    free_nodes_.push_back(node);
    node = parent;
  }
}

void PrefixTree::check() const {
  std::vector<uint32_t> children(nodes_.size(), 0);
  size_t live = 0;
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    const Node &n = nodes_[i];
    if (!n.live) continue;
    if (n.parent == kNoNode) {
      auto it = root_salts_.find(i);
      if (it == root_salts_.end() ||
          roots_.count(root_key(it->second.salt, it->second.lora_id, it->second.group)) == 0 ||
          roots_.at(root_key(it->second.salt, it->second.lora_id, it->second.group)) != i ||
          n.group != it->second.group || n.lora_id != it->second.lora_id)
        fail(PKV_ERR_INTERNAL, "prefix root %u not registered", i);
      if (n.hash !=
          root_hash(seed_, it->second.salt.data(), it->second.salt.size(), it->second.lora_id))
        fail(PKV_ERR_INTERNAL, "prefix root %u has a wrong hash", i);
    } else {
      live++;
      if (!nodes_[n.parent].live) fail(PKV_ERR_INTERNAL, "prefix node %u has a dead parent", i);
      if (n.group != nodes_[n.parent].group || n.lora_id != nodes_[n.parent].lora_id)
        fail(PKV_ERR_INTERNAL, "prefix node %u: not its parent's group or adapter", i);
      if (n.has_extra != (extras_.count(i) == 1) || (n.has_extra && extras_.at(i).empty()))
        fail(PKV_ERR_INTERNAL, "prefix node %u: its extra bytes are not as it says", i);
      children[n.parent]++;
      if (n.hash != child_hash(n.parent, tokens(i), extra(i)))
        fail(PKV_ERR_INTERNAL, "prefix node %u: hash does not match parent, tokens and extra", i);
      if (find_child(n.parent, n.hash, tokens(i), extra(i)) != i)
        fail(PKV_ERR_INTERNAL, "prefix node %u is not found by its own key", i);
    }
    if (n.copies.empty() && n.host < 0 && n.num_children == 0)
      fail(PKV_ERR_INTERNAL, "prefix node %u has no copies and no children", i);
    if (n.state >= 0 && n.copies.empty() && n.host < 0)
      fail(PKV_ERR_INTERNAL, "prefix node %u holds checkpoint %d without a copy of its block", i,
           n.state);
    if (n.parent == kNoNode && (!n.copies.empty() || n.host >= 0))
      fail(PKV_ERR_INTERNAL, "prefix root %u holds a copy", i);
  }
  for (uint32_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].live && children[i] != nodes_[i].num_children)
      fail(PKV_ERR_INTERNAL, "prefix node %u counts %u children, has %u", i, nodes_[i].num_children,
           children[i]);
  if (live != num_live_)
    fail(PKV_ERR_INTERNAL, "prefix tree counts %zu nodes, has %zu", num_live_, live);
  size_t with_extra = 0;
  for (const Node &n : nodes_) with_extra += n.live && n.has_extra;
  if (extras_.size() != with_extra)
    fail(PKV_ERR_INTERNAL, "prefix tree keeps %zu extra byte strings for %zu nodes", extras_.size(),
         with_extra);
  if (children_.size() != live)
    fail(PKV_ERR_INTERNAL, "child table holds %zu entries for %zu nodes", children_.size(), live);
}

}  // namespace pkv
