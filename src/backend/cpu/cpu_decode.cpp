// CPU decode kernel: one new token per sequence against its paged context, at the memory's speed.
// Compiled once per instruction-set variant (src/meson.build); the x86 variants have it, the
// baseline hands every item back to the generic runner (cpu_attention.cpp).
//
// A decode reads each K/V element once and does `group` (q heads per kv head) multiply-adds with
// it, so the work per byte is small but the generic runner's one-head-at-a-time dot products
// left it compute-bound at ~3 cycles per element. Here, per kv head and chunk of kKeys keys:
//  - Scores: 4 keys against up to 4 q heads (a zmm's 128-bit groups; 2 in a ymm) at a time,
//    whole rows: a register of each key's row (16 or 8 floats, converted in registers from bf16
//    or f16; 32 bf16 values for vdpbf16ps) is multiplied with the same values of each q head's
//    row, so every lane works whatever the group size. Each (head, key)'s lanes are then summed,
//    4 keys x 4 heads at a time, by in-lane shuffles (reduce4) and one 128-bit-block transpose,
//    into one register: group i holds head i's 4 scores. With vdpbf16ps and 8 or more q heads
//    per kv head, two registers' heads go at once with the heads in lanes instead (score4_lanes):
//    an 8-value block of a key broadcast to the four 128-bit lanes against the same block of 4
//    heads, the block's loads shared by the two registers and one reduction per 16 scores
//    (against 4); +3-8% at GQA 8 (bench_decode_core). The fp32 path's version of it, with the
//    keys converted into a staging buffer first, measured 8% slower at f16 GQA 8, and the
//    bf16 one at GQA 4 (one register, no shared loads) 6% slower: both use whole rows.
//  - Softmax: online, per head, on those registers (every group's lanes share their head's max).
//  - P V: the accumulators of a pass of heads x a slice of head_dim stay in registers while the
//    chunk's V rows stream past; each probability is broadcast from memory. With vdpbf16ps
//    (avx512-bf16, bf16 and fp8 caches) two keys go at once: their V rows are interleaved
//    (unpacklo/hi_epi16), which permutes head_dim within 128-bit lanes; the permutation is
//    undone once, at the end. Probabilities are rounded to bf16 for that product, as
//    FlashAttention does on GPUs; the sum l adds the rounded values, so the weights still sum
//    to one.
// fp8 caches are converted exactly, in registers: to bf16 for vdpbf16ps, by two 128-entry byte
// lookups (vpermi2b) per 64 codes; otherwise to fp32 through halves (F16C). Their per-head
// scales multiply the scores and the output, not every element.
// Memory: the loops read the chunk's rows where they are in the pool. While a chunk computes,
// each of its kv heads requests its share of the next chunk's rows (every head of the item, K and
// V) with software prefetches, a few lines per 4 keys of its scores (paced: see Ahead), so that a
// whole chunk is in flight while one computes: one core has only so many misses outstanding, and
// the hardware prefetchers do not cross the 4 KiB pages of a block nor guess the next block of
// the table. Earlier designs
// measured on this project's Zen 4 (bench_decode_core, bf16, GQA 4, one core, K/V in DRAM): rows
// copied head-major into a staging buffer first, the next chunk prefetched in one burst per head,
// 10.6 GB/s (the copy and the arithmetic did not overlap); prefetches spread evenly over scores
// and P V, 15.7; the paced bursts of this one, 19.3 (22 with today's arithmetic), against 21
// GB/s for a bare read of the same scattered blocks on one core.
// f16 caches use fp32 FMAs: AVX-512 FP16 has no f16 dot product with fp32 accumulation (that is
// AVX10.2's vdpphps), and pkv does not accumulate attention in f16.
#include "backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "pkv/pkv.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PKV_DECODE_KERNEL 1
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* temporaries
// when inlined (GCC PR 105593, fixed in 12.3).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "backend/cpu/dtype_cvt.h"
#include "backend/cpu/fp8.h"
#endif

namespace pkv {
namespace PKV_CPU_VARIANT {

#if !defined(PKV_DECODE_KERNEL)

bool decode_item(const CpuStep &, const CpuLayer &, const AttnItem &, float *, float *) {
  return false;
}

#else

namespace {
constexpr uint32_t kKeys = 64;  // keys per chunk at most (a multiple of 4)

// ------------------------------------------------------------------------------------ lanes
// The two register widths, with the same operations (all of them work within 128-bit lanes).
struct Ymm {
  using R = __m256;
  static constexpr uint32_t L = 8;
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float x) { return _mm256_set1_ps(x); }
  static R load(const float *p) { return _mm256_loadu_ps(p); }
  static void store(float *p, R x) { _mm256_storeu_ps(p, x); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R abs(R x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
  static R sign_of(R mag, R s) {  // |mag| with s's sign (mag >= 0)
    return _mm256_or_ps(mag, _mm256_and_ps(_mm256_set1_ps(-0.0f), s));
  }
  static R bcast1(const float *p) { return _mm256_broadcast_ss(p); }
  static R load_bf16(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static R load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
  }
  // L fp8 codes as floats, through halves (fp8.h's fp8_halves): e5m2 is a half's high byte; e4m3
  // moved into a half's fields reads 2^-8 of its value (the caller's kFp8Unit), and its NaN codes
  // (S.1111.111, which would read 1.875) are made a half's NaN.
  template <bool kE4M3> static R load_fp8(const uint8_t *p) {
    const __m128i high = _mm_unpacklo_epi8(_mm_setzero_si128(),
                                           _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p)));
    __m128i w = fp8_halves(high, kE4M3);
    if constexpr (kE4M3) {
      const __m128i nan =
          _mm_cmpeq_epi16(_mm_and_si128(high, _mm_set1_epi16(0x7f00)), _mm_set1_epi16(0x7f00));
      w = _mm_blendv_epi8(w, _mm_set1_epi16(0x7e00), nan);
    }
    return _mm256_cvtph_ps(w);
  }
  static R unpacklo(R a, R b) { return _mm256_unpacklo_ps(a, b); }
  static R unpackhi(R a, R b) { return _mm256_unpackhi_ps(a, b); }
  static R unpacklo2(R a, R b) {
    return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
  }
  static R unpackhi2(R a, R b) {
    return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
  }
  template <int kImm> static R permute(R x) { return _mm256_permute_ps(x, kImm); }
  static R round(R x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R exp2i(R n) {  // 2^n for integral n in [-126, 127]
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  static R zero_below(R x, R value, float lo) {  // 0 where x < lo, else value (NaN x: value)
    return _mm256_and_ps(value, _mm256_cmp_ps(x, set1(lo), _CMP_NLT_UQ));
  }
  // Block i of the result: the sum of r[i]'s 128-bit blocks.
  static R sum_blocks(const R *r) {
    return add(_mm256_permute2f128_ps(r[0], r[1], 0x20), _mm256_permute2f128_ps(r[0], r[1], 0x31));
  }
};

#if defined(__AVX512F__)
struct Zmm {
  using R = __m512;
  static constexpr uint32_t L = 16;
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float x) { return _mm512_set1_ps(x); }
  static R load(const float *p) { return _mm512_loadu_ps(p); }
  static void store(float *p, R x) { _mm512_storeu_ps(p, x); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R abs(R x) {
    return _mm512_castsi512_ps(
        _mm512_andnot_epi32(_mm512_set1_epi32(int32_t(0x80000000u)), _mm512_castps_si512(x)));
  }
  static R sign_of(R mag, R s) {
    const __m512i sign = _mm512_set1_epi32(int32_t(0x80000000u));
    return _mm512_castsi512_ps(
        _mm512_or_epi32(_mm512_castps_si512(mag), _mm512_and_epi32(sign, _mm512_castps_si512(s))));
  }
  static R bcast1(const float *p) { return _mm512_set1_ps(*p); }
  static R load_bf16(const uint16_t *p) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static R load_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
  }
  template <bool kE4M3> static R load_fp8(const uint8_t *p) {  // as Ymm's, 16 lanes wide
    __m256i w = _mm256_slli_epi16(
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))), 8);
    if constexpr (kE4M3) {
      const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(w, _mm256_set1_epi16(0x7f00)),
                                                    _mm256_set1_epi16(0x7f00));
      w = _mm256_and_si256(_mm256_srai_epi16(w, 1), _mm256_set1_epi16(short(0xbfff)));
      w = _mm256_mask_mov_epi16(w, nan, _mm256_set1_epi16(0x7e00));
    }
    return _mm512_cvtph_ps(w);
  }
  static R unpacklo(R a, R b) { return _mm512_unpacklo_ps(a, b); }
  static R unpackhi(R a, R b) { return _mm512_unpackhi_ps(a, b); }
  static R unpacklo2(R a, R b) {
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
  static R unpackhi2(R a, R b) {
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
  }
  template <int kImm> static R permute(R x) { return _mm512_permute_ps(x, kImm); }
  static R round(R x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static R exp2i(R n) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  static R zero_below(R x, R value, float lo) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, set1(lo), _CMP_NLT_UQ), value);
  }
  static R sum_blocks(const R *r) {  // block i: the sum of r[i]'s four 128-bit blocks
    const R u01 =
        add(_mm512_shuffle_f32x4(r[0], r[1], 0x44), _mm512_shuffle_f32x4(r[0], r[1], 0xEE));
    const R u23 =
        add(_mm512_shuffle_f32x4(r[2], r[3], 0x44), _mm512_shuffle_f32x4(r[2], r[3], 0xEE));
    return add(_mm512_shuffle_f32x4(u01, u23, 0x88), _mm512_shuffle_f32x4(u01, u23, 0xDD));
  }
};
#endif

