// The engine's side of the store tier (DESIGN.md §11): the lookup store (the engine's thread),
// the writer (a thread of its own with its own store, fed by a bounded queue that drops and
// counts what does not fit), the counters of pkv_stats, and the last problem as text. Lookups
// verify every value (store_format.h) before it can hit; a store error, a timeout or a bad value
// is a miss, counted and explained, never a failed call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "prefix_keys.h"
#include "tiers/store.h"
#include "tiers/store_format.h"

namespace pkv {

struct StoreCounters {
  std::atomic<uint64_t> lookups{0}, hits{0}, misses{0}, rejected{0}, errors{0};
  std::atomic<uint64_t> puts{0}, put_dropped{0}, put_errors{0};
};

// A block written to the store, for a KV event of medium STORE.
struct StoreWritten {
  uint64_t hash, parent_hash;
  bool parent_is_root;          // the block is the first under its salt
  std::vector<int32_t> tokens;  // the block's
  uint64_t lora_id = 0;         // its adapter, 0 = none
  std::string extra;            // its extra bytes (PrefixKeys::block_extra)
  uint32_t group = 0;           // its KV group; a checkpoint of the state: the state's group
};

// The store keys of a prompt's blocks [0, n): keys[0] is the root (salt, adapter), block j's key
// is keys[j + 1]; parents[j] is the parent its value names (keys[j], mixed with the block's extra
// bytes when it has them: store_value_parent).
struct StoreChain {
  std::vector<StoreKey> keys;
  std::vector<StoreKey> parents;
};

// Where the host tier's bytes are (host memory on every backend): fetched blocks are staged there.
// A value's payload is layer by layer, K then V (MLA: K): layer i's K of host block 0 at k[i]
// (V at v[i]; null for MLA), the next block block_bytes on. An engine of several ranks (DESIGN.md
// §10) lists every rank's pool layers in rank order: one value holds every rank's slice.
struct HostTierView {
  std::vector<char *> k, v;
  uint64_t block_bytes;
};

// One KV group's part of a lookup (DESIGN.md §11): blocks [first, first + n) of its chain. A
// group that gives blocks back (a window, a chunk) needs only those of the window before where
// the hit ends: first_needed(h) is the first block a hit of h blocks needs (the group's rule), and
// its blocks are asked for once the groups that need every block (listed before it) have said how
// far the hit can reach. Empty for those groups.
struct GroupFetch {
  uint32_t group = 0;
  StoreChain chain;
  uint32_t first = 0, n = 0;
  std::function<uint32_t(uint32_t)> first_needed;
};

// What a lookup got for one group: blocks [first, first + got) of its chain, verified, values
// value_bytes each.
struct GroupFetched {
  uint32_t group = 0, first = 0, got = 0;
  std::vector<uint8_t> values;
};

// A finished background fetch (fetch_async): each group's blocks; with STATE layers the
// checkpoint found at state_boundary (0: none), its value.
struct StoreFetched {
  uint64_t id;
  std::vector<GroupFetched> groups;
  uint32_t state_boundary = 0;
  std::vector<uint8_t> state_value;
};

class StoreTier {
 public:
  // Opens the lookup store and, unless read-only, the writer's store and thread. Throws as
  // make_store.
  StoreTier(const pkv_store_params &p, const StoreShape &shape, const HostTierView &host);
  ~StoreTier();  // the writer finishes the queued writes first
  StoreTier(const StoreTier &) = delete;
  StoreTier &operator=(const StoreTier &) = delete;

  const StoreShape &shape() const { return shape_; }
  // fp8: new scales (before any block was looked up or written): the fingerprint names them.
  void set_kv_scales(const std::vector<float> &k, const std::vector<float> &v) {
    shape_.kv_scales = k;
    shape_.kv_scales.insert(shape_.kv_scales.end(), v.begin(), v.end());
    fingerprint_ = store_fingerprint(shape_);
  }
  bool writes_through() const { return write_mode_ == PKV_STORE_WRITE_THROUGH; }
  bool writes() const { return write_mode_ != PKV_STORE_READ_ONLY; }
  uint32_t lookup_timeout_ms() const { return lookup_timeout_ms_; }

