// One sequence (DESIGN.md §2): its tokens, its block table, how far its KV is computed, and its
// one state; SequenceTable maps ids to sequences. The operations that move a sequence between
// states live here, once, for the engine's calls and the scheduler alike.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "block_manager.h"
#include "state_pool.h"

namespace pkv {

// pkv_allocate's sequences start running and move running <-> preempted (pkv_preempt,
// pkv_resume) and running <-> swapped (pkv_swap_out, pkv_swap_in); pkv_submit's requests start
// waiting, run, may be preempted, and finish.
enum class SeqState : uint8_t {
  kWaiting,    // submitted, never admitted: tokens, no blocks
  kRunning,    // holds blocks for its tokens (all but its unslotted ones)
  kPreempted,  // gave its blocks back and keeps its tokens, to be re-admitted (recompute)
  kFinished,   // a request that reached its stop token or length: tokens kept, no blocks
  kSwapped,    // its KV moved to the host tier: tokens, computed count and host blocks kept
  kLoading,    // a waiting request whose prefix blocks are being fetched from the store
  // KV transfers (transfers.h, DESIGN.md §10): they keep their blocks (and working state slot)
  // and are in no batch.
  kHeld,       // stopped for a transfer out: every block untouched until the hold ends
  kReceiving,  // a request admitted whole whose first remote_tokens' KV is being written in
};

// What the scheduler keeps of a request (pkv_submit).
struct Request {
  bool is_request = false;  // false for pkv_allocate's sequences
  uint32_t prompt_len = 0;
  uint32_t max_new_tokens = 0;
  uint32_t num_generated = 0;
  int32_t stop_token = -1;
  int32_t priority = 0;
  uint32_t finish_reason = PKV_FINISH_NONE;
  bool store_looked_up = false;  // its prompt was asked of the store (once per admission)
  // Transfers (pkv_request_params): a hold when it finishes, and its timeout (UINT32_MAX: none);
  // the prompt tokens whose KV arrives from elsewhere (0 once a hit covered them, or a failed
  // fill falls back to computing them).
  bool hold_on_finish = false;
  uint32_t hold_timeout_ms = 0;
  uint32_t remote_tokens = 0;
};

// A sequence's transfer, while it is held or receiving.
struct Transfer {
  uint64_t deadline_ms = UINT64_MAX;  // held: when its hold times out (UINT64_MAX: never)
  uint32_t held_blocks = 0;           // held: its block references (counted against the bound)
  uint32_t first_block = 0;           // receiving: the blocks the remote KV is written into
  uint32_t num_blocks = 0;
};

struct Sequence {
  uint64_t id = 0;
  SeqState state = SeqState::kWaiting;
  PrefixKeys keys;                   // salt, adapter, extra keys: what names its blocks besides
                                     // their tokens (kept through preemption, copied by a fork)
  Retention retention;               // what its released sealed blocks keep (DESIGN.md §4)
  std::vector<int32_t> tokens;       // prompt, appended and sampled tokens
  SeqTables tables;                  // one per KV group, covering num_slotted() tokens while
                                     // running; else empty
  std::vector<int32_t> host_blocks;  // host-tier blocks while swapped, else empty
  uint32_t num_computed = 0;         // tokens whose KV is in the pool (cached ones included)
  uint32_t num_cached = 0;           // tokens served by the prefix cache at the last admission
  // Trailing tokens with no slot yet, only while running (or swapped out running): a sampled
  // token waits for the next step to reserve it (then it may find no block and preempt
  // someone), and a request admitted per chunk (DESIGN.md §7) keeps the rest of its prompt
  // here, reserved chunk by chunk as the scheduler computes it. Never computed, never in a
  // batch: the tables cover num_slotted() tokens (BlockManager::check).
  uint32_t num_unslotted = 0;
  bool in_batch = false;  // a member of the engine's open batch
  // Its working state slot (StatePool) while running, on a model with STATE layers; else -1. A
  // preempted sequence gives it back (re-admission restores a checkpoint or starts from token 0);
  // a swapped-out one holds a host slot instead.
  int32_t state_slot = -1;
  int32_t host_state_slot = -1;  // while swapped out: its state's host slot (StatePool), else -1
  // The block boundaries where it leaves checkpoints of that state (BlockManager::
  // wants_checkpoint), set at admission: its prompt's last one, and where the cached KV of its
  // prompt ended without a checkpoint (0: none).
  uint32_t checkpoint_end = 0, checkpoint_branch = 0;
  Request request;
  Transfer transfer;

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
  uint32_t num_slotted() const { return num_tokens() - num_unslotted; }
  uint32_t num_uncomputed() const { return num_slotted() - num_computed; }
  bool running() const { return state == SeqState::kRunning; }
  // Holds pool blocks and its working state slot: running, held or receiving.
  bool holds_kv() const {
    return state == SeqState::kRunning || state == SeqState::kHeld || state == SeqState::kReceiving;
  }
};

const char *state_name(SeqState state);

// ---------------------------------------------------------------- moves between states
// Each is all-or-nothing: it throws (PKV_ERR_NO_SPACE, out of memory) with nothing changed.
// states: the state slots (disabled without STATE layers): a running or swapped sequence holds
// one working slot, taken at admission and given back when it stops running (not when swapped:
// its state stays in the slot).

// waiting / preempted -> running: blocks for every token (per chunk: for the prefix cache's hit
// and the next max_chunk tokens, the rest unslotted), the hit counted computed, and a working
// state slot (none free: PKV_ERR_NO_SPACE) that a copy of the hit's checkpoint fills first.
void admit(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t max_chunk = UINT32_MAX);
// Running: n more tokens, with their slots.
void append(Sequence &s, BlockManager &blocks, const int32_t *tokens, uint32_t n);
// Running: the slots of its next n unslotted tokens (a sampled token's, or a prompt's chunk).
void reserve_unslotted(Sequence &s, BlockManager &blocks, uint32_t n);
// Running -> preempted: the blocks go back, the tokens stay (unslotted ones become ordinary
// tokens, computed at re-admission). Cannot fail.
void preempt(Sequence &s, BlockManager &blocks, StatePool &states);
// Running -> swapped: the KV moves to the host tier (copies queued); computed tokens stay computed.
// Its recurrent state moves to a host state slot (PKV_COPY_STATE_OUT) and its working slot goes
// back.
void swap_out(Sequence &s, BlockManager &blocks, StatePool &states);
// Swapped -> running: back into pool blocks (copies queued), full computed blocks sealed again;
// its state into a working slot (PKV_COPY_STATE_IN; none free: PKV_ERR_NO_SPACE).
void swap_in(Sequence &s, BlockManager &blocks, StatePool &states);
// Running or preempted: keeps the first n tokens (1 <= n <= its tokens); blocks no token needs
// any more go back; computed and cached counts shrink with it. Fails (nothing changed) only when
// a windowed group cannot take back a block the kept window needs (BlockManager::truncate).
// taken: the queued copies an open batch holds.
void truncate(Sequence &s, BlockManager &blocks, uint32_t n, size_t taken);
// Running, with a recurrent state: keeps the first n tokens, fewer than it computed. A state
// cannot give tokens back, so the sequence is admitted again for its first n tokens, keeping its
// working slot: the prefix cache serves the longest hit with a checkpoint (its own blocks and
// checkpoints are in the cache), the slot starts from a copy of that checkpoint (else from token
// 0), and the rest is computed again. PKV_ERR_NO_SPACE (a windowed group's whole prompt does not
// fit) with nothing changed.
void roll_back(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t n);
// Gives back whatever the sequence holds, in either tier (pkv_release).
void free_kv(Sequence &s, BlockManager &blocks, StatePool &states);
// Running -> finished (a request): the blocks go back, the tokens stay. Cannot fail.
void finish(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t reason);
// Transfers (DESIGN.md §10). The block references s holds, in every group.
uint32_t block_refs(const Sequence &s);
// Running -> held until deadline_ms: it keeps everything, its block_refs counted in s.transfer.
// Held -> finished: everything goes back. Neither can fail.
void hold(Sequence &s, uint64_t deadline_ms);
void end_hold(Sequence &s, BlockManager &blocks, StatePool &states);
// Waiting -> receiving, as admit() with its whole prompt: when the hit covers fewer than
// s.request.remote_tokens tokens it receives the blocks from the hit's end to those tokens'
// last one (its working state slot starts from no checkpoint: the remote state replaces it),
// else it is running, remote_tokens 0. Throws PKV_ERR_NO_SPACE with nothing changed.
void admit_receiving(Sequence &s, BlockManager &blocks, StatePool &states);
// Receiving -> running: the remote tokens are computed (as computed(); returns its boundary).
uint32_t received(Sequence &s, BlockManager &blocks, StatePool &states);
// Receiving -> `to` (preempted: it computes them itself; finished): everything goes back, nothing
// it received sealed. Cannot fail.
void stop_receiving(Sequence &s, BlockManager &blocks, StatePool &states, SeqState to);
// Running: a step computed the next n tokens; full blocks are sealed into the prefix cache, and a
// boundary reached that the sequence wants a checkpoint at takes one (a copy of its working state,
// queued). Returns that boundary (blocks) when a new checkpoint was taken there, else 0.
uint32_t computed(Sequence &s, BlockManager &blocks, StatePool &states, uint32_t n);
// The first token count after its computed ones where it wants a checkpoint: a chunk that reaches
// it ends there. UINT64_MAX when none.
uint64_t next_checkpoint(const Sequence &s, const BlockManager &blocks);
// Running: a sampled token joins the tokens, its slot reserved at the next step. The caller
// made room in s.tokens first (commit is all-or-nothing).
void add_sampled(Sequence &s, int32_t token);

// ---------------------------------------------------------------- the table
class SequenceTable {
 public:
  using Map = std::unordered_map<uint64_t, Sequence>;

  // The sequence with this id; PKV_ERR_NOT_FOUND for ids never given or released.
  Sequence &get(uint64_t id);
  const Sequence &get(uint64_t id) const;
  const Sequence *find(uint64_t id) const;  // null when there is none
  // A new, empty sequence with the next id (never 0, never reused once kept). A caller whose
  // next step fails gives it back with discard(), so the id is given again.
  Sequence &create();
  void discard(uint64_t id);
  // Drops a sequence; its blocks must have been freed.
  void erase(uint64_t id);

  size_t size() const { return seqs_.size(); }
  bool ever_created() const { return next_id_ > 1; }  // a sequence was ever kept
  size_t count(SeqState state) const;
  Map::const_iterator begin() const { return seqs_.begin(); }
  Map::const_iterator end() const { return seqs_.end(); }
  // Every sequence's block table, as BlockManager::check wants them.
  std::vector<TableOwner> owners() const;
  // Every sequence's working (host: its host) state slot (-1: none), as StatePool::check wants.
  std::vector<int32_t> state_slots(bool host = false) const;

 private:
  Map seqs_;
  uint64_t next_id_ = 1;
};

}  // namespace pkv