// Within each group of 4 lanes, every lane gets the group's max / sum.
template <class W> inline typename W::R group_max(typename W::R x) {
  x = W::max(x, W::template permute<0xB1>(x));     // lanes 1 0 3 2
  return W::max(x, W::template permute<0x4E>(x));  // lanes 2 3 0 1
}
template <class W> inline typename W::R group_sum(typename W::R x) {
  x = W::add(x, W::template permute<0xB1>(x));
  return W::add(x, W::template permute<0x4E>(x));
}

// Four registers a, b, c, d -> in each 4-lane group: the sums of a's, b's, c's and d's lanes
// of that group.
template <class W>
inline typename W::R reduce4(typename W::R a, typename W::R b, typename W::R c, typename W::R d) {
  const typename W::R x = W::add(W::unpacklo(a, b), W::unpackhi(a, b));  // a0+a2 b0+b2 a1+a3 b1+b3
  const typename W::R y = W::add(W::unpacklo(c, d), W::unpackhi(c, d));
  return W::add(W::unpacklo2(x, y), W::unpackhi2(x, y));
}

// e^x for softmax arguments (x <= 0, -inf allowed): 0 below -87, NaN for NaN (a NaN score makes
// its head's output NaN, as in the fp64 reference); the polynomial of vec8.h's exp8 (rel. error
// ~2e-7), so the two paths round alike.
template <class W> inline typename W::R exp(typename W::R x) {
  using R = typename W::R;
  const R xc = W::max(W::set1(-87.0f), x);  // NaN stays NaN (max returns its second operand)
  const R n = W::round(W::mul(xc, W::set1(1.44269504088896341f)));
  const R r = W::fma(n, W::set1(2.12194440e-4f), W::fma(n, W::set1(-0.693359375f), xc));
  R p = W::set1(1.9875691500E-4f);
  p = W::fma(p, r, W::set1(1.3981999507E-3f));
  p = W::fma(p, r, W::set1(8.3334519073E-3f));
  p = W::fma(p, r, W::set1(4.1665795894E-2f));
  p = W::fma(p, r, W::set1(1.6666665459E-1f));
  p = W::fma(p, r, W::set1(5.0000001201E-1f));
  p = W::add(W::fma(W::mul(p, r), r, r), W::set1(1.0f));
  return W::zero_below(x, W::mul(p, W::exp2i(n)), -87.0f);
}

// Logit soft-capping: c tanh(x / c) (inv_c = 1 / c) as f32_lanes.h's lanes_softcap, through this
// file's exp: tanh(y) = sign(y) (1 - e) / (1 + e), e = e^(-2 |y|); ~2e-7 c absolute error.
template <class W>
inline typename W::R softcap(typename W::R x, typename W::R c, typename W::R inv_c) {
  using R = typename W::R;
  const R y = W::mul(x, inv_c);
  const R e = exp<W>(W::mul(W::abs(y), W::set1(-2.0f)));
  const R one = W::set1(1.0f);
  return W::sign_of(W::mul(c, W::div(W::sub(one, e), W::add(one, e))), y);
}

// ------------------------------------------------------------------------------------ layout
// What one call needs, per item.
struct Shape {
  uint32_t g, hd, kvh, esize;  // q heads per kv head, head_dim, kv heads, bytes per cache element
};

// Keys per chunk: the K and V rows of an item's heads, ~256 KiB (this chunk's and the next's in
// L2).
inline uint32_t chunk_keys(const Shape &s, uint32_t heads) {
  const size_t row = 2 * size_t(heads) * s.hd * s.esize;
  return uint32_t(std::clamp<size_t>((size_t(256) << 10) / row, 8, kKeys)) & ~3u;
}

// The scratch of one item (floats; sized by decode_item, which gives up when it does not fit).
// `regs` = registers per key of a kv head's scores (its q heads, 4 per 128-bit group each).
struct Buffers {
  float *acc;     // [q heads of the item][hd]
  float *q;       // [kv heads of the item][g][hd] q as fp32 (not with vdpbf16ps); fp8: bf16 rows
  uint16_t *ql;   // vdpbf16ps: quads of q heads in lanes (Decoder::arrange_q)
  uint16_t *kst;  // vdpbf16ps with fp8: 4 keys' rows as bf16 [4][padded hd]
  float *m, *l;   // [kv heads of the item][regs][L]: running max and sum, group-broadcast
  float *s;       // [kKeys / 4][regs][L] scores, then fp32 probabilities
  uint16_t *pb;   // [kKeys / 4][regs][L] probabilities as bf16 (the vdpbf16ps path)
  float *alpha;   // [g] rescale of each q head's state by this chunk
  void *zero;     // [hd] zero row (4-byte elements): the padding keys of a short last chunk
};

