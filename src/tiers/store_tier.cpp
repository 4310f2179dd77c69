#include "tiers/store_tier.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "status.h"
#include "tiers/store_factory.h"

namespace pkv {

StoreTier::StoreTier(const pkv_store_params &p, const StoreShape &shape, const HostTierView &host)
    : shape_(shape),
      fingerprint_(store_fingerprint(shape)),
      write_mode_(p.write_mode),
      lookup_timeout_ms_(p.lookup_timeout_ms),
      queue_cap_(p.write_queue_blocks),
      lookup_(make_store(p)),
      host_(host),
      params_(p) {
  if (shape_.model_id.empty())
    last_error_ =
        "no store model_id: any model of this KV shape shares these blocks (another model's, a "
        "fine-tune's KV would hit); set pkv_store_params.model_id (pkv_hf_config_digest gives one)";
  if (write_mode_ != PKV_STORE_READ_ONLY) {
    writer_store_ = make_store(p);
    writer_ = std::thread([this] { writer_loop(); });
  }
}

StoreTier::~StoreTier() {
  if (fetcher_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(fetch_mutex_);
      fetch_stop_ = true;
    }
    fetch_wake_.notify_all();
    fetcher_.join();
  }
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  writer_.join();
}

void StoreTier::keys(const PrefixKeys &keys, const int32_t *tokens, uint32_t n, StoreChain *out,
                     uint32_t group) const {
  this->keys(keys.salt, keys.lora_id,
             keys.block_extras(keys.has_extra() ? n : 0, shape_.block_size), tokens, n, out, group);
}

void StoreTier::keys(const std::string &salt, uint64_t lora_id,
                     const std::vector<std::string> &extras, const int32_t *tokens, uint32_t n,
                     StoreChain *out, uint32_t group) const {
  PKV_ASSERT(extras.empty() || extras.size() >= n);
  out->keys.resize(size_t(n) + 1);
  out->parents.resize(n);
  out->keys[0] = store_group_root(store_root_key(fingerprint_, salt, lora_id), group);
  for (uint32_t j = 0; j < n; ++j) {
    out->parents[j] = extras.empty() ? out->keys[j] : store_value_parent(out->keys[j], extras[j]);
    out->keys[j + 1] =
        store_block_key(out->parents[j], tokens + size_t(j) * shape_.block_size, shape_.block_size);
  }
}

uint32_t StoreTier::fetch(const StoreChain &chain, const int32_t *tokens, uint32_t first,
                          uint32_t n, std::vector<uint8_t> *values) {
  return fetch_from(*lookup_, chain, tokens, first, n, values);
}

uint32_t StoreTier::fetch_groups_from(Store &store, const std::vector<GroupFetch> &groups,
                                      const int32_t *tokens, std::vector<GroupFetched> *out) {
  out->clear();
  out->reserve(groups.size());
  uint32_t reach = 0;  // the hit's end that the groups needing every block allow
  bool any_full = false;
  for (const GroupFetch &g : groups) reach = std::max(reach, g.first + g.n);
  for (const GroupFetch &g : groups) {
    GroupFetched f;
    f.group = g.group;
    f.first = g.first;
    uint32_t end = g.first + g.n;
    if (g.first_needed) {  // its window before the reach: blocks of no use past it are not read
      end = std::min(end, reach);
      f.first = std::max(g.first, std::min(g.first_needed(reach), end));
    }
    f.got =
        end > f.first ? fetch_from(store, g.chain, tokens, f.first, end - f.first, &f.values) : 0;
    if (!g.first_needed) {
      reach = any_full ? std::min(reach, f.first + f.got) : f.first + f.got;
      any_full = true;
    }
    out->push_back(std::move(f));
  }
  return reach;
}

// Never blocks on the store: the fetcher thread makes its store (a Redis connection) itself.
void StoreTier::fetch_async(uint64_t id, std::vector<GroupFetch> groups,
                            std::vector<int32_t> tokens, uint32_t state_lo,
                            StoreChain state_chain) {
  if (!fetcher_.joinable()) fetcher_ = std::thread([this] { fetcher_loop(); });
  {
    std::lock_guard<std::mutex> lock(fetch_mutex_);
    fetch_queue_.push_back(
        FetchJob{id, std::move(groups), std::move(tokens), state_lo, std::move(state_chain)});
  }
  fetch_wake_.notify_one();
}

