#include "scheduler.h"

#include <algorithm>
#include <unordered_set>

#include "params.h"
#include "status.h"

namespace pkv {
namespace {

// Runs f; false when it found too few free blocks (PKV_ERR_NO_SPACE: it changed nothing).
template <class F> bool fits(F &&f) {
  try {
    f();
    return true;
  } catch (const Error &err) {
    if (err.status() != PKV_ERR_NO_SPACE) throw;
    return false;
  }
}

}  // namespace

std::vector<GroupFetch> store_lookup(const BlockManager &blocks, const StoreTier &store,
                                     const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                                     const BlockManager::Admission &plan) {
  const uint32_t max_hits = blocks.max_hits(n), first = std::min(plan.kv_hits, max_hits);
  std::vector<GroupFetch> out;
  const uint32_t bs = blocks.block_size();
  for (int windowed = 0; windowed < 2; ++windowed)
    for (uint32_t g = 0; g < blocks.num_groups(); ++g) {
      const GroupKind kind = blocks.kind(g);
      if (!kind.rules().holds_blocks || kind.rules().gives_back != bool(windowed)) continue;
      GroupFetch f;
      f.group = g;
      f.first = first;
      f.n = max_hits - first;
      store.keys(keys, tokens, max_hits, &f.chain, g);
      // first_held with prefix caching on (a store needs it): the kind's first block, but never
      // past the hit's last block (block_manager_admit.cpp).
      if (windowed)
        f.first_needed = [kind, bs](uint32_t h) {
          return std::min(kind.first_needed(uint64_t(h) * bs, bs), h ? h - 1 : 0);
        };
      out.push_back(std::move(f));
    }
  return out;
}

uint32_t stage_fetched(BlockManager &blocks, StoreTier &store, const PrefixKeys &keys,
                       const int32_t *tokens, uint32_t n,
                       const std::vector<GroupFetched> &fetched) {
  const BlockManager::Admission plan = blocks.plan_admission(keys, tokens, n);
  std::unordered_set<int32_t> keep = blocks.host_hits(plan);  // what the hit loads stays
  const uint64_t vb = store.shape().value_bytes();
  uint32_t from_store = 0;
  std::vector<int32_t> host;
  for (const GroupFetched &f : fetched) {
    const uint32_t staged =
        blocks.stage_from_store(keys, tokens, f.group, f.first, f.got, &keep, &host);
    for (uint32_t i = 0; i < staged; ++i) {
      if (host[i] < 0) continue;
      store.stage(f.values.data() + size_t(i) * vb, host[i]);
      from_store++;
    }
  }
  return from_store;
}

bool stage_fetched_state(BlockManager &blocks, const StatePool &states, StoreTier &store,
                         const PrefixKeys &keys, const int32_t *tokens, uint32_t n, uint32_t h,
                         const std::vector<uint8_t> &value) {
  const int32_t slot = blocks.stage_checkpoint(keys, tokens, n, h,
                                               [&](int32_t s) { return states.host_slot_busy(s); });
  if (slot < 0) return false;
  store.stage_state(value.data(), slot);
  return true;
}

uint64_t Scheduler::submit(const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                           const PrefixKeys &keys) {
  PKV_REQUIRE(rp.max_new_tokens >= 1, "max_new_tokens must be >= 1");
  PKV_REQUIRE(rp.reserved0 == 0, "reserved0 must be 0");
  const Retention retention =
      read_retention(rp.cache_priority, rp.cache_retention_ms, "request params'");
  const uint64_t total = uint64_t(n) + rp.max_new_tokens;
  PKV_REQUIRE(
      total <= INT32_MAX && (limits_.max_model_len == 0 || total <= limits_.max_model_len),
      "prompt (%u) + max_new_tokens (%u) exceed max_model_len %u: this request can never run", n,
      rp.max_new_tokens, limits_.max_model_len);
  PKV_REQUIRE(rp.hold_on_finish <= 1, "hold_on_finish must be 0 or 1, got %u", rp.hold_on_finish);
  PKV_REQUIRE(rp.reserved1 == 0, "reserved1 must be 0");
  PKV_REQUIRE(rp.num_remote_tokens < n,
              "num_remote_tokens %u must be below the prompt's %u tokens: its last token is "
              "computed here, for the first sample",
              rp.num_remote_tokens, n);
  // Every KV group's blocks at the request's peak, over prefill (per chunk: chunks of up to
  // max_num_batched_tokens; a receiving request is admitted with its whole prompt, where a
  // transfer writes) and decode.
  const bool whole = max_chunk() == 0 || rp.num_remote_tokens > 0;
  const uint64_t need = blocks_.peak_blocks(n, total, whole ? 0 : max_chunk());
  PKV_REQUIRE(need <= limits_.num_blocks,
              "prompt (%u) + max_new_tokens (%u) need %llu blocks at their peak (%s), the pool has "
              "%u: this request can never run",
              n, rp.max_new_tokens, (unsigned long long)need,
              whole ? "its prompt admitted whole" : "admitted per chunk", limits_.num_blocks);
  Sequence &s = seqs_.create();
  try {
    s.keys = keys;
    s.retention = retention;
    s.tokens.assign(prompt, prompt + n);
    s.request = Request{true, n, rp.max_new_tokens, 0, rp.stop_token, rp.priority, PKV_FINISH_NONE};
    s.request.hold_on_finish = rp.hold_on_finish;
    s.request.hold_timeout_ms = rp.hold_timeout_ms;
    s.request.remote_tokens = rp.num_remote_tokens;
    enqueue(s.id);
  } catch (...) {
    seqs_.discard(s.id);
    throw;
  }
  return s.id;
}

void Scheduler::enqueue(uint64_t id) {
  // Higher priority first; equal priorities keep their arrival order.
  const int32_t prio = seqs_.get(id).request.priority;
  auto it = std::find_if(waiting_.begin(), waiting_.end(),
                         [&](uint64_t other) { return seqs_.get(other).request.priority < prio; });
  waiting_.insert(it, id);
}

void Scheduler::finish_request(Sequence &s, uint32_t reason) {
  // finished_ first: it may grow (no memory), before anything changed.
  finished_.push_back(s.id);
  // A hold keeps its blocks for a transfer out, while the bound allows.
  bool held = false;
  if (s.request.hold_on_finish) {
    held = transfers_.fits(s);
    if (held) {
      try {
        transfers_.hold(s, transfers_.deadline(s.request.hold_timeout_ms));
      } catch (...) {
        finished_.pop_back();
        throw;
      }
    } else {
      transfers_.count_refused();
    }
  }
  if (!held) finish(s, blocks_, states_, reason);
  s.request.finish_reason = reason;
  running_.erase(std::find(running_.begin(), running_.end(), s.id));
  num_finished_++;
}

uint32_t Scheduler::end_receiving(Sequence &s, uint32_t outcome) {
  // Room in the queue it joins first: nothing below can fail.
  if (outcome == PKV_TRANSFER_DONE) running_.reserve(running_.size() + 1);
  if (outcome == PKV_TRANSFER_FAILED) waiting_.push_front(s.id);
  if (outcome == PKV_TRANSFER_FAILED_FINISH) finished_.push_back(s.id);
  receiving_.erase(std::find(receiving_.begin(), receiving_.end(), s.id));
  transfers_.end_receiving(s, outcome == PKV_TRANSFER_DONE);
  switch (outcome) {
    case PKV_TRANSFER_DONE:
      running_.push_back(s.id);
      return received(s, blocks_, states_);
    case PKV_TRANSFER_FAILED:
      stop_receiving(s, blocks_, states_, SeqState::kPreempted);
      return 0;
    default:
      stop_receiving(s, blocks_, states_, SeqState::kFinished);
      s.request.finish_reason = PKV_FINISH_TRANSFER_FAILED;
      num_finished_++;
      return 0;
  }
}

uint32_t Scheduler::max_chunk() const {
  return blocks_.admits_per_chunk() ? limits_.max_num_batched_tokens : 0;
}

uint32_t Scheduler::to_reserve(const Sequence &s, uint32_t budget) const {
  // A sampled token (or a prompt's last one) gets its slot as a decode token does, budget or not.
  if (s.num_unslotted <= 1 && s.num_uncomputed() == 0) return s.num_unslotted;
  // A chunk ends at the budget and at a checkpoint boundary (as add() cuts it); what it has
  // slotted already counts, so slotted - computed never passes max_num_batched_tokens.
  const uint64_t limit =
      std::min<uint64_t>(budget, next_checkpoint(s, blocks_) - uint64_t(s.num_computed));
  if (limit <= s.num_uncomputed()) return 0;
  return uint32_t(std::min<uint64_t>(s.num_unslotted, limit - s.num_uncomputed()));
}

// Reserves the slots of s's next n unslotted tokens (its sampled token's, or its prompt's next
// chunk), preempting the newest running requests (back to the front of the queue) while there
// is no free block. False when s itself had to go.
bool Scheduler::reserve(Sequence &s, uint32_t n) {
  for (;;) {
    if (fits([&] { reserve_unslotted(s, blocks_, n); })) return true;
    Sequence &victim = seqs_.get(running_.back());
    if (swap_out_victim(victim)) {
      swapped_.push_front(victim.id);
    } else {
      preempt(victim, blocks_, states_);
      waiting_.push_front(victim.id);
    }
    running_.pop_back();
    if (victim.id == s.id) return false;
  }
}

bool Scheduler::wants_swap(const Sequence &victim) const {
  switch (limits_.preemption_mode) {
    case PKV_PREEMPT_SWAP:
      return true;
    case PKV_PREEMPT_AUTO:  // recomputing more than one step's prefill costs more than copying
      return blocks_.num_host_blocks() > 0 && victim.num_computed > limits_.max_num_batched_tokens;
    default:
      return false;
  }
}

bool Scheduler::swap_out_victim(Sequence &victim) {
  if (!wants_swap(victim) || !fits([&] { swap_out(victim, blocks_, states_); }))
    return false;  // full: recompute
  blocks_.count_preemption();
  num_swap_preemptions_++;
  return true;
}

void Scheduler::absorb_fetched() {
  if (!store_) return;
  for (StoreFetched &f : store_->take_fetched()) {
    const Sequence *found = seqs_.find(f.id);
    if (!found || found->state != SeqState::kLoading) continue;  // released meanwhile
    Sequence *s = &seqs_.get(f.id);
    num_loading_--;
    s->state = SeqState::kWaiting;
    stage_fetched(blocks_, *store_, s->keys, s->tokens.data(), s->num_tokens(), f.groups);
    if (f.state_boundary)
      stage_fetched_state(blocks_, states_, *store_, s->keys, s->tokens.data(), s->num_tokens(),
                          f.state_boundary, f.state_value);
  }
}

bool Scheduler::start_lookup(Sequence &s) {
  s.request.store_looked_up = true;
  const uint32_t n = s.num_tokens();
  const BlockManager::Admission plan = blocks_.plan_admission(s.keys, s.tokens.data(), n);
  // The blocks past the KV the tree holds and, with STATE layers, a checkpoint past the one it
  // holds (where the hit stops): up to where that KV reaches.
  const uint32_t max_hits = blocks_.max_hits(n), first = plan.kv_hits;
  const bool state = store_->has_state() && plan.num_hits < max_hits;
  if (first >= max_hits && !state) return false;
  StoreChain state_chain;  // a checkpoint's key is group 0's block key (write_checkpoint)
  if (state) store_->keys(s.keys, s.tokens.data(), max_hits, &state_chain);
  store_->fetch_async(
      s.id, store_lookup(blocks_, *store_, s.keys, s.tokens.data(), n, plan),
      std::vector<int32_t>(s.tokens.begin(),
                           s.tokens.begin() + size_t(max_hits) * limits_.block_size),
      state ? plan.num_hits + 1 : 0, std::move(state_chain));
  s.state = SeqState::kLoading;
  num_loading_++;
  return true;
}

StepPlan Scheduler::schedule() {
  absorb_fetched();
  bool preempted = false;
  StepPlan plan;
  uint32_t budget = limits_.max_num_batched_tokens;
  auto add = [&](const Sequence &s) {
    uint32_t n = std::min(s.num_uncomputed(), budget);
    // A chunk ends at a boundary where the sequence leaves a checkpoint of its recurrent state.
    const uint64_t stop = next_checkpoint(s, blocks_);
    if (stop < uint64_t(s.num_computed) + n) n = uint32_t(stop - s.num_computed);
    plan.seq_ids.push_back(s.id);
    plan.num_new_tokens.push_back(n);
    budget -= n;
  };
  // Running requests first, oldest first: their sampled tokens, or their prompts' next chunks
  // (admitted per chunk), get slots, then they compute within the budget, in running order;
  // what does not fit waits for the next step. A preemption only takes newer requests than s.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence &s = seqs_.get(running_[i]);
    const size_t before = running_.size();
    const bool seat = plan.seq_ids.size() < limits_.max_num_seqs;
    const bool kept = reserve(s, to_reserve(s, seat ? budget : 0));
    preempted |= running_.size() != before;
    if (!kept) break;  // s itself was the newest and went back to the queue
    if (seat && budget > 0 && s.num_uncomputed() > 0) add(s);
  }
  // Swapped-out requests come back first, then waiting ones, while seats, tokens and blocks
  // allow - not in a step that had to preempt, unless that left nothing to run (then the front
  // of the queue, often the preempted one, goes on).
  auto room = [&] {
    return (!preempted || plan.seq_ids.empty()) && plan.seq_ids.size() < limits_.max_num_seqs &&
           budget > 0;
  };
  while (room() && !swapped_.empty()) {
    Sequence &s = seqs_.get(swapped_.front());
    if (!fits([&] { swap_in(s, blocks_, states_); })) break;
    swapped_.pop_front();
    running_.push_back(s.id);
    // Its sampled token's slot or its next chunk's; without them it waits for the next step,
    // running.
    if (!fits([&] { reserve_unslotted(s, blocks_, to_reserve(s, budget)); })) break;
    if (s.num_uncomputed() > 0) add(s);
  }
  // A request not yet asked of the store starts loading and lets the ones behind it go first.
  for (size_t i = 0; room() && swapped_.empty() && i < waiting_.size();) {
    Sequence &s = seqs_.get(waiting_[i]);
    if (s.state == SeqState::kLoading ||
        (store_ && !s.request.store_looked_up && start_lookup(s))) {
      ++i;
      continue;
    }
    // Per chunk: its hit and a first chunk within the budget, else its whole prompt. No blocks
    // (or no state slot): it waits, and nothing changed.
    const uint32_t first = max_chunk() ? budget : UINT32_MAX;
    if (s.request.remote_tokens > 0) {
      // A remote fill: its whole prompt, receiving while others run (none when the hit covers
      // its remote tokens: then it runs as any other).
      receiving_.reserve(receiving_.size() + 1);
      if (!fits([&] { admit_receiving(s, blocks_, states_); })) break;
      if (s.state == SeqState::kReceiving) {
        waiting_.erase(waiting_.begin() + long(i));
        receiving_.push_back(s.id);
        transfers_.began_receiving(s);
        began_receiving_ = true;
        continue;
      }
    } else if (!fits([&] { admit(s, blocks_, states_, first); })) {
      break;
    }
    waiting_.erase(waiting_.begin() + long(i));
    running_.push_back(s.id);
    add(s);
  }
  plan.num_tokens = limits_.max_num_batched_tokens - budget;
  return plan;
}

