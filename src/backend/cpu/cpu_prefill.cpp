// CPU prefill kernel: a tile of new tokens of one sequence against one kv head's keys, FlashAttention
// style: the tile's rows x q heads ("query vectors", 64 with 16 rows and GQA 4) meet the keys a
// chunk at a time; S = Q K^T for the chunk by a register-blocked micro-kernel whose lanes are
// query vectors (so a key's element pair is one broadcast and the chunk's row max a vertical
// max), an online softmax in base 2 (log2 e folded into the score scale), then O += P V by a
// second micro-kernel whose lanes are head_dim. Two engines:
//   - bf16 (avx512-bf16 variant, bf16 model, bf16 or fp8 cache: fp8 codes are exact in bf16):
//     vdpbf16ps on pair-interleaved operands. Q is packed once per item ([hd/2][query] pairs),
//     K rows are copied (fp8: converted) once per chunk and broadcast pair by pair, V is packed
//     once per chunk into key pairs ([key/2][hd] pairs), P is rounded to bf16 and l sums the
//     rounded P, so the output is exactly the weighted mean the products computed.
//   - fp32 (avx512 and avx2 variants, f16 models anywhere): FMA on chunks converted to floats.
// fp8 scales apply to the scores (k) and the output (v), never per element. f32 models, and the
// baseline variant, fall back to the generic runner (return false).
#include "backend/cpu/cpu_attention.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), a self-initialized variable that
// -Wmaybe-uninitialized reports once inlined: a false positive of those headers (before they load).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <algorithm>
#include <cstring>
#include <limits>

#include "pkv/pkv.h"

#include "backend/cpu/dtype_cvt.h"
#include "backend/cpu/f32_lanes.h"
#include "backend/cpu/fp8.h"
#include "backend/cpu/vec8.h"
#endif

namespace pkv {
namespace PKV_CPU_VARIANT {

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))

bool prefill_item(const CpuStep &, const CpuLayer &, const AttnItem &, float *, float *) { return false; }

#else
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
constexpr uint32_t kMaxChunk = 128;  // keys per chunk (fewer when the scratch is short)

inline uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

// Carves 64-byte aligned arrays out of the thread's scratch.
struct Arena {
  float *next;
  float *take(size_t floats) {
    float *p = next;
    next += round_up(static_cast<uint32_t>(floats), 16);
    return p;
  }
  static float *align(float *p) {
    return reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
  }
};

// Prefetches the next chunk's K and V rows a few at a time between micro-kernel calls: a kv
// head's row is a short run every kv_heads * head_dim, a stride the hardware prefetchers follow
// poorly, and a whole chunk requested at once would overflow the miss queues.
struct Prefetcher {
  const char **rows;  // [2 * kMaxChunk]
  uint32_t count = 0, next = 0, bytes = 0, per_call = 1;
  void step() {
    for (uint32_t c = 0; c < per_call && next < count; ++c, ++next)
      for (uint32_t b = 0; b < bytes; b += 64) _mm_prefetch(rows[next] + b, _MM_HINT_T0);
  }
  void finish() {
    while (next < count) step();
  }
};

// One item: its query vectors i = r * group + g (row r, the kv head's q head g), padded to rgp,
// a multiple of kLanes (the padding has zero queries and sees no key). hdp: head_dim rounded up
// to 16, the row length of O and of the packed V.
struct Tile {
  uint32_t hd, hdp, group, rows, rg, rgp, chunk;
  uint32_t token0, first_pos, lo_last;  // lo_last: the last row's first key (the largest)
  const int32_t *blocks;                // the sequence's block table
  int32_t *lo, *pos;                    // [rgp]: query vector i sees keys [lo[i], pos[i]]
  float *m, *l, *alpha;                 // [rgp]: running max (log2 units), sum; chunk's rescale
  float *o;                             // [rgp][hdp]: running output
  Prefetcher pf;                        // the next chunk's rows
};

// The cache row of key `key` of kv head `head`: [num_blocks][block_size][kv_heads][head_dim].
template <class C>
inline const C *cache_row(const void *cache, const Tile &t, const CpuStep &step, const CpuLayer &layer, uint32_t head,
                          uint32_t key) {
  const int64_t slot = int64_t(t.blocks[key / step.block_size]) * step.block_size + key % step.block_size;
  return static_cast<const C *>(cache) + (slot * layer.kv_heads + head) * layer.head_dim;
}

