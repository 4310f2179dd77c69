#include "layer_specs.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "params.h"
#include "profiler.h"
#include "status.h"

namespace pkv {

uint64_t LayerSpec::token_bytes(uint32_t dtype_bytes) const {
  if (!cached()) return 0;
  const uint64_t v = v_is_k() ? 0 : uint64_t(kv_heads) * v_dim * dtype_bytes;
  return k_token_bytes(dtype_bytes) + v + index_token_bytes();
}

namespace {

uint32_t per_rank(uint32_t kv_heads, uint32_t tp_size) { return std::max(1u, kv_heads / tp_size); }

float scale_of(float scale, float flat_scale, uint32_t head_dim) {
  if (scale > 0) return scale;
  return flat_scale > 0 ? flat_scale : 1.0f / std::sqrt(float(head_dim));
}

// The window a flat layer has: its layer_windows entry, else sliding_window.
uint32_t flat_window(const pkv_engine_params &p, uint32_t l) {
  return p.layer_windows ? p.layer_windows[l] : p.sliding_window;
}

}  // namespace

LayerSpec flat_layer_spec(const pkv_engine_params &p, uint32_t l) {
  LayerSpec s;
  const bool mla = p.kv_layout == PKV_KV_LAYOUT_MLA;
  s.kind = mla ? PKV_LAYER_MLA : PKV_LAYER_ATTENTION;
  s.window = flat_window(p, l);
  s.attention = s.window ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
  s.kv_heads = kv_heads_per_rank(p);
  s.head_dim = p.head_dim;
  s.v_dim = mla ? p.kv_lora_rank : p.head_dim;
  s.source = l;
  s.scale = attention_scale(p);
  return s;
}

std::vector<pkv_layer_spec> copy_layer_specs(const pkv_engine_params &p) {
  std::vector<pkv_layer_spec> out;
  if (!p.layer_specs) return out;
  PKV_REQUIRE(p.layer_spec_size >= kMinLayerSpecSize && p.layer_spec_size % 4 == 0,
              "layer_spec_size %u: sizeof(pkv_layer_spec) expected (at least %u, a multiple of 4)",
              p.layer_spec_size, kMinLayerSpecSize);
  out.resize(p.num_layers);
  const char *in = reinterpret_cast<const char *>(p.layer_specs);
  const size_t n = std::min<size_t>(p.layer_spec_size, sizeof(pkv_layer_spec));
  for (uint32_t l = 0; l < p.num_layers; ++l)
    std::memcpy(&out[l], in + size_t(l) * p.layer_spec_size, n);
  return out;
}

namespace {

// INVALID_ARGUMENT "layer_specs[l].field: <message>" unless ok.
__attribute__((format(printf, 4, 5))) void spec_require(bool ok, uint32_t l, const char *field,
                                                        const char *fmt, ...) {
  if (ok) return;
  char text[400];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  fail(PKV_ERR_INVALID_ARGUMENT, "layer_specs[%u].%s: %s", l, field, text);
}

// A part's dense bytes: dims of 1 .. 2^24 ending at the first 0, at most 2^40 bytes (so a slot
// of up to 2^22 such parts stays below 2^63: resolve_layer_specs checks the sum).
uint64_t state_part_bytes(const pkv_layer_spec &in, uint32_t l, uint32_t part) {
  const uint32_t *dims = in.state_shape + part * PKV_MAX_STATE_DIMS;
  char field[32];
  std::snprintf(field, sizeof field, "state_dtype[%u]", part);
  const uint32_t dtype = in.state_dtype[part];
  spec_require(dtype == PKV_DTYPE_F32 || dtype == PKV_DTYPE_F16 || dtype == PKV_DTYPE_BF16, l,
               field, "%u is not PKV_DTYPE_F32 (0), F16 (1) or BF16 (2)", dtype);
  uint64_t bytes = dtype_bytes(int32_t(dtype));
  bool ended = false;
  for (uint32_t d = 0; d < PKV_MAX_STATE_DIMS; ++d) {
    std::snprintf(field, sizeof field, "state_shape[%u]", part * PKV_MAX_STATE_DIMS + d);
    if (ended) {
      spec_require(dims[d] == 0, l, field,
                   "%u after a 0: part %u's shape ends at its first 0 dimension (give the "
                   "dimensions outermost first, with no 0 between them)",
                   dims[d], part);
      continue;
    }
    if (dims[d] == 0) {
      ended = true;
      continue;
    }
    spec_require(dims[d] <= (1u << 24), l, field, "%u: a dimension must be in 1 .. 2^24", dims[d]);
    bytes *= dims[d];
    spec_require(bytes <= (uint64_t(1) << 40), l, field,
                 "part %u of a STATE layer is past 2^40 bytes (%llu so far): at most 2^40", part,
                 (unsigned long long)bytes);
  }
  return bytes;
}

// Layers other than MLA: the indexer's fields 0.
void require_no_indexer(const pkv_layer_spec &in, uint32_t l, const char *what) {
  const char *field = in.index_head_dim  ? "index_head_dim"
                      : in.index_dtype   ? "index_dtype"
                      : in.index_n_heads ? "index_n_heads"
                      : in.index_topk    ? "index_topk"
                                         : nullptr;
  spec_require(!field, l, field ? field : "",
               "must be 0 in %s: only an MLA layer has a sparse-attention indexer", what);
}

// An MLA layer's indexer: none (every field 0), or a key width, its dtype, heads and top-k.
void resolve_indexer(const pkv_layer_spec &in, uint32_t l, LayerSpec &s) {
  if (!in.index_head_dim) {
    const char *field = in.index_dtype     ? "index_dtype"
                        : in.index_n_heads ? "index_n_heads"
                        : in.index_topk    ? "index_topk"
                                           : nullptr;
    spec_require(!field, l, field ? field : "", "must be 0 without an indexer (index_head_dim 0)");
    return;
  }
  spec_require(in.index_head_dim <= PKV_MAX_HEAD_DIM, l, "index_head_dim",
               "%u: must be in 1 .. %d (0 = no indexer)", in.index_head_dim, PKV_MAX_HEAD_DIM);
  spec_require(in.index_dtype == 0 || in.index_dtype == PKV_DTYPE_FP8_E4M3 ||
                   in.index_dtype == PKV_DTYPE_BF16,
               l, "index_dtype",
               "%u is not PKV_DTYPE_FP8_E4M3 (3, or 0: one fp32 scale per token) or BF16 (2)",
               in.index_dtype);
  spec_require(in.index_n_heads >= 1 && in.index_n_heads <= (1u << 16), l, "index_n_heads",
               "%u: the indexer's query heads must be in 1 .. 2^16", in.index_n_heads);
  spec_require(in.index_topk >= 1 && in.index_topk <= (1u << 20), l, "index_topk",
               "%u: the keys each query keeps must be in 1 .. 2^20", in.index_topk);
  s.index_dim = in.index_head_dim;
  s.index_dtype = in.index_dtype == PKV_DTYPE_BF16 ? PKV_DTYPE_BF16 : PKV_DTYPE_FP8_E4M3;
  s.index_heads = in.index_n_heads;
  s.index_topk = in.index_topk;
}

// A STATE layer: its parts, and every attention field 0 (it has no K, V or softmax).
void resolve_state(const pkv_layer_spec &in, uint32_t l, LayerSpec &s) {
  const char *field = in.attention       ? "attention"
                      : in.window        ? "window"
                      : in.num_kv_heads  ? "num_kv_heads"
                      : in.head_dim      ? "head_dim"
                      : in.v_head_dim    ? "v_head_dim"
                      : in.k_eq_v        ? "k_eq_v"
                      : in.source_layer  ? "source_layer"
                      : in.sinks         ? "sinks"
                      : in.logit_softcap ? "logit_softcap"
                      : in.softmax_scale ? "softmax_scale"
                      : in.reserved0     ? "reserved0"
                                         : nullptr;
  spec_require(!field, l, field ? field : "",
               "must be 0 in a STATE layer (no K, V or softmax: its state is state_shape's parts)");
  require_no_indexer(in, l, "a STATE layer");
  s = LayerSpec();
  s.kind = PKV_LAYER_STATE;
  s.source = l;
  bool any = false;
  for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS; ++i) {
    if (in.state_shape[i * PKV_MAX_STATE_DIMS] == 0) {
      char name[32];
      std::snprintf(name, sizeof name, "state_dtype[%u]", i);
      spec_require(in.state_dtype[i] == 0, l, name, "%u for an absent part (state_shape[%u] 0)",
                   in.state_dtype[i], i * PKV_MAX_STATE_DIMS);
      for (uint32_t d = 1; d < PKV_MAX_STATE_DIMS; ++d) {
        std::snprintf(name, sizeof name, "state_shape[%u]", i * PKV_MAX_STATE_DIMS + d);
        spec_require(in.state_shape[i * PKV_MAX_STATE_DIMS + d] == 0, l, name,
                     "%u: part %u is absent (its first dimension is 0), so every dimension is 0",
                     in.state_shape[i * PKV_MAX_STATE_DIMS + d], i);
      }
      continue;
    }
    any = true;
    s.state[i].dtype = in.state_dtype[i];
    std::memcpy(s.state[i].shape, in.state_shape + i * PKV_MAX_STATE_DIMS, sizeof s.state[i].shape);
    s.state[i].bytes = state_part_bytes(in, l, i);
  }
  spec_require(any, l, "state_shape",
               "a STATE layer needs one part at least (state_shape[0] or state_shape[%d] > 0; "
               "layer_spec_size %u must include the 0.6 state fields: 88)",
               PKV_MAX_STATE_DIMS, uint32_t(sizeof(pkv_layer_spec)));
}

// Any other kind: the state fields 0.
void require_no_state(const pkv_layer_spec &in, uint32_t l) {
  for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "state_dtype[%u]", i);
    spec_require(in.state_dtype[i] == 0, l, name,
                 "%u: only a STATE layer (kind 3) has a state: must be 0", in.state_dtype[i]);
  }
  for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS * PKV_MAX_STATE_DIMS; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "state_shape[%u]", i);
    spec_require(in.state_shape[i] == 0, l, name,
                 "%u: only a STATE layer (kind 3) has a state: must be 0", in.state_shape[i]);
  }
}

