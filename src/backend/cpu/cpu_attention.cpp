// CPU paged attention, compiled once per instruction-set variant (PKV_CPU_VARIANT names the
// namespace; src/meson.build lists the variants, cpu_kernels.cpp picks one at run time). This is
// the generic item runner: it hands an item to the variant's decode or prefill kernel
// (cpu_decode.cpp, cpu_prefill.cpp) when that has a path for it, and runs it itself otherwise.
// Everything here has internal linkage or lives in the variant's namespace, and no out-of-line
// library template (vector growth, std::fill) is instantiated: the linker merges such copies
// across variants and could give the baseline an AVX2 body. The caller sizes the buffers.
// Work items are (sequence, kv head, tile of new tokens, range of keys); an item reads its keys'
// K/V once for all q heads of the kv head and all rows of its tile.
// Sequences with long contexts and few rows are split over keys, and a merge pass combines the
// splits' (max, sum, acc). Inner loops are written for the compiler's vectorizer (head_dim is a
// multiple of 8; lanes of 8), exp is a branch-free polynomial so it vectorizes too.
// Templates take the model's dtype T (q, out) and the cache's C (T, or fp8: its rows are
// converted to floats times their head's scale as they are loaded, fp8.h).
// A sliding window masks each row's keys below its position - window + 1, a chunked layer those
// before its chunk; an item's keys are those of its rows' windows (chunks) only, so blocks wholly
// outside them are never read.
// MLA (layer.mla) and K = V: K is the latent (head_dim values), V its first v_dim values, out
// v_dim per head: a chunk's latents are converted once and serve as both.
// Soft-capping (layer.softcap c) turns each scaled score s into c tanh(s / c) (std::tanh) before
// the softmax; sinks (layer.sinks) join each row's denominator once, when its output is written
// (a split item's partial leaves it to the merge). Both are decided once per item: without them
// the loops are today's.
#include "backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "pkv/pkv.h"

#include "backend/cpu/dtype_cvt.h"
#include "backend/cpu/fp8.h"
#include "backend/cpu/vec8.h"

