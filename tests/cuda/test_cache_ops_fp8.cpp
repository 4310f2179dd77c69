// kernels/cache_ops.cu's write_kv into fp8 pools (e4m3, e5m2) against the reference encoder of
// tests/common/attention_ref.h (pkv_ref_fp8_encode, codes by exhaustion): every code's value,
// every tie and its neighbours, saturation, infinities, NaN, signed zeros and f32 subnormals as
// quotients; ties reached through scales that are not powers of two (where x * (1 / scale)
// would round otherwise); random elements of every model dtype over block sizes and head dims,
// with per-head K and V scales and skipped (-1) slots. The whole pool is compared byte for byte.
// Launches write_kv must refuse come last.
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;

// The non-negative finite values of the fp8 codes, ascending.
std::vector<double> fp8_code_values(int e5m2) {
  std::vector<double> codes;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(pkv_ref_fp8_decode(uint8_t(c), e5m2)))
      codes.push_back(pkv_ref_fp8_decode(uint8_t(c), e5m2));
  return codes;
}

// The quotients an fp8 encoder must get right: every finite code's value, each midpoint between
// neighbours (a tie: to the even code) and the f32 values either side of it, values past the
// largest finite (saturating, also where the next code would round), infinity, NaN, f32
// subnormals, zero; all of them with both signs.
std::vector<float> fp8_edge_values(int e5m2) {
  const std::vector<double> codes = fp8_code_values(e5m2);
  std::vector<float> v;
  for (size_t i = 0; i < codes.size(); ++i) {
    v.push_back(float(codes[i]));
    if (i + 1 == codes.size()) break;
    const float mid = float((codes[i] + codes[i + 1]) / 2);  // 5 significant bits: exact
    v.insert(v.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)});
  }
  const double max = codes.back();
  for (double x : {max * 1.03, max * 1.0625, max * 1.07, max * 4, 1e30}) v.push_back(float(x));
  v.insert(v.end(), {INFINITY, NAN, 0x1p-140f, 0x1p-149f, 0.f});
  for (size_t i = 0, n = v.size(); i < n; ++i) v.push_back(-v[i]);
  return v;
}

// f32 elements x whose quotient x / scale (fp32) is exactly a tie between two codes, for a
// scale that is not a power of two (about half the ties have such an x near tie * scale):
// x * (1 / scale) misses many of them by an ulp, and then rounds away from the even code.
std::vector<float> fp8_ties(int e5m2, float scale) {
  const std::vector<double> codes = fp8_code_values(e5m2);
  std::vector<float> x;
  for (size_t i = 0; i + 1 < codes.size(); ++i) {
    const float tie = float((codes[i] + codes[i + 1]) / 2);
    float c = float(double(tie) * scale);
    for (int step = 0; step < 3; ++step) c = std::nextafter(c, 0.f);
    for (int step = 0; step < 7; ++step, c = std::nextafter(c, INFINITY))
      if (c / scale == tie) x.insert(x.end(), {c, -c});
  }
  return x;
}

// How many of xs encode otherwise through x * (1 / scale) than through x / scale.
size_t reciprocal_misses(const std::vector<float> &xs, float scale, int e5m2) {
  size_t n = 0;
  for (float x : xs)
    n += pkv_ref_fp8_encode(x * (1.f / scale), 1.f, e5m2) != pkv_ref_fp8_encode(x, scale, e5m2);
  return n;
}

enum class Fill {
  random,  // U(-1.2, 1.2) * the largest finite value * scales that are not powers of two
  edges,   // fp8_edge_values times power-of-two scales: the quotients are exactly those values
  ties,    // fp8_ties under scales that are not powers of two, drawn until 8 of a head's ties
           // encode otherwise through the reciprocal (about half the scales do)
};

// A write_kv's inputs: per-head scales (K's heads, then V's) and the new rows in the model's
// dtype. edges and ties need an f32 model: head h's elements cycle through its list.
struct Rows {
  std::vector<float> scales;
  std::vector<unsigned char> k, v;  // [tokens][kv_heads][head_dim]
};

