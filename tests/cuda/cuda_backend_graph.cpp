// The CUDA backend's graph steps (Backend::plan_graph, pkv_batch_plan_graph) in a whole decode
// loop: two layers in two KV groups (layer 0 full attention, layer 1 a window of 16 whose group
// gives back the blocks before it, -1 in its tables), bf16. Three prompts are prefilled eagerly;
// then every decode step is planned for a bucket of 4 sequences; the first is captured in a CUDA
// graph (both layers' write_kv and attention), and every later step only plans and replays it:
// the sequences change (one joins after an eager prefill between replays, one leaves and its
// blocks go to the others), lengths grow across block boundaries, the window's blocks are given
// back. A second loop, bucket 1 with a graph of its own, decodes past 256 keys after its capture
// (a split decode). Steps run in bursts of three without a host wait (the inputs go up from
// pinned memory on the stream), then the last step's outputs are checked against the fp64
// reference over each
// sequence's whole history, which also checks every earlier step's K/V writes. Under deferred
// streams (SIMT_STREAMS semantics, set here) work runs only when the host waits, so an upload
// read after its staging slot was rewritten, or a read without a wait, shows. The capture must
// record no forbidden call, and plan_graph plus the replay must neither wait nor allocate
// (the emulator's counters and the backend's own).
#include "cuda_backend_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attention_ref.h"
#include "backend/backend.h"
#include "kv_harness.h"
#if KVTEST_EMU
#include "simt_stream.h"
#else
// On a GPU (suite gpu): the backend's own counters only; streams run as the device runs them.
namespace simt {
enum class StreamMode { immediate, deferred };
inline StreamMode stream_mode() { return StreamMode::immediate; }
inline void set_stream_mode(StreamMode) {}
struct StreamCounters {
  uint64_t host_waits, mallocs, frees, host_allocs, host_frees, forbidden;
};
inline StreamCounters stream_counters() { return {}; }
inline void reset_stream_counters() {}
inline size_t graph_num_nodes(cudaGraph_t graph) {
  size_t n = 0;
  return cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess ? n : 0;
}
}  // namespace simt
#endif

