// src/backend/cpu directly (C++: the engine does not keep a table per KV group yet): CpuKernels on
// steps with several KV groups, each with its own slot mapping and block tables in one pool,
// against the fp64 reference (tests/common/attention_ref.h).
//
// Step A: three groups (full attention, window 5, window 40) and three sequences (a decode at
// context 300, a 45-token chunk at context 160, a 70-token prompt). Step B: every group windowed
// (4096 and 64), decodes at contexts 100000 and 5000. A windowed group's tables hold -1 for the
// blocks wholly before its window (as the block manager gives them back), and every pool block
// no table holds, a guard block before the pool included, is NaN: a read of any of them (block -1
// reads the block before the layer's first) turns the output to NaN. Step B also checks that the
// plan's items cover the windows' keys only (a decode at context 100000 with window 4096 reads
// 4096 keys). Layers are called out of group order, one group twice (its items are kept).
//
// Usage: test_cpu_groups [CONFIG]   (configs: block size, model dtype, cache dtype)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "cpu_test_values.h"
#include "backend/cpu/cpu_kernels.h"
#include "status.h"
#include "pkv/pkv.h"

namespace {

int passed, failed;
uint64_t out_hash;  // FNV-1a over every output of the config, in order

// The hashes of every config's outputs as pkv 0.4's kernels computed them (commit 3b05f9b, GCC
// 12, this file's steps): the layers of 0.5 without sinks or a soft-cap must match them bit for
// bit. Only the variants of the machine that recorded them: another variant prints its hash
// and checks the fp64 reference only (to record one: build this test from 3b05f9b's
// src/backend/cpu on that CPU and run it with PKV_CPU_ISA set).
struct Golden {
  const char *isa, *config;
  uint64_t hash;
};
const Golden kGolden[] = {
    {"baseline", "bs7_f32", 0x9e48e346fb2c91ceull},
    {"baseline", "bs16_bf16_e4m3", 0xb7bdc701f56b4cd1ull},
    {"baseline", "bs1_f16_e5m2", 0x3ec73b7b4c561256ull},
    {"baseline", "bs16_f16", 0x35128928993fe166ull},
    {"avx2", "bs7_f32", 0x2c157849820e00d2ull},
    {"avx2", "bs16_bf16_e4m3", 0x98844665c20909fdull},
    {"avx2", "bs1_f16_e5m2", 0xa100b3b90c788714ull},
    {"avx2", "bs16_f16", 0x496859ffba16d278ull},
};

bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_cpu_groups.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

constexpr uint32_t kQHeads = 8, kKvHeads = 2, kHd = 64, kKvn = kKvHeads * kHd;

struct Config {
  const char *name;
  uint32_t bs;
  int32_t dtype, kv_dtype;
};
const Config kConfigs[] = {
    {"bs7_f32", 7, PKV_DTYPE_F32, PKV_DTYPE_F32},
    {"bs16_bf16_e4m3", 16, PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3},
    {"bs1_f16_e5m2", 1, PKV_DTYPE_F16, PKV_DTYPE_FP8_E5M2},
    {"bs16_f16", 16, PKV_DTYPE_F16, PKV_DTYPE_F16},
};

using pkv_test::dtype_bytes;
using pkv_test::is_fp8;
using pkv_test::load;
using pkv_test::mix;
using pkv_test::store;

// One step's world: its groups' windows, sequences (context, new tokens), tables and pool.
struct World {
  World(const Config &config, std::vector<uint32_t> group_windows, std::vector<uint32_t> contexts,
        std::vector<uint32_t> new_tokens)
      : c(config),
        windows(std::move(group_windows)),
        ctx(std::move(contexts)),
        qlen(std::move(new_tokens)) {}
  const Config &c;
  std::vector<uint32_t> windows;    // [groups]
  std::vector<uint32_t> ctx, qlen;  // [seqs]
  uint32_t num_tokens = 0, max_blocks = 0, num_blocks = 0;
  std::vector<int32_t> query_start, context_lens, tables;  // tables [groups][seqs][max_blocks]
  std::vector<int64_t> slots;                              // [groups][tokens]
  std::vector<uint8_t> k_pool,
      v_pool;                 // a guard block, then [groups (one layer each)][num_blocks] blocks
  std::vector<float> scales;  // [groups][2][kv heads]
  size_t block_bytes = 0;