Rows make_rows(DType dtype, int e5m2, int32_t kv_heads, int32_t head_dim, int32_t num_tokens,
               Fill fill, Rng &rng) {
  const double max = e5m2 ? 57344.0 : 448.0;
  const size_t row = size_t(kv_heads) * head_dim, eb = pkv::cuda::dtype_bytes(dtype);
  Rows r;
  r.scales.resize(2 * size_t(kv_heads));
  std::vector<std::vector<float>> values(r.scales.size());
  for (size_t h = 0; h < r.scales.size(); ++h) {
    r.scales[h] =
        fill == Fill::edges ? std::ldexp(1.f, int(h % 5) - 2) : float(rng.uniform(0.001, 3));
    if (fill == Fill::edges)
      for (float y : fp8_edge_values(e5m2)) values[h].push_back(y * r.scales[h]);
    for (int tries = 0; fill == Fill::ties && tries < 1000; ++tries) {
      values[h] = fp8_ties(e5m2, r.scales[h]);
      if (reciprocal_misses(values[h], r.scales[h], e5m2) >= 8) break;
      r.scales[h] = float(rng.uniform(0.001, 3));
    }
  }
  r.k.resize(num_tokens * row * eb), r.v.resize(r.k.size());
  for (size_t i = 0; i < num_tokens * row; ++i) {
    const size_t h = i % row / head_dim, n = i / row * head_dim + i % head_dim;  // n-th of head h
    for (int kv = 0; kv < 2; ++kv) {
      const size_t hs = kv * kv_heads + h;
      const double x = fill == Fill::random ? rng.uniform(-1.2, 1.2) * max * r.scales[hs]
                                            : values[hs][(n + 7 * kv) % values[hs].size()];
      store_elem(dtype, (kv ? r.v : r.k).data(), i, x);
    }
  }
  return r;
}

// Whether some K element of the rows encodes otherwise through x * (1 / scale): what the ties
// are for.
bool reciprocal_would_differ(DType dtype, int e5m2, const Rows &r, int32_t kv_heads,
                             int32_t head_dim) {
  const size_t row = size_t(kv_heads) * head_dim;
  for (size_t i = 0; i < r.k.size() / pkv::cuda::dtype_bytes(dtype); ++i) {
    const float s = r.scales[i % row / head_dim];
    if (reciprocal_misses({float(load_elem(dtype, r.k.data(), i))}, s, e5m2)) return true;
  }
  return false;
}

// write_kv into an fp8 pool: each stored byte is pkv_ref_fp8_encode of its element under its
// head's scale, K and V with scales of their own; every fifth token is skipped (slot -1).
bool test_write_kv_fp8(DType dtype, DType kv, int32_t block_size, int32_t kv_heads,
                       int32_t head_dim, int32_t num_tokens, Fill fill, uint64_t seed) {
  Rng rng(seed);
  const int e5m2 = kv == DType::fp8_e5m2;
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const size_t row = size_t(kv_heads) * head_dim,
               pool_bytes = size_t(num_blocks) * block_size * row;
  const Rows r = make_rows(dtype, e5m2, kv_heads, head_dim, num_tokens, fill, rng);
  if (fill == Fill::ties && !reciprocal_would_differ(dtype, e5m2, r, kv_heads, head_dim)) {
    fprintf(stderr, "FAIL write_kv %s: no tie that x * (1 / scale) would encode otherwise\n",
            dtype_name(kv));
    return false;
  }
  std::vector<int64_t> slots(size_t(num_blocks) * block_size), mapping(num_tokens);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = int64_t(i);
  for (size_t i = slots.size(); i > 1; --i) std::swap(slots[i - 1], slots[rng.below(uint32_t(i))]);
  for (int32_t t = 0; t < num_tokens; ++t) mapping[t] = t % 5 == 3 ? -1 : slots[t];
  std::vector<unsigned char> want[2] = {std::vector<unsigned char>(pool_bytes, 0xFF),
                                        std::vector<unsigned char>(pool_bytes, 0xFF)};
  for (int32_t t = 0; t < num_tokens; ++t)
    for (size_t e = 0; mapping[t] >= 0 && e < row; ++e)
      for (int kvi = 0; kvi < 2; ++kvi) {
        const float x = float(load_elem(dtype, (kvi ? r.v : r.k).data(), size_t(t) * row + e));
        want[kvi][size_t(mapping[t]) * row + e] =
            pkv_ref_fp8_encode(x, r.scales[kvi * kv_heads + e / head_dim], e5m2);
      }

  DevBuf dk(r.k.size()), dv(r.v.size()), dmap(mapping.size() * 8), ds(r.scales.size() * 4);
  DevBuf kc(pool_bytes), vc(pool_bytes);
  dk.upload(r.k.data(), r.k.size()), dv.upload(r.v.data(), r.v.size());
  dmap.upload(mapping.data(), mapping.size() * 8), ds.upload(r.scales.data(), r.scales.size() * 4);
  check_cuda(cudaMemset(kc.as<void>(), 0xFF, pool_bytes), "memset");
  check_cuda(cudaMemset(vc.as<void>(), 0xFF, pool_bytes), "memset");
  const pkv::cuda::KvLayer layer{kc.as<void>(),
                                 vc.as<void>(),
                                 block_size,
                                 kv_heads,
                                 head_dim,
                                 dtype,
                                 kv,
                                 ds.as<float>(),
                                 ds.as<float>() + kv_heads,
                                 0};
  check_cuda(pkv::cuda::launch_write_kv(layer, dk.as<void>(), dv.as<void>(), dmap.as<int64_t>(),
                                        num_tokens, nullptr),
             "launch_write_kv");
  check_cuda(cudaDeviceSynchronize(), "sync");
  size_t bad = 0;
  std::vector<unsigned char> got(pool_bytes);
  for (int kvi = 0; kvi < 2; ++kvi) {
    (kvi ? vc : kc).download(got.data(), pool_bytes);
    for (size_t i = 0; i < pool_bytes; ++i)
      if (got[i] != want[kvi][i] && bad++ < 10)
        fprintf(stderr, "  %s byte %zu (slot %zu, head %zu): got 0x%02x want 0x%02x\n",
                kvi ? "V" : "K", i, i / row, i % row / head_dim, got[i], want[kvi][i]);
  }
  if (bad)
    fprintf(
        stderr,
        "FAIL write_kv %s -> %s%s block_size %d kv_heads %d head_dim %d tokens %d: %zu bytes differ\n",
        dtype_name(dtype), dtype_name(kv),
        fill == Fill::edges  ? " (edge values)"
        : fill == Fill::ties ? " (ties)"
                             : "",
        block_size, kv_heads, head_dim, num_tokens, bad);
  return bad == 0;
}