// ------------------------------------------------------------------------------------ fp8
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
// The bf16 of every fp8 magnitude (code & 0x7f), exact (bf16 holds every e4m3 and e5m2 value as a
// normal number), NaN codes as NaN and e5m2's infinity as infinity; split in high and low bytes
// for two 128-entry byte lookups (vpermi2b).
template <class C> constexpr uint16_t fp8_bf16_bits(uint32_t m) {
  constexpr uint32_t kMan = C::kMan, kBias = C::kBias;
  if (kMan == 3 && m == 0x7f) return 0x7fc0;                       // e4m3 NaN
  if (kMan == 2 && m >= 0x7c) return m == 0x7c ? 0x7f80 : 0x7fc0;  // e5m2 inf, NaN
  const uint32_t e = m >> kMan, f = m & ((1u << kMan) - 1);
  if (e == 0) {  // subnormal: f * 2^(1 - bias - kMan), normalized
    if (f == 0) return 0;
    uint32_t p = 0;
    while ((f >> (p + 1)) != 0) ++p;
    const uint32_t exp = p + 1 + 127 - kBias - kMan;
    return uint16_t((exp << 7) | ((f - (1u << p)) << (7 - p)));
  }
  return uint16_t(((e + 127 - kBias) << 7) | (f << (7 - kMan)));
}
template <class C> struct Fp8Table {
  alignas(64) uint8_t hi[128], lo[128];
  constexpr Fp8Table() : hi(), lo() {
    for (uint32_t m = 0; m < 128; ++m) {
      hi[m] = uint8_t(fp8_bf16_bits<C>(m) >> 8);
      lo[m] = uint8_t(fp8_bf16_bits<C>(m) & 0xff);
    }
  }
};
template <class C> constexpr Fp8Table<C> kFp8Table{};

// fp8 codes to bf16 in registers, 64 at a time by two byte lookups (the high and the low bytes of
// the bf16 values) and one unpack of low and high bytes, which interleaves within 128-bit lanes.
//  - pairs(): 32 codes of two rows, as the P V loop wants them: the same registers as
//    unpacklo/hi_epi16 of the two rows' bf16 values (one vpermb first puts the codes in order).
//  - row64(): 64 codes of one row, for the scores, without the vpermb: the words come out in the
//    order of q_order(), in which the q rows are arranged once per item.
struct NoTables {};
template <class C> struct Fp8Bf16 {
  __m512i hi0, hi1, lo0, lo1, order, sign;
  Fp8Bf16() {
    const Fp8Table<C> &t = kFp8Table<C>;
    hi0 = _mm512_load_si512(t.hi), hi1 = _mm512_load_si512(t.hi + 64);
    lo0 = _mm512_load_si512(t.lo), lo1 = _mm512_load_si512(t.lo + 64);
    alignas(64) static constexpr struct Order {
      uint8_t idx[64];
      constexpr Order() : idx() {  // byte 16c + 2e + k: row k's code 8c + e
        for (uint32_t c = 0; c < 4; ++c)
          for (uint32_t e = 0; e < 8; ++e)
            for (uint32_t k = 0; k < 2; ++k) idx[c * 16 + 2 * e + k] = uint8_t(k * 32 + c * 8 + e);
      }
    } kOrder{};
    order = _mm512_load_si512(kOrder.idx);
    sign = _mm512_set1_epi8(char(0x80));
  }
  void pairs(const uint8_t *r0, const uint8_t *r1, __m512i &p0, __m512i &p1) const {
    const __m512i both = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(r0))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(r1)), 1);
    const __m512i codes = _mm512_permutexvar_epi8(order, both);
    const __m512i hi =
        _mm512_or_si512(_mm512_permutex2var_epi8(hi0, codes, hi1), _mm512_and_si512(codes, sign));
    const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    p0 = _mm512_unpacklo_epi8(lo, hi);
    p1 = _mm512_unpackhi_epi8(lo, hi);
  }
  // Codes r[0 .. 64) (the live ones; the others read 0) -> w0 = values 0-7, 16-23, 32-39, 48-55
  // and w1 = 8-15, 24-31, 40-47, 56-63, as bf16.
  void row64(const uint8_t *r, __mmask64 live, __m512i &w0, __m512i &w1) const {
    const __m512i codes = _mm512_maskz_loadu_epi8(live, r);
    const __m512i hi =
        _mm512_or_si512(_mm512_permutex2var_epi8(hi0, codes, hi1), _mm512_and_si512(codes, sign));
    const __m512i lo = _mm512_permutex2var_epi8(lo0, codes, lo1);
    w0 = _mm512_unpacklo_epi8(lo, hi);
    w1 = _mm512_unpackhi_epi8(lo, hi);
  }
  // The position in a 64-value block of row64's word i (0 .. 63: w0's, then w1's).
  static constexpr uint32_t q_order(uint32_t i) { return (i % 32) / 8 * 16 + i / 32 * 8 + i % 8; }
};
#endif

