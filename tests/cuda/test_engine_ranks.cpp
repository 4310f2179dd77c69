// Many ranks on CUDA through the C ABI (DESIGN.md §10): an engine of every rank (ranks ALL,
// tp_size 2 x pp_size 2: four pools) on the GPUs there are (rank r on device r % count; one GPU
// holds all four as the fallback, and the emulator is one GPU), then a decider (ranks ONE, rank 0)
// exporting its plans to a pool engine (ranks POOL, rank 3) in the same process. Three sequences,
// two layers (one per stage), f16: a prefill, then decode steps, eager and (ALL) replayed from a
// CUDA graph each rank captured on its own stream at the first of them; every rank's output (its
// two q heads of four, its kv head of two) against the fp64 reference of the whole model. Built
// twice: emu_engine_ranks (libpkv's objects on the emulator, stream work deferred: a rank that
// reads or replays without its wait shows as a wrong output) and gpu_engine_ranks (libpkv on the
// device; exit 77 without one).
#include <cuda_runtime_api.h>
#include <pkv/pkv.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"

namespace {

using kvtest::DType;

constexpr uint32_t kLayers = 2, kQHeads = 4, kKvHeads = 2, kHeadDim = 64, kBlock = 16;
constexpr uint32_t kTp = 2, kPp = 2, kRanks = kTp * kPp, kSeqs = 3, kBucket = 4, kSteps = 6;
constexpr uint32_t kMaxRows = 64;
constexpr uint32_t kPrompt[kSeqs] = {5, 17, 33};
constexpr DType kDt = DType::f16;
constexpr size_t kQRow = kQHeads * kHeadDim, kKvRow = kKvHeads * kHeadDim;
// A rank's rows: its q heads and its kv head.
constexpr size_t kRankQ = kQRow / kTp, kRankKv = kKvRow / kTp;

int failures = 0;

bool ok(pkv_status s, const char *what) {
  if (s == PKV_OK) return true;
  fprintf(stderr, "FAIL %s: status %d: %s\n", what, int(s), pkv_last_error());
  failures++;
  return false;
}

// One rank's device buffers (on its device) and stream; the graph it captured.
struct RankBufs {
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<kvtest::DevBuf> q, k, v, out;
  cudaGraphExec_t graph = nullptr;
};

// The whole model's inputs of a step, per layer (rounded to f16), and each sequence's history.
struct Model {
  std::vector<double> q[kLayers], k[kLayers], v[kLayers];
  std::vector<double> k_hist[kSeqs][kLayers], v_hist[kSeqs][kLayers];
  uint32_t ctx[kSeqs] = {};
  kvtest::Rng rng{31};

