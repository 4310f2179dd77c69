// CPU backend kernels: the attention math and fp8 rounding live in cpu_attention.cpp, once per
// instruction-set variant; write_kv (but its fp8 rounding) and copy_blocks are memory copies.
#include "backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/cpu_attention.h"
#include "pkv/pkv.h"
#include "status.h"

namespace pkv {

namespace {

// Best first. `cpu` lists the CPUID features a variant's code uses (__builtin_cpu_supports names;
// libgcc checks that the OS saves the AVX and AVX-512 state too).
struct VariantEntry {
  CpuVariant v;
  const char *cpu[10];
};
const VariantEntry kVariants[] = {
#if defined(PKV_HAVE_CPU_X86)
    {{"avx512-bf16", &cpu_avx512_bf16::attention, &cpu_avx512_bf16::quantize_fp8},
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512bf16",
      "avx512vbmi"}},
    {{"avx512", &cpu_avx512::attention, &cpu_avx512::quantize_fp8},
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"}},
    {{"avx2", &cpu_avx2::attention, &cpu_avx2::quantize_fp8}, {"avx2", "fma", "f16c"}},
#endif
    {{"baseline", &cpu_baseline::attention, &cpu_baseline::quantize_fp8}, {}},
};

#if defined(PKV_HAVE_CPU_X86)
bool cpu_has(const char *feature) {
  // __builtin_cpu_supports takes only string literals: one case per name used above.
  const std::string f = feature;
  if (f == "avx2") return __builtin_cpu_supports("avx2");
  if (f == "fma") return __builtin_cpu_supports("fma");
  if (f == "f16c") return __builtin_cpu_supports("f16c");
  if (f == "avx512f") return __builtin_cpu_supports("avx512f");
  if (f == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (f == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (f == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (f == "avx512bf16") return __builtin_cpu_supports("avx512bf16");
  if (f == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi");
  return false;
}
#endif

// The first feature of e this CPU lacks, or nullptr.
const char *missing_feature(const VariantEntry &e) {
#if defined(PKV_HAVE_CPU_X86)
  __builtin_cpu_init();
  for (const char *f : e.cpu)
    if (f && !cpu_has(f)) return f;
#else
  (void)e;
#endif
  return nullptr;
}

}  // namespace

const CpuVariant &cpu_variant() {
  const char *forced = std::getenv("PKV_CPU_ISA");
  if (forced && *forced) {
    std::string names;
    for (const VariantEntry &e : kVariants) {
      if (std::strcmp(forced, e.v.name) == 0) {
        if (const char *f = missing_feature(e))
          fail(PKV_ERR_UNSUPPORTED,
               "PKV_CPU_ISA=%s: this CPU lacks %s (unset the variable to pick by CPUID)", forced,
               f);
        return e.v;
      }
      names += names.empty() ? "" : ", ";
      names += e.v.name;
    }
    fail(PKV_ERR_INVALID_ARGUMENT, "PKV_CPU_ISA=%s: no such CPU kernel variant in this build (%s)",
         forced, names.c_str());
  }
  for (const VariantEntry &e : kVariants)
    if (!missing_feature(e)) return e.v;
  return kVariants[sizeof kVariants / sizeof kVariants[0] - 1].v;
}

CpuKernels::CpuKernels(uint32_t num_threads, const CpuVariant &variant)
    : pool_(num_threads), variant_(variant) {}

void CpuKernels::plan(const CpuStep &step, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                      uint32_t v_dim) {
  q_heads_ = q_heads, kv_heads_ = kv_heads, head_dim_ = head_dim, v_dim_ = v_dim;
  tile_rows_ = attn_tile_rows(q_heads / kv_heads);
  plans_.resize(step.num_groups);
  for (GroupPlan &g : plans_) g.ready = false;
  const size_t scratch = attention_scratch_floats(attention_max_q(q_heads, kv_heads), head_dim);
  scratch_.resize(pool_.num_threads());
  scratch_ptrs_.resize(pool_.num_threads());
  for (size_t t = 0; t < scratch_.size(); ++t) {
    if (scratch_[t].size() < scratch) scratch_[t].resize(scratch);
    scratch_ptrs_[t] = scratch_[t].data();
  }
}

namespace {

// The keys [first, end) that tile rows [first_pos, first_pos + rows) see: each row up to its own
// position, from its window's first key on.
struct KeyRange {
  uint32_t first, end;
};
KeyRange tile_keys(uint32_t first_pos, uint32_t rows, uint32_t window) {
  return {window && first_pos >= window ? first_pos - window + 1 : 0, first_pos + rows};
}

}  // namespace

// The items of one group: tiles of new tokens per (sequence, kv head), over the keys their
// windows see, split over keys so that about 4 items per thread exist (a decode of one long
// sequence still uses every core).
void CpuKernels::plan_group(const CpuStep &step, uint32_t window, GroupPlan &plan) {
  const uint32_t group = q_heads_ / kv_heads_;
  plan.items.clear();
  plan.split_tiles.clear();
  uint64_t total_keys = 0;  // keys over all items, counting a decode's item once
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += tile_rows_) {
      const uint32_t rows = std::min(tile_rows_, qlen - row0);
      const KeyRange k = tile_keys(ctx - qlen + row0, rows, window);
      total_keys += uint64_t(k.end - k.first) * (qlen == 1 ? 1 : kv_heads_);
    }
  }
  const uint64_t target = 4ull * pool_.num_threads();
  uint64_t split = std::max<uint64_t>(512, (total_keys + target - 1) / target);
  split = (split + kAttnChunk - 1) / kAttnChunk * kAttnChunk;
  size_t partial = 0;
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += tile_rows_) {
      const uint32_t rows = std::min(tile_rows_, qlen - row0);
      const KeyRange keys = tile_keys(ctx - qlen + row0, rows, window);
      const uint32_t splits = static_cast<uint32_t>((keys.end - keys.first + split - 1) / split);
      // A single-row tile (a decode) takes every kv head: it then reads whole token rows of the
      // pool (all heads, contiguous) instead of one head's slice every kv_heads * head_dim.
      const uint32_t heads_per_item = rows == 1 ? kv_heads_ : 1;
      for (uint32_t h = 0; h < kv_heads_; h += heads_per_item) {
        if (splits > 1) plan.split_tiles.push_back(plan.items.size());
        for (uint32_t k = 0; k < splits; ++k) {
          const uint64_t key0 = keys.first + k * split;
          AttnItem it{i,
                      h,
                      heads_per_item,
                      row0,
                      rows,
                      static_cast<uint32_t>(key0),
                      static_cast<uint32_t>(std::min<uint64_t>(keys.end, key0 + split)),
                      -1,
                      splits};
          if (splits > 1) {
            it.part = static_cast<int64_t>(partial);
            partial += attention_partial_floats(rows, group * heads_per_item, v_dim_);
          }
          plan.items.push_back(it);
        }
      }
    }
  }
  if (partials_.size() < partial) partials_.resize(partial);  // shared: one group runs at a time
  plan.window = window;
  plan.ready = true;
}

uint64_t CpuKernels::planned_keys(uint32_t group) const {
  uint64_t keys = 0;
  if (group < plans_.size() && plans_[group].ready)
    for (const AttnItem &it : plans_[group].items) keys += it.key1 - it.key0;
  return keys;
}

void CpuKernels::attention(const CpuStep &step, const CpuLayer &layer) {
  PKV_ASSERT(layer.group < plans_.size());
  GroupPlan &plan = plans_[layer.group];
  if (!plan.ready || plan.window != layer.window) plan_group(step, layer.window, plan);
  const AttnWork work{plan.items.data(),       plan.items.size(), plan.split_tiles.data(),
                      plan.split_tiles.size(), partials_.data(),  scratch_ptrs_.data()};
  variant_.attention(step, layer, work, pool_);
}

// New rows into their slots of the layer's group: copied, or rounded to fp8 head by head (each
// head's scale). MLA: the latents (k) alone.
void CpuKernels::write_kv(const CpuStep &step, const CpuLayer &layer) {
  const size_t elt = layer.dtype == PKV_DTYPE_F32 ? 4 : 2;
  const bool fp8 = layer.kv_dtype == PKV_DTYPE_FP8_E4M3 || layer.kv_dtype == PKV_DTYPE_FP8_E5M2;
  const size_t head = size_t(layer.head_dim) * elt, row = layer.kv_heads * head;  // of k and v
  const size_t cache_row = fp8 ? size_t(layer.kv_heads) * layer.head_dim : row;
  const size_t per_item = std::max<size_t>(1, (64 << 10) / row);  // ~64 KiB of rows per item
  const size_t n_items = (step.num_tokens + per_item - 1) / per_item;
  const int64_t *slots = step.slot_mapping(layer.group);
  pool_.parallel_for(n_items, [&](size_t i, uint32_t) {
    const size_t end = std::min<size_t>(step.num_tokens, (i + 1) * per_item);
    for (size_t t = i * per_item; t < end; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      char *kc = static_cast<char *>(layer.k_cache) + slot * cache_row;
      char *vc = static_cast<char *>(layer.v_cache) + slot * cache_row;
      const char *k = static_cast<const char *>(layer.k) + t * row;
      const char *v = layer.mla ? nullptr : static_cast<const char *>(layer.v) + t * row;
      if (!fp8) {
        std::memcpy(kc, k, row);
        if (v) std::memcpy(vc, v, row);
        continue;
      }
      for (uint32_t h = 0; h < layer.kv_heads; ++h) {
        const size_t out = size_t(h) * layer.head_dim;
        variant_.quantize(k + h * head, layer.dtype, layer.kv_dtype,
                          reinterpret_cast<uint8_t *>(kc) + out, layer.head_dim, layer.k_scale[h]);
        if (v)
          variant_.quantize(v + h * head, layer.dtype, layer.kv_dtype,
                            reinterpret_cast<uint8_t *>(vc) + out, layer.head_dim,
                            layer.v_scale[h]);
      }
    }
  });
}

void CpuKernels::copy_blocks(const CpuTier (&tiers)[2], uint32_t num_layers, uint32_t tensors,
                             uint64_t block_bytes, const int32_t *src, const int32_t *dst,
                             const int32_t *kind, uint32_t n) {
  pool_.parallel_for(size_t(num_layers) * tensors, [&](size_t i, uint32_t) {
    const uint64_t layer = i / tensors;
    char *base[2];  // this layer's K (or V) in each tier
    for (int t = 0; t < 2; ++t)
      base[t] = (i % tensors ? tiers[t].v : tiers[t].k) + layer * tiers[t].layer_bytes;
    for (uint32_t c = 0; c < n; ++c) {  // in order: chained copies read earlier destinations
      const int from = copy_reads_host(kind[c]), to = copy_writes_host(kind[c]);
      std::memmove(base[to] + uint64_t(dst[c]) * block_bytes,
                   base[from] + uint64_t(src[c]) * block_bytes, block_bytes);
    }
  });
}

}  // namespace pkv
