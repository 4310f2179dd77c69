// The CUDA backend on a paged pool of unequal layers (PoolShape.paged: one tensor of pages, a
// page holding every layer's K and V of one block at the offsets its AttentionCall names, pages
// page_bytes apart: DESIGN.md §12), run through the Backend interface. Two shapes in one step, as
// Gemma 4's: layer 0 has 2 kv heads of 256 and its own V, with sinks; layer 1 one kv head of 512
// (PKV_ATTENTION_MAX_HEAD_DIM_CUDA) whose V is its K, chunked (16) and soft-capped; layer 2 is
// SHARED on layer 1 (no write, its own sinks).
// Step 1 prefills two prompts, step 2 decodes one, continues the other across a chunk boundary
// and prefills a third. Every output row is checked against pkv_ref_attention_layer and every
// row write_kv left in the pages byte for byte (layer 2 writes none). A layer whose V is not as
// wide as its K is refused before it writes anything.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "backend/backend.h"
#include "cuda_backend_layers.h"
#include "kv_harness.h"
#include "status.h"

namespace {

using namespace kvtest;

constexpr uint32_t kQHeads = 8, kLayers = 3, kCached = 2, kBlocks = 24;

struct LayerDef {
  uint32_t kv_heads, head_dim;
  bool k_eq_v;
  uint32_t source, chunk;  // source: the cached layer whose K and V it reads
  float softcap;
  bool sinks;
};
constexpr LayerDef kDefs[kLayers] = {{2, 256, false, 0, 0, 0.f, true},
                                     {1, 512, true, 1, 16, 5.f, false},
                                     {1, 512, true, 1, 16, 0.f, true}};

size_t row_elems(const LayerDef &d) { return size_t(d.kv_heads) * d.head_dim; }

// The run: the pages' layout, every sequence's K (V) rows per cached layer in the model's dtype,
// each layer's sinks, the sequences' block tables and lengths.
struct Run {
  DType dtype;
  uint32_t bs;
  size_t eb, k_off[kCached], v_off[kCached], page;
  std::vector<std::vector<double>> k[kCached], v[kCached];  // [seq][pos][row]
  std::vector<float> sinks[kLayers];
  std::vector<std::vector<int32_t>> table;
  std::vector<int32_t> len;
  int32_t next_block = 0;
};

Run make_run(DType t, uint32_t bs, Rng &rng, const std::vector<int32_t> &totals) {
  Run r;
  r.dtype = t, r.bs = bs, r.eb = pkv::cuda::dtype_bytes(t), r.page = 0;
  for (uint32_t l = 0; l < kCached; ++l) {
    const size_t bytes = bs * row_elems(kDefs[l]) * r.eb;
    r.k_off[l] = r.page, r.page += bytes;
    r.v_off[l] = kDefs[l].k_eq_v ? r.k_off[l] : r.page;
    if (!kDefs[l].k_eq_v) r.page += bytes;
    for (int32_t n : totals) {
      std::vector<double> k(size_t(n) * row_elems(kDefs[l])), v(kDefs[l].k_eq_v ? 0 : k.size());
      unsigned char b[4];
      for (std::vector<double> *x : {&k, &v})
        for (double &e : *x) store_elem(t, b, 0, rng.uniform(-1, 1)), e = load_elem(t, b, 0);
      r.k[l].push_back(std::move(k)), r.v[l].push_back(std::move(v));
    }
  }
  for (uint32_t l = 0; l < kLayers; ++l)
    for (uint32_t h = 0; kDefs[l].sinks && h < kQHeads; ++h)
      r.sinks[l].push_back(float(rng.uniform(-1, 3)));
  r.table.resize(totals.size()), r.len.assign(totals.size(), 0);
  return r;
}

struct Step {
  std::vector<std::pair<int32_t, int32_t>> work;  // (seq, new tokens)
  std::vector<int32_t> query_start{0}, ctx, indptr{0}, indices, positions;
  std::vector<int64_t> slots;
  pkv_batch_view view(uint32_t block_size) const {
    pkv_batch_view v;
    std::memset(&v, 0, sizeof v);
    v.struct_size = sizeof v, v.num_seqs = uint32_t(work.size()), v.block_size = block_size;
    v.num_tokens = uint32_t(query_start.back()), v.num_kv_groups = 1;
    for (size_t i = 0; i < ctx.size(); ++i) {
      v.max_query_len = std::max(v.max_query_len, uint32_t(work[i].second));
      v.max_context_len = std::max(v.max_context_len, uint32_t(ctx[i]));
    }
    v.query_start = query_start.data(), v.context_lens = ctx.data();
    v.positions = positions.data(), v.block_indptr = indptr.data();
    v.block_indices = indices.data(), v.slot_mapping = slots.data();
    return v;
  }
};

Step make_step(Run &r, std::vector<std::pair<int32_t, int32_t>> work) {
  Step st;
  st.work = std::move(work);
  for (const auto &[s, n] : st.work) {
    while (r.table[s].size() * r.bs < size_t(r.len[s] + n)) r.table[s].push_back(r.next_block++);
    for (int32_t p = r.len[s]; p < r.len[s] + n; ++p) {
      st.positions.push_back(p);
      st.slots.push_back(int64_t(r.table[s][p / r.bs]) * r.bs + p % r.bs);
    }
    r.len[s] += n;
    st.query_start.push_back(st.query_start.back() + n), st.ctx.push_back(r.len[s]);
    st.indices.insert(st.indices.end(), r.table[s].begin(), r.table[s].end());
    st.indptr.push_back(int32_t(st.indices.size()));
  }
  return st;
}

// Layer l's inputs (q drawn, the new rows of its K and V from the run), its call, and the check
// of its output against the reference; the number of mismatches.
size_t run_layer(pkv::Backend &be, const Run &r, const Step &st, uint32_t l, Rng &rng,
                 const std::string &label) {
  const LayerDef &d = kDefs[l];
  const size_t tokens = size_t(st.query_start.back()), row = row_elems(d);
  const size_t q_row = size_t(kQHeads) * d.head_dim;
  std::vector<unsigned char> qr(tokens * q_row * r.eb), kr(tokens * row * r.eb), vr(kr.size());
  std::vector<double> q(tokens * q_row), ref(q.size()), got(q.size());
  for (size_t i = 0; i < q.size(); ++i)
    store_elem(r.dtype, qr.data(), i, rng.uniform(-2, 2)), q[i] = load_elem(r.dtype, qr.data(), i);
  for (size_t i = 0; i < st.work.size(); ++i)
    for (int32_t j = 0; j < st.work[i].second; ++j)
      for (size_t e = 0; e < row; ++e) {
        const size_t src = size_t(st.ctx[i] - st.work[i].second + j) * row + e;
        const size_t dst = size_t(st.query_start[i] + j) * row + e;
        store_elem(r.dtype, kr.data(), dst, r.k[d.source][st.work[i].first][src]);
        if (!d.k_eq_v) store_elem(r.dtype, vr.data(), dst, r.v[d.source][st.work[i].first][src]);
      }
  DevBuf dq(qr.size()), dk(kr.size()), dv(vr.size()), dout(qr.size());
  dq.upload(qr.data(), qr.size()), dk.upload(kr.data(), kr.size()), dv.upload(vr.data(), vr.size());
  pkv::AttentionCall call{};
  call.layer = l, call.scale = 1.f / std::sqrt(float(d.head_dim));
  call.q = dq.as<void>(), call.out = dout.as<void>();
  call.write = l == d.source;  // layer 2 is SHARED: k and v null
  call.k = call.write ? dk.as<void>() : nullptr;
  call.v = call.write && !d.k_eq_v ? dv.as<void>() : nullptr;
  call.kv_heads = d.kv_heads, call.head_dim = call.v_dim = d.head_dim;
  call.k_offset = r.k_off[d.source], call.v_offset = r.v_off[d.source];
  call.block_stride = r.page, call.v_in_k_pool = true;
  call.chunk = d.chunk, call.softcap = d.softcap;
  call.sinks = d.sinks ? r.sinks[l].data() : nullptr;
  be.attention(call);
  check_cuda(cudaDeviceSynchronize(), "sync");
  std::vector<unsigned char> raw(qr.size());
  dout.download(raw.data(), raw.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(r.dtype, raw.data(), i);
  const std::vector<double> sinks(r.sinks[l].begin(), r.sinks[l].end());
  const pkv_ref_layer ref_layer{kQHeads,    d.kv_heads,         d.head_dim,
                                d.head_dim, double(call.scale), 0,
                                d.chunk,    d.softcap,          d.sinks ? sinks.data() : nullptr};
  for (size_t i = 0; i < st.work.size(); ++i) {
    const int32_t s = st.work[i].first;
    const size_t off = size_t(st.query_start[i]) * q_row;
    pkv_ref_attention_layer(&ref_layer, q.data() + off, r.k[d.source][s].data(),
                            d.k_eq_v ? nullptr : r.v[d.source][s].data(), ref.data() + off,
                            uint32_t(st.work[i].second), uint32_t(st.ctx[i]));
  }
  double atol, rtol;
  tolerances(r.dtype, &atol, &rtol);
  return pkv_ref_compare((label + " layer " + std::to_string(l)).c_str(), got.data(), ref.data(),
                         got.size(), atol, rtol);
}

// Every row of every sequence so far, in its page at its layer's offsets, byte for byte.
size_t check_pages(const pkv::Backend &be, const Run &r, const std::string &label) {
  std::vector<unsigned char> pool(kBlocks * r.page), want(r.eb);
  check_cuda(cudaMemcpy(pool.data(), be.k_pool(), pool.size(), cudaMemcpyDeviceToHost), "download");
  size_t bad = 0;
  for (uint32_t l = 0; l < kCached; ++l)
    for (size_t s = 0; s < r.len.size(); ++s)
      for (int32_t p = 0; p < r.len[s]; ++p) {
        const size_t row = row_elems(kDefs[l]);
        const size_t at = size_t(r.table[s][p / r.bs]) * r.page + size_t(p % r.bs) * row * r.eb;
        for (size_t e = 0; e < row; ++e)
          for (int kv = 0; kv < (kDefs[l].k_eq_v ? 1 : 2); ++kv) {
            store_elem(r.dtype, want.data(), 0, (kv ? r.v : r.k)[l][s][size_t(p) * row + e]);
            const size_t off = (kv ? r.v_off : r.k_off)[l] + at + e * r.eb;
            bad += std::memcmp(&pool[off], want.data(), r.eb) != 0;
          }
      }
  if (bad) fprintf(stderr, "%s: %zu elements of the pages differ\n", label.c_str(), bad);
  return bad;
}

// A layer whose V is narrower than its K, on the planned step: refused (PKV_ERR_UNSUPPORTED)
// before write_kv, so the pages are unchanged (check_pages after it).
size_t refuses_v_dim(pkv::Backend &be, const Run &r, const std::string &label) {
  DevBuf buf(size_t(64) * kQHeads * 128 * r.eb);
  pkv::AttentionCall call{};
  call.scale = 0.125f, call.q = call.k = call.v = buf.as<void>(), call.out = buf.as<void>();
  call.write = true, call.kv_heads = 2, call.head_dim = 64, call.v_dim = 32;
  call.k_offset = r.k_off[0], call.v_offset = r.v_off[0], call.block_stride = r.page;
  call.v_in_k_pool = true;
  try {
    be.attention(call);
  } catch (const pkv::Error &e) {
    if (e.status() == PKV_ERR_UNSUPPORTED) return 0;
  }
  fprintf(stderr, "%s: v_dim 32 with head_dim 64 was not refused as unsupported\n", label.c_str());
  return 1;
}

bool run_case(DType t, uint32_t bs, uint64_t seed) {
  Rng rng(seed);
  Run r = make_run(t, bs, rng, {41, 33, 12});
  const std::string name = std::string("layers ") + dtype_name(t) + " bs=" + std::to_string(bs);
  pkv::PoolShape sh{};
  sh.num_layers = 1, sh.num_blocks = kBlocks, sh.block_size = bs, sh.kv_heads = 2;
  sh.head_dim = 128, sh.dtype_bytes = uint32_t(r.eb), sh.dtype = int32_t(t);
  sh.kv_dtype = int32_t(t), sh.q_heads = kQHeads, sh.tensors = 1, sh.paged = true;
  sh.model_layers = kLayers, sh.sinks = true;
  sh.bytes.block = r.page, sh.bytes.layer = sh.bytes.pool = r.page * kBlocks;
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, sh);
  size_t bad = 0;
  const std::vector<std::pair<int32_t, int32_t>> steps[2] = {{{0, 40}, {1, 23}},
                                                             {{0, 1}, {1, 10}, {2, 12}}};
  for (int i = 0; i < 2; ++i) {
    const Step st = make_step(r, steps[i]);
    const std::string label = name + " step " + std::to_string(i + 1);
    be->plan(st.view(bs));
    for (uint32_t l = 0; l < kLayers; ++l) bad += run_layer(*be, r, st, l, rng, label);
    if (i == 1) bad += refuses_v_dim(*be, r, label);
    bad += check_pages(*be, r, label);
  }
  if (bad) fprintf(stderr, "FAIL %s\n", name.c_str());
  return bad == 0;
}

}  // namespace

int run_layers_backend_cases(uint64_t seed) {
  int failures = !run_case(DType::f16, 16, seed);
  failures += !run_case(DType::f32, 7, seed + 1);
  return failures;
}