// n elements (a multiple of 8) of a cache or model dtype to floats (fp8: the codes' values, unscaled).
inline void to_f32(const Bf16 *src, float *dst, uint32_t n) {
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, load8(src + d));
}
inline void to_f32(const _Float16 *src, float *dst, uint32_t n) {
  for (uint32_t d = 0; d < n; d += 8) store8(dst + d, load8(src + d));
}
template <class C> inline void to_f32(const C *src, float *dst, uint32_t n) { fp8_row(src, dst, n, 1.0f); }

// Scales the chunk's scores of query vectors [i0, i0 + kLanes) by sc (keys a vector does not see
// become -inf when masked), updates their running max and rescale; returns the max to subtract
// (0 where no key was seen yet: exp2(-inf - 0) is 0).
inline Lanes chunk_max(Tile &t, float *s, uint32_t n, uint32_t i0, uint32_t key, float sc, bool masked) {
  const Lanes scale = lanes_splat(sc), neg_inf = lanes_splat(kNegInf);
  Lanes mx = neg_inf;
  for (uint32_t j = 0; j < n; ++j) {
    float *row = s + size_t(j) * t.rgp + i0;
    Lanes v = lanes_mul(lanes_load(row), scale);
    if (masked) v = lanes_keep(lanes_visible(t.lo + i0, t.pos + i0, int32_t(key + j)), v, neg_inf);
    lanes_store(row, v);
    mx = lanes_max(mx, v);
  }
  const Lanes m_old = lanes_load(t.m + i0), m_new = lanes_max(m_old, mx);
  const Lanes m_use = lanes_if_eq(m_new, neg_inf, lanes_zero(), m_new);
  lanes_store(t.alpha + i0, lanes_exp2(lanes_sub(m_old, m_use)));
  lanes_store(t.m + i0, m_new);
  return m_use;
}

// ------------------------------------------------------------------------------------ fp32 engine
#if defined(__AVX512F__)
constexpr int kQkQueries = 2, kQkKeys = 8;  // S micro-kernel: 2 x 16 query vectors x 8 keys
constexpr int kPvQueries = 4, kPvVecs = 4;  // O micro-kernel: 4 query vectors x 64 of head_dim
#else
constexpr int kQkQueries = 2, kQkKeys = 4;  // 2 x 8 x 4: 8 accumulators of 16 registers
constexpr int kPvQueries = 4, kPvVecs = 2;
#endif

// s[key][query] = sum over d of qt[d][query] * k[key][d], for QB x kLanes queries and KB keys.
template <int QB, int KB>
inline void qk_f32(const float *qt, uint32_t rgp, const float *k, uint32_t hd, float *s) {
  Lanes acc[KB][QB];
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) acc[j][b] = lanes_zero();
  for (uint32_t d = 0; d < hd; ++d) {
    Lanes q[QB];
    for (int b = 0; b < QB; ++b) q[b] = lanes_load(qt + size_t(d) * rgp + b * kLanes);
    for (int j = 0; j < KB; ++j) {
      const Lanes kj = lanes_splat(k[size_t(j) * hd + d]);
      for (int b = 0; b < QB; ++b) acc[j][b] = lanes_fma(q[b], kj, acc[j][b]);
    }
  }
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) lanes_store(s + size_t(j) * rgp + b * kLanes, acc[j][b]);
}

// o[query][d] = o * alpha[query] + sum over keys of p[key][query] * v[key][d], for QI queries and
// DV x kLanes of head_dim.
template <int QI, int DV>
inline void pv_f32(const float *p, uint32_t rgp, const float *v, uint32_t hdp, uint32_t n, const float *alpha,
                   float *o) {
  Lanes acc[QI][DV];
  for (int i = 0; i < QI; ++i) {
    const Lanes a = lanes_splat(alpha[i]);
    for (int c = 0; c < DV; ++c) acc[i][c] = lanes_mul(lanes_load(o + size_t(i) * hdp + c * kLanes), a);
  }
  for (uint32_t j = 0; j < n; ++j) {
    Lanes vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = lanes_load(v + size_t(j) * hdp + c * kLanes);
    for (int i = 0; i < QI; ++i) {
      const Lanes pi = lanes_splat(p[size_t(j) * rgp + i]);
      for (int c = 0; c < DV; ++c) acc[i][c] = lanes_fma(pi, vv[c], acc[i][c]);
    }
  }
  for (int i = 0; i < QI; ++i)
    for (int c = 0; c < DV; ++c) lanes_store(o + size_t(i) * hdp + c * kLanes, acc[i][c]);
}

