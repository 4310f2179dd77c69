// The msgpack encoding of vLLM's KVEventBatch (DESIGN.md §8): the map encoding of vLLM 0.26+
// or the array one of older routers, every field vLLM declares in both. pkv.h
// (pkv_event_publisher_params) documents each field; kv_publisher.cpp sends what this encodes.
// Built only with msgpack-c (a build without it has no publisher).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pkv {

// One event as the publisher queues it.
struct WireEvent {
  uint32_t type;    // PKV_EVENT_BLOCK_STORED, _BLOCK_REMOVED or _ALL_CLEARED
  uint32_t medium;  // PKV_TIER_*
  uint32_t group;   // its KV group
  bool has_parent;  // false: the first block under its salt's root (parent_block_hash nil)
  uint64_t hash, parent_hash;
  size_t tokens;         // STORED: its block_size tokens start here in the token array
  uint64_t lora_id = 0;  // STORED: its adapter, 0 = none
  std::string extra;     // STORED: its extra bytes (PrefixKeys::block_extra), empty when none
};

// What the encoding knows of the engine, fixed at its create.
struct WireShape {
  uint32_t format = 0;                  // PKV_EVENT_FORMAT_*
  uint32_t block_size = 0;              // tokens per block
  uint32_t rank = 0;                    // data_parallel_rank
  std::array<std::string, 4> medium;    // [PKV_TIER_*]: what each tier is called
  std::vector<uint32_t> group_windows;  // [group]: its sliding window, 0 = full attention; group
                                        // group_windows.size(): the state's checkpoints
  bool latent = false;                  // an MLA cache: vLLM calls its full attention mla_attention
};

// events[0, n) as one KVEventBatch sent at ts (seconds since the epoch); tokens: the token array
// WireEvent::tokens index. A run of events of one type, medium and group, each BlockStored's
// parent the one before it, is one BlockStored or BlockRemoved. Throws std::bad_alloc when out of
// memory.
std::string encode_batch(const WireShape &shape, double ts, const WireEvent *events, size_t n,
                         const int32_t *tokens);

}  // namespace pkv