  void make(const uint32_t *counts, uint32_t rows) {
    for (uint32_t l = 0; l < kLayers; ++l) {
      auto fill = [&](std::vector<double> &x, size_t n) {
        x.resize(n);
        uint16_t bits;
        for (double &e : x) {
          kvtest::store_elem(kDt, &bits, 0, rng.uniform(-1.0, 1.0));
          e = kvtest::load_elem(kDt, &bits, 0);
        }
      };
      fill(q[l], rows * kQRow), fill(k[l], rows * kKvRow), fill(v[l], rows * kKvRow);
      for (uint32_t s = 0, row = 0; s < kSeqs; row += counts[s++]) {
        k_hist[s][l].insert(k_hist[s][l].end(), k[l].begin() + row * kKvRow,
                            k[l].begin() + (row + counts[s]) * kKvRow);
        v_hist[s][l].insert(v_hist[s][l].end(), v[l].begin() + row * kKvRow,
                            v[l].begin() + (row + counts[s]) * kKvRow);
      }
    }
    for (uint32_t s = 0; s < kSeqs; ++s) ctx[s] += counts[s];
  }
};

// Rank (t, layer)'s slice of x ([rows][heads][dim], heads_per_rank of them from t's first) as
// f16 bits, uploaded to dev.
void upload_slice(const std::vector<double> &x, size_t row, size_t slice, uint32_t t, uint32_t rows,
                  kvtest::DevBuf &dev) {
  std::vector<uint16_t> bits(rows * slice);
  for (uint32_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < slice; ++i)
      kvtest::store_elem(kDt, bits.data(), r * slice + i, x[r * row + t * slice + i]);
  dev.upload(bits.data(), bits.size() * 2);
}

// Rank t's output of layer l against the reference's heads of rank t.
void check(const Model &m, const RankBufs &b, uint32_t t, uint32_t l, const uint32_t *counts,
           uint32_t rows, const char *what) {
  double atol, rtol;
  kvtest::tolerances(kDt, &atol, &rtol);
  std::vector<uint16_t> bits(rows * kRankQ);
  kvtest::check_cuda(cudaSetDevice(b.device), "cudaSetDevice");
  b.out->download(bits.data(), bits.size() * 2);
  for (uint32_t s = 0, row = 0; s < kSeqs; row += counts[s++]) {
    std::vector<double> ref(counts[s] * kQRow);
    pkv_ref_attention(m.q[l].data() + row * kQRow, m.k_hist[s][l].data(), m.v_hist[s][l].data(),
                      ref.data(), counts[s], m.ctx[s], kQHeads, kKvHeads, kHeadDim, 0.0);
    double worst = 0.0;
    for (uint32_t r = 0; r < counts[s]; ++r)
      for (size_t i = 0; i < kRankQ; ++i) {
        const double want = ref[r * kQRow + t * kRankQ + i];
        const double got = kvtest::load_elem(kDt, bits.data(), (row + r) * kRankQ + i);
        const double excess = std::fabs(got - want) - (atol + rtol * std::fabs(want));
        if (!(excess <= worst)) worst = std::isnan(excess) ? INFINITY : excess;
      }
    if (worst > 0) {
      fprintf(stderr, "FAIL %s: tp rank %u layer %u sequence %u off by %g beyond the tolerance\n",
              what, t, l, s, worst);
      failures++;
    }
  }
}

pkv_engine *make_engine(uint32_t ranks, uint32_t tp_rank, uint32_t pp_rank, const int32_t *devs) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = kLayers, p.num_q_heads = kQHeads, p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim, p.dtype = PKV_DTYPE_F16, p.device = PKV_DEVICE_CUDA;
  p.block_size = kBlock, p.num_blocks = 32, p.enable_prefix_caching = 0;
  p.max_num_seqs = kBucket, p.max_num_batched_tokens = kMaxRows, p.max_model_len = 128;
  p.tp_size = kTp, p.pp_size = kPp, p.ranks = ranks, p.tp_rank = tp_rank, p.pp_rank = pp_rank;
  p.rank_device_ids = devs;
  pkv_engine *e = nullptr;
  return ok(pkv_engine_create(&p, &e), "pkv_engine_create") ? e : nullptr;
}

void make_bufs(RankBufs &b, int device) {
  b.device = device;
  kvtest::check_cuda(cudaSetDevice(device), "cudaSetDevice");
  kvtest::check_cuda(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking), "stream");
  b.q = std::make_unique<kvtest::DevBuf>(kMaxRows * kRankQ * 2);
  b.k = std::make_unique<kvtest::DevBuf>(kMaxRows * kRankKv * 2);
  b.v = std::make_unique<kvtest::DevBuf>(kMaxRows * kRankKv * 2);
  b.out = std::make_unique<kvtest::DevBuf>(kMaxRows * kRankQ * 2);
}

void free_bufs(RankBufs &b) {
  kvtest::check_cuda(cudaSetDevice(b.device), "cudaSetDevice");
  if (b.graph) kvtest::check_cuda(cudaGraphExecDestroy(b.graph), "cudaGraphExecDestroy");
  b.q.reset(), b.k.reset(), b.v.reset(), b.out.reset();
  kvtest::check_cuda(cudaStreamDestroy(b.stream), "cudaStreamDestroy");
}

// Rank (t, layer l)'s inputs of this step, on its device.
void upload_rank(const Model &m, RankBufs &b, uint32_t t, uint32_t l, uint32_t rows) {
  kvtest::check_cuda(cudaSetDevice(b.device), "cudaSetDevice");
  upload_slice(m.q[l], kQRow, kRankQ, t, rows, *b.q);
  upload_slice(m.k[l], kKvRow, kRankKv, t, rows, *b.k);
  upload_slice(m.v[l], kKvRow, kRankKv, t, rows, *b.v);
}

