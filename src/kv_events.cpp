#include "kv_events.h"

#include <algorithm>
#include <cstring>

namespace pkv {

void KvEvents::push(uint32_t type, uint64_t hash, uint64_t parent_hash, uint32_t medium,
                    uint32_t group, uint64_t lora_id, uint32_t num_extra) {
  if (!enabled()) return;
  if (queue_.size() >= capacity_) {
    // The host fell behind: what it missed cannot be told in less than the whole cache, so it
    // gets one OVERFLOW and resynchronizes (e.g. treats this engine's holdings as unknown).
    queue_.clear();
    queue_.push_back(
        pkv_kv_event{PKV_EVENT_OVERFLOW, 0, next_seq_no_++, 0, 0, PKV_TIER_NONE, 0, 0, 0, 0});
  }
  const uint32_t tokens =
      type == PKV_EVENT_BLOCK_STORED || type == PKV_EVENT_BLOCK_REMOVED ? block_size_ : 0;
  queue_.push_back(pkv_kv_event{type, tokens, next_seq_no_++, hash, parent_hash, medium, group,
                                lora_id, num_extra, 0});
}

size_t KvEvents::drain(void *out, size_t event_size, size_t cap) {
  char *dst = static_cast<char *>(out);
  const size_t known = std::min(event_size, sizeof(pkv_kv_event));
  size_t n = 0;
  for (; n < cap && !queue_.empty(); ++n, dst += event_size) {
    std::memcpy(dst, &queue_.front(), known);
    std::memset(dst + known, 0, event_size - known);
    queue_.pop_front();
  }
  return n;
}

}  // namespace pkv
