// Every extern "C" entry point: argument checks, the exception wall, status mapping, and the
// use of batch handles (their registry is batch_handles.*). (Over 400 lines by design: DESIGN.md
// §2 keeps every entry point in this one file; the store admin's logic is in
// tiers/store_admin.cpp.)
// Each call runs inside guard(): a pkv::Error becomes its status and message, std::bad_alloc
// PKV_ERR_OUT_OF_MEMORY, anything else PKV_ERR_INTERNAL. Nothing is thrown past this file.
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "agent/agent.h"
#include "batch_handles.h"
#include "block_hash.h"
#include "engine.h"
#include "hf_config.h"
#include "params.h"
#include "prefix_keys.h"
#include "profiler.h"
#include "status.h"
#include "tiers/store_admin.h"

using pkv::Engine;
using pkv::batch_handles;

namespace {

thread_local std::string tls_error;

Engine *E(pkv_engine *e) { return reinterpret_cast<Engine *>(e); }

// Runs f; on failure records the message for this thread and, when given, for the engine
// (whose mutex the caller holds).
template <class F> pkv_status run(std::string *engine_error, F &&f) noexcept {
  pkv_status status = PKV_ERR_INTERNAL;
  const char *message = "unknown exception";
  std::string text;  // what() dies with the exception: copy it inside the handler
  try {
    f();
    return PKV_OK;
  } catch (const pkv::Error &err) {
    status = err.status();
    try {
      text = err.what();
      message = text.c_str();
    } catch (...) {
      message = "(no memory for the message)";
    }
  } catch (const std::bad_alloc &) {
    status = PKV_ERR_OUT_OF_MEMORY;
    message = "out of host memory";
  } catch (const std::exception &err) {
    try {
      text = err.what();
      message = text.c_str();
    } catch (...) {
      message = "(no memory for the message)";
    }
  } catch (...) {
  }
  try {
    tls_error = message;
    if (engine_error) *engine_error = message;
  } catch (...) {  // no memory for the message: the status still says what happened
  }
  return status;
}

// A call without an engine.
template <class F> pkv_status guard(F &&f) noexcept { return run(nullptr, f); }

// A call on an engine: serialized by its mutex, its last error reset.
template <class F> pkv_status guard(pkv_engine *handle, F &&f) noexcept {
  if (!handle) return run(nullptr, [] { pkv::fail(PKV_ERR_INVALID_ARGUMENT, "engine is NULL"); });
  Engine *e = E(handle);
  std::lock_guard<std::mutex> lock(e->mutex());
  e->last_error().clear();
  e->tick();  // the clock of retention, once per call
  const pkv_status s = run(&e->last_error(), [&] { f(*e); });
  e->publish_events();
  return s;
}

pkv::Agent *A(pkv_agent *a) { return reinterpret_cast<pkv::Agent *>(a); }

// A call on an agent: serialized by its mutex (it takes its engine's lock itself).
template <class F> pkv_status guard_agent(pkv_agent *handle, F &&f) noexcept {
  if (!handle) return run(nullptr, [] { pkv::fail(PKV_ERR_INVALID_ARGUMENT, "agent is NULL"); });
  pkv::Agent *a = A(handle);
  std::lock_guard<std::mutex> lock(a->mutex());
  return run(nullptr, [&] { f(*a); });
}

// The refusal of a handle that names no open batch. Its engine, while it lives, gets the
// message too (pkv_engine_last_error), unless quiet (pkv_batch_abort ignores such handles).
pkv_status refuse_stale(const pkv_batch *handle, bool quiet) noexcept {
  Engine *owner = batch_handles().owner(handle);
  auto refusal = [&] {
    if (owner)
      pkv::fail(
          PKV_ERR_STATE,
          "batch is not open: it ended (pkv_batch_end, pkv_commit or pkv_batch_abort); a handle is valid "
          "from pkv_batch_begin or pkv_step until its batch ends: use the newer one");
    if (!pkv::BatchHandles::looks_like_handle(handle))
      pkv::fail(
          PKV_ERR_STATE,
          "batch is not open: this is no batch handle (pkv_batch_begin and pkv_step give them)");
    pkv::fail(
        PKV_ERR_STATE,
        "batch is not open: it ended (pkv_batch_end, pkv_commit or pkv_batch_abort) or its engine "
        "was destroyed");
  };
  if (!owner || quiet) return run(nullptr, refusal);
  std::lock_guard<std::mutex> lock(owner->mutex());
  return run(&owner->last_error(), refusal);
}

// A call on a live batch, under its engine's lock; f may end the batch (then its handle goes).
template <class F>
pkv_status guard_batch(const pkv_batch *handle, F &&f, bool quiet = false) noexcept {
  if (!handle) return run(nullptr, [] { pkv::fail(PKV_ERR_INVALID_ARGUMENT, "batch is NULL"); });
  Engine *e = batch_handles().live(handle);
  if (!e) return refuse_stale(handle, quiet);
  std::lock_guard<std::mutex> lock(e->mutex());
  // Handles go only under their engine's lock: alive now means alive until we return.
  if (batch_handles().live(handle) != e) {
    if (!quiet) e->last_error().clear();
    return run(quiet ? nullptr : &e->last_error(), [] {
      pkv::fail(PKV_ERR_STATE,
                "batch is not open: it ended (pkv_batch_end, pkv_commit or pkv_batch_abort) "
                "while this call waited for its engine");
    });
  }
  e->last_error().clear();
  e->tick();
  // A rank's handle (pkv_batch_rank) names the rank its compute calls run on, for this call.
  const uint32_t field = pkv::BatchHandles::rank_field(handle);
  e->set_call_rank(field ? field - 1 : Engine::kAnyRank);
  const pkv_status s = run(&e->last_error(), [&] {
    PKV_ASSERT(e->has_open_batch());
    f(*e);
    if (!e->has_open_batch()) batch_handles().remove(handle);
  });
  e->set_call_rank(Engine::kAnyRank);
  e->publish_events();
  return s;
}

// A call on a store's admin handle: serialized by its mutex.
template <class F> pkv_status guard_store(pkv_store *handle, F &&f) noexcept {
  return guard([&] {
    PKV_REQUIRE(handle != nullptr, "store is NULL");
    pkv::StoreAdmin &admin = *reinterpret_cast<pkv::StoreAdmin *>(handle);
    std::lock_guard<std::mutex> lock(admin.mutex());
    f(admin);
  });
}

void require_tokens(const int32_t *tokens, uint32_t n) {
  PKV_REQUIRE(n > 0, "num_tokens must be > 0");
  PKV_REQUIRE(tokens != nullptr, "tokens is NULL with num_tokens %u", n);
}

pkv::PrefixKeys keys_of(const pkv_seq_params *sp, uint32_t num_tokens) {
  if (!sp) return pkv::PrefixKeys();
  pkv_seq_params p = pkv::read_struct(sp, pkv::default_seq_params(), "seq params");
  return pkv::read_prefix_keys(p.cache_salt, p.cache_salt_len, p.extra_keys, p.num_extra_keys,
                               p.extra_key_size, p.lora_id, num_tokens);
}

// sp's cache_priority and cache_retention_ms, checked (defaults without sp or for a 0.7 size).
pkv::Retention retention_of(const pkv_seq_params *sp) {
  if (!sp) return pkv::Retention();
  const pkv_seq_params p = pkv::read_struct(sp, pkv::default_seq_params(), "seq params");
  return pkv::read_retention(p.cache_priority, p.cache_retention_ms, "seq params'");
}

// Copies a variable-size array into a caller buffer; a short buffer is refused with the length.
template <class T>
void copy_out(const std::vector<T> &src, T *out, uint32_t cap, uint32_t *out_len,
              const char *what) {
  PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
  PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
  const uint32_t n = static_cast<uint32_t>(src.size());
  if (out == nullptr && cap == 0) {  // asking the length
    *out_len = n;
    return;
  }
  if (cap < n) {
    *out_len = n;
    pkv::fail(PKV_ERR_INVALID_ARGUMENT, "%s has %u entries, the buffer holds %u", what, n, cap);
  }
  std::copy(src.begin(), src.end(), out);
  *out_len = n;
}

}  // namespace

