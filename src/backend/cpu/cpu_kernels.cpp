// CPU paged attention. Work items are (sequence, kv head, tile of new tokens, range of keys);
// an item reads its keys' K/V once for all q heads of the kv head and all rows of its tile.
// Sequences with long contexts and few rows are split over keys, and a merge pass combines the
// splits' (max, sum, acc). Inner loops are written for the compiler's vectorizer (head_dim is a
// multiple of 8; lanes of 8), exp is a branch-free polynomial so it vectorizes too.
#include "backend/cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/dtype_cvt.h"
#include "pkv/pkv.h"

namespace pkv {
namespace {

constexpr uint32_t kChunk = 32;      // keys converted to fp32 at a time (16 KiB at head_dim 128)
constexpr uint32_t kPrefillRows = 16;  // new tokens per item when a sequence has several
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Item {
  uint32_t seq, head, row0, rows, key0, key1;
  int64_t part;  // offset of its partial in partials_, or -1: write out directly
  uint32_t num_splits;
};

inline float dot(const float *a, const float *b, uint32_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (uint32_t d = 0; d < n; d += 8)
    for (uint32_t j = 0; j < 8; ++j) lanes[j] += a[d + j] * b[d + j];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

struct Shape {
  uint32_t hd, group, q_heads, kv_heads, bs;
  size_t item_floats(uint32_t rows) const { return size_t(rows) * group * (hd + 2); }
};

// Scratch of one thread: q (scaled) and acc [rows][group][hd], m and l [rows][group],
// K and V chunks [kChunk][hd], probabilities [rows][group][kChunk].
struct Scratch {
  float *q, *acc, *m, *l, *kf, *vf, *p;
  static size_t floats(const Shape &s) {
    const size_t rg = size_t(kPrefillRows) * s.group;
    return 2 * rg * s.hd + 2 * rg + 2 * size_t(kChunk) * s.hd + rg * kChunk;
  }
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
    std::fill(w.acc, w.acc + size_t(rg) * hd, 0.0f);
    std::fill(w.m, w.m + rg, kNegInf);
    std::fill(w.l, w.l + rg, 0.0f);
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

// The items of one call
// The items of one call: tiles of new tokens per (sequence, kv head), split over keys so that
// about 4 items per thread exist (a decode of one long sequence still uses every core).
std::vector<Item> plan_items(const CpuStep &step, const Shape &s, uint32_t num_threads, size_t *partial_floats) {
  std::vector<Item> items;
  uint64_t total_keys = 0;
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    total_keys += uint64_t(step.context_lens[i]) * s.kv_heads * ((qlen + kPrefillRows - 1) / kPrefillRows);
  }
  const uint64_t target = 4ull * num_threads;
  uint64_t split = std::max<uint64_t>(512, (total_keys + target - 1) / target);
  split = (split + kChunk - 1) / kChunk * kChunk;
  size_t partial = 0;
  for (uint32_t i = 0; i < step.num_seqs; ++i) {
    const uint32_t qlen = step.query_start[i + 1] - step.query_start[i];
    const uint32_t ctx = step.context_lens[i];
    for (uint32_t row0 = 0; row0 < qlen; row0 += kPrefillRows) {
      const uint32_t rows = std::min(kPrefillRows, qlen - row0);
      const uint32_t keys = ctx - qlen + row0 + rows;  // the tile's last row sees this many
      const uint32_t splits = static_cast<uint32_t>((keys + split - 1) / split);
      for (uint32_t h = 0; h < s.kv_heads; ++h)
        for (uint32_t k = 0; k < splits; ++k) {
          Item it{i, h, row0, rows, static_cast<uint32_t>(k * split),
                  static_cast<uint32_t>(std::min<uint64_t>(keys, (k + 1) * split)), -1, splits};
          if (splits > 1) {
            it.part = static_cast<int64_t>(partial);
            partial += s.item_floats(rows);
          }
          items.push_back(it);
        }
    }
  }
  *partial_floats = partial;
  return items;
}

// Combines the splits of one (sequence, kv head, tile): items[first .. first + splits).
template <class T> void merge(const std::vector<Item> &items, size_t first, const float *partials,
                              const CpuStep &step, const CpuLayer &layer, const Shape &s, float *acc) {
  const Item &it0 = items[first];
  const uint32_t rg = it0.rows * s.group, hd = s.hd, splits = it0.num_splits;
  const uint32_t token0 = step.query_start[it0.seq] + it0.row0;
  for (uint32_t i = 0; i < rg; ++i) {
    float mx = -std::numeric_limits<float>::infinity();
    for (uint32_t k = 0; k < splits; ++k) mx = std::max(mx, partials[items[first + k].part + i]);
    float l = 0.0f;
    std::fill(acc, acc + hd, 0.0f);
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
void attention_typed(const CpuStep &step, const CpuLayer &layer, ThreadPool &pool,
                     std::vector<float> &partials, std::vector<std::vector<float>> &scratch) {
  const Shape s{layer.head_dim, layer.q_heads / layer.kv_heads, layer.q_heads, layer.kv_heads, step.block_size};
  size_t partial_floats = 0;
  const std::vector<Item> items = plan_items(step, s, pool.num_threads(), &partial_floats);
  if (partials.size() < partial_floats) partials.resize(partial_floats);
  scratch.resize(pool.num_threads());
  for (auto &sc : scratch)
    if (sc.size() < Scratch::floats(s)) sc.resize(Scratch::floats(s));
  const ItemRunner<T> runner{step, layer, s};
  pool.parallel_for(items.size(), [&](size_t i, uint32_t thread) {
    Scratch w(scratch[thread].data(), s);
    const Item &it = items[i];
    runner.run(it, w, it.part >= 0 ? partials.data() + it.part : nullptr, layer.out);
  });
  std::vector<size_t> groups;  // first item of each split (sequence, head, tile)
  for (size_t i = 0; i < items.size(); i += items[i].num_splits)
    if (items[i].num_splits > 1) groups.push_back(i);
  pool.parallel_for(groups.size(), [&](size_t g, uint32_t thread) {
    merge<T>(items, groups[g], partials.data(), step, layer, s, scratch[thread].data());
  });
}

}  // namespace

void CpuKernels::attention(const CpuStep &step, const CpuLayer &layer) {
  switch (layer.dtype) {
    case PKV_DTYPE_F32: return attention_typed<float>(step, layer, pool_, partials_, scratch_);
    case PKV_DTYPE_F16: return attention_typed<_Float16>(step, layer, pool_, partials_, scratch_);
    default: return attention_typed<Bf16>(step, layer, pool_, partials_, scratch_);
  }
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

void CpuKernels::copy_blocks(void *k_pool, void *v_pool, uint32_t num_layers, uint64_t layer_bytes,
                             uint64_t block_bytes, const int32_t *src, const int32_t *dst, uint32_t n) {
  pool_.parallel_for(size_t(num_layers) * 2, [&](size_t i, uint32_t) {
    char *base = static_cast<char *>(i % 2 ? v_pool : k_pool) + (i / 2) * layer_bytes;
    for (uint32_t c = 0; c < n; ++c)  // in order: chained copies read earlier destinations
      std::memmove(base + uint64_t(dst[c]) * block_bytes, base + uint64_t(src[c]) * block_bytes, block_bytes);
  });
}

}  // namespace pkv