// One spec's own fields (not its relation to other layers), resolved.
LayerSpec resolve_one(const pkv_engine_params &p, const pkv_layer_spec &in, uint32_t l) {
  spec_require(in.kind <= PKV_LAYER_STATE, l, "kind",
               "%u is not PKV_LAYER_ATTENTION (0), MLA (1), SHARED (2) or STATE (3)", in.kind);
  if (in.kind == PKV_LAYER_STATE) {
    LayerSpec s;
    resolve_state(in, l, s);
    return s;
  }
  require_no_state(in, l);
  spec_require(in.attention <= PKV_ATTENTION_CHUNKED, l, "attention",
               "%u is not PKV_ATTENTION_FULL (0), SLIDING (1) or CHUNKED (2)", in.attention);
  if (in.attention == PKV_ATTENTION_FULL)
    spec_require(in.window == 0, l, "window", "%u with attention FULL: must be 0", in.window);
  else
    spec_require(in.window >= 1 && in.window <= INT32_MAX, l, "window",
                 "%u: a %s window must be in 1 .. 2^31-1", in.window,
                 in.attention == PKV_ATTENTION_SLIDING ? "SLIDING" : "CHUNKED");
  const uint32_t kv = in.num_kv_heads ? in.num_kv_heads : p.num_kv_heads;
  spec_require(p.num_q_heads % kv == 0, l, "num_kv_heads", "%u must divide num_q_heads (%u)", kv,
               p.num_q_heads);
  spec_require(kv % p.tp_size == 0 || p.tp_size % kv == 0, l, "num_kv_heads",
               "%u and tp_size %u: one must divide the other", kv, p.tp_size);
  LayerSpec s;
  s.kind = in.kind;
  s.attention = in.attention;
  s.window = in.window;
  s.kv_heads = per_rank(kv, p.tp_size);
  s.head_dim = in.head_dim ? in.head_dim : p.head_dim;
  spec_require(s.head_dim <= PKV_MAX_HEAD_DIM, l, "head_dim", "%u: must be in 1 .. %d", s.head_dim,
               PKV_MAX_HEAD_DIM);
  spec_require(in.v_head_dim <= PKV_MAX_HEAD_DIM, l, "v_head_dim", "%u: must be in 0 .. %d",
               in.v_head_dim, PKV_MAX_HEAD_DIM);
  s.v_dim = in.v_head_dim ? in.v_head_dim : s.head_dim;
  spec_require(in.k_eq_v <= 1, l, "k_eq_v", "must be 0 or 1, got %u", in.k_eq_v);
  spec_require(!in.k_eq_v || s.v_dim == s.head_dim, l, "v_head_dim",
               "%u with k_eq_v: V is K, so it must be 0 or head_dim (%u)", s.v_dim, s.head_dim);
  s.k_eq_v = in.k_eq_v;
  spec_require(in.sinks <= 1, l, "sinks", "must be 0 or 1, got %u", in.sinks);
  s.sinks = in.sinks;
  spec_require(std::isfinite(in.logit_softcap) && in.logit_softcap >= 0, l, "logit_softcap",
               "must be finite and >= 0 (0 = none), got %g", double(in.logit_softcap));
  spec_require(std::isfinite(in.softmax_scale) && in.softmax_scale >= 0, l, "softmax_scale",
               "must be finite and >= 0 (0 = the engine's), got %g", double(in.softmax_scale));
  s.softcap = in.logit_softcap;
  spec_require(in.reserved0 == 0, l, "reserved0", "must be 0, got %u", in.reserved0);
  s.source = l;
  if (in.kind == PKV_LAYER_SHARED) {
    spec_require(in.source_layer < l, l, "source_layer",
                 "%u: a SHARED layer reads an earlier layer's cache (below %u)", in.source_layer,
                 l);
    s.source = in.source_layer;
  } else {
    spec_require(in.source_layer == 0, l, "source_layer",
                 "%u: only a SHARED layer has a source (0 otherwise)", in.source_layer);
  }
  if (in.kind == PKV_LAYER_MLA) {
    spec_require(p.kv_layout == PKV_KV_LAYOUT_MLA, l, "kind",
                 "MLA needs kv_layout PKV_KV_LAYOUT_MLA (and kv_lora_rank, qk_rope_head_dim)");
    spec_require(kv == 1, l, "num_kv_heads", "%u: an MLA layer caches one latent (0 or 1)", kv);
    spec_require(s.head_dim == p.head_dim, l, "head_dim",
                 "%u: an MLA layer's latent is head_dim (%u) wide: 0 or that", s.head_dim,
                 p.head_dim);
    spec_require(!in.v_head_dim || in.v_head_dim == p.kv_lora_rank, l, "v_head_dim",
                 "%u: an MLA layer's V is the latent's first kv_lora_rank (%u): 0 or that",
                 in.v_head_dim, p.kv_lora_rank);
    spec_require(!in.k_eq_v, l, "k_eq_v", "an MLA layer has no V of its own: must be 0");
    s.v_dim = p.kv_lora_rank;
    resolve_indexer(in, l, s);
  } else {
    require_no_indexer(in, l,
                       in.kind == PKV_LAYER_SHARED ? "a SHARED layer" : "an ATTENTION layer");
  }
  s.scale = scale_of(in.softmax_scale, p.softmax_scale, s.head_dim);
  return s;
}