  // k (kind 1) or v (2) of (group, seq, position) in the model's dtype at dst; values in dstd.
  void gen(uint32_t g, uint32_t s, uint32_t pos, uint32_t kind, void *dst, double *dstd) const {
    const double amp = kind == 0 ? 3.0 : 1.0;
    for (uint32_t i = 0; i < (kind == 0 ? kQHeads * kHd : kKvn); ++i) {
      const double u =
          double(mix(mix((uint64_t(g) << 56) ^ (uint64_t(s) << 48) ^ (uint64_t(kind) << 40) ^ pos) +
                     i) >>
                 40) /
          16777216.0;
      const double x = store(c.dtype, amp * (2.0 * u - 1.0), dst, i);
      if (dstd) dstd[i] = x;
    }
  }
  float scale(uint32_t g, uint32_t kind, uint32_t h) const {
    return scales[(g * 2 + kind - 1) * kKvHeads + h];
  }
  // What the cache holds for a row of model-dtype values: codes (fp8) or the values; dstd: their values.
  void cache_row(uint32_t g, uint32_t kind, const void *row, uint8_t *dst, double *dstd) const {
    for (uint32_t i = 0; i < kKvn; ++i) {
      const double x = load(c.dtype, row, i);
      if (!is_fp8(c.kv_dtype)) {
        if (dst)
          std::memcpy(dst + i * dtype_bytes(c.dtype),
                      static_cast<const uint8_t *>(row) + i * dtype_bytes(c.dtype),
                      dtype_bytes(c.dtype));
        if (dstd) dstd[i] = x;
        continue;
      }
      const int e5m2 = c.kv_dtype == PKV_DTYPE_FP8_E5M2;
      const float sc = scale(g, kind, i / kHd);
      const uint8_t code = pkv_ref_fp8_encode(static_cast<float>(x), sc, e5m2);
      if (dst) dst[i] = code;
      if (dstd) dstd[i] = pkv_ref_fp8_decode(code, e5m2) * sc;
    }
  }
  uint32_t first_key(uint32_t g, uint32_t pos) const {
    return windows[g] && pos >= windows[g] ? pos - windows[g] + 1 : 0;
  }
  uint8_t *block(std::vector<uint8_t> &pool, uint32_t g, int64_t b) {
    return pool.data() + block_bytes * (1 + size_t(g) * num_blocks + b);
  }
};

// Tables, slots and the pool of w's groups and sequences; the cached positions' K/V written.
void build(World &w) {
  const uint32_t bs = w.c.bs, groups = uint32_t(w.windows.size()), seqs = uint32_t(w.ctx.size());
  w.query_start.assign(1, 0);
  for (uint32_t s = 0; s < seqs; ++s) {
    w.query_start.push_back(w.query_start.back() + int32_t(w.qlen[s]));
    w.context_lens.push_back(int32_t(w.ctx[s]));
    w.max_blocks = std::max(w.max_blocks, (w.ctx[s] + bs - 1) / bs);
  }
  w.num_tokens = uint32_t(w.query_start.back());
  w.tables.assign(size_t(groups) * seqs * w.max_blocks, -1);
  w.slots.assign(size_t(groups) * w.num_tokens, -1);
  uint32_t next = 0;  // block ids: the held blocks of every group and sequence, in turn
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t s = 0; s < seqs; ++s) {
      // Blocks wholly before the first new token's window are given back (-1).
      const uint32_t first = w.first_key(g, w.ctx[s] - w.qlen[s]);
      for (uint32_t b = first / bs; b < (w.ctx[s] + bs - 1) / bs; ++b)
        w.tables[(size_t(g) * seqs + s) * w.max_blocks + b] = int32_t(next++);
    }
  w.num_blocks = next + 1;  // the last one held by no table: block -1 of the next layer
  w.block_bytes = size_t(bs) * kKvn * dtype_bytes(w.c.kv_dtype);
  const size_t bytes = w.block_bytes * (1 + size_t(groups) * w.num_blocks);
  const uint8_t nan_byte = is_fp8(w.c.kv_dtype) ? 0x7f : 0xff;  // NaN in every cache dtype
  w.k_pool.assign(bytes, nan_byte);
  w.v_pool.assign(bytes, nan_byte);
  w.scales.resize(size_t(groups) * 2 * kKvHeads);
  for (size_t i = 0; i < w.scales.size(); ++i)  // e4m3: 1/600 saturates |x| > 0.75
    w.scales[i] =
        (w.c.kv_dtype == PKV_DTYPE_FP8_E5M2 ? 1e-3f : 1.0f / 600) * float(1 + 17 * (i % 3));
  std::vector<uint8_t> row(kKvn * 4);
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t s = 0; s < seqs; ++s) {
      const int32_t *table = &w.tables[(size_t(g) * seqs + s) * w.max_blocks];
      const uint32_t new0 = w.ctx[s] - w.qlen[s];
      for (uint32_t pos = 0; pos < w.ctx[s]; ++pos) {
        const int32_t b = table[pos / bs];
        if (b < 0) continue;
        const size_t at = size_t(pos % bs) * kKvn * dtype_bytes(w.c.kv_dtype);
        if (pos >= new0) {  // a new token: write_kv's
          w.slots[size_t(g) * w.num_tokens + w.query_start[s] + (pos - new0)] =
              int64_t(b) * bs + pos % bs;
          continue;
        }
        w.gen(g, s, pos, 1, row.data(), nullptr);
        w.cache_row(g, 1, row.data(), w.block(w.k_pool, g, b) + at, nullptr);
        w.gen(g, s, pos, 2, row.data(), nullptr);
        w.cache_row(g, 2, row.data(), w.block(w.v_pool, g, b) + at, nullptr);
      }
    }
}