  // The chain of blocks [0, n) of tokens under keys (salt, adapter, extra keys) in a KV group
  // (store_group_root).
  void keys(const PrefixKeys &keys, const int32_t *tokens, uint32_t n, StoreChain *out,
            uint32_t group = 0) const;
  // The same from each block's extra bytes (extras: [n], or empty when no block has any).
  void keys(const std::string &salt, uint64_t lora_id, const std::vector<std::string> &extras,
            const int32_t *tokens, uint32_t n, StoreChain *out, uint32_t group = 0) const;
  // Asks the store for blocks [first, first + n) of the chain in one call and verifies them in
  // order; values gets the leading verified ones (value_bytes each) and their number is
  // returned. Counted in the counters.
  uint32_t fetch(const StoreChain &chain, const int32_t *tokens, uint32_t first, uint32_t n,
                 std::vector<uint8_t> *values);
  // Every group's part of a lookup (GroupFetch), in order: one fetch() per group; a group with
  // first_needed asks for the window before the hit the groups before it allow. Returns how far
  // the hit can reach (blocks) by the groups that need every block; tokens cover its chains.
  uint32_t fetch_groups(const std::vector<GroupFetch> &groups, const int32_t *tokens,
                        std::vector<GroupFetched> *out) {
    return fetch_groups_from(*lookup_, groups, tokens, out);
  }
  // The scheduler's lookups: the fetch runs on a thread of its own (started at the first call,
  // which makes its own store there and keeps it: the engine's thread never waits for a
  // connection; while the store cannot be made, a lookup is a miss answered at once) and its
  // result comes back through take_fetched(); groups and tokens as for fetch_groups(). Never
  // throws for the store's sake. state_lo (with STATE layers; 0: none): also the longest
  // checkpoint of boundaries state_lo .. where the hit can reach (fetch_state on state_chain:
  // group 0's, as write_state's).
  void fetch_async(uint64_t id, std::vector<GroupFetch> groups, std::vector<int32_t> tokens,
                   uint32_t state_lo = 0, StoreChain state_chain = {});
  std::vector<StoreFetched> take_fetched();
  // Waits until a fetch has finished (true) or timeout_ms passed (false).
  bool wait_fetched(uint32_t timeout_ms);
  // The host waits for queued device copies before it reads or writes host-tier memory (the
  // CUDA backend's copies run asynchronously): stage, read_host and stage_state call this first.
  void set_host_fence(std::function<void()> fence) { host_fence_ = std::move(fence); }
  // Copies a fetched value's payload into host-tier block `host`; read_host the other way (into
  // a value's payload, for write-back).
  void stage(const uint8_t *value, int32_t host) const;
  void read_host(int32_t host, uint8_t *value) const;

  // Encodes a value (value_bytes) whose payload is in place: header and tokens. key/parent: the
  // block's store keys.
  void encode(const StoreKey &key, const StoreKey &parent, const int32_t *tokens,
              uint8_t *value) const {
    encode_value(shape_, fingerprint_, key, parent, tokens, value);
  }
  // Queues a complete value for the writer; dropped (and counted) when the queue is full, or,
  // with wait, queued once the writer has made room.
  void write(const StoreKey &key, std::vector<uint8_t> value, StoreWritten written,
             bool wait = false);
  // Blocks the writer stored since the last call.
  std::vector<StoreWritten> take_written();
  // Waits until every queued write is done (tests, shutdown).
  void flush();

