// CPU sparse attention (DESIGN.md §14): the indexer's key writes (fp8 with a per-token scale, or
// bf16), its top-k selection over the paged keys, and MLA over the selected latents. Scalar C++
// the compiler vectorizes: the same code under every instruction-set variant, so one build.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "status.h"

namespace pkv {
namespace {

// IEEE half by its bits (no _Float16: not every compiler of this file has it on x86).
float half_to_float(uint16_t h) {
  const uint32_t exp = (h >> 10) & 31, man = h & 1023;
  float f = exp == 0    ? std::ldexp(float(man), -24)
            : exp == 31 ? (man ? NAN : INFINITY)
                        : std::ldexp(float(man | 1024), int(exp) - 25);
  return h & 0x8000 ? -f : f;
}

// Round to nearest even; past the largest finite (65504) to infinity, as a conversion does.
uint16_t float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < 6.103515625e-05f) return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // 2^-24
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e): 10 mantissa bits step 2^(e-11)
  int exp = e - 1 + 15, man = int(std::nearbyint(std::ldexp(a, 11 - e))) - 1024;
  if (man == 1024) ++exp, man = 0;
  return sign | uint16_t(exp << 10) | uint16_t(man);
}

// The model's dtype (f32, f16, bf16) to float.
inline float load_value(const void *base, size_t i, int32_t dtype) {
  if (dtype == PKV_DTYPE_F32) return static_cast<const float *>(base)[i];
  if (dtype == PKV_DTYPE_F16) return half_to_float(static_cast<const uint16_t *>(base)[i]);
  const uint32_t bits = uint32_t(static_cast<const uint16_t *>(base)[i]) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                  // nearest even
}

inline void store_value(void *base, size_t i, int32_t dtype, float f) {
  if (dtype == PKV_DTYPE_F32) {
    static_cast<float *>(base)[i] = f;
  } else if (dtype == PKV_DTYPE_F16) {
    static_cast<uint16_t *>(base)[i] = float_to_half(f);
  } else {
    static_cast<uint16_t *>(base)[i] = bf16_bits(f);
  }
}

// OCP e4m3fn: round to nearest even, saturating to +-448 (NaN to the NaN code), as CUDA's
// cvt.rn.satfinite does.
uint8_t e4m3_encode(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f) return sign | uint8_t(std::nearbyint(a * 512.0f));  // subnormals: 2^-9 steps
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e): 3 mantissa bits step 2^(e-4)
  const float q = std::nearbyint(std::ldexp(a, 4 - e));  // 8 .. 16, exact scaling
  int exp = e - 1, man = int(q) - 8;
  if (man == 8) ++exp, man = 0;  // rounded up to the next power of two
  return sign | uint8_t((exp + 7) << 3) | uint8_t(man);
}

struct E4m3Table {
  float v[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float f = e ? std::ldexp(1.0f + m / 8.0f, e - 7) : std::ldexp(m / 8.0f, -6);
      if (e == 15 && m == 7) f = NAN;
      v[c] = c & 0x80 ? -f : f;
    }
  }
};
const E4m3Table kE4m3;

// The latent cache's element (f32, f16, bf16, fp8 e4m3 / e5m2 codes) to float, unscaled.
inline float load_cache(const char *row, uint32_t i, int32_t kv_dtype) {
  if (kv_dtype == PKV_DTYPE_FP8_E4M3) return kE4m3.v[uint8_t(row[i])];
  if (kv_dtype == PKV_DTYPE_FP8_E5M2) return half_to_float(uint16_t(uint8_t(row[i]) << 8));
  return load_value(row, i, kv_dtype);
}

// Where token `pos` of seq is in a group: its block id (from the table) and offset.
struct Place {
  int32_t block;
  uint32_t offset;
};
inline Place place_of(const CpuStep &step, uint32_t group, uint32_t seq, uint32_t pos) {
  return {step.block_table(group, seq)[pos / step.block_size], pos % step.block_size};
}

// seq's new tokens' rows and the position of its first one.
inline uint32_t first_position(const CpuStep &step, uint32_t seq) {
  const uint32_t rows = uint32_t(step.query_start[seq + 1] - step.query_start[seq]);
  return uint32_t(step.context_lens[seq]) - rows;
}

// Of two keys, the one the top-k keeps first: a number above a NaN, a higher score, then the
// lower position.
inline bool ranks_before(const float *score, uint32_t a, uint32_t b) {
  const bool na = std::isnan(score[a]), nb = std::isnan(score[b]);
  if (na != nb) return nb;
  if (!na && score[a] != score[b]) return score[a] > score[b];
  return a < b;
}

}  // namespace

