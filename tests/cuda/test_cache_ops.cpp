// kernels/cache_ops.cu against the references of tests/common/attention_ref.h: write_kv over block
// sizes, head dims and dtypes with skipped (-1) slots, write_kv into fp8 pools (every code,
// every tie, saturation, NaN, signed zeros, under per-head scales) against the reference encoder,
// copy_blocks over all layers, and copy_tier_blocks between a pool and a pinned host tier both
// ways. The whole pool (and tier) is compared byte for byte, so a write outside the named slots
// or blocks shows too.
#include <cmath>
#include <cstring>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;

// misalign > 0 offsets the new rows by that many bytes, for the byte-copy path.
bool test_write_kv(DType dtype, int32_t block_size, int32_t kv_heads, int32_t head_dim,
                   int32_t num_tokens, uint64_t seed, size_t misalign = 0) {
  Rng rng(seed);
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const size_t eb = pkv::cuda::dtype_bytes(dtype), row_bytes = size_t(kv_heads) * head_dim * eb;
  const size_t pool_bytes = size_t(num_blocks) * block_size * row_bytes;
  std::vector<unsigned char> k(num_tokens * row_bytes), v(k.size());
  for (size_t i = 0; i < k.size() / eb; ++i) {
    store_elem(dtype, k.data(), i, rng.uniform(-1, 1));
    store_elem(dtype, v.data(), i, rng.uniform(-1, 1));
  }
  // Distinct random slots; every fifth token skipped.
  std::vector<int64_t> slots(size_t(num_blocks) * block_size), mapping(num_tokens);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = int64_t(i);
  for (size_t i = slots.size(); i > 1; --i) std::swap(slots[i - 1], slots[rng.below(uint32_t(i))]);
  for (int32_t t = 0; t < num_tokens; ++t) mapping[t] = t % 5 == 3 ? -1 : slots[t];

  std::vector<unsigned char> k_ref(pool_bytes, 0xFF), v_ref(pool_bytes, 0xFF);
  pkv_ref_write_kv(k.data(), v.data(), k_ref.data(), v_ref.data(), mapping.data(),
                   uint32_t(num_tokens), row_bytes);

  DevBuf dk(k.size() + misalign), dv(v.size() + misalign), dmap(mapping.size() * 8);
  DevBuf kc(pool_bytes), vc(pool_bytes);
  char *k_dev = dk.as<char>() + misalign, *v_dev = dv.as<char>() + misalign;
  check_cuda(cudaMemcpy(k_dev, k.data(), k.size(), cudaMemcpyHostToDevice), "upload");
  check_cuda(cudaMemcpy(v_dev, v.data(), v.size(), cudaMemcpyHostToDevice), "upload");
  dmap.upload(mapping.data(), mapping.size() * 8);
  check_cuda(cudaMemset(kc.as<void>(), 0xFF, pool_bytes), "memset");
  check_cuda(cudaMemset(vc.as<void>(), 0xFF, pool_bytes), "memset");
  const pkv::cuda::KvLayer layer{kc.as<void>(), vc.as<void>(), block_size, kv_heads, head_dim,
                                 dtype,         dtype,         nullptr,    nullptr,  0};
  check_cuda(
      pkv::cuda::launch_write_kv(layer, k_dev, v_dev, dmap.as<int64_t>(), num_tokens, nullptr),
      "launch_write_kv");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> k_got(pool_bytes), v_got(pool_bytes);
  kc.download(k_got.data(), pool_bytes);
  vc.download(v_got.data(), pool_bytes);
  const bool ok = k_got == k_ref && v_got == v_ref;
  if (!ok)
    fprintf(stderr,
            "FAIL write_kv %s block_size %d kv_heads %d head_dim %d tokens %d misalign %zu\n",
            dtype_name(dtype), block_size, kv_heads, head_dim, num_tokens, misalign);
  return ok;
}