// A SHARED layer against its source (both resolved).
void check_shared(const std::vector<LayerSpec> &specs, uint32_t l) {
  const LayerSpec &s = specs[l], &src = specs[s.source];
  spec_require(src.kind == PKV_LAYER_ATTENTION, l, "source_layer",
               "%u is not an ATTENTION layer (kind %u): a SHARED layer reads one", s.source,
               src.kind);
  const char *field = s.attention != src.attention ? "attention"
                      : s.window != src.window     ? "window"
                      : s.kv_heads != src.kv_heads ? "num_kv_heads"
                      : s.head_dim != src.head_dim ? "head_dim"
                      : s.v_dim != src.v_dim       ? "v_head_dim"
                      : s.k_eq_v != src.k_eq_v     ? "k_eq_v"
                                                   : nullptr;
  spec_require(!field, l, field ? field : "",
               "differs from its source layer %u's: a SHARED layer reads that cache as it is",
               s.source);
}

// What STATE layers need of the model: a KV layer beside them (the pool and prefix tree are
// built on KV groups), a slot below 2^63 bytes. Every tier carries the state (DESIGN.md §13).
void check_state_model(const std::vector<LayerSpec> &specs, bool any_kv) {
  if (!any_kv)
    fail(PKV_ERR_UNSUPPORTED,
         "layer_specs: every layer is STATE; a model with no attention (or MLA) layer is not "
         "supported yet: pkv's pool is built on KV blocks");
  // Each aligned part is at most 2^40 + 256 bytes: a sum stopped at 2^62 cannot overflow.
  uint64_t slot = 0;
  for (size_t l = 0; l < specs.size() && slot < (uint64_t(1) << 62); ++l)
    for (const StatePart &part : specs[l].state)
      slot += (part.bytes + kStatePartAlign - 1) / kStatePartAlign * kStatePartAlign;
  PKV_REQUIRE(slot < (uint64_t(1) << 62),
              "layer_specs: one sequence's state (every STATE layer's parts, each 256-byte "
              "aligned) is %llu bytes, past 2^62: fewer or smaller state parts",
              (unsigned long long)slot);
}

