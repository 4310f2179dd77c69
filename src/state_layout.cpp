#include "state_layout.h"

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

}  // namespace pkv