template <int QI> inline void pv_f32_rows(const float *p, uint32_t rgp, const float *v, uint32_t hdp, uint32_t n,
                                          const float *alpha, float *o) {
  uint32_t d = 0;
  for (; d + kPvVecs * kLanes <= hdp; d += kPvVecs * kLanes) pv_f32<QI, kPvVecs>(p, rgp, v + d, hdp, n, alpha, o + d);
  switch ((hdp - d) / kLanes) {
    case 3: return pv_f32<QI, 3>(p, rgp, v + d, hdp, n, alpha, o + d);
    case 2: return pv_f32<QI, 2>(p, rgp, v + d, hdp, n, alpha, o + d);
    case 1: return pv_f32<QI, 1>(p, rgp, v + d, hdp, n, alpha, o + d);
    default: return;
  }
}

// T: the model's dtype (q, out); C: the cache's.
template <class T, class C> struct F32Engine {
  float *qt, *k, *s, *v;  // [hd][rgp] queries; [chunk][hd] keys; [chunk][rgp] scores, then P; [chunk][hdp] values

  static size_t floats(const Tile &t, uint32_t chunk) {
    return size_t(t.hd) * t.rgp + size_t(chunk) * t.hd + size_t(chunk) * t.rgp + size_t(chunk) * t.hdp + 64;
  }
  void carve(Arena &a, const Tile &t) {
    qt = a.take(size_t(t.hd) * t.rgp);
    k = a.take(size_t(t.chunk) * t.hd);
    s = a.take(size_t(t.chunk) * t.rgp);
    v = a.take(size_t(t.chunk) * t.hdp);
  }
  // q: the tile's first row; rows `q_stride` apart, each holding the group's q heads.
  void pack_q(const Tile &t, const T *q, size_t q_stride, float *row) {
    std::fill(qt, qt + size_t(t.hd) * t.rgp, 0.0f);
    for (uint32_t r = 0; r < t.rows; ++r)
      for (uint32_t g = 0; g < t.group; ++g) {
        to_f32(q + r * q_stride + size_t(g) * t.hd, row, t.hd);
        const uint32_t i = r * t.group + g;
        for (uint32_t d = 0; d < t.hd; ++d) qt[size_t(d) * t.rgp + i] = row[d];
      }
  }
  static void store_out(const float *src, float scale, T *dst, uint32_t n) { from_float_scaled(src, scale, dst, n); }
  void load_k(const C *const *rows, uint32_t n, const Tile &t) {
    const uint32_t nk = round_up(n, kQkKeys);
    for (uint32_t j = 0; j < n; ++j) to_f32(rows[j], k + size_t(j) * t.hd, t.hd);
    std::fill(k + size_t(n) * t.hd, k + size_t(nk) * t.hd, 0.0f);
  }
  void scores(Tile &t, uint32_t n) {
    const uint32_t nk = round_up(n, kQkKeys);
    uint32_t i = 0;
    for (; i + kQkQueries * kLanes <= t.rgp; i += kQkQueries * kLanes)
      for (uint32_t j = 0; j < nk; j += kQkKeys)
        qk_f32<kQkQueries, kQkKeys>(qt + i, t.rgp, k + size_t(j) * t.hd, t.hd, s + size_t(j) * t.rgp + i), t.pf.step();
    for (; i < t.rgp; i += kLanes)
      for (uint32_t j = 0; j < nk; j += kQkKeys)
        qk_f32<1, kQkKeys>(qt + i, t.rgp, k + size_t(j) * t.hd, t.hd, s + size_t(j) * t.rgp + i), t.pf.step();
  }
  static uint32_t score_calls(const Tile &t, uint32_t n) {
    return (t.rgp / (kQkQueries * kLanes) + t.rgp % (kQkQueries * kLanes) / kLanes) * (round_up(n, kQkKeys) / kQkKeys);
  }
  // P = 2^(s - m) in place; l = l * alpha + the chunk's sum.
  void probs(Tile &t, uint32_t n, uint32_t i0, Lanes m_use) {
    Lanes sum = lanes_zero();
    for (uint32_t j = 0; j < n; ++j) {
      float *row = s + size_t(j) * t.rgp + i0;
      const Lanes p = lanes_exp2(lanes_sub(lanes_load(row), m_use));
      lanes_store(row, p);
      sum = lanes_add(sum, p);
    }
    lanes_store(t.l + i0, lanes_fma(lanes_load(t.l + i0), lanes_load(t.alpha + i0), sum));
  }
  void load_v(const C *const *rows, uint32_t n, const Tile &t) {
    for (uint32_t j = 0; j < n; ++j) {
      float *dst = v + size_t(j) * t.hdp;
      to_f32(rows[j], dst, t.hd);
      std::fill(dst + t.hd, dst + t.hdp, 0.0f);
    }
  }
  void accumulate(Tile &t, uint32_t n) {
    for (uint32_t i = 0; i < t.rgp; i += kPvQueries)
      pv_f32_rows<kPvQueries>(s + i, t.rgp, v, t.hdp, n, t.alpha + i, t.o + size_t(i) * t.hdp);
  }
};