extern "C" {

uint32_t pkv_version(void) {
  return PKV_VERSION_MAJOR * 10000 + PKV_VERSION_MINOR * 100 + PKV_VERSION_PATCH;
}
uint32_t pkv_abi_version(void) { return PKV_ABI_VERSION; }
const char *pkv_status_string(pkv_status s) { return pkv::status_string(s); }
const char *pkv_last_error(void) { return tls_error.c_str(); }

const char *pkv_engine_last_error(const pkv_engine *e) {
  if (!e) return tls_error.c_str();
  return reinterpret_cast<const Engine *>(e)->last_error_text();
}

pkv_status pkv_engine_params_init(pkv_engine_params *p, uint32_t size) {
  return guard(
      [&] { pkv::init_struct(p, size, pkv::default_engine_params(), "pkv_engine_params"); });
}

pkv_status pkv_seq_params_init(pkv_seq_params *p, uint32_t size) {
  return guard([&] { pkv::init_struct(p, size, pkv::default_seq_params(), "pkv_seq_params"); });
}

pkv_status pkv_engine_params_from_hf_config(pkv_engine_params *p, const char *json, size_t len) {
  return guard([&] {
    pkv_engine_params in = pkv::read_struct(p, pkv::default_engine_params(), "params");
    PKV_REQUIRE(json != nullptr, "json is NULL");
    const pkv_engine_params out = pkv::params_from_hf_config(in, json, len);
    // A caller whose struct ends before kv_layout (a header older than 0.3) cannot hold an MLA
    // shape: refused, rather than a latent read back as heads.
    PKV_REQUIRE(
        out.kv_layout == PKV_KV_LAYOUT_HEADS ||
            p->struct_size >= offsetof(pkv_engine_params, reserved2),
        "config.json describes multi-head latent attention: params needs the kv_layout fields of pkv.h 0.3 "
        "(struct_size %u)",
        p->struct_size);
    pkv::write_struct(p, out);
  });
}

pkv_status pkv_hf_config_digest(const char *json, size_t len, char *out, uint32_t cap) {
  return guard([&] {
    PKV_REQUIRE(json != nullptr, "json is NULL");
    PKV_REQUIRE(out != nullptr, "out is NULL");
    PKV_REQUIRE(cap >= PKV_HF_CONFIG_DIGEST_BYTES,
                "out holds %u bytes: PKV_HF_CONFIG_DIGEST_BYTES (%d) are needed", cap,
                int(PKV_HF_CONFIG_DIGEST_BYTES));
    pkv::layers_from_hf_config(pkv::default_engine_params(), json, len,
                               0);  // a config pkv reads (per layer too), or its error
    const std::string id = pkv::config_model_id(json, len);
    std::memcpy(out, id.c_str(), id.size() + 1);
  });
}

pkv_status pkv_hf_config_layer_windows(const char *json, size_t len, uint32_t *out, uint32_t cap,
                                       uint32_t *out_len) {
  return guard([&] {
    PKV_REQUIRE(json != nullptr, "json is NULL");
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    const pkv::LayerWindows w = pkv::layer_windows_from_hf_config(json, len);
    *out_len = w.num_layers();  // also when the buffer is short: the length it needs
    if (out == nullptr) return;
    if (cap < w.num_layers())
      pkv::fail(PKV_ERR_INVALID_ARGUMENT, "the model has %u layers, the buffer holds %u",
                w.num_layers(), cap);
    w.copy_to(out);
  });
}

pkv_status pkv_engine_params_from_hf_config_layers(pkv_engine_params *p, const char *json,
                                                   size_t len, pkv_layer_spec *specs,
                                                   uint32_t spec_size, uint32_t cap,
                                                   uint32_t *out_num_layers) {
  return guard([&] {
    const pkv_engine_params in = pkv::read_struct(p, pkv::default_engine_params(), "params");
    PKV_REQUIRE(json != nullptr, "json is NULL");
    PKV_REQUIRE(out_num_layers != nullptr, "out_num_layers is NULL");
    PKV_REQUIRE(specs != nullptr || cap == 0, "specs is NULL with cap %u", cap);
    PKV_REQUIRE(specs == nullptr || spec_size >= offsetof(pkv_layer_spec, reserved0) + 4,
                "spec_size %u is below pkv_layer_spec's 0.5 size (%zu)", spec_size,
                offsetof(pkv_layer_spec, reserved0) + 4);
    PKV_REQUIRE(p->struct_size >= offsetof(pkv_engine_params, reserved3) + 4,
                "params (struct_size %u) ends before layer_specs: pkv.h 0.5's struct is needed",
                p->struct_size);
    pkv::HfLayers m = pkv::layers_from_hf_config(in, json, len, specs != nullptr ? cap : 0);
    *out_num_layers = m.params.num_layers;  // also when the buffer is short: the length it needs
    if (specs == nullptr) return;
    if (cap < m.params.num_layers)
      pkv::fail(PKV_ERR_INVALID_ARGUMENT, "the model has %u layers, specs holds %u",
                m.params.num_layers, cap);
    // A spec of an older header ends before state_dtype: a recurrent layer would lose its state.
    // (0.6's spec, 88 bytes, ends where the indexer's fields begin: it holds every state field.)
    const size_t state_end = offsetof(pkv_layer_spec, index_head_dim);
    for (uint32_t l = 0; l < m.specs.size() && spec_size < state_end; ++l)
      if (m.specs[l].kind == PKV_LAYER_STATE)
        pkv::fail(PKV_ERR_INVALID_ARGUMENT,
                  "layer %u is recurrent (PKV_LAYER_STATE): spec_size %u ends before its state "
                  "fields; pkv.h 0.6's pkv_layer_spec (%zu bytes) or later is needed",
                  l, spec_size, state_end);
    if (m.needs_specs) {
      m.params.layer_specs = specs;
      m.params.layer_spec_size = spec_size;
      m.params.sliding_window = 0;
      m.params.layer_windows = nullptr;
    } else {
      m.params.layer_specs = nullptr;
      m.params.layer_spec_size = 0;
    }
    pkv::write_layer_specs(m.specs, specs, spec_size);
    pkv::write_struct(p, m.params);
  });
}

pkv_status pkv_kv_groups(const pkv_engine_params *p, uint32_t *layer_group, uint32_t *layer_slot,
                         uint32_t *group_window, uint32_t cap, uint32_t *out_num_groups,
                         uint32_t *out_group_layers) {
  return guard([&] {
    pkv_engine_params params = pkv::read_struct(p, pkv::default_engine_params(), "params");
    PKV_REQUIRE(out_num_groups != nullptr, "out_num_groups is NULL");
    PKV_REQUIRE(group_window != nullptr || cap == 0, "group_window is NULL with cap %u", cap);
    pkv::validate_engine_params(params);
    const pkv::KvGroups g = pkv::kv_groups_of(params);
    if (group_window) copy_out(g.group_window, group_window, cap, out_num_groups, "the groups");
    *out_num_groups = g.num_groups();
    for (uint32_t l = 0; l < params.num_layers; ++l) {
      if (layer_group) layer_group[l] = g.layer_group(l);
      if (layer_slot) layer_slot[l] = g.layer_slot(l);
    }
    if (out_group_layers) *out_group_layers = g.group_layers;
  });
}

pkv_status pkv_kv_group_info(const pkv_engine_params *p, uint32_t group,
                             struct pkv_kv_group_info *out) {
  return guard([&] {
    pkv_engine_params params = pkv::read_struct(p, pkv::default_engine_params(), "params");
    pkv::require_out_struct(out, "out");
    pkv::validate_engine_params(params);
    const pkv::KvGroups g = pkv::kv_groups_of(params);
    PKV_REQUIRE(group < g.num_groups(), "group %u: the params have %u KV groups (pkv_kv_groups)",
                group, g.num_groups());
    const pkv::PoolLayout unit = pkv::pool_layout(params, 0);
    const pkv::GroupBytes bytes = pkv::group_bytes(params, g, unit)[group];
    struct pkv_kv_group_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    info.attention = g.attention(group);
    info.window = g.group_window[group];
    info.num_layers = bytes.num_layers;
    info.bytes_per_token = bytes.layer_token_bytes * bytes.num_layers;
    info.padding_bytes_per_block = bytes.padding_bytes_per_block;
    pkv::write_struct(out, info);
  });
}

pkv_status pkv_profile(const pkv_engine_params *p, pkv_kv_budget *out) {
  return guard([&] {
    pkv_engine_params params = pkv::read_struct(p, pkv::default_engine_params(), "params");
    pkv::require_out_struct(out, "out");
    pkv_kv_budget b = pkv::profile(params);
    pkv::write_struct(out, b);  // every term, also when the budget is too small
    pkv::budget_error(params, b);
  });
}

pkv_status pkv_engine_create(const pkv_engine_params *p, pkv_engine **out) {
  return guard([&] {
    pkv_engine_params params = pkv::read_struct(p, pkv::default_engine_params(), "params");
    PKV_REQUIRE(out != nullptr, "out is NULL");
    *out = reinterpret_cast<pkv_engine *>(new Engine(params));
  });
}

void pkv_engine_destroy(pkv_engine *e) {
  if (!e) return;
  batch_handles().remove_engine(E(e));
  delete E(e);
}

pkv_status pkv_engine_params_get(pkv_engine *e, pkv_engine_params *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.params());
  });
}

