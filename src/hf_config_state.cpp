// A hybrid model's recurrent layers as PKV_LAYER_STATE specs (DESIGN.md §13): which layers are
// recurrent and each one's state per sequence, as each family's own code keeps it (cited per
// family; vLLM's MambaStateShapeCalculator sizes them alike). Part 0 is the conv state, channels
// outermost (conv_dim x (conv_kernel - 1)); part 1 the SSM / delta-rule state. Shapes are this
// rank's share under tp_size, split where vLLM splits them (heads, conv channels).
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "hf_json.h"
#include "status.h"

namespace pkv::hf {
namespace {

constexpr uint64_t kMaxStateDim = uint64_t(1) << 24;  // pkv_layer_spec.state_shape's limit
constexpr uint64_t kMaxStatePartBytes = uint64_t(1) << 40;

uint32_t dtype_bytes(uint32_t dtype) { return dtype == PKV_DTYPE_F32 ? 4 : 2; }

// Part `part` of s: dims outermost first, each 1 .. 2^24 and the part at most 2^40 bytes, else
// refused naming what the dims come from. A dim of 0 (a conv of kernel 1 keeps no state) leaves
// the part absent.
void set_part(pkv_layer_spec *s, int part, uint32_t dtype, std::initializer_list<uint64_t> dims,
              const char *what) {
  uint64_t bytes = dtype_bytes(dtype);
  for (uint64_t d : dims)
    if (d == 0) return;
  int i = 0;
  for (uint64_t d : dims) {
    if (d > kMaxStateDim || bytes > kMaxStatePartBytes / d)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: the %s (%s) exceeds pkv's limits: dimension %d is %llu (at most 2^24), "
           "a part at most 2^40 bytes",
           part == 0 ? "conv state" : "recurrent state", what, i, (unsigned long long)d);
    bytes *= d;
    s->state_shape[part * PKV_MAX_STATE_DIMS + i++] = uint32_t(d);
  }
  s->state_dtype[part] = dtype;
}

// count / tp_size for a count vLLM splits across ranks; refused naming the field when uneven.
uint64_t per_rank(uint64_t count, uint32_t tp, const char *field) {
  if (count % tp)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: \"%s\" (%llu) is not a multiple of tp_size %u: the recurrent layers cannot "
         "be split evenly",
         field, (unsigned long long)count, tp);
  return count / tp;
}

// The recurrent state's dtype: "mamba_ssm_dtype" when the config gives one (Qwen3.5: float32 in
// a bfloat16 model), else fallback. The host may also set pkv_layer_spec.state_dtype itself.
uint32_t ssm_dtype(const json &root, const json &cfg, uint32_t fallback) {
  for (const json *c : {&cfg, &root}) {
    const auto it = c->find("mamba_ssm_dtype");
    if (it == c->end() || it->is_null()) continue;
    const std::string s = it->is_string() ? it->get<std::string>() : std::string();
    if (s == "float32") return PKV_DTYPE_F32;
    if (s == "bfloat16") return PKV_DTYPE_BF16;
    if (s == "float16") return PKV_DTYPE_F16;
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: \"mamba_ssm_dtype\" must be \"float32\", \"bfloat16\" or \"float16\"");
  }
  return fallback;
}

// A per-layer array of num_hidden_layers strings, each state_name or attention_name.
void typed_layers(const json &cfg, uint32_t n, const char *state_name, const char *attention_name,
                  uint32_t max_layers, StateLayers *out) {
  const auto types = cfg.find("layer_types");
  if (!types->is_array() || types->size() != n)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: \"layer_types\" must be an array of num_hidden_layers (%u) strings", n);
  out->num_layers = n;
  if (n <= max_layers) out->state.assign(n, false);
  for (uint32_t l = 0; l < n; ++l) {
    const json &t = (*types)[l];
    const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
    if (kind != state_name && kind != attention_name)
      fail(PKV_ERR_INVALID_ARGUMENT, "config.json: layer_types[%u] must be \"%s\" or \"%s\"", l,
           state_name, attention_name);
    out->num_state_layers += kind == state_name;
    if (n <= max_layers) out->state[l] = kind == state_name;
  }
}

// Layer l recurrent unless attention(l): num_layers n, the rule evaluated per layer only when the
// specs are built (a config may claim 2^31-1 layers).
template <typename Attention>
void ruled_layers(uint32_t n, uint32_t num_attention, uint32_t max_layers, Attention attention,
                  StateLayers *out) {
  out->num_layers = n;
  out->num_state_layers = n - num_attention;
  if (n > max_layers) return;
  out->state.assign(n, false);
  for (uint32_t l = 0; l < n; ++l) out->state[l] = !attention(l);
}

