// The CUDA backend on a sparse-attention engine's pages (DESIGN.md §14), through the Backend
// interface: two MLA layers, each with an fp8 indexer, in pages of [latents][keys][scales] per
// layer. Two steps (prompts, then decodes and a chunk) run per layer indexer_write, indexer_topk
// (positions on layer 0, slots on layer 1), sparse attention over layer 0's top-k and dense MLA
// on layer 1; every top-k row is checked against indexer_ref (exact data: the same set, ties
// included), every output row against pkv_ref_sparse_mla / pkv_ref_mla_attention, and the pages'
// latents and keys byte for byte. Then a block size whose pages are not 16-byte multiples:
// indexer_write, indexer_topk and attention refuse it (PKV_ERR_UNSUPPORTED), the pages unchanged.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "backend/backend.h"
#include "cuda_backend_sparse.h"
#include "indexer_ref.h"
#include "kv_harness.h"
#include "status.h"

namespace {

using namespace kvtest;

constexpr uint32_t kLayers = 2, kHeads = 16, kRank = 64, kRope = 16, kWidth = kRank + kRope;
constexpr uint32_t kDim = 64, kIdxHeads = 4, kTopk = 24, kBlocks = 40;
constexpr float kScale = 0.15f;
const DType kT = DType::bf16;

struct Run {
  uint32_t bs;
  uint64_t layer_bytes, page;  // one layer's part of a page, the page
  std::vector<std::vector<int32_t>> table;
  std::vector<int32_t> len;
  // [layer][seq]: every position's latent (bf16 values) and indexer key (integers, max |x| 7).
  std::vector<std::vector<std::vector<double>>> lat, key;
  uint64_t k_off(uint32_t l) const { return l * layer_bytes; }
  uint64_t key_off(uint32_t l) const { return k_off(l) + uint64_t(bs) * kWidth * 2; }
  uint64_t scale_off(uint32_t l) const { return key_off(l) + uint64_t(bs) * kDim; }
};

Run make_run(uint32_t bs, const std::vector<int32_t> &total, Rng &rng) {
  Run r{bs, uint64_t(bs) * (kWidth * 2 + kDim + 4), 0, {}, {}, {}, {}};
  r.page = r.layer_bytes * kLayers;
  r.table.resize(total.size()), r.len.assign(total.size(), 0);
  std::vector<int32_t> ids(kBlocks);
  for (uint32_t i = 0; i < kBlocks; ++i) ids[i] = int32_t(i);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(uint32_t(i))]);
  size_t next = 0;
  for (size_t s = 0; s < total.size(); ++s)
    for (int32_t p = 0; p < total[s]; p += int32_t(bs)) r.table[s].push_back(ids[next++]);
  r.lat.assign(kLayers, {}), r.key.assign(kLayers, {});
  for (uint32_t l = 0; l < kLayers; ++l)
    for (int32_t n : total) {
      std::vector<double> x(size_t(n) * kWidth), k(size_t(n) * kDim);
      unsigned char b[2];
      for (double &v : x) store_elem(kT, b, 0, rng.uniform(-1, 1)), v = load_elem(kT, b, 0);
      for (int32_t p = 0; p < n; ++p) {
        for (uint32_t i = 0; i < kDim; ++i) k[size_t(p) * kDim + i] = int(rng.below(15)) - 7;
        k[size_t(p) * kDim + rng.below(kDim)] = 7;
      }
      r.lat[l].push_back(std::move(x)), r.key[l].push_back(std::move(k));
    }
  return r;
}

// A device copy of a host vector of doubles in the model's dtype, or of raw values.
struct DevRows : DevBuf {
  explicit DevRows(const std::vector<double> &v) : DevBuf(std::max<size_t>(v.size() * 2, 16)) {
    std::vector<unsigned char> raw(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) store_elem(kT, raw.data(), i, v[i]);
    if (!raw.empty()) upload(raw.data(), raw.size());
  }
};

