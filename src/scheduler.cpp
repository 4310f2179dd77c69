#include "scheduler.h"

#include <algorithm>

#include "batch.h"
#include "engine.h"
#include "status.h"

namespace pkv {

uint64_t Scheduler::submit(Engine &e, const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                           const std::string &salt) {
  PKV_REQUIRE(rp.max_new_tokens >= 1, "max_new_tokens must be >= 1");
  PKV_REQUIRE(rp.reserved0 == 0, "reserved0 must be 0");
  const pkv_engine_params &p = e.params();
  const uint64_t total = uint64_t(n) + rp.max_new_tokens;
  PKV_REQUIRE(total <= INT32_MAX && (p.max_model_len == 0 || total <= p.max_model_len),
              "prompt (%u) + max_new_tokens (%u) exceed max_model_len %u: this request can never run",
              n, rp.max_new_tokens, p.max_model_len);
  const uint32_t need = blocks_for_tokens(total, p.block_size);
  PKV_REQUIRE(need <= p.num_blocks,
              "prompt (%u) + max_new_tokens (%u) need %u blocks, the pool has %u: this request can never run",
              n, rp.max_new_tokens, need, p.num_blocks);
  Sequence s;
  s.salt = salt;
  s.tokens.assign(prompt, prompt + n);
  s.preempted = true;  // no blocks until admitted
  s.request.active = true;
  s.request.prompt_len = n;
  s.request.max_new_tokens = rp.max_new_tokens;
  s.request.stop_token = rp.stop_token;
  s.request.priority = rp.priority;
  const uint64_t id = e.add_sequence(std::move(s));
  try {
    enqueue(e, id);
  } catch (...) {
    e.remove_sequence(id);
    throw;
  }
  return id;
}

void Scheduler::enqueue(Engine &e, uint64_t id) {
  // Higher priority first; equal priorities keep their arrival order.
  const int32_t prio = e.seq(id).request.priority;
  auto it = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](uint64_t other) { return e.seq(other).request.priority < prio; });
  waiting_.insert(it, id);
}

void Scheduler::preempt(Engine &e, Sequence &s) {
  e.blocks().free_blocks(s);
  s.preempted = true;
  s.num_cached = 0;
  if (s.request.has_pending) {  // recomputing the sampled token's KV samples the next one
    s.tokens.push_back(s.request.pending);
    s.request.has_pending = false;
  }
  e.blocks().count_preemption();
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  waiting_.push_front(s.id);
}

void Scheduler::finish(Engine &e, Sequence &s, uint32_t reason) {
  e.blocks().free_blocks(s);
  s.preempted = true;
  s.request.finish_reason = reason;
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  finished_.push_back(s.id);
  num_finished_++;
}

// Reserves the slot of s's sampled token, preempting the newest running requests while there is
// no free block. False when s itself had to go.
bool Scheduler::reserve_pending(Engine &e, Sequence &s, std::vector<uint64_t> &chosen) {
  for (;;) {
    try {
      e.blocks().append(s, &s.request.pending, 1);
      s.request.has_pending = false;
      return true;
    } catch (const Error &err) {
      if (err.status() != PKV_ERR_NO_SPACE) throw;
    }
    Sequence &victim = e.seq(running_.back());
    chosen.erase(std::remove(chosen.begin(), chosen.end(), victim.id), chosen.end());
    const bool self = victim.id == s.id;
    preempt(e, victim);
    if (self) return false;
  }
}

Batch *Scheduler::step(Engine &e) {
  if (e.open_batch()) fail(PKV_ERR_STATE, "a batch is already open on this engine: commit or abort it first");
  const pkv_engine_params &p = e.params();
  std::vector<uint64_t> chosen;
  bool preempted = false;
  // Running requests first, oldest first: their sampled tokens get slots, then they compute.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence &s = e.seq(running_[i]);
    const size_t before = running_.size();
    const bool kept = !s.request.has_pending || reserve_pending(e, s, chosen);
    preempted |= running_.size() != before;
    if (!kept) break;  // s itself was the newest and went back to the queue
    chosen.push_back(s.id);
  }
  // Budget in running order; what does not fit waits for the next step.
  std::vector<uint64_t> ids;
  std::vector<uint32_t> counts;
  uint32_t budget = p.max_num_batched_tokens;
  for (uint64_t id : chosen) {
    const Sequence &s = e.seq(id);
    if (ids.size() == p.max_num_seqs || budget == 0) break;
    const uint32_t n = std::min(s.num_uncomputed(), budget);
    if (n == 0) continue;
    ids.push_back(id);
    counts.push_back(n);
    budget -= n;
  }
  // Waiting requests while seats, tokens and blocks allow - not in a step that had to preempt,
  // unless that left nothing to run (then the queue's front, often the preempted one, goes on).
  while ((!preempted || ids.empty()) && !waiting_.empty() && ids.size() < p.max_num_seqs && budget > 0) {
    Sequence &s = e.seq(waiting_.front());
    try {
      e.blocks().admit(s);
    } catch (const Error &err) {
      if (err.status() != PKV_ERR_NO_SPACE) throw;
      break;
    }
    s.preempted = false;
    s.request.admitted_once = true;
    waiting_.pop_front();
    running_.push_back(s.id);
    const uint32_t n = std::min(s.num_uncomputed(), budget);
    ids.push_back(s.id);
    counts.push_back(n);
    budget -= n;
  }
  if (ids.empty()) return nullptr;
  Batch &b = e.begin_batch(ids.data(), counts.data(), static_cast<uint32_t>(ids.size()), true);
  steps_++;
  scheduled_tokens_ += p.max_num_batched_tokens - budget;
  return &b;
}

void Scheduler::commit(Engine &e, Batch &batch, const int32_t *sampled) {
  if (!batch.from_step()) fail(PKV_ERR_STATE, "this batch came from pkv_batch_begin: end it with pkv_batch_end");
  const pkv_batch_view v = batch.view();
  const std::vector<uint64_t> ids(v.seq_ids, v.seq_ids + v.num_seqs);
  const std::vector<int32_t> rows(v.sample_rows, v.sample_rows + v.num_seqs);
  const bool samples = std::any_of(rows.begin(), rows.end(), [](int32_t r) { return r >= 0; });
  PKV_REQUIRE(sampled != nullptr || !samples, "sampled_tokens is NULL but this step samples");
  e.finish_batch(true);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (rows[i] < 0) continue;
    Sequence &s = e.seq(ids[i]);
    const int32_t token = sampled[i];
    s.request.generated++;
    if (token == s.request.stop_token || s.request.generated >= s.request.max_new_tokens) {
      finish(e, s, token == s.request.stop_token ? PKV_FINISH_STOP_TOKEN : PKV_FINISH_LENGTH);
      s.tokens.push_back(token);
    } else {
      s.request.has_pending = true;
      s.request.pending = token;
    }
  }
}

size_t Scheduler::drain_finished(uint64_t *out, size_t cap) {
  size_t n = 0;
  for (; n < cap && !finished_.empty(); ++n) {
    out[n] = finished_.front();
    finished_.pop_front();
  }
  return n;
}

void Scheduler::forget(uint64_t id, bool finished) {
  if (finished) num_finished_--;
  auto drop = [id](auto &c) {
    auto it = std::find(c.begin(), c.end(), id);
    if (it == c.end()) return false;
    c.erase(it);
    return true;
  };
  drop(waiting_);
  drop(running_);
  drop(finished_);
}

}  // namespace pkv