// ------------------------------------------------------------------------------------ kernel
// W: register width; Dot: vdpbf16ps on bf16 rows (else fp32 FMAs); C: the cache's element type.
template <class W, bool Dot, class C> class Decoder {
  using R = typename W::R;
  static constexpr uint32_t L = W::L, kHeadsPerReg = L / 4;
  static constexpr bool kFp8 = kIsFp8<C>;
  // The loops read the cache's rows where they are, converting in registers. What the fp32
  // path's fp8 values read, times their value (load_fp8): the scores and the output are
  // multiplied by it, once.
  static constexpr float kFp8Unit = !Dot && std::is_same_v<C, Fp8E4M3> ? 256.0f : 1.0f;

 public:
  Decoder(const CpuStep &step, const CpuLayer &layer, const Shape &s, const Buffers &b)
      : step_(step), layer_(layer), s_(s), b_(b), regs_((s.g + kHeadsPerReg - 1) / kHeadsPerReg) {}

  // Floats of scratch the item needs besides acc (decode_item checks them against the scratch).
  static size_t staging_floats(const Shape &s, uint32_t kv_heads) {
    const size_t regs = (s.g + kHeadsPerReg - 1) / kHeadsPerReg;
    const size_t q = q_floats(s, kv_heads) + lanes_floats(s, kv_heads) + staged_floats(s);
    const size_t state = 2 * size_t(kv_heads) * regs * L;
    const size_t scores = (kKeys / 4) * regs * L;
    return q + state + 2 * scores + s.g + s.hd + 64;
  }

  // head_dim in whole 64-value blocks (Dot with fp8: the arranged q rows' length).
  static uint32_t padded_hd(const Shape &s) { return (s.hd + 63) / 64 * 64; }
  // The arranged q rows' floats: fp32 rows without Dot; with Dot, bf16 rows in fp8's order
  // (bf16 caches: none, the model's rows are read where they are).
  static size_t q_floats(const Shape &s, uint32_t kv_heads) {
    if constexpr (!Dot) return size_t(kv_heads) * s.g * s.hd;
    return kFp8 ? size_t(kv_heads) * s.g * padded_hd(s) / 2 : 0;
  }
  // The quads of q heads in lanes (bf16), and fp8's staged keys (bf16): floats of each.
  static size_t lanes_floats(const Shape &s, uint32_t kv_heads) {
    return Dot ? size_t(kv_heads) * lane_quads(s) * s.hd * 2 : 0;
  }
  // Quads of q heads per kv head that score4_lanes takes (in pairs).
  static uint32_t lane_quads(const Shape &s) { return s.g / 8 * 2; }
  static size_t staged_floats(const Shape &s) { return Dot && kFp8 ? 2 * size_t(padded_hd(s)) : 0; }

  void run(const AttnItem &it, float *partial) {
    const uint32_t hd = s_.hd, g = s_.g, qh = it.num_heads * g;
    const uint32_t token =
        step_.query_start[it.seq] + it.row0;  // the one row (of a decode, or a tile)
    arrange_q(it, token);
    item_head_ = it.head;
    q_bf16_ = static_cast<const uint16_t *>(layer_.q) +
              (size_t(token) * layer_.q_heads + size_t(it.head) * g) * hd;
    ahead_.start(s_, it.head, it.num_heads);
    std::fill(b_.acc, b_.acc + size_t(qh) * hd, 0.0f);
    for (uint32_t i = 0; i < it.num_heads * regs_ * L; ++i)
      b_.m[i] = -__builtin_inff(), b_.l[i] = 0.0f;
    std::memset(b_.zero, 0, size_t(hd) * 4);
    const int32_t *table = step_.block_table(layer_.group, it.seq);
    const uint32_t kc = chunk_keys(s_, it.num_heads);
    // Element offsets of each key's row (kv head 0) in the layer's caches: this chunk's, the next's.
    size_t rows[2][kKeys];
    uint32_t n = offsets(table, it.key0, std::min(it.key1, it.key0 + kc), rows[0]);
    for (uint32_t key = it.key0, c = 0; key < it.key1; key += kc, c ^= 1) {
      const uint32_t next =
          key + kc < it.key1
              ? offsets(table, key + kc, std::min(it.key1, key + 2 * kc), rows[c ^ 1])
              : 0;
      chunk_ = rows[c];
      for (uint32_t h = 0; h < it.num_heads; ++h) {
        ahead_.share(rows[c ^ 1], next, h, it.num_heads, (n + 3) / 4);
        const uint32_t head = it.head + h;
        scores(h, n);
        ahead_.all();
        if (layer_.softcap > 0.0f)  // once per chunk and head: the loops stay today's without it
          softmax<true>(h, head, n);
        else
          softmax<false>(h, head, n);
        accumulate(h, n);
      }
      n = next;
    }
    finish(it, token, partial);
  }

 private:
  // Row offsets of keys [key, end) (at most kKeys) into row; their count.
  uint32_t offsets(const int32_t *table, uint32_t key, uint32_t end, size_t *row) const {
    const uint32_t n = end - key, bs = step_.block_size;
    const size_t block = block_;  // K's and V's (decode_item takes V rows as wide as K's only)
    for (uint32_t t = 0; t < n; ++t) {
      const uint32_t pos = key + t;
      row[t] = size_t(table[pos / bs]) * block + size_t(pos % bs) * s_.kvh * s_.hd;
    }
    return n;
  }

  // Key t's row of the item's kv head h in the chunk, in the pool.
  const C *k_row(uint32_t h, uint32_t t) const {
    return static_cast<const C *>(layer_.k_cache) + chunk_[t] + size_t(item_head_ + h) * s_.hd;
  }
  const C *v_row(uint32_t h, uint32_t t) const {
    return static_cast<const C *>(layer_.v_cache) + chunk_[t] + size_t(item_head_ + h) * s_.hd;
  }

  // The next chunk's cache lines (the item's heads, K and V), requested a head's share at a time:
  // share() sets the share and its pace (lines per quad of keys of the head's scores), step()
  // requests the pace's lines, all() what is left of the share.
  class Ahead {
   public:
    Ahead(const CpuLayer &layer, const Shape &s)
        : k_(static_cast<const char *>(layer.k_cache)),
          v_(static_cast<const char *>(layer.v_cache)),
          esize_(s.esize) {}
    void start(const Shape &s, uint32_t head, uint32_t heads) {
      base_ = size_t(head) * s.hd * s.esize;
      bytes_ = size_t(heads) * s.hd * s.esize;
    }
    void share(const size_t *rows, uint32_t n, uint32_t h, uint32_t heads, uint32_t quads) {
      rows_ = rows, t_ = n * h / heads, end_ = n * (h + 1) / heads, o_ = 0;
      const size_t lines = size_t(end_ - t_) * ((bytes_ + 63) / 64);
      pace_ = uint32_t((lines + quads - 1) / quads);
    }
    void step() { request(pace_); }
    void all() { request(~0u); }

   private:
    // One line (of K and of V) per turn, the position kept in the members, in memory: the compiler
    // barrier makes each turn store and reload them, which paces the requests at a few cycles
    // each, among the arithmetic. The same loop in registers issues a step's lines in one burst
    // that fills the miss queues and stalls the core: 13 against 19 GB/s (bench_decode_core
    // --dram, bf16, GQA 4, this project's Zen 4); spreading a step's lines over the scores'
    // inner loop instead measured 17.
    void request(uint32_t lines) {
      for (; lines && t_ < end_; --lines) {
        const size_t at = rows_[t_] * esize_ + base_ + o_;
        _mm_prefetch(k_ + at, _MM_HINT_T1);
        _mm_prefetch(v_ + at, _MM_HINT_T1);
        if ((o_ += 64) >= bytes_) o_ = 0, ++t_;
        asm volatile("" ::: "memory");
      }
    }
    const char *const k_, *const v_;  // the layer's caches
    const size_t esize_;
    const size_t *rows_ = nullptr;
    size_t base_ = 0, bytes_ = 0, o_ = 0;
    uint32_t t_ = 0, end_ = 0, pace_ = 0;
  };

  // The item's q heads, [kv head][q head of it][row]: without Dot as fp32 rows; with Dot and fp8
  // as bf16 rows of padded_hd values, each 64-value block in Fp8Bf16::row64's order (past hd: 0).
  // With Dot also, for score4_lanes, the pairs of quads of each kv head's q heads in lanes: bf16
  // [kv head][quad][8-value block][head of the quad][8].
  void arrange_q(const AttnItem &it, uint32_t token) {
    const size_t q0 =
        (size_t(token) * layer_.q_heads + size_t(it.head) * s_.g) * s_.hd;  // its first q head
    const size_t rows = size_t(it.num_heads) * s_.g;
    if constexpr (!Dot) {
      for (size_t i = 0; i < rows * s_.hd; ++i) b_.q[i] = q_float(q0 + i);
    } else {
      const uint16_t *q = static_cast<const uint16_t *>(layer_.q) + q0;
      const uint32_t quads = lane_quads(s_), blocks = s_.hd / 8;
      for (uint32_t h = 0; h < it.num_heads; ++h)
        for (uint32_t r = 0; r < quads; ++r)
          for (uint32_t b = 0; b < blocks; ++b)
            for (uint32_t i = 0; i < 4; ++i)
              std::memcpy(b_.ql + ((size_t(h) * quads + r) * blocks + b) * 32 + i * 8,
                          q + (size_t(h) * s_.g + 4 * r + i) * s_.hd + 8 * b, 16);
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
      if constexpr (kFp8) {
        const uint32_t hdp = padded_hd(s_);
        uint16_t *dst = reinterpret_cast<uint16_t *>(b_.q);
        for (size_t j = 0; j < rows; ++j)
          for (uint32_t d = 0; d < hdp; ++d) {
            const uint32_t at = d / 64 * 64 + Fp8Bf16<C>::q_order(d % 64);
            dst[j * hdp + d] = at < s_.hd ? q[j * s_.hd + at] : 0;
          }
      }
#endif
    }
  }
  float q_float(size_t at) const {
    switch (layer_.dtype) {
      case PKV_DTYPE_F16:
        return float(static_cast<const _Float16 *>(layer_.q)[at]);
      case PKV_DTYPE_BF16: {
        const uint32_t u = uint32_t(static_cast<const uint16_t *>(layer_.q)[at]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      }
      default:
        return static_cast<const float *>(layer_.q)[at];
    }
  }
  // ---- scores of kv head h's q heads against the chunk's n keys -> b_.s, scaled
  void scores(uint32_t h, uint32_t n) {
    // The rows the loop reads, 4 keys at a time; past n: the zero row.
    const void *rows[kKeys];
    for (uint32_t t = 0; t < n; ++t) rows[t] = k_row(h, t);
    for (uint32_t t = n; t < (n + 3) / 4 * 4; ++t) rows[t] = b_.zero;
    for (uint32_t t = 0; t < n; t += 4) {
      ahead_.step();
      for (uint32_t r = 0; r < regs_; ++r) {
        const uint32_t j0 = r * kHeadsPerReg;
        float *out = b_.s + (size_t(t / 4) * regs_ + r) * L;
        if constexpr (Dot) {
          if (s_.g - j0 >= 8) {  // this register's heads and the next's
            score4_lanes(h, r, rows + t, out);
            ++r;
            continue;
          }
        }
        switch (std::min(kHeadsPerReg, s_.g - j0)) {
          case 1:
            score4_rows<1>(h, j0, rows + t, out);
            break;
          case 2:
            score4_rows<2>(h, j0, rows + t, out);
            break;
          default:
            if constexpr (kHeadsPerReg == 4) {
              if (s_.g - j0 == 3)
                score4_rows<3>(h, j0, rows + t, out);
              else
                score4_rows<4>(h, j0, rows + t, out);
            }
        }
      }
    }
  }

  // Keys rows[0..3] against q heads j0 .. j0 + NH of kv head h (NH <= kHeadsPerReg): a register
  // of each key's row at a time (L floats, or 32 bf16 values with Dot), multiplied with the same
  // values of each q head's row, then each (head, key)'s lanes summed. out: group i holds head
  // j0 + i's 4 scores (groups past NH: 0). Every lane does useful work and the loads are whole
  // rows, converted in registers (f16 by vcvtph2ps): no broadcasts, which cost as much as the
  // multiply-adds, and no converted copy of the chunk to store and read back.
  template <uint32_t NH>
  void score4_rows(uint32_t h, uint32_t j0, const void *const *rows, float *out) const {
    constexpr uint32_t kSplit = NH == 1 ? 2 : 1;  // independent chains: at least 8
    const uint32_t hd = s_.hd;
    const size_t q0 = (size_t(h) * s_.g + j0) * hd;  // the first q head's row
    R acc[kSplit][NH][4];
    for (uint32_t x = 0; x < kSplit; ++x)
      for (uint32_t j = 0; j < NH; ++j)
        for (uint32_t k = 0; k < 4; ++k) acc[x][j][k] = W::zero();
    if constexpr (Dot && kFp8) {
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
      // 64 codes of each key per step, against q rows arranged in the order they come out in.
      const uint32_t hdp = padded_hd(s_);
      const uint16_t *q = reinterpret_cast<const uint16_t *>(b_.q) + (size_t(h) * s_.g + j0) * hdp;
      for (uint32_t d = 0; d < hd; d += 64) {
        const __mmask64 live = hd - d >= 64 ? ~__mmask64(0) : (__mmask64(1) << (hd - d)) - 1;
        __m512i w0[4], w1[4];
        for (uint32_t k = 0; k < 4; ++k)
          fp8_.row64(static_cast<const uint8_t *>(rows[k]) + d, live, w0[k], w1[k]);
        for (uint32_t j = 0; j < NH; ++j) {
          const __m512bh q0v =
              reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + size_t(j) * hdp + d));
          const __m512bh q1v =
              reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + size_t(j) * hdp + d + 32));
          for (uint32_t k = 0; k < 4; ++k) {
            acc[0][j][k] = _mm512_dpbf16_ps(acc[0][j][k], reinterpret_cast<__m512bh>(w0[k]), q0v);
            acc[kSplit - 1][j][k] =
                _mm512_dpbf16_ps(acc[kSplit - 1][j][k], reinterpret_cast<__m512bh>(w1[k]), q1v);
          }
        }
      }