pkv_status pkv_engine_budget(pkv_engine *e, pkv_kv_budget *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.budget());
  });
}

pkv_status pkv_engine_store_error(pkv_engine *e, char *out, uint32_t cap, uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    const std::string text = en.store_error();
    *out_len = static_cast<uint32_t>(text.size());
    if (cap == 0) return;
    const size_t n = std::min<size_t>(text.size(), cap - 1);
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  });
}

pkv_status pkv_engine_stats(pkv_engine *e, pkv_stats *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.stats());
  });
}

pkv_status pkv_engine_check(pkv_engine *e) {
  return guard(e, [&](Engine &en) { en.check(); });
}

pkv_status pkv_allocate(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                        const pkv_seq_params *sp, uint64_t *out_seq,
                        uint32_t *out_num_cached_tokens) {
  return guard(e, [&](Engine &en) {
    require_tokens(tokens, num_tokens);
    PKV_REQUIRE(out_seq != nullptr, "out_seq is NULL");
    const pkv::PrefixKeys keys = keys_of(sp, num_tokens);
    const pkv::Retention retention = retention_of(sp);
    en.require_timeless(retention, "seq params'");
    uint32_t cached = 0;
    *out_seq = en.allocate(tokens, num_tokens, keys, &cached);
    en.set_retention(*out_seq, retention);
    if (out_num_cached_tokens) *out_num_cached_tokens = cached;
  });
}

