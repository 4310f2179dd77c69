// A config.json's layers as pkv_layer_spec: windows, chunks, sinks, soft-caps, heads per layer,
// K = V, shared layers and sparse attention's indexer (hf_config_dsa.cpp), each rule from the
// model's own code (cited where it is applied). The flat fields come from hf_config.cpp; this
// file adds what differs per layer.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "hf_json.h"
#include "status.h"

namespace pkv::hf {
namespace {

constexpr const char *kUseLayersCall =
    "needs per-layer specs: read it with pkv_engine_params_from_hf_config_layers";

// Llama 4's chunked local attention: which layers attend within their own attention_chunk_size
// chunk. transformers' Llama4TextConfig: layer_types "chunked_attention" / "full_attention", or
// from no_rope_layers (1 = the layer uses rope), which defaults to every layer but each
// no_rope_layer_interval-th (4); vLLM's Llama4Attention chunks exactly the rope layers
// (use_chunked_local_attn = not nope and attention_chunk_size).
std::vector<bool> chunked_layers(const json &cfg, uint32_t n) {
  std::vector<bool> chunked(n, false);
  const auto types = cfg.find("layer_types");
  const auto rope = cfg.find("no_rope_layers");
  if (types != cfg.end() && !types->is_null()) {
    if (!types->is_array() || types->size() != n)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: \"layer_types\" must be an array of num_hidden_layers (%u) strings", n);
    for (uint32_t l = 0; l < n; ++l) {
      const json &t = (*types)[l];
      const std::string kind = t.is_string() ? t.get<std::string>() : std::string();
      if (kind != "chunked_attention" && kind != "full_attention")
        fail(PKV_ERR_INVALID_ARGUMENT,
             "config.json: with attention_chunk_size, layer_types[%u] must be "
             "\"chunked_attention\" or \"full_attention\"",
             l);
      chunked[l] = kind == "chunked_attention";
    }
  } else if (rope != cfg.end() && rope->is_array() && !rope->empty()) {
    if (rope->size() != n)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: \"no_rope_layers\" must hold num_hidden_layers (%u) entries, not %zu", n,
           rope->size());
    for (uint32_t l = 0; l < n; ++l) {
      const json &r = (*rope)[l];
      if (!r.is_number_integer() || (r.get<int64_t>() != 0 && r.get<int64_t>() != 1))
        fail(PKV_ERR_INVALID_ARGUMENT, "config.json: no_rope_layers[%u] must be 0 or 1", l);
      chunked[l] = r.get<int64_t>() == 1;
    }
  } else {
    if (rope != cfg.end() && !rope->is_null() && !rope->is_array())
      fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"no_rope_layers\" must be an array");
    uint32_t interval = 4;
    read_count(cfg, "no_rope_layer_interval", &interval);
    for (uint32_t l = 0; l < n; ++l) chunked[l] = (l + 1) % interval != 0;
  }
  return chunked;
}

// Each layer's attention and window or chunk: windows as pkv_hf_config_layer_windows reads
// them, chunks by attention_chunk_size.
void read_attention(const json &root, const json &cfg, std::vector<pkv_layer_spec> *specs) {
  const uint32_t n = uint32_t(specs->size());
  const LayerWindows windows = layer_windows(root, cfg);
  uint32_t chunk = 0;
  read_count(cfg, "attention_chunk_size", &chunk);
  const std::vector<bool> chunked = chunk ? chunked_layers(cfg, n) : std::vector<bool>(n, false);
  for (uint32_t l = 0; l < n; ++l) {
    pkv_layer_spec &s = (*specs)[l];
    if (windows.at(l)) {
      s.attention = PKV_ATTENTION_SLIDING;
      s.window = windows.at(l);
    } else if (chunked[l]) {
      s.attention = PKV_ATTENTION_CHUNKED;
      s.window = chunk;
    }
  }
}

// Gemma 4's full-attention layers (transformers' Gemma4TextAttention): head_dim global_head_dim
// when given; with attention_k_eq_v, V is K (no v_proj) and the kv heads are
// num_global_key_value_heads (else num_key_value_heads). Sliding layers keep the flat shape.
void read_global_heads(const json &cfg, const pkv_engine_params &flat,
                       std::vector<pkv_layer_spec> *specs) {
  uint32_t head_dim = flat.head_dim, kv_heads = flat.num_kv_heads;
  const bool global = read_count(cfg, "global_head_dim", &head_dim);
  const bool k_eq_v = read_bool(cfg, "attention_k_eq_v", false);
  if (k_eq_v) read_count(cfg, "num_global_key_value_heads", &kv_heads);
  if (global && head_dim > PKV_MAX_HEAD_DIM)  // the flat head_dim is checked where it is used
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: global_head_dim %u exceeds %d", head_dim,
         PKV_MAX_HEAD_DIM);
  if (flat.num_q_heads % kv_heads)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: num_global_key_value_heads %u does not divide num_attention_heads %u",
         kv_heads, flat.num_q_heads);
  for (pkv_layer_spec &s : *specs) {
    if (s.attention != PKV_ATTENTION_FULL) continue;
    s.head_dim = s.v_head_dim = head_dim;
    s.num_kv_heads = kv_heads;
    s.k_eq_v = k_eq_v;
  }
}