void CpuKernels::indexer_write(const CpuStep &step, char *pool, const IndexerCall &c,
                               int32_t dtype) {
  const int64_t *slots = step.slot_mapping(c.group);
  const uint32_t dim = c.dim, bs = step.block_size;
  const size_t elt = dtype == PKV_DTYPE_F32 ? 4 : 2;
  pool_.parallel_for(step.num_tokens, [&](size_t t, uint32_t) {
    if (slots[t] < 0) return;
    const uint64_t block = uint64_t(slots[t]) / bs, off = uint64_t(slots[t]) % bs;
    char *page = pool + block * c.block_stride;
    const char *src = static_cast<const char *>(c.k) + t * dim * elt;
    char *key = page + c.key_offset + off * c.key_bytes();
    if (c.index_dtype == PKV_DTYPE_BF16) {
      for (uint32_t i = 0; i < dim; ++i) {
        const uint16_t b = bf16_bits(load_value(src, i, dtype));
        std::memcpy(key + 2 * i, &b, 2);
      }
      return;
    }
    float amax = 0.0f;
    for (uint32_t i = 0; i < dim; ++i) amax = std::max(amax, std::fabs(load_value(src, i, dtype)));
    float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    if (c.ue8m0 && amax > 0.0f) {  // up to a power of two: 2^ceil(log2(scale))
      int e;
      const float f = std::frexp(scale, &e);
      scale = std::ldexp(1.0f, f == 0.5f ? e - 1 : e);
    }
    for (uint32_t i = 0; i < dim; ++i)
      key[i] = char(e4m3_encode(load_value(src, i, dtype) / scale));
    std::memcpy(page + c.scale_offset + off * 4, &scale, 4);
  });
}

namespace {

using Scores8 = void (*)(const float *, const float *, uint32_t, uint32_t, const float *,
                         const float *, float *);

// Scores of seq's keys [key0, key1) for one query (q [heads][dim] and w [heads], floats): into
// score[key0 ..], 8 keys at a time gathered as floats [dim][8] (the variant's math).
void score_keys(const CpuStep &step, const char *pool, const IndexerCall &c, Scores8 scores8,
                uint32_t seq, const float *q, const float *w, uint32_t key0, uint32_t key1,
                float *score) {
  std::vector<float> keys_t(size_t(c.dim) * 8);
  float scales[8], out[8];
  for (uint32_t s0 = key0; s0 < key1; s0 += 8) {
    const uint32_t n = std::min(8u, key1 - s0);
    for (uint32_t k = 0; k < 8; ++k) {
      scales[k] = 0.0f;  // a lane past the last key: zeros, its score unused
      if (k >= n) {
        for (uint32_t i = 0; i < c.dim; ++i) keys_t[size_t(i) * 8 + k] = 0.0f;
        continue;
      }
      const Place at = place_of(step, c.group, seq, s0 + k);
      const char *page = pool + uint64_t(at.block) * c.block_stride;
      const char *codes = page + c.key_offset + uint64_t(at.offset) * c.key_bytes();
      if (c.index_dtype == PKV_DTYPE_BF16) {
        scales[k] = 1.0f;
        for (uint32_t i = 0; i < c.dim; ++i)
          keys_t[size_t(i) * 8 + k] = load_value(codes, i, PKV_DTYPE_BF16);
      } else {
        for (uint32_t i = 0; i < c.dim; ++i) keys_t[size_t(i) * 8 + k] = kE4m3.v[uint8_t(codes[i])];
        std::memcpy(&scales[k], page + c.scale_offset + uint64_t(at.offset) * 4, 4);
      }
    }
    scores8(q, w, c.heads, c.dim, keys_t.data(), scales, out);
    std::copy(out, out + n, score + s0);
  }
}

// Token t's row of out from its scores [0, n): the top `topk` ascending by position, then -1.
void select_top(const CpuStep &step, const IndexerCall &c, uint32_t seq, const float *score,
                uint32_t n, std::vector<uint32_t> &order, int32_t *out) {
  const uint32_t keep = std::min(n, c.topk);
  order.resize(n);
  for (uint32_t s = 0; s < n; ++s) order[s] = s;
  if (keep < n) {
    std::nth_element(order.begin(), order.begin() + keep, order.end(),
                     [&](uint32_t a, uint32_t b) { return ranks_before(score, a, b); });
    std::sort(order.begin(), order.begin() + keep);
  }
  for (uint32_t i = 0; i < keep; ++i) {
    if (!c.slots) {
      out[i] = int32_t(order[i]);
      continue;
    }
    const Place at = place_of(step, c.group, seq, order[i]);
    out[i] = int32_t(int64_t(at.block) * step.block_size + at.offset);
  }
  std::fill(out + keep, out + c.topk, -1);
}

}  // namespace

