#include "hf_config.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "hf_json.h"
#include "params.h"
#include "status.h"

namespace pkv::hf {

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
  if (!read_count(cfg, key, &v))
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" is missing", key);
  return v;
}

static int32_t read_dtype(const json &cfg, int32_t fallback) {
  for (const char *key : {"torch_dtype", "dtype"}) {
    auto it = cfg.find(key);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_string())
      fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be a string", key);
    std::string s = it->get<std::string>();
    if (s == "bfloat16") return PKV_DTYPE_BF16;
    if (s == "float16" || s == "half") return PKV_DTYPE_F16;
    if (s == "float32" || s == "float") return PKV_DTYPE_F32;
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: %s \"%s\" is not bfloat16, float16 or float32",
         key, s.c_str());
  }
  return fallback;
}

json parse_config(const char *text, size_t len) {
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
  return root;
}

// Multimodal configs keep the language model's shape under "text_config".
const json &text_config(const json &root) {
  if (!root.contains("num_hidden_layers") && root.contains("text_config")) {
    const json &cfg = root["text_config"];
    if (!cfg.is_object())
      fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"text_config\" must be an object");
    return cfg;
  }
  return root;
}

bool read_bool(const json &cfg, const char *key, bool fallback) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be true or false", key);
  return it->get<bool>();
}

std::string read_string(const json &cfg, const char *key) {
  auto it = cfg.find(key);
  return it != cfg.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A count that may be 0; throws when present but wrong.
bool read_index(const json &cfg, const char *key, uint32_t *out) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return false;
  if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be a whole number >= 0, got %s", key,
         it->is_primitive() ? it->dump().c_str() : it->type_name());
  *out = static_cast<uint32_t>(it->get<int64_t>());
  return true;
}

bool read_positive(const json &cfg, const char *key, double *out) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return false;
  if (!it->is_number() || !std::isfinite(it->get<double>()) || !(it->get<double>() > 0))
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" must be a finite number > 0, got %s", key,
         it->is_primitive() ? it->dump().c_str() : it->type_name());
  *out = it->get<double>();
  return true;
}

// transformers names a multimodal model's text part "<family>_text": one name for both.
std::string model_type(const json &root, const json &cfg) {
  std::string m = read_string(cfg, "model_type");
  if (m.empty()) m = read_string(root, "model_type");
  const std::string suffix = "_text";
  if (m.size() > suffix.size() && m.compare(m.size() - suffix.size(), suffix.size(), suffix) == 0)
    m.resize(m.size() - suffix.size());
  return m;
}

// layer_types: one "sliding_attention" or "full_attention" per layer.
static std::vector<uint32_t> typed_windows(const json &types, uint32_t layers, uint32_t window) {
  if (!types.is_array() || types.size() != layers)
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "config.json: \"layer_types\" must be an array of num_hidden_layers (%u) strings, got %s of %zu",
        layers, types.type_name(), types.is_array() ? types.size() : size_t(0));
  std::vector<uint32_t> w(layers, 0);
  for (uint32_t l = 0; l < layers; ++l) {
    const json &t = types[l];
    const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
    if (kind == "sliding_attention")
      w[l] = window;
    else if (kind != "full_attention")
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: layer_types[%u] must be \"sliding_attention\" or \"full_attention\"%s", l,
           kind.empty() ? "" : (", not \"" + kind.substr(0, 64) + "\"").c_str());
  }
  return w;
}