namespace {

using namespace kvtest;

constexpr uint32_t kLayers = 2, kKvHeads = 2, kQHeads = 8, kHeadDim = 64, kBs = 16;
constexpr uint32_t kBlocks = 112, kMaxBlocks = 24, kBucket = 4, kWindow = 16;
constexpr size_t kRow = kKvHeads * kHeadDim, kQRow = kQHeads * kHeadDim;
constexpr DType kT = DType::bf16;

double bf16(double x) {
  unsigned char b[4];
  store_elem(kT, b, 0, x);
  return load_elem(kT, b, 0);
}

// A sequence's history: K and V rows of every layer, its blocks in each group (-1: given back).
struct Seq {
  std::vector<double> k[kLayers], v[kLayers];  // [pos][kv_heads][head_dim]
  std::vector<int32_t> blocks[2];
  int32_t len() const { return int32_t(k[0].size() / kRow); }
};

struct Loop {
  Rng rng{11};
  std::vector<int32_t> free;
  std::vector<Seq> seqs;  // active, in batch order
  Loop() {
    for (int32_t b = kBlocks - 1; b >= 0; --b) free.push_back(b);
  }
  // n new tokens of s: their K/V, blocks for them in both groups; group 1 gives back the
  // blocks wholly before the first new token's window.
  void grow(Seq &s, int32_t n) {
    for (uint32_t l = 0; l < kLayers; ++l)
      for (size_t i = 0; i < size_t(n) * kRow; ++i) {
        s.k[l].push_back(bf16(rng.uniform(-1, 1)));
        s.v[l].push_back(bf16(rng.uniform(-1, 1)));
      }
    const int32_t first_new = s.len() - n;
    const int32_t start = first_new >= int32_t(kWindow) ? first_new - int32_t(kWindow) + 1 : 0;
    for (size_t i = 0; i < s.blocks[1].size() && int32_t((i + 1) * kBs) <= start; ++i)
      if (s.blocks[1][i] >= 0) free.push_back(std::exchange(s.blocks[1][i], -1));
    for (std::vector<int32_t> &b : s.blocks)
      while (b.size() * kBs < size_t(s.len())) {
        b.push_back(free.back());
        free.pop_back();
      }
  }
  void drop(size_t i) {
    for (std::vector<int32_t> &b : seqs[i].blocks)
      for (int32_t x : b)
        if (x >= 0) free.push_back(x);
    seqs.erase(seqs.begin() + std::ptrdiff_t(i));
  }
};

// A step's pkv_batch_view over `seqs`, each computing its last query[i] tokens.
struct View {
  std::vector<int32_t> query_start{0}, ctx, indptr{0}, indices, tables;
  std::vector<int64_t> slots;  // [2][tokens]
  pkv_batch_view v{};
  View(const std::vector<Seq *> &seqs, const std::vector<int32_t> &query) {
    const size_t n = seqs.size();
    for (size_t i = 0; i < n; ++i) {
      query_start.push_back(query_start.back() + query[i]);
      ctx.push_back(seqs[i]->len());
      indptr.push_back(indptr.back() + int32_t(seqs[i]->blocks[0].size()));
      indices.insert(indices.end(), seqs[i]->blocks[0].begin(), seqs[i]->blocks[0].end());
    }
    for (uint32_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < n; ++i) {
        std::vector<int32_t> row = seqs[i]->blocks[g];
        row.resize(kMaxBlocks, -1);
        tables.insert(tables.end(), row.begin(), row.end());
      }
    for (uint32_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < n; ++i)
        for (int32_t p = ctx[i] - query[i]; p < ctx[i]; ++p)
          slots.push_back(int64_t(seqs[i]->blocks[g][size_t(p) / kBs]) * kBs + p % kBs);
    v.struct_size = sizeof v;
    v.num_seqs = uint32_t(n), v.num_tokens = uint32_t(query_start.back());
    v.max_blocks_per_seq = kMaxBlocks, v.block_size = kBs;
    v.max_query_len = uint32_t(*std::max_element(query.begin(), query.end()));
    v.max_context_len = uint32_t(*std::max_element(ctx.begin(), ctx.end()));
    v.query_start = query_start.data(), v.context_lens = ctx.data();
    v.block_indptr = indptr.data(), v.block_indices = indices.data();
    v.slot_mapping = slots.data(), v.num_kv_groups = 2;
    v.group_slot_mapping = slots.data(), v.group_block_tables = tables.data();
  }
};

// Fixed device inputs and outputs of a layer (bucket rows, or a prefill's), and pinned host
// staging for q, k and v of one step (a burst keeps one per step).
struct LayerIo {
  DevBuf q, k, v, out;
  explicit LayerIo(size_t rows)
      : q(rows * kQRow * 2), k(rows * kRow * 2), v(rows * kRow * 2), out(rows * kQRow * 2) {}
};

struct Inputs {
  PinnedBuf q, k, v;
  std::vector<double> qd;  // [tokens][q_heads][head_dim], for the reference
  explicit Inputs(size_t rows) : q(rows * kQRow * 2), k(rows * kRow * 2), v(rows * kRow * 2) {}
};

// Layer l's step inputs into pinned memory: random q, and each new token's K/V from its history.
void fill(Inputs &in, uint32_t l, const std::vector<Seq *> &seqs, const std::vector<int32_t> &q,
          Rng &rng) {
  size_t row = 0;
  in.qd.clear();
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int32_t p = seqs[i]->len() - q[i]; p < seqs[i]->len(); ++p, ++row) {
      for (size_t e = 0; e < kQRow; ++e) {
        store_elem(kT, in.q.host(), row * kQRow + e, rng.uniform(-2, 2));
        in.qd.push_back(load_elem(kT, in.q.host(), row * kQRow + e));
      }
      for (size_t e = 0; e < kRow; ++e) {
        store_elem(kT, in.k.host(), row * kRow + e, seqs[i]->k[l][size_t(p) * kRow + e]);
        store_elem(kT, in.v.host(), row * kRow + e, seqs[i]->v[l][size_t(p) * kRow + e]);
      }
    }
}

void upload(const Inputs &in, const LayerIo &io, size_t rows, cudaStream_t s) {
  check_cuda(
      cudaMemcpyAsync(io.q.as<void>(), in.q.host(), rows * kQRow * 2, cudaMemcpyHostToDevice, s),
      "q");
  check_cuda(
      cudaMemcpyAsync(io.k.as<void>(), in.k.host(), rows * kRow * 2, cudaMemcpyHostToDevice, s),
      "k");
  check_cuda(
      cudaMemcpyAsync(io.v.as<void>(), in.v.host(), rows * kRow * 2, cudaMemcpyHostToDevice, s),
      "v");
}