pkv_status pkv_allocate_query(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                              const pkv_seq_params *sp, uint32_t *out_num_blocks,
                              uint32_t *out_num_cached_tokens) {
  return guard(e, [&](Engine &en) {
    require_tokens(tokens, num_tokens);
    auto plan = en.query(tokens, num_tokens, keys_of(sp, num_tokens));
    if (out_num_blocks) *out_num_blocks = plan.num_free_needed;
    if (out_num_cached_tokens) *out_num_cached_tokens = plan.num_hits * en.params().block_size;
  });
}

pkv_status pkv_append(pkv_engine *e, uint64_t seq, const int32_t *tokens, uint32_t num_tokens) {
  return guard(e, [&](Engine &en) {
    require_tokens(tokens, num_tokens);
    en.append(seq, tokens, num_tokens);
  });
}

pkv_status pkv_fork(pkv_engine *e, uint64_t parent, uint64_t *out_child) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out_child != nullptr, "out_child is NULL");
    *out_child = en.fork(parent);
  });
}

pkv_status pkv_release(pkv_engine *e, uint64_t seq) {
  return guard(e, [&](Engine &en) { en.release(seq); });
}

pkv_status pkv_truncate(pkv_engine *e, uint64_t seq, uint32_t num_tokens) {
  return guard(e, [&](Engine &en) { en.truncate(seq, num_tokens); });
}

pkv_status pkv_preempt(pkv_engine *e, uint64_t seq) {
  return guard(e, [&](Engine &en) { en.preempt(seq); });
}

pkv_status pkv_resume(pkv_engine *e, uint64_t seq, uint32_t *out_num_cached_tokens) {
  return guard(e, [&](Engine &en) {
    uint32_t cached = en.resume(seq);
    if (out_num_cached_tokens) *out_num_cached_tokens = cached;
  });
}

pkv_status pkv_swap_out(pkv_engine *e, uint64_t seq) {
  return guard(e, [&](Engine &en) { en.swap_out(seq); });
}

pkv_status pkv_swap_in(pkv_engine *e, uint64_t seq) {
  return guard(e, [&](Engine &en) { en.swap_in(seq); });
}

pkv_status pkv_seq_info(pkv_engine *e, uint64_t seq, struct pkv_seq_info *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.seq_info(seq));
  });
}

