// KV events on the wire (DESIGN.md §8): vLLM's ZMQ event protocol, in its map encoding (vLLM
// 0.26+) or its array one, published from a thread of its own so a step only appends to a queue.
// pkv.h (pkv_event_publisher_params) documents the messages; kv_publisher.cpp is the only file
// that knows ZeroMQ, kv_wire.cpp (the encoding) the only one that knows msgpack.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

class KvPublisher {
 public:
  // Binds the sockets (Error PKV_ERR_EVENTS naming the endpoint when one cannot be bound;
  // PKV_ERR_UNSUPPORTED in a build without libzmq) and starts the thread. p: resolved by
  // EventPublisherConfig. medium_names[PKV_TIER_*]: what each tier is called on the wire.
  // group_windows[g]: KV group g's sliding window (0 = full attention), which the wire says on
  // each BlockStored of the group; latent: the cache holds MLA latents (PKV_KV_LAYOUT_MLA).
  KvPublisher(const pkv_event_publisher_params &p, uint32_t block_size,
              std::array<std::string, 4> medium_names, std::vector<uint32_t> group_windows,
              bool latent);
  // Sends what is queued, then closes the sockets (waiting at most a short linger for slow peers).
  ~KvPublisher();
  KvPublisher(const KvPublisher &) = delete;
  KvPublisher &operator=(const KvPublisher &) = delete;

  // The engine's events, in order, staged until flush(). tokens: the block's block_size tokens. has_parent: false when
  // the block is the first under its salt's root (parent_block_hash nil on the wire).
  // lora_id: the block's adapter (0: none); extra: its extra bytes (PrefixKeys::block_extra).
  void stored(uint64_t hash, bool has_parent, uint64_t parent_hash, const int32_t *tokens,
              uint32_t medium, uint32_t group, uint64_t lora_id, const std::string &extra);
  void removed(uint64_t hash, uint32_t medium, uint32_t group);
  void all_cleared();
  // Hands the events of the engine call that just ended to the publishing thread (one lock and at
  // most one wake-up per call, not per event).
  void flush();

  // pkv_event_publisher_info's fields (its strings point into this object).
  void info(struct pkv_event_publisher_info *out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pkv