// Qwen3-Next and Qwen3.5 (transformers' Qwen3NextGatedDeltaNet; vLLM's
// gated_delta_net_state_shape): a causal conv over q, k and v (conv_dim = 2 * key heads *
// key_dim + value heads * value_dim channels, linear_conv_kernel_dim - 1 past inputs, the model's
// dtype) and a delta-rule state of value heads x key_dim x value_dim, fp32 (fla's kernels keep
// the final state in fp32). Layers from layer_types ("linear_attention" / "full_attention"), else
// every full_attention_interval-th full (default 4, as Qwen3NextConfig derives layer_types).
void read_gdn(const json &root, const json &cfg, const pkv_engine_params &flat, uint32_t max_layers,
              StateLayers *out) {
  const uint32_t n = flat.num_layers, tp = flat.tp_size ? flat.tp_size : 1;
  const uint32_t kh = require_count(cfg, "linear_num_key_heads"),
                 vh = require_count(cfg, "linear_num_value_heads"),
                 kd = require_count(cfg, "linear_key_head_dim"),
                 vd = require_count(cfg, "linear_value_head_dim"),
                 kernel = require_count(cfg, "linear_conv_kernel_dim");
  if (vh % kh)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: linear_num_value_heads %u is not a multiple of linear_num_key_heads %u", vh,
         kh);
  const uint64_t kh_rank = per_rank(kh, tp, "linear_num_key_heads"),
                 vh_rank = per_rank(vh, tp, "linear_num_value_heads");
  set_part(&out->spec, 0, uint32_t(flat.dtype),
           {2 * kh_rank * kd + vh_rank * vd, uint64_t(kernel) - 1},
           "2 * linear_num_key_heads * linear_key_head_dim + linear_num_value_heads * "
           "linear_value_head_dim, linear_conv_kernel_dim - 1");
  set_part(&out->spec, 1, ssm_dtype(root, cfg, PKV_DTYPE_F32), {vh_rank, kd, vd},
           "linear_num_value_heads, linear_key_head_dim, linear_value_head_dim");
  const auto types = cfg.find("layer_types");
  if (types != cfg.end() && !types->is_null())
    return typed_layers(cfg, n, "linear_attention", "full_attention", max_layers, out);
  uint32_t interval = 4;
  read_count(cfg, "full_attention_interval", &interval);
  ruled_layers(
      n, n / interval, max_layers, [&](uint32_t l) { return (l + 1) % interval == 0; }, out);
}

// A 1-based layer list of linear_attn_config (Kimi Linear's config numbers layers from 1) into
// *in ([n] when built, else only counted and range-checked); false when absent.
bool listed_layers(const json &lac, const char *key, uint32_t n, bool build, std::vector<bool> *in,
                   uint32_t *count) {
  const auto it = lac.find(key);
  if (it == lac.end() || it->is_null()) return false;
  if (!it->is_array())
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: linear_attn_config.%s must be an array", key);
  if (build) in->assign(n, false);
  *count = uint32_t(it->size());
  for (const json &v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > int64_t(n) ||
        (build && (*in)[size_t(v.get<int64_t>() - 1)]))
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: linear_attn_config.%s must list distinct layers 1 .. num_hidden_layers "
           "(%u), numbered from 1",
           key, n);
    if (build) (*in)[size_t(v.get<int64_t>() - 1)] = true;
  }
  return true;
}

// Kimi Linear (vLLM's KimiDeltaAttention, kda_state_shape): short convs over q, k and v (num_heads
// * head_dim channels each, short_conv_kernel_size - 1 past inputs, the model's dtype; pkv keeps
// the three side by side in part 0: 3 * num_heads * head_dim channels, q then k then v) and a
// state of num_heads x head_dim x head_dim, fp32. linear_attn_config.kda_layers lists the KDA
// layers from 1 (KimiLinearConfig.is_kda_layer: layer_idx + 1 in kda_layers); the others are MLA.
void read_kda(const json &root, const json &cfg, const pkv_engine_params &flat, uint32_t max_layers,
              StateLayers *out) {
  const uint32_t n = flat.num_layers, tp = flat.tp_size ? flat.tp_size : 1;
  const auto lac = cfg.find("linear_attn_config");
  if (lac == cfg.end() || !lac->is_object())
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: model_type \"kimi_linear\" needs \"linear_attn_config\" (an object)");
  const uint32_t heads = require_count(*lac, "num_heads"), dim = require_count(*lac, "head_dim"),
                 kernel = require_count(*lac, "short_conv_kernel_size");
  const uint64_t heads_rank = per_rank(heads, tp, "linear_attn_config.num_heads");
  set_part(&out->spec, 0, uint32_t(flat.dtype), {3 * heads_rank * dim, uint64_t(kernel) - 1},
           "3 * num_heads * head_dim, short_conv_kernel_size - 1");
  set_part(&out->spec, 1, ssm_dtype(root, cfg, PKV_DTYPE_F32), {heads_rank, dim, dim},
           "num_heads, head_dim, head_dim");
  const bool build = n <= max_layers;
  std::vector<bool> kda, full;
  uint32_t num_kda = 0, num_full = 0;
  if (!listed_layers(*lac, "kda_layers", n, build, &kda, &num_kda))
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: linear_attn_config.kda_layers is missing");
  const bool has_full = listed_layers(*lac, "full_attn_layers", n, build, &full, &num_full);
  out->num_layers = n;
  out->num_state_layers = num_kda;
  if (!build) return;
  for (uint32_t l = 0; has_full && l < n; ++l)
    if (kda[l] == full[l])
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: layer %u (numbered from 1) is in %s of linear_attn_config's kda_layers "
           "and full_attn_layers: each layer is in exactly one",
           l + 1, kda[l] ? "both" : "neither");
  out->state = kda;
}