pkv_status pkv_seq_block_table(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap,
                               uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    const pkv::Sequence &s = en.seq(seq);
    static const std::vector<int32_t> none;
    copy_out(s.tables.empty() ? none : s.tables[0].ids, out, cap, out_len, "the block table");
  });
}

pkv_status pkv_seq_group_block_table(pkv_engine *e, uint64_t seq, uint32_t group, int32_t *out,
                                     uint32_t cap, uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(group < en.groups().num_groups(), "group %u of %u", group,
                en.groups().num_groups());
    const pkv::Sequence &s = en.seq(seq);
    static const std::vector<int32_t> none;
    copy_out(s.tables.empty() ? none : s.tables[group].ids, out, cap, out_len, "the block table");
  });
}

pkv_status pkv_set_kv_scales(pkv_engine *e, uint32_t layer, const float *k_scales,
                             const float *v_scales) {
  return guard(e, [&](Engine &en) { en.set_kv_scales(layer, k_scales, v_scales); });
}

pkv_status pkv_seq_tokens(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap,
                          uint32_t *out_len) {
  return guard(
      e, [&](Engine &en) { copy_out(en.seq(seq).tokens, out, cap, out_len, "the sequence"); });
}

pkv_status pkv_batch_begin(pkv_engine *e, const uint64_t *seqs, const uint32_t *num_new_tokens,
                           uint32_t num_seqs, pkv_batch **out) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    en.begin_batch(seqs, num_new_tokens, num_seqs);
    try {
      *out = batch_handles().add(&en);
    } catch (...) {
      en.abort_batch();
      throw;
    }
  });
}

pkv_status pkv_batch_info(const pkv_batch *b, pkv_batch_view *out) {
  return guard_batch(b, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.open_batch().view());
  });
}

pkv_status pkv_batch_copy(pkv_batch *b) {
  return guard_batch(b, [&](Engine &en) { en.do_copies(); });
}

pkv_status pkv_batch_end(pkv_batch *b) {
  return guard_batch(b, [&](Engine &en) { en.end_batch(); });
}

pkv_status pkv_store_params_init(pkv_store_params *p, uint32_t size) {
  return guard([&] { pkv::init_struct(p, size, pkv::default_store_params(), "pkv_store_params"); });
}

pkv_status pkv_event_publisher_params_init(pkv_event_publisher_params *p, uint32_t size) {
  return guard([&] {
    pkv::init_struct(p, size, pkv::default_event_publisher_params(), "pkv_event_publisher_params");
  });
}

pkv_status pkv_event_publisher_info(pkv_engine *e, struct pkv_event_publisher_info *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    struct pkv_event_publisher_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    en.publisher_info(&info);
    pkv::write_struct(out, info);
  });
}

pkv_status pkv_request_params_init(pkv_request_params *p, uint32_t size) {
  return guard(
      [&] { pkv::init_struct(p, size, pkv::default_request_params(), "pkv_request_params"); });
}

pkv_status pkv_submit(pkv_engine *e, const int32_t *prompt, uint32_t num_tokens,
                      const pkv_request_params *rp, uint64_t *out_seq) {
  return guard(e, [&](Engine &en) {
    require_tokens(prompt, num_tokens);
    PKV_REQUIRE(out_seq != nullptr, "out_seq is NULL");
    const pkv_request_params defaults = pkv::default_request_params();
    pkv_request_params p = rp ? pkv::read_struct(rp, defaults, "request params") : defaults;
    *out_seq =
        en.submit(prompt, num_tokens, p,
                  pkv::read_prefix_keys(p.cache_salt, p.cache_salt_len, p.extra_keys,
                                        p.num_extra_keys, p.extra_key_size, p.lora_id, num_tokens));
  });
}

pkv_status pkv_step(pkv_engine *e, pkv_batch **out) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    if (!en.step()) {
      *out = nullptr;
      return;
    }
    try {
      *out = batch_handles().add(&en);
    } catch (...) {
      en.abort_batch();
      throw;
    }
  });
}

pkv_status pkv_commit(pkv_batch *b, const int32_t *sampled_tokens) {
  return guard_batch(b, [&](Engine &en) { en.commit(sampled_tokens); });
}

pkv_status pkv_drain_finished(pkv_engine *e, uint64_t *out, uint32_t cap, uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    *out_len = static_cast<uint32_t>(en.drain_finished(out, cap));
  });
}

pkv_status pkv_drain_kv_events_sized(pkv_engine *e, pkv_kv_event *out, uint32_t event_size,
                                     uint32_t cap, uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    PKV_REQUIRE(event_size >= pkv::kMinStructSize<pkv_kv_event> && event_size % 8 == 0,
                "event_size %u: at least %u (the 0.1 pkv_kv_event) and a multiple of 8 expected",
                event_size, pkv::kMinStructSize<pkv_kv_event>);
    *out_len = static_cast<uint32_t>(en.drain_events(out, event_size, cap));
  });
}

// The symbol of 0.1, for binaries built against it; pkv.h's macro of this name sends code built
// against newer headers to the sized call.
#undef pkv_drain_kv_events
pkv_status pkv_drain_kv_events(pkv_engine *e, pkv_kv_event *out, uint32_t cap, uint32_t *out_len) {
  return pkv_drain_kv_events_sized(e, out, pkv::kMinStructSize<pkv_kv_event>, cap, out_len);
}