// Gemma 3n and 4 (Gemma3nTextAttention, Gemma4TextAttention): with first = num_hidden_layers -
// num_kv_shared_layers > 0, layers from first on keep no cache and read the last layer before
// first of their own layer type.
void read_shared(const json &cfg, std::vector<pkv_layer_spec> *specs) {
  const uint32_t n = uint32_t(specs->size());
  uint32_t shared = 0;
  if (!read_index(cfg, "num_kv_shared_layers", &shared) || shared == 0) return;
  if (shared >= n)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: num_kv_shared_layers %u must be below num_hidden_layers %u (a shared layer "
         "reads an earlier one)",
         shared, n);
  const uint32_t first = n - shared;
  for (uint32_t l = first; l < n; ++l) {
    pkv_layer_spec &s = (*specs)[l];
    uint32_t src = first;
    while (src-- > 0)
      if ((*specs)[src].attention == s.attention && (*specs)[src].window == s.window) break;
    if (src == UINT32_MAX)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "config.json: shared layer %u has no layer of its type before the shared ones (the "
           "first %u) to read",
           l, first);
    const pkv_layer_spec &from = (*specs)[src];
    s.kind = PKV_LAYER_SHARED;
    s.source_layer = src;
    s.num_kv_heads = from.num_kv_heads;
    s.head_dim = from.head_dim;
    s.v_head_dim = from.v_head_dim;
    s.k_eq_v = from.k_eq_v;
  }
}

// A hybrid model's attention layers are read as full attention: windows in one (the config's
// layer_types name recurrent layers, not windows) are refused rather than dropped.
void refuse_hybrid_windows(const json &root, const json &cfg) {
  uint32_t window = 0;
  if (read_count(cfg, "sliding_window", &window) &&
      (!cfg.contains("use_sliding_window") || read_bool(cfg, "use_sliding_window", false)))
    fail(PKV_ERR_UNSUPPORTED,
         "config.json: \"sliding_window\" (%u) in a model with recurrent layers (model_type %s): "
         "pkv reads its attention layers as full attention only",
         window, model_type(root, cfg).c_str());
}

// Whether flat describes every layer (then pkv_engine_params.layer_specs stays NULL).
bool flat_describes(const std::vector<pkv_layer_spec> &specs, const pkv_engine_params &flat) {
  const bool mla = flat.kv_layout == PKV_KV_LAYOUT_MLA;
  for (const pkv_layer_spec &s : specs)
    if (s.kind != (mla ? PKV_LAYER_MLA : PKV_LAYER_ATTENTION) ||
        s.attention == PKV_ATTENTION_CHUNKED || s.window != flat.sliding_window || s.sinks ||
        s.logit_softcap != 0 || s.num_kv_heads != flat.num_kv_heads ||
        s.head_dim != flat.head_dim || s.k_eq_v ||
        s.v_head_dim != (mla ? flat.kv_lora_rank : flat.head_dim) || s.index_head_dim)
      return false;
  return true;
}

}  // namespace

void refuse_specs(const json &root, const json &cfg, const pkv_engine_params &flat) {
  // gpt-oss: every GptOssAttention has learned sinks (transformers' modeling_gpt_oss.py); its
  // config has no field for them, only the model type.
  if (model_type(root, cfg) == "gpt_oss")
    fail(PKV_ERR_UNSUPPORTED,
         "config.json: model_type \"gpt_oss\" (attention sinks in every layer) %s", kUseLayersCall);
  double cap = 0;
  uint32_t n = 0;
  // DeepSeek V3.2, GLM-5: the indexer's keys are a field of each MLA layer's spec, not of params.
  const Indexer ix = read_indexer(cfg, flat.kv_layout == PKV_KV_LAYOUT_MLA);
  if (ix.head_dim)
    fail(PKV_ERR_UNSUPPORTED,
         "config.json: \"index_topk\" (%u: sparse attention, whose indexer keeps %u values a token "
         "beside each layer's latent) %s",
         ix.topk, ix.head_dim, kUseLayersCall);
  if (read_positive(cfg, "attn_logit_softcapping", &cap))
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"attn_logit_softcapping\" (%g) %s", cap,
         kUseLayersCall);
  if (read_count(cfg, "global_head_dim", &n) && n != flat.head_dim)
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"global_head_dim\" (%u, head_dim %u) %s", n,
         flat.head_dim, kUseLayersCall);
  if (read_bool(cfg, "attention_k_eq_v", false))
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"attention_k_eq_v\" (V is K) %s", kUseLayersCall);
  if (read_index(cfg, "num_kv_shared_layers", &n) && n)
    fail(PKV_ERR_UNSUPPORTED,
         "config.json: \"num_kv_shared_layers\" (%u layers without a cache) %s", n, kUseLayersCall);
  if (const char *field = state_family_field(root, cfg)) {
    const StateLayers st = read_state_layers(root, cfg, flat, 0);
    if (st.num_state_layers)
      fail(PKV_ERR_UNSUPPORTED, "config.json: \"%s\" (%u recurrent layers, model_type %s) %s",
           field, st.num_state_layers, model_type(root, cfg).c_str(), kUseLayersCall);
    if (st.num_layers != flat.num_layers)
      fail(PKV_ERR_UNSUPPORTED, "config.json: \"%s\" (%u of num_hidden_layers %u keep a cache) %s",
           field, st.num_layers, flat.num_layers, kUseLayersCall);
  }
  if (read_count(cfg, "attention_chunk_size", &n))
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"attention_chunk_size\" (chunked local attention) %s",
         kUseLayersCall);
}

}  // namespace pkv::hf

