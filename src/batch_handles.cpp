#include "batch_handles.h"

#include "status.h"

namespace pkv {

static_assert(sizeof(uintptr_t) == 8,
              "batch handles carry a 16-bit engine slot, an 8-bit rank and a 39-bit generation");

namespace {

constexpr uintptr_t kTopBit = uintptr_t(1) << 63;
constexpr uint64_t kGenerationMask = (uint64_t(1) << BatchHandles::kGenerationBits) - 1;

constexpr int kRankShift = BatchHandles::kGenerationBits;
constexpr int kSlotShift = kRankShift + BatchHandles::kRankBits;
constexpr uintptr_t kRankMask = ((uintptr_t(1) << BatchHandles::kRankBits) - 1) << kRankShift;

// A handle's bits with its rank field cleared: the batch's own handle.
uintptr_t bits(const pkv_batch *b) { return reinterpret_cast<uintptr_t>(b) & ~kRankMask; }
uint32_t slot(uintptr_t h) { return uint32_t((h & ~kTopBit) >> kSlotShift); }
uint64_t generation(uintptr_t h) { return h & kGenerationMask; }

}  // namespace

bool BatchHandles::looks_like_handle(const pkv_batch *b) { return (bits(b) & kTopBit) != 0; }

uint32_t BatchHandles::rank_field(const pkv_batch *b) {
  return uint32_t((reinterpret_cast<uintptr_t>(b) & kRankMask) >> kRankShift);
}

pkv_batch *BatchHandles::with_rank(const pkv_batch *b, uint32_t rank) {
  return reinterpret_cast<pkv_batch *>(bits(b) | (uintptr_t(rank + 1) << kRankShift));
}

pkv_batch *BatchHandles::add(Engine *e) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (next_generation_ > kGenerationMask)
    fail(PKV_ERR_INTERNAL, "this process has begun 2^39 batches: no batch handle is left to give");
  auto known = slot_of_.find(e);
  uint32_t s = 0;
  if (known != slot_of_.end()) {
    s = known->second;
  } else {
    if (slots_.size() >= kMaxEngines)
      fail(
          PKV_ERR_OUT_OF_MEMORY,
          "%u engines with batches are alive in this process, the most pkv tells apart: destroy one first",
          kMaxEngines);
    while (slots_.count(next_slot_)) next_slot_ = (next_slot_ + 1) % kMaxEngines;
    s = next_slot_;
    next_slot_ = (next_slot_ + 1) % kMaxEngines;
    slot_of_.emplace(e, s);  // may throw: nothing changed yet
    try {
      slots_.emplace(s, Record{e, next_generation_, 0});
    } catch (...) {
      slot_of_.erase(e);
      throw;
    }
  }
  const uintptr_t handle = kTopBit | (uintptr_t(s) << kSlotShift) | next_generation_++;
  slots_.at(s).live = handle;
  return reinterpret_cast<pkv_batch *>(handle);
}

const BatchHandles::Record *BatchHandles::record_of(const pkv_batch *b) const {
  const uintptr_t h = bits(b);
  if (!(h & kTopBit)) return nullptr;
  auto it = slots_.find(slot(h));
  if (it == slots_.end() || generation(h) < it->second.first_generation) return nullptr;
  return &it->second;
}

Engine *BatchHandles::live(const pkv_batch *b) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record *r = record_of(b);
  return r && r->live == bits(b) ? r->engine : nullptr;
}

Engine *BatchHandles::owner(const pkv_batch *b) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Record *r = record_of(b);
  // A generation not given yet is no handle of any engine.
  return r && r->live != bits(b) && generation(bits(b)) < next_generation_ ? r->engine : nullptr;
}

void BatchHandles::remove(const pkv_batch *b) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slots_.find(slot(bits(b)));
  if (it != slots_.end() && it->second.live == bits(b)) it->second.live = 0;
}

void BatchHandles::remove_engine(const Engine *e) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slot_of_.find(e);
  if (it == slot_of_.end()) return;
  slots_.erase(it->second);
  slot_of_.erase(it);
}

BatchHandles &batch_handles() {
  static auto *registry = new BatchHandles();  // never destroyed: handles may be used at exit
  return *registry;
}

}  // namespace pkv
