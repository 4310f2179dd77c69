#include "sequence.h"

#include <algorithm>

#include "status.h"

namespace pkv {

const char *state_name(SeqState state) {
  switch (state) {
    case SeqState::kWaiting:
      return "waiting";
    case SeqState::kRunning:
      return "running";
    case SeqState::kPreempted:
      return "preempted";
    case SeqState::kFinished:
      return "finished";
    case SeqState::kSwapped:
      return "swapped";
    case SeqState::kLoading:
      return "loading";
    case SeqState::kHeld:
      return "held for a transfer";
    case SeqState::kReceiving:
      return "receiving its remote KV";
  }
  return "unknown";
}

// ---------------------------------------------------------------- moves between states

namespace {

// After an admission of s's first n tokens that hit `hit` tokens: its working slot starts from
// the hit's checkpoint (a copy queued before the step writes the slot; room made by the caller),
// and the boundaries it leaves checkpoints at.
void start_state(Sequence &s, const BlockManager &blocks, StatePool &states, uint32_t n,
                 uint32_t hit) {
  const int32_t checkpoint = blocks.last_admission_checkpoint();
  if (checkpoint != kNoCheckpoint)  // an offloaded one comes straight from its host slot
    states.queue_copy(checkpoint_slot(checkpoint), s.state_slot,
                      is_host_checkpoint(checkpoint) ? PKV_COPY_STATE_IN : PKV_COPY_STATE);
  const uint32_t bs = blocks.block_size(), kv_hits = blocks.last_admission_kv_hits();
  s.checkpoint_end = n / bs;
  s.checkpoint_branch = kv_hits > hit / bs ? kv_hits : 0;
}

}  // namespace

void admit(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t max_chunk) {
  PKV_ASSERT(s.state == SeqState::kWaiting || s.state == SeqState::kPreempted);
  PKV_ASSERT(s.num_unslotted == 0 && s.state_slot < 0);
  if (states.enabled()) {
    states.require_free("admitting a sequence");
    states.make_room(1);
  }
  const uint32_t hit = blocks.admit(s.tables, s.keys, s.tokens.data(), s.num_tokens(), max_chunk);
  if (states.enabled()) {  // nothing below can fail: checked and made room above
    s.state_slot = states.take();
    start_state(s, blocks, states, s.num_tokens(), hit);
  }
  s.num_cached = hit;
  s.num_computed = hit;
  s.num_unslotted = s.num_tokens() - blocks.last_admission_tokens();
  s.state = SeqState::kRunning;
}

void roll_back(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t n) {
  PKV_ASSERT(s.running() && s.state_slot >= 0 && n >= 1 && n < s.num_computed);
  PKV_ASSERT(s.num_unslotted == 0);
  SeqTables held = s.tables;  // may throw: before any change
  states.make_room(1);
  const BlockManager::Releasing as(blocks, s.retention);
  blocks.free(s.tables);
  uint32_t hit = 0;
  try {
    hit = blocks.admit(s.tables, s.keys, s.tokens.data(), n);
  } catch (...) {
    // The admission changed nothing (it checks room first): its blocks are taken back as they
    // were, none reused meanwhile.
    blocks.fork(held);
    s.tables.swap(held);
    throw;
  }
  start_state(s, blocks, states, n, hit);
  s.tokens.resize(n);
  s.num_cached = hit;
  s.num_computed = hit;
}

void append(Sequence &s, BlockManager &blocks, const int32_t *tokens, uint32_t n) {
  PKV_ASSERT(s.running() && s.num_unslotted == 0);
  make_room(s.tokens, n);  // before the slots: the insert below cannot fail
  blocks.reserve_slots(s.tables, s.num_slotted(), n);
  s.tokens.insert(s.tokens.end(), tokens, tokens + n);
}

void reserve_unslotted(Sequence &s, BlockManager &blocks, uint32_t n) {
  PKV_ASSERT(s.running() && n <= s.num_unslotted);
  if (n == 0) return;
  blocks.reserve_slots(s.tables, s.num_slotted(), n);
  s.num_unslotted -= n;
}

namespace {

void give_back_state(Sequence &s, StatePool &states) {
  if (s.state_slot < 0) return;
  states.give_back(s.state_slot);
  s.state_slot = -1;
}

void give_back(Sequence &s, BlockManager &blocks, StatePool &states, SeqState to) {
  PKV_ASSERT(s.holds_kv());
  const BlockManager::Releasing as(blocks, s.retention);
  blocks.free(s.tables);
  give_back_state(s, states);
  s.num_computed = 0;
  s.num_unslotted = 0;
  s.state = to;
}

}  // namespace

void preempt(Sequence &s, BlockManager &blocks, StatePool &states) {
  give_back(s, blocks, states, SeqState::kPreempted);
  s.num_cached = 0;
  blocks.count_preemption();
}

void finish(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t reason) {
  give_back(s, blocks, states, SeqState::kFinished);
  s.request.finish_reason = reason;
}

uint32_t block_refs(const Sequence &s) {
  uint32_t n = 0;
  for (const BlockTable &t : s.tables)
    n += uint32_t(std::count_if(t.ids.begin(), t.ids.end(), [](int32_t b) { return b >= 0; }));
  return n;
}

void hold(Sequence &s, uint64_t deadline_ms) {
  PKV_ASSERT(s.running() && s.num_uncomputed() == 0 && !s.in_batch);
  s.transfer = Transfer{};
  s.transfer.held_blocks = block_refs(s);
  s.transfer.deadline_ms = deadline_ms;
  s.state = SeqState::kHeld;
}

void end_hold(Sequence &s, BlockManager &blocks, StatePool &states) {
  PKV_ASSERT(s.state == SeqState::kHeld);
  s.transfer = Transfer{};
  give_back(s, blocks, states, SeqState::kFinished);
}

void admit_receiving(Sequence &s, BlockManager &blocks, StatePool &states) {
  PKV_ASSERT(s.state == SeqState::kWaiting || s.state == SeqState::kPreempted);
  PKV_ASSERT(s.num_unslotted == 0 && s.state_slot < 0 && s.request.remote_tokens > 0);
  if (states.enabled()) {
    states.require_free("admitting a sequence");
    states.make_room(1);
  }
  const uint32_t hit = blocks.admit(s.tables, s.keys, s.tokens.data(), s.num_tokens());
  const uint32_t remote = s.request.remote_tokens, bs = blocks.block_size();
  const bool receives = hit < remote;
  if (states.enabled()) {  // nothing below can fail: checked and made room above
    s.state_slot = states.take();
    if (receives) {  // the remote state after its remote tokens replaces any checkpoint's
      blocks.forgo_restore();
      s.checkpoint_end = s.num_tokens() / bs;
      s.checkpoint_branch = 0;
    } else {
      start_state(s, blocks, states, s.num_tokens(), hit);
    }
  }
  s.num_cached = hit;
  s.num_computed = hit;
  s.num_unslotted = 0;
  s.transfer = Transfer{};
  if (!receives) {
    s.request.remote_tokens = 0;
    s.state = SeqState::kRunning;
    return;
  }
  {  // windowed groups hold only what the remote tokens' windows reach: the rest is not sent
    const BlockManager::Releasing as(blocks, s.retention);
    blocks.give_back_behind(s.tables, remote);
  }
  s.transfer.first_block = hit / bs;
  s.transfer.num_blocks = (remote + bs - 1) / bs - hit / bs;
  s.state = SeqState::kReceiving;
}

uint32_t received(Sequence &s, BlockManager &blocks, StatePool &states) {
  PKV_ASSERT(s.state == SeqState::kReceiving && s.request.remote_tokens > s.num_computed);
  const uint32_t n = s.request.remote_tokens - s.num_computed;
  s.state = SeqState::kRunning;
  s.transfer = Transfer{};
  s.request.remote_tokens = 0;
  return computed(s, blocks, states, n);
}

void stop_receiving(Sequence &s, BlockManager &blocks, StatePool &states, SeqState to) {
  PKV_ASSERT(s.state == SeqState::kReceiving);
  s.transfer = Transfer{};
  s.request.remote_tokens = 0;
  give_back(s, blocks, states, to);
  s.num_cached = 0;
}

void swap_out(Sequence &s, BlockManager &blocks, StatePool &states) {
  PKV_ASSERT(s.running());  // a request's sampled token awaiting its slot stays so, swapped
  const bool state = s.state_slot >= 0;
  if (state) {
    states.require_free_host("swapping out");
    states.make_room(1);
  }
  {
    const BlockManager::Releasing as(blocks, s.retention);
    blocks.swap_out(s.tables, s.host_blocks);
  }
  if (state) {  // cannot fail: checked and made room above
    // The copy reads the working slot before any later copy or step writes it.
    s.host_state_slot = states.take_host();
    states.queue_copy(s.state_slot, s.host_state_slot, PKV_COPY_STATE_OUT);
    give_back_state(s, states);
  }
  s.state = SeqState::kSwapped;
}

void swap_in(Sequence &s, BlockManager &blocks, StatePool &states) {
  PKV_ASSERT(s.state == SeqState::kSwapped);
  const bool state = s.host_state_slot >= 0;
  if (state) {
    states.require_free("swapping in");
    states.make_room(1);
  }
  blocks.swap_in(s.host_blocks, s.tables);  // the slotted tokens' blocks
  if (state) {
    s.state_slot = states.take();
    states.queue_copy(s.host_state_slot, s.state_slot, PKV_COPY_STATE_IN);
    states.give_back_host(s.host_state_slot);
    s.host_state_slot = -1;
  }
  s.state = SeqState::kRunning;
  // The blocks' KV is the computed tokens' (their copies come first in the next step): its
  // full blocks join the prefix tree as copies of their nodes again.
  blocks.seal(s.tables, s.keys, s.tokens.data(), s.num_computed);
}

void truncate(Sequence &s, BlockManager &blocks, uint32_t n, size_t taken) {
  PKV_ASSERT((s.running() || s.state == SeqState::kPreempted) && n >= 1 && n <= s.num_tokens());
  PKV_ASSERT(s.num_unslotted == 0);  // sequences of pkv_allocate: every token has its slot
  const BlockManager::Releasing as(blocks, s.retention);
  if (s.running()) blocks.truncate(s.tables, s.keys, s.tokens.data(), n, s.num_computed, taken);
  s.tokens.resize(n);
  s.num_computed = std::min(s.num_computed, n);
  s.num_cached = std::min(s.num_cached, n);
}

void free_kv(Sequence &s, BlockManager &blocks, StatePool &states) {
  const BlockManager::Releasing as(blocks, s.retention);
  blocks.free(s.tables);
  blocks.free_host(s.host_blocks);
  give_back_state(s, states);
  if (s.host_state_slot >= 0) {
    states.give_back_host(s.host_state_slot);
    s.host_state_slot = -1;
  }
}

uint32_t computed(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t n) {
  PKV_ASSERT(s.running() && n <= s.num_uncomputed());
  s.num_computed += n;
  {
    const BlockManager::Releasing as(blocks, s.retention);  // a window's give-back
    blocks.seal(s.tables, s.keys, s.tokens.data(), s.num_computed);
  }
  const uint32_t bs = blocks.block_size(), b = s.num_computed / bs;
  if (s.state_slot < 0 || n == 0 || s.num_computed % bs != 0 ||
      !blocks.wants_checkpoint(b, s.checkpoint_end, s.checkpoint_branch))
    return 0;
  // The working slot holds the state after exactly b blocks until the next step writes it; the
  // copy is queued before that step's, which runs its copies first. An evicted checkpoint's
  // offload reads its slot before the capture overwrites it.
  states.make_room(2);
  const BlockManager::Capture c = blocks.capture(s.tables, b);
  if (c.offload_to >= 0) states.queue_copy(c.slot, c.offload_to, PKV_COPY_STATE_OUT);
  if (c.slot >= 0) states.queue_copy(s.state_slot, c.slot);
  return c.slot >= 0 ? b : 0;
}

uint64_t next_checkpoint(const Sequence &s, const BlockManager &blocks) {
  if (s.state_slot < 0) return UINT64_MAX;
  return blocks.next_checkpoint(s.num_computed, s.checkpoint_end, s.checkpoint_branch);
}

void add_sampled(Sequence &s, int32_t token) {
  PKV_ASSERT(s.running() && s.num_unslotted == 0 && s.tokens.size() < s.tokens.capacity());
  s.tokens.push_back(token);
  s.num_unslotted = 1;
}

// ---------------------------------------------------------------- the table

Sequence &SequenceTable::get(uint64_t id) {
  return const_cast<Sequence &>(static_cast<const SequenceTable &>(*this).get(id));
}

const Sequence &SequenceTable::get(uint64_t id) const {
  const Sequence *s = find(id);
  if (!s)
    fail(PKV_ERR_NOT_FOUND, "sequence %llu does not exist (never allocated, or released)",
         (unsigned long long)id);
  return *s;
}

const Sequence *SequenceTable::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second;
}

