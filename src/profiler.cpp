#include "profiler.h"

#include <algorithm>
#include <cmath>

#include "params.h"
#include "status.h"

namespace pkv {

uint32_t kv_heads_per_rank(const pkv_engine_params &p) {
  // When tp_size > num_kv_heads, KV heads are replicated: each rank keeps one.
  return std::max(1u, p.num_kv_heads / p.tp_size);
}

uint64_t kv_block_bytes(const pkv_engine_params &p) {
  return 2ull * p.num_layers * p.block_size * kv_heads_per_rank(p) * p.head_dim * dtype_bytes(p.dtype);
}

pkv_kv_budget compute_budget(const pkv_engine_params &p, int32_t device, const MemoryInfo &measured) {
  pkv_kv_budget b;
  std::memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.device = device;
  b.kv_heads_per_rank = kv_heads_per_rank(p);
  b.block_bytes = kv_block_bytes(p);
  b.bytes_per_token = b.block_bytes / p.block_size;
  if (p.memory_total_bytes) {
    b.total_bytes = p.memory_total_bytes;
    b.used_bytes = p.memory_used_bytes;
  } else {
    b.total_bytes = measured.total_bytes;
    b.used_bytes = measured.total_bytes - std::min(measured.free_bytes, measured.total_bytes) +
                   p.memory_used_bytes;
  }
  b.reserve_bytes = p.reserve_bytes;
  b.memory_utilization = p.memory_utilization;
  const long double allowed = (long double)b.total_bytes * p.memory_utilization -
                              (long double)b.used_bytes - (long double)b.reserve_bytes;
  if (p.kv_cache_bytes) {
    b.budget_bytes = p.kv_cache_bytes;
    b.source = PKV_BUDGET_FROM_BYTE_CAP;
  } else {
    b.budget_bytes = allowed > 0 ? static_cast<uint64_t>(std::floor(allowed)) : 0;
    b.source = PKV_BUDGET_FROM_UTILIZATION;
  }
  if (p.num_blocks) {
    b.num_blocks = p.num_blocks;
    b.source = PKV_BUDGET_FIXED_BLOCKS;
  } else {
    b.num_blocks = std::min<uint64_t>(b.budget_bytes / b.block_bytes, INT32_MAX);
  }
  b.pool_bytes = b.num_blocks * b.block_bytes;
  b.max_tokens = b.num_blocks * p.block_size;
  b.blocks_per_max_seq = p.max_model_len ? blocks_for_tokens(p.max_model_len, p.block_size) : 1;
  b.max_seqs_at_max_model_len = b.num_blocks / b.blocks_per_max_seq;
  if (b.num_blocks < b.blocks_per_max_seq) {
    const uint64_t need = b.blocks_per_max_seq * b.block_bytes;
    // From the formula, what is missing is counted from the signed budget: when used + reserve
    // already exceed total * utilization, that excess is missing too.
    const long double have = p.num_blocks ? (long double)b.num_blocks * b.block_bytes
                             : p.kv_cache_bytes ? (long double)p.kv_cache_bytes
                                                : allowed;
    b.shortfall_bytes = static_cast<uint64_t>(std::ceil((long double)need - have));
  }
  return b;
}

void budget_error(const pkv_engine_params &p, const pkv_kv_budget &b) {
  if (b.shortfall_bytes == 0) return;
  const double mib = 1024.0 * 1024.0;
  if (b.source == PKV_BUDGET_FIXED_BLOCKS)
    fail(PKV_ERR_INVALID_ARGUMENT,
         "num_blocks %u cannot hold one sequence of max_model_len %u (needs %llu blocks of %u tokens)",
         p.num_blocks, p.max_model_len, (unsigned long long)b.blocks_per_max_seq, p.block_size);
  fail(PKV_ERR_OUT_OF_MEMORY,
       "KV budget of %.1f MiB (%s) holds %llu blocks of %.3f MiB; one sequence of max_model_len %u "
       "needs %llu: %.1f MiB missing (raise memory_utilization or kv_cache_bytes, lower "
       "reserve_bytes, max_model_len or block_size)",
       b.budget_bytes / mib,
       b.source == PKV_BUDGET_FROM_BYTE_CAP ? "kv_cache_bytes" : "total*utilization - used - reserve",
       (unsigned long long)b.num_blocks, b.block_bytes / mib, p.max_model_len,
       (unsigned long long)b.blocks_per_max_seq, b.shortfall_bytes / mib);
}

pkv_kv_budget profile(const pkv_engine_params &p) {
  validate_engine_params(p);
  const int32_t device = resolve_device(p.device, p.device_id);
  MemoryInfo measured;
  if (!p.memory_total_bytes)
    measured = device == PKV_DEVICE_CUDA ? cuda_memory(p.device_id) : host_memory();
  return compute_budget(p, device, measured);
}

}  // namespace pkv
