// Reading a Hugging Face config.json into the model-shape fields of pkv_engine_params.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

// Returns p with the shape fields filled; throws INVALID_ARGUMENT naming the bad field.
pkv_engine_params params_from_hf_config(const pkv_engine_params &p, const char *json, size_t len);
// Each layer's window (0 = full attention), as pkv_hf_config_layer_windows documents.
std::vector<uint32_t> layer_windows_from_hf_config(const char *json, size_t len);

}  // namespace pkv