// Mamba2 (transformers' NemotronHMamba2Mixer, GraniteMoeHybridMambaLayer; vLLM's
// mamba2_state_shape): a conv over x, B and C (heads * head_dim + 2 * n_groups * d_state
// channels, d_conv - 1 past inputs) and an SSM state of heads x head_dim x d_state, both in the
// model's dtype (HybridMambaAttentionDynamicCache allocates them so). Under tensor parallelism
// the heads split; the groups split too, or a single group is kept whole on every rank.
void mamba2_parts(const json &root, const json &cfg, const pkv_engine_params &flat,
                  const char *const keys[5], StateLayers *out) {
  const uint32_t tp = flat.tp_size ? flat.tp_size : 1;
  const uint32_t heads = require_count(cfg, keys[0]), head_dim = require_count(cfg, keys[1]),
                 d_state = require_count(cfg, keys[2]), groups = require_count(cfg, keys[3]),
                 kernel = require_count(cfg, keys[4]);
  const uint64_t heads_rank = per_rank(heads, tp, keys[0]);
  const uint64_t groups_rank = groups == 1 ? 1 : per_rank(groups, tp, keys[3]);
  const std::string conv = std::string(keys[0]) + " * " + keys[1] + " + 2 * " + keys[3] + " * " +
                           keys[2] + ", " + keys[4] + " - 1",
                    ssm = std::string(keys[0]) + ", " + keys[1] + ", " + keys[2];
  set_part(&out->spec, 0, uint32_t(flat.dtype),
           {heads_rank * head_dim + 2 * groups_rank * d_state, uint64_t(kernel) - 1}, conv.c_str());
  set_part(&out->spec, 1, ssm_dtype(root, cfg, uint32_t(flat.dtype)),
           {heads_rank, head_dim, d_state}, ssm.c_str());
}

// Nemotron-H and Nemotron 3 (NemotronHConfig): hybrid_override_pattern gives each block's mixer,
// "M" Mamba2, "*" attention, "-" an MLP, "E" a mixture of experts. Only M and * blocks keep a
// cache: they are pkv's layers, in order (the host numbers its layers as pkv does).
void read_nemotron_h(const json &root, const json &cfg, const pkv_engine_params &flat,
                     uint32_t max_layers, StateLayers *out) {
  static const char *const keys[5] = {"mamba_num_heads", "mamba_head_dim", "ssm_state_size",
                                      "n_groups", "conv_kernel"};
  mamba2_parts(root, cfg, flat, keys, out);
  const uint32_t n = flat.num_layers;
  const std::string pattern = read_string(cfg, "hybrid_override_pattern");
  out->num_layers = 0;
  if (pattern.size() != n)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: \"hybrid_override_pattern\" must be a string of num_hidden_layers (%u) "
         "characters",
         n);
  for (uint32_t l = 0; l < n; ++l) {
    const char c = pattern[l];
    if (!std::strchr("M*-E", c) || c == '\0')
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: hybrid_override_pattern[%u] must be 'M' (Mamba2), '*' (attention), '-' "
           "(MLP) or 'E' (experts)",
           l);
    if (c != 'M' && c != '*') continue;
    out->num_state_layers += c == 'M';
    if (++out->num_layers <= max_layers) out->state.push_back(c == 'M');
  }
  if (out->num_layers > max_layers) out->state.clear();
}