LayerWindows layer_windows(const json &root, const json &cfg) {
  using Rule = LayerWindows::Rule;
  const uint32_t layers = require_count(cfg, "num_hidden_layers");
  uint32_t window = 0;
  read_count(cfg, "sliding_window", &window);  // null or absent: none
  if (!window) return LayerWindows(layers, 0, Rule::kNone);
  auto types = cfg.find("layer_types");
  if (types != cfg.end() && !types->is_null())  // Gemma 3, gpt-oss, Qwen3 and newer configs
    return LayerWindows(layers, window, Rule::kTypes, 0, typed_windows(*types, layers, window));
  const std::string model = model_type(root, cfg);
  uint32_t pattern = 0;
  if (read_count(cfg, "sliding_window_pattern", &pattern))  // Gemma 3: every pattern-th layer full
    return LayerWindows(layers, window, Rule::kPattern, pattern);
  // Gemma 3 configs may leave the pattern out: transformers' Gemma3TextConfig default is 6.
  if (model == "gemma3") return LayerWindows(layers, window, Rule::kPattern, 6);
  if (model == "gemma2") return LayerWindows(layers, window, Rule::kAlternate);
  if (cfg.contains("use_sliding_window")) {
    // Qwen2 (and Qwen2-MoE, Qwen3): windows only when use_sliding_window, on layers from
    // max_window_layers on (absent: transformers' default for these models, 28).
    if (!read_bool(cfg, "use_sliding_window", false)) return LayerWindows(layers, 0, Rule::kNone);
    uint32_t first = 28;
    read_index(cfg, "max_window_layers", &first);
    return LayerWindows(layers, window, Rule::kFrom, first);
  }
  return LayerWindows(layers, window, Rule::kAll);  // Mistral: one window everywhere
}

}  // namespace pkv::hf

namespace pkv {

LayerWindows::LayerWindows(uint32_t num_layers, uint32_t window, Rule rule, uint32_t n,
                           std::vector<uint32_t> types)
    : num_layers_(num_layers), window_(window), rule_(rule), n_(n), types_(std::move(types)) {}

uint32_t LayerWindows::at(uint32_t l) const {
  switch (rule_) {
    case Rule::kNone:
      return 0;
    case Rule::kAll:
      return window_;
    case Rule::kTypes:
      return types_[l];
    case Rule::kPattern:
      return (l + 1) % n_ ? window_ : 0;
    case Rule::kAlternate:
      return l % 2 ? 0 : window_;
    case Rule::kFrom:
      return l >= n_ ? window_ : 0;
  }
  return 0;
}

bool LayerWindows::uniform() const {
  switch (rule_) {
    case Rule::kNone:
    case Rule::kAll:
      return true;
    case Rule::kTypes:
      return std::all_of(types_.begin(), types_.end(), [&](uint32_t w) { return w == types_[0]; });
    case Rule::kPattern:
      return n_ == 1 || n_ > num_layers_;  // every layer full, or none
    case Rule::kAlternate:
      return num_layers_ == 1;
    case Rule::kFrom:
      return n_ == 0 || n_ >= num_layers_;
  }
  return true;
}

void LayerWindows::copy_to(uint32_t *out) const {
  for (uint32_t l = 0; l < num_layers_; ++l) out[l] = at(l);
}

LayerWindows layer_windows_from_hf_config(const char *text, size_t len) {
  const hf::json root = hf::parse_config(text, len);
  const hf::json &cfg = hf::text_config(root);
  // A hybrid family's layers are not its num_hidden_layers blocks (Nemotron-H's MLP blocks keep
  // no cache): refused as the flat call refuses it, naming the per-layer call.
  if (hf::state_family_field(root, cfg)) params_from_hf_config(default_engine_params(), text, len);
  return hf::layer_windows(root, cfg);
}

}  // namespace pkv