// Three sequences of the prompts kPrompt on e.
void allocate(pkv_engine *e, uint64_t *ids) {
  int32_t tokens[64];
  for (int32_t i = 0; i < 64; ++i) tokens[i] = 1000 + i;
  for (uint32_t s = 0; s < kSeqs; ++s)
    ok(pkv_allocate(e, tokens + 7 * s, kPrompt[s], nullptr, &ids[s], nullptr), "pkv_allocate");
}

// Step `step`'s new tokens: the prompts (step 0), then one appended to each sequence; the whole
// model's inputs made for them. Returns the counts, *rows their sum.
const uint32_t *next_step(pkv_engine *e, const uint64_t *ids, uint32_t step, Model &m,
                          uint32_t *rows) {
  static const uint32_t ones[kSeqs] = {1, 1, 1};
  const uint32_t *counts = step == 0 ? kPrompt : ones;
  *rows = 0;
  for (uint32_t s = 0; s < kSeqs; ++s) *rows += counts[s];
  if (step > 0)
    for (uint32_t s = 0; s < kSeqs; ++s) {
      const int32_t t = int32_t(2000 + step);
      ok(pkv_append(e, ids[s], &t, 1), "pkv_append");
    }
  m.make(counts, *rows);
  return counts;
}

// The engine of every rank: each rank attends on its pool through its handle of the batch,
// eagerly or from the graph it captured on its stream.
void run_all(int num_devices) {
  int32_t devs[kRanks];
  for (uint32_t r = 0; r < kRanks; ++r) devs[r] = int32_t(r % uint32_t(num_devices));
  pkv_engine *e = make_engine(PKV_RANKS_ALL, 0, 0, devs);
  if (!e) return;
  RankBufs bufs[kRanks];
  for (uint32_t r = 0; r < kRanks; ++r) {
    make_bufs(bufs[r], devs[r]);
    ok(pkv_engine_set_rank_stream(e, r, bufs[r].stream), "pkv_engine_set_rank_stream");
    struct pkv_pool_info info {};
    info.struct_size = sizeof info;
    ok(pkv_rank_pool_info(e, r, &info), "pkv_rank_pool_info");
    if (info.device_id != devs[r] || info.first_layer != r / kTp || info.num_layers != 1) {
      fprintf(stderr, "FAIL rank %u: device %d, layers %u .. %u\n", r, info.device_id,
              info.first_layer, info.end_layer);
      failures++;
    }
  }
  Model m;
  uint64_t ids[kSeqs];
  allocate(e, ids);
  for (uint32_t step = 0; step <= 2 * kSteps && failures == 0; ++step) {
    const bool graph = step > kSteps;
    uint32_t rows = 0;
    const uint32_t *counts = next_step(e, ids, step, m, &rows);
    pkv_batch *b = nullptr;
    if (!ok(pkv_batch_begin(e, ids, counts, kSeqs, &b), "pkv_batch_begin")) return;
    for (uint32_t r = 0; r < kRanks; ++r) {
      const uint32_t t = r % kTp, l = r / kTp;  // one layer per stage
      RankBufs &rb = bufs[r];
      upload_rank(m, rb, t, l, rows);
      pkv_batch *h = nullptr;
      ok(pkv_batch_rank(b, r, &h), "pkv_batch_rank");
      if (graph && !ok(pkv_batch_plan_graph(h, kBucket), "pkv_batch_plan_graph")) continue;
      const bool capture = graph && !rb.graph;
      if (capture)
        kvtest::check_cuda(cudaStreamBeginCapture(rb.stream, cudaStreamCaptureModeGlobal),
                           "capture");
      if (!graph || capture)
        ok(pkv_attention(h, l, rb.q->as<void>(), rb.k->as<void>(), rb.v->as<void>(),
                         rb.out->as<void>()),
           "pkv_attention");
      if (capture) {
        cudaGraph_t g = nullptr;
        kvtest::check_cuda(cudaStreamEndCapture(rb.stream, &g), "cudaStreamEndCapture");
        kvtest::check_cuda(cudaGraphInstantiate(&rb.graph, g, 0), "cudaGraphInstantiate");
        kvtest::check_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
      }
      if (graph) kvtest::check_cuda(cudaGraphLaunch(rb.graph, rb.stream), "cudaGraphLaunch");
    }
    ok(pkv_batch_end(b), "pkv_batch_end");
    char what[32];
    snprintf(what, sizeof what, "all: %s %u", graph ? "graph" : "step", step);
    for (uint32_t r = 0; r < kRanks; ++r) {
      kvtest::check_cuda(cudaSetDevice(bufs[r].device), "cudaSetDevice");
      kvtest::check_cuda(cudaStreamSynchronize(bufs[r].stream), "cudaStreamSynchronize");
      check(m, bufs[r], r % kTp, r / kTp, counts, rows, what);
    }
  }
  pkv_engine_destroy(e);
  for (RankBufs &rb : bufs) free_bufs(rb);
}

