#include "params.h"

#include <algorithm>
#include <cmath>

#include "layer_specs.h"

namespace pkv {

pkv_engine_params default_engine_params() {
  pkv_engine_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.dtype = PKV_DTYPE_BF16;
  p.tp_size = 1;
  p.pp_size = 1;
  p.block_size = 16;
  p.enable_prefix_caching = 1;
  p.device = PKV_DEVICE_AUTO;
  p.memory_utilization = 0.9;
  p.max_num_seqs = 256;
  p.max_num_batched_tokens = 2048;
  p.host_offload = 1;
  p.state_checkpoint_policy = PKV_STATE_CHECKPOINT_PROMPT_END;
  return p;
}

pkv_store_params default_store_params() {
  pkv_store_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.kind = PKV_STORE_NONE;
  p.write_mode = PKV_STORE_WRITE_THROUGH;
  p.lookup_timeout_ms = 200;
  p.write_queue_blocks = 256;
  p.port = 6379;
  p.connect_timeout_ms = 1000;
  p.io_timeout_ms = 1000;
  return p;
}

StoreConfig::StoreConfig(const pkv_store_params *in)
    : p_(read_struct(in, default_store_params(), "store")) {
  std::memset(&callbacks_, 0, sizeof callbacks_);
  PKV_REQUIRE(p_.kind <= PKV_STORE_CALLBACK, "store->kind %u is not a PKV_STORE_* kind", p_.kind);
  PKV_REQUIRE(p_.write_mode <= PKV_STORE_READ_ONLY,
              "store->write_mode %u is not a PKV_STORE_WRITE_* value", p_.write_mode);
  PKV_REQUIRE(p_.lookup_timeout_ms >= 1, "store->lookup_timeout_ms must be >= 1");
  PKV_REQUIRE(p_.write_queue_blocks >= 1 && p_.write_queue_blocks <= (1u << 20),
              "store->write_queue_blocks must be in 1 .. 2^20, got %u", p_.write_queue_blocks);
  PKV_REQUIRE(p_.reserved0 == 0 && p_.reserved1 == 0, "store->reserved0 and reserved1 must be 0");
  auto own = [](const char *s, std::string &keep, const char *fallback) -> const char * {
    if (!s && !fallback) return nullptr;
    keep = s ? s : fallback;
    return keep.c_str();
  };
  switch (p_.kind) {
    case PKV_STORE_FILE:
      PKV_REQUIRE(p_.path && p_.path[0],
                  "store->path (the directory) is required for a FILE store");
      break;
    case PKV_STORE_REDIS:
      PKV_REQUIRE(p_.port >= 1 && p_.port <= 65535, "store->port %u is not in 1 .. 65535", p_.port);
      PKV_REQUIRE(p_.connect_timeout_ms >= 1 && p_.io_timeout_ms >= 1,
                  "store->connect_timeout_ms and io_timeout_ms must be >= 1");
      PKV_REQUIRE(!p_.username || p_.password, "store->username needs a password");
      break;
    case PKV_STORE_CALLBACK:
      PKV_REQUIRE(p_.callbacks, "store->callbacks is required for a CALLBACK store");
      PKV_REQUIRE(p_.callbacks->struct_size >= sizeof callbacks_,
                  "store->callbacks->struct_size is %u, %zu expected", p_.callbacks->struct_size,
                  sizeof callbacks_);
      std::memcpy(&callbacks_, p_.callbacks, sizeof callbacks_);
      PKV_REQUIRE(callbacks_.reserved0 == 0, "store->callbacks->reserved0 must be 0");
      PKV_REQUIRE(callbacks_.get && callbacks_.put, "store->callbacks: get and put are required");
      break;
  }
  p_.path = own(p_.path, path_, nullptr);
  p_.host = own(p_.host, host_, "127.0.0.1");
  p_.username = own(p_.username, username_, nullptr);
  p_.password = own(p_.password, password_, nullptr);
  p_.key_prefix = own(p_.key_prefix, key_prefix_, "pkv:");
  p_.callbacks = p_.kind == PKV_STORE_CALLBACK ? &callbacks_ : nullptr;
  if (p_.model_id) {
    const size_t n = strnlen(p_.model_id, PKV_MAX_MODEL_ID_BYTES + 1);
    PKV_REQUIRE(
        n >= 1,
        "store->model_id is \"\": give the model's identity (e.g. name@revision), or NULL for none");
    PKV_REQUIRE(n <= PKV_MAX_MODEL_ID_BYTES,
                "store->model_id is longer than %d bytes: give a digest of it instead",
                int(PKV_MAX_MODEL_ID_BYTES));
  }
  p_.model_id = own(p_.model_id, model_id_, nullptr);
}

pkv_event_publisher_params default_event_publisher_params() {
  pkv_event_publisher_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  return p;
}

EventPublisherConfig::EventPublisherConfig(const pkv_event_publisher_params *in)
    : p_(read_struct(in, default_event_publisher_params(), "event_publisher")) {
  // A string of at most max bytes, owned here (s may be NULL only with a fallback).
  auto own = [](const char *s, const char *field, size_t min, size_t max, std::string &keep) {
    const size_t n = s ? strnlen(s, max + 1) : 0;
    PKV_REQUIRE(n >= min && n <= max, "event_publisher->%s must be a string of %zu .. %zu bytes%s",
                field, min, max, s ? "" : ", got NULL");
    keep.assign(s, n);
    return keep.c_str();
  };
  p_.endpoint = own(p_.endpoint, "endpoint", 1, PKV_MAX_EVENT_ENDPOINT_BYTES, endpoint_);
  p_.replay_endpoint = p_.replay_endpoint ? own(p_.replay_endpoint, "replay_endpoint", 1,
                                                PKV_MAX_EVENT_ENDPOINT_BYTES, replay_endpoint_)
                                          : nullptr;
  p_.topic = own(p_.topic ? p_.topic : "kv-events", "topic", 0, PKV_MAX_EVENT_TOPIC_BYTES, topic_);
  auto fill = [](uint32_t &v, uint32_t fallback, uint32_t max, const char *field) {
    if (v == 0) v = fallback;
    PKV_REQUIRE(v <= max, "event_publisher->%s must be in 0 .. %u, got %u", field, max, v);
  };
  fill(p_.replay_buffer_batches, PKV_DEFAULT_EVENT_REPLAY_BATCHES, 1u << 24,
       "replay_buffer_batches");
  fill(p_.send_hwm, PKV_DEFAULT_EVENT_SEND_HWM, 1u << 24, "send_hwm");
  fill(p_.max_queue_events, PKV_DEFAULT_EVENT_QUEUE_EVENTS, 1u << 26, "max_queue_events");
  fill(p_.max_batch_events, PKV_DEFAULT_EVENT_BATCH_EVENTS, 1u << 20, "max_batch_events");
  PKV_REQUIRE(
      p_.format <= PKV_EVENT_FORMAT_ARRAY,
      "event_publisher->format %u is not a PKV_EVENT_FORMAT_* value: PKV_EVENT_FORMAT_MAP (0, vLLM 0.26+) or "
      "PKV_EVENT_FORMAT_ARRAY (1, older routers)",
      p_.format);
  PKV_REQUIRE(p_.reserved0 == 0, "event_publisher->reserved0 must be 0, got %u", p_.reserved0);
}

pkv_seq_params default_seq_params() {
  pkv_seq_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.extra_key_size = sizeof(pkv_extra_key);
  return p;
}

pkv_request_params default_request_params() {
  pkv_request_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.max_new_tokens = 16;
  p.stop_token = -1;
  p.extra_key_size = sizeof(pkv_extra_key);
  return p;
}

std::string salt_bytes(const void *salt, uint32_t salt_len) {
  if (salt_len == 0) return std::string();
  PKV_REQUIRE(salt != nullptr, "cache_salt is NULL with cache_salt_len %u", salt_len);
  PKV_REQUIRE(salt_len <= PKV_MAX_CACHE_SALT_BYTES, "cache_salt_len %u exceeds %d", salt_len,
              PKV_MAX_CACHE_SALT_BYTES);
  return std::string(static_cast<const char *>(salt), salt_len);
}

uint32_t dtype_bytes(int32_t dtype) {
  switch (dtype) {
    case PKV_DTYPE_F32:
      return 4;
    case PKV_DTYPE_F16:
      return 2;
    case PKV_DTYPE_BF16:
      return 2;
    case PKV_DTYPE_FP8_E4M3:
      return 1;
    case PKV_DTYPE_FP8_E5M2:
      return 1;
    default:
      return 0;
  }
}

float attention_scale(const pkv_engine_params &p) {
  return p.softmax_scale > 0 ? p.softmax_scale : 1.0f / std::sqrt(float(p.head_dim));
}

const char *dtype_name(int32_t dtype) {
  switch (dtype) {
    case PKV_DTYPE_F32:
      return "f32";
    case PKV_DTYPE_F16:
      return "f16";
    case PKV_DTYPE_BF16:
      return "bf16";
    case PKV_DTYPE_FP8_E4M3:
      return "fp8_e4m3";
    case PKV_DTYPE_FP8_E5M2:
      return "fp8_e5m2";
    default:
      return "unknown";
  }
}

namespace {

// The recurrent state's fields (since 0.6.0); they matter only with STATE layers, and are
// checked always so that a wrong value is caught before a model with such layers comes.
void validate_state_params(const pkv_engine_params &p) {
  PKV_REQUIRE(p.state_checkpoint_policy <= PKV_STATE_CHECKPOINT_NONE,
              "state_checkpoint_policy %u is not PKV_STATE_CHECKPOINT_PROMPT_END (0), EVERY (1) "
              "or NONE (2)",
              p.state_checkpoint_policy);
  if (p.state_checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY)
    PKV_REQUIRE(p.state_checkpoint_interval >= 1 && p.state_checkpoint_interval <= (1u << 20),
                "state_checkpoint_interval %u with policy EVERY: blocks between checkpoints, "
                "1 .. 2^20",
                p.state_checkpoint_interval);
  else
    PKV_REQUIRE(p.state_checkpoint_interval == 0,
                "state_checkpoint_interval %u: only policy EVERY (1) takes an interval; must be 0",
                p.state_checkpoint_interval);
  PKV_REQUIRE(
      p.state_checkpoint_policy != PKV_STATE_CHECKPOINT_NONE || p.num_state_checkpoints == 0,
      "num_state_checkpoints %u with state_checkpoint_policy NONE: no checkpoint is taken, so it "
      "must be 0",
      p.num_state_checkpoints);
  PKV_REQUIRE(p.reserved4 == 0, "reserved4 must be 0, got %u", p.reserved4);
}

// Ranks (DESIGN.md §10): one engine per rank, one engine holding every rank's pool, or a rank's
// pool executing another engine's plans.
void validate_rank_params(const pkv_engine_params &p) {
  PKV_REQUIRE(p.ranks <= PKV_RANKS_POOL,
              "ranks %u is not PKV_RANKS_ONE (0), PKV_RANKS_ALL (1) or PKV_RANKS_POOL (2)",
              p.ranks);
  PKV_REQUIRE(p.reserved5 == 0, "reserved5 must be 0, got %u", p.reserved5);
  PKV_REQUIRE(p.block_layout <= PKV_BLOCK_LAYOUT_PAGE,
              "block_layout %u is not PKV_BLOCK_LAYOUT_LAYERS (0) or PKV_BLOCK_LAYOUT_PAGE (1)",
              p.block_layout);
  const uint32_t pp = std::max(p.pp_size, 1u);
  PKV_REQUIRE(pp <= p.num_layers, "pp_size %u: more pipeline stages than the %u layers", pp,
              p.num_layers);
  PKV_REQUIRE(p.pp_rank < pp, "pp_rank (%u) must be < pp_size (%u)", p.pp_rank, pp);
  if (p.ranks != PKV_RANKS_ALL) {
    PKV_REQUIRE(!p.rank_device_ids,
                "rank_device_ids is set with ranks %s: only an engine of every rank (ranks ALL) "
                "takes a device per rank; use device_id",
                p.ranks == PKV_RANKS_ONE ? "ONE" : "POOL");
    if (p.ranks == PKV_RANKS_POOL)
      PKV_REQUIRE(p.num_blocks > 0,
                  "ranks POOL needs num_blocks: the decider's (every rank holds the same blocks; "
                  "the host takes the fewest any rank's pkv_profile allows)");
    return;
  }
  PKV_REQUIRE(p.tp_rank == 0 && p.pp_rank == 0,
              "tp_rank %u and pp_rank %u with ranks ALL: the engine holds every rank's pool, so "
              "both must be 0",
              p.tp_rank, p.pp_rank);
  PKV_REQUIRE(uint64_t(p.tp_size) * pp <= PKV_MAX_RANKS,
              "tp_size %u x pp_size %u with ranks ALL: at most %d pools", p.tp_size, pp,
              PKV_MAX_RANKS);
  if (!p.rank_device_ids) return;
  PKV_REQUIRE(p.device != PKV_DEVICE_CPU,
              "rank_device_ids is set on a CPU engine: every rank's pool is in host memory; "
              "leave it NULL");
  for (uint32_t r = 0; r < p.tp_size * pp; ++r)
    PKV_REQUIRE(p.rank_device_ids[r] >= 0, "rank_device_ids[%u] is %d: a CUDA device, >= 0", r,
                p.rank_device_ids[r]);
}

}  // namespace

void validate_engine_params(const pkv_engine_params &p) {
  PKV_REQUIRE(p.num_layers > 0, "num_layers must be > 0");
  PKV_REQUIRE(p.num_q_heads > 0, "num_q_heads must be > 0");
  PKV_REQUIRE(p.num_kv_heads > 0, "num_kv_heads must be > 0");
  PKV_REQUIRE(p.num_q_heads % p.num_kv_heads == 0, "num_kv_heads (%u) must divide num_q_heads (%u)",
              p.num_kv_heads, p.num_q_heads);
  PKV_REQUIRE(p.head_dim > 0 && p.head_dim <= PKV_MAX_HEAD_DIM, "head_dim must be in 1..%d, got %u",
              PKV_MAX_HEAD_DIM, p.head_dim);
  PKV_REQUIRE(p.dtype == PKV_DTYPE_F32 || p.dtype == PKV_DTYPE_F16 || p.dtype == PKV_DTYPE_BF16,
              "dtype %d is not PKV_DTYPE_F32, F16 or BF16 (fp8 is a kv_dtype only)", p.dtype);
  PKV_REQUIRE(
      p.kv_dtype == 0 || p.kv_dtype == p.dtype || is_fp8(p.kv_dtype),
      "kv_dtype %d must be 0 (the model's dtype), dtype itself (%d) or PKV_DTYPE_FP8_E4M3 / "
      "PKV_DTYPE_FP8_E5M2",
      p.kv_dtype, p.dtype);
  PKV_REQUIRE(p.tp_size > 0, "tp_size must be > 0");
  PKV_REQUIRE(p.tp_rank < p.tp_size, "tp_rank (%u) must be < tp_size (%u)", p.tp_rank, p.tp_size);
  PKV_REQUIRE(p.num_q_heads % p.tp_size == 0, "tp_size (%u) must divide num_q_heads (%u)",
              p.tp_size, p.num_q_heads);
  PKV_REQUIRE(p.num_kv_heads % p.tp_size == 0 || p.tp_size % p.num_kv_heads == 0,
              "tp_size (%u) and num_kv_heads (%u): one must divide the other", p.tp_size,
              p.num_kv_heads);
  validate_rank_params(p);
  PKV_REQUIRE(p.block_size > 0, "block_size must be >= 1");
  PKV_REQUIRE(p.block_size <= PKV_MAX_BLOCK_SIZE, "block_size %u is too large (at most 2^20)",
              p.block_size);
  PKV_REQUIRE(p.num_blocks <= INT32_MAX, "num_blocks %u exceeds 2^31-1", p.num_blocks);
  PKV_REQUIRE(p.enable_prefix_caching <= 1, "enable_prefix_caching must be 0 or 1");
  PKV_REQUIRE(
      p.device == PKV_DEVICE_AUTO || p.device == PKV_DEVICE_CPU || p.device == PKV_DEVICE_CUDA,
      "device %d is not a PKV_DEVICE_* value", p.device);
  PKV_REQUIRE(p.device_id >= 0, "device_id must be >= 0");
  PKV_REQUIRE(p.num_threads <= PKV_MAX_THREADS, "num_threads %u is too many (at most %d)",
              p.num_threads, PKV_MAX_THREADS);
  PKV_REQUIRE((p.debug_flags & ~uint32_t(PKV_DEBUG_CONSTANT_HASH | PKV_DEBUG_TEST_CLOCK)) == 0,
              "debug_flags has unknown bits 0x%x", p.debug_flags);
  PKV_REQUIRE(std::isfinite(p.memory_utilization) && p.memory_utilization > 0.0 &&
                  p.memory_utilization <= 1.0,
              "memory_utilization must be in (0, 1], got %g", p.memory_utilization);
  PKV_REQUIRE(std::isfinite(p.softmax_scale) && p.softmax_scale >= 0.0f,
              "softmax_scale must be finite and >= 0 (0 = 1/sqrt(head_dim)), got %g",
              double(p.softmax_scale));
  PKV_REQUIRE(p.reserved0 == 0, "reserved0 must be 0");
  PKV_REQUIRE(p.max_num_seqs >= 1, "max_num_seqs must be >= 1");
  PKV_REQUIRE(p.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1");
  PKV_REQUIRE(p.enable_kv_events <= 1, "enable_kv_events must be 0 or 1");
  PKV_REQUIRE(p.reserved1 == 0, "reserved1 must be 0");
  PKV_REQUIRE(p.host_offload <= 1, "host_offload must be 0 or 1, not %u", p.host_offload);
  PKV_REQUIRE(p.preemption_mode <= PKV_PREEMPT_AUTO,
              "preemption_mode %u is not a PKV_PREEMPT_* value", p.preemption_mode);
  PKV_REQUIRE(p.preemption_mode != PKV_PREEMPT_SWAP || p.host_num_blocks || p.host_cache_bytes,
              "preemption_mode SWAP needs a host tier (host_num_blocks or host_cache_bytes)");
  PKV_REQUIRE(p.host_num_blocks <= INT32_MAX, "host_num_blocks %u exceeds 2^31-1",
              p.host_num_blocks);
  PKV_REQUIRE(p.kv_layout <= PKV_KV_LAYOUT_MLA, "kv_layout %u is not a PKV_KV_LAYOUT_* value",
              p.kv_layout);
  PKV_REQUIRE(p.reserved2 == 0, "reserved2 must be 0");
  if (p.kv_layout == PKV_KV_LAYOUT_MLA) {
    PKV_REQUIRE(p.kv_lora_rank >= 1,
                "kv_layout MLA needs kv_lora_rank >= 1 (the latent's compressed part)");
    PKV_REQUIRE(p.num_kv_heads == 1,
                "kv_layout MLA caches one latent per token: num_kv_heads must be 1, got %u",
                p.num_kv_heads);
    PKV_REQUIRE(uint64_t(p.kv_lora_rank) + p.qk_rope_head_dim == p.head_dim,
                "kv_layout MLA: head_dim (%u) must be the latent's width, kv_lora_rank (%u) + "
                "qk_rope_head_dim (%u)",
                p.head_dim, p.kv_lora_rank, p.qk_rope_head_dim);
  } else {
    PKV_REQUIRE(p.kv_lora_rank == 0 && p.qk_rope_head_dim == 0,
                "kv_lora_rank and qk_rope_head_dim are for kv_layout MLA only (got %u and %u)",
                p.kv_lora_rank, p.qk_rope_head_dim);
  }
  PKV_REQUIRE(p.sliding_window <= INT32_MAX, "sliding_window %u exceeds 2^31-1", p.sliding_window);
  bool windowed = p.sliding_window != 0 && !p.layer_windows;
  if (p.layer_windows)
    for (uint32_t l = 0; l < p.num_layers; ++l) {
      PKV_REQUIRE(p.layer_windows[l] <= INT32_MAX, "layer_windows[%u] = %u exceeds 2^31-1", l,
                  p.layer_windows[l]);
      windowed |= p.layer_windows[l] != 0;
    }
  if (windowed && p.kv_layout == PKV_KV_LAYOUT_MLA)
    fail(
        PKV_ERR_UNSUPPORTED,
        "kv_layout MLA with sliding windows: no latent-attention model has them, and pkv's MLA attention does "
        "not mask one (set sliding_window and layer_windows to full attention)");
  PKV_REQUIRE(p.reserved3 == 0, "reserved3 must be 0");
  validate_state_params(p);
  resolve_layer_specs(p);  // every rule of layer_specs (layer_specs.cpp)
}

}  // namespace pkv