// Whether these layers are the store's keys of 0.7 (store_layout): one KV group of full
// attention of the flat fields' layers, STATE layers beside them, MLA layers that all have the
// same indexer (the fingerprint names it).
bool flat_store_layout(const pkv_engine_params &p, const std::vector<LayerSpec> &specs) {
  const LayerSpec flat = flat_layer_spec(p, 0);
  const auto first =
      std::find_if(specs.begin(), specs.end(), [](const LayerSpec &s) { return s.cached(); });
  return std::all_of(specs.begin(), specs.end(), [&](const LayerSpec &s) {
    if (s.kind == PKV_LAYER_STATE) return true;
    return s.kind == flat.kind && s.attention == PKV_ATTENTION_FULL && !s.k_eq_v &&
           s.kv_heads == flat.kv_heads && s.head_dim == flat.head_dim && s.v_dim == flat.v_dim &&
           s.index_dim == first->index_dim && s.index_dtype == first->index_dtype;
  });
}

}  // namespace

std::vector<LayerSpec> resolve_layer_specs(const pkv_engine_params &p) {
  const std::vector<pkv_layer_spec> raw = copy_layer_specs(p);
  std::vector<LayerSpec> specs;
  if (raw.empty()) return specs;
  PKV_REQUIRE(p.sliding_window == 0 && p.layer_windows == nullptr,
              "layer_specs with sliding_window %u or layer_windows set: give each layer's window "
              "in its spec (attention, window) and set those to 0 and NULL",
              p.sliding_window);
  specs.reserve(raw.size());
  for (uint32_t l = 0; l < p.num_layers; ++l) specs.push_back(resolve_one(p, raw[l], l));
  bool windowed = false;
  bool any_state = false, any_kv = false;
  for (uint32_t l = 0; l < p.num_layers; ++l) {
    if (specs[l].kind == PKV_LAYER_SHARED) check_shared(specs, l);
    windowed |= specs[l].attention != PKV_ATTENTION_FULL;
    any_state |= specs[l].kind == PKV_LAYER_STATE;
    any_kv |= specs[l].cached();
    // STATE layers mix with any KV kind (Kimi Linear: KDA with MLA); MLA with no other KV kind.
    if (p.kv_layout == PKV_KV_LAYOUT_MLA)
      spec_require(specs[l].kind == PKV_LAYER_MLA || specs[l].kind == PKV_LAYER_STATE, l, "kind",
                   "%u under kv_layout MLA: every layer of an MLA cache is MLA (or STATE)",
                   specs[l].kind);
  }
  if (any_state) check_state_model(specs, any_kv);
  if (windowed && p.kv_layout == PKV_KV_LAYOUT_MLA)
    fail(PKV_ERR_UNSUPPORTED,
         "layer_specs: MLA layers with SLIDING or CHUNKED attention are not supported (no "
         "latent-attention model has them): give every layer attention FULL");
  return specs;
}