void Scheduler::commit(const std::vector<uint64_t> &seq_ids,
                       const std::vector<int32_t> &sample_rows, const int32_t *sampled) {
  for (size_t i = 0; i < seq_ids.size(); ++i) {
    if (sample_rows[i] < 0) continue;
    Sequence &s = seqs_.get(seq_ids[i]);
    const int32_t token = sampled[i];
    add_sampled(s, token);
    s.request.num_generated++;
    if (token == s.request.stop_token)
      finish_request(s, PKV_FINISH_STOP_TOKEN);
    else if (s.request.num_generated >= s.request.max_new_tokens)
      finish_request(s, PKV_FINISH_LENGTH);
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

void Scheduler::forget(const Sequence &s) {
  PKV_ASSERT(s.state != SeqState::kHeld && s.state != SeqState::kReceiving);
  if (s.state == SeqState::kFinished) num_finished_--;
  if (s.state == SeqState::kLoading) num_loading_--;  // its fetch's result will be dropped
  auto drop = [id = s.id](auto &c) {
    auto it = std::find(c.begin(), c.end(), id);
    if (it != c.end()) c.erase(it);
  };
  drop(waiting_);
  drop(swapped_);
  drop(running_);
  drop(finished_);
}

void Scheduler::check() const {
  auto expect = [&](uint64_t id, bool ok, const char *queue) {
    const Sequence &s = seqs_.get(id);
    if (!s.request.is_request || !ok)
      fail(PKV_ERR_INTERNAL, "sequence %llu (%s) is in the %s queue", (unsigned long long)id,
           state_name(s.state), queue);
  };
  size_t loading = 0;
  for (uint64_t id : receiving_)
    expect(id, seqs_.get(id).state == SeqState::kReceiving, "receiving");
  for (uint64_t id : waiting_) {
    const SeqState st = seqs_.get(id).state;
    expect(id, st == SeqState::kWaiting || st == SeqState::kPreempted || st == SeqState::kLoading,
           "waiting");
    loading += st == SeqState::kLoading;
  }
  if (loading != num_loading_)
    fail(PKV_ERR_INTERNAL, "%zu requests loading from the store, %zu counted", loading,
         num_loading_);
  for (uint64_t id : swapped_) expect(id, seqs_.get(id).state == SeqState::kSwapped, "swapped");
  for (uint64_t id : running_) expect(id, seqs_.get(id).running(), "running");
  // A held request finished (it is listed and drained as one) and keeps its blocks.
  auto done = [](SeqState st) { return st == SeqState::kFinished || st == SeqState::kHeld; };
  for (uint64_t id : finished_) expect(id, done(seqs_.get(id).state), "finished");
  size_t requests = 0, finished = 0;
  for (const auto &kv : seqs_) {
    requests += kv.second.request.is_request;
    finished += kv.second.request.is_request && done(kv.second.state);
  }
  if (requests !=
          waiting_.size() + swapped_.size() + running_.size() + receiving_.size() + finished ||
      finished != num_finished_)
    fail(PKV_ERR_INTERNAL, "%zu requests: %zu waiting, %zu running, %zu finished (counted %zu)",
         requests, waiting_.size(), running_.size(), finished, num_finished_);
}

}  // namespace pkv