// The step: its batch arrays (positions, slots, tables) for pkv_batch_view.
struct Step {
  std::vector<std::pair<int32_t, int32_t>> work;  // (seq, new tokens)
  std::vector<int32_t> query_start{0}, ctx, indptr{0}, indices, positions;
  std::vector<int64_t> slots;
  pkv_batch_view view(uint32_t bs) const {
    pkv_batch_view v;
    std::memset(&v, 0, sizeof v);
    v.struct_size = sizeof v, v.num_seqs = uint32_t(work.size());
    v.num_tokens = uint32_t(query_start.back()), v.block_size = bs, v.num_kv_groups = 1;
    for (const auto &w : work) v.max_query_len = std::max(v.max_query_len, uint32_t(w.second));
    v.max_context_len = uint32_t(*std::max_element(ctx.begin(), ctx.end()));
    v.query_start = query_start.data(), v.context_lens = ctx.data();
    v.positions = positions.data(), v.block_indptr = indptr.data();
    v.block_indices = indices.data(), v.slot_mapping = slots.data();
    return v;
  }
};

Step make_step(Run &r, const std::vector<std::pair<int32_t, int32_t>> &work) {
  Step st;
  st.work = work;
  for (const auto &[s, n] : work) {
    for (int32_t p = r.len[s]; p < r.len[s] + n; ++p) {
      st.positions.push_back(p);
      st.slots.push_back(int64_t(r.table[s][size_t(p) / r.bs]) * r.bs + p % int32_t(r.bs));
    }
    r.len[s] += n;
    st.query_start.push_back(st.query_start.back() + n), st.ctx.push_back(r.len[s]);
    st.indices.insert(st.indices.end(), r.table[s].begin(), r.table[s].end());
    st.indptr.push_back(int32_t(st.indices.size()));
  }
  return st;
}

pkv::IndexerCall indexer_call(const Run &r, uint32_t l) {
  pkv::IndexerCall c;
  c.layer = l, c.group = 0, c.dim = kDim, c.index_dtype = PKV_DTYPE_FP8_E4M3;
  c.heads = kIdxHeads, c.topk = kTopk;
  c.key_offset = r.key_off(l), c.scale_offset = r.scale_off(l), c.block_stride = r.page;
  return c;
}

pkv::AttentionCall attention_call(const Run &r, uint32_t l) {
  pkv::AttentionCall c{};
  c.layer = l, c.slot = l, c.group = 0, c.scale = kScale;  // slot: its place in the page
  c.kv_heads = 1, c.head_dim = kWidth, c.v_dim = kRank, c.mla = true, c.write = true;
  c.k_offset = r.k_off(l), c.v_offset = r.k_off(l), c.block_stride = r.page;
  c.v_in_k_pool = true;
  return c;
}

// The reference top-k of token (seq s, position pos) over layer l's stored keys.
std::vector<int32_t> ref_topk(const Run &r, uint32_t l, int32_t s, int32_t pos, const double *q,
                              const double *w) {
  std::vector<double> scores(static_cast<size_t>(pos + 1)), key(kDim);
  std::vector<float> x(kDim);
  std::vector<uint8_t> codes(kDim);
  for (int32_t p = 0; p <= pos; ++p) {
    for (uint32_t i = 0; i < kDim; ++i) x[i] = float(r.key[l][size_t(s)][size_t(p) * kDim + i]);
    float scale;
    pkv_ref_indexer_quantize_fp8(x.data(), kDim, 0, codes.data(), &scale);
    pkv_ref_indexer_key_fp8(codes.data(), scale, kDim, key.data());
    scores[size_t(p)] = pkv_ref_indexer_score(q, w, key.data(), kIdxHeads, kDim);
  }
  std::vector<int32_t> out(kTopk);
  pkv_ref_topk(scores.data(), uint32_t(pos + 1), kTopk, out.data());
  return out;
}