pkv_status pkv_reset_prefix_cache(pkv_engine *e) {
  return guard(e, [&](Engine &en) { en.reset_prefix_cache(); });
}

pkv_status pkv_cache_set_priority(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                                  const pkv_seq_params *sp, int32_t priority, uint32_t retention_ms,
                                  uint32_t *out_num_blocks) {
  return guard(e, [&](Engine &en) {
    require_tokens(tokens, num_tokens);
    const pkv::Retention r = pkv::read_retention(priority, retention_ms, "pkv_cache_set_priority:");
    const uint32_t n = en.cache_set_priority(tokens, num_tokens, keys_of(sp, num_tokens), r);
    if (out_num_blocks) *out_num_blocks = n;
  });
}

pkv_status pkv_cache_pin(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                         const pkv_seq_params *sp, uint64_t *out_pin, uint32_t *out_num_tokens) {
  return guard(e, [&](Engine &en) {
    require_tokens(tokens, num_tokens);
    PKV_REQUIRE(out_pin != nullptr, "out_pin is NULL");
    uint32_t pinned = 0;
    *out_pin = en.cache_pin(tokens, num_tokens, keys_of(sp, num_tokens), &pinned);
    if (out_num_tokens) *out_num_tokens = pinned;
  });
}

pkv_status pkv_cache_unpin(pkv_engine *e, uint64_t pin) {
  return guard(e, [&](Engine &en) { en.cache_unpin(pin); });
}

void pkv_batch_abort(pkv_batch *b) {
  if (!b) return;
  guard_batch(
      b, [&](Engine &en) { en.abort_batch(); }, /*quiet=*/true);
}

pkv_status pkv_attention(pkv_batch *b, uint32_t layer, const void *q, const void *k, const void *v,
                         void *out) {
  return guard_batch(b, [&](Engine &en) { en.attention(layer, q, k, v, out); });
}

pkv_status pkv_batch_rank(pkv_batch *b, uint32_t rank, pkv_batch **out) {
  return guard_batch(b, [&](Engine &en) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    PKV_REQUIRE(pkv::BatchHandles::rank_field(b) == 0,
                "b is rank %u's handle already: pkv_batch_rank takes the batch's own handle",
                pkv::BatchHandles::rank_field(b) - 1);
    PKV_REQUIRE(rank < en.num_ranks(), "rank %u: this engine holds %u ranks' pools", rank,
                en.num_ranks());
    *out = en.num_ranks() == 1 ? b : pkv::BatchHandles::with_rank(b, rank);
  });
}

pkv_status pkv_batch_export_plan(pkv_batch *b, void *out, uint64_t cap, uint64_t *out_len) {
  return guard_batch(b, [&](Engine &en) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %llu", (unsigned long long)cap);
    const std::vector<uint8_t> &plan = en.export_plan();
    if (out) std::memcpy(out, plan.data(), std::min<uint64_t>(cap, plan.size()));
    *out_len = plan.size();
  });
}

pkv_status pkv_plan_import(pkv_engine *e, const void *plan, uint64_t len, pkv_batch **out) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(plan != nullptr, "plan is NULL");
    PKV_REQUIRE(out != nullptr, "out is NULL");
    en.import_plan(plan, len);
    try {
      *out = batch_handles().add(&en);
    } catch (...) {
      en.unimport_plan();  // refused after all: the same plan may come again
      throw;
    }
  });
}

pkv_status pkv_batch_plan_graph(pkv_batch *b, uint32_t bucket) {
  return guard_batch(b, [&](Engine &en) { en.plan_graph(bucket); });
}

pkv_status pkv_indexer_write(pkv_batch *b, uint32_t layer, const void *k, uint32_t flags) {
  return guard_batch(b, [&](Engine &en) { en.indexer_write(layer, k, flags); });
}

pkv_status pkv_indexer_topk(pkv_batch *b, uint32_t layer, const void *q, const float *weights,
                            uint32_t out_kind, int32_t *out) {
  return guard_batch(b, [&](Engine &en) { en.indexer_topk(layer, q, weights, out_kind, out); });
}

pkv_status pkv_sparse_mla_attention(pkv_batch *b, uint32_t layer, const void *q, const void *k,
                                    const int32_t *indices, void *out) {
  return guard_batch(b, [&](Engine &en) { en.sparse_attention(layer, q, k, indices, out); });
}

pkv_status pkv_pool_info(pkv_engine *e, struct pkv_pool_info *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.pool_info());
  });
}

pkv_status pkv_rank_pool_info(pkv_engine *e, uint32_t rank, struct pkv_pool_info *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.rank_pool_info(rank));
  });
}

pkv_status pkv_block_segments(pkv_engine *e, uint32_t rank, uint32_t tier, const int32_t *blocks,
                              uint32_t num_blocks, pkv_segment *out, uint32_t cap,
                              uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    copy_out(en.block_segments(rank, tier, blocks, num_blocks), out, cap, out_len, "the segments");
  });
}

pkv_status pkv_seq_segments(pkv_engine *e, uint32_t rank, uint64_t seq, uint32_t first_block,
                            uint32_t num_blocks, pkv_segment *out, uint32_t cap,
                            uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    copy_out(en.seq_segments(rank, seq, first_block, num_blocks), out, cap, out_len,
             "the segments");
  });
}