namespace pkv {
namespace PKV_CPU_VARIANT {
namespace {

inline void fill(float *p, size_t n, float value) {
  for (size_t i = 0; i < n; ++i) p[i] = value;
}

constexpr uint32_t kChunk = kAttnChunk;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using Item = AttnItem;

// n is a multiple of 8 (head_dim).
inline float dot(const float *a, const float *b, uint32_t n) {
  v8f acc0 = splat(0.0f), acc1 = splat(0.0f);
  uint32_t d = 0;
  for (; d + 16 <= n; d += 16) {
    acc0 += load8(a + d) * load8(b + d);
    acc1 += load8(a + d + 8) * load8(b + d + 8);
  }
  if (d < n) acc0 += load8(a + d) * load8(b + d);
  return hsum(acc0 + acc1);
}

// q against four keys of stride `stride` at once: q is loaded once per four products, and eight
// independent accumulators (two per key) hide the multiply-add latency.
inline void dot4(const float *q, const float *k, size_t stride, uint32_t n, float *out) {
  v8f a0 = splat(0.0f), a1 = splat(0.0f), a2 = splat(0.0f), a3 = splat(0.0f);
  v8f b0 = splat(0.0f), b1 = splat(0.0f), b2 = splat(0.0f), b3 = splat(0.0f);
  uint32_t d = 0;
  for (; d + 16 <= n; d += 16) {
    const v8f qa = load8(q + d), qb = load8(q + d + 8);
    a0 += qa * load8(k + d);
    b0 += qb * load8(k + d + 8);
    a1 += qa * load8(k + stride + d);
    b1 += qb * load8(k + stride + d + 8);
    a2 += qa * load8(k + 2 * stride + d);
    b2 += qb * load8(k + 2 * stride + d + 8);
    a3 += qa * load8(k + 3 * stride + d);
    b3 += qb * load8(k + 3 * stride + d + 8);
  }
  if (d < n) {
    const v8f qa = load8(q + d);
    a0 += qa * load8(k + d);
    a1 += qa * load8(k + stride + d);
    a2 += qa * load8(k + 2 * stride + d);
    a3 += qa * load8(k + 3 * stride + d);
  }
  out[0] = hsum(a0 + b0);
  out[1] = hsum(a1 + b1);
  out[2] = hsum(a2 + b2);
  out[3] = hsum(a3 + b3);
}

// Converts n elements (a multiple of 8) of a dtype to floats; fp8 codes also times their scale.
template <class T> inline void convert_row(const T *src, float *dst, uint32_t n, float = 1.0f) {
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, load8(src + d));
}
template <> inline void convert_row(const float *src, float *dst, uint32_t n, float) {
  std::memcpy(dst, src, n * sizeof(float));
}
template <> inline void convert_row(const Fp8E4M3 *src, float *dst, uint32_t n, float scale) {
  fp8_row(src, dst, n, scale);
}
template <> inline void convert_row(const Fp8E5M2 *src, float *dst, uint32_t n, float scale) {
  fp8_row(src, dst, n, scale);
}

// acc = acc * alpha + sum over t < n of p[t] * v[t] (hd values, rows `stride` apart), for one
// (row, head): acc stays in eight registers (64 lanes) while the keys stream past — eight
// independent chains, enough to keep both FMA units busy despite their latency.
inline void accumulate(float *acc, float alpha, const float *p, const float *v, uint32_t n,
                       uint32_t hd, size_t stride) {
  const v8f a = splat(alpha);
  uint32_t d = 0;
  for (; d + 64 <= hd; d += 64) {
    v8f r[8];
    for (int j = 0; j < 8; ++j) r[j] = load8(acc + d + 8 * j) * a;
    for (uint32_t t = 0; t < n; ++t) {
      const v8f pt = splat(p[t]);
      const float *row = v + size_t(t) * stride + d;
      for (int j = 0; j < 8; ++j) r[j] += pt * load8(row + 8 * j);
    }
    for (int j = 0; j < 8; ++j) store8(acc + d + 8 * j, r[j]);
  }
  for (; d < hd; d += 8) {  // the rest (head_dim 40, 72, 80, ...): two chains over even/odd keys
    v8f r0 = load8(acc + d) * a, r1 = splat(0.0f);
    uint32_t t = 0;
    for (; t + 2 <= n; t += 2) {
      r0 += splat(p[t]) * load8(v + size_t(t) * stride + d);
      r1 += splat(p[t + 1]) * load8(v + size_t(t + 1) * stride + d);
    }
    if (t < n) r0 += splat(p[t]) * load8(v + size_t(t) * stride + d);
    store8(acc + d, r0 + r1);
  }
}

struct Shape {
  uint32_t hd, group, q_heads, kv_heads, bs;
  uint32_t vd;                // V's and out's values per head (MLA: the latent's first vd)
  uint32_t vrow;              // V's values per head in its cache rows (MLA, K = V: hd)
  uint64_t k_block, v_block;  // elements from one block of K (V) to the next
  bool kv_same;               // V's rows are K's (MLA, K = V): one conversion serves both
};

// Scratch of one thread, for an item's rows x q heads (at most max_q of them): q (scaled) and
// acc [rows][q heads][hd] (acc uses vd of each hd), m, l and alpha [rows][q heads], K and V
// chunks [kChunk][hd], probabilities [rows][q heads][kChunk].
struct Scratch {
  float *q, *acc, *m, *l, *alpha, *kf, *vf, *p;
  Scratch(float *base, const Shape &s) {  // CpuKernels sizes it for max(hd, vd) per head
    const size_t rg = attention_max_q(s.q_heads, s.kv_heads), wide = std::max(s.hd, s.vrow);
    q = base;
    acc = q + rg * wide;
    m = acc + rg * wide;
    l = m + rg;
    alpha = l + rg;
    kf = alpha + rg;
    vf = kf + size_t(kChunk) * wide;
    p = vf + size_t(kChunk) * wide;
  }
};

// T: q and out; C: the caches.
template <class T, class C> struct ItemRunner {
  const CpuStep &step;
  const CpuLayer &layer;
  const Shape &s;

  // Element offset of key pos's row of kv head `head` in a cache of `width` values per head
  // and blocks `block` elements apart.
  size_t row_at(const int32_t *blocks, uint32_t pos, uint32_t head, uint32_t width,
                uint64_t block) const {
    return int64_t(blocks[pos / s.bs]) * int64_t(block) +
           (size_t(pos % s.bs) * s.kv_heads + head) * width;
  }
  // Loads the keys [key, key + n) of seq's kv head `head` from the paged cache (K: v false) into
  // dst, rows of hd (K) or vrow (V) floats (fp8: times the head's scale in `scales`).
  void load_rows(bool v, const float *scales, uint32_t seq, uint32_t head, uint32_t key, uint32_t n,
                 float *dst) const {
    const int32_t *blocks = step.block_table(layer.group, seq);
    const float scale = kIsFp8<C> ? scales[head] : 1.0f;
    const C *cache = static_cast<const C *>(v ? layer.v_cache : layer.k_cache);
    const uint32_t width = v ? s.vrow : s.hd;
    const uint64_t block = v ? s.v_block : s.k_block;
    for (uint32_t t = 0; t < n; ++t)
      convert_row(cache + row_at(blocks, key + t, head, width, block), dst + size_t(t) * width,
                  width, scale);
  }

  // Starts loading the K and V rows of keys [key, key + n): a kv head's row is a short run
  // (head_dim elements) every kv_heads * head_dim, a stride the hardware prefetchers follow
  // poorly, so the next chunk is requested while this one computes.
  void prefetch_rows(const Item &it, uint32_t key, uint32_t n) const {
    const int32_t *blocks = step.block_table(layer.group, it.seq);
    const size_t bytes = size_t(it.num_heads) * s.hd * sizeof(C);  // the item's heads are adjacent
    const size_t v_bytes = size_t(it.num_heads) * s.vrow * sizeof(C);
    for (uint32_t t = 0; t < n; ++t) {
      const char *k =
          reinterpret_cast<const char *>(static_cast<const C *>(layer.k_cache) +
                                         row_at(blocks, key + t, it.head, s.hd, s.k_block));
      const char *v =
          reinterpret_cast<const char *>(static_cast<const C *>(layer.v_cache) +
                                         row_at(blocks, key + t, it.head, s.vrow, s.v_block));
      for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(k + b);
      if (!s.kv_same)
        for (size_t b = 0; b < v_bytes; b += 64) __builtin_prefetch(v + b);
    }
  }

  void run(const Item &it, Scratch &w, float *partial, void *out) const {
    // State index i = r * qh + j: row r, the item's q head j (kv head it.head + j / group).
    const uint32_t hd = s.hd, vd = s.vd, qh = it.num_heads * s.group, rg = it.rows * qh;
    const uint32_t qlen = step.query_start[it.seq + 1] - step.query_start[it.seq];
    const uint32_t first_pos = step.context_lens[it.seq] - qlen + it.row0;  // of row 0
    const uint32_t token0 = step.query_start[it.seq] + it.row0;
    for (uint32_t r = 0; r < it.rows; ++r) {
      const T *qrow = static_cast<const T *>(layer.q) +
                      (size_t(token0 + r) * s.q_heads + size_t(it.head) * s.group) * hd;
      convert_row(qrow, w.q + size_t(r) * qh * hd, qh * hd);
    }
    const v8f scale = splat(layer.scale);
    for (uint32_t i = 0; i < rg * hd; i += 8) store8(w.q + i, load8(w.q + i) * scale);
    fill(w.acc, size_t(rg) * vd, 0.0f);
    fill(w.m, rg, kNegInf);
    fill(w.l, rg, 0.0f);
    // Two chunks in flight ahead of the one computing.
    prefetch_rows(it, it.key0, std::min(2 * kChunk, it.key1 - it.key0));
    for (uint32_t key = it.key0; key < it.key1; key += kChunk) {
      const uint32_t n = std::min(kChunk, it.key1 - key);
      const uint32_t ahead = key + 2 * kChunk;
      if (ahead < it.key1) prefetch_rows(it, ahead, std::min(kChunk, it.key1 - ahead));
      for (uint32_t hh = 0; hh < it.num_heads; ++hh) {
        load_rows(false, layer.k_scale, it.seq, it.head + hh, key, n, w.kf);
        for (uint32_t r = 0; r < it.rows; ++r) {
          // Row r sits at first_pos + r and sees keys up to it, from its window's (chunk's) first.
          const uint32_t pos = first_pos + r;
          const uint32_t first = layer.first_key(pos);
          const uint32_t lo = first > key ? std::min(n, first - key) : 0;
          const uint32_t hi = pos >= key ? std::min(n, pos - key + 1) : 0;
          for (uint32_t g = 0; g < s.group; ++g)
            softmax_update(w, r * qh + hh * s.group + g, lo, hi, n);
        }
        // MLA, K = V: V is the latents just converted, their first vd values.
        if (!s.kv_same) load_rows(true, layer.v_scale, it.seq, it.head + hh, key, n, w.vf);
        const float *vf = s.kv_same ? w.kf : w.vf;
        for (uint32_t r = 0; r < it.rows; ++r)
          for (uint32_t g = 0; g < s.group; ++g) {
            const uint32_t i = r * qh + hh * s.group + g;
            accumulate(w.acc + size_t(i) * vd, w.alpha[i], w.p + size_t(i) * kChunk, vf, n, vd,
                       s.vrow);
          }
      }
    }
    if (partial) {
      std::memcpy(partial, w.m, rg * sizeof(float));
      std::memcpy(partial + rg, w.l, rg * sizeof(float));
      std::memcpy(partial + 2 * rg, w.acc, size_t(rg) * vd * sizeof(float));
      return;
    }
    for (uint32_t r = 0; r < it.rows; ++r) {
      T *orow =
          static_cast<T *>(out) + (size_t(token0 + r) * s.q_heads + size_t(it.head) * s.group) * vd;
      for (uint32_t j = 0; j < qh; ++j) {
        const uint32_t i = r * qh + j;
        const float inv = layer.sinks
                              ? sink_scale(w.m[i], w.l[i], layer.sinks[it.head * s.group + j])
                          : w.l[i] > 0 ? 1.0f / w.l[i]
                                       : 0.0f;
        from_float_scaled(w.acc + size_t(i) * vd, inv, orow + size_t(j) * vd, vd);
      }
    }
  }

  // Scores of (row, head) i against the chunk's keys [lo, hi): leaves the chunk's
  // probabilities in w.p (0 outside) and the rescale of its running state in w.alpha.
  void softmax_update(Scratch &w, uint32_t i, uint32_t lo, uint32_t hi, uint32_t n) const {
    float *p = w.p + size_t(i) * kChunk;
    const float *q = w.q + size_t(i) * s.hd;
    w.alpha[i] = 1.0f;
    for (uint32_t t = 0; t < kChunk; ++t) p[t] = kNegInf;
    if (lo >= hi) {
      for (uint32_t t = 0; t < n; ++t) p[t] = 0.0f;
      return;
    }
    uint32_t t = lo;
    for (; t + 4 <= hi; t += 4) dot4(q, w.kf + size_t(t) * s.hd, s.hd, s.hd, p + t);
    for (; t < hi; ++t) p[t] = dot(q, w.kf + size_t(t) * s.hd, s.hd);
    if (layer.softcap > 0.0f)
      for (t = lo; t < hi; ++t) p[t] = layer.softcap * std::tanh(p[t] / layer.softcap);
    float mx = kNegInf;
    for (t = lo; t < hi; ++t) mx = std::max(mx, p[t]);
    const float m_new = std::max(w.m[i], mx);
    w.alpha[i] = w.m[i] == kNegInf ? 0.0f : fast_exp(w.m[i] - m_new);
    const v8f m = splat(m_new);
    v8f sum = splat(0.0f);
    for (uint32_t t = 0; t < n;
         t += 8) {  // kChunk is a multiple of 8; outside [lo, hi) exp gives 0
      const v8f e = exp8(load8(p + t) - m);
      store8(p + t, e);
      sum += e;
    }
    w.l[i] = w.l[i] * w.alpha[i] + hsum(sum);
    w.m[i] = m_new;
  }
};

// Combines the splits of one (sequence, kv head, tile): items[first .. first + splits).
template <class T>
void merge(const Item *items, size_t first, const float *partials, const CpuStep &step,
           const CpuLayer &layer, const Shape &s, float *acc) {
  const Item &it0 = items[first];
  const uint32_t qh = it0.num_heads * s.group, rg = it0.rows * qh, hd = s.vd,
                 splits = it0.num_splits;
  const uint32_t token0 = step.query_start[it0.seq] + it0.row0;
  for (uint32_t i = 0; i < rg; ++i) {
    float mx = kNegInf;
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
    const uint32_t r = i / qh, j = i % qh, head = it0.head * s.group + j;
    T *orow = static_cast<T *>(layer.out) + (size_t(token0 + r) * s.q_heads + head) * hd;
    const float inv = layer.sinks ? sink_scale(mx, l, layer.sinks[head]) : l > 0 ? 1.0f / l : 0.0f;
    from_float_scaled(acc, inv, orow, hd);
  }
}

template <class T, class C>
void attention_typed(const CpuStep &step, const CpuLayer &layer, const AttnWork &work,
                     ThreadPool &pool) {
  const bool kv_same = layer.v_cache == layer.k_cache && layer.v_scale == layer.k_scale;
  const Shape s{layer.head_dim,
                layer.q_heads / layer.kv_heads,
                layer.q_heads,
                layer.kv_heads,
                step.block_size,
                layer.v_dim,
                layer.v_row(),
                layer.k_block_elts(step.block_size),
                layer.v_block_elts(step.block_size),
                kv_same};
  const ItemRunner<T, C> runner{step, layer, s};
  pool.parallel_for(work.num_items, [&](size_t i, uint32_t thread) {
    const Item &it = work.items[i];
    float *partial = it.part >= 0 ? work.partials + it.part : nullptr;
    // MLA: a decode's 128 q heads over one latent are a tile of the prefill kernel's shape.
    if (it.rows == 1 && !layer.mla ? decode_item(step, layer, it, work.scratch[thread], partial)
                                   : prefill_item(step, layer, it, work.scratch[thread], partial))
      return;
    Scratch w(work.scratch[thread], s);
    runner.run(it, w, partial, layer.out);
  });
  pool.parallel_for(work.num_split_tiles, [&](size_t g, uint32_t thread) {
    merge<T>(work.items, work.split_tiles[g], work.partials, step, layer, s, work.scratch[thread]);
  });
}

// The cache's type for a model dtype T.
template <class T>
void attention_model(const CpuStep &step, const CpuLayer &layer, const AttnWork &work,
                     ThreadPool &pool) {
  switch (layer.kv_dtype) {
    case PKV_DTYPE_FP8_E4M3:
      return attention_typed<T, Fp8E4M3>(step, layer, work, pool);
    case PKV_DTYPE_FP8_E5M2:
      return attention_typed<T, Fp8E5M2>(step, layer, work, pool);
    default:
      return attention_typed<T, T>(step, layer, work, pool);
  }
}

template <class T, class C>
void quantize_typed(const T *src, uint8_t *dst, uint32_t n, float scale) {
  const v8f s = splat(scale);
  for (uint32_t d = 0; d < n; d += 8)
    store8_u8(dst + d, fp8_encode8<C>(load8(src + d) / s));  // IEEE division
}

template <class C>
void quantize_model(const void *src, int32_t dtype, uint8_t *dst, uint32_t n, float scale) {
  switch (dtype) {
    case PKV_DTYPE_F32:
      return quantize_typed<float, C>(static_cast<const float *>(src), dst, n, scale);
    case PKV_DTYPE_F16:
      return quantize_typed<_Float16, C>(static_cast<const _Float16 *>(src), dst, n, scale);
    default:
      return quantize_typed<Bf16, C>(static_cast<const Bf16 *>(src), dst, n, scale);
  }
}

}  // namespace

void attention(const CpuStep &step, const CpuLayer &layer, const AttnWork &work, ThreadPool &pool) {
  switch (layer.dtype) {
    case PKV_DTYPE_F32:
      return attention_model<float>(step, layer, work, pool);
    case PKV_DTYPE_F16:
      return attention_model<_Float16>(step, layer, work, pool);
    default:
      return attention_model<Bf16>(step, layer, work, pool);
  }
}

void quantize_fp8(const void *src, int32_t dtype, int32_t kv_dtype, uint8_t *dst, uint32_t n,
                  float scale) {
  if (kv_dtype == PKV_DTYPE_FP8_E5M2) return quantize_model<Fp8E5M2>(src, dtype, dst, n, scale);
  quantize_model<Fp8E4M3>(src, dtype, dst, n, scale);
}

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
