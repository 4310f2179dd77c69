// BlockManager's retention (block_manager.h, DESIGN.md §4 "Retention"): a prefix's priority
// (pkv_cache_set_priority), pins (pkv_cache_pin / pkv_cache_unpin) and the evictions counted by
// priority. The order of eviction itself is the pool's (block_pool.h).
#include <algorithm>

#include "block_manager.h"
#include "params.h"
#include "status.h"

namespace pkv {

void BlockManager::count_eviction(int32_t block) {
  stats_.num_evictions_by_priority[pool_.effective_priority(block) - PKV_CACHE_PRIORITY_MIN]++;
}

uint32_t BlockManager::set_priority(const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                                    Retention r) {
  if (!prefix_caching_) return 0;
  uint32_t count = 0;
  for (uint32_t g = 0; g < num_groups(); ++g) {
    if (!holds_blocks(g)) continue;
    std::vector<uint32_t> nodes;
    std::vector<int32_t> picks;
    walk(g, keys, tokens, n / block_size_, &nodes, &picks);
    for (uint32_t node : nodes)
      for (int32_t c : tree_.copies(node)) {
        pool_.set_retention(c, r);
        count++;
      }
  }
  return count;
}

uint64_t BlockManager::pin(const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                           uint32_t *out_tokens) {
  const uint32_t groups = num_groups();
  std::vector<std::vector<int32_t>> picks(groups);
  // missing[g][j]: of group g's first j blocks, those with no pool copy (host-only, or no KV).
  std::vector<std::vector<uint32_t>> missing(groups);
  uint32_t h = prefix_caching_ ? n / block_size_ : 0;
  for (uint32_t g = 0; g < groups && h; ++g) {
    if (!holds_blocks(g)) continue;
    std::vector<uint32_t> nodes;
    walk(g, keys, tokens, h, &nodes, &picks[g]);
    h = std::min<uint32_t>(h, picks[g].size());
    missing[g].assign(picks[g].size() + 1, 0);
    for (size_t j = 0; j < picks[g].size(); ++j)
      missing[g][j + 1] = missing[g][j] + (picks[g][j] < 0);
  }
  // The longest hit whose blocks the pool holds in every group (a window needs only its own).
  auto held = [&](uint32_t hit) {
    for (uint32_t g = 0; g < groups; ++g)
      if (holds_blocks(g) &&
          missing[g][hit] != missing[g][first_held(g, uint64_t(hit) * block_size_)])
        return false;
    return true;
  };
  while (h > 0 && !held(h)) --h;
  std::vector<int32_t> blocks;
  uint32_t fresh = 0;  // blocks no pin holds yet
  for (uint32_t g = 0; g < groups && h; ++g) {
    if (!holds_blocks(g)) continue;
    for (uint32_t j = first_held(g, uint64_t(h) * block_size_); j < h; ++j) {
      blocks.push_back(picks[g][j]);
      fresh += pinned_.count(picks[g][j]) == 0;
    }
  }
  const uint64_t cap = uint64_t(pool_.num_blocks()) * PKV_MAX_PINNED_PERCENT / 100;
  if (pinned_.size() + fresh > cap)
    fail(PKV_ERR_NO_SPACE,
         "pinning %u tokens needs %u more pinned blocks; pins hold %zu of the pool's %u blocks and "
         "may hold at most %llu (PKV_MAX_PINNED_PERCENT, %d%%): unpin a prefix or pin a shorter "
         "one",
         h * block_size_, fresh, pinned_.size(), pool_.num_blocks(), (unsigned long long)cap,
         int(PKV_MAX_PINNED_PERCENT));
  const uint64_t id = next_pin_;
  std::vector<int32_t> &mine = pins_[id];  // may throw: nothing changed yet
  size_t counted = 0;
  try {
    for (; counted < blocks.size(); ++counted) pinned_[blocks[counted]]++;
  } catch (...) {  // out of memory: the counts taken back, the pin gone
    for (size_t i = 0; i < counted; ++i)
      if (--pinned_[blocks[i]] == 0) pinned_.erase(blocks[i]);
    pins_.erase(id);
    throw;
  }
  for (int32_t b : blocks) add_ref(b);
  mine = std::move(blocks);
  next_pin_++;
  *out_tokens = h * block_size_;
  return id;
}

void BlockManager::unpin(uint64_t pin) {
  auto it = pins_.find(pin);
  if (it == pins_.end())
    fail(PKV_ERR_NOT_FOUND, "no pin %llu: never given (pkv_cache_pin), or unpinned already",
         (unsigned long long)pin);
  for (int32_t b : it->second) {
    if (--pinned_[b] == 0) pinned_.erase(b);
    drop_ref(b);  // back to the cached blocks with the priority it had
  }
  pins_.erase(it);
}

void BlockManager::check_pins(std::vector<int64_t> &refs) const {
  std::unordered_map<int32_t, uint32_t> counted;
  for (const auto &[id, blocks] : pins_)
    for (int32_t b : blocks) {
      if (b < 0 || uint32_t(b) >= pool_.num_blocks() || pool_.node(b) == kNoNode)
        fail(PKV_ERR_INTERNAL, "pin %llu holds block %d, which is out of range or not cached KV",
             (unsigned long long)id, b);
      refs[b]++;
      counted[b]++;
    }
  if (counted != pinned_)
    fail(PKV_ERR_INTERNAL, "pins: %zu pinned blocks listed, %zu held by the pins", pinned_.size(),
         counted.size());
  if (pins_.size() >= next_pin_) fail(PKV_ERR_INTERNAL, "pins: more pins than ids given");
}

}  // namespace pkv
