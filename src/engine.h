// Engine: owns the configuration, the block manager, the KV pool (backend) and the sequences.
// Every public operation validates everything first and changes state only once nothing can fail
// but a pkv bug, so a failed call leaves the engine as it was.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "block_manager.h"
#include "kv_events.h"
#include "scheduler.h"
#include "pkv/pkv.h"
#include "sequence.h"

namespace pkv {

class Batch;

class Engine {
 public:
  explicit Engine(const pkv_engine_params &params);  // validated params; throws
  ~Engine();

  std::mutex &mutex() { return mutex_; }
  std::string &last_error() { return last_error_; }
  const char *last_error_text() const { return last_error_.c_str(); }
  const pkv_engine_params &params() const { return params_; }
  const pkv_kv_budget &budget() const { return budget_; }
  BlockManager &blocks() { return blocks_; }

  uint64_t allocate(const int32_t *tokens, uint32_t n, const std::string &salt, uint32_t *cached);
  BlockManager::Admission query(const int32_t *tokens, uint32_t n, const std::string &salt) const;
  void append(uint64_t id, const int32_t *tokens, uint32_t n);
  uint64_t fork(uint64_t parent);
  void release(uint64_t id);
  void preempt(uint64_t id);
  uint32_t resume(uint64_t id);

  // pkv_attention: the batch's copies first (once), then write_kv + attention of one layer.
  void attention(Batch &batch, uint32_t layer, const void *q, const void *k, const void *v, void *out);
  struct pkv_pool_info pool_info() const;
  void set_stream(void *stream) { backend_->set_stream(stream); }

  Sequence &seq(uint64_t id);  // PKV_ERR_NOT_FOUND for unknown or released ids
  uint64_t add_sequence(Sequence s);  // gives it the next id
  void remove_sequence(uint64_t id);
  Scheduler &scheduler() { return scheduler_; }
  KvEvents &events() { return events_; }
  void reset_prefix_cache() { blocks_.reset_cache(); }
  struct pkv_seq_info seq_info(uint64_t id);
  pkv_stats stats() const;
  void check() const;

  // The one open batch (step planning); null when none.
  Batch *open_batch() const { return open_batch_.get(); }
  Batch &begin_batch(const uint64_t *seqs, const uint32_t *num_new_tokens, uint32_t num_seqs,
                     bool from_step = false);
  void finish_batch(bool ran);  // ran: pkv_batch_end; else pkv_batch_abort

 private:
  PoolShape pool_shape() const;
  void require_length(uint64_t num_tokens) const;
  void require_mutable(const Sequence &seq, const char *what) const;
  void require_manual(const Sequence &seq, const char *what) const;

  std::mutex mutex_;
  std::string last_error_;
  pkv_kv_budget budget_;      // before params_: params_ is resolved from it
  pkv_engine_params params_;
  std::unique_ptr<Backend> backend_;
  BlockManager blocks_;
  KvEvents events_;
  Scheduler scheduler_;
  std::unordered_map<uint64_t, Sequence> seqs_;
  uint64_t next_seq_id_ = 1;
  std::unique_ptr<Batch> open_batch_;
  uint64_t next_batch_serial_ = 1;
};

}  // namespace pkv