std::vector<StoreFetched> StoreTier::take_fetched() {
  std::lock_guard<std::mutex> lock(fetch_mutex_);
  return std::move(fetched_);
}

bool StoreTier::wait_fetched(uint32_t timeout_ms) {
  std::unique_lock<std::mutex> lock(fetch_mutex_);
  return fetch_done_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                              [&] { return !fetched_.empty(); });
}

// The fetcher's store is made here, off the engine's thread, and kept: a Redis store reconnects
// by itself (at most once a second). While it cannot be made (the server down or not answering),
// each job is a miss answered at once, and making it is tried again at most once a second.
void StoreTier::fetcher_loop() {
  using Clock = std::chrono::steady_clock;
  constexpr auto kRetry = std::chrono::seconds(1);
  Clock::time_point next_try{};
  for (;;) {
    FetchJob job;
    {
      std::unique_lock<std::mutex> lock(fetch_mutex_);
      fetch_wake_.wait(lock, [&] { return fetch_stop_ || !fetch_queue_.empty(); });
      if (fetch_stop_) return;
      job = std::move(fetch_queue_.front());
      fetch_queue_.pop_front();
    }
    if (!fetcher_store_ && Clock::now() >= next_try) {
      next_try = Clock::now() + kRetry;
      try {
        fetcher_store_ = make_store(params_);
      } catch (const Error &err) {
        note_error(std::string("the store's fetcher: ") + err.what());
      }
    }
    StoreFetched out{job.id, {}, 0, {}};
    if (fetcher_store_) {
      const uint32_t reach =
          fetch_groups_from(*fetcher_store_, job.groups, job.tokens.data(), &out.groups);
      if (job.state_lo && reach >= job.state_lo)  // a checkpoint where the KV reaches
        out.state_boundary = fetch_state_from(
            *fetcher_store_, job.state_chain, job.tokens.data(), job.state_lo,
            std::min<uint32_t>(reach, uint32_t(job.state_chain.parents.size())), &out.state_value);
    } else {
      for (const GroupFetch &g : job.groups) {
        counters_.lookups += g.n;
        counters_.errors += g.n;
      }
    }
    {
      std::lock_guard<std::mutex> lock(fetch_mutex_);
      fetched_.push_back(std::move(out));
    }
    fetch_done_.notify_all();
  }
}

void StoreTier::stage(const uint8_t *value, int32_t host) const {
  if (host_fence_) host_fence_();
  // The payload is layer by layer, K then V (MLA: K): into the host tier's layout.
  const uint8_t *payload = value + payload_offset(shape_);
  const uint64_t bb = host_.block_bytes, n = shape_.tensors, at = uint64_t(host) * bb;
  for (size_t l = 0; l < host_.k.size(); ++l) {
    std::memcpy(host_.k[l] + at, payload + n * l * bb, bb);
    if (n == 2) std::memcpy(host_.v[l] + at, payload + (2 * uint64_t(l) + 1) * bb, bb);
  }
}

void StoreTier::read_host(int32_t host, uint8_t *value) const {
  if (host_fence_) host_fence_();
  uint8_t *payload = value + payload_offset(shape_);
  const uint64_t bb = host_.block_bytes, n = shape_.tensors, at = uint64_t(host) * bb;
  for (size_t l = 0; l < host_.k.size(); ++l) {
    std::memcpy(payload + n * l * bb, host_.k[l] + at, bb);
    if (n == 2) std::memcpy(payload + (2 * uint64_t(l) + 1) * bb, host_.v[l] + at, bb);
  }
}

