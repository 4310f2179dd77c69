// CpuKernels on the layers of pkv 0.5 (issue 27), against the fp64 reference
// (pkv_ref_attention_layer): attention sinks, logit soft-capping, chunked local attention, and
// layers of different shapes in one step, K = V and a V of its own width among them, in a strided
// page layout. Every block of the pool is one page holding a region per layer (its K, then its V
// unless K = V), 64 NaN bytes between regions; the blocks no table holds and a guard page before
// the pool are NaN too, so a stray read turns an output NaN. After the step the whole pool is
// compared with what write_kv should have left: a stray write shows as well.
//
// Groups: 0 full attention, 1 sliding window 24, 2 chunked 32. Sequences: a decode at context
// 1100 (split over keys in group 0: its sinks join in the merge), a decode at context 33 (the first
// token after a chunk boundary: in group 2 it sees itself only), a 70-token prompt (crossing
// chunk boundaries 32 and 64), a 40-token chunk at context 100 (crossing 64 and 96). Layers
// (kLayers) are called out of order, in one step, with their own shapes.
//
// Usage: test_cpu_layers [CONFIG]   (configs: block size, model dtype, cache dtype)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "backend/cpu/cpu_kernels.h"
#include "cpu_test_values.h"
#include "pkv/pkv.h"
#include "status.h"

namespace {

using pkv_test::dtype_bytes;
using pkv_test::is_fp8;
using pkv_test::load;
using pkv_test::mix;
using pkv_test::store;

int passed, failed;
bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_cpu_layers.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

constexpr uint32_t kQHeads = 8, kGap = 64;

struct Config {
  const char *name;
  uint32_t bs;
  int32_t dtype, kv_dtype;
};
const Config kConfigs[] = {
    {"bs16_bf16", 16, PKV_DTYPE_BF16, PKV_DTYPE_BF16},
    {"bs7_f16_e4m3", 7, PKV_DTYPE_F16, PKV_DTYPE_FP8_E4M3},
    {"bs16_f32", 16, PKV_DTYPE_F32, PKV_DTYPE_F32},
    {"bs1_bf16_e5m2", 1, PKV_DTYPE_BF16, PKV_DTYPE_FP8_E5M2},
};

struct Group {
  uint32_t window, chunk;
};
const Group kGroups[] = {{0, 0}, {24, 0}, {0, 32}};

struct LayerDef {
  uint32_t group, kv_heads, hd, vd;
  bool k_eq_v;
  float softcap;
  bool sinks;
};
const LayerDef kLayers[] = {
    {0, 2, 64, 64, false, 0.0f, true},    // 0: sinks, split decode
    {1, 4, 32, 32, false, 30.0f, true},   // 1: window, cap and sinks
    {2, 2, 64, 64, false, 5.0f, true},    // 2: chunks, a tight cap and sinks
    {0, 1, 128, 128, true, 0.0f, true},   // 3: K = V, one kv head, head_dim 128
    {2, 2, 64, 32, false, 0.0f, false},   // 4: chunks, V narrower than K
    {1, 4, 32, 32, true, 20.0f, false},   // 5: window, K = V, cap
    {0, 2, 64, 64, false, 0.0f, false},   // 6: plain (today's path, in the page layout)
    {0, 2, 64, 64, false, 10.0f, false},  // 7: cap on a split decode
    {0, 1, 512, 512, true, 0.0f, true},   // 8: Gemma 4's full layers: head_dim 512, K = V
};
constexpr uint32_t kNumLayers = sizeof kLayers / sizeof kLayers[0];
const uint32_t kCtx[] = {1100, 33, 70, 100}, kQlen[] = {1, 1, 70, 40};
constexpr uint32_t kSeqs = 4, kNumGroups = 3;

// One step's world: tables, slots, the page pool and what every layer's cache rows hold.
struct World {
  const Config &c;
  uint32_t num_tokens = 0, max_blocks = 0, num_blocks = 0;
  size_t page = 0, esize = 0;
  std::vector<size_t> k_off, v_off;  // [layer] region offsets in a page
  std::vector<int32_t> query_start, context_lens, tables;
  std::vector<int64_t> slots;
  std::vector<uint8_t> pool, expect;  // a guard page, then [num_blocks] pages
  std::vector<float> scales;          // [layer][2][4 kv heads at most]
  std::vector<double> sinks;          // [layer][q heads]
  std::vector<float> sinks_f;
  // What the cache holds for every (layer, K or V, sequence): [context][row] bytes and values
  // (fp8 rounding by exhaustion is slow: done once).
  std::vector<uint8_t> bytes[kNumLayers][2][kSeqs];
  std::vector<double> values[kNumLayers][2][kSeqs];

