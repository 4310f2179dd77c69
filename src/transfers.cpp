#include "transfers.h"

#include <algorithm>

#include "pkv/pkv.h"
#include "status.h"

namespace pkv {

uint64_t Transfers::deadline(uint32_t timeout_ms) const {
  if (timeout_ms == UINT32_MAX) return UINT64_MAX;
  return now_ms_ + (timeout_ms ? timeout_ms : uint32_t(PKV_TRANSFER_TIMEOUT_DEFAULT_MS));
}

bool Transfers::fits(const Sequence &s) const { return held_blocks_ + block_refs(s) <= max_held_; }

void Transfers::hold(Sequence &s, uint64_t deadline_ms) {
  // The set's node first: the only step that can fail (no memory), before the move.
  deadlines_.emplace(deadline_ms, s.id);
  pkv::hold(s, deadline_ms);
  held_blocks_ += s.transfer.held_blocks;
}

void Transfers::end_hold(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t how) {
  PKV_ASSERT(s.state == SeqState::kHeld);
  deadlines_.erase({s.transfer.deadline_ms, s.id});
  held_blocks_ -= s.transfer.held_blocks;
  (how == PKV_TRANSFER_DONE     ? counters_.holds_done
   : how == PKV_TRANSFER_FAILED ? counters_.holds_failed
                                : counters_.holds_timed_out)++;
  pkv::end_hold(s, blocks, states);
}

std::vector<uint64_t> Transfers::expired() const {
  std::vector<uint64_t> out;
  for (const auto &[deadline, id] : deadlines_) {
    if (deadline > now_ms_) break;
    out.push_back(id);
  }
  return out;
}

void Transfers::began_receiving(const Sequence &s) {
  PKV_ASSERT(s.state == SeqState::kReceiving);
  began_.push_back(s.id);
  num_receiving_++;
  receiving_blocks_ += s.transfer.num_blocks;
}

size_t Transfers::drain_receiving(uint64_t *out, size_t cap) {
  size_t n = 0;
  for (; n < cap && !began_.empty(); ++n) {
    out[n] = began_.front();
    began_.pop_front();
  }
  return n;
}

void Transfers::end_receiving(const Sequence &s, bool done) {
  PKV_ASSERT(s.state == SeqState::kReceiving);
  auto it = std::find(began_.begin(), began_.end(), s.id);
  if (it != began_.end()) began_.erase(it);  // ended before it was drained
  num_receiving_--;
  receiving_blocks_ -= s.transfer.num_blocks;
  if (done) {
    counters_.receives_done++;
    counters_.received_tokens += s.request.remote_tokens - s.num_computed;
  } else {
    counters_.receives_failed++;
  }
}

void Transfers::check(const SequenceTable &seqs) const {
  uint64_t held = 0, held_blocks = 0, receiving = 0, receiving_blocks = 0;
  for (const auto &[id, s] : seqs) {
    if (s.state == SeqState::kHeld) {
      held++;
      held_blocks += s.transfer.held_blocks;
      if (s.transfer.held_blocks != block_refs(s) ||
          !deadlines_.count({s.transfer.deadline_ms, id}))
        fail(PKV_ERR_INTERNAL, "held sequence %llu: %u blocks counted, %u held, deadline %s",
             (unsigned long long)id, s.transfer.held_blocks, block_refs(s),
             deadlines_.count({s.transfer.deadline_ms, id}) ? "kept" : "lost");
    } else if (s.state == SeqState::kReceiving) {
      receiving++;
      receiving_blocks += s.transfer.num_blocks;
      const uint32_t bs_blocks = s.tables.empty() ? 0 : uint32_t(s.tables[0].ids.size());
      if (!s.request.is_request || s.request.remote_tokens <= s.num_computed ||
          s.transfer.first_block + s.transfer.num_blocks > bs_blocks || s.num_unslotted)
        fail(PKV_ERR_INTERNAL,
             "receiving sequence %llu: remote tokens %u, computed %u, blocks %u + %u of %u",
             (unsigned long long)id, s.request.remote_tokens, s.num_computed,
             s.transfer.first_block, s.transfer.num_blocks, bs_blocks);
    }
  }
  if (held != deadlines_.size() || held_blocks != held_blocks_ || held_blocks_ > max_held_ ||
      receiving != num_receiving_ || receiving_blocks != receiving_blocks_)
    fail(PKV_ERR_INTERNAL,
         "transfers: %llu held (%zu counted) of %llu blocks (%llu counted, bound %u); %llu "
         "receiving (%llu counted) of %llu blocks (%llu counted)",
         (unsigned long long)held, deadlines_.size(), (unsigned long long)held_blocks,
         (unsigned long long)held_blocks_, max_held_, (unsigned long long)receiving,
         (unsigned long long)num_receiving_, (unsigned long long)receiving_blocks,
         (unsigned long long)receiving_blocks_);
  for (uint64_t id : began_) {
    const Sequence *s = seqs.find(id);
    if (!s || s->state != SeqState::kReceiving)
      fail(PKV_ERR_INTERNAL, "sequence %llu is listed as receiving but is not",
           (unsigned long long)id);
  }
}

}  // namespace pkv