// Granite 4.0-H (GraniteMoeHybridConfig): layer_types "mamba" / "attention"; Mamba2 of
// mamba_n_heads heads of mamba_d_head, whose product is mamba_expand * hidden_size.
void read_granite(const json &root, const json &cfg, const pkv_engine_params &flat,
                  uint32_t max_layers, StateLayers *out) {
  static const char *const keys[5] = {"mamba_n_heads", "mamba_d_head", "mamba_d_state",
                                      "mamba_n_groups", "mamba_d_conv"};
  const auto types = cfg.find("layer_types");
  if (types == cfg.end() || types->is_null())
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: model_type \"granitemoehybrid\" needs \"layer_types\" (\"mamba\" or "
         "\"attention\" per layer)");
  typed_layers(cfg, flat.num_layers, "mamba", "attention", max_layers, out);
  if (out->num_state_layers == 0) return;  // Granite 4.0 Micro: attention only
  mamba2_parts(root, cfg, flat, keys, out);
  const uint64_t inner =
      uint64_t(require_count(cfg, "mamba_expand")) * require_count(cfg, "hidden_size");
  if (uint64_t(require_count(cfg, "mamba_n_heads")) * require_count(cfg, "mamba_d_head") != inner)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: mamba_n_heads * mamba_d_head must be mamba_expand * hidden_size (%llu)",
         (unsigned long long)inner);
}

// Jamba (transformers' JambaMambaMixer, Mamba1; vLLM's mamba1_state_shape): a conv over
// d_inner = mamba_expand * hidden_size channels (mamba_d_conv - 1 past inputs) and an SSM state
// of d_inner x mamba_d_state, both in the model's dtype; d_inner splits under tensor
// parallelism. Layer l is attention when l % attn_layer_period == attn_layer_offset (defaults 8
// and 4, JambaConfig's), else Mamba.
void read_jamba(const json &root, const json &cfg, const pkv_engine_params &flat,
                uint32_t max_layers, StateLayers *out) {
  const uint32_t n = flat.num_layers, tp = flat.tp_size ? flat.tp_size : 1;
  const uint64_t inner =
      uint64_t(require_count(cfg, "mamba_expand")) * require_count(cfg, "hidden_size");
  const uint32_t d_state = require_count(cfg, "mamba_d_state"),
                 kernel = require_count(cfg, "mamba_d_conv");
  const uint64_t inner_rank = per_rank(inner, tp, "mamba_expand * hidden_size");
  set_part(&out->spec, 0, uint32_t(flat.dtype), {inner_rank, uint64_t(kernel) - 1},
           "mamba_expand * hidden_size, mamba_d_conv - 1");
  set_part(&out->spec, 1, ssm_dtype(root, cfg, uint32_t(flat.dtype)), {inner_rank, d_state},
           "mamba_expand * hidden_size, mamba_d_state");
  uint32_t period = 8, offset = 4;
  read_count(cfg, "attn_layer_period", &period);
  read_index(cfg, "attn_layer_offset", &offset);
  if (offset >= period)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: attn_layer_offset %u must be below attn_layer_period %u", offset, period);
  const uint32_t num_attention = n > offset ? (n - offset - 1) / period + 1 : 0;
  ruled_layers(
      n, num_attention, max_layers, [&](uint32_t l) { return l % period == offset; }, out);
}

// The hybrid families pkv reads, by model_type (as model_type() names them); field is the one
// that says the model has recurrent layers (the 0.1 call's refusal names it).
struct Family {
  const char *model_type, *field;
  void (*read)(const json &, const json &, const pkv_engine_params &, uint32_t, StateLayers *);
};
constexpr Family kFamilies[] = {
    {"qwen3_next", "linear_num_value_heads", read_gdn},
    {"qwen3_5", "linear_num_value_heads", read_gdn},
    {"qwen3_5_moe", "linear_num_value_heads", read_gdn},
    {"kimi_linear", "linear_attn_config", read_kda},
    {"nemotron_h", "hybrid_override_pattern", read_nemotron_h},
    {"granitemoehybrid", "mamba_n_heads", read_granite},
    {"jamba", "mamba_d_state", read_jamba},
};

const Family *family_of(const json &root, const json &cfg) {
  const std::string model = model_type(root, cfg);
  for (const Family &f : kFamilies)
    if (model == f.model_type) return &f;
  return nullptr;
}

}  // namespace

const char *state_family_field(const json &root, const json &cfg) {
  const Family *f = family_of(root, cfg);
  return f ? f->field : nullptr;
}

StateLayers read_state_layers(const json &root, const json &cfg, const pkv_engine_params &flat,
                              uint32_t max_layers) {
  StateLayers out;
  out.num_layers = flat.num_layers;
  const Family *f = family_of(root, cfg);
  if (!f) return out;
  out.spec.kind = PKV_LAYER_STATE;
  f->read(root, cfg, flat, max_layers, &out);
  if (out.num_state_layers == 0) out.spec = pkv_layer_spec{};
  return out;
}

}  // namespace pkv::hf