namespace pkv::hf {
namespace {

// Fields of attention kinds whose cache pkv cannot hold: a config with one is refused by name,
// never profiled as something else.
struct Unplaced {
  const char *key, *what;
};
constexpr Unplaced kUnplaced[] = {
    {"linear_num_key_heads", "linear attention layers (a recurrent state, not a KV cache)"},
    {"linear_num_value_heads", "linear attention layers (a recurrent state, not a KV cache)"},
    {"mamba_d_state", "state-space (Mamba) layers"},
    {"ssm_state_size", "state-space (Mamba) layers"},
};

// A number of rope_scaling (or what names it: rope_parameters; >= 0 when given), or fallback.
double read_scaling(const json &scaling, const char *name, const char *key, double fallback) {
  const auto it = scaling.find(key);
  if (it == scaling.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() >= 0) || !std::isfinite(it->get<double>()))
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: %s.%s must be a finite number >= 0", name, key);
  return it->get<double>();
}

// MLA's softmax scale: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim) (the heads' query-key width
// before absorption), times mscale^2 when rope_scaling stretches the context (DeepSeek's yarn:
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 for factor > 1), as DeepSeek's and vLLM's code
// scale it. Configs that transformers 5 writes keep those fields in rope_parameters instead
// (GLM-5's: rope_type "default", no factor, so 1/sqrt(192 + 64); its GlmMoeDsaAttention scales
// as DeepSeek V3's).
float mla_softmax_scale(const json &cfg, uint32_t nope, uint32_t rope) {
  double scale = 1.0 / std::sqrt(double(nope) + rope);
  const char *name = "rope_scaling";
  auto it = cfg.find(name);
  if (it == cfg.end() || !it->is_object()) it = cfg.find(name = "rope_parameters");
  if (it != cfg.end() && it->is_object()) {
    const double factor = read_scaling(*it, name, "factor", 1.0),
                 all_dim = read_scaling(*it, name, "mscale_all_dim", 0.0);
    const double mscale = factor > 1.0 ? 0.1 * all_dim * std::log(factor) + 1.0 : 1.0;
    scale *= mscale * mscale;
  }
  return float(scale);
}

// Multi-head latent attention (DeepSeek V2/V3/R1/V3.2, Kimi K2, GLM-5): one latent of kv_lora_rank +
// qk_rope_head_dim values per token per layer, shared by every head. False when the config has
// none of its fields.
bool read_mla(const json &cfg, pkv_engine_params *out) {
  const char *const keys[] = {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"};
  const char *present = nullptr;
  for (const char *k : keys)
    if (cfg.contains(k) && !cfg[k].is_null()) present = present ? present : k;
  if (!present) return false;
  uint32_t rank = 0, rope = 0, nope = 0, v = 0;
  if (!read_count(cfg, "kv_lora_rank", &rank))
    fail(
        PKV_ERR_INVALID_ARGUMENT,
        "config.json: \"%s\" says multi-head latent attention, but \"kv_lora_rank\" (the latent's width) is "
        "missing",
        present);
  if (!read_index(cfg, "qk_rope_head_dim", &rope))
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: multi-head latent attention needs \"qk_rope_head_dim\"");
  read_index(cfg, "qk_nope_head_dim", &nope);  // the heads' projections: not in the cache
  read_count(cfg, "v_head_dim", &v);
  if (uint64_t(rank) + rope > PKV_MAX_HEAD_DIM)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: the latent (kv_lora_rank %u + qk_rope_head_dim %u) exceeds %d", rank, rope,
         PKV_MAX_HEAD_DIM);
  out->kv_layout = PKV_KV_LAYOUT_MLA;
  out->kv_lora_rank = rank;
  out->qk_rope_head_dim = rope;
  out->num_kv_heads = 1;
  out->head_dim = rank + rope;
  if (cfg.contains("qk_nope_head_dim") && !cfg["qk_nope_head_dim"].is_null() &&
      uint64_t(nope) + rope > 0)
    out->softmax_scale = mla_softmax_scale(cfg, nope, rope);
  return true;
}