pkv_status pkv_layout_fingerprint(pkv_engine *e, uint32_t rank, uint8_t *out) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    const std::array<uint8_t, 32> fp = en.layout_fingerprint(rank);
    std::memcpy(out, fp.data(), fp.size());
  });
}

pkv_status pkv_hold(pkv_engine *e, uint64_t seq, uint32_t timeout_ms) {
  return guard(e, [&](Engine &en) { en.hold(seq, timeout_ms); });
}

pkv_status pkv_hold_end(pkv_engine *e, uint64_t seq, uint32_t outcome) {
  return guard(e, [&](Engine &en) { en.hold_end(seq, outcome); });
}

pkv_status pkv_drain_receiving(pkv_engine *e, uint64_t *out, uint32_t cap, uint32_t *out_len) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    *out_len = static_cast<uint32_t>(en.drain_receiving(out, cap));
  });
}

pkv_status pkv_receive_end(pkv_engine *e, uint64_t seq, uint32_t outcome) {
  return guard(e, [&](Engine &en) { en.receive_end(seq, outcome); });
}

pkv_status pkv_seq_state_segment(pkv_engine *e, uint32_t rank, uint64_t seq, pkv_segment *out) {
  return guard(e, [&](Engine &en) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    *out = en.state_segment(rank, seq);
  });
}

// ---------------------------------------------------------------- the transfer agent

pkv_status pkv_agent_params_init(pkv_agent_params *p, uint32_t size) {
  return guard([&] { pkv::init_struct(p, size, pkv::default_agent_params(), "pkv_agent_params"); });
}

pkv_status pkv_agent_create(pkv_engine *e, const pkv_agent_params *p, pkv_agent **out) {
  return guard([&] {
    PKV_REQUIRE(e != nullptr, "engine is NULL");
    PKV_REQUIRE(out != nullptr, "out is NULL");
    const pkv_agent_params defaults = pkv::default_agent_params();
    const pkv_agent_params params = p ? pkv::read_struct(p, defaults, "agent params") : defaults;
    *out = reinterpret_cast<pkv_agent *>(pkv::Agent::create(*E(e), params).release());
  });
}

void pkv_agent_destroy(pkv_agent *a) {
  if (!a) return;
  try {
    delete A(a);
  } catch (...) {  // the destructor ends what it can; nothing escapes into C
  }
}

pkv_status pkv_agent_address(pkv_agent *a, char *out, uint32_t cap) {
  return guard_agent(a, [&](pkv::Agent &ag) {
    PKV_REQUIRE(out != nullptr, "out is NULL");
    const std::string address = ag.address();
    PKV_REQUIRE(address.size() < cap, "cap %u: the address \"%s\" needs %zu bytes", cap,
                address.c_str(), address.size() + 1);
    std::memcpy(out, address.c_str(), address.size() + 1);
  });
}

pkv_status pkv_agent_connect(pkv_agent *a, const char *address, uint32_t *out_peer) {
  return guard_agent(a, [&](pkv::Agent &ag) {
    PKV_REQUIRE(out_peer != nullptr, "out_peer is NULL");
    *out_peer = ag.connect(address);
  });
}

pkv_status pkv_agent_pull(pkv_agent *a, uint32_t peer, uint64_t remote_seq, uint64_t local_seq) {
  return guard_agent(a, [&](pkv::Agent &ag) { ag.pull(peer, remote_seq, local_seq); });
}

pkv_status pkv_agent_progress(pkv_agent *a, uint32_t wait_ms, pkv_agent_completion *out,
                              uint32_t cap, uint32_t *out_len) {
  return guard_agent(a, [&](pkv::Agent &ag) {
    PKV_REQUIRE(out_len != nullptr, "out_len is NULL");
    PKV_REQUIRE(out != nullptr || cap == 0, "out is NULL with cap %u", cap);
    *out_len = static_cast<uint32_t>(ag.progress(wait_ms, out, cap));
  });
}

pkv_status pkv_agent_stats_get(pkv_agent *a, pkv_agent_stats *out) {
  return guard_agent(a, [&](pkv::Agent &ag) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, ag.stats());
  });
}

pkv_status pkv_layer_info(pkv_engine *e, uint32_t layer, struct pkv_layer_info *out) {
  return guard(e, [&](Engine &en) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, en.layer_info(layer));
  });
}

pkv_status pkv_set_attention_sinks(pkv_engine *e, uint32_t layer, const float *sinks,
                                   uint32_t num_sinks) {
  return guard(e, [&](Engine &en) { en.set_attention_sinks(layer, sinks, num_sinks); });
}

pkv_status pkv_engine_set_stream(pkv_engine *e, void *cuda_stream) {
  return guard(e, [&](Engine &en) { en.set_stream(cuda_stream); });
}

pkv_status pkv_engine_set_rank_stream(pkv_engine *e, uint32_t rank, void *cuda_stream) {
  return guard(e, [&](Engine &en) { en.set_rank_stream(rank, cuda_stream); });
}

pkv_status pkv_store_open(const pkv_store_params *p, pkv_store **out) {
  return guard([&] {
    PKV_REQUIRE(p != nullptr, "params is NULL");
    PKV_REQUIRE(out != nullptr, "out is NULL");
    *out = reinterpret_cast<pkv_store *>(new pkv::StoreAdmin(p));
  });
}

