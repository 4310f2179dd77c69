// kernels/sparse_mla.cu against the fp64 reference pkv_ref_sparse_mla (tests/common/indexer_ref.h):
// every new token's q heads attend over its index row only. Rows hold positions in any order,
// duplicates (counted twice), -1 padding, positions past the token's own (skipped), whole tiles
// of padding, and one row with no valid entry (out 0). f32, f16 and bf16 models, caches of the
// model's dtype and fp8 e4m3 / e5m2 (scale not 1); DeepSeek V3's latent (512 + 64) and small
// ones (64 + 16, 32 + 8); 1, 16, 40 q heads (a partial head block); block sizes 1, 5, 16; dense
// blocks and pages (block_stride past the latents, the bytes between them NaN); rows in one
// split and in many (merged); then refused launches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention_ref.h"
#include "indexer_ref.h"
#include "kv_harness.h"
#include "sparse_mla.cuh"

namespace {

using namespace kvtest;

struct Case {
  DType dtype, kv_dtype;
  int32_t heads, rank, rope, topk, block_size;
  std::vector<SeqSpec> seqs;
  bool paged;
  int32_t split_entries = 0;  // 0: plan_sparse_mla's for 132 SMs
};

std::string describe(const Case &c) {
  return std::string(dtype_name(c.dtype)) + "/" + dtype_name(c.kv_dtype) +
         " heads=" + std::to_string(c.heads) + " latent=" + std::to_string(c.rank) + "+" +
         std::to_string(c.rope) + " topk=" + std::to_string(c.topk) +
         " bs=" + std::to_string(c.block_size) + (c.paged ? " paged" : "");
}

// A device copy of a host vector (16 bytes at least).
struct DevVec : DevBuf {
  template <class T>
  explicit DevVec(const std::vector<T> &v) : DevBuf(std::max<size_t>(v.size() * sizeof(T), 16)) {
    if (!v.empty()) upload(v.data(), v.size() * sizeof(T));
  }
};

// Token at pos's index row: a mix of valid positions (some twice), padding, positions past pos;
// `empty` rows hold no valid entry at all.
std::vector<int32_t> index_row(const Case &c, int32_t pos, bool empty, Rng &rng) {
  std::vector<int32_t> row(size_t(c.topk), -1);
  if (empty) {
    for (int32_t j = 0; j < c.topk; j += 3) row[size_t(j)] = pos + 1 + int32_t(rng.below(9));
    return row;
  }
  const int32_t used = std::max(1, c.topk - int32_t(rng.below(uint32_t(c.topk / 2 + 1))));
  for (int32_t j = 0; j < used; ++j) {
    const uint32_t r = rng.below(10);
    row[size_t(j)] = r == 0 ? pos + 1 + int32_t(rng.below(50))  // past the token: skipped
                     : r == 1 && j > 0 ? row[size_t(j - 1)]     // a duplicate
                     : r == 2          ? -1                     // padding inside the row
                                       : int32_t(rng.below(uint32_t(pos + 1)));
  }
  return row;
}

bool run_case(const Case &c, uint64_t seed) {
  Rng rng(seed);
  const int32_t width = c.rank + c.rope, bs = c.block_size;
  const bool fp8 = pkv::cuda::is_fp8(c.kv_dtype), e5m2 = c.kv_dtype == DType::fp8_e5m2;
  const size_t eb = pkv::cuda::dtype_bytes(c.dtype), cb = pkv::cuda::dtype_bytes(c.kv_dtype);
  const float kscale = fp8 ? 0.0078125f * 3 : 1.f;
  // The batch: shuffled blocks, every latent stored (and its fp64 value as the cache holds it).
  std::vector<int32_t> qs{0}, ctx, indptr{0}, blocks;
  int32_t num_blocks = 2, max_q = 0, max_ctx = 0;
  for (const SeqSpec &s : c.seqs) num_blocks += (s.context_len + bs - 1) / bs;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  for (int32_t i = 0; i < num_blocks; ++i) ids[size_t(i)] = i;
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(uint32_t(i))]);
  const int64_t dense = int64_t(bs) * width * int64_t(cb);
  pkv::cuda::KvLayer layer{nullptr, nullptr,    bs,      1,       width,
                           c.dtype, c.kv_dtype, nullptr, nullptr, 0};
  layer.block_stride = c.paged ? (dense * 2 + 32 + 15) / 16 * 16 : 0;
  const int64_t stride = c.paged ? layer.block_stride : dense;
  std::vector<unsigned char> pool(size_t(num_blocks * stride), 0xFF);
  std::vector<std::vector<double>> stored;
  size_t next = 0;
  for (const SeqSpec &s : c.seqs) {
    const size_t first = blocks.size();
    for (int32_t b = 0; b * bs < s.context_len; ++b) blocks.push_back(ids[next++]);
    std::vector<double> lat(size_t(s.context_len) * width);
    for (int32_t p = 0; p < s.context_len; ++p) {
      unsigned char *row = pool.data() + blocks[first + size_t(p / bs)] * stride +
                           int64_t(p % bs) * width * int64_t(cb);
      for (int32_t i = 0; i < width; ++i) {
        double &x = lat[size_t(p) * width + i];
        if (fp8) {
          row[i] = pkv_ref_fp8_encode(float(rng.uniform(-400, 400) * kscale), kscale, e5m2);
          x = pkv_ref_fp8_decode(row[i], e5m2) * kscale;
        } else {
          store_elem(c.kv_dtype, row, size_t(i), rng.uniform(-1, 1));
          x = load_elem(c.kv_dtype, row, size_t(i));
        }
      }
    }
    stored.push_back(std::move(lat));
    qs.push_back(qs.back() + s.query_len), ctx.push_back(s.context_len);
    indptr.push_back(int32_t(blocks.size()));
    max_q = std::max(max_q, s.query_len), max_ctx = std::max(max_ctx, s.context_len);
  }
  const int32_t tokens = qs.back();
  std::vector<unsigned char> qraw(size_t(tokens) * c.heads * width * eb);
  std::vector<double> q(size_t(tokens) * c.heads * width), ref(size_t(tokens) * c.heads * c.rank);
  for (size_t i = 0; i < q.size(); ++i) {
    store_elem(c.dtype, qraw.data(), i, rng.uniform(-1, 1));
    q[i] = load_elem(c.dtype, qraw.data(), i);
  }
  std::vector<int32_t> indices;
  const double scale = 1.5 / std::sqrt(double(width));
  for (size_t i = 0; i < c.seqs.size(); ++i)
    for (int32_t j = 0; j < c.seqs[i].query_len; ++j) {
      const int32_t t = qs[i] + j, pos = ctx[i] - c.seqs[i].query_len + j;
      const std::vector<int32_t> row = index_row(c, pos, t == 1, rng);
      indices.insert(indices.end(), row.begin(), row.end());
      pkv_ref_sparse_mla(q.data() + size_t(t) * c.heads * width, stored[i].data(), row.data(),
                         uint32_t(c.topk), uint32_t(pos), uint32_t(c.heads), uint32_t(c.rank),
                         uint32_t(c.rope), scale, ref.data() + size_t(t) * c.heads * c.rank);
    }
  DevVec dpool(pool), dq(qraw), didx(indices), dqs(qs), dctx(ctx), dptr(indptr), dblocks(blocks),
      dscale(std::vector<float>{kscale});
  DevBuf dout(ref.size() * eb);
  layer.k = dpool.as<void>(), layer.k_scale = fp8 ? dscale.as<float>() : nullptr;
  const pkv::cuda::BatchView batch{int32_t(c.seqs.size()),
                                   tokens,
                                   max_q,
                                   max_ctx,
                                   dqs.as<int32_t>(),
                                   dctx.as<int32_t>(),
                                   dptr.as<int32_t>(),
                                   dblocks.as<int32_t>()};
  const pkv::cuda::SparseMlaPlan plan =
      c.split_entries
          ? pkv::cuda::plan_sparse_mla_with(tokens, c.heads, c.rank, c.topk, c.split_entries)
          : pkv::cuda::plan_sparse_mla(tokens, c.heads, c.rank, c.topk, 132);
  DevBuf ws(std::max<size_t>(plan.workspace_bytes, 16));
  check_cuda(pkv::cuda::launch_sparse_mla(layer, c.rank, batch, dq.as<void>(), didx.as<int32_t>(),
                                          c.topk, dout.as<void>(), c.heads, float(scale), plan,
                                          ws.as<void>(), nullptr),
             "launch_sparse_mla");
  std::vector<unsigned char> raw(ref.size() * eb);
  dout.download(raw.data(), raw.size());
  std::vector<double> got(ref.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(c.dtype, raw.data(), i);
  double atol, rtol;
  tolerances(c.dtype, &atol, &rtol);
  const size_t bad =
      pkv_ref_compare(describe(c).c_str(), got.data(), ref.data(), got.size(), atol, rtol);
  if (!bad) printf("ok %s (%d tokens, %d splits)\n", describe(c).c_str(), tokens, plan.num_splits);
  return bad == 0;
}

