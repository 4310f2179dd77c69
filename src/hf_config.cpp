#include "hf_config.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <string>

#include "status.h"

namespace pkv {
namespace {

using nlohmann::json;

// A positive integer field that fits in 32 bits; throws when present but wrong.
bool read_count(const json &cfg, const char *key, uint32_t *out) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return false;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > INT32_MAX)
    // Only scalars are printed: dumping a nested value recurses once per level (a crafted config
    // nested 100k deep would overflow the stack).
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be a positive integer, got %s", key,
         it->is_primitive() ? it->dump().c_str() : it->type_name());
  *out = static_cast<uint32_t>(it->get<int64_t>());
  return true;
}

uint32_t require_count(const json &cfg, const char *key) {
  uint32_t v = 0;
  if (!read_count(cfg, key, &v)) fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" is missing", key);
  return v;
}

int32_t read_dtype(const json &cfg, int32_t fallback) {
  for (const char *key : {"torch_dtype", "dtype"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_string()) fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be a string", key);
    std::string s = it->get<std::string>();
    if (s == "bfloat16") return PKV_DTYPE_BF16;
    if (s == "float16" || s == "half") return PKV_DTYPE_F16;
    if (s == "float32" || s == "float") return PKV_DTYPE_F32;
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: %s \"%s\" is not bfloat16, float16 or float32",
         key, s.c_str());
  }
  return fallback;
}

}  // namespace

pkv_engine_params params_from_hf_config(const pkv_engine_params &p, const char *text, size_t len) {
  // nlohmann takes a NUL byte for the end of the input: "{...}\0anything" would parse. JSON text
  // never holds one (not even inside a string), so it is refused wherever it is.
  if (const void *nul = std::memchr(text, '\0', len))
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json is not valid JSON: a NUL byte at offset %zu",
         size_t(static_cast<const char *>(nul) - text));
  // parse() is strict: only whitespace may follow the value ("{...} x" or "{}{}" is malformed).
  json root = json::parse(text, text + len, nullptr, /*allow_exceptions=*/false,
                          /*ignore_comments=*/false);
  if (root.is_discarded()) fail(PKV_ERR_INVALID_ARGUMENT, "config.json is not valid JSON");
  if (!root.is_object()) fail(PKV_ERR_INVALID_ARGUMENT, "config.json must hold a JSON object");
  // Multimodal configs keep the language model's shape under "text_config".
  const json *cfg = &root;
  if (!root.contains("num_hidden_layers") && root.contains("text_config")) {
    cfg = &root["text_config"];
    if (!cfg->is_object()) fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"text_config\" must be an object");
  }
  pkv_engine_params out = p;
  out.num_layers = require_count(*cfg, "num_hidden_layers");
  out.num_q_heads = require_count(*cfg, "num_attention_heads");
  out.num_kv_heads = out.num_q_heads;
  read_count(*cfg, "num_key_value_heads", &out.num_kv_heads);
  if (!read_count(*cfg, "head_dim", &out.head_dim)) {
    uint32_t hidden = require_count(*cfg, "hidden_size");
    if (hidden % out.num_q_heads)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: hidden_size %u is not a multiple of num_attention_heads %u (give head_dim)",
           hidden, out.num_q_heads);
    out.head_dim = hidden / out.num_q_heads;
  }
  out.dtype = read_dtype(*cfg, read_dtype(root, p.dtype));
  read_count(*cfg, "max_position_embeddings", &out.max_model_len);
  if (out.num_q_heads % out.num_kv_heads)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: num_key_value_heads %u does not divide num_attention_heads %u",
         out.num_kv_heads, out.num_q_heads);
  return out;
}

}  // namespace pkv
