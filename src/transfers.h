// KV transfers between engines (DESIGN.md §10): the holds of a producer engine (sequences whose
// blocks a transport reads) and the remote fills of a consumer engine (requests whose first
// tokens' KV a transport writes). Transfers keeps their bookkeeping - the bound on held blocks,
// the holds' deadlines, the requests that began receiving and the counters; the moves of each
// sequence between states are sequence.h's, and the engine and the scheduler drive both.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

#include "sequence.h"

namespace pkv {

struct TransferCounters {
  uint64_t holds_done = 0, holds_failed = 0, holds_timed_out = 0, holds_refused = 0;
  uint64_t receives_done = 0, receives_failed = 0, received_tokens = 0;
};

class Transfers {
 public:
  // max_held_blocks: the bound on block references held at once (0: half of num_blocks).
  Transfers(uint32_t max_held_blocks, uint32_t num_blocks)
      : max_held_(max_held_blocks ? max_held_blocks : num_blocks / 2) {}

  // The engine's clock (ms), set once per call: holds time out by it.
  void set_now(uint64_t ms) { now_ms_ = ms; }
  // A hold of timeout_ms from now (0: the default; UINT32_MAX: never): its deadline.
  uint64_t deadline(uint32_t timeout_ms) const;

  // ---------------------------------------------------------------- holds
  // Whether s's blocks fit under the bound beside the holds there are.
  bool fits(const Sequence &s) const;
  // Running -> held (pkv::hold), registered; the caller checked fits().
  void hold(Sequence &s, uint64_t deadline_ms);
  // Held -> finished (pkv::end_hold), counted by how it ended: PKV_TRANSFER_DONE, FAILED, or
  // kTimedOut.
  static constexpr uint32_t kTimedOut = UINT32_MAX;
  void end_hold(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t how);
  // The held sequences whose deadline has passed, soonest first.
  std::vector<uint64_t> expired() const;
  void count_refused() { counters_.holds_refused++; }
  uint32_t max_held_blocks() const { return max_held_; }
  uint64_t num_held() const { return deadlines_.size(); }
  uint64_t held_blocks() const { return held_blocks_; }

  // ---------------------------------------------------------------- remote fills
  // s (receiving, just admitted) is listed by the next drain.
  void began_receiving(const Sequence &s);
  size_t drain_receiving(uint64_t *out, size_t cap);
  // s stops receiving (before its move): done with its tokens arrived, or failed.
  void end_receiving(const Sequence &s, bool done);
  uint64_t num_receiving() const { return num_receiving_; }
  uint64_t receiving_blocks() const { return receiving_blocks_; }

  const TransferCounters &counters() const { return counters_; }
  // The bookkeeping agrees with the sequences. Throws PKV_ERR_INTERNAL.
  void check(const SequenceTable &seqs) const;

 private:
  uint32_t max_held_;
  uint64_t now_ms_ = 0;
  uint64_t held_blocks_ = 0;
  std::set<std::pair<uint64_t, uint64_t>> deadlines_;  // (deadline, id) of every held sequence
  std::deque<uint64_t> began_;                         // receiving, not yet drained
  uint64_t num_receiving_ = 0, receiving_blocks_ = 0;
  TransferCounters counters_;
};

}  // namespace pkv