  explicit World(const Config &config) : c(config), esize(dtype_bytes(config.kv_dtype)) {}

  uint32_t first_key(uint32_t g, uint32_t pos) const {
    const Group &gr = kGroups[g];
    if (gr.chunk) return pos / gr.chunk * gr.chunk;
    return gr.window && pos >= gr.window ? pos - gr.window + 1 : 0;
  }
  uint32_t width(uint32_t l, uint32_t kind) const {
    return kind == 2 ? kLayers[l].vd : kLayers[l].hd;
  }
  // kind 0: q (all q heads), 1: k, 2: v of (layer, seq, position), model dtype at dst, values in
  // dstd.
  void gen(uint32_t l, uint32_t s, uint32_t pos, uint32_t kind, void *dst, double *dstd) const {
    const uint32_t n = (kind ? kLayers[l].kv_heads : kQHeads) * width(l, kind);
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t key = (uint64_t(l) << 56) ^ (uint64_t(s) << 48) ^ (uint64_t(kind) << 40) ^ pos;
      const double u = double(mix(mix(key) + i) >> 40) / 16777216.0;
      const double x = store(c.dtype, (kind == 0 ? 3.0 : 1.0) * (2.0 * u - 1.0), dst, i);
      if (dstd) dstd[i] = x;
    }
  }
  const float *scale(uint32_t l, uint32_t kind) const {
    return &scales[(size_t(l) * 2 + (kLayers[l].k_eq_v ? 0 : kind - 1)) * 4];
  }
  // A row of model values as the cache holds it: bytes at dst (if any), values at dstd (if any).
  void cache_row(uint32_t l, uint32_t kind, const void *row, uint8_t *dst, double *dstd) const {
    const uint32_t w = width(l, kind), n = kLayers[l].kv_heads * w;
    for (uint32_t i = 0; i < n; ++i) {
      const double x = load(c.dtype, row, i);
      if (!is_fp8(c.kv_dtype)) {
        if (dst) std::memcpy(dst + i * esize, static_cast<const uint8_t *>(row) + i * esize, esize);
        if (dstd) dstd[i] = x;
        continue;
      }
      const int e5m2 = c.kv_dtype == PKV_DTYPE_FP8_E5M2;
      const float sc = scale(l, kind)[i / w];
      const uint8_t code = pkv_ref_fp8_encode(float(x), sc, e5m2);
      if (dst) dst[i] = code;
      if (dstd) dstd[i] = pkv_ref_fp8_decode(code, e5m2) * sc;
    }
  }
  uint8_t *row_at(std::vector<uint8_t> &p, uint32_t l, uint32_t kind, int64_t block, uint32_t pos) {
    const size_t off = kind == 2 && !kLayers[l].k_eq_v ? v_off[l] : k_off[l];
    return p.data() + page * size_t(1 + block) + off +
           size_t(pos % c.bs) * kLayers[l].kv_heads * width(l, kind) * esize;
  }
  const int32_t *table(uint32_t g, uint32_t s) const {
    return &tables[(size_t(g) * kSeqs + s) * max_blocks];
  }
};