// Layer l of the planned step: the three calls, each output against the reference.
size_t run_layer(pkv::Backend &be, const Run &r, const Step &st, uint32_t l, Rng &rng,
                 const std::string &label) {
  const size_t tokens = st.positions.size();
  std::vector<double> keys, lats, iq(tokens * kIdxHeads * kDim), q(tokens * kHeads * kWidth);
  std::vector<float> w(tokens * kIdxHeads);
  for (size_t i = 0; i < st.work.size(); ++i)
    for (int32_t j = 0; j < st.work[i].second; ++j) {
      const size_t s = size_t(st.work[i].first), p = size_t(st.ctx[i] - st.work[i].second + j);
      keys.insert(keys.end(), &r.key[l][s][p * kDim], &r.key[l][s][(p + 1) * kDim]);
      lats.insert(lats.end(), &r.lat[l][s][p * kWidth], &r.lat[l][s][(p + 1) * kWidth]);
    }
  for (double &v : iq) v = int(rng.below(7)) - 3;
  for (float &v : w) v = float(int(rng.below(5)) - 1) * 0.25f;
  unsigned char b[2];
  for (double &v : q) store_elem(kT, b, 0, rng.uniform(-2, 2)), v = load_elem(kT, b, 0);
  DevRows dkeys(keys), dlat(lats), diq(iq), dq(q);
  DevBuf dw(w.size() * 4), dtop(tokens * kTopk * 4), dout(tokens * kHeads * kRank * 2);
  dw.upload(w.data(), w.size() * 4);
  pkv::IndexerCall ic = indexer_call(r, l);
  ic.k = dkeys.as<void>();
  be.indexer_write(ic);
  ic.q = diq.as<void>(), ic.weights = dw.as<float>(), ic.out = dtop.as<int32_t>();
  ic.slots = l == 1;
  be.indexer_topk(ic);
  pkv::AttentionCall ac = attention_call(r, l);
  ac.q = dq.as<void>(), ac.k = dlat.as<void>(), ac.out = dout.as<void>();
  if (l == 0) ac.indices = dtop.as<int32_t>(), ac.topk = kTopk;
  be.attention(ac);
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<int32_t> top(tokens * kTopk);
  dtop.download(top.data(), top.size() * 4);
  std::vector<unsigned char> raw(tokens * kHeads * kRank * 2);
  dout.download(raw.data(), raw.size());
  std::vector<double> got(tokens * kHeads * kRank), ref(got.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(kT, raw.data(), i);
  size_t bad = 0;
  for (size_t i = 0; i < st.work.size(); ++i) {
    const int32_t s = st.work[i].first, n = st.work[i].second, first = st.ctx[i] - n;
    for (int32_t j = 0; j < n; ++j) {
      const size_t t = size_t(st.query_start[i] + j);
      std::vector<double> wd(&w[t * kIdxHeads], &w[(t + 1) * kIdxHeads]);
      std::vector<int32_t> want =
          ref_topk(r, l, s, first + j, &iq[t * kIdxHeads * kDim], wd.data());
      if (l == 0)
        pkv_ref_sparse_mla(&q[t * kHeads * kWidth], r.lat[l][size_t(s)].data(), want.data(), kTopk,
                           uint32_t(first + j), kHeads, kRank, kRope, double(kScale),
                           &ref[t * kHeads * kRank]);
      else
        pkv_ref_positions_to_slots(want.data(), kTopk, r.table[size_t(s)].data(), r.bs,
                                   want.data());
      if (!std::equal(want.begin(), want.end(), &top[t * kTopk]) && bad++ < 5)
        fprintf(stderr, "%s layer %u: token %zu's top-k differs from the reference\n",
                label.c_str(), l, t);
    }
    if (l == 1)
      pkv_ref_mla_attention(&q[size_t(st.query_start[i]) * kHeads * kWidth],
                            r.lat[l][size_t(s)].data(),
                            &ref[size_t(st.query_start[i]) * kHeads * kRank], uint32_t(n),
                            uint32_t(st.ctx[i]), kHeads, kRank, kRope, double(kScale));
  }
  double atol, rtol;
  tolerances(kT, &atol, &rtol);
  return bad + pkv_ref_compare((label + " layer " + std::to_string(l)).c_str(), got.data(),
                               ref.data(), got.size(), atol, rtol);
}

// Every written latent and indexer key (codes and scale) in the pages, byte for byte.
size_t check_pages(const pkv::Backend &be, const Run &r, const std::string &label) {
  std::vector<unsigned char> pool(r.page * kBlocks);
  check_cuda(cudaMemcpy(pool.data(), be.k_pool(), pool.size(), cudaMemcpyDeviceToHost), "pages");
  size_t bad = 0;
  std::vector<float> x(kDim);
  std::vector<unsigned char> want(kWidth * 2 + kDim + 4);
  for (uint32_t l = 0; l < kLayers; ++l)
    for (size_t s = 0; s < r.len.size(); ++s)
      for (int32_t p = 0; p < r.len[s]; ++p) {
        const unsigned char *page = pool.data() + r.table[s][size_t(p) / r.bs] * r.page;
        const uint32_t off = uint32_t(p) % r.bs;
        for (uint32_t i = 0; i < kWidth; ++i)
          store_elem(kT, want.data(), i, r.lat[l][s][size_t(p) * kWidth + i]);
        for (uint32_t i = 0; i < kDim; ++i) x[i] = float(r.key[l][s][size_t(p) * kDim + i]);
        float scale;
        pkv_ref_indexer_quantize_fp8(x.data(), kDim, 0, &want[kWidth * 2], &scale);
        std::memcpy(&want[kWidth * 2 + kDim], &scale, 4);
        bad += std::memcmp(page + r.k_off(l) + off * kWidth * 2, want.data(), kWidth * 2) != 0;
        bad += std::memcmp(page + r.key_off(l) + off * kDim, &want[kWidth * 2], kDim) != 0;
        bad += std::memcmp(page + r.scale_off(l) + off * 4, &want[kWidth * 2 + kDim], 4) != 0;
      }
  if (bad) fprintf(stderr, "%s: %zu rows of the pages differ\n", label.c_str(), bad);
  return bad;
}

pkv::PoolShape pages_shape(const Run &r) {
  pkv::PoolShape sh{};
  sh.num_layers = 1, sh.num_blocks = kBlocks, sh.block_size = r.bs, sh.kv_heads = 1;
  sh.head_dim = kWidth, sh.dtype_bytes = 2, sh.dtype = int32_t(kT), sh.kv_dtype = int32_t(kT);
  sh.q_heads = kHeads, sh.tensors = 1, sh.paged = true, sh.model_layers = kLayers;
  sh.bytes.block = r.page, sh.bytes.layer = sh.bytes.pool = r.page * kBlocks;
  return sh;
}

// Block size 5: a layer's part of a page is 1140 bytes, not a multiple of 16. Every call of the
// step is refused as unsupported and leaves the pages as they were.
size_t refuses_unaligned_pages(uint64_t seed) {
  Rng rng(seed);
  Run r = make_run(5, {12}, rng);
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, pages_shape(r));
  check_cuda(cudaMemset(be->k_pool(), 0x5A, r.page * kBlocks), "memset");
  const Step st = make_step(r, {{0, 12}});
  be->plan(st.view(r.bs));
  DevBuf buf(size_t(12) * kHeads * kWidth * 4);
  size_t bad = 0;
  for (int call = 0; call < 3; ++call) {
    try {
      pkv::IndexerCall ic = indexer_call(r, 1);
      ic.k = ic.q = buf.as<void>(), ic.weights = buf.as<float>(), ic.out = buf.as<int32_t>();
      pkv::AttentionCall ac = attention_call(r, 1);
      ac.q = ac.k = buf.as<void>(), ac.out = buf.as<void>();
      if (call == 0) be->indexer_write(ic);
      if (call == 1) be->indexer_topk(ic);
      if (call == 2) be->attention(ac);
      fprintf(stderr, "sparse bs=5: call %d on unaligned pages was accepted\n", call);
      ++bad;
    } catch (const pkv::Error &e) {
      bad += e.status() != PKV_ERR_UNSUPPORTED;
    }
  }
  std::vector<unsigned char> pool(r.page * kBlocks);
  check_cuda(cudaMemcpy(pool.data(), be->k_pool(), pool.size(), cudaMemcpyDeviceToHost), "pages");
  bad += size_t(std::count_if(pool.begin(), pool.end(), [](unsigned char c) { return c != 0x5A; }));
  if (bad) fprintf(stderr, "sparse bs=5: unaligned pages not refused cleanly (%zu)\n", bad);
  return bad;
}

}  // namespace

int run_sparse_backend_cases(uint64_t seed) {
  int failures = 0;
  for (uint32_t bs : {16u, 4u}) {
    Rng rng(seed + bs);
    Run r = make_run(bs, {70, 40, 9}, rng);
    std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, pages_shape(r));
    const std::string name = "sparse bs=" + std::to_string(bs);
    size_t bad = 0;
    // Prompts (over top-k), then a chunk of 10 after a prefix of 60 and a decode.
    const std::vector<std::pair<int32_t, int32_t>> steps[2] = {{{0, 60}, {1, 39}, {2, 9}},
                                                               {{0, 10}, {1, 1}}};
    for (int i = 0; i < 2; ++i) {
      const Step st = make_step(r, steps[i]);
      be->plan(st.view(bs));
      for (uint32_t l = 0; l < kLayers; ++l)
        bad += run_layer(*be, r, st, l, rng, name + " step " + std::to_string(i + 1));
    }
    bad += check_pages(*be, r, name);
    bad ? fprintf(stderr, "FAIL %s\n", name.c_str()) : printf("ok %s\n", name.c_str());
    failures += bad != 0;
  }
  failures += refuses_unaligned_pages(seed) != 0;
  return failures;
}
