// The recurrent state's slots (DESIGN.md §13): ids 0 .. total-1 of the state region beside the KV
// pool (backend.h), the first num_working meant for the working states of running sequences (one
// each), the rest for prefix-cache checkpoints. A free list of working slots, and the queued
// PKV_COPY_STATE copies (slot -> slot) that a step runs before it writes anything, in order.
#pragma once

#include <cstdint>
#include <vector>

#include "block_manager.h"  // BlockCopy

namespace pkv {

class StatePool {
 public:
  StatePool() = default;  // no STATE layers: no slots
  // Host slots 0 .. num_host_swap-1 hold swapped-out sequences' states (with a host tier:
  // max_num_seqs), num_host_swap .. num_host-1 checkpoints offloaded from the device (the block
  // manager's, block_manager_state.cpp).
  StatePool(uint32_t num_working, uint32_t num_total, uint32_t num_host_swap = 0,
            uint32_t num_host = 0);

  bool enabled() const { return num_total_ > 0; }
  uint32_t num_working() const { return num_working_; }
  uint32_t num_total() const { return num_total_; }
  uint32_t num_free_working() const { return static_cast<uint32_t>(free_.size()); }
  uint32_t num_host() const { return num_host_; }
  uint32_t num_host_swap() const { return num_host_swap_; }

  // A free host slot for a sequence swapped out (PKV_ERR_UNSUPPORTED without host slots,
  // PKV_ERR_NO_SPACE when all are held; nothing changed), taken, given back.
  void require_free_host(const char *what) const;
  int32_t take_host();
  void give_back_host(int32_t slot);

  // A free working slot for a sequence that starts running. Throws PKV_ERR_NO_SPACE, with nothing
  // changed, when every working slot is held (`what` names the call in the message).
  void require_free(const char *what) const;
  int32_t take();  // after require_free: cannot fail
  void give_back(int32_t slot);

  // A copy of src's state into dst, run before the next step writes either (a fork's, a
  // checkpoint's restore or capture). Throws (out of memory) with nothing changed, unless room
  // was made for it.
  // kind: PKV_COPY_STATE (slot -> slot), _OUT (working -> host slot) or _IN (host -> working).
  void queue_copy(int32_t src, int32_t dst, int32_t kind = PKV_COPY_STATE);
  // Whether a queued copy reads or writes host state slot `slot` (its bytes are not yet what the
  // queue says they will be): no one may fill it now.
  bool host_slot_busy(int32_t slot) const;
  // Room for n more queued copies: the next n queue_copy calls cannot fail.
  void make_room(size_t n) { pkv::make_room(pending_, n); }
  // Copies queued and not yet done, in order. A batch lists those queued before it began.
  const std::vector<BlockCopy> &pending_copies() const { return pending_; }
  void copies_done(size_t n);  // the first n pending copies are done

  // held: every sequence's working slot (-1: none). Each held slot is held once and is not free;
  // the free and held slots together are the working slots. Throws PKV_ERR_INTERNAL.
  // host_held: every swapped-out sequence's host slot (-1: none), checked the same way.
  void check(const std::vector<int32_t> &held, const std::vector<int32_t> &host_held = {}) const;

 private:
  uint32_t num_working_ = 0, num_total_ = 0, num_host_swap_ = 0, num_host_ = 0;
  std::vector<int32_t> free_;       // a stack: the lowest slot on top at first
  std::vector<int32_t> host_free_;  // of the swap slots
  std::vector<BlockCopy> pending_;
};

}  // namespace pkv