// The page layout, tables, slots, scales and sinks; the cached positions' rows in the pool, and
// in `expect` the new tokens' rows too (what write_kv must leave).
void build(World &w) {
  const uint32_t bs = w.c.bs;
  size_t at = 0;
  for (const LayerDef &l : kLayers) {
    w.k_off.push_back(at), at += size_t(bs) * l.kv_heads * l.hd * w.esize + kGap;
    w.v_off.push_back(l.k_eq_v ? 0 : at);
    if (!l.k_eq_v) at += size_t(bs) * l.kv_heads * l.vd * w.esize + kGap;
  }
  w.page = (at + 63) / 64 * 64;
  w.query_start.assign(1, 0);
  for (uint32_t s = 0; s < kSeqs; ++s) {
    w.query_start.push_back(w.query_start.back() + int32_t(kQlen[s]));
    w.context_lens.push_back(int32_t(kCtx[s]));
    w.max_blocks = std::max(w.max_blocks, (kCtx[s] + bs - 1) / bs);
  }
  w.num_tokens = uint32_t(w.query_start.back());
  w.tables.assign(size_t(kNumGroups) * kSeqs * w.max_blocks, -1);
  w.slots.assign(size_t(kNumGroups) * w.num_tokens, -1);
  for (uint32_t g = 0; g < kNumGroups; ++g)
    for (uint32_t s = 0; s < kSeqs; ++s) {  // blocks before the first new token's keys: given back
      const uint32_t first = w.first_key(g, kCtx[s] - kQlen[s]);
      for (uint32_t b = first / bs; b < (kCtx[s] + bs - 1) / bs; ++b)
        w.tables[(size_t(g) * kSeqs + s) * w.max_blocks + b] = int32_t(w.num_blocks++);
    }
  ++w.num_blocks;  // one no table holds
  w.pool.assign(w.page * (1 + size_t(w.num_blocks)), is_fp8(w.c.kv_dtype) ? 0x7f : 0xff);
  w.expect = w.pool;
  for (uint32_t i = 0; i < kNumLayers * 2 * 4; ++i)  // e4m3: 1/600 saturates |x| > 0.75
    w.scales.push_back((w.c.kv_dtype == PKV_DTYPE_FP8_E5M2 ? 1e-3f : 1.0f / 600) *
                       float(1 + 17 * (i % 3)));
  for (uint32_t i = 0; i < kNumLayers * kQHeads; ++i) {  // logits in [-1, 3]
    w.sinks.push_back(double(float(4.0 * double(mix(i + 77) >> 40) / 16777216.0 - 1.0)));
    w.sinks_f.push_back(float(w.sinks.back()));
  }
  std::vector<uint8_t> row(4 * 512 * 4);  // a K or V row at most
  for (uint32_t l = 0; l < kNumLayers; ++l)
    for (uint32_t s = 0; s < kSeqs; ++s) {
      const uint32_t g = kLayers[l].group, new0 = kCtx[s] - kQlen[s];
      for (uint32_t kind = 1; kind <= (kLayers[l].k_eq_v ? 1u : 2u); ++kind) {
        const size_t n = size_t(kLayers[l].kv_heads) * w.width(l, kind);
        std::vector<uint8_t> &by = w.bytes[l][kind - 1][s];
        std::vector<double> &va = w.values[l][kind - 1][s];
        by.resize(kCtx[s] * n * w.esize), va.resize(kCtx[s] * n);
        for (uint32_t pos = w.first_key(g, new0); pos < kCtx[s]; ++pos) {  // the keys read
          w.gen(l, s, pos, kind, row.data(), nullptr);
          w.cache_row(l, kind, row.data(), &by[pos * n * w.esize], &va[pos * n]);
        }
      }
      for (uint32_t pos = 0; pos < kCtx[s]; ++pos) {
        const int32_t b = w.table(g, s)[pos / bs];
        if (b < 0) continue;
        for (uint32_t kind = 1; kind <= (kLayers[l].k_eq_v ? 1u : 2u); ++kind) {
          const size_t n = size_t(kLayers[l].kv_heads) * w.width(l, kind) * w.esize;
          const uint8_t *src = &w.bytes[l][kind - 1][s][pos * n];
          std::memcpy(w.row_at(w.expect, l, kind, b, pos), src, n);
          if (pos < new0) std::memcpy(w.row_at(w.pool, l, kind, b, pos), src, n);
        }
        if (pos >= new0)
          w.slots[size_t(g) * w.num_tokens + w.query_start[s] + (pos - new0)] =
              int64_t(b) * bs + pos % bs;
      }
    }
}

