// What names a sequence's blocks besides their tokens (DESIGN.md §4): the cache salt, the LoRA
// adapter id and the extra keys (pkv_extra_key: a multimodal item's content hash over its
// placeholder tokens). A block's identity is its tokens plus its "extra bytes", the encoding of
// the keys overlapping it that pkv.h gives for pkv_block_hash_extra; the prefix tree compares
// those bytes exactly, the canonical hash mixes them in, the store's keys and the KV events carry
// them. Without extra keys and adapter every block is named as in 0.4.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

// The extra bytes of a block no extra key overlaps.
inline const std::string kNoExtra;

// One pkv_extra_key, its bytes copied.
struct ExtraKey {
  uint32_t start = 0, end = 0;  // tokens [start, end) of the prompt
  std::string key;              // 1 .. PKV_MAX_EXTRA_KEY_BYTES bytes
};

struct PrefixKeys {
  std::string salt;             // cache salt: keys with different salts share nothing
  uint64_t lora_id = 0;         // 0 = no adapter
  std::vector<ExtraKey> extra;  // sorted by start, not overlapping

  bool operator==(const PrefixKeys &o) const;
  bool has_extra() const { return !extra.empty(); }
  // The extra bytes of the block holding tokens [first, first + n): for each key overlapping it,
  // in order, the overlap's start and end counted from first, its start counted from the key's
  // start, the key's length (u32 LE each), then the key. Empty when no key overlaps it.
  std::string block_extra(uint32_t first, uint32_t n) const;
  // block_extra of blocks [0, num_blocks) of block_size tokens each.
  std::vector<std::string> block_extras(uint32_t num_blocks, uint32_t block_size) const;
};

// Reads a caller's extra keys (count, element size as compiled, the array), checking every rule
// pkv.h states: PKV_ERR_INVALID_ARGUMENT naming the key's index and the rule broken, nothing
// kept. num_tokens: the prompt's tokens, which every key must lie inside (UINT32_MAX: only the
// order rules, for pkv_block_hash_extra).
std::vector<ExtraKey> read_extra_keys(const pkv_extra_key *keys, uint32_t num_keys,
                                      uint32_t key_size, uint32_t num_tokens);

// A caller's salt, adapter and extra keys (pkv_seq_params' or pkv_request_params' fields),
// checked; num_tokens: the prompt's.
PrefixKeys read_prefix_keys(const void *salt, uint32_t salt_len, const pkv_extra_key *keys,
                            uint32_t num_keys, uint32_t key_size, uint64_t lora_id,
                            uint32_t num_tokens);

// The fields of one item of a block's extra bytes (block_extra), for the wire.
struct ExtraItem {
  uint32_t start, end, item_start;
  const char *key;
  uint32_t key_len;
};
// Splits extra bytes made by block_extra into their items (in order).
std::vector<ExtraItem> parse_block_extra(const std::string &extra);
// How many items extra bytes hold.
uint32_t count_block_extra(const std::string &extra);

}  // namespace pkv
