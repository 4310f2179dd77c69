// KV events (DESIGN.md §8): what this engine's prefix cache holds, as canonical block hashes, for
// KV-aware routers. A bounded queue the host drains in batches, and, when the engine has one, the
// publisher that sends them on the wire (kv_publisher.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>

#include "kv_publisher.h"
#include "pkv/pkv.h"
#include "prefix_keys.h"

namespace pkv {

class KvEvents {
 public:
  KvEvents(bool enabled, uint32_t capacity, uint32_t block_size)
      : enabled_(enabled),
        capacity_(capacity ? capacity : uint32_t(PKV_DEFAULT_KV_EVENTS_CAPACITY)),
        block_size_(block_size) {}

  bool enabled() const { return enabled_ && !muted_; }
  // Where events also go (not owned; null: nowhere else).
  void set_publisher(KvPublisher *publisher) { publisher_ = publisher; }
  // medium: PKV_TIER_*, where the block was stored or removed; group: the KV group whose block it
  // is. parent_is_root: the block is the first under its salt (parent_hash is the root's).
  // tokens: the block's tokens (block_size of them); lora_id: its adapter (0: none); extra: its
  // extra bytes (PrefixKeys::block_extra), num_extra their items.
  void stored(uint64_t hash, uint64_t parent_hash, bool parent_is_root, const int32_t *tokens,
              uint32_t medium, uint32_t group, uint64_t lora_id = 0,
              const std::string &extra = kNoExtra) {
    if (publisher_ && !muted_)
      publisher_->stored(hash, !parent_is_root, parent_hash, tokens, medium, group, lora_id, extra);
    push(PKV_EVENT_BLOCK_STORED, hash, parent_hash, medium, group, lora_id,
         extra.empty() ? 0 : count_block_extra(extra));
  }
  void removed(uint64_t hash, uint64_t parent_hash, uint32_t medium, uint32_t group,
               uint64_t lora_id = 0, uint32_t num_extra = 0) {
    if (publisher_ && !muted_) publisher_->removed(hash, medium, group);
    push(PKV_EVENT_BLOCK_REMOVED, hash, parent_hash, medium, group, lora_id, num_extra);
  }
  void all_cleared() {
    if (publisher_ && !muted_) publisher_->all_cleared();
    push(PKV_EVENT_ALL_CLEARED, 0, 0, PKV_TIER_NONE, 0, 0, 0);
  }
  // While muted nothing is queued (a reset that ends in one ALL_CLEARED instead).
  void mute(bool m) { muted_ = m; }
  // Moves up to cap events into out, event_size bytes apart: each gets the fields pkv knows,
  // cut to event_size bytes, and zeroes after them (a caller's struct that has grown).
  size_t drain(void *out, size_t event_size, size_t cap);

 private:
  void push(uint32_t type, uint64_t hash, uint64_t parent_hash, uint32_t medium, uint32_t group,
            uint64_t lora_id, uint32_t num_extra);

  bool enabled_;
  bool muted_ = false;
  KvPublisher *publisher_ = nullptr;
  size_t capacity_;
  uint32_t block_size_;
  uint64_t next_seq_no_ = 1;
  std::deque<pkv_kv_event> queue_;
};

}  // namespace pkv
