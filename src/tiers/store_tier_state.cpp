// StoreTier's checkpoints of the recurrent state (store_tier.h, DESIGN.md §13): their keys,
// lookups from the longest boundary down, staging into host state slots, and writes. The values
// are the store format's (store_format.h), so every store kind and `pkv store` hold them as
// blocks.
#include <cstring>

#include "status.h"
#include "tiers/store_tier.h"

namespace pkv {

void StoreTier::enable_state(uint64_t slot_bytes, const std::string &layout, char *host_slots) {
  PKV_ASSERT(slot_bytes > 0 && host_slots);
  state_ = true;
  state_shape_ = state_store_shape(shape_, slot_bytes);
  state_fp_ = state_fingerprint(fingerprint_, layout);
  host_state_ = host_slots;
}

void StoreTier::state_key(const StoreChain &chain, const int32_t *tokens, uint32_t h, StoreKey *key,
                          StoreKey *parent) const {
  PKV_ASSERT(h >= 1 && chain.keys.size() > h);
  *parent = store_state_parent(state_fp_, chain.keys[h]);
  *key = store_block_key(*parent, tokens + size_t(h - 1) * shape_.block_size, shape_.block_size);
}

uint32_t StoreTier::fetch_state_from(Store &store, const StoreChain &chain, const int32_t *tokens,
                                     uint32_t lo, uint32_t hi, std::vector<uint8_t> *value) {
  value->clear();
  if (!state_ || lo == 0 || lo > hi) return 0;
  const uint32_t n = hi - lo + 1;
  std::vector<StoreKey> keys(n), parents(n);
  for (uint32_t i = 0; i < n; ++i) state_key(chain, tokens, lo + i, &keys[i], &parents[i]);
  // Which are held, in one call: a state is large (tens of MiB), so only the one used is read.
  std::vector<uint8_t> held(n, 0);
  StoreStatus st = store.exists(keys.data(), n, held.data());
  if (!st.ok) {  // one lookup that failed: the counters keep hits + misses + ... <= lookups
    counters_.lookups++;
    counters_.errors++;
    note_error(std::string(store.kind()) + " store: checkpoints of the state: " + st.error);
    return 0;
  }
  const uint64_t vb = state_shape_.value_bytes();
  for (uint32_t i = n; i-- > 0;) {
    if (!held[i]) continue;
    const uint32_t h = lo + i;
    counters_.lookups++;
    value->resize(vb);
    uint8_t found = kStoreAbsent;
    uint64_t size = 0;
    st = store.get(&keys[i], 1, value->data(), vb, &found, lookup_timeout_ms_, &size);
    if (!st.ok) {
      counters_.errors++;
      note_error(std::string(store.kind()) + " store: " + st.error);
      break;
    }
    std::string why;
    if (found == kStoreAbsent) {  // gone since exists() said it was there
      counters_.misses++;
      continue;
    }
    if (found == kStoreWrongSize)
      why = std::to_string(size) + " bytes, a checkpoint of the state is " + std::to_string(vb);
    else if (found == kStoreNotAValue)
      why = "not a value";
    else
      why = verify_value(state_shape_, state_fp_, keys[i], parents[i],
                         tokens + size_t(h - 1) * shape_.block_size, value->data());
    if (!why.empty()) {
      counters_.rejected++;
      note_error(std::string(store.kind()) + " store: checkpoint " + keys[i].hex() +
                 " rejected: " + why);
      continue;
    }
    counters_.hits++;
    return h;
  }
  value->clear();
  return 0;
}

void StoreTier::stage_state(const uint8_t *value, int32_t slot) const {
  PKV_ASSERT(state_ && slot >= 0);
  if (host_fence_) host_fence_();
  const uint64_t bytes = state_shape_.block_bytes;
  std::memcpy(host_state_ + uint64_t(slot) * bytes, value + payload_offset(state_shape_), bytes);
}

void StoreTier::write_state(const StoreChain &chain, const int32_t *tokens, uint32_t h,
                            const void *state, StoreWritten written) {
  PKV_ASSERT(state_);
  StoreKey key, parent;
  state_key(chain, tokens, h, &key, &parent);
  std::vector<uint8_t> value(state_shape_.value_bytes());
  std::memcpy(value.data() + payload_offset(state_shape_), state, state_shape_.block_bytes);
  encode_value(state_shape_, state_fp_, key, parent, tokens + size_t(h - 1) * shape_.block_size,
               value.data());
  write(key, std::move(value), std::move(written));
}

}  // namespace pkv
