// CPU backend kernels: the attention math lives in cpu_attention.cpp, once per instruction-set
// variant; write_kv and copy_blocks are memory copies.
#include "backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "pkv/pkv.h"

namespace pkv {

CpuKernels::CpuKernels(uint32_t num_threads) : pool_(num_threads), attention_(&cpu_base::attention) {
#if defined(PKV_HAVE_CPU_V3)
  // PKV_CPU_ISA=baseline forces the portable variant (the tests run it on machines with AVX2).
  const char *isa = std::getenv("PKV_CPU_ISA");
  const bool force_baseline = isa && std::strcmp(isa, "baseline") == 0;
  __builtin_cpu_init();
  if (!force_baseline && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    attention_ = &cpu_v3::attention;
    isa_ = "avx2+fma+f16c";
  }
#endif
}

// The items of one call: tiles of new tokens per (sequence, kv head), split over keys so that
// about 4 items per thread exist (a decode of one long sequence still uses every core).
void CpuKernels::plan(const CpuStep &step, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim) {
  const uint32_t group = q_heads / kv_heads;
  items_.clear();
  groups_.clear();
  uint64_t total_keys = 0;  // keys over all items, counting a decode's item once
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    total_keys += qlen == 1 ? uint64_t(step.context_lens[i])
                            : uint64_t(step.context_lens[i]) * kv_heads * ((qlen + kAttnPrefillRows - 1) / kAttnPrefillRows);
  }
  const uint64_t target = 4ull * pool_.num_threads();
  uint64_t split = std::max<uint64_t>(512, (total_keys + target - 1) / target);
  split = (split + kAttnChunk - 1) / kAttnChunk * kAttnChunk;
  size_t partial = 0;
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += kAttnPrefillRows) {
      const uint32_t rows = std::min(kAttnPrefillRows, qlen - row0);
      const uint32_t keys = ctx - qlen + row0 + rows;  // the tile's last row sees this many
      const uint32_t splits = static_cast<uint32_t>((keys + split - 1) / split);
      // A single-row tile (a decode) takes every kv head: it then reads whole token rows of the
      // pool (all heads, contiguous) instead of one head's slice every kv_heads * head_dim.
      const uint32_t heads_per_item = rows == 1 ? kv_heads : 1;
      for (uint32_t h = 0; h < kv_heads; h += heads_per_item) {
        if (splits > 1) groups_.push_back(items_.size());
        for (uint32_t k = 0; k < splits; ++k) {
          AttnItem it{i, h, heads_per_item, row0, rows, static_cast<uint32_t>(k * split),
                      static_cast<uint32_t>(std::min<uint64_t>(keys, (k + 1) * split)), -1, splits};
          if (splits > 1) {
            it.part = static_cast<int64_t>(partial);
            partial += attention_partial_floats(rows, group * heads_per_item, head_dim);
          }
          items_.push_back(it);
        }
      }
    }
  }
  if (partials_.size() < partial) partials_.resize(partial);
  const size_t scratch = attention_scratch_floats(std::max(kAttnPrefillRows * group, q_heads), head_dim);
  scratch_.resize(pool_.num_threads());
  scratch_ptrs_.resize(pool_.num_threads());
  for (size_t t = 0; t < scratch_.size(); ++t) {
    if (scratch_[t].size() < scratch) scratch_[t].resize(scratch);
    scratch_ptrs_[t] = scratch_[t].data();
  }
}

void CpuKernels::attention(const CpuStep &step, const CpuLayer &layer) {
  const AttnWork work{items_.data(), items_.size(), groups_.data(), groups_.size(), partials_.data(),
                      scratch_ptrs_.data()};
  attention_(step, layer, work, pool_);
}

void CpuKernels::write_kv(const CpuStep &step, const CpuLayer &layer) {
  const size_t elt = layer.dtype == PKV_DTYPE_F32 ? 4 : 2;
  const size_t row = size_t(layer.kv_heads) * layer.head_dim * elt;
  const size_t per_item = std::max<size_t>(1, (64 << 10) / row);  // ~64 KiB of rows per item
  const size_t n_items = (step.num_tokens + per_item - 1) / per_item;
  pool_.parallel_for(n_items, [&](size_t i, uint32_t) {
    const size_t end = std::min<size_t>(step.num_tokens, (i + 1) * per_item);
    for (size_t t = i * per_item; t < end; ++t) {
      const int64_t slot = step.slot_mapping[t];
      if (slot < 0) continue;
      std::memcpy(static_cast<char *>(layer.k_cache) + slot * row, static_cast<const char *>(layer.k) + t * row, row);
      std::memcpy(static_cast<char *>(layer.v_cache) + slot * row, static_cast<const char *>(layer.v) + t * row, row);
    }
  });
}

void CpuKernels::copy_blocks(const CpuTier (&tiers)[2], uint32_t num_layers, uint64_t block_bytes,
                             const int32_t *src, const int32_t *dst, const int32_t *kind, uint32_t n) {
  pool_.parallel_for(size_t(num_layers) * 2, [&](size_t i, uint32_t) {
    const uint64_t layer = i / 2;
    char *base[2];  // this layer's K (or V) in each tier
    for (int t = 0; t < 2; ++t) base[t] = (i % 2 ? tiers[t].v : tiers[t].k) + layer * tiers[t].layer_bytes;
    for (uint32_t c = 0; c < n; ++c) {  // in order: chained copies read earlier destinations
      const int from = copy_reads_host(kind[c]), to = copy_writes_host(kind[c]);
      std::memmove(base[to] + uint64_t(dst[c]) * block_bytes, base[from] + uint64_t(src[c]) * block_bytes,
                   block_bytes);
    }
  });
}

}  // namespace pkv
