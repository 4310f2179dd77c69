// Engine's KV transfers between engines (engine.h; DESIGN.md §10): a producer's holds (a
// finished sequence's blocks kept while a transport reads them), a consumer's remote fills (a
// request's first tokens' KV written into blocks it reserved), and where a sequence's state is.
// pkv moves no bytes: the host's transport does, by the segments (engine_segments.cpp).
#include "engine.h"
#include "status.h"

namespace pkv {

void Engine::require_timeless_hold(uint32_t timeout_ms, const char *what) const {
  if (timeout_ms == UINT32_MAX || params_.ranks != PKV_RANKS_ONE ||
      params_.tp_size * params_.pp_size == 1)
    return;
  fail(PKV_ERR_UNSUPPORTED,
       "%s a hold with a timeout (%u ms) on an engine of one rank of %u (ranks ONE): each "
       "rank's engine reads its own clock, so a hold could time out on one rank and not on "
       "another and their blocks differ; give UINT32_MAX (no timeout) and end holds with "
       "pkv_hold_end, or decide for every rank in one engine (ranks ALL)",
       what, timeout_ms, params_.tp_size * params_.pp_size);
}

void Engine::hold(uint64_t id, uint32_t timeout_ms) {
  Sequence &s = seqs_.get(id);
  require_outside_batch(s, "hold");
  if (s.request.is_request)
    fail(PKV_ERR_STATE,
         "cannot hold sequence %llu: it is a request of the scheduler (pkv_submit), which holds "
         "when it finishes (pkv_request_params.hold_on_finish)",
         (unsigned long long)id);
  require_running(s);
  if (s.num_uncomputed())
    fail(PKV_ERR_STATE,
         "sequence %llu has %u uncomputed tokens: hold it after the batch that computes them "
         "(a transfer moves computed KV only)",
         (unsigned long long)id, s.num_uncomputed());
  require_timeless_hold(timeout_ms, "pkv_hold:");
  if (!transfers_.fits(s))
    fail(PKV_ERR_NO_SPACE,
         "pkv_hold: sequence %llu's %u block references would pass max_held_blocks (%u; %llu held "
         "now): end a hold first",
         (unsigned long long)id, block_refs(s), transfers_.max_held_blocks(),
         (unsigned long long)transfers_.held_blocks());
  transfers_.hold(s, transfers_.deadline(timeout_ms));
}

void Engine::hold_end(uint64_t id, uint32_t outcome) {
  PKV_REQUIRE(outcome == PKV_TRANSFER_DONE || outcome == PKV_TRANSFER_FAILED,
              "outcome %u is not PKV_TRANSFER_DONE (0) or PKV_TRANSFER_FAILED (1)", outcome);
  Sequence &s = seqs_.get(id);
  if (s.state != SeqState::kHeld)
    fail(PKV_ERR_STATE,
         "sequence %llu is %s, not held for a transfer (never held, or its hold ended or timed "
         "out)",
         (unsigned long long)id, state_name(s.state));
  transfers_.end_hold(s, blocks_, states_, outcome);
}

void Engine::expire_holds() noexcept {
  try {
    for (uint64_t id : transfers_.expired())
      transfers_.end_hold(seqs_.get(id), blocks_, states_, Transfers::kTimedOut);
  } catch (...) {  // no memory for the list: the holds end at a later call
  }
}

void Engine::receive_end(uint64_t id, uint32_t outcome) {
  PKV_REQUIRE(outcome <= PKV_TRANSFER_FAILED_FINISH,
              "outcome %u is not PKV_TRANSFER_DONE (0), PKV_TRANSFER_FAILED (1) or "
              "PKV_TRANSFER_FAILED_FINISH (2)",
              outcome);
  Sequence &s = seqs_.get(id);
  if (s.state != SeqState::kReceiving)
    fail(PKV_ERR_STATE, "sequence %llu is %s, not receiving its remote KV", (unsigned long long)id,
         state_name(s.state));
  // Its received tokens are computed as a step's are: sealed into the prefix cache (events,
  // write-through), a checkpoint taken where it wants one.
  compute_through(s, [&] { return scheduler_.end_receiving(s, outcome); });
}

void Engine::flush_copies() {
  PKV_ASSERT(!open_);
  const std::vector<BlockCopy> &blocks = blocks_.pending_copies();
  const std::vector<BlockCopy> &states = states_.pending_copies();
  const size_t nb = blocks.size(), ns = states.size();
  if (nb + ns == 0) return;
  std::vector<int32_t> src, dst, kind;
  src.reserve(nb + ns), dst.reserve(nb + ns), kind.reserve(nb + ns);
  for (const std::vector<BlockCopy> *list : {&blocks, &states})
    for (const BlockCopy &c : *list) {
      src.push_back(c.src);
      dst.push_back(c.dst);
      kind.push_back(c.kind);
    }
  for (const RankPool &pool : pools_)
    pool.backend->copy_blocks(src.data(), dst.data(), kind.data(), uint32_t(src.size()));
  blocks_.copies_done(nb);
  states_.copies_done(ns);
}

pkv_segment Engine::state_segment(uint32_t rank, uint64_t id) const {
  PKV_REQUIRE(rank < pools_.size(), "rank %u: this engine holds %zu ranks' pools", rank,
              pools_.size());
  const Sequence &s = seq(id);
  if (!states_.enabled()) return pkv_segment{nullptr, 0};
  if (!s.holds_kv() || s.state_slot < 0)
    fail(PKV_ERR_STATE, "sequence %llu is %s: it holds no working state slot",
         (unsigned long long)id, state_name(s.state));
  char *base = static_cast<char *>(pools_[rank].backend->state_pool());
  const uint64_t bytes = state_layout_.slot_bytes;
  return pkv_segment{base + uint64_t(s.state_slot) * bytes, bytes};
}

}  // namespace pkv
