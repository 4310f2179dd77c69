// CPU paged attention, compiled once per instruction-set variant (PKV_CPU_VARIANT names the
// namespace; meson builds a baseline and, on x86-64, an AVX2+FMA+F16C one picked at run time).
// Everything here has internal linkage or lives in the variant's namespace, and no out-of-line
// library template (vector growth, std::fill) is instantiated: the linker merges such copies
// across variants and could give the baseline an AVX2 body. The caller sizes the buffers. Work items are (sequence, kv head, tile of new tokens, range of keys);
// an item reads its keys' K/V once for all q heads of the kv head and all rows of its tile.
// Sequences with long contexts and few rows are split over keys, and a merge pass combines the
// splits' (max, sum, acc). Inner loops are written for the compiler's vectorizer (head_dim is a
// multiple of 8; lanes of 8), exp is a branch-free polynomial so it vectorizes too.
#include "backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "pkv/pkv.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
}  // namespace PKV_CPU_VARIANT
}  // namespace pkv

#include "backend/cpu/dtype_cvt.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
namespace {

inline void fill(float *p, size_t n, float value) {
  for (size_t i = 0; i < n; ++i) p[i] = value;
}

constexpr uint32_t kChunk = kAttnChunk;
constexpr uint32_t kPrefillRows = kAttnPrefillRows;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using Item = AttnItem;

inline float dot(const float *a, const float *b, uint32_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t d = 0; d < n; d += 8)
    for (uint32_t j = 0; j < 8; ++j) lanes[j] += a[d + j] * b[d + j];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

struct Shape {
  uint32_t hd, group, q_heads, kv_heads, bs;
};

// Scratch of one thread: q (scaled) and acc [rows][group][hd], m and l [rows][group],
// K and V chunks [kChunk][hd], probabilities [rows][group][kChunk].
struct Scratch {
  float *q, *acc, *m, *l, *kf, *vf, *p;
  Scratch(float *base, const Shape &s) {
    const size_t rg = size_t(kPrefillRows) * s.group;
    q = base;
    acc = q + rg * s.hd;
    m = acc + rg * s.hd;
    l = m + rg;
    kf = l + rg;
    vf = kf + size_t(kChunk) * s.hd;
    p = vf + size_t(kChunk) * s.hd;
  }
};

template <class T> struct ItemRunner {
  const CpuStep &step;
  const CpuLayer &layer;
  const Shape &s;

  // Loads the keys [key, key + n) of seq's kv head `head` from the paged cache into dst.
  void load_rows(const void *cache, uint32_t seq, uint32_t head, uint32_t key, uint32_t n, float *dst) const {
    const int32_t *blocks = step.block_indices + step.block_indptr[seq];
    for (uint32_t t = 0; t < n; ++t) {
      const uint32_t pos = key + t;
      const int64_t slot = int64_t(blocks[pos / s.bs]) * s.bs + pos % s.bs;
      const T *src = static_cast<const T *>(cache) + (slot * s.kv_heads + head) * s.hd;
      to_float(src, dst + size_t(t) * s.hd, s.hd);
    }
  }

  void run(const Item &it, Scratch &w, float *partial, void *out) const {
    const uint32_t hd = s.hd, rg = it.rows * s.group;
    const uint32_t qlen = step.query_start[it.seq + 1] - step.query_start[it.seq];
    const uint32_t first_pos = step.context_lens[it.seq] - qlen + it.row0;  // of row 0
    const uint32_t token0 = step.query_start[it.seq] + it.row0;
    for (uint32_t r = 0; r < it.rows; ++r) {
      const T *qrow = static_cast<const T *>(layer.q) + (size_t(token0 + r) * s.q_heads + size_t(it.head) * s.group) * hd;
      to_float(qrow, w.q + size_t(r) * s.group * hd, s.group * hd);
    }
    for (uint32_t i = 0; i < rg * hd; ++i) w.q[i] *= layer.scale;
    fill(w.acc, size_t(rg) * hd, 0.0f);
    fill(w.m, rg, kNegInf);
    fill(w.l, rg, 0.0f);
    for (uint32_t key = it.key0; key < it.key1; key += kChunk) {
      const uint32_t n = std::min(kChunk, it.key1 - key);
      load_rows(layer.k_cache, it.seq, it.head, key, n, w.kf);
      for (uint32_t r = 0; r < it.rows; ++r) {
        // Causal: row r sits at first_pos + r and sees keys up to it.
        const int64_t visible = int64_t(first_pos + r) - key + 1;
        const uint32_t lim = visible <= 0 ? 0 : std::min<uint32_t>(n, uint32_t(visible));
        for (uint32_t g = 0; g < s.group; ++g) softmax_update(w, r * s.group + g, lim, n);
      }
      load_rows(layer.v_cache, it.seq, it.head, key, n, w.vf);
      for (uint32_t i = 0; i < rg; ++i) {
        float *acc = w.acc + size_t(i) * hd;
        const float *p = w.p + size_t(i) * kChunk;
        for (uint32_t t = 0; t < n; ++t) {
          const float pt = p[t];
          const float *v = w.vf + size_t(t) * hd;
          for (uint32_t d = 0; d < hd; ++d) acc[d] += pt * v[d];
        }
      }
    }
    if (partial) {
      std::memcpy(partial, w.m, rg * sizeof(float));
      std::memcpy(partial + rg, w.l, rg * sizeof(float));
      std::memcpy(partial + 2 * rg, w.acc, size_t(rg) * hd * sizeof(float));
      return;
    }
    for (uint32_t r = 0; r < it.rows; ++r) {
      T *orow = static_cast<T *>(out) + (size_t(token0 + r) * s.q_heads + size_t(it.head) * s.group) * hd;
      for (uint32_t g = 0; g < s.group; ++g) {
        const uint32_t i = r * s.group + g;
        const float inv = w.l[i] > 0 ? 1.0f / w.l[i] : 0.0f;
        from_float_scaled(w.acc + size_t(i) * hd, inv, orow + size_t(g) * hd, hd);
      }
    }
  }

  // Scores of (row, head) i against the chunk's first lim keys; rescales its running state and
  // leaves the chunk's probabilities in w.p (0 past lim).
  void softmax_update(Scratch &w, uint32_t i, uint32_t lim, uint32_t n) const {
    float *p = w.p + size_t(i) * kChunk;
    const float *q = w.q + size_t(i) * s.hd;
    float mx = kNegInf;
    for (uint32_t t = 0; t < lim; ++t) {
      p[t] = dot(q, w.kf + size_t(t) * s.hd, s.hd);
      mx = std::max(mx, p[t]);
    }
    for (uint32_t t = lim; t < n; ++t) p[t] = 0.0f;
    if (lim == 0) return;
    const float m_new = std::max(w.m[i], mx);
    const float alpha = w.m[i] == kNegInf ? 0.0f : fast_exp(w.m[i] - m_new);
    float sum = 0.0f;
    for (uint32_t t = 0; t < lim; ++t) {
      p[t] = fast_exp(p[t] - m_new);
      sum += p[t];
    }
    w.l[i] = w.l[i] * alpha + sum;
    w.m[i] = m_new;
    float *acc = w.acc + size_t(i) * s.hd;
    for (uint32_t d = 0; d < s.hd; ++d) acc[d] *= alpha;
  }
};

// Combines the splits of one (sequence, kv head, tile): items[first .. first + splits).
template <class T> void merge(const Item *items, size_t first, const float *partials,
                              const CpuStep &step, const CpuLayer &layer, const Shape &s, float *acc) {
  const Item &it0 = items[first];
  const uint32_t rg = it0.rows * s.group, hd = s.hd, splits = it0.num_splits;
  const uint32_t token0 = step.query_start[it0.seq] + it0.row0;
  for (uint32_t i = 0; i < rg; ++i) {
    float mx = -std::numeric_limits<float>::infinity();
    for (uint32_t k = 0; k < splits; ++k) mx = std::max(mx, partials[items[first + k].part + i]);
    float l = 0.0f;
    fill(acc, hd, 0.0f);
    for (uint32_t k = 0; k < splits; ++k) {
      const float *p = partials + items[first + k].part;
      if (p[rg + i] == 0.0f) continue;  // a split past this row's position: no keys
      const float w = fast_exp(p[i] - mx);
      l += p[rg + i] * w;
      const float *a = p + 2 * rg + size_t(i) * hd;
      for (uint32_t d = 0; d < hd; ++d) acc[d] += a[d] * w;
    }
    const uint32_t r = i / s.group, g = i % s.group;
    T *orow = static_cast<T *>(layer.out) + (size_t(token0 + r) * s.q_heads + size_t(it0.head) * s.group + g) * hd;
    from_float_scaled(acc, l > 0 ? 1.0f / l : 0.0f, orow, hd);
  }
}

template <class T>
void attention_typed(const CpuStep &step, const CpuLayer &layer, const AttnWork &work, ThreadPool &pool) {
  const Shape s{layer.head_dim, layer.q_heads / layer.kv_heads, layer.q_heads, layer.kv_heads, step.block_size};
  const ItemRunner<T> runner{step, layer, s};
  pool.parallel_for(work.num_items, [&](size_t i, uint32_t thread) {
    Scratch w(work.scratch[thread], s);
    const Item &it = work.items[i];
    runner.run(it, w, it.part >= 0 ? work.partials + it.part : nullptr, layer.out);
  });
  pool.parallel_for(work.num_groups, [&](size_t g, uint32_t thread) {
    merge<T>(work.items, work.groups[g], work.partials, step, layer, s, work.scratch[thread]);
  });
}

}  // namespace

void attention(const CpuStep &step, const CpuLayer &layer, const AttnWork &work, ThreadPool &pool) {
  switch (layer.dtype) {
    case PKV_DTYPE_F32: return attention_typed<float>(step, layer, work, pool);
    case PKV_DTYPE_F16: return attention_typed<_Float16>(step, layer, work, pool);
    default: return attention_typed<Bf16>(step, layer, work, pool);
  }
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