// ------------------------------------------------------------------------------------ bf16 engine
#if defined(__AVX512BF16__)
constexpr int kDpQueries = 2, kDpKeys = 8;    // S: 2 x 16 query vectors x 8 keys
constexpr int kDpPvQueries = 4, kDpPvVecs = 4;  // O: 4 query vectors x 64 of head_dim

// The same bits as another vector type.
template <class To, class From> inline To vcast(From f) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To t;
  std::memcpy(&t, &f, sizeof t);
  return t;
}
inline __m512bh as_bh(__m512i x) { return vcast<__m512bh>(x); }

// s[key][query] = sum over pairs p of qp[p][query] . k[key][p] (bf16 pairs, fp32 sums).
template <int QB, int KB>
inline void qk_bf16(const uint32_t *qp, uint32_t rgp, const uint32_t *k, uint32_t pairs, float *s) {
  __m512 acc[KB][QB];
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) acc[j][b] = _mm512_setzero_ps();
  for (uint32_t p = 0; p < pairs; ++p) {
    __m512bh q[QB];
    for (int b = 0; b < QB; ++b) q[b] = as_bh(_mm512_loadu_si512(qp + size_t(p) * rgp + b * 16));
    for (int j = 0; j < KB; ++j) {
      const __m512bh kj = as_bh(_mm512_set1_epi32(int32_t(k[size_t(j) * pairs + p])));
      for (int b = 0; b < QB; ++b) acc[j][b] = _mm512_dpbf16_ps(acc[j][b], q[b], kj);
    }
  }
  for (int j = 0; j < KB; ++j)
    for (int b = 0; b < QB; ++b) _mm512_storeu_ps(s + size_t(j) * rgp + b * 16, acc[j][b]);
}

// o[query][d] = o * alpha + sum over key pairs u of pp[u][query] . vp[u][d].
template <int QI, int DV>
inline void pv_bf16(const uint32_t *pp, uint32_t rgp, const uint32_t *vp, uint32_t hdp, uint32_t pairs,
                    const float *alpha, float *o) {
  __m512 acc[QI][DV];
  for (int i = 0; i < QI; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[i]);
    for (int c = 0; c < DV; ++c) acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(o + size_t(i) * hdp + c * 16), a);
  }
  for (uint32_t u = 0; u < pairs; ++u) {
    __m512bh vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = as_bh(_mm512_loadu_si512(vp + size_t(u) * hdp + c * 16));
    for (int i = 0; i < QI; ++i) {
      const __m512bh pi = as_bh(_mm512_set1_epi32(int32_t(pp[size_t(u) * rgp + i])));
      for (int c = 0; c < DV; ++c) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], pi, vv[c]);
    }
  }
  for (int i = 0; i < QI; ++i)
    for (int c = 0; c < DV; ++c) _mm512_storeu_ps(o + size_t(i) * hdp + c * 16, acc[i][c]);
}

template <int QI> inline void pv_bf16_rows(const uint32_t *pp, uint32_t rgp, const uint32_t *vp, uint32_t hdp,
                                           uint32_t pairs, const float *alpha, float *o) {
  uint32_t d = 0;
  for (; d + kDpPvVecs * 16 <= hdp; d += kDpPvVecs * 16) pv_bf16<QI, kDpPvVecs>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
  switch ((hdp - d) / 16) {
    case 3: return pv_bf16<QI, 3>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    case 2: return pv_bf16<QI, 2>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    case 1: return pv_bf16<QI, 1>(pp, rgp, vp + d, hdp, pairs, alpha, o + d);
    default: return;
  }
}

