// Sparse attention's indexer from a config.json (DESIGN.md §14): DeepSeek V3.2 (model_type
// deepseek_v32, transformers' DeepseekV32Config and DeepSeek's inference/model.py) and GLM-5
// (glm_moe_dsa, GlmMoeDsaConfig) keep beside each MLA layer's latent an indexer key of
// index_head_dim values per token, scored by index_n_heads query heads, of which each query
// keeps index_topk. Both models give every layer its own indexer; vLLM caches its keys in fp8
// with one fp32 scale per token (indexer_k_quant_and_cache), so that is the dtype read.
#include <string>

#include "hf_json.h"
#include "status.h"

namespace pkv::hf {
namespace {

constexpr const char *kIndexFields[] = {"index_head_dim", "index_n_heads", "index_topk"};

bool given(const json &cfg, const char *key) {
  const auto it = cfg.find(key);
  return it != cfg.end() && !it->is_null();
}

// A field's value within pkv_layer_spec's limit for it, else refused naming the field.
uint32_t read_index_field(const json &cfg, const char *key, uint32_t max, const char *what) {
  const uint32_t v = require_count(cfg, key);  // a positive integer, else named
  if (v > max)
    fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"%s\" %u exceeds %u (%s)", key, v, max, what);
  return v;
}

// GLM's IndexShare (GLM-5.2: GlmMoeDsaConfig's indexer_types, index_topk_freq and
// index_topk_pattern): a "shared" layer reuses an earlier layer's top-k and keeps no keys of its
// own. pkv's sparse calls select with the layer's own keys, and every layer of such a model would
// be profiled with keys it does not keep: refused by field until pkv reads those layers.
void refuse_index_share(const json &cfg) {
  constexpr const char *kWhy =
      "layers that reuse another layer's top-k (GLM's IndexShare) are not supported yet: every "
      "layer with an indexer keeps and scores its own keys";
  const auto types = cfg.find("indexer_types");
  if (types != cfg.end() && !types->is_null()) {
    if (!types->is_array())
      fail(PKV_ERR_INVALID_ARGUMENT, "config.json: \"indexer_types\" must be an array of strings");
    for (size_t l = 0; l < types->size(); ++l) {
      const json &t = (*types)[l];
      if (!t.is_string())
        fail(PKV_ERR_INVALID_ARGUMENT, "config.json: indexer_types[%zu] must be a string", l);
      if (t.get<std::string>() != "full")
        fail(PKV_ERR_UNSUPPORTED, "config.json: indexer_types[%zu] is \"%s\", not \"full\": %s", l,
             t.get<std::string>().substr(0, 64).c_str(), kWhy);
    }
  }
  uint32_t freq = 1;
  if (read_count(cfg, "index_topk_freq", &freq) && freq > 1)
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"index_topk_freq\" %u: %s", freq, kWhy);
  if (given(cfg, "index_topk_pattern"))
    fail(PKV_ERR_UNSUPPORTED, "config.json: \"index_topk_pattern\": %s", kWhy);
}

}  // namespace

Indexer read_indexer(const json &cfg, bool mla) {
  const char *present = nullptr, *missing = nullptr;
  for (const char *key : kIndexFields) {
    const char *&first = given(cfg, key) ? present : missing;
    if (!first) first = key;
  }
  if (!present) return Indexer();
  if (missing)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "config.json: \"%s\" says sparse attention (DeepSeek V3.2, GLM-5), but \"%s\" is "
         "missing: its indexer needs index_head_dim, index_n_heads and index_topk",
         present, missing);
  Indexer ix;
  ix.head_dim =
      read_index_field(cfg, "index_head_dim", PKV_MAX_HEAD_DIM, "the indexer key's width");
  ix.n_heads = read_index_field(cfg, "index_n_heads", 1u << 16, "the indexer's query heads");
  ix.topk = read_index_field(cfg, "index_topk", 1u << 20, "the keys each query keeps");
  if (!mla)
    fail(
        PKV_ERR_UNSUPPORTED,
        "config.json: \"index_topk\" without multi-head latent attention (kv_lora_rank): pkv keeps "
        "a sparse-attention indexer only beside an MLA latent (DeepSeek V3.2, GLM-5)");
  refuse_index_share(cfg);
  return ix;
}

void set_indexer(const Indexer &ix, pkv_layer_spec *s) {
  if (!ix.head_dim || s->kind != PKV_LAYER_MLA) return;
  s->index_head_dim = ix.head_dim;
  s->index_dtype = PKV_DTYPE_FP8_E4M3;
  s->index_n_heads = ix.n_heads;
  s->index_topk = ix.topk;
}

}  // namespace pkv::hf
