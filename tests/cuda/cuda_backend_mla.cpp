// The CUDA backend on an MLA pool (PoolShape tensors 1: the latents in K, no V), run through the
// Backend interface: K alone is allocated (v_pool and host_v_pool null), three steps of plan +
// attention over two layers check every output row against pkv_ref_mla_attention and every
// latent in the pool, and between them copy_blocks moves K alone: a copy-on-write of a partial
// block (its sequence forks: both continue from it), a swap-out of a sequence to the host tier
// (checked byte for byte there) whose pool blocks another prompt then takes, and its swap-in into
// other blocks; read_block's payload is K of every layer.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "backend/backend.h"
#include "cuda_backend_mla.h"
#include "kv_harness.h"

namespace {

using namespace kvtest;

constexpr uint32_t kLayers = 2, kHeads = 16, kRank = 64, kRope = 16, kWidth = kRank + kRope;
constexpr float kScale = 0.2f;

struct MlaCase {
  DType dtype, kv_dtype;  // kv_dtype == dtype: no fp8
  uint32_t block_size;
};

// Every latent of the run: x[layer][seq][pos][kWidth] in the model's dtype, and what the pool
// holds of it (the same, or its fp8 code's value times the layer's scale).
struct Latents {
  std::vector<std::vector<std::vector<double>>> x, stored;
  std::vector<float> scale;  // [layers], fp8 only
};

Latents make_latents(const MlaCase &c, Rng &rng, const std::vector<int32_t> &lens) {
  const bool fp8 = pkv::cuda::is_fp8(c.kv_dtype);
  const int e5m2 = c.kv_dtype == DType::fp8_e5m2;
  const double span = (e5m2 ? 57344.0 : 448.0) * 1.2;  // a sixth of the codes saturate
  Latents w;
  w.x.assign(kLayers, {}), w.stored.assign(kLayers, {});
  for (uint32_t l = 0; l < kLayers; ++l) {
    if (fp8) w.scale.push_back(float(2 / span * rng.uniform(0.5, 2)));
    for (int32_t n : lens) {
      std::vector<double> x(size_t(n) * kWidth), st(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        unsigned char b[4];
        store_elem(c.dtype, b, 0, fp8 ? w.scale[l] * rng.uniform(-span, span) : rng.uniform(-1, 1));
        x[i] = load_elem(c.dtype, b, 0);
        st[i] = fp8 ? pkv_ref_fp8_decode(pkv_ref_fp8_encode(float(x[i]), w.scale[l], e5m2), e5m2) *
                          w.scale[l]
                    : x[i];
      }
      w.x[l].push_back(std::move(x)), w.stored[l].push_back(std::move(st));
    }
  }
  return w;
}

// The run's state: each sequence's block table and tokens in the pool (0: not there).
struct Run {
  MlaCase c;
  pkv::PoolShape sh;
  Latents w;
  std::vector<std::vector<int32_t>> table;
  std::vector<int32_t> len;
  std::vector<int32_t> free;
};

int32_t take(Run &r) {
  const int32_t b = r.free.back();
  r.free.pop_back();
  return b;
}

// One step: sequences (seq, new tokens); every layer planned and run, outputs and the pool checked.
size_t run_step(pkv::Backend &be, Run &r, const std::vector<std::pair<int32_t, int32_t>> &work,
                Rng &rng, const std::string &label) {
  const DType t = r.c.dtype;
  const uint32_t bs = r.c.block_size;
  std::vector<int32_t> query_start{0}, ctx, indptr{0}, indices, positions;
  std::vector<int64_t> slots;
  for (const auto &[s, n] : work) {
    while (r.table[s].size() * bs < size_t(r.len[s] + n)) r.table[s].push_back(take(r));
    for (int32_t p = r.len[s]; p < r.len[s] + n; ++p) {
      positions.push_back(p);
      slots.push_back(int64_t(r.table[s][p / bs]) * bs + p % bs);
    }
    r.len[s] += n;
    query_start.push_back(query_start.back() + n), ctx.push_back(r.len[s]);
    indices.insert(indices.end(), r.table[s].begin(), r.table[s].end());
    indptr.push_back(int32_t(indices.size()));
  }
  pkv_batch_view v;
  std::memset(&v, 0, sizeof v);
  v.struct_size = sizeof v, v.num_seqs = uint32_t(work.size()),
  v.num_tokens = uint32_t(query_start.back());
  v.block_size = bs, v.num_kv_groups = 1;
  for (const auto &[s, n] : work) v.max_query_len = std::max(v.max_query_len, uint32_t(n));
  v.max_context_len = uint32_t(*std::max_element(ctx.begin(), ctx.end()));
  v.query_start = query_start.data(), v.context_lens = ctx.data(), v.positions = positions.data();
  v.block_indptr = indptr.data(), v.block_indices = indices.data(), v.slot_mapping = slots.data();
  be.plan(v);
  const size_t tokens = v.num_tokens, eb = pkv::cuda::dtype_bytes(t);
  size_t bad = 0;
  for (uint32_t l = 0; l < kLayers; ++l) {
    std::vector<unsigned char> qr(tokens * kHeads * kWidth * eb), kr(tokens * kWidth * eb);
    std::vector<double> q(tokens * kHeads * kWidth), ref(tokens * kHeads * kRank);
    for (size_t i = 0; i < q.size(); ++i) {
      store_elem(t, qr.data(), i, rng.uniform(-2, 2));
      q[i] = load_elem(t, qr.data(), i);
    }
    for (size_t i = 0; i < work.size(); ++i) {
      const int32_t s = work[i].first, n = work[i].second, src = s;
      for (int32_t j = 0; j < n; ++j)
        for (uint32_t e = 0; e < kWidth; ++e)
          store_elem(t, kr.data(), size_t(query_start[i] + j) * kWidth + e,
                     r.w.x[l][src][size_t(ctx[i] - n + j) * kWidth + e]);
      pkv_ref_mla_attention(q.data() + size_t(query_start[i]) * kHeads * kWidth,
                            r.w.stored[l][src].data(),
                            ref.data() + size_t(query_start[i]) * kHeads * kRank, uint32_t(n),
                            uint32_t(ctx[i]), kHeads, kRank, kRope, double(kScale));
    }
    DevBuf dq(qr.size()), dk(kr.size()), dout(ref.size() * eb);
    dq.upload(qr.data(), qr.size()), dk.upload(kr.data(), kr.size());
    const float *ks = r.w.scale.empty() ? nullptr : &r.w.scale[l];
    pkv::AttentionCall call{};
    call.layer = call.slot = l, call.scale = kScale, call.k_scale = ks;
    call.q = dq.as<void>(), call.k = dk.as<void>(), call.out = dout.as<void>();
    call.kv_heads = 1, call.head_dim = kWidth, call.v_dim = kRank, call.mla = true;
    call.write = true, call.dense_stride = true;
    call.k_offset = l * r.sh.bytes.layer, call.block_stride = r.sh.bytes.block;
    be.attention(call);
    check_cuda(cudaDeviceSynchronize(), "sync");
    std::vector<unsigned char> raw(ref.size() * eb);
    dout.download(raw.data(), raw.size());
    std::vector<double> got(ref.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(t, raw.data(), i);
    double atol, rtol;
    tolerances(t, &atol, &rtol);
    bad += pkv_ref_compare((label + " layer " + std::to_string(l)).c_str(), got.data(), ref.data(),
                           got.size(), atol, rtol);
  }
  return bad;
}

// Every latent of every sequence in the pool, at its slot, as stored.
size_t check_pool(const pkv::Backend &be, const Run &r, const std::string &label) {
  const size_t pb = pkv::cuda::dtype_bytes(r.c.kv_dtype), layer_bytes = r.sh.bytes.layer;
  std::vector<unsigned char> pool(kLayers * layer_bytes);
  check_cuda(cudaMemcpy(pool.data(), be.k_pool(), pool.size(), cudaMemcpyDeviceToHost), "download");
  const int e5m2 = r.c.kv_dtype == DType::fp8_e5m2;
  size_t bad = 0;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (size_t s = 0; s < r.len.size(); ++s)
      for (int32_t p = 0; p < r.len[s]; ++p) {
        const int64_t slot =
            int64_t(r.table[s][p / r.c.block_size]) * r.c.block_size + p % r.c.block_size;
        for (uint32_t e = 0; e < kWidth; ++e) {
          const size_t at = l * layer_bytes + (size_t(slot) * kWidth + e) * pb;
          const double got = r.w.scale.empty() ? load_elem(r.c.kv_dtype, pool.data() + at, 0)
                                               : pkv_ref_fp8_decode(pool[at], e5m2) * r.w.scale[l];
          bad += !(got == r.w.stored[l][s][size_t(p) * kWidth + e]);
        }
      }
  if (bad)
    fprintf(stderr, "%s: %zu latents in the pool differ from the stored values\n", label.c_str(),
            bad);
  return bad;
}

// K of `blocks` (every layer, [layers][n][block bytes]) from the pool on the device.
std::vector<unsigned char> pool_blocks(const pkv::Backend &be, const pkv::PoolShape &sh,
                                       const std::vector<int32_t> &blocks) {
  std::vector<unsigned char> out(kLayers * blocks.size() * sh.bytes.block);
  unsigned char *dst = out.data();
  for (uint32_t l = 0; l < kLayers; ++l)
    for (int32_t b : blocks) {
      const char *src =
          static_cast<const char *>(be.k_pool()) + l * sh.bytes.layer + size_t(b) * sh.bytes.block;
      check_cuda(cudaMemcpy(dst, src, sh.bytes.block, cudaMemcpyDeviceToHost), "download");
      dst += sh.bytes.block;
    }
  return out;
}

bool run_case(const MlaCase &c, uint64_t seed) {
  Rng rng(seed);
  const std::string name = std::string("MLA ") + dtype_name(c.dtype) + " cache " +
                           dtype_name(c.kv_dtype) + " bs=" + std::to_string(c.block_size);
  // seqs: A (prompt 29, then decodes), A2 forks A after step 1 (A's first 29 latents, its own
  // after), B is swapped out and in, C takes B's blocks while it is out.
  enum { A, A2, B, C };
  const uint32_t bs = c.block_size, blocks = 140 / bs + 8, host_blocks = 42 / bs + 2;
  Run r{c,
        {},
        make_latents(c, rng, {31, 31, 42, 21}),
        std::vector<std::vector<int32_t>>(4),
        {0, 0, 0, 0},
        {}};
  for (uint32_t l = 0; l < kLayers; ++l)
    for (auto *v : {&r.w.x[l], &r.w.stored[l]})
      std::copy((*v)[A].begin(), (*v)[A].begin() + 29 * kWidth, (*v)[A2].begin());
  for (int32_t i = 0; i < int32_t(blocks); ++i) r.free.push_back(i);
  for (size_t i = r.free.size(); i > 1; --i)
    std::swap(r.free[i - 1], r.free[rng.below(uint32_t(i))]);
  pkv::PoolShape &sh = r.sh;
  sh.num_layers = kLayers, sh.num_blocks = blocks, sh.block_size = bs, sh.kv_heads = 1;
  sh.head_dim = kWidth, sh.dtype_bytes = uint32_t(pkv::cuda::dtype_bytes(c.kv_dtype));
  sh.dtype = int32_t(c.dtype), sh.kv_dtype = int32_t(c.kv_dtype), sh.q_heads = kHeads;
  sh.bytes.block = uint64_t(bs) * kWidth * sh.dtype_bytes;
  sh.bytes.layer = sh.bytes.block * blocks, sh.bytes.pool = sh.bytes.layer * kLayers;
  sh.host_num_blocks = host_blocks;
  sh.host_bytes.layer = sh.bytes.block * host_blocks,
  sh.host_bytes.pool = sh.host_bytes.layer * kLayers;
  sh.tensors = 1, sh.kv_lora_rank = kRank, sh.model_layers = kLayers;
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, sh);
  size_t bad = !be->k_pool() || be->v_pool() || !be->host_k_pool() || be->host_v_pool();
  if (bad) fprintf(stderr, "%s: the pools are not K alone\n", name.c_str());

  bad += run_step(*be, r, {{A, 29}, {B, 40}}, rng, name + " step 1");
  // A forks: A2 keeps the partial last block, A gets a copy of it (CoW); B goes to the host tier.
  r.table[A2] = r.table[A], r.len[A2] = r.len[A];
  r.table[A].back() = take(r);
  std::vector<int32_t> src{r.table[A2].back()}, dst{r.table[A].back()}, kind{PKV_COPY_COW};
  const std::vector<unsigned char> b_before = pool_blocks(*be, sh, r.table[B]);
  for (size_t i = 0; i < r.table[B].size(); ++i)
    src.push_back(r.table[B][i]), dst.push_back(int32_t(host_blocks - 1 - i)),
        kind.push_back(PKV_COPY_SWAP_OUT);
  be->copy_blocks(src.data(), dst.data(), kind.data(), uint32_t(src.size()));
  be->wait_host_tier();  // the copies run without a wait: the host reads the tier after this
  const unsigned char *host = static_cast<const unsigned char *>(be->host_k_pool());
  for (uint32_t l = 0, at = 0; l < kLayers; ++l)
    for (size_t i = 0; i < r.table[B].size(); ++i, at += uint32_t(sh.bytes.block))
      bad += std::memcmp(host + l * sh.host_bytes.layer + (host_blocks - 1 - i) * sh.bytes.block,
                         b_before.data() + at, sh.bytes.block) != 0;
  const std::vector<int32_t> b_blocks = r.table[B];
  r.free.insert(r.free.end(), b_blocks.begin(), b_blocks.end());
  const int32_t b_len = std::exchange(r.len[B], 0);
  r.table[B].clear();
  bad += run_step(*be, r, {{A, 1}, {A2, 1}, {C, 20}}, rng, name + " step 2");
  // B comes back into other blocks.
  src.clear(), dst.clear(), kind.clear();
  for (size_t i = 0; i < b_blocks.size(); ++i) {
    r.table[B].push_back(take(r));
    src.push_back(int32_t(host_blocks - 1 - i)), dst.push_back(r.table[B].back()),
        kind.push_back(PKV_COPY_SWAP_IN);
  }
  r.len[B] = b_len;
  be->copy_blocks(src.data(), dst.data(), kind.data(), uint32_t(src.size()));
  bad += run_step(*be, r, {{B, 2}, {A, 1}, {C, 1}}, rng, name + " step 3");
  bad += check_pool(*be, r, name);
  // read_block: K of every layer, layer by layer.
  std::vector<unsigned char> payload(kLayers * sh.bytes.block);
  be->read_block(r.table[B][0], payload.data());
  if (payload != pool_blocks(*be, sh, {r.table[B][0]})) {
    fprintf(stderr, "%s: read_block's payload is not K of every layer\n", name.c_str());
    ++bad;
  }
  if (bad) fprintf(stderr, "FAIL %s\n", name.c_str());
  return bad == 0;
}

}  // namespace

int run_mla_backend_cases(uint64_t seed) {
  const MlaCase cases[] = {
      {DType::bf16, DType::bf16, 16},
      {DType::f16, DType::fp8_e4m3, 7},
      {DType::f32, DType::fp8_e5m2, 1},
  };
  int failures = 0;
  for (const MlaCase &c : cases) failures += !run_case(c, seed++);
  return failures;
}