// Runs group g's layer on the planned step and checks every output row against the reference.
void run_layer(pkv::CpuKernels &kernels, World &w, const pkv::CpuStep &step, uint32_t g,
               const char *label) {
  const size_t elt = dtype_bytes(w.c.dtype), qn = size_t(kQHeads) * kHd;
  std::vector<uint8_t> q(w.num_tokens * qn * elt), k(w.num_tokens * kKvn * elt), v(k.size()),
      out(q.size(), 0xff);
  std::vector<double> qd(w.num_tokens * qn);
  for (uint32_t s = 0; s < w.ctx.size(); ++s)
    for (uint32_t r = 0; r < w.qlen[s]; ++r) {
      const uint32_t t = w.query_start[s] + r, pos = w.ctx[s] - w.qlen[s] + r;
      w.gen(g, s, pos, 0, q.data() + t * qn * elt, qd.data() + t * qn);
      w.gen(g, s, pos, 1, k.data() + t * kKvn * elt, nullptr);
      w.gen(g, s, pos, 2, v.data() + t * kKvn * elt, nullptr);
    }
  const float softmax_scale = 1.0f / std::sqrt(float(kHd));
  const pkv::CpuLayer layer{w.block(w.k_pool, g, 0),
                            w.block(w.v_pool, g, 0),
                            kQHeads,
                            kKvHeads,
                            kHd,
                            kHd,
                            false,
                            w.c.dtype,
                            w.c.kv_dtype,
                            g,
                            w.windows[g],
                            softmax_scale,
                            &w.scales[g * 2 * kKvHeads],
                            &w.scales[(g * 2 + 1) * kKvHeads],
                            q.data(),
                            k.data(),
                            v.data(),
                            out.data()};
  kernels.write_kv(step, layer);
  kernels.attention(step, layer);
  for (uint8_t b : out) out_hash = (out_hash ^ b) * 0x100000001b3ull;
  const double atol = w.c.dtype == PKV_DTYPE_F32 ? 1e-5 : w.c.dtype == PKV_DTYPE_F16 ? 2e-3 : 1e-2;
  const double rtol = w.c.dtype == PKV_DTYPE_F32 ? 1e-4 : w.c.dtype == PKV_DTYPE_F16 ? 1e-2 : 2e-2;
  std::vector<uint8_t> row(kKvn * 4);
  for (uint32_t s = 0; s < w.ctx.size(); ++s) {
    // K/V from the first key the first new row sees.
    const uint32_t first = w.first_key(g, w.ctx[s] - w.qlen[s]), keys = w.ctx[s] - first;
    std::vector<double> kd(size_t(keys) * kKvn), vd(kd.size()), got(w.qlen[s] * qn),
        ref(got.size());
    for (uint32_t pos = first; pos < w.ctx[s]; ++pos) {
      w.gen(g, s, pos, 1, row.data(), nullptr);
      w.cache_row(g, 1, row.data(), nullptr, &kd[size_t(pos - first) * kKvn]);
      w.gen(g, s, pos, 2, row.data(), nullptr);
      w.cache_row(g, 2, row.data(), nullptr, &vd[size_t(pos - first) * kKvn]);
    }
    for (uint32_t r = 0; r < w.qlen[s]; ++r) {
      const uint32_t t = w.query_start[s] + r, pos = w.ctx[s] - w.qlen[s] + r;
      pkv_ref_attention_window(&qd[t * qn], kd.data(), vd.data(), &ref[r * qn], 1, pos + 1 - first,
                               kQHeads, kKvHeads, kHd, softmax_scale, w.windows[g]);
      for (size_t j = 0; j < qn; ++j) got[r * qn + j] = load(w.c.dtype, out.data(), t * qn + j);
    }
    const std::string what = std::string(label) + " group " + std::to_string(g) + " (window " +
                             std::to_string(w.windows[g]) + ") seq " + std::to_string(s);
    CHECK(pkv_ref_compare(what.c_str(), got.data(), ref.data(), got.size(), atol, rtol) == 0);
  }
}