#endif
    } else if constexpr (Dot) {
#if defined(__AVX512BF16__)
      const uint16_t *q = q_bf16_ + q0;
      for (uint32_t d0 = 0; d0 < hd; d0 += kSplit * 32)
        for (uint32_t x = 0; x < kSplit; ++x) {  // unrolled: acc[x] stays in registers
          const uint32_t d = d0 + 32 * x;
          if (d >= hd) break;
          __m512i kv[4];
          for (uint32_t k = 0; k < 4; ++k)
            kv[k] = _mm512_loadu_si512(static_cast<const uint16_t *>(rows[k]) + d);
          for (uint32_t j = 0; j < NH; ++j) {
            const __m512bh qv =
                reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + size_t(j) * hd + d));
            for (uint32_t k = 0; k < 4; ++k)
              acc[x][j][k] = _mm512_dpbf16_ps(acc[x][j][k], reinterpret_cast<__m512bh>(kv[k]), qv);
          }
        }
#endif
    } else {
      const float *q = b_.q + q0;
      for (uint32_t d0 = 0; d0 < hd; d0 += kSplit * L)
        for (uint32_t x = 0; x < kSplit; ++x) {  // unrolled: acc[x] stays in registers
          const uint32_t d = d0 + L * x;
          if (d >= hd) break;
          R kv[4];
          for (uint32_t k = 0; k < 4; ++k) kv[k] = key_vals(rows[k], d);
          for (uint32_t j = 0; j < NH; ++j) {
            const R qv = W::load(q + size_t(j) * hd + d);
            for (uint32_t k = 0; k < 4; ++k) acc[x][j][k] = W::fma(kv[k], qv, acc[x][j][k]);
          }
        }
    }
    R r[kHeadsPerReg];  // r[j]'s 128-bit block b: head j's 4 keys over block b's lanes
    for (uint32_t j = 0; j < kHeadsPerReg; ++j) {
      if (j >= NH) {
        r[j] = W::zero();
        continue;
      }
      R a[4];
      for (uint32_t k = 0; k < 4; ++k)
        a[k] = kSplit == 2 ? W::add(acc[0][j][k], acc[kSplit - 1][j][k]) : acc[0][j][k];
      r[j] = reduce4<W>(a[0], a[1], a[2], a[3]);
    }
    W::store(out, W::sum_blocks(r));
  }
  // Keys rows[0..3] against quads r and r + 1 of kv head h's q heads (8 heads), the heads in lanes:
  // each 8-value block of a key, broadcast to the four 128-bit lanes, against the same block of a
  // quad's 4 heads. One reduction per quad, 4 x 4 scores (against 4 x 4 per row-wise register),
  // at the price of a load per key and block, which the two quads share. fp8 keys are converted
  // first (row64, 64 values by 64) into b_.kst, in row64's order: block 2c + x of a 64-value
  // block is lane c of w0 (x = 0) or w1 (x = 1).
  void score4_lanes(uint32_t h, uint32_t r, const void *const *rows, float *out) const {
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
    constexpr uint32_t NQ = 2;
    const uint32_t hd = s_.hd, blocks = hd / 8, hdp = padded_hd(s_);
    const uint16_t *q = b_.ql + (size_t(h) * lane_quads(s_) + r) * blocks * 32;
    const uint16_t *key[4];
    if constexpr (kFp8) {
      for (uint32_t k = 0; k < 4; ++k) {
        uint16_t *st = b_.kst + size_t(k) * hdp;
        for (uint32_t d = 0; d < hd; d += 64) {
          const __mmask64 live = hd - d >= 64 ? ~__mmask64(0) : (__mmask64(1) << (hd - d)) - 1;
          __m512i w0, w1;
          fp8_.row64(static_cast<const uint8_t *>(rows[k]) + d, live, w0, w1);
          _mm512_storeu_si512(st + d, w0);
          _mm512_storeu_si512(st + d + 32, w1);
        }
        key[k] = st;
      }
    } else {
      for (uint32_t k = 0; k < 4; ++k) key[k] = static_cast<const uint16_t *>(rows[k]);
    }
    // Block b's 8 values in key[k]: in place, or where row64 put them.
    const auto at = [](uint32_t b) {
      return kFp8 ? b / 8 * 64 + b % 2 * 32 + b / 2 % 4 * 8 : 8 * b;
    };
    R acc[NQ][4];  // 8 independent chains
    for (uint32_t c = 0; c < NQ; ++c)
      for (uint32_t k = 0; k < 4; ++k) acc[c][k] = W::zero();
    for (uint32_t b = 0; b < blocks; ++b) {
      __m512bh qv[NQ];
      for (uint32_t c = 0; c < NQ; ++c)
        qv[c] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(q + (size_t(c) * blocks + b) * 32));
      for (uint32_t k = 0; k < 4; ++k) {
        const __m512bh kb = reinterpret_cast<__m512bh>(_mm512_broadcast_i32x4(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(key[k] + at(b)))));
        for (uint32_t c = 0; c < NQ; ++c) acc[c][k] = _mm512_dpbf16_ps(acc[c][k], kb, qv[c]);
      }
    }
    for (uint32_t c = 0; c < NQ; ++c)
      W::store(out + c * L, reduce4<W>(acc[c][0], acc[c][1], acc[c][2], acc[c][3]));