pkv::CpuStep step_of(const World &w) {
  return pkv::CpuStep{kSeqs,
                      w.num_tokens,
                      w.c.bs,
                      w.max_blocks,
                      kNumGroups,
                      w.query_start.data(),
                      w.context_lens.data(),
                      w.slots.data(),
                      w.tables.data()};
}

// The new tokens' rows of layer l (K, and V unless K = V), read back through the reference's
// paged gather at the page stride: write_kv's, where the layout puts them.
void check_writes(World &w, uint32_t l) {
  const LayerDef &d = kLayers[l];
  for (uint32_t kind = 1; kind <= (d.k_eq_v ? 1u : 2u); ++kind) {
    const size_t row = size_t(d.kv_heads) * w.width(l, kind) * w.esize;
    const size_t off = kind == 2 ? w.v_off[l] : w.k_off[l];
    size_t bad = 0;
    for (uint32_t s = 0; s < kSeqs; ++s) {
      std::vector<uint8_t> got(size_t(kCtx[s]) * row);
      pkv_ref_gather_rows(w.pool.data() + w.page + off, w.table(d.group, s), w.c.bs, w.page, row,
                          kCtx[s], got.data());
      const uint8_t *want = w.bytes[l][kind - 1][s].data();
      for (uint32_t pos = kCtx[s] - kQlen[s]; pos < kCtx[s]; ++pos)
        bad += std::memcmp(got.data() + size_t(pos) * row, want + size_t(pos) * row, row) != 0;
    }
    if (bad)
      fprintf(stderr, "%s layer %u: %zu rows of %s not written where expected\n", w.c.name, l, bad,
              kind == 1 ? "K" : "V");
    CHECK(bad == 0);
  }
}

// Layer l's write_kv and attention on the planned step; every output row against the reference.
void run_layer(pkv::CpuKernels &kernels, World &w, const pkv::CpuStep &step, uint32_t l) {
  const LayerDef &d = kLayers[l];
  const size_t elt = dtype_bytes(w.c.dtype), qn = size_t(kQHeads) * d.hd,
               on = size_t(kQHeads) * d.vd;
  const size_t kn = size_t(d.kv_heads) * d.hd, vn = size_t(d.kv_heads) * d.vd;
  std::vector<uint8_t> q(w.num_tokens * qn * elt), k(w.num_tokens * kn * elt),
      v(w.num_tokens * vn * elt), out(w.num_tokens * on * elt, 0xff);
  std::vector<double> qd(w.num_tokens * qn);
  for (uint32_t s = 0; s < kSeqs; ++s)
    for (uint32_t r = 0; r < kQlen[s]; ++r) {
      const uint32_t t = w.query_start[s] + r, pos = kCtx[s] - kQlen[s] + r;
      w.gen(l, s, pos, 0, q.data() + t * qn * elt, qd.data() + t * qn);
      w.gen(l, s, pos, 1, k.data() + t * kn * elt, nullptr);
      if (!d.k_eq_v) w.gen(l, s, pos, 2, v.data() + t * vn * elt, nullptr);
    }
  const float scale = 1.0f / std::sqrt(float(d.hd));
  pkv::CpuLayer layer{};
  layer.k_cache = w.pool.data() + w.page + w.k_off[l];
  layer.v_cache = d.k_eq_v ? layer.k_cache : w.pool.data() + w.page + w.v_off[l];
  layer.q_heads = kQHeads, layer.kv_heads = d.kv_heads, layer.head_dim = d.hd, layer.v_dim = d.vd;
  layer.mla = false, layer.dtype = w.c.dtype, layer.kv_dtype = w.c.kv_dtype, layer.group = d.group;
  layer.window = kGroups[d.group].window, layer.chunk = kGroups[d.group].chunk;
  layer.scale = scale, layer.k_scale = w.scale(l, 1), layer.v_scale = w.scale(l, 2);
  layer.q = q.data(), layer.k = k.data(), layer.v = d.k_eq_v ? nullptr : v.data();
  layer.out = out.data(), layer.block_stride = w.page, layer.softcap = d.softcap;
  layer.sinks = d.sinks ? &w.sinks_f[l * kQHeads] : nullptr;
  kernels.write_kv(step, layer);
  check_writes(w, l);
  kernels.attention(step, layer);

  const double atol = w.c.dtype == PKV_DTYPE_F32 ? 1e-5 : w.c.dtype == PKV_DTYPE_F16 ? 2e-3 : 1e-2;
  const double rtol = w.c.dtype == PKV_DTYPE_F32 ? 1e-4 : w.c.dtype == PKV_DTYPE_F16 ? 1e-2 : 2e-2;
  const pkv_ref_layer ref_layer{kQHeads,
                                d.kv_heads,
                                d.hd,
                                d.vd,
                                scale,
                                kGroups[d.group].window,
                                kGroups[d.group].chunk,
                                d.softcap,
                                d.sinks ? &w.sinks[l * kQHeads] : nullptr};
  for (uint32_t s = 0; s < kSeqs; ++s) {
    std::vector<double> ref(kQlen[s] * on), got(ref.size());
    const uint32_t t0 = w.query_start[s];  // keys before the first one read stay 0: not read
    pkv_ref_attention_layer(&ref_layer, &qd[t0 * qn], w.values[l][0][s].data(),
                            d.k_eq_v ? nullptr : w.values[l][1][s].data(), ref.data(), kQlen[s],
                            kCtx[s]);
    for (size_t j = 0; j < ref.size(); ++j) got[j] = load(w.c.dtype, out.data(), t0 * on + j);
    const std::string what = std::string(w.c.name) + " layer " + std::to_string(l) + " seq " +
                             std::to_string(s) + " (context " + std::to_string(kCtx[s]) + ")";
    CHECK(pkv_ref_compare(what.c_str(), got.data(), ref.data(), got.size(), atol, rtol) == 0);
  }
}