pkv::AttentionCall call_of(uint32_t l, const LayerIo &io) {
  pkv::AttentionCall c{};
  c.layer = l, c.slot = l, c.group = l, c.window = l ? kWindow : 0;
  c.scale = 1.f / std::sqrt(float(kHeadDim));
  c.q = io.q.as<void>(), c.k = io.k.as<void>(), c.v = io.v.as<void>(), c.out = io.out.as<void>();
  c.kv_heads = kKvHeads, c.head_dim = c.v_dim = kHeadDim, c.write = true;
  c.k_offset = c.v_offset = uint64_t(l) * kBlocks * kBs * kRow * 2;
  c.block_stride = kBs * kRow * 2, c.dense_stride = true;
  return c;
}

// Layer l's output rows against the reference; returns the mismatches.
size_t check(const LayerIo &io, uint32_t l, const std::vector<Seq *> &seqs,
             const std::vector<int32_t> &q, const std::vector<double> &qd,
             const std::string &what) {
  std::vector<unsigned char> raw(qd.size() * 2);
  io.out.download(raw.data(), raw.size());
  std::vector<double> got(qd.size()), ref(qd.size());
  for (size_t i = 0; i < got.size(); ++i) got[i] = load_elem(kT, raw.data(), i);
  size_t off = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    pkv_ref_attention_window(qd.data() + off, seqs[i]->k[l].data(), seqs[i]->v[l].data(),
                             ref.data() + off, uint32_t(q[i]), uint32_t(seqs[i]->len()), kQHeads,
                             kKvHeads, kHeadDim, 0.0, l ? kWindow : 0);
    off += size_t(q[i]) * kQRow;
  }
  double atol, rtol;
  tolerances(kT, &atol, &rtol);
  return pkv_ref_compare((what + " layer " + std::to_string(l)).c_str(), got.data(), ref.data(),
                         got.size(), atol, rtol);
}

std::vector<Seq *> ptrs(std::vector<Seq> &seqs) {
  std::vector<Seq *> out;
  for (Seq &s : seqs) out.push_back(&s);
  return out;
}

// An eager prefill of `fresh` (already grown): plan, both layers, wait, check.
size_t prefill(pkv::Backend &be, Loop &w, std::vector<Seq *> fresh, cudaStream_t s) {
  std::vector<int32_t> q;
  size_t rows = 0;
  for (Seq *x : fresh) q.push_back(x->len()), rows += size_t(x->len());
  const View view(fresh, q);
  be.plan(view.v);
  size_t bad = 0;
  for (uint32_t l = 0; l < kLayers; ++l) {
    LayerIo io(rows);
    Inputs in(rows);
    fill(in, l, fresh, q, w.rng);
    upload(in, io, rows, s);
    be.attention(call_of(l, io));
    check_cuda(cudaStreamSynchronize(s), "prefill");
    bad += check(io, l, fresh, q, in.qd, "prefill");
  }
  return bad;
}

// One decode loop of graph steps for `bucket`: `prompts` prefilled eagerly, then `steps` decode
// steps, a sequence of `join` tokens joining (eagerly prefilled) before step join_at and the
// second leaving before step leave_at (-1: never). The first step is captured; every later one
// plans and replays. Steps run in bursts of three without a wait; the last of each is checked.
struct LoopCase {
  uint32_t bucket;
  std::vector<int32_t> prompts;
  int steps, join_at, join, leave_at;
};

struct LoopCounts {
  size_t graph_nodes = 0, forbidden = 0, waits = 0, allocs = 0;
};