pkv::CpuStep step_of(const World &w) {
  return pkv::CpuStep{uint32_t(w.ctx.size()),
                      w.num_tokens,
                      w.c.bs,
                      w.max_blocks,
                      uint32_t(w.windows.size()),
                      w.query_start.data(),
                      w.context_lens.data(),
                      w.slots.data(),
                      w.tables.data()};
}

void run_config(const Config &c) {
  pkv::CpuKernels kernels(2, pkv::cpu_variant());
  {  // A: full attention, windows 5 and 40; a decode, a chunk, a prompt
    World w{c, {0, 5, 40}, {300, 160, 70}, {1, 45, 70}};
    build(w);
    const pkv::CpuStep step = step_of(w);
    kernels.plan(step, kQHeads, kKvHeads, kHd, kHd);
    for (uint32_t g : {2u, 0u, 1u, 2u}) run_layer(kernels, w, step, g, "A");
  }
  {  // B: every group windowed; decodes at contexts 100000 and 5000
    World w{c, {4096, 64}, {100000, 5000}, {1, 1}};
    build(w);
    const pkv::CpuStep step = step_of(w);
    kernels.plan(step, kQHeads, kKvHeads, kHd, kHd);
    CHECK(kernels.planned_keys(0) == 0);  // made at the group's first call
    for (uint32_t g : {1u, 0u}) run_layer(kernels, w, step, g, "B");
    CHECK(kernels.planned_keys(0) == 4096 + 4096);
    CHECK(kernels.planned_keys(1) == 64 + 64);
  }
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
    out_hash = 0xcbf29ce484222325ull;
    run_config(c);
    const char *isa = pkv::cpu_variant().name;
    bool recorded = false;
    for (const Golden &g : kGolden)
      if (std::strcmp(g.isa, isa) == 0 && std::strcmp(g.config, c.name) == 0) {
        recorded = true;
        if (!CHECK(g.hash == out_hash))
          fprintf(stderr, "%s: outputs hash to %016llx, 0.4's to %016llx: not bit for bit\n",
                  c.name, (unsigned long long)out_hash, (unsigned long long)g.hash);
      }
    printf("%s %s (outputs %016llx, %s)\n", failed == failed_before ? "ok  " : "FAIL", c.name,
           (unsigned long long)out_hash, recorded ? "as 0.4's" : "no 0.4 hash for this variant");
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no config named %s\n", argv[1]);
    return 1;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
