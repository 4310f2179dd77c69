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
    {{"avx512-bf16", &cpu_avx512_bf16::attention, &cpu_avx512_bf16::quantize_fp8,
      &cpu_avx512_bf16::indexer_scores8, &cpu_avx512_bf16::sparse_attend},
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512bf16",
      "avx512vbmi"}},
    {{"avx512", &cpu_avx512::attention, &cpu_avx512::quantize_fp8, &cpu_avx512::indexer_scores8,
      &cpu_avx512::sparse_attend},
     {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"}},
    {{"avx2", &cpu_avx2::attention, &cpu_avx2::quantize_fp8, &cpu_avx2::indexer_scores8,
      &cpu_avx2::sparse_attend},
     {"avx2", "fma", "f16c"}},
#endif
    {{"baseline", &cpu_baseline::attention, &cpu_baseline::quantize_fp8,
      &cpu_baseline::indexer_scores8, &cpu_baseline::sparse_attend},
     {}},
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

void CpuKernels::plan(const CpuStep &, uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                      uint32_t v_dim) {
  for (GroupPlan &g : plans_) g.ready = false;
  reserve_scratch(q_heads, kv_heads, head_dim, v_dim);
}

// Grows the threads' scratch to what a call of this shape needs (V rows may be wider than K's).
void CpuKernels::reserve_scratch(uint32_t q_heads, uint32_t kv_heads, uint32_t head_dim,
                                 uint32_t v_dim) {
  const size_t scratch =
      attention_scratch_floats(attention_max_q(q_heads, kv_heads), std::max(head_dim, v_dim));
  scratch_.resize(pool_.num_threads());
  scratch_ptrs_.resize(pool_.num_threads());
  for (size_t t = 0; t < scratch_.size(); ++t) {
    if (scratch_[t].size() < scratch) scratch_[t].resize(scratch);
    scratch_ptrs_[t] = scratch_[t].data();
  }
}

namespace {

// The keys [first, end) that tile rows [first_pos, first_pos + rows) see: each row up to its own
// position, from its window's (or chunk's) first key on; the first row's is the smallest.
struct KeyRange {
  uint32_t first, end;
};
KeyRange tile_keys(uint32_t first_pos, uint32_t rows, const CpuLayer &layer) {
  return {layer.first_key(first_pos), first_pos + rows};
}

}  // namespace

// The items of one plan: tiles of new tokens per (sequence, kv head), over the keys their
// windows (chunks) see, split over keys so that about 4 items per thread exist (a decode of one
// long sequence still uses every core).
void CpuKernels::plan_group(const CpuStep &step, const CpuLayer &layer, GroupPlan &plan) {
  const uint32_t group = layer.q_heads / layer.kv_heads, kv_heads = layer.kv_heads;
  const uint32_t tile_rows = attn_tile_rows(group);
  plan.items.clear();
  plan.split_tiles.clear();
  uint64_t total_keys = 0;  // keys over all items, counting a decode's item once
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += tile_rows) {
      const uint32_t rows = std::min(tile_rows, qlen - row0);
      const KeyRange k = tile_keys(ctx - qlen + row0, rows, layer);
      total_keys += uint64_t(k.end - k.first) * (qlen == 1 ? 1 : kv_heads);
    }
  }
  const uint64_t target = 4ull * pool_.num_threads();
  uint64_t split = std::max<uint64_t>(512, (total_keys + target - 1) / target);
  split = (split + kAttnChunk - 1) / kAttnChunk * kAttnChunk;
  size_t partial = 0;
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += tile_rows) {
      const uint32_t rows = std::min(tile_rows, qlen - row0);
      const KeyRange keys = tile_keys(ctx - qlen + row0, rows, layer);
      const uint32_t splits = static_cast<uint32_t>((keys.end - keys.first + split - 1) / split);
      // A single-row tile (a decode) takes every kv head: it then reads whole token rows of the
      // pool (all heads, contiguous) instead of one head's slice every kv_heads * head_dim.
      const uint32_t heads_per_item = rows == 1 ? kv_heads : 1;
      for (uint32_t h = 0; h < kv_heads; h += heads_per_item) {
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
            partial += attention_partial_floats(rows, group * heads_per_item, layer.v_dim);
          }
          plan.items.push_back(it);
        }
      }
    }
  }
  if (partials_.size() < partial) partials_.resize(partial);  // shared: one call runs at a time
  plan.group = layer.group, plan.q_heads = layer.q_heads, plan.kv_heads = kv_heads;
  plan.v_dim = layer.v_dim, plan.window = layer.window, plan.chunk = layer.chunk;
  plan.ready = true;
}