namespace pkv {

HfLayers layers_from_hf_config(const pkv_engine_params &p, const char *text, size_t len,
                               uint32_t max_specs) {
  const hf::json root = hf::parse_config(text, len);
  const hf::json &cfg = hf::text_config(root);
  HfLayers out;
  out.params = hf::flat_params(p, root, cfg);
  const hf::StateLayers st = hf::read_state_layers(root, cfg, out.params, max_specs);
  out.params.num_layers = st.num_layers;  // Nemotron-H: its blocks that keep a cache
  const pkv_engine_params &flat = out.params;
  const bool mla = flat.kv_layout == PKV_KV_LAYOUT_MLA;
  // Read before the specs are known to be wanted: a length query and a digest refuse it alike.
  const hf::Indexer indexer = hf::read_indexer(cfg, mla);
  if (flat.num_layers > max_specs) return out;
  pkv_layer_spec base{};
  base.kind = mla ? PKV_LAYER_MLA : PKV_LAYER_ATTENTION;
  base.num_kv_heads = flat.num_kv_heads;
  base.head_dim = flat.head_dim;
  base.v_head_dim = mla ? flat.kv_lora_rank : flat.head_dim;
  base.sinks = hf::model_type(root, cfg) == "gpt_oss";  // see refuse_specs
  hf::set_indexer(indexer, &base);                      // every MLA layer's (hf_config_dsa.cpp)
  double cap = 0;
  // Gemma 2 (Gemma2Attention): attn_logit_softcapping caps every layer's scores;
  // final_logit_softcapping caps the host's logits, not attention: not read.
  if (hf::read_positive(cfg, "attn_logit_softcapping", &cap)) base.logit_softcap = float(cap);
  out.specs.assign(flat.num_layers, base);
  if (st.num_state_layers)
    hf::refuse_hybrid_windows(root, cfg);
  else
    hf::read_attention(root, cfg, &out.specs);
  if (!mla) hf::read_global_heads(cfg, flat, &out.specs);
  hf::read_shared(cfg, &out.specs);
  // The scale every attention layer uses, given explicitly: the engine's default is
  // 1/sqrt(head_dim) of the layer, computed as params.cpp computes it.
  for (pkv_layer_spec &s : out.specs)
    s.softmax_scale =
        flat.softmax_scale > 0 ? flat.softmax_scale : 1.0f / std::sqrt(float(s.head_dim));
  // Recurrent layers last: the attention readers above set every layer's heads and scale.
  for (uint32_t l = 0; l < st.state.size(); ++l)
    if (st.state[l]) out.specs[l] = st.spec;
  out.needs_specs = !hf::flat_describes(out.specs, flat);
  return out;
}

void write_layer_specs(const std::vector<pkv_layer_spec> &specs, pkv_layer_spec *out,
                       uint32_t spec_size) {
  // A spec of a header before 0.7 ends before the indexer: the layer would read as dense MLA.
  constexpr size_t kIndexerEnd = offsetof(pkv_layer_spec, index_topk) + sizeof(uint32_t);
  for (size_t l = 0; l < specs.size() && spec_size < kIndexerEnd; ++l)
    if (specs[l].index_head_dim)
      fail(PKV_ERR_INVALID_ARGUMENT,
           "layer %zu has a sparse-attention indexer (index_head_dim %u): spec_size %u ends before "
           "its fields; pkv.h 0.7's pkv_layer_spec (%zu bytes) is needed",
           l, specs[l].index_head_dim, spec_size, kIndexerEnd);
  auto *bytes = reinterpret_cast<unsigned char *>(out);
  const size_t known = spec_size < sizeof(pkv_layer_spec) ? spec_size : sizeof(pkv_layer_spec);
  for (size_t l = 0; l < specs.size(); ++l) {
    std::memset(bytes + l * spec_size, 0, spec_size);
    std::memcpy(bytes + l * spec_size, &specs[l], known);
  }
}

}  // namespace pkv
