// The JSON reading both config calls share (hf_config.cpp, hf_config_layers.cpp): each reader
// throws PKV_ERR_INVALID_ARGUMENT naming the field when it is present but wrong.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hf_config.h"

namespace pkv::hf {

using nlohmann::json;

json parse_config(const char *text, size_t len);  // the root object, strictly
const json &text_config(const json &root);        // "text_config" when the root has no layers

bool read_count(const json &cfg, const char *key, uint32_t *out);  // 1 .. 2^31-1; false: absent
uint32_t require_count(const json &cfg, const char *key);
bool read_index(const json &cfg, const char *key, uint32_t *out);  // 0 .. 2^31-1
bool read_bool(const json &cfg, const char *key, bool fallback);
std::string read_string(const json &cfg, const char *key);  // "" when absent or not a string
bool read_positive(const json &cfg, const char *key, double *out);  // finite > 0; null: absent

// model_type of the text config, else of the root ("gemma3" over "gemma3_text" alike).
std::string model_type(const json &root, const json &cfg);

LayerWindows layer_windows(const json &root, const json &cfg);

// The flat fields as pkv_engine_params_from_hf_config fills them, before its refusal of configs
// that need per-layer specs (pkv_engine_params_from_hf_config_layers reads those).
pkv_engine_params flat_params(const pkv_engine_params &p, const json &root, const json &cfg);

// A hybrid model's recurrent layers (hf_config_state.cpp; pkv_engine_params_from_hf_config_layers
// documents the families).
struct StateLayers {
  pkv_layer_spec spec{};          // every recurrent layer's: kind STATE, its parts (this rank's)
  uint32_t num_layers = 0;        // the model's layers pkv holds (Nemotron-H: its M and * blocks)
  uint32_t num_state_layers = 0;  // 0: no recurrent layer (then spec is all zeros)
  std::vector<bool> state;        // [num_layers] when num_layers <= max_layers: recurrent or not
};

// The field that says a model_type of a hybrid family pkv reads has recurrent layers; nullptr
// for every other model_type.
const char *state_family_field(const json &root, const json &cfg);

// The recurrent layers of flat's model (flat_params' result: its num_layers, dtype and tp_size);
// num_state_layers 0 for a model of no hybrid family. Throws naming a missing or bad field.
StateLayers read_state_layers(const json &root, const json &cfg, const pkv_engine_params &flat,
                              uint32_t max_layers);

// Sparse attention's indexer (DeepSeek V3.2, GLM-5; hf_config_dsa.cpp): head_dim 0 = none.
struct Indexer {
  uint32_t head_dim = 0, n_heads = 0, topk = 0;
};

// index_head_dim, index_n_heads and index_topk of cfg, all three or none; throws naming a
// missing or bad one (INVALID_ARGUMENT), or a model pkv cannot give them to (UNSUPPORTED: no
// MLA, or layers that share another's top-k).
Indexer read_indexer(const json &cfg, bool mla);

// The indexer into an MLA spec (fp8 keys with a per-token scale, as vLLM caches them); other
// kinds, and ix without one, leave s as it is.
void set_indexer(const Indexer &ix, pkv_layer_spec *s);

// Throws PKV_ERR_UNSUPPORTED naming the first field whose cache flat (flat_params' result) cannot
// describe, and pkv_engine_params_from_hf_config_layers (hf_config_layers.cpp).
void refuse_specs(const json &root, const json &cfg, const pkv_engine_params &flat);

}  // namespace pkv::hf