// Launches the launcher must refuse before any work, and the limits it takes.
bool check_refused() {
  DevBuf pool(1 << 14), q(1 << 14), out(1 << 14), idx(256), qs(16), ctx(16), ptr(16), blocks(16),
      ws(1 << 14);
  const int32_t host[4] = {0, 1, 0, 0}, one[4] = {1, 0, 0, 0};
  qs.upload(host, 8), ptr.upload(host, 8), blocks.upload(host, 4), ctx.upload(one, 4);
  idx.upload(host, 4);
  const pkv::cuda::BatchView batch{
      1, 1, 1, 1, qs.as<int32_t>(), ctx.as<int32_t>(), ptr.as<int32_t>(), blocks.as<int32_t>()};
  struct Try {
    const char *what;
    bool ok;
    int32_t rank = 64, width = 80, topk = 4;
    int64_t stride = 0;
    size_t q_offset = 0;
    int32_t split = 0;       // split_entries of the plan; 0: one split
    bool uncovered = false;  // a plan of no split at all
  };
  std::vector<Try> tries(9, Try{"a small latent", true});
  tries[1].what = "DeepSeek V3's latent", tries[1].rank = 512, tries[1].width = 576;
  tries[2].what = "a rope not a multiple of 8", tries[2].ok = false, tries[2].width = 84;
  tries[3].what = "a page stride 8 bytes off 16", tries[3].ok = false,
  tries[3].stride = 16 * 160 + 8;
  tries[4].what = "a page stride under the latents", tries[4].ok = false, tries[4].stride = 160;
  tries[5].what = "q 8 bytes off 16", tries[5].ok = false, tries[5].q_offset = 8;
  tries[6].what = "a top-k of 0", tries[6].ok = false, tries[6].topk = 0;
  tries[7].what = "a plan whose splits do not cover the row", tries[7].ok = false;
  tries[7].uncovered = true;
  tries[8].what = "a plan of 3 splits (its workspace given)", tries[8].split = 16;
  tries[8].topk = 40;
  bool all = true;
  for (const Try &t : tries) {
    pkv::cuda::KvLayer l{pool.as<void>(), nullptr,     16,      1,       t.width,
                         DType::bf16,     DType::bf16, nullptr, nullptr, 0};
    l.block_stride = t.stride;
    pkv::cuda::SparseMlaPlan plan = pkv::cuda::plan_sparse_mla_with(1, 4, t.rank, t.topk, t.split);
    if (t.uncovered) plan.num_splits = 0;
    const cudaError_t e =
        pkv::cuda::launch_sparse_mla(l, t.rank, batch, q.as<char>() + t.q_offset, idx.as<int32_t>(),
                                     t.topk, out.as<void>(), 4, 0.1f, plan, ws.as<void>(), nullptr);
    if ((e == cudaSuccess) != t.ok) {
      fprintf(stderr, "FAIL refused sparse MLA launch, %s: got %s\n", t.what,
              cudaGetErrorString(e));
      all = false;
    }
  }
  check_cuda(cudaDeviceSynchronize(), "the accepted launches");
  return all;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  const DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;
  const std::vector<SeqSpec> mixed = {{200, 1}, {30, 1}, {50, 6}, {3, 3}};
  const std::vector<Case> cases = {
      {bf16, bf16, 16, 512, 64, 64, 16, {{300, 1}, {90, 2}}, false},
      {f16, f16, 40, 64, 16, 40, 5, mixed, true},
      {f32, f32, 1, 32, 8, 24, 1, mixed, false},
      {bf16, DType::fp8_e4m3, 16, 512, 64, 48, 16, {{150, 1}, {40, 3}}, true},
      {f16, DType::fp8_e5m2, 8, 64, 16, 32, 16, mixed, false},
      {f32, DType::fp8_e4m3, 4, 64, 16, 20, 5, mixed, true},
      // Rows split over CTAs (16 and 32 entries: one split of only padding), then merged; the
      // plan's own split for one decode of 2 head blocks on 132 SMs.
      {bf16, bf16, 32, 512, 64, 96, 16, {{300, 1}, {100, 1}}, true, 16},
      {f16, DType::fp8_e4m3, 40, 64, 16, 64, 5, mixed, false, 32},
      {f32, f32, 20, 32, 8, 512, 16, {{900, 1}}, false},
  };
  bool ok = check_refused();
  for (size_t i = 0; i < cases.size(); ++i) ok = run_case(cases[i], 200 + i) && ok;
  printf(ok ? "sparse_mla: all passed\n" : "sparse_mla: FAILED\n");
  return ok ? 0 : 1;
}
