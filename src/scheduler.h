// Continuous batching (DESIGN.md §7): pkv_submit queues a request, schedule() picks the next
// step's sequences and token counts, commit() takes the sampled tokens. Requests are ordinary
// sequences of the SequenceTable; the scheduler keeps which are waiting, running or finished,
// and works through the BlockManager and the StatePool alone. The engine turns its plans into batches.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "block_manager.h"
#include "pkv/pkv.h"
#include "sequence.h"
#include "tiers/store_tier.h"
#include "transfers.h"

namespace pkv {

struct SchedulerLimits {
  uint32_t max_num_seqs;            // sequences in one step
  uint32_t max_num_batched_tokens;  // new tokens in one step
  uint32_t max_model_len;           // 0 = none
  uint32_t block_size;
  uint32_t num_blocks;       // a request needing more can never run
  uint32_t preemption_mode;  // PKV_PREEMPT_*
};

// The next step: seq_ids[i] computes its next num_new_tokens[i] tokens.
struct StepPlan {
  std::vector<uint64_t> seq_ids;
  std::vector<uint32_t> num_new_tokens;
  uint32_t num_tokens = 0;
};

// The store lookup of a prompt of n tokens whose tree walk gives plan (DESIGN.md §11): per KV
// group that holds blocks, the blocks past where the tree's KV stops up to the most a hit may
// serve; groups that need every block first, then the windowed ones (their window before the
// reach: GroupFetch). Empty when there is nothing to ask.
std::vector<GroupFetch> store_lookup(const BlockManager &blocks, const StoreTier &store,
                                     const PrefixKeys &keys, const int32_t *tokens, uint32_t n,
                                     const BlockManager::Admission &plan);
// Stages the blocks a lookup fetched for tokens (each group's, values value_bytes each) in the
// host tier, group by group (BlockManager::stage_from_store: what the tree already holds is
// skipped). The host blocks the prompt's hits would load are kept. Returns how many it staged.
uint32_t stage_fetched(BlockManager &blocks, StoreTier &store, const PrefixKeys &keys,
                       const int32_t *tokens, uint32_t n, const std::vector<GroupFetched> &fetched);
// Stages a checkpoint of the recurrent state fetched at boundary h (its value) in a host state
// slot, held by the prefix node where the tokens' block h-1 is, for the admission to restore.
// False (nothing changed) when there is no slot for it, or no node holds those blocks now.
bool stage_fetched_state(BlockManager &blocks, const StatePool &states, StoreTier &store,
                         const PrefixKeys &keys, const int32_t *tokens, uint32_t n, uint32_t h,
                         const std::vector<uint8_t> &value);

class Scheduler {
 public:
  Scheduler(const SchedulerLimits &limits, SequenceTable &seqs, BlockManager &blocks,
            StatePool &states, Transfers &transfers)
      : limits_(limits), seqs_(seqs), blocks_(blocks), states_(states), transfers_(transfers) {}

  uint64_t submit(const int32_t *prompt, uint32_t n, const pkv_request_params &rp,
                  const PrefixKeys &keys);
  // With a store, a waiting request is first looked up there in the background (loading); it is
  // admitted once the fetch came back, while others run.
  void set_store(StoreTier *store) { store_ = store; }
  size_t num_loading() const { return num_loading_; }
  // Reserves the slots of the running requests' sampled tokens (preempting the newest running
  // request while blocks run out) and admits waiting ones; an empty plan means nothing to run.
  StepPlan schedule();
  // The engine made a batch of the plan.
  void count_step(uint32_t num_tokens) {
    num_steps_++;
    num_scheduled_tokens_ += num_tokens;
  }
  // The step's tokens are computed: seq_ids[i] takes sampled[i] when sample_rows[i] >= 0 and
  // finishes on its stop token or its length. The caller made room in their tokens (make_room).
  void commit(const std::vector<uint64_t> &seq_ids, const std::vector<int32_t> &sample_rows,
              const int32_t *sampled);
  size_t drain_finished(uint64_t *out, size_t cap);
  // pkv_release of a request: it leaves every queue.
  void forget(const Sequence &s);
  // Remote fills (DESIGN.md §10). Whether a schedule() since the last call made a request
  // receive (its blocks are written by a transport once the copies queued before are done).
  bool take_began_receiving() { return std::exchange(began_receiving_, false); }
  // A receiving request's fill ended: done (it runs on, newest), failed (back to the front of
  // the queue, computing its prompt itself) or failed and finished. Returns the boundary of a
  // checkpoint its received tokens took (as computed()), else 0.
  uint32_t end_receiving(Sequence &s, uint32_t outcome);

  size_t num_waiting() const { return waiting_.size() + swapped_.size(); }
  uint64_t num_swap_preemptions() const { return num_swap_preemptions_; }
  size_t num_running() const { return running_.size(); }
  size_t num_finished() const { return num_finished_; }
  uint64_t num_scheduled_tokens() const { return num_scheduled_tokens_; }
  uint64_t num_steps() const { return num_steps_; }
  // The queues agree with the sequences' states. Throws PKV_ERR_INTERNAL.
  void check() const;

 private:
  void enqueue(uint64_t id);  // by priority, then arrival
  // Admission per chunk (DESIGN.md §7): the largest chunk a request gets slots for at once
  // (max_num_batched_tokens) when a group gives blocks back behind a window or chunk; 0: every
  // request is admitted with its whole prompt.
  uint32_t max_chunk() const;
  // How many of s's unslotted tokens get slots this step, with `budget` tokens left in it.
  uint32_t to_reserve(const Sequence &s, uint32_t budget) const;
  bool reserve(Sequence &s, uint32_t n);
  bool swap_out_victim(Sequence &victim);  // false: it is preempted by recompute instead
  bool wants_swap(const Sequence &victim) const;
  void finish_request(Sequence &s, uint32_t reason);
  // The fetches that came back: their requests stage the blocks and wait to be admitted.
  void absorb_fetched();
  // Starts the store lookup of a waiting request; false when there is nothing to ask.
  bool start_lookup(Sequence &s);

  SchedulerLimits limits_;
  SequenceTable &seqs_;
  BlockManager &blocks_;
  StatePool &states_;     // a request runs only with a working state slot (STATE layers)
  Transfers &transfers_;  // holds on finishing, and remote fills
  bool began_receiving_ = false;
  std::vector<uint64_t> receiving_;  // requests receiving their remote KV, in admission order
  std::deque<uint64_t> waiting_;     // waiting and preempted requests, in admission order
  std::deque<uint64_t> swapped_;     // swapped out by a preemption; they come back first
  std::vector<uint64_t> running_;    // admission order: the newest is preempted first
  std::deque<uint64_t> finished_;    // not yet drained
  size_t num_finished_ = 0;          // finished and not released
  uint64_t num_scheduled_tokens_ = 0;
  uint64_t num_steps_ = 0;
  uint64_t num_swap_preemptions_ = 0;
  StoreTier *store_ = nullptr;
  size_t num_loading_ = 0;
};

}  // namespace pkv