// The softmax scale where the model's is not 1/sqrt(head_dim). Gemma 2 and 3 scale queries by
// query_pre_attn_scalar^-0.5 (transformers' Gemma2Attention / Gemma3Attention: scaling =
// config.query_pre_attn_scalar**-0.5). Gemma 3n and 4 normalize q and k and scale by 1
// (Gemma3nTextAttention / Gemma4TextAttention: self.scaling = 1.0), though 3n's config still
// carries a query_pre_attn_scalar. Granite: attention_multiplier. Other models: the caller's field as it was.
void read_softmax_scale(const json &root, const json &cfg, pkv_engine_params *out) {
  const std::string model = model_type(root, cfg);
  double scalar = 0;
  if ((model == "gemma2" || model == "gemma3") &&
      read_positive(cfg, "query_pre_attn_scalar", &scalar))
    out->softmax_scale = float(1.0 / std::sqrt(scalar));
  else if (model == "gemma3n" || model == "gemma4")
    out->softmax_scale = 1.0f;
  // Granite (GraniteAttention, GraniteMoeHybridAttention: self.scaling =
  // config.attention_multiplier): Granite 4.0-H scales by 1/128 where 1/sqrt(128) is the default.
  else if (model.compare(0, 7, "granite") == 0 &&
           read_positive(cfg, "attention_multiplier", &scalar))
    out->softmax_scale = float(scalar);
}

}  // namespace

pkv_engine_params flat_params(const pkv_engine_params &p, const json &root, const json &cfg) {
  // A hybrid family pkv reads (hf_config_state.cpp) holds its recurrent layers as STATE specs.
  const bool hybrid = state_family_field(root, cfg) != nullptr;
  for (const Unplaced &u : kUnplaced)
    if (!hybrid && cfg.contains(u.key) && !cfg[u.key].is_null())
      fail(PKV_ERR_UNSUPPORTED, "config.json: \"%s\": %s is not a cache pkv holds", u.key, u.what);
  pkv_engine_params out = p;
  out.kv_layout = PKV_KV_LAYOUT_HEADS;
  out.kv_lora_rank = out.qk_rope_head_dim = 0;
  out.num_layers = require_count(cfg, "num_hidden_layers");
  out.num_q_heads = require_count(cfg, "num_attention_heads");
  if (read_mla(cfg, &out)) {
    out.dtype = read_dtype(cfg, read_dtype(root, p.dtype));
    read_count(cfg, "max_position_embeddings", &out.max_model_len);
    const LayerWindows w = layer_windows(root, cfg);
    if (!w.uniform() || w.at(0))
      fail(PKV_ERR_UNSUPPORTED, "config.json: sliding windows with multi-head latent attention");
    out.sliding_window = 0;
    return out;
  }
  out.num_kv_heads = out.num_q_heads;
  read_count(cfg, "num_key_value_heads", &out.num_kv_heads);
  if (!read_count(cfg, "head_dim", &out.head_dim)) {
    uint32_t hidden = require_count(cfg, "hidden_size");
    if (hidden % out.num_q_heads)
      fail(
          PKV_ERR_INVALID_ARGUMENT,
          "config.json: hidden_size %u is not a multiple of num_attention_heads %u (give head_dim)",
          hidden, out.num_q_heads);
    out.head_dim = hidden / out.num_q_heads;
  }
  out.dtype = read_dtype(cfg, read_dtype(root, p.dtype));
  read_count(cfg, "max_position_embeddings", &out.max_model_len);
  if (out.num_q_heads % out.num_kv_heads)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: num_key_value_heads %u does not divide num_attention_heads %u",
         out.num_kv_heads, out.num_q_heads);
  read_softmax_scale(root, cfg, &out);
  // One window for every layer (Mistral) is sliding_window; mixed models need layer_windows.
  const LayerWindows w = layer_windows(root, cfg);
  out.sliding_window = w.uniform() ? w.at(0) : 0;
  return out;
}

}  // namespace pkv::hf

namespace pkv {

pkv_engine_params params_from_hf_config(const pkv_engine_params &p, const char *text, size_t len) {
  const hf::json root = hf::parse_config(text, len);
  const hf::json &cfg = hf::text_config(root);
  const pkv_engine_params out = hf::flat_params(p, root, cfg);
  hf::refuse_specs(root, cfg, out);  // a model the flat fields would describe wrong
  return out;
}

}  // namespace pkv