Sequence &SequenceTable::create() {
  auto [it, inserted] = seqs_.emplace(next_id_, Sequence{});
  PKV_ASSERT(inserted);
  it->second.id = next_id_++;
  return it->second;
}

void SequenceTable::discard(uint64_t id) {
  PKV_ASSERT(id + 1 == next_id_);
  seqs_.erase(id);
  next_id_--;
}

void SequenceTable::erase(uint64_t id) {
  const Sequence &s = get(id);
  PKV_ASSERT(s.tables.empty() && s.host_blocks.empty() && !s.in_batch && s.state_slot < 0);
  seqs_.erase(id);
}

size_t SequenceTable::count(SeqState state) const {
  size_t n = 0;
  for (const auto &kv : seqs_) n += kv.second.state == state;
  return n;
}

std::vector<TableOwner> SequenceTable::owners() const {
  std::vector<TableOwner> out;
  out.reserve(seqs_.size());
  for (const auto &[id, s] : seqs_)
    out.push_back(TableOwner{id, &s.tables, &s.keys, s.tokens.data(),
                             s.holds_kv() ? s.num_slotted() : 0, s.holds_kv() ? s.num_computed : 0,
                             s.state == SeqState::kReceiving ? s.request.remote_tokens
                             : s.holds_kv()                  ? s.num_computed
                                                             : 0,
                             &s.host_blocks});
  return out;
}

std::vector<int32_t> SequenceTable::state_slots(bool host) const {
  std::vector<int32_t> out;
  out.reserve(seqs_.size());
  for (const auto &kv : seqs_)
    out.push_back(host ? kv.second.host_state_slot : kv.second.state_slot);
  return out;
}

}  // namespace pkv