#else
    (void)h, (void)r, (void)rows, (void)out;
#endif
  }
  // L values of a key's row from d, as floats (fp8: times kFp8Unit).
  R key_vals(const void *row, uint32_t d) const {
    return load_row(static_cast<const C *>(row) + d);
  }
  // L elements of a row as floats, converted in registers.
  static R load_row(const C *p) {
    if constexpr (std::is_same_v<C, Bf16>)
      return W::load_bf16(reinterpret_cast<const uint16_t *>(p));
    else if constexpr (std::is_same_v<C, _Float16>)
      return W::load_f16(reinterpret_cast<const uint16_t *>(p));
    else if constexpr (kFp8)
      return W::template load_fp8<C::kMan == 3>(reinterpret_cast<const uint8_t *>(p));
    else
      return W::load(reinterpret_cast<const float *>(p));
  }

  // The factor of every score: the softmax scale, and fp8's K scale (the loops use the codes'
  // values).
  float score_scale(uint32_t head) const {
    if constexpr (kFp8) return layer_.scale * layer_.k_scale[head];
    return layer_.scale;
  }
  float out_scale(uint32_t head) const {
    if constexpr (kFp8) return layer_.v_scale[head];
    return 1.0f;
  }

  // ---- online softmax over the chunk's scores of kv head h: probabilities into b_.s (fp32)
  // or b_.pb (bf16), each head's rescale into b_.alpha, the running max and sum updated.
  template <bool kCap> void softmax(uint32_t h, uint32_t head, uint32_t n) {
    const uint32_t quads = (n + 3) / 4;
    const R scale = W::set1(score_scale(head)), unit = W::set1(kFp8Unit);
    const R cap = W::set1(layer_.softcap), inv_cap = W::set1(kCap ? 1.0f / layer_.softcap : 0.0f);
    // Keys past n (the last quad's lanes >= n % 4 in every group): -inf.
    alignas(64) float pad[L];
    for (uint32_t i = 0; i < L; ++i) pad[i] = n % 4 && i % 4 >= n % 4 ? -__builtin_inff() : 0.0f;
    const R last_pad = W::load(pad);
    float *mh = b_.m + size_t(h) * regs_ * L, *lh = b_.l + size_t(h) * regs_ * L;
    for (uint32_t r = 0; r < regs_; ++r) {
      R mx = W::set1(-__builtin_inff());
      for (uint32_t t4 = 0; t4 < quads; ++t4) {
        float *at = b_.s + (size_t(t4) * regs_ + r) * L;
        R x = W::load(at);
        if constexpr (kFp8Unit != 1.0f) x = W::mul(x, unit);  // exact: a power of two
        x = W::mul(x, scale);
        if constexpr (kCap) x = softcap<W>(x, cap, inv_cap);
        if (t4 + 1 == quads) x = W::add(x, last_pad);
        W::store(at, x);
        mx = W::max(mx, x);
      }
      const R m_old = W::load(mh + r * L), m_new = W::max(m_old, group_max<W>(mx));
      const R alpha = exp<W>(W::sub(m_old, m_new));  // 0 at the first chunk (m_old = -inf)
      R l = W::mul(W::load(lh + r * L), alpha);
      for (uint32_t t4 = 0; t4 < quads; ++t4) {
        float *at = b_.s + (size_t(t4) * regs_ + r) * L;
        R p = exp<W>(W::sub(W::load(at), m_new));
#if defined(__AVX512BF16__)
        if constexpr (Dot) {
          const __m256i pb = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(p));
          _mm256_storeu_si256(reinterpret_cast<__m256i *>(b_.pb + (size_t(t4) * regs_ + r) * L),
                              pb);
          p = _mm512_castsi512_ps(
              _mm512_slli_epi32(_mm512_cvtepu16_epi32(pb), 16));  // the rounded values
        }
#endif
        if constexpr (!Dot) W::store(at, p);
        l = W::add(l, p);
      }
      W::store(mh + r * L, m_new);
      W::store(lh + r * L, l);
      alignas(64) float a[L];
      W::store(a, alpha);
      for (uint32_t i = 0; i < kHeadsPerReg && r * kHeadsPerReg + i < s_.g; ++i)
        b_.alpha[r * kHeadsPerReg + i] = a[i * 4];
    }
  }

  // ---- acc of kv head h's q heads: times alpha, plus the chunk's P V
  void accumulate(uint32_t h, uint32_t n) {
    const void *rows[kKeys + 1];
    for (uint32_t t = 0; t < n; ++t) rows[t] = v_row(h, t);
    rows[n] = b_.zero;  // the pair of an odd last key (its probability is 0)
    const uint32_t g = s_.g;
    for (uint32_t j = 0; j < g;) {  // passes of 8, 4, 2 or 1 heads
      const uint32_t hp = g - j >= 8 ? 8 : g - j >= 4 ? 4 : g - j >= 2 ? 2 : 1;
      if (hp == 8)
        pass<8>(h, j, rows, n);
      else if (hp == 4)
        pass<4>(h, j, rows, n);
      else if (hp == 2)
        pass<2>(h, j, rows, n);
      else
        pass<1>(h, j, rows, n);
      j += hp;
    }
  }
  // Registers per head of a pass of HP heads: as many as keep 16 accumulators, as long as they
  // tile head_dim (Dot: pairs of registers, 32 values each).
  template <uint32_t HP> void pass(uint32_t h, uint32_t j0, const void *const *rows, uint32_t n) {
    constexpr uint32_t kMax = 16 / HP;
    const uint32_t hd = s_.hd, unit = Dot ? 32 : L;  // head_dim per register pair / register
    uint32_t a = kMax;
    while (a > (Dot ? 2u : 1u) && hd % (a * (Dot ? 16 : L)) != 0) a /= 2;
    (void)unit;
    switch (a) {
      case 16:
        if constexpr (kMax >= 16) return pass_a<HP, 16>(h, j0, rows, n);
        break;
      case 8:
        if constexpr (kMax >= 8) return pass_a<HP, 8>(h, j0, rows, n);
        break;
      case 4:
        if constexpr (kMax >= 4) return pass_a<HP, 4>(h, j0, rows, n);
        break;
      case 2:
        if constexpr (kMax >= 2) return pass_a<HP, 2>(h, j0, rows, n);
        break;
      default:
        break;
    }
    if constexpr (!Dot) pass_a<HP, 1>(h, j0, rows, n);
  }
  // Heads [j0, j0 + HP) of kv head h, A registers each, over head_dim A * (Dot ? 16 : L) at a time.
  template <uint32_t HP, uint32_t A>
  void pass_a(uint32_t h, uint32_t j0, const void *const *rows, uint32_t n) {
    const uint32_t hd = s_.hd, g = s_.g;
    constexpr uint32_t kSpan = A * (Dot ? 16 : W::L);
    for (uint32_t d0 = 0; d0 < hd; d0 += kSpan) {
      R acc[HP][A];
      for (uint32_t jj = 0; jj < HP; ++jj) {
        const R alpha = W::set1(b_.alpha[j0 + jj]);
        const float *src = b_.acc + (size_t(h) * g + j0 + jj) * hd + d0;
        for (uint32_t a = 0; a < A; ++a) acc[jj][a] = W::mul(W::load(src + a * W::L), alpha);
      }
      if constexpr (Dot) {
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
        for (uint32_t t = 0; t < n; t += 2) {
          __m512i pair[A];
          const C *r0 = static_cast<const C *>(rows[t]) + d0;
          const C *r1 = static_cast<const C *>(rows[t + 1]) + d0;  // rows[n]: zero
          for (uint32_t z = 0; z < A / 2; ++z) {
            if constexpr (kFp8) {
              fp8_.pairs(reinterpret_cast<const uint8_t *>(r0 + 32 * z),
                         reinterpret_cast<const uint8_t *>(r1 + 32 * z), pair[2 * z],
                         pair[2 * z + 1]);
            } else {
              const __m512i x = _mm512_loadu_si512(r0 + 32 * z),
                            y = _mm512_loadu_si512(r1 + 32 * z);
              pair[2 * z] = _mm512_unpacklo_epi16(x, y);
              pair[2 * z + 1] = _mm512_unpackhi_epi16(x, y);
            }
          }
          const uint16_t *pt = prob_bf16(j0, t);  // head j0 + jj's: pt + 4 * jj
          for (uint32_t jj = 0; jj < HP; ++jj) {
            int32_t pp;
            std::memcpy(&pp, pt + 4 * jj, 4);
            const __m512bh p = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pp));
            for (uint32_t a = 0; a < A; ++a)
              acc[jj][a] = _mm512_dpbf16_ps(acc[jj][a], reinterpret_cast<__m512bh>(pair[a]), p);
          }
        }
#endif
      } else {
        for (uint32_t t = 0; t < n; ++t) {
          R v[A];
          for (uint32_t a = 0; a < A; ++a) v[a] = v_load(rows[t], d0 + a * W::L);
          const float *pt = prob(j0, t);  // head j0 + jj's: pt + 4 * jj
          for (uint32_t jj = 0; jj < HP; ++jj) {
            const R p = W::bcast1(pt + 4 * jj);
            for (uint32_t a = 0; a < A; ++a) acc[jj][a] = W::fma(p, v[a], acc[jj][a]);
          }
        }
      }
      for (uint32_t jj = 0; jj < HP; ++jj) {
        float *dst = b_.acc + (size_t(h) * g + j0 + jj) * hd + d0;
        for (uint32_t a = 0; a < A; ++a) W::store(dst + a * W::L, acc[jj][a]);
      }
    }
  }
  R v_load(const void *row, uint32_t d) const { return load_row(static_cast<const C *>(row) + d); }
  // Head j's probability of chunk key t (fp32), or of keys t, t + 1 (bf16 pair; t even). Group i
  // of register r holds head r * kHeadsPerReg + i, and L = 4 * kHeadsPerReg: head j's 4 lanes
  // start at 4 * j.
  const float *prob(uint32_t j, uint32_t t) const {
    return b_.s + size_t(t / 4) * regs_ * L + 4 * j + t % 4;
  }
  const uint16_t *prob_bf16(uint32_t j, uint32_t t) const {
    return b_.pb + size_t(t / 4) * regs_ * L + 4 * j + t % 4;
  }

  // ---- the item's result: (m, l, acc) into partial, or acc / l into out
  void finish(const AttnItem &it, uint32_t token, float *partial) const {
    const uint32_t hd = s_.hd, g = s_.g, qh = it.num_heads * g;
    for (uint32_t h = 0; h < it.num_heads; ++h) {
      const float scale = out_scale(it.head + h);
      for (uint32_t j = 0; j < g; ++j) {
        const uint32_t i = h * g + j;
        const size_t lane = (size_t(h) * regs_ + j / kHeadsPerReg) * L + (j % kHeadsPerReg) * 4;
        const float m = b_.m[lane];
        const float l = (b_.l[lane] + b_.l[lane + 1]) + (b_.l[lane + 2] + b_.l[lane + 3]);
        float *acc = b_.acc + size_t(i) * hd;
        if constexpr (Dot) unpermute(acc);
        if constexpr (kFp8Unit != 1.0f)
          for (uint32_t d = 0; d < hd; ++d) acc[d] *= kFp8Unit;  // exact: a power of two
        if (partial) {
          partial[i] = m;
          partial[qh + i] = l;
          float *dst = partial + 2 * size_t(qh) + size_t(i) * hd;
          for (uint32_t d = 0; d < hd; ++d) dst[d] = acc[d] * scale;
          continue;
        }
        const size_t q_head = size_t(it.head) * g + i;
        const float mult = layer_.sinks ? scale * sink_scale(m, l, layer_.sinks[q_head])
                           : l > 0      ? scale / l
                                        : 0.0f;
        write_out(acc, mult, (size_t(token) * layer_.q_heads + q_head) * hd);
      }
    }
  }
  // Dot's acc holds each 32 values of head_dim as [d 0-3, 8-11, 16-19, 24-27][d 4-7, 12-15, ...]
  // (unpacklo/hi_epi16 of two rows): back to order.
  void unpermute(float *acc) const {
    for (uint32_t d0 = 0; d0 < s_.hd; d0 += 32) {
      float tmp[32];
      std::memcpy(tmp, acc + d0, sizeof tmp);
      for (uint32_t c = 0; c < 4; ++c) {
        std::memcpy(acc + d0 + c * 8, tmp + c * 4, 16);
        std::memcpy(acc + d0 + c * 8 + 4, tmp + 16 + c * 4, 16);
      }
    }
  }
  void write_out(const float *acc, float mult, size_t at) const {
    switch (layer_.dtype) {
      case PKV_DTYPE_F16:
        return from_float_scaled(acc, mult, static_cast<_Float16 *>(layer_.out) + at, s_.hd);
      case PKV_DTYPE_BF16:
        return from_float_scaled(acc, mult, static_cast<Bf16 *>(layer_.out) + at, s_.hd);
      default:
        return from_float_scaled(acc, mult, static_cast<float *>(layer_.out) + at, s_.hd);
    }
  }

  const CpuStep &step_;
  const CpuLayer &layer_;
  const Shape &s_;
  const Buffers &b_;
  const uint32_t regs_;
  const size_t block_ = layer_.k_block_elts(step_.block_size);  // elements between blocks
  uint32_t item_head_ = 0;                                      // its first kv head
  const uint16_t *q_bf16_ = nullptr;  // Dot: the item's q heads (bf16 rows)
  const size_t *chunk_ = nullptr;     // element offsets of the chunk's rows (kv head 0)
  Ahead ahead_{layer_, s_};
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
  [[no_unique_address]] const std::conditional_t<Dot && kFp8, Fp8Bf16<C>, NoTables>
      fp8_{};  // its tables
