// src/backend/cuda/cuda_backend.cpp (plan, then attention per layer) over its kernels, against
// the fp64 reference: the glue the engine drives, run through the Backend interface with the
// batch views pkv_batch_info describes. Four layers in two KV groups sharing the pool's two layer
// slots (group 0 full attention: layers 0 and 2; group 1 a window of 16: layers 1 and 3), each
// group with its own slot mapping and tables; fp8 pools with every layer's own K and V scales.
// Step 1 prefills three prompts; step 2 decodes one of them (over two splits), runs a chunk of
// another across the window's edge and a fresh prompt, while group 1 has given back the blocks
// before its windows (-1 in its tables) and step 2 writes other tokens into them. Every output
// row, and every value write_kv left in the pool, is checked. Then the MLA pool (the latents in
// K alone, copies and read_block of K, MLA attention): cuda_backend_mla.cpp; and the pages of
// unequal layers (two shapes in one step, K = V, a shared layer, chunk, soft-cap, sinks):
// cuda_backend_layers.cpp; a sparse-attention engine's pages (indexer keys beside the latents,
// the indexer's write and top-k, sparse and dense MLA, unaligned pages refused):
// cuda_backend_sparse.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "backend/backend.h"
#include "cuda_backend_graph.h"
#include "cuda_backend_layers.h"
#include "cuda_backend_state.h"
#include "cuda_backend_mla.h"
#include "cuda_backend_sparse.h"
#include "kv_harness.h"
#include "status.h"

namespace {

using namespace kvtest;

constexpr uint32_t kLayers = 4, kSlots = 2, kGroups = 2, kKvHeads = 2, kGroup = 4, kHeadDim = 64;
constexpr uint32_t kWindow[kGroups] = {0, 16};
constexpr uint32_t layer_group(uint32_t l) { return l % 2; }
constexpr uint32_t layer_slot(uint32_t l) { return l / 2; }

struct Case {
  DType dtype, kv_dtype;  // kv_dtype == dtype: no fp8
  uint32_t block_size, num_blocks;
};

bool is_fp8(const Case &c) { return pkv::cuda::is_fp8(c.kv_dtype); }

// The whole run's data: every sequence's K/V per layer (model dtype values, and what the pool
// holds of them: the same, or fp8 codes decoded times the layer's scales), per-layer scales.
struct World {
  Case c;
  std::vector<int32_t> total;                            // tokens per seq over both steps
  std::vector<std::vector<std::vector<double>>> kx, vx;  // [layer][seq][pos][kv_heads][head_dim]
  std::vector<std::vector<std::vector<double>>> ks, vs;  // stored values, same shape
  std::vector<float> k_scale, v_scale;                   // [layers][kv_heads]; fp8 only
};

double rounded(DType t, double x) {
  unsigned char b[4];
  store_elem(t, b, 0, x);
  return load_elem(t, b, 0);
}

World make_world(const Case &c, Rng &rng, std::vector<int32_t> total) {
  World w{c, std::move(total), {}, {}, {}, {}, {}, {}};
  const size_t row = kKvHeads * kHeadDim;
  const int e5m2 = c.kv_dtype == DType::fp8_e5m2;
  const double span = (e5m2 ? 57344.0 : 448.0) * 1.2;  // a sixth of the codes saturate
  for (uint32_t i = 0; is_fp8(c) && i < kLayers * kKvHeads; ++i) {
    w.k_scale.push_back(float(2 / span * rng.uniform(0.5, 2)));
    w.v_scale.push_back(float(2 / span * rng.uniform(0.5, 2)));
  }
  for (auto *all : {&w.kx, &w.vx, &w.ks, &w.vs}) all->assign(kLayers, {});
  for (uint32_t l = 0; l < kLayers; ++l) {
    for (int32_t n : w.total) {
      std::vector<double> kx(size_t(n) * row), vx(kx.size()), ks(kx.size()), vs(kx.size());
      for (size_t i = 0; i < kx.size(); ++i) {
        const size_t h = l * kKvHeads + i % row / kHeadDim;
        for (int kv = 0; kv < 2; ++kv) {
          const float sc = is_fp8(c) ? (kv ? w.v_scale : w.k_scale)[h] : 1.f;
          const double x =
              rounded(c.dtype, is_fp8(c) ? sc * rng.uniform(-span, span) : rng.uniform(-1, 1));
          (kv ? vx : kx)[i] = x;
          (kv ? vs : ks)[i] =
              is_fp8(c) ? pkv_ref_fp8_decode(pkv_ref_fp8_encode(float(x), sc, e5m2), e5m2) * sc : x;
        }
      }
      w.kx[l].push_back(std::move(kx)), w.vx[l].push_back(std::move(vx));
      w.ks[l].push_back(std::move(ks)), w.vs[l].push_back(std::move(vs));
    }
  }
  return w;
}

// One step: which tokens of which sequences, and each group's block of every block index
// (-1: given back). The pkv_batch_view is made from these vectors.
struct Step {
  std::vector<int32_t> seq;         // per seq of the batch: its index in World
  std::vector<int32_t> ctx, query;  // per seq: tokens after the step, new ones
  std::vector<std::vector<std::vector<int32_t>>> blocks;  // [group][seq][block index]
  std::vector<uint64_t> ids;
  std::vector<int32_t> query_start{0}, positions, context_lens, indptr{0}, indices, last_len,
      tables;
  std::vector<int32_t> group_tables;
  std::vector<int64_t> group_slots;  // [groups][tokens]
  uint32_t max_blocks = 0;