  // ---------------------------------------------------------------- the recurrent state
  // Checkpoints of the state (store_format.h, store_tier_state.cpp), for an engine with STATE
  // layers: slot_bytes each, layout as state_fingerprint wants it, staged into the host state
  // slots at host_slots.
  void enable_state(uint64_t slot_bytes, const std::string &layout, char *host_slots);
  bool has_state() const { return state_; }
  // The longest boundary h in [lo, hi] (blocks; chain and tokens cover hi blocks) whose
  // checkpoint the store holds and that verifies: h, its value in *value; 0 when none. Asks which
  // are held first (one call), then reads the held ones from the longest down. Counted as blocks.
  uint32_t fetch_state(const StoreChain &chain, const int32_t *tokens, uint32_t lo, uint32_t hi,
                       std::vector<uint8_t> *value) {
    return fetch_state_from(*lookup_, chain, tokens, lo, hi, value);
  }
  // A fetched checkpoint's state into host state slot `slot`.
  void stage_state(const uint8_t *value, int32_t slot) const;
  // Queues the checkpoint at boundary h (chain and tokens cover h blocks): the state's
  // slot_bytes at `state`, copied now.
  void write_state(const StoreChain &chain, const int32_t *tokens, uint32_t h, const void *state,
                   StoreWritten written);

  const StoreCounters &counters() const { return counters_; }
  std::string last_error() const;

 private:
  struct Job {
    StoreKey key;
    std::vector<uint8_t> value;
    StoreWritten written;
  };

  struct FetchJob {
    uint64_t id;
    std::vector<GroupFetch> groups;
    std::vector<int32_t> tokens;
    uint32_t state_lo;
    StoreChain state_chain;
  };

  void note_error(std::string what);
  void writer_loop();
  void fetcher_loop();
  // fetch() on a given store.
  uint32_t fetch_from(Store &store, const StoreChain &chain, const int32_t *tokens, uint32_t first,
                      uint32_t n, std::vector<uint8_t> *values);
  // fetch_groups() on a given store.
  uint32_t fetch_groups_from(Store &store, const std::vector<GroupFetch> &groups,
                             const int32_t *tokens, std::vector<GroupFetched> *out);
  // fetch_state() on a given store.
  uint32_t fetch_state_from(Store &store, const StoreChain &chain, const int32_t *tokens,
                            uint32_t lo, uint32_t hi, std::vector<uint8_t> *value);
  // The key of the checkpoint at boundary h, and the parent its value names.
  void state_key(const StoreChain &chain, const int32_t *tokens, uint32_t h, StoreKey *key,
                 StoreKey *parent) const;
  // Puts jobs[i, j) (values of one size) in one call; counts and notes what it did.
  void put_jobs(const std::vector<Job> &jobs, size_t i, size_t j, std::vector<StoreKey> *keys,
                std::vector<uint8_t> *values);

  StoreShape shape_;
  StoreFingerprint fingerprint_;
  uint32_t write_mode_, lookup_timeout_ms_, queue_cap_;
  std::unique_ptr<Store> lookup_;
  std::unique_ptr<Store> writer_store_;
  StoreCounters counters_;

  mutable std::mutex mutex_;  // the queue, the written list, the last error
  std::condition_variable wake_, idle_, room_;
  std::deque<Job> queue_;
  size_t busy_ = 0;  // jobs the writer has taken and not finished
  bool stop_ = false;
  std::vector<StoreWritten> written_;
  std::string last_error_;
  std::thread writer_;

  HostTierView host_;
  std::function<void()> host_fence_;      // set_host_fence; empty: nothing to wait for
  std::unique_ptr<Store> fetcher_store_;  // made and used by the fetcher thread only
  std::mutex fetch_mutex_;
  std::condition_variable fetch_wake_, fetch_done_;
  std::deque<FetchJob> fetch_queue_;
  std::vector<StoreFetched> fetched_;
  bool fetch_stop_ = false;
  std::thread fetcher_;
  pkv_store_params params_;  // the engine's copy (its strings outlive this)

  bool state_ = false;  // checkpoints of the recurrent state (enable_state)
  StoreShape state_shape_{};
  StoreFingerprint state_fp_{};
  char *host_state_ = nullptr;
};

}  // namespace pkv