#endif
};

template <class W, bool Dot, class C>
bool run_decoder(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, const Shape &s,
                 float *scratch, float *partial) {
  using D = Decoder<W, Dot, C>;
  const size_t qh = size_t(it.num_heads) * s.g;
  // What attention_scratch_floats guarantees besides acc (max_q >= q heads of the layer).
  if (D::staging_floats(s, it.num_heads) > qh * (s.hd + 32) + kKernelScratchFloats) return false;
  const size_t regs = (s.g + W::L / 4 - 1) / (W::L / 4);
  Buffers b;
  float *p = scratch;
  b.acc = p, p += qh * s.hd;
  b.q = p, p += D::q_floats(s, it.num_heads);
  b.ql = reinterpret_cast<uint16_t *>(p), p += D::lanes_floats(s, it.num_heads);
  b.kst = reinterpret_cast<uint16_t *>(p), p += D::staged_floats(s);
  b.m = p, p += size_t(it.num_heads) * regs * W::L;
  b.l = p, p += size_t(it.num_heads) * regs * W::L;
  b.s = p, p += (kKeys / 4) * regs * W::L;
  b.pb = reinterpret_cast<uint16_t *>(p), p += (kKeys / 4) * regs * W::L;
  b.alpha = p, p += s.g;
  b.zero = p;
  D(step, layer, s, b).run(it, partial);
  return true;
}