  pkv_batch_view view(uint32_t block_size) {
    const size_t n = ctx.size();
    for (size_t s = 0; s < n; ++s) {
      ids.push_back(uint64_t(seq[s]));
      query_start.push_back(query_start.back() + query[s]);
      context_lens.push_back(ctx[s]);
      const uint32_t nb = uint32_t(blocks[0][s].size());
      max_blocks = std::max(max_blocks, nb);
      indptr.push_back(indptr.back() + int32_t(nb));
      indices.insert(indices.end(), blocks[0][s].begin(), blocks[0][s].end());
      last_len.push_back(ctx[s] - int32_t((nb - 1) * block_size));
    }
    for (uint32_t g = 0; g < kGroups; ++g) {
      for (size_t s = 0; s < n; ++s) {
        std::vector<int32_t> row = blocks[g][s];
        row.resize(max_blocks, -1);
        group_tables.insert(group_tables.end(), row.begin(), row.end());
        for (int32_t p = ctx[s] - query[s]; p < ctx[s]; ++p) {
          if (g == 0) positions.push_back(p);
          group_slots.push_back(int64_t(blocks[g][s][p / block_size]) * block_size +
                                p % block_size);
        }
      }
    }
    tables.assign(group_tables.begin(), group_tables.begin() + n * max_blocks);
    pkv_batch_view v;
    std::memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    v.num_seqs = uint32_t(n);
    v.num_tokens = uint32_t(query_start.back());
    v.max_blocks_per_seq = max_blocks;
    v.max_query_len = uint32_t(*std::max_element(query.begin(), query.end()));
    v.max_context_len = uint32_t(*std::max_element(ctx.begin(), ctx.end()));
    v.block_size = block_size;
    v.seq_ids = ids.data(), v.query_start = query_start.data(), v.positions = positions.data();
    v.slot_mapping = group_slots.data(), v.context_lens = context_lens.data();
    v.block_indptr = indptr.data(), v.block_indices = indices.data();
    v.last_block_len = last_len.data(), v.block_tables = tables.data();
    v.num_kv_groups = kGroups;
    v.group_slot_mapping = group_slots.data(), v.group_block_tables = group_tables.data();
    return v;
  }
};

// Blocks for positions 0 .. ctx - 1 of the step's sequences in both groups: the ones they hold
// (held: [group][world seq]), new ones from `free`; group 1 first gives back (to `free`) the
// blocks wholly before the first new token's window, so new tokens may land in them.
void assign_blocks(const Case &c, Step &st, std::vector<std::vector<int32_t>> (&held)[kGroups],
                   std::vector<int32_t> &free) {
  st.blocks.assign(kGroups, std::vector<std::vector<int32_t>>(st.ctx.size()));
  for (uint32_t g = 0; g < kGroups; ++g) {
    for (size_t s = 0; s < st.ctx.size(); ++s) {
      std::vector<int32_t> &b = st.blocks[g][s];
      b = held[g][st.seq[s]];
      const int32_t first_new = st.ctx[s] - st.query[s];
      const int32_t start =
          kWindow[g] && first_new >= int32_t(kWindow[g]) ? first_new - int32_t(kWindow[g]) + 1 : 0;
      for (int32_t i = 0; i < int32_t(b.size()) && (i + 1) * int32_t(c.block_size) <= start; ++i)
        if (b[i] >= 0) free.push_back(std::exchange(b[i], -1));
    }
  }
  for (uint32_t g = 0; g < kGroups; ++g)
    for (size_t s = 0; s < st.ctx.size(); ++s) {
      while (st.blocks[g][s].size() * c.block_size < size_t(st.ctx[s])) {
        st.blocks[g][s].push_back(free.back());
        free.pop_back();
      }
      held[g][st.seq[s]] = st.blocks[g][s];
    }
}

template <class T> void upload(DevBuf &b, const std::vector<T> &v) {
  b.upload(v.data(), v.size() * sizeof(T));
}

// One layer's inputs on the device: q drawn here ([tokens][q_heads][head_dim], kept in `q` for
// the reference), the new tokens' k and v from the world, out.
struct LayerIo {
  DevBuf q, k, v, out;
  LayerIo(size_t q_bytes, size_t kv_bytes) : q(q_bytes), k(kv_bytes), v(kv_bytes), out(q_bytes) {}
};

std::unique_ptr<LayerIo> layer_inputs(const World &w, const Step &st, uint32_t l, Rng &rng,
                                      std::vector<double> *q) {
  const DType t = w.c.dtype;
  const size_t row = kKvHeads * kHeadDim, q_row = row * kGroup, eb = pkv::cuda::dtype_bytes(t);
  const size_t tokens = size_t(st.query_start.back());
  std::vector<unsigned char> qr(tokens * q_row * eb), kr(tokens * row * eb), vr(kr.size());
  for (size_t i = 0; i < tokens * q_row; ++i) {
    store_elem(t, qr.data(), i, rng.uniform(-2, 2));
    q->push_back(load_elem(t, qr.data(), i));
  }
  for (size_t s = 0; s < st.ctx.size(); ++s)
    for (int32_t i = 0; i < st.query[s]; ++i)
      for (size_t e = 0; e < row; ++e) {
        const size_t src = size_t(st.ctx[s] - st.query[s] + i) * row + e;
        const size_t dst = size_t(st.query_start[s] + i) * row + e;
        store_elem(t, kr.data(), dst, w.kx[l][st.seq[s]][src]);
        store_elem(t, vr.data(), dst, w.vx[l][st.seq[s]][src]);
      }
  auto io = std::make_unique<LayerIo>(qr.size(), kr.size());
  io->q.upload(qr.data(), qr.size()), io->k.upload(kr.data(), kr.size()),
      io->v.upload(vr.data(), vr.size());
  return io;
}

// Layer l's output rows against the reference over each sequence's stored K/V and its window.
size_t check_output(const World &w, const Step &st, uint32_t l, const LayerIo &io,
                    const std::vector<double> &q, const std::string &label) {
  const DType t = w.c.dtype;
  const uint32_t q_heads = kKvHeads * kGroup;
  const size_t q_row = size_t(q_heads) * kHeadDim;
  std::vector<unsigned char> raw(q.size() * pkv::cuda::dtype_bytes(t));
  io.out.download(raw.data(), raw.size());
  std::vector<double> got(q.size()), ref(q.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(t, raw.data(), i);
  for (size_t s = 0; s < st.ctx.size(); ++s) {
    const size_t off = size_t(st.query_start[s]) * q_row;
    pkv_ref_attention_window(q.data() + off, w.ks[l][st.seq[s]].data(), w.vs[l][st.seq[s]].data(),
                             ref.data() + off, uint32_t(st.query[s]), uint32_t(st.ctx[s]), q_heads,
                             kKvHeads, kHeadDim, 0.0, kWindow[layer_group(l)]);
  }
  double atol, rtol;
  tolerances(t, &atol, &rtol);
  return pkv_ref_compare((label + " layer " + std::to_string(l)).c_str(), got.data(), ref.data(),
                         got.size(), atol, rtol);
}

// The step's new tokens in the pool: each layer's in its group's slots of its layer slot, as
// the stored values (fp8: the codes decoded times the layer's scales).
size_t check_pool(const pkv::Backend &be, const World &w, const Step &st,
                  const std::string &label) {
  const Case &c = w.c;
  const size_t row = kKvHeads * kHeadDim, pb = pkv::cuda::dtype_bytes(c.kv_dtype);
  const size_t layer_bytes = size_t(c.num_blocks) * c.block_size * row * pb;
  std::vector<unsigned char> pool[2] = {std::vector<unsigned char>(kSlots * layer_bytes),
                                        std::vector<unsigned char>(kSlots * layer_bytes)};
  check_cuda(cudaMemcpy(pool[0].data(), be.k_pool(), pool[0].size(), cudaMemcpyDeviceToHost),
             "download");
  check_cuda(cudaMemcpy(pool[1].data(), be.v_pool(), pool[1].size(), cudaMemcpyDeviceToHost),
             "download");
  const int e5m2 = c.kv_dtype == DType::fp8_e5m2;
  size_t bad = 0;
  for (uint32_t l = 0; l < kLayers; ++l)
    for (size_t s = 0; s < st.ctx.size(); ++s)
      for (int32_t p = st.ctx[s] - st.query[s]; p < st.ctx[s]; ++p) {
        const int64_t slot =
            int64_t(st.blocks[layer_group(l)][s][p / c.block_size]) * c.block_size +
            p % c.block_size;
        for (size_t e = 0; e < row; ++e)
          for (int kv = 0; kv < 2; ++kv) {
            const size_t at = layer_slot(l) * layer_bytes + (size_t(slot) * row + e) * pb;
            const double want = (kv ? w.vs : w.ks)[l][st.seq[s]][size_t(p) * row + e];
            const float scale =
                is_fp8(c) ? (kv ? w.v_scale : w.k_scale)[l * kKvHeads + e / kHeadDim] : 1.f;
            const double got = is_fp8(c) ? pkv_ref_fp8_decode(pool[kv][at], e5m2) * scale
                                         : load_elem(c.kv_dtype, pool[kv].data() + at, 0);
            bad += !(got == want);
          }
      }
  if (bad)
    fprintf(stderr, "%s: %zu pool elements differ from the stored values\n", label.c_str(), bad);
  return bad;
}

// Plans the step and runs every layer (one AttentionCall each: its slot, group, window and
// scales); returns the mismatches of the outputs and of the pool.
size_t run_step(pkv::Backend &be, const World &w, Step &st, Rng &rng, const std::string &label) {
  be.plan(st.view(w.c.block_size));
  std::vector<std::unique_ptr<LayerIo>> io;
  std::vector<std::vector<double>> q(kLayers);
  for (uint32_t l = 0; l < kLayers; ++l) {
    io.push_back(layer_inputs(w, st, l, rng, &q[l]));
    const float *ks = is_fp8(w.c) ? &w.k_scale[l * kKvHeads] : nullptr;
    const float *vs = is_fp8(w.c) ? &w.v_scale[l * kKvHeads] : nullptr;
    pkv::AttentionCall call{};
    call.layer = l, call.slot = layer_slot(l), call.group = layer_group(l);
    call.window = kWindow[layer_group(l)], call.scale = 1.f / std::sqrt(float(kHeadDim));
    call.k_scale = ks, call.v_scale = vs;
    call.q = io[l]->q.as<void>(), call.k = io[l]->k.as<void>(), call.v = io[l]->v.as<void>();
    call.out = io[l]->out.as<void>();
    // Equal layers, the dense layout: slot l / 2 of each pool, blocks back to back.
    call.kv_heads = kKvHeads, call.head_dim = call.v_dim = kHeadDim, call.write = true;
    const uint64_t block_bytes =
        uint64_t(w.c.block_size) * kKvHeads * kHeadDim * pkv::cuda::dtype_bytes(w.c.kv_dtype);
    call.k_offset = call.v_offset = layer_slot(l) * block_bytes * w.c.num_blocks;
    call.block_stride = block_bytes, call.dense_stride = true;
    be.attention(call);
  }
  check_cuda(cudaDeviceSynchronize(), "sync");
  size_t bad = check_pool(be, w, st, label);
  for (uint32_t l = 0; l < kLayers; ++l) bad += check_output(w, st, l, *io[l], q[l], label);
  return bad;
}

bool run_case(const Case &c, uint64_t seed) {
  Rng rng(seed);
  const std::string name = std::string(dtype_name(c.dtype)) + " cache " + dtype_name(c.kv_dtype) +
                           " bs=" + std::to_string(c.block_size);
  // seqs: A decodes over two splits (3 sequences of 2 kv heads want 2 on the emulator's 4 SMs),
  // B a chunk across the window's edge, C sits out step 2, D comes in step 2.
  const World w = make_world(c, rng, {301, 90, 39, 12});
  const size_t row = kKvHeads * kHeadDim, pb = pkv::cuda::dtype_bytes(c.kv_dtype);
  pkv::PoolShape shape{};
  shape.num_layers = kSlots, shape.num_blocks = c.num_blocks, shape.block_size = c.block_size;
  shape.kv_heads = kKvHeads, shape.head_dim = kHeadDim, shape.dtype_bytes = uint32_t(pb);
  shape.dtype = int32_t(c.dtype), shape.kv_dtype = int32_t(c.kv_dtype),
  shape.q_heads = kKvHeads * kGroup, shape.model_layers = kLayers;
  shape.bytes.block = c.block_size * row * pb;
  shape.bytes.layer = shape.bytes.block * c.num_blocks;
  shape.bytes.pool = shape.bytes.layer * kSlots;
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, shape);
  std::vector<int32_t> free(c.num_blocks);
  for (uint32_t i = 0; i < c.num_blocks; ++i) free[i] = int32_t(i);
  for (size_t i = free.size(); i > 1; --i) std::swap(free[i - 1], free[rng.below(uint32_t(i))]);
  std::vector<std::vector<int32_t>> held[kGroups];
  for (auto &h : held) h.resize(w.total.size());
  Step s1, s2;
  s1.seq = {0, 1, 2}, s1.ctx = {300, 70, 39}, s1.query = {300, 70, 39};
  assign_blocks(c, s1, held, free);
  s2.seq = {0, 1, 3}, s2.ctx = {301, 90, 12}, s2.query = {1, 20, 12};
  assign_blocks(c, s2, held, free);
  const size_t bad =
      run_step(*be, w, s1, rng, name + " step 1") + run_step(*be, w, s2, rng, name + " step 2");
  if (bad) fprintf(stderr, "FAIL %s\n", name.c_str());
  return bad == 0;
}

}  // namespace

int main() {
  if (int skip = require_device()) return skip;
  const Case cases[] = {
      {DType::bf16, DType::fp8_e4m3, 16, 160},
      {DType::f16, DType::fp8_e5m2, 7, 340},
      {DType::f32, DType::f32, 16, 160},
  };
  int failures = 0;
  uint64_t seed = 1;
  try {
    for (const Case &c : cases) failures += !run_case(c, seed++);
    failures += run_mla_backend_cases(seed);
    failures += run_layers_backend_cases(seed + 3);
    failures += run_state_backend_cases();
    failures += run_sparse_backend_cases(seed + 5);
    failures += run_graph_backend_cases();
  } catch (const pkv::Error &e) {
    fprintf(stderr, "FAIL: the backend threw %s: %s\n", pkv::status_string(e.status()), e.what());
    return 1;
  }
  printf("cuda_backend: %d of %zu cases passed (3 of them MLA, 2 of unequal layers, 1 of state "
         "slots, 3 of sparse attention's pages, 1 decode loop of graph steps)\n",
         int(std::size(cases)) + 10 - failures, std::size(cases) + 10);
  return failures ? 1 : 0;
}