// A decider (rank 0: stage 0's layer, tp rank 0's heads) exporting each step's plan to a pool
// engine of rank 3 (stage 1's layer, tp rank 1's heads), both in this process.
void run_plans(int num_devices) {
  pkv_engine *decider = make_engine(PKV_RANKS_ONE, 0, 0, nullptr);
  pkv_engine *pool = make_engine(PKV_RANKS_POOL, 1, 1, nullptr);
  if (!decider || !pool) return;
  (void)num_devices;  // both on device 0: the engines' device_id
  RankBufs d, p;
  make_bufs(d, 0), make_bufs(p, 0);
  ok(pkv_engine_set_stream(decider, d.stream), "pkv_engine_set_stream");
  ok(pkv_engine_set_stream(pool, p.stream), "pkv_engine_set_stream");
  Model m;
  uint64_t ids[kSeqs];
  allocate(decider, ids);
  std::vector<uint8_t> plan;
  for (uint32_t step = 0; step <= kSteps && failures == 0; ++step) {
    uint32_t rows = 0;
    const uint32_t *counts = next_step(decider, ids, step, m, &rows);
    pkv_batch *b = nullptr, *pb = nullptr;
    if (!ok(pkv_batch_begin(decider, ids, counts, kSeqs, &b), "pkv_batch_begin")) return;
    uint64_t len = 0;
    ok(pkv_batch_export_plan(b, nullptr, 0, &len), "pkv_batch_export_plan");
    plan.resize(len);
    ok(pkv_batch_export_plan(b, plan.data(), len, &len), "pkv_batch_export_plan");
    if (!ok(pkv_plan_import(pool, plan.data(), len, &pb), "pkv_plan_import")) return;
    upload_rank(m, d, 0, 0, rows);
    upload_rank(m, p, 1, 1, rows);
    ok(pkv_attention(b, 0, d.q->as<void>(), d.k->as<void>(), d.v->as<void>(), d.out->as<void>()),
       "pkv_attention (decider)");
    ok(pkv_attention(pb, 1, p.q->as<void>(), p.k->as<void>(), p.v->as<void>(), p.out->as<void>()),
       "pkv_attention (pool)");
    ok(pkv_batch_end(pb), "pkv_batch_end (pool)");
    ok(pkv_batch_end(b), "pkv_batch_end (decider)");
    kvtest::check_cuda(cudaStreamSynchronize(d.stream), "cudaStreamSynchronize");
    kvtest::check_cuda(cudaStreamSynchronize(p.stream), "cudaStreamSynchronize");
    char what[32];
    snprintf(what, sizeof what, "plans: step %u", step);
    check(m, d, 0, 0, counts, rows, what);
    check(m, p, 1, 1, counts, rows, what);
  }
  pkv_engine_destroy(pool);
  pkv_engine_destroy(decider);
  free_bufs(d), free_bufs(p);
}

}  // namespace

int main() {
  if (const int skip = kvtest::require_device()) return skip;
  int devices = 0;
  kvtest::check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  printf("engine_ranks: %u ranks (tp %u x pp %u) on %d device(s)\n", kRanks, kTp, kPp, devices);
  run_all(devices);
  run_plans(devices);
  printf("engine_ranks: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