void pkv_store_close(pkv_store *s) { delete reinterpret_cast<pkv::StoreAdmin *>(s); }

pkv_status pkv_store_info(pkv_store *s, struct pkv_store_info *out) {
  return guard_store(s, [&](pkv::StoreAdmin &a) {
    pkv::require_out_struct(out, "out");
    pkv::write_struct(out, a.info());
  });
}

pkv_status pkv_store_list(pkv_store *s, uint64_t *cursor, uint32_t flags, pkv_store_entry *out,
                          uint32_t entry_size, uint32_t cap, uint32_t *out_len) {
  return guard_store(s, [&](pkv::StoreAdmin &a) {
    PKV_REQUIRE(cursor != nullptr && out_len != nullptr, "cursor and out_len must not be NULL");
    PKV_REQUIRE((flags & ~uint32_t(PKV_STORE_LIST_KEYS_ONLY)) == 0,
                "flags 0x%x: only PKV_STORE_LIST_* bits", flags);
    PKV_REQUIRE(entry_size >= sizeof(pkv_store_entry) && entry_size % 8 == 0,
                "entry_size %u: at least %zu (sizeof pkv_store_entry) and a multiple of 8 expected",
                entry_size, sizeof(pkv_store_entry));
    PKV_REQUIRE(cap >= 1 && out != nullptr, "out must hold at least one entry (cap %u)", cap);
    uint64_t next = *cursor;
    const std::vector<pkv_store_entry> page =
        a.list(&next, !(flags & PKV_STORE_LIST_KEYS_ONLY), cap);
    for (size_t i = 0; i < page.size(); ++i) {
      char *at = reinterpret_cast<char *>(out) + i * entry_size;
      std::memcpy(at, &page[i], sizeof page[i]);
      std::memset(at + sizeof page[i], 0, entry_size - sizeof page[i]);
    }
    *out_len = static_cast<uint32_t>(page.size());
    *cursor = next;
  });
}

pkv_status pkv_store_verify(pkv_store *s, uint32_t remove_bad, pkv_store_verify_result *out) {
  return guard_store(s, [&](pkv::StoreAdmin &a) {
    pkv::require_out_struct(out, "out");
    PKV_REQUIRE(remove_bad <= 1, "remove_bad must be 0 or 1, got %u", remove_bad);
    pkv_store_verify_result r;
    std::memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    try {
      a.verify(remove_bad != 0, &r);
    } catch (...) {
      pkv::write_struct(out, r);  // the counts up to the failure (pkv.h)
      throw;
    }
    pkv::write_struct(out, r);
  });
}

pkv_status pkv_store_clear(pkv_store *s, uint64_t *out_removed) {
  return guard_store(s, [&](pkv::StoreAdmin &a) {
    PKV_REQUIRE(out_removed != nullptr, "out_removed is NULL");
    uint64_t removed = 0;
    try {
      a.clear(&removed);
    } catch (...) {
      *out_removed = removed;
      throw;
    }
    *out_removed = removed;
  });
}

pkv_status pkv_block_hash_root(uint64_t seed, const void *salt, uint32_t salt_len,
                               uint64_t *out_hash) {
  return guard([&] {
    PKV_REQUIRE(out_hash != nullptr, "out_hash is NULL");
    PKV_REQUIRE(salt != nullptr || salt_len == 0, "salt is NULL with salt_len %u", salt_len);
    *out_hash = pkv::root_hash(seed, salt, salt_len);
  });
}

pkv_status pkv_block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens,
                          uint32_t num_tokens, uint64_t *out_hash) {
  return guard([&] {
    PKV_REQUIRE(out_hash != nullptr, "out_hash is NULL");
    require_tokens(tokens, num_tokens);
    *out_hash = pkv::block_hash(seed, parent_hash, tokens, num_tokens);
  });
}

pkv_status pkv_block_hash_root_lora(uint64_t seed, const void *salt, uint32_t salt_len,
                                    uint64_t lora_id, uint64_t *out_hash) {
  return guard([&] {
    PKV_REQUIRE(out_hash != nullptr, "out_hash is NULL");
    PKV_REQUIRE(salt != nullptr || salt_len == 0, "salt is NULL with salt_len %u", salt_len);
    *out_hash = pkv::root_hash(seed, salt, salt_len, lora_id);
  });
}

pkv_status pkv_block_hash_extra(uint64_t seed, uint64_t parent_hash, const int32_t *tokens,
                                uint32_t num_tokens, uint32_t first_token,
                                const pkv_extra_key *keys, uint32_t num_keys, uint32_t key_size,
                                uint64_t *out_hash) {
  return guard([&] {
    PKV_REQUIRE(out_hash != nullptr, "out_hash is NULL");
    require_tokens(tokens, num_tokens);
    PKV_REQUIRE(uint64_t(first_token) + num_tokens <= UINT32_MAX,
                "first_token %u + num_tokens %u exceed 2^32-1", first_token, num_tokens);
    pkv::PrefixKeys k;
    k.extra = pkv::read_extra_keys(keys, num_keys, key_size, UINT32_MAX);
    const std::string extra = k.block_extra(first_token, num_tokens);
    *out_hash = pkv::block_hash(seed, parent_hash, tokens, num_tokens, extra.data(), extra.size());
  });
}

}  // extern "C"
