// kernels/cache_ops.cu against the references of tests/common/attention_ref.h: write_kv over block
// sizes, head dims and dtypes with skipped (-1) slots, copy_blocks over all layers, and
// copy_tier_blocks between a pool and a pinned host tier both ways (write_kv into fp8 pools:
// test_cache_ops_fp8.cpp); write_kv and copy_blocks of K alone for pools without V (MLA). The whole pool (and tier) is compared byte for byte, so a write
// outside the named slots or blocks shows too.
#include <cstring>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;

// misalign > 0 offsets the new rows by that many bytes, for the byte-copy path; k_only: a pool
// without V (v and layer.v null; the V buffer must stay untouched).
bool test_write_kv(DType dtype, int32_t block_size, int32_t kv_heads, int32_t head_dim,
                   int32_t num_tokens, uint64_t seed, size_t misalign = 0, bool k_only = false) {
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
  if (k_only) v_ref.assign(pool_bytes, 0xFF);

  DevBuf dk(k.size() + misalign), dv(v.size() + misalign), dmap(mapping.size() * 8);
  DevBuf kc(pool_bytes), vc(pool_bytes);
  char *k_dev = dk.as<char>() + misalign, *v_dev = dv.as<char>() + misalign;
  check_cuda(cudaMemcpy(k_dev, k.data(), k.size(), cudaMemcpyHostToDevice), "upload");
  check_cuda(cudaMemcpy(v_dev, v.data(), v.size(), cudaMemcpyHostToDevice), "upload");
  dmap.upload(mapping.data(), mapping.size() * 8);
  check_cuda(cudaMemset(kc.as<void>(), 0xFF, pool_bytes), "memset");
  check_cuda(cudaMemset(vc.as<void>(), 0xFF, pool_bytes), "memset");
  const pkv::cuda::KvLayer layer{kc.as<void>(), k_only ? nullptr : vc.as<void>(),
                                 block_size,    kv_heads,
                                 head_dim,      dtype,
                                 dtype,         nullptr,
                                 nullptr,       0};
  check_cuda(pkv::cuda::launch_write_kv(layer, k_dev, k_only ? nullptr : v_dev, dmap.as<int64_t>(),
                                        num_tokens, nullptr),
             "launch_write_kv");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> k_got(pool_bytes), v_got(pool_bytes);
  kc.download(k_got.data(), pool_bytes);
  vc.download(v_got.data(), pool_bytes);
  const bool ok = k_got == k_ref && v_got == v_ref;
  if (!ok)
    fprintf(stderr,
            "FAIL write_kv %s block_size %d kv_heads %d head_dim %d tokens %d misalign %zu%s\n",
            dtype_name(dtype), block_size, kv_heads, head_dim, num_tokens, misalign,
            k_only ? " (K alone)" : "");
  return ok;
}

// k_only: a pool without V (pool.v null; the V buffer must stay untouched).
bool test_copy_blocks(DType dtype, int32_t block_size, int32_t head_dim, uint64_t seed,
                      bool k_only = false) {
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
  const std::vector<unsigned char> v_before = v;
  pkv_ref_copy_blocks(k.data(), v.data(), layers, num_blocks, block_bytes, pairs.data(), num_pairs);
  if (k_only) v = v_before;
  const pkv::cuda::KvPool pool{dk.as<void>(), k_only ? nullptr : dv.as<void>(), layers,
                               int64_t(num_blocks * block_bytes), int64_t(block_bytes)};
  check_cuda(pkv::cuda::launch_copy_blocks(pool, dp.as<int32_t>(), int32_t(num_pairs), nullptr),
             "launch_copy_blocks");
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> k_got(pool_bytes), v_got(pool_bytes);
  dk.download(k_got.data(), pool_bytes);
  dv.download(v_got.data(), pool_bytes);
  const bool ok = k_got == k && v_got == v;
  if (!ok)
    fprintf(stderr, "FAIL copy_blocks %s block_size %d head_dim %d%s\n", dtype_name(dtype),
            block_size, head_dim, k_only ? " (K alone)" : "");
  return ok;
}