// The non-negative finite values of the fp8 codes, ascending.
std::vector<double> fp8_code_values(int e5m2) {
  std::vector<double> codes;
  for (int c = 0; c < 128; ++c)
    if (std::isfinite(pkv_ref_fp8_decode(uint8_t(c), e5m2))) codes.push_back(pkv_ref_fp8_decode(uint8_t(c), e5m2));
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
  for (double x : {max * 1.03, max * 1.0625, max * 1.07, max * 4, 1e30})
    v.push_back(float(x));
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

enum class Fp8Fill {
  random,  // U(-1.2, 1.2) * the largest finite value * scales that are not powers of two
  edges,   // fp8_edge_values times power-of-two scales: the quotients are exactly those values
  ties,    // fp8_ties under scales that are not powers of two
};

// write_kv into an fp8 pool: each stored byte is pkv_ref_fp8_encode of its element under its
// head's scale, K and V with scales of their own. edges and ties need an f32 model.
bool test_write_kv_fp8(DType dtype, DType kv, int32_t block_size, int32_t kv_heads,
                       int32_t head_dim, int32_t num_tokens, Fp8Fill fill, uint64_t seed) {
  Rng rng(seed);
  const int e5m2 = kv == DType::fp8_e5m2;
  const double max = e5m2 ? 57344.0 : 448.0;
  const int32_t num_blocks = (num_tokens + block_size - 1) / block_size + 2;
  const size_t eb = pkv::cuda::dtype_bytes(dtype), row = size_t(kv_heads) * head_dim;
  const size_t pool_bytes = size_t(num_blocks) * block_size * row;
  std::vector<float> scales(2 * size_t(kv_heads));  // K's heads, then V's
  for (size_t h = 0; h < scales.size(); ++h)
    scales[h] = fill == Fp8Fill::edges ? std::ldexp(1.f, int(h % 5) - 2) : float(rng.uniform(0.001, 3));
  // What head h's elements cycle through (edges, ties), K's heads then V's.
  std::vector<std::vector<float>> values(scales.size());
  for (size_t h = 0; h < scales.size(); ++h) {
    if (fill == Fp8Fill::edges)
      for (float y : fp8_edge_values(e5m2)) values[h].push_back(y * scales[h]);
    if (fill == Fp8Fill::ties) values[h] = fp8_ties(e5m2, scales[h]);
  }
  // The ties must tell x / scale from x * (1 / scale): some of them encode otherwise that way.
  size_t reciprocal_differs = 0;
  for (size_t h = 0; fill == Fp8Fill::ties && h < scales.size(); ++h)
    for (float x : values[h])
      reciprocal_differs += pkv_ref_fp8_encode(x * (1.f / scales[h]), 1.f, e5m2) !=
                            pkv_ref_fp8_encode(x, scales[h], e5m2);
  if (fill == Fp8Fill::ties && reciprocal_differs == 0) {
    fprintf(stderr, "FAIL write_kv %s: no tie that x * (1 / scale) would encode otherwise\n", dtype_name(kv));
    return false;
  }
  std::vector<unsigned char> k(num_tokens * row * eb), v(k.size());
  for (size_t i = 0; i < num_tokens * row; ++i) {
    const size_t h = i % row / head_dim, n = i / row * head_dim + i % head_dim;  // n-th of head h
    for (int kvi = 0; kvi < 2; ++kvi) {
      const size_t hs = kvi * kv_heads + h;
      const double x = fill == Fp8Fill::random ? rng.uniform(-1.2, 1.2) * max * scales[hs]
                                               : values[hs][(n + 7 * kvi) % values[hs].size()];
      store_elem(dtype, (kvi ? v : k).data(), i, x);
    }
  }
  std::vector<int64_t> slots(size_t(num_blocks) * block_size), mapping(num_tokens);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = int64_t(i);
  for (size_t i = slots.size(); i > 1; --i) std::swap(slots[i - 1], slots[rng.below(uint32_t(i))]);
  for (int32_t t = 0; t < num_tokens; ++t) mapping[t] = t % 5 == 3 ? -1 : slots[t];
  std::vector<unsigned char> k_ref(pool_bytes, 0xFF), v_ref(pool_bytes, 0xFF);
  for (int32_t t = 0; t < num_tokens; ++t) {
    for (size_t e = 0; mapping[t] >= 0 && e < row; ++e) {
      const size_t src = size_t(t) * row + e, dst = size_t(mapping[t]) * row + e, h = e / head_dim;
      k_ref[dst] = pkv_ref_fp8_encode(float(load_elem(dtype, k.data(), src)), scales[h], e5m2);
      v_ref[dst] = pkv_ref_fp8_encode(float(load_elem(dtype, v.data(), src)), scales[kv_heads + h], e5m2);
    }
  }

  DevBuf dk(k.size()), dv(v.size()), dmap(mapping.size() * 8), ds(scales.size() * 4);
  DevBuf kc(pool_bytes), vc(pool_bytes);
  dk.upload(k.data(), k.size()), dv.upload(v.data(), v.size());
  dmap.upload(mapping.data(), mapping.size() * 8), ds.upload(scales.data(), scales.size() * 4);
  check_cuda(cudaMemset(kc.as<void>(), 0xFF, pool_bytes), "memset");
  check_cuda(cudaMemset(vc.as<void>(), 0xFF, pool_bytes), "memset");
  const pkv::cuda::KvLayer layer{kc.as<void>(), vc.as<void>(), block_size, kv_heads,
                                 head_dim,      dtype,         kv,         ds.as<float>(),
                                 ds.as<float>() + kv_heads,    0};
  check_cuda(pkv::cuda::launch_write_kv(layer, dk.as<void>(), dv.as<void>(), dmap.as<int64_t>(),
                                        num_tokens, nullptr),
             "launch_write_kv");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> got[2] = {std::vector<unsigned char>(pool_bytes),
                                       std::vector<unsigned char>(pool_bytes)};
  kc.download(got[0].data(), pool_bytes);
  vc.download(got[1].data(), pool_bytes);
  size_t bad = 0;
  for (int kvi = 0; kvi < 2; ++kvi) {
    const std::vector<unsigned char> &want = kvi ? v_ref : k_ref;
    for (size_t i = 0; i < pool_bytes; ++i) {
      if (got[kvi][i] == want[i]) continue;
      if (bad++ < 10)
        fprintf(stderr, "  %s byte %zu (slot %zu, head %zu): got 0x%02x want 0x%02x\n",
                kvi ? "V" : "K", i, i / row, i % row / head_dim, got[kvi][i], want[i]);
    }
  }
  if (bad)
    fprintf(stderr,
            "FAIL write_kv %s -> %s%s block_size %d kv_heads %d head_dim %d tokens %d: %zu bytes "
            "differ\n",
            dtype_name(dtype), dtype_name(kv),
            fill == Fp8Fill::edges ? " (edge values)" : fill == Fp8Fill::ties ? " (ties)" : "", block_size, kv_heads,
            head_dim, num_tokens, bad);
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
  const pkv::cuda::KvLayer refused[] = {
      {pool.as<void>(), pool.as<char>() + 2048, 4, 2, 8, DType::f16, DType::fp8_e4m3, nullptr, sp, 0},
      {pool.as<void>(), pool.as<char>() + 2048, 4, 2, 8, DType::f16, DType::fp8_e5m2, sp, nullptr, 0},
      {pool.as<void>(), pool.as<char>() + 2048, 4, 2, 8, DType::f16, DType::bf16, nullptr, nullptr, 0},
      {pool.as<void>(), pool.as<char>() + 2048, 4, 2, 8, DType::fp8_e4m3, DType::fp8_e4m3, sp, sp, 0},
  };
  bool ok = true;
  for (const pkv::cuda::KvLayer &l : refused)
    ok = ok && pkv::cuda::launch_write_kv(l, rows.as<void>(), rows.as<void>(), map.as<int64_t>(), 1,
                                          nullptr) == cudaErrorInvalidValue;
  if (!ok) fprintf(stderr, "FAIL write_kv accepted an fp8 pool without scales or a dtype mismatch\n");
  return ok;
}

bool test_copy_blocks(DType dtype, int32_t block_size, int32_t head_dim, uint64_t seed) {
  Rng rng(seed);
  const int32_t layers = 3, num_blocks = 12, kv_heads = 2;
  const size_t eb = pkv::cuda::dtype_bytes(dtype);
  const size_t block_bytes = size_t(block_size) * kv_heads * head_dim * eb;
  const size_t pool_bytes = size_t(layers) * num_blocks * block_bytes;
  std::vector<unsigned char> k(pool_bytes), v(pool_bytes);
  for (size_t i = 0; i < pool_bytes / eb; ++i) {
    store_elem(dtype, k.data(), i, rng.uniform(-1, 1));
    store_elem(dtype, v.data(), i, rng.uniform(-1, 1));
  }
  const std::vector<int32_t> pairs = {0, 5, 3, 11, 7, 1, 2, 9};  // no block both src and dst
  const uint32_t num_pairs = uint32_t(pairs.size() / 2);
  DevBuf dk(pool_bytes), dv(pool_bytes), dp(pairs.size() * 4);
  dk.upload(k.data(), pool_bytes);
  dv.upload(v.data(), pool_bytes);
  dp.upload(pairs.data(), pairs.size() * 4);
  pkv_ref_copy_blocks(k.data(), v.data(), layers, num_blocks, block_bytes, pairs.data(), num_pairs);
  const pkv::cuda::KvPool pool{dk.as<void>(), dv.as<void>(), layers,
                               int64_t(num_blocks * block_bytes), int64_t(block_bytes)};
  check_cuda(pkv::cuda::launch_copy_blocks(pool, dp.as<int32_t>(), int32_t(num_pairs), nullptr),
             "launch_copy_blocks");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> k_got(pool_bytes), v_got(pool_bytes);
  dk.download(k_got.data(), pool_bytes);
  dv.download(v_got.data(), pool_bytes);
  const bool ok = k_got == k && v_got == v;
  if (!ok)
    fprintf(stderr, "FAIL copy_blocks %s block_size %d head_dim %d\n", dtype_name(dtype),
            block_size, head_dim);
  return ok;
}

struct TierCase {
  DType dtype;
  int32_t block_size, kv_heads, head_dim, layers, num_pairs;
  bool to_host;          // pool -> host tier (swap-out, offload); else host tier -> pool
  size_t misalign = 0;   // offsets the host tier's K and V by that many bytes (byte-copy path)
};

// Random K/V in a pool of num_pairs + 5 blocks and a host tier of num_pairs + 3 (so the layer
// strides differ); num_pairs copies one way onto distinct blocks, from random (maybe repeated)
// ones. The reference is a memcpy per pair, layer, K and V.
bool test_copy_tier_blocks(const TierCase &c, uint64_t seed) {
  Rng rng(seed);
  const size_t eb = pkv::cuda::dtype_bytes(c.dtype);
  const size_t block_bytes = size_t(c.block_size) * c.kv_heads * c.head_dim * eb;
  const int32_t pool_blocks = c.num_pairs + 5, host_blocks = c.num_pairs + 3;
  const size_t pool_bytes = size_t(c.layers) * pool_blocks * block_bytes;
  const size_t host_bytes = size_t(c.layers) * host_blocks * block_bytes;
  // [0] K, [1] V of the pool and of the host tier, then the expected contents.
  std::vector<unsigned char> pool[2], host[2];
  for (int kv = 0; kv < 2; ++kv) {
    pool[kv].resize(pool_bytes);
    host[kv].resize(host_bytes);
    for (size_t i = 0; i < pool_bytes / eb; ++i)
      store_elem(c.dtype, pool[kv].data(), i, rng.uniform(-1, 1));
    for (size_t i = 0; i < host_bytes / eb; ++i)
      store_elem(c.dtype, host[kv].data(), i, rng.uniform(-1, 1));
  }
  const int32_t from_blocks = c.to_host ? pool_blocks : host_blocks;
  const int32_t to_blocks = c.to_host ? host_blocks : pool_blocks;
  std::vector<int32_t> dsts(size_t(to_blocks), 0), pairs;
  for (int32_t b = 0; b < to_blocks; ++b) dsts[b] = b;
  for (size_t i = dsts.size(); i > 1; --i) std::swap(dsts[i - 1], dsts[rng.below(uint32_t(i))]);
  for (int32_t i = 0; i < c.num_pairs; ++i) {
    pairs.push_back(int32_t(rng.below(uint32_t(from_blocks))));
    pairs.push_back(dsts[i]);
  }
  std::vector<unsigned char> want_pool[2] = {pool[0], pool[1]}, want_host[2] = {host[0], host[1]};
  for (int kv = 0; kv < 2; ++kv) {
    const std::vector<unsigned char> &from = c.to_host ? pool[kv] : host[kv];
    std::vector<unsigned char> &to = c.to_host ? want_host[kv] : want_pool[kv];
    for (int32_t l = 0; l < c.layers; ++l)
      for (int32_t i = 0; i < c.num_pairs; ++i)
        std::memcpy(&to[(size_t(l) * to_blocks + pairs[2 * i + 1]) * block_bytes],
                    &from[(size_t(l) * from_blocks + pairs[2 * i]) * block_bytes], block_bytes);
  }

  DevBuf dk(pool_bytes), dv(pool_bytes), dp(pairs.size() * 4);
  PinnedBuf tier(2 * (host_bytes + c.misalign));
  unsigned char *hk = tier.host() + c.misalign, *hv = hk + host_bytes + c.misalign;
  dk.upload(pool[0].data(), pool_bytes);
  dv.upload(pool[1].data(), pool_bytes);
  std::memcpy(hk, host[0].data(), host_bytes);
  std::memcpy(hv, host[1].data(), host_bytes);
  dp.upload(pairs.data(), pairs.size() * 4);
  const size_t hv_offset = size_t(hv - tier.host());
  const pkv::cuda::KvPool dev_pool{dk.as<void>(), dv.as<void>(), c.layers,
                                   int64_t(pool_blocks * block_bytes), int64_t(block_bytes)};
  const pkv::cuda::KvPool host_pool{tier.device() + c.misalign, tier.device() + hv_offset, c.layers,
                                    int64_t(host_blocks * block_bytes), int64_t(block_bytes)};
  check_cuda(pkv::cuda::launch_copy_tier_blocks(c.to_host ? dev_pool : host_pool,
                                                c.to_host ? host_pool : dev_pool, dp.as<int32_t>(),
                                                c.num_pairs, nullptr),
             "launch_copy_tier_blocks");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> got_pool[2] = {std::vector<unsigned char>(pool_bytes),
                                            std::vector<unsigned char>(pool_bytes)};
  dk.download(got_pool[0].data(), pool_bytes);
  dv.download(got_pool[1].data(), pool_bytes);
  const bool ok = got_pool[0] == want_pool[0] && got_pool[1] == want_pool[1] &&
                  std::memcmp(hk, want_host[0].data(), host_bytes) == 0 &&
                  std::memcmp(hv, want_host[1].data(), host_bytes) == 0;
  if (!ok)
    fprintf(stderr,
            "FAIL copy_tier_blocks %s %s block_size %d kv_heads %d head_dim %d layers %d pairs %d "
            "misalign %zu\n",
            c.to_host ? "pool->host" : "host->pool", dtype_name(c.dtype), c.block_size, c.kv_heads,
            c.head_dim, c.layers, c.num_pairs, c.misalign);
  return ok;
}

// Pools that differ in layers or block bytes are refused before any work.
bool test_copy_tier_refused() {
  DevBuf a(4096), b(4096), pairs(8);
  const pkv::cuda::KvPool p{a.as<void>(), b.as<void>(), 2, 1024, 512};
  pkv::cuda::KvPool other_layers = p, other_block = p;
  other_layers.num_layers = 1;
  other_block.block_bytes = 256;
  const bool ok =
      pkv::cuda::launch_copy_tier_blocks(p, other_layers, pairs.as<int32_t>(), 1, nullptr) ==
          cudaErrorInvalidValue &&
      pkv::cuda::launch_copy_tier_blocks(p, other_block, pairs.as<int32_t>(), 1, nullptr) ==
          cudaErrorInvalidValue &&
      pkv::cuda::launch_copy_tier_blocks(p, p, pairs.as<int32_t>(), -1, nullptr) ==
          cudaErrorInvalidValue;
  if (!ok) fprintf(stderr, "FAIL copy_tier_blocks accepted mismatched pools\n");
  return ok;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  int failures = 0, cases = 0;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t block_sizes[] = {1, 7, 16, 32};
  const int32_t head_dims[] = {64, 80, 128, 256, 40};
  uint64_t seed = 1;
  for (DType t : dtypes) {
    for (int32_t bs : block_sizes) {
      for (int32_t d : head_dims) {
        failures += !test_write_kv(t, bs, 2, d, 37, seed++);
        cases++;
      }
      failures += !test_copy_blocks(t, bs, bs == 7 ? 72 : 64, seed++);
      cases++;
    }
  }
  failures += !test_write_kv(DType::f16, 7, 3, 72, 19, seed++, 2);
  cases++;
  // fp8: the edge values and the ties in an f32 model (64 elements of each head a token, 48
  // tokens: each value of a head's list, at most 1022, is written at least once past the skipped
  // slots), then random elements from every model dtype over block sizes and head dims.
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    failures += !test_write_kv_fp8(DType::f32, kv, 16, 2, 64, 48, Fp8Fill::edges, seed++);
    failures += !test_write_kv_fp8(DType::f32, kv, 16, 2, 64, 48, Fp8Fill::ties, seed++);
    cases += 2;
    for (DType t : dtypes) {
      for (int32_t bs : {1, 7, 16}) {
        failures += !test_write_kv_fp8(t, kv, bs, 3, bs == 7 ? 40 : 64, 29, Fp8Fill::random, seed++);
        cases++;
      }
    }
  }
  failures += !test_write_kv_refused();
  cases++;
  // copy_tier_blocks: batch sizes 1, 3, 64 both ways in every dtype (16-byte chunks), then block
  // bytes that are not a multiple of 16 (head_dim 5 in f16: 30-byte blocks) and a misaligned host
  // tier (the byte path).
  for (DType t : dtypes) {
    for (int32_t pairs : {1, 3, 64}) {
      for (bool to_host : {true, false}) {
        const int32_t bs = pairs == 64 ? 4 : 16;
        failures += !test_copy_tier_blocks({t, bs, 2, 64, 3, pairs, to_host}, seed++);
        cases++;
      }
    }
  }
  for (bool to_host : {true, false}) {
    failures += !test_copy_tier_blocks({DType::f16, 3, 1, 5, 2, 7, to_host}, seed++);
    failures += !test_copy_tier_blocks({DType::bf16, 16, 2, 64, 2, 5, to_host, 4}, seed++);
    cases += 2;
  }
  failures += !test_copy_tier_refused();
  cases++;
  printf("cache_ops: %d of %d cases passed\n", cases - failures, cases);
  return failures ? 1 : 0;
}