void run_config(const Config &c) {
  pkv::CpuKernels kernels(2, pkv::cpu_variant());
  World w{c};
  build(w);
  const pkv::CpuStep step = step_of(w);
  kernels.plan(step, kQHeads, 2, 64,
               64);  // one layer's shape: the others' are planned at their calls
  for (uint32_t l : {3u, 0u, 5u, 8u, 1u, 6u, 2u, 4u, 7u}) run_layer(kernels, w, step, l);
  // Group 2 (chunks of 32), per plan: decodes 12 + 1 keys; the prompt's tiles of 32 rows 32, 32
  // and 6 keys, the chunk's (rows 60..91, 92..99) 60 and 36, per kv head (2). Two plans (layers
  // 2 and 4: V widths 64 and 32).
  CHECK(kernels.planned_keys(2) == 2 * (13 + 2 * (32 + 32 + 6) + 2 * (60 + 36)));
  size_t bad = 0;
  for (size_t i = 0; i < w.pool.size(); ++i) bad += w.pool[i] != w.expect[i];
  if (bad)
    fprintf(stderr, "%s: %zu pool bytes differ from what write_kv should leave\n", c.name, bad);
  CHECK(bad == 0);
}

}  // namespace

int main(int argc, char **argv) {
  try {  // PKV_CPU_ISA naming a variant this CPU lacks: skipped
    std::printf("CPU kernels: %s\n", pkv::cpu_variant().name);
  } catch (const pkv::Error &e) {
    std::printf("skipped: %s\n", e.what());
    return e.status() == PKV_ERR_UNSUPPORTED ? 77 : 1;
  }
  int ran = 0;
  for (const Config &c : kConfigs) {
    if (argc > 1 && std::strcmp(argv[1], c.name) != 0) continue;
    const int failed_before = failed;
    run_config(c);
    printf("%s %s\n", failed == failed_before ? "ok  " : "FAIL", c.name);
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no config named %s\n", argv[1]);
    return 1;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