// r[k] (k < 16): row k of a 16 x 16 matrix of 32-bit elements; on return r[k] is its column k.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int k = 0; k < 8; ++k) {  // pairs of rows interleaved within each 128-bit lane
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  for (int k = 0; k < 4; ++k) {  // then each 128-bit lane of r[4k + j] holds column 4 lane + j of rows 4k .. 4k + 3
    r[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    r[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    r[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // gather the 4 x 4 blocks of each column from the 4 registers
    const __m512i a = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), b = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88), d = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xdd);
    t[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(a, c, 0xdd);
    t[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
  for (int k = 0; k < 16; ++k) r[k] = t[k];
}

// Word indices for vpermw: lanes w of the result take x[w / 2] (even w) or y[w / 2] (odd), where
// (x, y) are the two 16-word halves of one register (kInterleave) or words [base, base + 16) of
// two registers (permutex2var: y's words are numbered from 32).
inline __m512i interleave_index(int x0, int y0) {
  alignas(64) int16_t idx[32];
  for (int w = 0; w < 32; ++w) idx[w] = int16_t(w % 2 ? y0 + w / 2 : x0 + w / 2);
  return _mm512_load_si512(idx);
}

template <class C> struct Bf16Engine {
  uint32_t *qp, *k, *pp, *vp;  // [hd/2][rgp] query pairs; [chunk][hd/2] keys; [chunk/2][rgp] P pairs; [chunk/2][hdp] V pairs
  float *s, *row_a, *row_b;    // [chunk][rgp] scores; two rows of hdp floats (fp8 conversion)
  __m512i halves, lo_pairs, hi_pairs;

  static size_t floats(const Tile &t, uint32_t chunk) {
    return size_t(t.hd / 2) * t.rgp + size_t(chunk) * t.hd / 2 + size_t(chunk / 2) * t.rgp +
           size_t(chunk / 2) * t.hdp + size_t(chunk) * t.rgp + 2 * size_t(t.hdp) + 96;
  }
  void carve(Arena &a, const Tile &t) {
    qp = reinterpret_cast<uint32_t *>(a.take(size_t(t.hd / 2) * t.rgp));
    k = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk) * t.hd / 2));
    pp = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk / 2) * t.rgp));
    vp = reinterpret_cast<uint32_t *>(a.take(size_t(t.chunk / 2) * t.hdp));
    s = a.take(size_t(t.chunk) * t.rgp);
    row_a = a.take(t.hdp);
    row_b = a.take(t.hdp);
    halves = interleave_index(0, 16);
    lo_pairs = interleave_index(0, 32);
    hi_pairs = interleave_index(16, 48);
  }
  // Query pairs, 16 queries x 16 pairs at a time: 16 rows in, transposed, 16 rows out.
  void pack_q(const Tile &t, const Bf16 *q, size_t q_stride, float *) {
    const uint32_t pairs = t.hd / 2;
    for (uint32_t i0 = 0; i0 < t.rgp; i0 += 16)
      for (uint32_t p0 = 0; p0 < pairs; p0 += 16) {
        const __mmask16 m = pairs - p0 >= 16 ? __mmask16(0xffff) : __mmask16((1u << (pairs - p0)) - 1);
        __m512i r[16];
        for (uint32_t k = 0; k < 16; ++k) {
          const uint32_t i = i0 + k;
          r[k] = i < t.rg ? _mm512_maskz_loadu_epi32(m, q + (i / t.group) * q_stride + size_t(i % t.group) * t.hd + 2 * p0)
                          : _mm512_setzero_si512();
        }
        transpose16(r);
        for (uint32_t k = 0; k < 16 && p0 + k < pairs; ++k) _mm512_storeu_si512(qp + size_t(p0 + k) * t.rgp + i0, r[k]);
      }
  }
  // dst = src * scale rounded to bf16 (nearest even), n a multiple of 8.
  static void store_out(const float *src, float scale, Bf16 *dst, uint32_t n) {
    const __m512 s = _mm512_set1_ps(scale);
    for (uint32_t d = 0; d < n; d += 16) {
      const __m256i b = vcast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(src + d), s)));
      _mm256_mask_storeu_epi16(dst + d, n - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - d)) - 1), b);
    }
  }
  // Floats (zero past hd) to bf16 (exact for fp8 values), 16 at a time.
  static void f32_to_bf16(const float *src, uint32_t hd, uint16_t *dst) {
    for (uint32_t d = 0; d < hd; d += 16) {
      const __m256i b = vcast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + d)));
      _mm256_mask_storeu_epi16(dst + d, hd - d >= 16 ? __mmask16(0xffff) : __mmask16((1u << (hd - d)) - 1), b);
    }
  }
  void load_k(const C *const *rows, uint32_t n, const Tile &t) {
    const uint32_t nk = round_up(n, kDpKeys), pairs = t.hd / 2;
    for (uint32_t j = 0; j < n; ++j) {
      uint16_t *dst = reinterpret_cast<uint16_t *>(k + size_t(j) * pairs);
      if constexpr (kIsFp8<C>) {
        to_f32(rows[j], row_a, t.hd);
        f32_to_bf16(row_a, t.hd, dst);
      } else {
        std::memcpy(dst, rows[j], t.hd * sizeof(Bf16));
      }
    }
    std::fill(k + size_t(n) * pairs, k + size_t(nk) * pairs, 0u);
  }
  void scores(Tile &t, uint32_t n) {
    const uint32_t nk = round_up(n, kDpKeys), pairs = t.hd / 2;
    uint32_t i = 0;
    for (; i + kDpQueries * 16 <= t.rgp; i += kDpQueries * 16)
      for (uint32_t j = 0; j < nk; j += kDpKeys)
        qk_bf16<kDpQueries, kDpKeys>(qp + i, t.rgp, k + size_t(j) * pairs, pairs, s + size_t(j) * t.rgp + i), t.pf.step();
    for (; i < t.rgp; i += 16)
      for (uint32_t j = 0; j < nk; j += kDpKeys)
        qk_bf16<1, kDpKeys>(qp + i, t.rgp, k + size_t(j) * pairs, pairs, s + size_t(j) * t.rgp + i), t.pf.step();
  }
  static uint32_t score_calls(const Tile &t, uint32_t n) {
    return (t.rgp / (kDpQueries * 16) + t.rgp % (kDpQueries * 16) / 16) * (round_up(n, kDpKeys) / kDpKeys);
  }
  // P = 2^(s - m) rounded to bf16, packed in key pairs; l sums the rounded values.
  void probs(Tile &t, uint32_t n, uint32_t i0, Lanes m_use) {
    Lanes sum = lanes_zero();
    const __m512i high = _mm512_set1_epi32(int32_t(0xffff0000u));
    for (uint32_t j = 0; j < n; j += 2) {
      const Lanes p0 = lanes_exp2(lanes_sub(lanes_load(s + size_t(j) * t.rgp + i0), m_use));
      const Lanes p1 = j + 1 < n ? lanes_exp2(lanes_sub(lanes_load(s + size_t(j + 1) * t.rgp + i0), m_use)) : lanes_zero();
      const __m512bh both = _mm512_cvtne2ps_pbh(p1, p0);  // p0's 16 words, then p1's
      const __m512i pairs = _mm512_permutexvar_epi16(halves, vcast<__m512i>(both));
      _mm512_storeu_si512(pp + size_t(j / 2) * t.rgp + i0, pairs);
      sum = lanes_add(sum, _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16)));
      sum = lanes_add(sum, _mm512_castsi512_ps(_mm512_and_si512(pairs, high)));
    }
    lanes_store(t.l + i0, lanes_fma(lanes_load(t.l + i0), lanes_load(t.alpha + i0), sum));
  }
  // V rows 2u and 2u + 1 (b: nullptr past the chunk's end) into vp[u].
  void pack_v_pair(const C *a, const C *b, const Tile &t, uint32_t *dst) {
    if constexpr (kIsFp8<C>) {
      to_f32(a, row_a, t.hd);
      std::fill(row_a + t.hd, row_a + t.hdp, 0.0f);
      if (b) to_f32(b, row_b, t.hd);
      std::fill(row_b + (b ? t.hd : 0), row_b + t.hdp, 0.0f);
      for (uint32_t d = 0; d < t.hdp; d += 16) {
        const __m512bh both = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(row_b + d), _mm512_loadu_ps(row_a + d));
        _mm512_storeu_si512(dst + d, _mm512_permutexvar_epi16(halves, vcast<__m512i>(both)));
      }
    } else {
      for (uint32_t d = 0; d < t.hdp; d += 32) {
        const uint32_t left = t.hd > d ? t.hd - d : 0;
        const __mmask32 m = left >= 32 ? ~__mmask32(0) : __mmask32((1u << left) - 1);
        const __m512i x = _mm512_maskz_loadu_epi16(m, a + d);
        const __m512i y = b ? _mm512_maskz_loadu_epi16(m, b + d) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + d, _mm512_permutex2var_epi16(x, lo_pairs, y));
        if (d + 16 < t.hdp) _mm512_storeu_si512(dst + d + 16, _mm512_permutex2var_epi16(x, hi_pairs, y));
      }
    }
  }
  void load_v(const C *const *rows, uint32_t n, const Tile &t) {
    for (uint32_t j = 0; j < n; j += 2) pack_v_pair(rows[j], j + 1 < n ? rows[j + 1] : nullptr, t, vp + size_t(j / 2) * t.hdp);
  }
  void accumulate(Tile &t, uint32_t n) {
    const uint32_t pairs = (n + 1) / 2;
    for (uint32_t i = 0; i < t.rgp; i += kDpPvQueries)
      pv_bf16_rows<kDpPvQueries>(pp + i, t.rgp, vp, t.hdp, pairs, t.alpha + i, t.o + size_t(i) * t.hdp);
  }
};
#endif  // __AVX512BF16__