template <class C>
bool decode_cache(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, const Shape &s,
                  float *scratch, float *partial) {
#if defined(__AVX512BF16__) && defined(__AVX512VBMI__)
  // vdpbf16ps: the q rows must be bf16 already, and V's pairs of rows span 32 values.
  if constexpr (!std::is_same_v<C, _Float16>)
    if (layer.dtype == PKV_DTYPE_BF16 && s.hd % 32 == 0)
      return run_decoder<Zmm, true, C>(step, layer, it, s, scratch, partial);
#endif
#if defined(__AVX512F__)
  if (s.hd % 16 == 0) return run_decoder<Zmm, false, C>(step, layer, it, s, scratch, partial);
#endif
  return run_decoder<Ymm, false, C>(step, layer, it, s, scratch, partial);
}

}  // namespace

bool decode_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch,
                 float *partial) {
  // f32 models, and caches that are the model's f32: the generic runner; V rows narrower or wider
  // than K's too (a layer's own v_head_dim).
  if (layer.dtype == PKV_DTYPE_F32 || it.rows != 1 || layer.mla || layer.v_row() != layer.head_dim)
    return false;
  const Shape s{layer.q_heads / layer.kv_heads, layer.head_dim, layer.kv_heads, 0};
  Shape shape = s;
  switch (layer.kv_dtype) {
    case PKV_DTYPE_FP8_E4M3:
      shape.esize = 1;
      return decode_cache<Fp8E4M3>(step, layer, it, shape, scratch, partial);
    case PKV_DTYPE_FP8_E5M2:
      shape.esize = 1;
      return decode_cache<Fp8E5M2>(step, layer, it, shape, scratch, partial);
    case PKV_DTYPE_F16:
      shape.esize = 2;
      return decode_cache<_Float16>(step, layer, it, shape, scratch, partial);
    case PKV_DTYPE_BF16:
      shape.esize = 2;
      return decode_cache<Bf16>(step, layer, it, shape, scratch, partial);
    default:
      return false;
  }
}

#endif  // PKV_DECODE_KERNEL

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