uint64_t CpuKernels::planned_keys(uint32_t group) const {
  uint64_t keys = 0;
  for (const GroupPlan &plan : plans_)
    if (plan.ready && plan.group == group)
      for (const AttnItem &it : plan.items) keys += it.key1 - it.key0;
  return keys;
}

// The step's plan for the layer's group, shape and window: found, or made (in a slot a previous
// step left, so its vectors' memory is reused).
CpuKernels::GroupPlan &CpuKernels::plan_for(const CpuStep &step, const CpuLayer &layer) {
  for (GroupPlan &plan : plans_)
    if (plan.fits(layer)) return plan;
  reserve_scratch(layer.q_heads, layer.kv_heads, layer.head_dim, layer.v_dim);
  for (GroupPlan &plan : plans_)
    if (!plan.ready) return plan_group(step, layer, plan), plan;
  plans_.emplace_back();
  plan_group(step, layer, plans_.back());
  return plans_.back();
}

void CpuKernels::attention(const CpuStep &step, const CpuLayer &layer) {
  PKV_ASSERT(layer.group < step.num_groups && layer.kv_heads &&
             layer.q_heads % layer.kv_heads == 0);
  PKV_ASSERT(!(layer.window && layer.chunk));
  const GroupPlan &plan = plan_for(step, layer);
  const AttnWork work{plan.items.data(),       plan.items.size(), plan.split_tiles.data(),
                      plan.split_tiles.size(), partials_.data(),  scratch_ptrs_.data()};
  variant_.attention(step, layer, work, pool_);
}

// New rows into their slots of the layer's group: copied, or rounded to fp8 head by head (each
// head's scale). MLA and K = V: the latents (k) alone. A slot is (block, offset in the block):
// blocks are block_stride apart in a strided pool layout.
void CpuKernels::write_kv(const CpuStep &step, const CpuLayer &layer) {
  const size_t elt = layer.dtype == PKV_DTYPE_F32 ? 4 : 2, cache_elt = layer.cache_elt();
  const bool fp8 = layer.kv_dtype == PKV_DTYPE_FP8_E4M3 || layer.kv_dtype == PKV_DTYPE_FP8_E5M2;
  const uint32_t heads = layer.kv_heads, bs = step.block_size;
  const uint32_t width[2] = {layer.head_dim, layer.v_dim};  // of k's and v's heads
  const uint64_t block_elts[2] = {layer.k_block_elts(bs), layer.v_block_elts(bs)};
  const size_t row = size_t(heads) * std::max(width[0], width[1]) * elt;
  const size_t per_item = std::max<size_t>(1, (64 << 10) / row);  // ~64 KiB of rows per item
  const size_t n_items = (step.num_tokens + per_item - 1) / per_item;
  const int64_t *slots = step.slot_mapping(layer.group);
  const bool has_v = layer.v != nullptr;
  pool_.parallel_for(n_items, [&](size_t i, uint32_t) {
    const size_t end = std::min<size_t>(step.num_tokens, (i + 1) * per_item);
    for (size_t t = i * per_item; t < end; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;
      for (int x = 0; x < 1 + has_v; ++x) {
        const size_t head = size_t(width[x]) * elt, src_row = heads * head;
        const uint64_t at =
            uint64_t(slot / bs) * block_elts[x] + uint64_t(slot % bs) * heads * width[x];
        char *dst = static_cast<char *>(x ? layer.v_cache : layer.k_cache) + at * cache_elt;
        const char *src = static_cast<const char *>(x ? layer.v : layer.k) + t * src_row;
        if (!fp8) {
          std::memcpy(dst, src, src_row);
          continue;
        }
        const float *scale = x ? layer.v_scale : layer.k_scale;
        for (uint32_t h = 0; h < heads; ++h)
          variant_.quantize(src + h * head, layer.dtype, layer.kv_dtype,
                            reinterpret_cast<uint8_t *>(dst) + size_t(h) * width[x], width[x],
                            scale[h]);
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