// ------------------------------------------------------------------------------------ the item
template <class T, class C, class Engine>
bool run_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch, float *partial) {
  Tile t;
  t.hd = layer.head_dim;
  t.hdp = round_up(t.hd, 16);
  t.group = layer.q_heads / layer.kv_heads;
  t.rows = it.rows;
  t.rg = it.rows * t.group;
  t.rgp = round_up(t.rg, kLanes);
  // The scratch the planner gave every thread: attention_scratch_floats(max_q, head_dim).
  const size_t avail = attention_scratch_floats(std::max(kAttnPrefillRows * t.group, layer.q_heads), t.hd);
  // lo, pos, m, l, alpha, o, a row, the chunk's and the next chunk's row pointers, the alignment.
  const size_t state = 5 * size_t(t.rgp) + size_t(t.rgp) * t.hdp + t.hdp + 6 * kMaxChunk + 5 * 16 + 16;
  t.chunk = kMaxChunk;
  while (t.chunk > 8 && state + Engine::floats(t, t.chunk) > avail) t.chunk /= 2;
  if (state + Engine::floats(t, t.chunk) > avail) return false;

  const uint32_t qlen = step.query_start[it.seq + 1] - step.query_start[it.seq];
  t.first_pos = step.context_lens[it.seq] - qlen + it.row0;
  t.token0 = step.query_start[it.seq] + it.row0;
  t.blocks = step.block_table(layer.group, it.seq);
  Arena arena{Arena::align(scratch)};
  t.lo = reinterpret_cast<int32_t *>(arena.take(t.rgp));
  t.pos = reinterpret_cast<int32_t *>(arena.take(t.rgp));
  t.m = arena.take(t.rgp);
  t.l = arena.take(t.rgp);
  t.alpha = arena.take(t.rgp);
  t.o = arena.take(size_t(t.rgp) * t.hdp);
  float *tmp = arena.take(t.hdp);
  const C **rows = reinterpret_cast<const C **>(arena.take(kMaxChunk * sizeof(void *) / sizeof(float)));
  t.pf.rows = reinterpret_cast<const char **>(arena.take(2 * kMaxChunk * sizeof(void *) / sizeof(float)));
  Engine e;
  e.carve(arena, t);

  const uint32_t w = layer.window;
  for (uint32_t i = 0; i < t.rgp; ++i) {
    const uint32_t pos = t.first_pos + i / t.group;
    t.pos[i] = i < t.rg ? int32_t(pos) : -1;
    t.lo[i] = i < t.rg ? int32_t(w && pos >= w ? pos - w + 1 : 0) : std::numeric_limits<int32_t>::max();
  }
  t.lo_last = uint32_t(t.lo[t.rg - 1]);
  std::fill(t.m, t.m + t.rgp, kNegInf);
  std::fill(t.l, t.l + t.rgp, 0.0f);
  std::fill(t.o, t.o + size_t(t.rgp) * t.hdp, 0.0f);
  const size_t q_stride = size_t(layer.q_heads) * t.hd;
  const size_t q_off = size_t(t.token0) * q_stride + size_t(it.head) * t.group * t.hd;
  e.pack_q(t, static_cast<const T *>(layer.q) + q_off, q_stride, tmp);

  const bool fp8 = kIsFp8<C>;
  const float sc = layer.scale * kLog2e * (fp8 ? layer.k_scale[it.head] : 1.0f);
  const float vs = fp8 ? layer.v_scale[it.head] : 1.0f;
  t.pf.bytes = t.hd * sizeof(C);
  for (uint32_t key = it.key0; key < it.key1; key += t.chunk) {
    const uint32_t n = std::min(t.chunk, it.key1 - key);
    const uint32_t ahead = std::min(t.chunk, it.key1 - key - n);  // the next chunk's keys
    for (uint32_t j = 0; j < ahead; ++j) {
      t.pf.rows[2 * j] = reinterpret_cast<const char *>(cache_row<C>(layer.k_cache, t, step, layer, it.head, key + n + j));
      t.pf.rows[2 * j + 1] = reinterpret_cast<const char *>(cache_row<C>(layer.v_cache, t, step, layer, it.head, key + n + j));
    }
    t.pf.count = 2 * ahead, t.pf.next = 0;
    t.pf.per_call = (2 * ahead + Engine::score_calls(t, n) - 1) / Engine::score_calls(t, n);
    for (uint32_t j = 0; j < n; ++j) rows[j] = cache_row<C>(layer.k_cache, t, step, layer, it.head, key + j);
    e.load_k(rows, n, t);
    e.scores(t, n);
    t.pf.finish();
    const bool masked = key + n - 1 > t.first_pos || key < t.lo_last;
    for (uint32_t i = 0; i < t.rgp; i += kLanes) e.probs(t, n, i, chunk_max(t, e.s, n, i, key, sc, masked));
    for (uint32_t j = 0; j < n; ++j) rows[j] = cache_row<C>(layer.v_cache, t, step, layer, it.head, key + j);
    e.load_v(rows, n, t);
    e.accumulate(t, n);
  }

  if (partial) {  // (m, l, acc) of the generic runner: m in natural-log units
    for (uint32_t i = 0; i < t.rg; ++i) {
      partial[i] = t.m[i] * kLn2;
      partial[t.rg + i] = t.l[i];
      float *acc = partial + 2 * t.rg + size_t(i) * t.hd;
      for (uint32_t d = 0; d < t.hd; ++d) acc[d] = t.o[size_t(i) * t.hdp + d] * vs;
    }
    return true;
  }
  for (uint32_t i = 0; i < t.rg; ++i) {
    T *orow = static_cast<T *>(layer.out) + q_off + (i / t.group) * q_stride + size_t(i % t.group) * t.hd;
    Engine::store_out(t.o + size_t(i) * t.hdp, t.l[i] > 0 ? vs / t.l[i] : 0.0f, orow, t.hd);
  }
  return true;
}