std::string store_layout(const pkv_engine_params &p, const std::vector<LayerSpec> &specs,
                         const KvGroups &groups) {
  if (specs.empty() && !groups.any_windowed()) return "";
  if (!specs.empty() && flat_store_layout(p, specs)) return "";
  if (specs.empty() && !p.layer_windows)  // one window everywhere: one group, no per-layer list
    return "sliding " + std::to_string(p.sliding_window);
  std::string out;
  for (uint32_t l = 0; l < p.num_layers; ++l) {
    const LayerSpec s = specs.empty() ? flat_layer_spec(p, l) : specs[l];
    const uint32_t window = specs.empty() ? groups.layer_window(l) : s.window;
    for (uint64_t v :
         {uint64_t(s.kind), uint64_t(s.attention), uint64_t(window), uint64_t(s.kv_heads),
          uint64_t(s.head_dim), uint64_t(s.v_dim), uint64_t(s.k_eq_v), uint64_t(s.source),
          uint64_t(s.index_dim), uint64_t(s.index_dtype), uint64_t(groups.layer_group(l)),
          uint64_t(groups.layer_slot(l))})
      out += std::to_string(v) + ",";
    out.back() = ';';
  }
  return out;
}

KvGroups kv_groups_of(const pkv_engine_params &p) {
  if (p.block_layout == PKV_BLOCK_LAYOUT_PAGE) {
    // Pages of every group's layers, whatever their bytes: the groups of the layers' specs (the
    // flat fields' when there are none), as layers of unequal bytes are kept.
    PKV_REQUIRE(p.pp_size <= 1,
                "block_layout PAGE with pp_size %u: pipeline stages take the LAYERS layout",
                p.pp_size);
    PKV_REQUIRE(p.num_layers <= (1u << 20),
                "block_layout PAGE with %u layers: at most 2^20 (each layer's place is kept)",
                p.num_layers);
    std::vector<LayerSpec> specs = resolve_layer_specs(p);
    if (specs.empty())
      for (uint32_t l = 0; l < p.num_layers; ++l) specs.push_back(flat_layer_spec(p, l));
    KvGroups g = make_kv_groups(specs, dtype_bytes(kv_dtype_of(p)));
    g.paged = true;
    return g;
  }
  if (!p.layer_specs) {
    const KvGroups g = make_kv_groups(p.num_layers, p.sliding_window, p.layer_windows);
    if (p.pp_size <= 1) return g;
    return stage_kv_groups(g, stage_layers(p.num_layers, p.pp_size, p.pp_rank));
  }
  const std::vector<LayerSpec> specs = resolve_layer_specs(p);
  const KvGroups g = make_kv_groups(specs, dtype_bytes(kv_dtype_of(p)));
  if (p.pp_size <= 1) return g;
  for (uint32_t l = 0; l < p.num_layers; ++l)
    if (specs[l].kind == PKV_LAYER_STATE)
      fail(PKV_ERR_UNSUPPORTED,
           "pp_size %u: layer %u is a STATE layer, whose state slot holds every STATE layer's "
           "parts; pipeline stages take attention layers only, for now",
           p.pp_size, l);
  for (uint32_t s = 0; s < p.pp_size; ++s) {
    const StageLayers st = stage_layers(p.num_layers, p.pp_size, s);
    for (uint32_t l = st.first; l < st.end; ++l)
      if (specs[l].kind == PKV_LAYER_SHARED &&
          (specs[l].source < st.first || specs[l].source >= st.end))
        fail(PKV_ERR_UNSUPPORTED,
             "pp_size %u: layer %u (stage %u: layers %u .. %u) is SHARED and reads layer %u's "
             "cache, which another stage holds",
             p.pp_size, l, s, st.first, st.end - 1, specs[l].source);
  }
  // A pipeline stage's pool holds its layers only (DESIGN.md §10).
  if (g.paged)
    fail(PKV_ERR_UNSUPPORTED,
         "pp_size %u: layers of unequal bytes share a paged pool whose pages every stage would "
         "split differently; pipeline stages take layers of equal bytes, for now",
         p.pp_size);
  return stage_kv_groups(g, stage_layers(p.num_layers, p.pp_size, p.pp_rank));
}

bool uniform_storage(const std::vector<LayerSpec> &specs) {
  const LayerSpec *first = nullptr;
  for (const LayerSpec &s : specs) {
    if (!s.cached()) continue;
    if (s.k_eq_v || (s.kind != PKV_LAYER_MLA && s.v_dim != s.head_dim)) return false;
    if (!first) first = &s;
    // An indexer's keys sit after the block's latents: pages (layer_place).
    if (s.indexed()) return false;
    if (s.kind != first->kind || s.kv_heads != first->kv_heads || s.head_dim != first->head_dim ||
        s.v_dim != first->v_dim)
      return false;
  }
  return true;
}

}  // namespace pkv