void CpuKernels::indexer_topk(const CpuStep &step, const char *pool, const IndexerCall &c,
                              int32_t dtype) {
  const size_t qrow = size_t(c.heads) * c.dim;
  std::vector<uint32_t> seq_of(step.num_tokens);
  for (uint32_t s = 0; s < step.num_seqs; ++s)
    for (int32_t t = step.query_start[s]; t < step.query_start[s + 1]; ++t) seq_of[t] = s;
  const uint32_t threads = pool_.num_threads();
  // The query and the scores of one token; a few tokens (decodes) score their keys in parallel.
  auto token = [&](uint32_t t, bool split, std::vector<float> &q, std::vector<float> &score,
                   std::vector<uint32_t> &order) {
    const uint32_t seq = seq_of[t];
    const uint32_t pos = first_position(step, seq) + (t - uint32_t(step.query_start[seq]));
    q.resize(qrow);
    for (size_t i = 0; i < qrow; ++i) q[i] = load_value(c.q, size_t(t) * qrow + i, dtype);
    const float *w = c.weights + size_t(t) * c.heads;
    const uint32_t n = pos + 1;
    score.resize(n);
    constexpr uint32_t kChunk = 1024;
    if (split && n > kChunk) {
      pool_.parallel_for((n + kChunk - 1) / kChunk, [&](size_t i, uint32_t) {
        const uint32_t k0 = uint32_t(i) * kChunk;
        score_keys(step, pool, c, variant_.indexer_scores8, seq, q.data(), w, k0,
                   std::min(n, k0 + kChunk), score.data());
      });
    } else {
      score_keys(step, pool, c, variant_.indexer_scores8, seq, q.data(), w, 0, n, score.data());
    }
    select_top(step, c, seq, score.data(), n, order, c.out + size_t(t) * c.topk);
  };
  if (step.num_tokens < threads) {
    std::vector<float> q, score;
    std::vector<uint32_t> order;
    for (uint32_t t = 0; t < step.num_tokens; ++t) token(t, true, q, score, order);
    return;
  }
  pool_.parallel_for(step.num_tokens, [&](size_t t, uint32_t) {
    thread_local std::vector<float> q, score;
    thread_local std::vector<uint32_t> order;
    token(uint32_t(t), false, q, score, order);
  });
}

void CpuKernels::sparse_mla(const CpuStep &step, const CpuLayer &layer, const int32_t *indices,
                            uint32_t topk) {
  const uint32_t width = layer.head_dim, rank = layer.v_dim, heads = layer.q_heads;
  const float kscale = layer.k_scale ? layer.k_scale[0] : 1.0f;
  const uint64_t block_elts = layer.k_block_elts(step.block_size);
  const size_t elt = layer.cache_elt();
  std::vector<uint32_t> seq_of(step.num_tokens);
  for (uint32_t s = 0; s < step.num_seqs; ++s)
    for (int32_t t = step.query_start[s]; t < step.query_start[s + 1]; ++t) seq_of[t] = s;
  // Items: (token, 32 q heads); each gathers its token's selected latents as floats once, and
  // the variant's math attends its heads over them.
  constexpr uint32_t kHeads = 32;
  const uint32_t head_items = (heads + kHeads - 1) / kHeads;
  pool_.parallel_for(size_t(step.num_tokens) * head_items, [&](size_t item, uint32_t) {
    const uint32_t t = uint32_t(item / head_items), h0 = uint32_t(item % head_items) * kHeads;
    const uint32_t nh = std::min(heads, h0 + kHeads) - h0;
    const uint32_t seq = seq_of[t];
    const uint32_t pos = first_position(step, seq) + (t - uint32_t(step.query_start[seq]));
    thread_local std::vector<float> lat, p, q, o;
    lat.resize(size_t(topk) * width);
    uint32_t n = 0;
    for (uint32_t j = 0; j < topk; ++j) {
      const int32_t s = indices[size_t(t) * topk + j];
      if (s < 0 || uint32_t(s) > pos) continue;
      const Place at = place_of(step, layer.group, seq, uint32_t(s));
      const char *row = static_cast<const char *>(layer.k_cache) +
                        (uint64_t(at.block) * block_elts + uint64_t(at.offset) * width) * elt;
      for (uint32_t i = 0; i < width; ++i)
        lat[size_t(n) * width + i] = load_cache(row, i, layer.kv_dtype) * kscale;
      ++n;
    }
    p.resize(std::max(n, 1u));
    q.resize(size_t(nh) * width);
    o.resize(size_t(nh) * rank);
    const size_t q0 = (size_t(t) * heads + h0) * width;
    for (size_t i = 0; i < q.size(); ++i) q[i] = load_value(layer.q, q0 + i, layer.dtype);
    variant_.sparse_attend(q.data(), nh, width, rank, lat.data(), n, layer.scale, p.data(),
                           o.data());
    const size_t o0 = (size_t(t) * heads + h0) * rank;
    for (size_t i = 0; i < o.size(); ++i) store_value(layer.out, o0 + i, layer.dtype, o[i]);
  });
}

}  // namespace pkv
