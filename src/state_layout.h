// Recurrent state (DESIGN.md §13): where each STATE layer's parts lie within one state slot.
// A slot holds one sequence's whole state (every STATE layer's parts), so one free list of slots
// serves every recurrent layer and no slot bytes go unused by a kind that needs fewer.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

// Every part and every slot starts on this many bytes: a kernel's vector loads of any dtype
// never straddle two parts, and slot s's parts are aligned wherever the slot region starts
// (the backends' allocations are at least this aligned).
constexpr uint64_t kStatePartAlign = 256;

// One part of a STATE layer's state: a dense array of shape[0] x ... of dtype (the first 0 of
// shape ends it). bytes 0 = no such part.
struct StatePart {
  uint32_t dtype;                      // PKV_DTYPE_F32 / F16 / BF16
  uint32_t shape[PKV_MAX_STATE_DIMS];  // outermost first
  uint64_t bytes;                      // the dense array's bytes, unaligned
};

// The parts of every layer placed in one slot, in layer order, part 0 before part 1.
struct StateLayout {
  uint32_t num_state_layers = 0;
  uint64_t slot_bytes = 0;  // one sequence's state, a multiple of kStatePartAlign
  // [num_layers] each: part i of layer l at offset[l][i] within a slot, bytes[l][i] long
  // (0 and 0 for an absent part and every layer that is not STATE).
  std::vector<std::array<uint64_t, PKV_MAX_STATE_PARTS>> offset, bytes;
  bool empty() const { return num_state_layers == 0; }
};

struct LayerSpec;
// The slot layout of resolved layer specs (layer_specs.h): each part 256-byte aligned. Specs
// with no STATE layer (or none at all: the flat fields) give an empty layout. The sums are
// checked by resolve_layer_specs (a part at most 2^40 bytes, at most 2^32 layers: no overflow).
StateLayout state_layout_of(const std::vector<LayerSpec> &specs);

// The checkpoint slots validated params ask for: none under policy NONE, else
// num_state_checkpoints, or max_num_seqs when that is 0 (pkv.h). 0 without STATE layers too.
uint32_t resolved_state_checkpoints(const pkv_engine_params &p);

// The budget's state terms for validated params (pkv_kv_budget: num_state_layers,
// num_state_slots, num_state_checkpoints, state_bytes_per_seq, state_pool_bytes), all 0
// without STATE layers. INVALID_ARGUMENT naming the fields when the slots pass 2^31-1 (slot ids
// are int32) or the pool 2^63-1 bytes.
void state_budget(const pkv_engine_params &p, pkv_kv_budget &b);

}  // namespace pkv
