// The registry of batch handles (api.cpp's, DESIGN.md §2). A handle is not an address but a
// number that is never given twice, with the top bit set (never an address a host or a garbage
// collector would follow):
//   bit 63 | engine slot (16 bits) | rank (8 bits) | generation (39 bits, one counter for
//   the process)
// The rank field is 0 in the batch's own handle and r + 1 in rank r's (pkv_batch_rank, DESIGN.md
// §10): a rank's handle names the same batch, and the compute calls run on that rank's pool.
// A handle used after its batch ended is refused (PKV_ERR_STATE) even when a newer batch of the
// same engine is open. The slot names the engine a stale handle belonged to while that engine
// lives, so the refusal reaches pkv_engine_last_error too (issue 26: it was only in
// pkv_last_error, and a host printing its engine's error printed nothing). A slot is reused only
// after its engine is destroyed; each engine's record keeps the first generation given under
// it, so a handle of an earlier engine of the same slot is never taken for this one's.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "pkv/pkv.h"

namespace pkv {

class Engine;

class BatchHandles {
 public:
  static constexpr int kGenerationBits = 39;
  static constexpr int kRankBits = 8;
  static constexpr uint32_t kMaxEngines = 1u << 16;  // engines with a batch, alive at once

  // A handle for e's new batch (e has no live one). Throws PKV_ERR_OUT_OF_MEMORY when 2^16
  // engines that opened batches are alive, PKV_ERR_INTERNAL after 2^39 batches.
  pkv_batch *add(Engine *e);
  // The engine whose open batch b is, or null.
  Engine *live(const pkv_batch *b) const;
  // The engine b's batch belonged to when that batch has ended and the engine lives, or null
  // (b ended and its engine is gone, or b was never a handle).
  Engine *owner(const pkv_batch *b) const;
  // b's batch ended.
  void remove(const pkv_batch *b);
  // e is being destroyed: its handles become refused values of no engine.
  void remove_engine(const Engine *e);

  // Whether b has the form of a handle (the top bit set), for the refusal's wording.
  static bool looks_like_handle(const pkv_batch *b);
  // The rank a handle names: 0 for the batch's own, r + 1 for rank r's; and rank r's handle of
  // the batch b names (r < 2^kRankBits - 1).
  static uint32_t rank_field(const pkv_batch *b);
  static pkv_batch *with_rank(const pkv_batch *b, uint32_t rank);

 private:
  struct Record {
    Engine *engine;
    uint64_t first_generation;  // every handle of this engine has a generation >= this
    uintptr_t live;             // its open batch's handle, 0 when none
  };

  const Record *record_of(const pkv_batch *b) const;  // the slot's record, if b could be its

  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, Record> slots_;
  std::unordered_map<const Engine *, uint32_t> slot_of_;
  uint32_t next_slot_ = 0;
  uint64_t next_generation_ = 1;
};

BatchHandles &
batch_handles();  // the process's registry, never destroyed (handles may be used at exit)

}  // namespace pkv
