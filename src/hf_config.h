// Reading a Hugging Face config.json into the model-shape fields of pkv_engine_params.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

// Returns p with the shape fields filled; throws INVALID_ARGUMENT naming the bad field.
pkv_engine_params params_from_hf_config(const pkv_engine_params &p, const char *json, size_t len);

// Each layer's window (0 = full attention) as a config assigns it (pkv_hf_config_layer_windows
// documents the rules). Kept as the rule, not one entry per layer: a config may claim 2^31-1
// layers, and pkv_engine_params_from_hf_config only needs to know whether they all agree.
class LayerWindows {
 public:
  enum class Rule {
    kNone,       // no window: every layer full
    kAll,        // every layer windowed (Mistral)
    kTypes,      // layer_types, one entry per layer (as many as the JSON holds)
    kPattern,    // every n-th layer full (Gemma 3's sliding_window_pattern)
    kAlternate,  // windowed, full, windowed, ... (Gemma 2)
    kFrom,       // layers from n on windowed (Qwen2's max_window_layers)
  };
  LayerWindows(uint32_t num_layers, uint32_t window, Rule rule, uint32_t n = 0,
               std::vector<uint32_t> types = {});

  uint32_t num_layers() const { return num_layers_; }
  uint32_t at(uint32_t layer) const;
  bool uniform() const;               // every layer has at(0)'s window
  void copy_to(uint32_t *out) const;  // num_layers() entries

 private:
  uint32_t num_layers_, window_;
  Rule rule_;
  uint32_t n_;                   // kPattern: the pattern; kFrom: the first windowed layer
  std::vector<uint32_t> types_;  // kTypes: each layer's window
};

LayerWindows layer_windows_from_hf_config(const char *json, size_t len);

// A config's layers, per layer (pkv_engine_params_from_hf_config_layers documents the rules).
struct HfLayers {
  pkv_engine_params params;           // the flat fields, as pkv_engine_params_from_hf_config's
  std::vector<pkv_layer_spec> specs;  // [params.num_layers] when asked for, else empty
  bool needs_specs = false;           // the flat fields describe some layer wrong (with specs)
};

// Specs are built only when the model has at most max_specs layers: a config may claim 2^31-1
// layers, and the caller's buffer is what bounds them (0: the flat fields only).
HfLayers layers_from_hf_config(const pkv_engine_params &p, const char *json, size_t len,
                               uint32_t max_specs);

// The specs into the caller's array of spec_size-byte elements, unknown bytes zeroed.
void write_layer_specs(const std::vector<pkv_layer_spec> &specs, pkv_layer_spec *out,
                       uint32_t spec_size);

}  // namespace pkv
