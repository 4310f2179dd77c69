// CPU prefill kernel: a tile of new tokens of one sequence against one kv head's keys, FlashAttention
// style: the tile's rows x q heads ("query vectors", 128 with 32 rows and GQA 4) meet the keys a
// chunk (128) at a time; S = Q K^T for the chunk by a register-blocked micro-kernel whose lanes are
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

#include "pkv/pkv.h"

#include "backend/cpu/prefill_f32.h"
#include "backend/cpu/prefill_tile.h"
#if defined(__AVX512BF16__)
#include "backend/cpu/prefill_bf16.h"
#endif
#endif

namespace pkv {
namespace PKV_CPU_VARIANT {

#if !(defined(__AVX2__) && defined(__FMA__) && defined(__F16C__))

bool prefill_item(const CpuStep &, const CpuLayer &, const AttnItem &, float *, float *) {
  return false;
}

#else
namespace {

// The chunk length (keys) for the item's shape and the scratch every thread has
// (attention_scratch_floats(max_q, head_dim), max_q as CpuKernels::plan sizes it), or 0 when
// even 8 keys do not fit.
template <class Engine> uint32_t chunk_keys(const Tile &t, const CpuLayer &layer) {
  const size_t avail =
      attention_scratch_floats(attention_max_q(layer.q_heads, layer.kv_heads), t.hd);
  // lo, pos, m, l, alpha, o, a row, the chunk's and the next chunk's row pointers, the alignment.
  const size_t state =
      5 * size_t(t.rgp) + size_t(t.rgp) * t.hdp + t.widep + 6 * kMaxChunk + 5 * 16 + 16;
  for (uint32_t chunk = kMaxChunk; chunk >= 8; chunk /= 2)
    if (state + Engine::floats(t, chunk) <= avail) return chunk;
  return 0;
}

// Carves the item's state out of the scratch and starts it: what each query vector sees,
// m = -inf, l = 0, O = 0.
void start_tile(Tile &t, Arena &arena, const CpuLayer &layer) {
  t.lo = reinterpret_cast<int32_t *>(arena.take(t.rgp));
  t.pos = reinterpret_cast<int32_t *>(arena.take(t.rgp));
  t.m = arena.take(t.rgp);
  t.l = arena.take(t.rgp);
  t.alpha = arena.take(t.rgp);
  t.o = arena.take(size_t(t.rgp) * t.hdp);
  t.pf.rows =
      reinterpret_cast<const char **>(arena.take(2 * kMaxChunk * sizeof(void *) / sizeof(float)));
  for (uint32_t i = 0; i < t.rgp; ++i) {  // row r = i / group sits at first_pos + r
    const uint32_t pos = t.first_pos + i / t.group;
    t.pos[i] = i < t.rg ? int32_t(pos) : -1;
    t.lo[i] = i < t.rg ? int32_t(layer.first_key(pos)) : std::numeric_limits<int32_t>::max();
  }
  t.lo_last = uint32_t(t.lo[t.rg - 1]);
  fill_range(t.m, t.m + t.rgp, kNegInf);
  fill_range(t.l, t.l + t.rgp, 0.0f);
  fill_range(t.o, t.o + size_t(t.rgp) * t.hdp, 0.0f);
}

// Keys [key, key + n) of the item's kv head, the item's keys ending at key1; sc: the score
// scale in log2 units. rows: room for a chunk's row pointers.
template <class C, class Engine>
void run_chunk(Tile &t, Engine &e, const CpuStep &step, const CpuLayer &layer, uint32_t head,
               uint32_t key, uint32_t n, uint32_t key1, float sc, const C **rows) {
  const uint32_t ahead = std::min(t.chunk, key1 - key - n);  // the next chunk's keys
  for (uint32_t j = 0; j < ahead; ++j) {
    t.pf.rows[2 * j] = reinterpret_cast<const char *>(
        cache_row<C>(layer.k_cache, t, step, layer, head, key + n + j));
    t.pf.rows[2 * j + 1] = reinterpret_cast<const char *>(
        cache_row<C>(layer.v_cache, t, step, layer, head, key + n + j));
  }
  const uint32_t calls = Engine::score_calls(t, n);
  t.pf.count = 2 * ahead, t.pf.next = 0, t.pf.per_call = (2 * ahead + calls - 1) / calls;
  for (uint32_t j = 0; j < n; ++j)
    rows[j] = cache_row<C>(layer.k_cache, t, step, layer, head, key + j);
  e.load_k(rows, n, t);
  e.scores(t, n);
  t.pf.finish();
  // Masks only where some query vector misses a key: past the first row, or before the last
  // one's window (chunk): rows' first keys grow with their positions.
  const bool masked = key + n - 1 > t.first_pos || key < t.lo_last;
  const float cap = layer.softcap * kLog2e;  // the scores' units
  for (uint32_t i = 0; i < t.rgp; i += kLanes)
    e.probs(t, n, i,
            cap > 0.0f ? chunk_max<true>(t, e.s, n, i, key, sc, cap, masked)
                       : chunk_max<false>(t, e.s, n, i, key, sc, cap, masked));
  for (uint32_t j = 0; j < n; ++j)
    rows[j] = cache_row<C>(layer.v_cache, t, step, layer, head, key + j);
  e.load_v(rows, n, t);
  e.accumulate(t, n);
}

// The item's result, the generic runner's: with `partial`, (m, l, acc) with m in natural-log
// units; else its rows of out (the tile's first at out, vd values per q head), rows out_stride
// apart, each q head's sink in its denominator (sinks: the item's q heads', or null). vs: the
// output's scale (fp8 V).
template <class T, class Engine>
void write_result(const Tile &t, float vs, const float *sinks, float *partial, T *out,
                  size_t out_stride) {
  if (partial) {
    for (uint32_t i = 0; i < t.rg; ++i) {
      partial[i] = t.m[i] * kLn2;
      partial[t.rg + i] = t.l[i];
      float *acc = partial + 2 * t.rg + size_t(i) * t.vd;
      for (uint32_t d = 0; d < t.vd; ++d) acc[d] = t.o[size_t(i) * t.hdp + d] * vs;
    }
    return;
  }
  for (uint32_t i = 0; i < t.rg; ++i) {
    T *orow = out + (i / t.group) * out_stride + size_t(i % t.group) * t.vd;
    const float mult = sinks        ? vs * sink_scale(t.m[i] * kLn2, t.l[i], sinks[i % t.group])
                       : t.l[i] > 0 ? vs / t.l[i]
                                    : 0.0f;
    Engine::store_out(t.o + size_t(i) * t.hdp, mult, orow, t.vd);
  }
}

// One item, T the model's dtype (q, out), C the cache's, Engine the micro-kernels' (prefill_f32.h,
// prefill_bf16.h).
template <class T, class C, class Engine>
bool run_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch,
              float *partial) {
  Tile t;
  t.hd = layer.head_dim;
  t.vd = layer.v_dim;
  t.hdp = round_up(t.vd, 16);
  t.widep = round_up(std::max(t.hd, t.vd), 16);
  t.group = layer.q_heads / layer.kv_heads;
  t.rows = it.rows;
  t.rg = it.rows * t.group;
  t.rgp = round_up(t.rg, kLanes);
  t.chunk = chunk_keys<Engine>(t, layer);
  if (t.chunk == 0) return false;
  const uint32_t qlen = step.query_start[it.seq + 1] - step.query_start[it.seq];
  t.first_pos = step.context_lens[it.seq] - qlen + it.row0;
  t.token0 = step.query_start[it.seq] + it.row0;
  t.blocks = step.block_table(layer.group, it.seq);
  t.block = layer.k_block_elts(step.block_size);
  t.pf.bytes = t.hd * sizeof(C);

  Arena arena{Arena::align(scratch)};
  start_tile(t, arena, layer);
  float *row = arena.take(t.widep);
  const C **rows =
      reinterpret_cast<const C **>(arena.take(kMaxChunk * sizeof(void *) / sizeof(float)));
  Engine e;
  e.carve(arena, t);
  // q: [tokens][q_heads][head_dim], out: [tokens][q_heads][v_dim]; the item's q heads are
  // adjacent in a token's row.
  const size_t stride = size_t(layer.q_heads) * t.hd, out_stride = size_t(layer.q_heads) * t.vd;
  const size_t offset = size_t(t.token0) * stride + size_t(it.head) * t.group * t.hd;
  const size_t out_offset = size_t(t.token0) * out_stride + size_t(it.head) * t.group * t.vd;
  e.pack_q(t, static_cast<const T *>(layer.q) + offset, stride, row);

  const bool fp8 = kIsFp8<C>;
  const float sc = layer.scale * kLog2e * (fp8 ? layer.k_scale[it.head] : 1.0f);
  for (uint32_t key = it.key0; key < it.key1; key += t.chunk)
    run_chunk<C>(t, e, step, layer, it.head, key, std::min(t.chunk, it.key1 - key), it.key1, sc,
                 rows);
  const float *sinks = layer.sinks ? layer.sinks + size_t(it.head) * t.group : nullptr;
  write_result<T, Engine>(t, fp8 ? layer.v_scale[it.head] : 1.0f, sinks, partial,
                          static_cast<T *>(layer.out) + out_offset, out_stride);
  return true;
}

template <class T, template <class, class> class Engine>
bool run_model(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch,
               float *partial) {
  switch (layer.kv_dtype) {
    case PKV_DTYPE_FP8_E4M3:
      return run_item<T, Fp8E4M3, Engine<T, Fp8E4M3>>(step, layer, it, scratch, partial);
    case PKV_DTYPE_FP8_E5M2:
      return run_item<T, Fp8E5M2, Engine<T, Fp8E5M2>>(step, layer, it, scratch, partial);
    default:
      return run_item<T, T, Engine<T, T>>(step, layer, it, scratch, partial);
  }
}

#if defined(__AVX512BF16__)
template <class T, class C> using Bf16Of = Bf16Engine<C>;
#endif

}  // namespace

bool prefill_item(const CpuStep &step, const CpuLayer &layer, const AttnItem &it, float *scratch,
                  float *partial) {
  // V rows of their own width (a layer's v_head_dim, not MLA's view): the generic runner.
  if (it.num_heads != 1 || layer.v_row() != layer.head_dim) return false;
  switch (layer.dtype) {
    case PKV_DTYPE_F16:
      return run_model<_Float16, F32Engine>(step, layer, it, scratch, partial);
    case PKV_DTYPE_BF16:
#if defined(__AVX512BF16__)
      return run_model<Bf16, Bf16Of>(step, layer, it, scratch, partial);
#else
      return run_model<Bf16, F32Engine>(step, layer, it, scratch, partial);
#endif
    default:
      return false;  // f32 models: the generic runner
  }
}

#endif  // AVX2

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