// write_kv refuses (cudaErrorInvalidValue, before any work) an fp8 pool without its scales, a
// pool of another 16/32-bit dtype than the model's, and an fp8 model dtype.
bool test_write_kv_refused() {
  DevBuf pool(4096), rows(4096), map(8), scales(8);
  const int64_t slot = 0;
  map.upload(&slot, sizeof slot);
  const float ones[2] = {1.f, 1.f};
  scales.upload(ones, sizeof ones);
  const float *sp = scales.as<float>();
  void *k = pool.as<void>(), *v = pool.as<char>() + 2048;
  const pkv::cuda::KvLayer refused[] = {
      {k, v, 4, 2, 8, DType::f16, DType::fp8_e4m3, nullptr, sp, 0},
      {k, v, 4, 2, 8, DType::f16, DType::fp8_e5m2, sp, nullptr, 0},
      {k, v, 4, 2, 8, DType::f16, DType::bf16, nullptr, nullptr, 0},
      {k, v, 4, 2, 8, DType::fp8_e4m3, DType::fp8_e4m3, sp, sp, 0},
  };
  bool ok = true;
  for (const pkv::cuda::KvLayer &l : refused)
    ok = ok && pkv::cuda::launch_write_kv(l, rows.as<void>(), rows.as<void>(), map.as<int64_t>(), 1,
                                          nullptr) == cudaErrorInvalidValue;
  if (!ok)
    fprintf(stderr, "FAIL write_kv accepted an fp8 pool without scales or a dtype mismatch\n");
  return ok;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  int failures = 0, cases = 0;
  uint64_t seed = 1;
  // The edge values and the ties in an f32 model (64 elements of each head a token, 48 tokens:
  // each value of a head's list, at most 1022, is written at least once past the skipped slots),
  // then random elements from every model dtype over block sizes and head dims.
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    failures += !test_write_kv_fp8(DType::f32, kv, 16, 2, 64, 48, Fill::edges, seed++);
    failures += !test_write_kv_fp8(DType::f32, kv, 16, 2, 64, 48, Fill::ties, seed++);
    cases += 2;
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      for (int32_t bs : {1, 7, 16}) {
        failures += !test_write_kv_fp8(t, kv, bs, 3, bs == 7 ? 40 : 64, 29, Fill::random, seed++);
        cases++;
      }
    }
  }
  failures += !test_write_kv_refused();
  cases++;
  printf("cache_ops_fp8: %d of %d cases passed\n", cases - failures, cases);
  return failures ? 1 : 0;
}
