// Continuous batching (DESIGN.md §7): pkv_submit queues, pkv_step plans, pkv_commit samples.
// Requests are ordinary sequences of the engine with a RequestState; the scheduler keeps which
// are waiting, running (holding blocks) or finished.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

class Engine;
class Batch;
struct Sequence;

class Scheduler {
 public:
  uint64_t submit(Engine &e, const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                  const std::string &salt);
  // The next batch, or null when there is nothing to run.
  Batch *step(Engine &e);
  // pkv_commit: validates, ends the batch, applies the sampled tokens.
  void commit(Engine &e, Batch &batch, const int32_t *sampled);
  size_t drain_finished(uint64_t *out, size_t cap);
  void forget(uint64_t id, bool finished);  // pkv_release of a request

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  size_t num_finished() const { return num_finished_; }
  uint64_t num_scheduled_tokens() const { return scheduled_tokens_; }
  uint64_t num_steps() const { return steps_; }

 private:
  void enqueue(Engine &e, uint64_t id);  // by priority, then arrival
  void preempt(Engine &e, Sequence &s);  // back to the front of the queue
  bool reserve_pending(Engine &e, Sequence &s, std::vector<uint64_t> &chosen);
  void finish(Engine &e, Sequence &s, uint32_t reason);

  std::deque<uint64_t> waiting_;
  std::vector<uint64_t> running_;  // admission order: the newest is preempted first
  std::deque<uint64_t> finished_;  // not yet drained
  size_t num_finished_ = 0;        // finished and not released
  uint64_t scheduled_tokens_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace pkv