size_t decode_loop(pkv::Backend &be, const LoopCase &lc, cudaStream_t stream, LoopCounts *n) {
  Loop w;
  size_t bad = 0;
  for (int32_t len : lc.prompts) {
    w.seqs.emplace_back();
    w.grow(w.seqs.back(), len);
  }
  bad += prefill(be, w, ptrs(w.seqs), stream);
  LayerIo io[kLayers] = {LayerIo(lc.bucket), LayerIo(lc.bucket)};
  std::vector<std::unique_ptr<Inputs>> ins;  // a burst's: [step in burst * kLayers + layer]
  for (int i = 0; i < 3 * int(kLayers); ++i) ins.push_back(std::make_unique<Inputs>(lc.bucket));
  cudaGraphExec_t exec = nullptr;
  int burst = 0;
  for (int step = 0; step < lc.steps; ++step) {
    if (step == lc.join_at || step == lc.leave_at) {  // the sequences change between replays
      check_cuda(cudaStreamSynchronize(stream), "burst");
      burst = 0;
      if (step == lc.leave_at) w.drop(1);  // its blocks go to the others
      if (step == lc.join_at) {
        w.seqs.emplace_back();
        w.grow(w.seqs.back(), lc.join);
        bad += prefill(be, w, {&w.seqs.back()}, stream);
      }
    }
    for (Seq &x : w.seqs) w.grow(x, 1);
    const std::vector<Seq *> seqs = ptrs(w.seqs);
    const std::vector<int32_t> q(seqs.size(), 1);
    const View view(seqs, q);
    Inputs *in[kLayers];
    for (uint32_t l = 0; l < kLayers; ++l) {
      in[l] = ins[size_t(burst) * kLayers + l].get();
      fill(*in[l], l, seqs, q, w.rng);
      upload(*in[l], io[l], seqs.size(), stream);
    }
    simt::reset_stream_counters();
    be.plan_graph(view.v, lc.bucket);
    if (!exec) {  // capture the first decode step's layers
      check_cuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
      for (uint32_t l = 0; l < kLayers; ++l) be.attention(call_of(l, io[l]));
      cudaGraph_t graph = nullptr;
      check_cuda(cudaStreamEndCapture(stream, &graph), "end capture");
      n->graph_nodes = simt::graph_num_nodes(graph);
      check_cuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
      check_cuda(cudaGraphDestroy(graph), "graph");
    }
    check_cuda(cudaGraphLaunch(exec, stream), "replay");
    const simt::StreamCounters c = simt::stream_counters();
    n->forbidden += c.forbidden, n->waits += c.host_waits;
    n->allocs += c.mallocs + c.frees + c.host_allocs + c.host_frees;
    if (++burst == 3 || step + 1 == lc.steps || step + 1 == lc.join_at ||
        step + 1 == lc.leave_at) {  // the burst's end: wait, check its last step
      check_cuda(cudaStreamSynchronize(stream), "burst");
      burst = 0;
      for (uint32_t l = 0; l < kLayers; ++l)
        bad += check(io[l], l, seqs, q, in[l]->qd,
                     "bucket " + std::to_string(lc.bucket) + " step " + std::to_string(step));
    }
  }
  check_cuda(cudaGraphExecDestroy(exec), "exec");
  return bad;
}

}  // namespace

// Two loops on one backend: bucket 4 (three sequences, one joining, one leaving; padded
// replays), then bucket 1 (its own graph) over a sequence whose context passes 256 keys after
// the capture: its decode splits in two (the emulator's 4 SMs), which only a plan made for the
// engine's longest sequence, not the captured step's, covers.
int run_graph_backend_cases() {
  const simt::StreamMode mode = simt::stream_mode();
  simt::set_stream_mode(simt::StreamMode::deferred);
  pkv::PoolShape sh{};
  sh.num_layers = kLayers, sh.num_blocks = kBlocks, sh.block_size = kBs, sh.kv_heads = kKvHeads;
  sh.head_dim = kHeadDim, sh.dtype_bytes = 2, sh.dtype = int32_t(kT), sh.kv_dtype = int32_t(kT);
  sh.q_heads = kQHeads, sh.model_layers = kLayers;
  sh.bytes.block = kBs * kRow * 2, sh.bytes.layer = sh.bytes.block * kBlocks;
  sh.bytes.pool = sh.bytes.layer * kLayers;
  sh.max_num_seqs = kBucket, sh.max_num_batched_tokens = 512, sh.max_blocks_per_seq = kMaxBlocks;
  sh.num_kv_groups = 2;
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, sh);
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  be->set_stream(stream);
  const uint64_t waits0 = be->host_waits(), allocs0 = be->device_allocs();
  const LoopCase cases[] = {{kBucket, {40, 17, 70}, 12, 5, 29, 9}, {1, {250}, 9, -1, 0, -1}};
  size_t bad = 0;
  for (const LoopCase &lc : cases) {
    LoopCounts n;
    bad += decode_loop(*be, lc, stream, &n);
    if (n.graph_nodes < 2 * kLayers || n.forbidden || n.waits || n.allocs) {
      fprintf(stderr,
              "FAIL graph steps of bucket %u: %zu graph nodes, %zu forbidden calls in capture, "
              "%zu host waits and %zu allocations in plan_graph + replay\n",
              lc.bucket, n.graph_nodes, n.forbidden, n.waits, n.allocs);
      ++bad;
    }
  }
  if (be->host_waits() != waits0 || be->device_allocs() != allocs0) {
    fprintf(stderr, "FAIL graph steps: the backend counted %llu waits and %llu allocations\n",
            (unsigned long long)(be->host_waits() - waits0),
            (unsigned long long)(be->device_allocs() - allocs0));
    ++bad;
  }
  be.reset();
  check_cuda(cudaStreamDestroy(stream), "stream");
  simt::set_stream_mode(mode);
  if (bad) fprintf(stderr, "FAIL graph decode loops: %zu mismatches\n", bad);
  return bad ? 1 : 0;
}