struct TierCase {
  DType dtype;
  int32_t block_size, kv_heads, head_dim, layers, num_pairs;
  bool to_host;         // pool -> host tier (swap-out, offload); else host tier -> pool
  size_t misalign = 0;  // offsets the host tier's K and V by that many bytes (byte-copy path)
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
  pkv::cuda::KvPool other_layers = p, other_block = p, no_v = p;
  other_layers.num_layers = 1;
  other_block.block_bytes = 256;
  no_v.v = nullptr;
  const bool ok = pkv::cuda::launch_copy_tier_blocks(p, other_layers, pairs.as<int32_t>(), 1,
                                                     nullptr) == cudaErrorInvalidValue &&
                  pkv::cuda::launch_copy_tier_blocks(p, other_block, pairs.as<int32_t>(), 1,
                                                     nullptr) == cudaErrorInvalidValue &&
                  pkv::cuda::launch_copy_tier_blocks(p, no_v, pairs.as<int32_t>(), 1, nullptr) ==
                      cudaErrorInvalidValue &&
                  pkv::cuda::launch_copy_tier_blocks(no_v, p, pairs.as<int32_t>(), 1, nullptr) ==
                      cudaErrorInvalidValue &&
                  pkv::cuda::launch_copy_tier_blocks(p, p, pairs.as<int32_t>(), -1, nullptr) ==
                      cudaErrorInvalidValue;
  if (!ok) fprintf(stderr, "FAIL copy_tier_blocks accepted mismatched pools\n");
  return ok;
}

// write_kv takes v exactly when the pool has V, and a block stride of the layer's rules.
bool test_write_kv_refused() {
  DevBuf k(256), v(256), kc(256), vc(256), map(8);
  const pkv::cuda::KvLayer with_v{kc.as<void>(), vc.as<void>(), 1,       1,       8,
                                  DType::f32,    DType::f32,    nullptr, nullptr, 0};
  pkv::cuda::KvLayer no_v = with_v;
  no_v.v = nullptr;
  const bool ok = pkv::cuda::launch_write_kv(with_v, k.as<void>(), nullptr, map.as<int64_t>(), 1,
                                             nullptr) == cudaErrorInvalidValue &&
                  pkv::cuda::launch_write_kv(no_v, k.as<void>(), v.as<void>(), map.as<int64_t>(), 1,
                                             nullptr) == cudaErrorInvalidValue;
  if (!ok) fprintf(stderr, "FAIL write_kv accepted a v that does not match the pool\n");
  // A block stride under the dense bytes (1 row of 8 floats: 32) or not a multiple of 16, or a
  // v_dim other than head_dim, is refused; the dense bytes and a wider multiple of 16 are taken.
  const struct {
    int64_t stride;
    int32_t v_dim;
    cudaError_t want;
  } strides[] = {{16, 0, cudaErrorInvalidValue},
                 {40, 0, cudaErrorInvalidValue},
                 {32, 16, cudaErrorInvalidValue},
                 {32, 8, cudaSuccess},
                 {48, 0, cudaSuccess}};
  const int64_t none = -1;
  map.upload(&none, sizeof none);  // the accepted launches skip their one row
  bool strides_ok = true;
  for (const auto &t : strides) {
    pkv::cuda::KvLayer l = with_v;
    l.block_stride = t.stride, l.v_dim = t.v_dim;
    const cudaError_t e =
        pkv::cuda::launch_write_kv(l, k.as<void>(), v.as<void>(), map.as<int64_t>(), 1, nullptr);
    if (e != t.want)
      fprintf(stderr, "FAIL write_kv with block_stride %lld, v_dim %d: %s\n", (long long)t.stride,
              t.v_dim, cudaGetErrorString(e));
    strides_ok = strides_ok && e == t.want;
  }
  check_cuda(cudaDeviceSynchronize(), "sync");
  return ok && strides_ok;
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
  // Pools without V (the MLA latent cache: one head of 576 = 512 + 64, or 40 = 32 + 8).
  for (DType t : dtypes) {
    failures += !test_write_kv(t, 16, 1, 576, 37, seed++, 0, true);
    failures += !test_write_kv(t, 1, 1, 40, 19, seed++, t == DType::f16 ? 2 : 0, true);
    failures += !test_copy_blocks(t, 16, 576, seed++, true);
    cases += 3;
  }
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
  failures += !test_write_kv_refused();
  cases += 2;
  printf("cache_ops: %d of %d cases passed\n", cases - failures, cases);
  return failures ? 1 : 0;
}
