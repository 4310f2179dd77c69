// Versioned parameter and result structs (DESIGN.md §3 rule 6): defaults, validation, and
// copying between the caller's struct_size and ours.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "pkv/pkv.h"
#include "status.h"

namespace pkv {

// The size each struct had in the first ABI (0.1.0). A caller's struct_size may be larger
// (a newer header) or, once fields are appended, smaller down to this; never below.
template <class T> inline constexpr uint32_t kMinStructSize = sizeof(T);
// pkv_kv_event has no struct_size: pkv_drain_kv_events_sized takes the caller's size instead.
// inline: an explicit specialization is not implicitly so, and clang (the fuzz build) emits a
// definition in every file that includes this one.
template <> inline constexpr uint32_t kMinStructSize<pkv_kv_event> = 32;
// Structs that grew in 0.2.0: a 0.1 caller's struct ends where the new fields start.
template <>
inline constexpr uint32_t kMinStructSize<pkv_engine_params> = offsetof(pkv_engine_params,
                                                                       host_num_blocks);
template <>
inline constexpr uint32_t kMinStructSize<pkv_kv_budget> = offsetof(pkv_kv_budget, host_num_blocks);
template <>
inline constexpr uint32_t kMinStructSize<struct pkv_pool_info> = offsetof(struct pkv_pool_info,
                                                                          host_k_base);
template <>
inline constexpr uint32_t kMinStructSize<pkv_stats> = offsetof(pkv_stats, num_host_blocks);
template <>
inline constexpr uint32_t kMinStructSize<struct pkv_seq_info> = offsetof(struct pkv_seq_info,
                                                                         kv_tier);
template <>
inline constexpr uint32_t kMinStructSize<pkv_batch_view> = offsetof(pkv_batch_view, copy_kind);
// Grew in 0.4.0: a 0.3 caller's struct ends where format starts.
template <>
inline constexpr uint32_t kMinStructSize<pkv_event_publisher_params> =
    offsetof(pkv_event_publisher_params, format);
// Grew in 0.4.0: a 0.3 caller's store params end where model_id starts.
template <>
inline constexpr uint32_t kMinStructSize<pkv_store_params> = offsetof(pkv_store_params, model_id);
// Grew in 0.5.0 (extra keys, lora_id): a 0.4 caller's struct ends at the fields' start.
template <>
inline constexpr uint32_t kMinStructSize<pkv_seq_params> = offsetof(pkv_seq_params, extra_keys);
template <>
inline constexpr uint32_t kMinStructSize<pkv_request_params> = offsetof(pkv_request_params,
                                                                        extra_keys);
static_assert(sizeof(pkv_kv_event) >= 32, "pkv_kv_event only grows");

// Reads a caller's versioned struct: fields the caller does not have keep their defaults.
template <class T> T read_struct(const T *in, const T &defaults, const char *what) {
  PKV_REQUIRE(in != nullptr, "%s is NULL", what);
  PKV_REQUIRE(in->struct_size >= kMinStructSize<T>,
              "%s->struct_size is %u, at least %u expected (set it with the *_init function)", what,
              in->struct_size, kMinStructSize<T>);
  T out = defaults;
  // Whole 8-byte units only: a size that cuts a pointer or a 64-bit field in two (no struct of
  // any version ends there) must not make half of one.
  std::memcpy(&out, in, std::min<size_t>(in->struct_size & ~7u, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

// Checks a caller's output struct before anything is computed.
template <class T> void require_out_struct(const T *out, const char *what) {
  PKV_REQUIRE(out != nullptr, "%s is NULL", what);
  PKV_REQUIRE(out->struct_size >= kMinStructSize<T>,
              "%s->struct_size is %u, at least %u expected (set it to sizeof the struct)", what,
              out->struct_size, kMinStructSize<T>);
}

// Writes our struct into the caller's, as many bytes as both know; struct_size is kept.
template <class T> void write_struct(T *out, const T &value) {
  const uint32_t size = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(size, sizeof(T)));
  out->struct_size = size;
}

// Blocks needed to hold num_tokens tokens.
inline uint32_t blocks_for_tokens(uint64_t num_tokens, uint32_t block_size) {
  return static_cast<uint32_t>((num_tokens + block_size - 1) / block_size);
}

// The defaults of every *_init call (pkv.h documents them beside the fields).
pkv_engine_params default_engine_params();
pkv_store_params default_store_params();
pkv_event_publisher_params default_event_publisher_params();
pkv_seq_params default_seq_params();
pkv_request_params default_request_params();

// pkv_*_params_init: zeroes the caller's size bytes and fills the fields pkv knows.
template <class T> void init_struct(T *p, uint32_t size, const T &defaults, const char *what) {
  PKV_REQUIRE(p != nullptr, "params is NULL");
  PKV_REQUIRE(size >= kMinStructSize<T>, "size %u is smaller than %s (%u)", size, what,
              kMinStructSize<T>);
  std::memset(p, 0, size);
  std::memcpy(p, &defaults, std::min<size_t>(size, sizeof(T)));
  p->struct_size = size;
}

// The engine's own copy of the caller's pkv_store_params (read at the caller's struct_size,
// checked): its strings and callback table are owned here, and params points into them.
class StoreConfig {
 public:
  explicit StoreConfig(const pkv_store_params *in);
  StoreConfig(const StoreConfig &) = delete;
  StoreConfig &operator=(const StoreConfig &) = delete;
  const pkv_store_params &params() const { return p_; }

 private:
  pkv_store_params p_;
  std::string path_, host_, username_, password_, key_prefix_, model_id_;
  pkv_store_callbacks callbacks_;
};

// The engine's own copy of the caller's pkv_event_publisher_params (read at the caller's
// struct_size, checked, defaults resolved): its strings are owned here, and params points into them.
class EventPublisherConfig {
 public:
  explicit EventPublisherConfig(const pkv_event_publisher_params *in);
  EventPublisherConfig(const EventPublisherConfig &) = delete;
  EventPublisherConfig &operator=(const EventPublisherConfig &) = delete;
  const pkv_event_publisher_params &params() const { return p_; }

 private:
  pkv_event_publisher_params p_;
  std::string endpoint_, replay_endpoint_, topic_;
};

// A cache salt's bytes; at most PKV_MAX_CACHE_SALT_BYTES.
std::string salt_bytes(const void *salt, uint32_t salt_len);
// Every rule of pkv_engine_params (shape, paging, budget fields); throws INVALID_ARGUMENT.
void validate_engine_params(const pkv_engine_params &p);
uint32_t dtype_bytes(int32_t dtype);
inline bool is_fp8(int32_t dtype) {
  return dtype == PKV_DTYPE_FP8_E4M3 || dtype == PKV_DTYPE_FP8_E5M2;
}
// The cache's dtype: kv_dtype, or the model's when it is 0.
inline int32_t kv_dtype_of(const pkv_engine_params &p) { return p.kv_dtype ? p.kv_dtype : p.dtype; }
// pkv_attention's scale: softmax_scale, or 1/sqrt(head_dim) when it is 0.
float attention_scale(const pkv_engine_params &p);
// Whether pkv_attention (the CPU variants and the CUDA kernels alike) handles this head_dim.
inline uint32_t attention_max_head_dim(int32_t device) {
  return device == PKV_DEVICE_CPU ? PKV_ATTENTION_MAX_HEAD_DIM_CPU
                                  : PKV_ATTENTION_MAX_HEAD_DIM_CUDA;
}
// device: the engine's (resolved), PKV_DEVICE_CPU or PKV_DEVICE_CUDA.
inline bool attention_head_dim_supported(uint32_t head_dim, int32_t device) {
  return head_dim % PKV_ATTENTION_HEAD_DIM_ALIGN == 0 && head_dim <= attention_max_head_dim(device);
}
// Whether pkv_attention handles an MLA latent of these parts (kv_layout MLA).
inline bool attention_mla_supported(uint32_t kv_lora_rank, uint32_t rope_dim) {
  return kv_lora_rank % PKV_ATTENTION_HEAD_DIM_ALIGN == 0 &&
         kv_lora_rank <= PKV_ATTENTION_MAX_KV_LORA_RANK &&
         rope_dim % PKV_ATTENTION_HEAD_DIM_ALIGN == 0 && rope_dim <= PKV_ATTENTION_MAX_ROPE_DIM;
}
const char *dtype_name(int32_t dtype);

}  // namespace pkv
