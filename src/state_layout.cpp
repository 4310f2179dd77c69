#include "state_layout.h"

#include "checked.h"
#include "layer_specs.h"

namespace pkv {

namespace {

uint64_t align_up(uint64_t n) {
  return (n + kStatePartAlign - 1) / kStatePartAlign * kStatePartAlign;
}

}  // namespace

StateLayout state_layout_of(const std::vector<LayerSpec> &specs) {
  StateLayout out;
  bool any = false;
  for (const LayerSpec &s : specs) any |= s.kind == PKV_LAYER_STATE;
  if (!any) return out;
  out.offset.resize(specs.size());
  out.bytes.resize(specs.size());
  uint64_t at = 0;
  for (size_t l = 0; l < specs.size(); ++l) {
    out.offset[l].fill(0);
    out.bytes[l].fill(0);
    if (specs[l].kind != PKV_LAYER_STATE) continue;
    ++out.num_state_layers;
    for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS; ++i) {
      const StatePart &part = specs[l].state[i];
      if (!part.bytes) continue;
      out.offset[l][i] = at;
      out.bytes[l][i] = part.bytes;
      at += align_up(part.bytes);
    }
  }
  out.slot_bytes = at;  // every part's end is aligned, so the slot's is
  return out;
}

uint32_t resolved_state_checkpoints(const pkv_engine_params &p) {
  // Checkpoints serve prefix hits only: without prefix caching they would be memory for nothing.
  if (p.state_checkpoint_policy == PKV_STATE_CHECKPOINT_NONE || !p.enable_prefix_caching) return 0;
  return p.num_state_checkpoints ? p.num_state_checkpoints : p.max_num_seqs;
}

void state_budget(const pkv_engine_params &p, pkv_kv_budget &b) {
  if (!p.layer_specs) return;
  const StateLayout layout = state_layout_of(resolve_layer_specs(p));
  if (layout.empty()) return;
  const uint32_t checkpoints = resolved_state_checkpoints(p);
  const uint64_t slots = uint64_t(p.max_num_seqs) + checkpoints;
  if (slots > INT32_MAX)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "max_num_seqs %u + num_state_checkpoints %u (resolved) = %llu state slots: slot ids are "
         "int32, at most 2^31-1. Lower max_num_seqs or num_state_checkpoints",
         p.max_num_seqs, checkpoints, (unsigned long long)slots);
  b.num_state_layers = layout.num_state_layers;
  b.num_state_slots = p.max_num_seqs;  // one working state per sequence a step may run
  b.num_state_checkpoints = checkpoints;
  b.state_bytes_per_seq = layout.slot_bytes;
  // With a host tier, a host slot for every sequence that may be swapped out and, when evicted
  // blocks are offloaded or a store's are fetched, one per checkpoint (DESIGN.md §13).
  if (p.host_num_blocks || p.host_cache_bytes)
    b.num_host_state_slots = p.max_num_seqs + (p.host_offload || p.store ? checkpoints : 0);
  b.host_state_bytes = checked_product({b.num_host_state_slots, layout.slot_bytes}, kMaxOffset,
                                       "host_state_bytes = num_host_state_slots x "
                                       "state_bytes_per_seq");
  b.state_pool_bytes = checked_product({slots, layout.slot_bytes}, kMaxOffset,
                                       "state_pool_bytes = (max_num_seqs + num_state_checkpoints) "
                                       "x state_bytes_per_seq");
}

}  // namespace pkv