template <class T, template <class, class> class Engine>
bool run_model(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch, float *partial) {
  switch (layer.kv_dtype) {
    case PKV_DTYPE_FP8_E4M3: return run_item<T, Fp8E4M3, Engine<T, Fp8E4M3>>(step, layer, it, scratch, partial);
    case PKV_DTYPE_FP8_E5M2: return run_item<T, Fp8E5M2, Engine<T, Fp8E5M2>>(step, layer, it, scratch, partial);
    default: return run_item<T, T, Engine<T, T>>(step, layer, it, scratch, partial);
  }
}

#if defined(__AVX512BF16__)
template <class T, class C> using Bf16Of = Bf16Engine<C>;
#endif

}  // namespace

bool prefill_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch, float *partial) {
  if (it.num_heads != 1) return false;
  switch (layer.dtype) {
    case PKV_DTYPE_F16: return run_model<_Float16, F32Engine>(step, layer, it, scratch, partial);
    case PKV_DTYPE_BF16:
#if defined(__AVX512BF16__)
      return run_model<Bf16, Bf16Of>(step, layer, it, scratch, partial);
#else
      return run_model<Bf16, F32Engine>(step, layer, it, scratch, partial);
#endif
    default: return false;  // f32 models: the generic runner
  }
}

#endif  // AVX2

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
