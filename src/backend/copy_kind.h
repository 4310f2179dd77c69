// The tiers a queued block copy (PKV_COPY_*) reads and writes, written once for the block manager,
// the backends and the CUDA copy plan: false = the pool (tier 0), true = the host tier (tier 1).
#pragma once

#include <cstdint>

#include "pkv/pkv.h"

namespace pkv {

constexpr bool copy_reads_host(int32_t kind) {
  return kind == PKV_COPY_SWAP_IN || kind == PKV_COPY_LOAD;
}
constexpr bool copy_writes_host(int32_t kind) {
  return kind == PKV_COPY_SWAP_OUT || kind == PKV_COPY_OFFLOAD;
}
// A PKV_COPY_* kind of KV blocks (COW: the pool to the pool).
constexpr bool copy_kind_known(int32_t kind) {
  return kind == PKV_COPY_COW || copy_reads_host(kind) || copy_writes_host(kind);
}
// A copy of a whole state slot to another (DESIGN.md §13): its ids are state slots, not blocks,
// in memory no block copy touches, so the backends run these apart from the block copies (in
// their own order).
constexpr bool copy_is_state(int32_t kind) {
  return kind == PKV_COPY_STATE || kind == PKV_COPY_STATE_OUT || kind == PKV_COPY_STATE_IN;
}
// Which state region a state copy reads and writes: false = the device's slots, true = the
// host's (a swapped-out sequence's).
constexpr bool state_reads_host(int32_t kind) { return kind == PKV_COPY_STATE_IN; }
constexpr bool state_writes_host(int32_t kind) { return kind == PKV_COPY_STATE_OUT; }

}  // namespace pkv
