// The KV profiler (DESIGN.md §5): how many blocks fit, and every term of why.
#pragma once

#include "backend/backend.h"
#include "pkv/pkv.h"

namespace pkv {

uint32_t kv_heads_per_rank(const pkv_engine_params &p);
uint64_t kv_block_bytes(const pkv_engine_params &p);

// The budget for validated params on a resolved device. measured is the device's (or host's)
// memory; it is ignored when p.memory_total_bytes is set. Never throws for a small budget:
// shortfall_bytes > 0 says so (see budget_error).
pkv_kv_budget compute_budget(const pkv_engine_params &p, int32_t device, const MemoryInfo &measured);

// Throws PKV_ERR_OUT_OF_MEMORY (or INVALID_ARGUMENT for a fixed num_blocks) naming what is
// missing when the budget cannot hold one sequence of max_model_len.
void budget_error(const pkv_engine_params &p, const pkv_kv_budget &b);

// Resolves the device, measures memory (unless memory_total_bytes is set), computes the budget.
pkv_kv_budget profile(const pkv_engine_params &p);

}  // namespace pkv