uint32_t StoreTier::fetch_from(Store &store, const StoreChain &chain, const int32_t *tokens,
                               uint32_t first, uint32_t n, std::vector<uint8_t> *values) {
  values->clear();
  if (n == 0) return 0;
  const std::vector<StoreKey> &keys = chain.keys;
  PKV_ASSERT(keys.size() > size_t(first) + n && chain.parents.size() >= size_t(first) + n);
  counters_.lookups += n;
  const uint64_t vb = shape_.value_bytes();
  values->resize(size_t(n) * vb);
  std::vector<uint8_t> found(n, kStoreAbsent);
  std::vector<uint64_t> held(n, 0);
  const StoreStatus st = store.get(&keys[first + 1], n, values->data(), vb, found.data(),
                                   lookup_timeout_ms_, held.data());
  if (!st.ok) {
    counters_.errors += n;
    note_error(std::string(store.kind()) + " store: " + st.error);
    values->clear();
    return 0;
  }
  uint32_t good = 0;
  for (; good < n; ++good) {
    const uint32_t j = first + good;  // block j: key keys[j + 1], parent parents[j]
    if (found[good] == kStoreAbsent) {
      counters_.misses += n - good;
      break;
    }
    std::string why;
    if (found[good] == kStoreWrongSize)
      why = held[good] == 0
                ? "an empty value, a block is " + std::to_string(vb) + " bytes"
                : std::to_string(held[good]) + " bytes, a block is " + std::to_string(vb) +
                      " bytes" + (held[good] < vb ? " (truncated)" : " (padded)");
    else if (found[good] == kStoreNotAValue)
      why =
          "not a value (a FIFO, device or directory in a block file's place, or another Redis type)";
    else
      why =
          verify_value(shape_, fingerprint_, keys[j + 1], chain.parents[j],
                       tokens + size_t(j) * shape_.block_size, values->data() + size_t(good) * vb);
    if (!why.empty()) {
      counters_.rejected++;
      counters_.misses += n - good - 1;
      note_error(std::string(store.kind()) + " store: block " + keys[j + 1].hex() +
                 " rejected: " + why);
      break;
    }
  }
  counters_.hits += good;
  values->resize(size_t(good) * vb);
  return good;
}

void StoreTier::write(const StoreKey &key, std::vector<uint8_t> value, StoreWritten written,
                      bool wait) {
  if (!writer_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wait) room_.wait(lock, [&] { return queue_.size() < queue_cap_; });
    if (queue_.size() >= queue_cap_) {
      counters_.put_dropped++;
      return;
    }
    queue_.push_back(Job{key, std::move(value), written});
  }
  wake_.notify_one();
}

std::vector<StoreWritten> StoreTier::take_written() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::move(written_);
}

void StoreTier::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return queue_.empty() && busy_ == 0; });
}

std::string StoreTier::last_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

void StoreTier::note_error(std::string what) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = std::move(what);
}

void StoreTier::put_jobs(const std::vector<Job> &jobs, size_t i, size_t j,
                         std::vector<StoreKey> *keys, std::vector<uint8_t> *values) {
  const size_t vb = jobs[i].value.size(), n = j - i;
  keys->resize(n);
  values->resize(n * vb);
  for (size_t k = 0; k < n; ++k) {
    (*keys)[k] = jobs[i + k].key;
    std::copy(jobs[i + k].value.begin(), jobs[i + k].value.end(), values->begin() + k * vb);
  }
  const StoreStatus st = writer_store_->put(keys->data(), n, values->data(), vb);
  std::lock_guard<std::mutex> lock(mutex_);
  if (st.ok) {
    counters_.puts += n;
    for (size_t k = i; k < j; ++k) written_.push_back(jobs[k].written);
  } else {
    counters_.put_errors += n;
    last_error_ = std::string(writer_store_->kind()) + " store: writing " + std::to_string(n) +
                  " values failed: " + st.error;
  }
}

void StoreTier::writer_loop() {
  // Takes what is queued (up to a batch) and puts it, a call per value size; the engine never
  // waits for it.
  constexpr size_t kBatch = 32;
  std::vector<Job> jobs;
  std::vector<StoreKey> keys;
  std::vector<uint8_t> values;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is written
      jobs.clear();
      while (!queue_.empty() && jobs.size() < kBatch) {
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      busy_ = jobs.size();
    }
    room_.notify_all();
    // Values of one size go in one call (blocks; checkpoints of the state are another size).
    for (size_t i = 0, j = 0; i < jobs.size(); i = j) {
      for (j = i + 1; j < jobs.size() && jobs[j].value.size() == jobs[i].value.size();) ++j;
      put_jobs(jobs, i, j, &keys, &values);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      busy_ = 0;
    }
    idle_.notify_all();
  }
}

}  // namespace pkv
