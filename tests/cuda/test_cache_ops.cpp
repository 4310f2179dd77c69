// kernels/cache_ops.cu against the references of tests/common/attention_ref.h: write_kv over block
// sizes, head dims and dtypes with skipped (-1) slots, and copy_blocks over all layers. The whole
// pool is compared byte for byte, so a write outside the named slots shows too.
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
  const pkv::cuda::KvLayer layer{kc.as<void>(), vc.as<void>(), block_size,
                                 kv_heads,      head_dim,      dtype};
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
  printf("cache_ops: %d of %d cases passed\n", cases - failures, cases);
  return failures ? 1 : 0;
}
