// The C ABI (pkv.h) over a CUDA engine in the emulator: a CUDA build's libpkv objects linked with
// the emulated kernels and runtime (tests/cuda/meson.build). Three sequences of different
// lengths, two layers: a prefill, 20 eager decode steps, then 20 decode steps replayed from one
// CUDA graph captured at the first of them (pkv_batch_plan_graph), every output against the fp64
// reference. Run with SIMT_STREAMS=deferred: the engine's stream work runs only when the host
// waits, so pkv reading results without a wait, or rewriting a staging buffer before its upload
// ran, shows here as a wrong output. Prints what the emulator counted between pkv_batch_begin and
// pkv_batch_end of each step (host waits, allocations, launches) beside pkv_stats; asserts the
// outputs, that no call was refused during the capture, that no step waited or allocated, and
// pkv_batch_plan_graph's refusals (queuing nothing).
#include <cuda_runtime_api.h>
#include <pkv/pkv.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "attention_ref.h"
#include "kv_harness.h"
#include "simt_stream.h"

namespace {

using kvtest::DType;

constexpr uint32_t kLayers = 2, kQHeads = 4, kKvHeads = 2, kHeadDim = 64, kBlock = 16;
constexpr uint32_t kSeqs = 3, kBucket = 4, kSteps = 20, kMaxRows = 64;
constexpr uint32_t kPrompt[kSeqs] = {5, 17, 33};
constexpr DType kDt = DType::f16;
constexpr size_t kQRow = kQHeads * kHeadDim, kKvRow = kKvHeads * kHeadDim;

int failures = 0;

bool ok(pkv_status s, const char *what) {
  if (s == PKV_OK) return true;
  fprintf(stderr, "FAIL %s: status %d: %s\n", what, int(s), pkv_last_error());
  failures++;
  return false;
}

struct Layer {
  kvtest::DevBuf q{kMaxRows * kQRow * 2}, k{kMaxRows * kKvRow * 2}, v{kMaxRows * kKvRow * 2};
  kvtest::DevBuf out{kMaxRows * kQRow * 2};
  std::vector<double> q_host;  // this step's rows, as uploaded (rounded to f16)
};

struct Run {
  pkv_engine *e = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t ids[kSeqs] = {};
  uint32_t ctx[kSeqs] = {};  // tokens computed after this step
  std::vector<double> k_hist[kSeqs][kLayers], v_hist[kSeqs][kLayers];  // [ctx][kv row]
  Layer layers[kLayers];
  cudaGraphExec_t graph = nullptr;
  kvtest::Rng rng{29};
};

// n values of f16 uploaded to dev; the rounded values appended to `kept`.
void upload_random(kvtest::Rng &rng, kvtest::DevBuf &dev, size_t n, std::vector<double> *kept) {
  std::vector<uint16_t> bits(n);
  for (size_t i = 0; i < n; ++i) {
    kvtest::store_elem(kDt, bits.data(), i, rng.uniform(-1.0, 1.0));
    kept->push_back(kvtest::load_elem(kDt, bits.data(), i));
  }
  dev.upload(bits.data(), n * 2);
}

// This step's q, k and v of `rows` tokens (counts[s] per sequence, in order), uploaded before
// the step begins; each sequence's keys and values join its history.
void make_inputs(Run &r, const uint32_t *counts, uint32_t rows) {
  for (uint32_t l = 0; l < kLayers; ++l) {
    Layer &L = r.layers[l];
    L.q_host.clear();
    upload_random(r.rng, L.q, rows * kQRow, &L.q_host);
    std::vector<double> k, v;
    upload_random(r.rng, L.k, rows * kKvRow, &k);
    upload_random(r.rng, L.v, rows * kKvRow, &v);
    for (uint32_t s = 0, row = 0; s < kSeqs; row += counts[s++]) {
      r.k_hist[s][l].insert(r.k_hist[s][l].end(), k.begin() + row * kKvRow,
                            k.begin() + (row + counts[s]) * kKvRow);
      r.v_hist[s][l].insert(r.v_hist[s][l].end(), v.begin() + row * kKvRow,
                            v.begin() + (row + counts[s]) * kKvRow);
    }
  }
}

// Every new token's output of every layer against pkv_ref_attention over its whole context.
void check_outputs(Run &r, const uint32_t *counts, uint32_t rows, const char *step) {
  double atol, rtol;
  kvtest::tolerances(kDt, &atol, &rtol);
  std::vector<uint16_t> bits(rows * kQRow);
  for (uint32_t l = 0; l < kLayers; ++l) {
    r.layers[l].out.download(bits.data(), bits.size() * 2);
    for (uint32_t s = 0, row = 0; s < kSeqs; row += counts[s++]) {
      std::vector<double> ref(counts[s] * kQRow);
      pkv_ref_attention(r.layers[l].q_host.data() + row * kQRow, r.k_hist[s][l].data(),
                        r.v_hist[s][l].data(), ref.data(), counts[s], r.ctx[s], kQHeads, kKvHeads,
                        kHeadDim, 0.0);
      double worst = 0.0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double got = kvtest::load_elem(kDt, bits.data(), row * kQRow + i);
        const double excess = std::fabs(got - ref[i]) - (atol + rtol * std::fabs(ref[i]));
        if (!(excess <= worst)) worst = std::isnan(excess) ? INFINITY : excess;
      }
      if (worst > 0) {
        fprintf(stderr, "FAIL %s layer %u sequence %u: off by %g beyond the tolerance\n", step, l,
                s, worst);
        failures++;
      }
    }
  }
}

// The layers' attention of batch b: eager, or (graph) planned for kBucket and replayed from the
// graph, captured on the first graph step.
void attend(Run &r, pkv_batch *b, bool graph) {
  if (graph && !ok(pkv_batch_plan_graph(b, kBucket), "pkv_batch_plan_graph")) return;
  const bool capture = graph && !r.graph;
  if (capture)
    kvtest::check_cuda(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeGlobal), "capture");
  for (uint32_t l = 0; l < kLayers && (!graph || capture); ++l) {
    Layer &L = r.layers[l];
    ok(pkv_attention(b, l, L.q.as<void>(), L.k.as<void>(), L.v.as<void>(), L.out.as<void>()),
       "pkv_attention");
  }
  if (capture) {
    cudaGraph_t g = nullptr;
    kvtest::check_cuda(cudaStreamEndCapture(r.stream, &g), "cudaStreamEndCapture");
    kvtest::check_cuda(cudaGraphInstantiate(&r.graph, g, 0), "cudaGraphInstantiate");
    kvtest::check_cuda(cudaGraphDestroy(g), "cudaGraphDestroy");
  }
  if (graph) kvtest::check_cuda(cudaGraphLaunch(r.graph, r.stream), "cudaGraphLaunch");
}

// pkv_batch_plan_graph's refusals on batch b (the prefill: its sequences compute several
// tokens; a decode: the buckets around its 3 sequences and max_num_seqs 4), each with its status
// and nothing queued; then, after the layers ran eagerly, the batch is planned already.
void expect(pkv_status got, pkv_status want, const char *what) {
  if (got == want) return;
  fprintf(stderr, "FAIL %s: status %d, not %d (%s)\n", what, int(got), int(want), pkv_last_error());
  failures++;
}

void refusals_before(pkv_batch *b, bool prefill) {
  const simt::StreamCounters c0 = simt::stream_counters();
  if (prefill) {
    expect(pkv_batch_plan_graph(b, kBucket), PKV_ERR_INVALID_ARGUMENT, "a prefill's graph plan");
  } else {
    expect(pkv_batch_plan_graph(b, 0), PKV_ERR_INVALID_ARGUMENT, "bucket 0");
    expect(pkv_batch_plan_graph(b, kSeqs - 1), PKV_ERR_INVALID_ARGUMENT, "a bucket too small");
    expect(pkv_batch_plan_graph(b, kBucket + 1), PKV_ERR_INVALID_ARGUMENT,
           "a bucket past max_num_seqs");
  }
  const simt::StreamCounters c = simt::stream_counters();
  if (c.async_copies != c0.async_copies || c.launches != c0.launches) {
    fprintf(stderr, "FAIL a refused pkv_batch_plan_graph queued work\n");
    failures++;
  }
}

pkv_stats stats(pkv_engine *e) {
  pkv_stats s{};
  s.struct_size = sizeof s;
  ok(pkv_engine_stats(e, &s), "pkv_engine_stats");
  return s;
}

// One step: inputs up, the batch with its counters taken around it, then the wait and the check.
void step(Run &r, const uint32_t *counts, bool graph, bool refuse, const char *name) {
  uint32_t rows = 0;
  for (uint32_t s = 0; s < kSeqs; ++s) rows += counts[s];
  make_inputs(r, counts, rows);
  const simt::StreamCounters c0 = simt::stream_counters();
  const pkv_stats p0 = stats(r.e);
  pkv_batch *b = nullptr;
  if (!ok(pkv_batch_begin(r.e, r.ids, counts, kSeqs, &b), "pkv_batch_begin")) return;
  if (refuse) refusals_before(b, counts[0] > 1);
  attend(r, b, graph);
  if (refuse && !graph)
    expect(pkv_batch_plan_graph(b, kBucket), PKV_ERR_STATE, "a graph plan after pkv_attention");
  ok(pkv_batch_end(b), "pkv_batch_end");
  const simt::StreamCounters c = simt::stream_counters();
  const pkv_stats p = stats(r.e);
  printf("%-12s rows %2u: host waits %llu (pkv_stats %llu), device allocs %llu + pinned %llu "
         "(pkv_stats %llu), frees %llu, launches %llu, graph launches %llu, refused %llu\n",
         name, rows, (unsigned long long)(c.host_waits - c0.host_waits),
         (unsigned long long)(p.num_host_waits - p0.num_host_waits),
         (unsigned long long)(c.mallocs - c0.mallocs),
         (unsigned long long)(c.host_allocs - c0.host_allocs),
         (unsigned long long)(p.num_device_allocs - p0.num_device_allocs),
         (unsigned long long)(c.frees + c.host_frees - c0.frees - c0.host_frees),
         (unsigned long long)(c.launches - c0.launches),
         (unsigned long long)(c.graph_launches - c0.graph_launches),
         (unsigned long long)(c.forbidden - c0.forbidden));
  if (graph && c.forbidden != c0.forbidden) {
    fprintf(stderr, "FAIL %s: %s refused during the capture\n", name, c.last_forbidden);
    failures++;
  }
  // No stall in a step: within the engine's bounds pkv neither waits nor allocates.
  if (c.host_waits != c0.host_waits || c.mallocs + c.host_allocs != c0.mallocs + c0.host_allocs ||
      c.frees + c.host_frees != c0.frees + c0.host_frees || p.num_host_waits != p0.num_host_waits ||
      p.num_device_allocs != p0.num_device_allocs) {
    fprintf(stderr, "FAIL %s: pkv waited or allocated between pkv_batch_begin and pkv_batch_end\n",
            name);
    failures++;
  }
  for (uint32_t s = 0; s < kSeqs; ++s) r.ctx[s] += counts[s];
  kvtest::check_cuda(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
  check_outputs(r, counts, rows, name);
}

pkv_engine *make_engine() {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = kLayers, p.num_q_heads = kQHeads, p.num_kv_heads = kKvHeads;
  p.head_dim = kHeadDim, p.dtype = PKV_DTYPE_F16, p.device = PKV_DEVICE_CUDA;
  p.block_size = kBlock, p.num_blocks = 32, p.enable_prefix_caching = 0;
  p.max_num_seqs = kBucket, p.max_num_batched_tokens = kMaxRows, p.max_model_len = 128;
  pkv_engine *e = nullptr;
  return ok(pkv_engine_create(&p, &e), "pkv_engine_create") ? e : nullptr;
}

}  // namespace

int main() {
  Run r;
  if (!(r.e = make_engine())) return 1;
  kvtest::check_cuda(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "stream");
  ok(pkv_engine_set_stream(r.e, r.stream), "pkv_engine_set_stream");
  int32_t tokens[64];
  for (int32_t i = 0; i < 64; ++i) tokens[i] = 1000 + i;
  for (uint32_t s = 0; s < kSeqs; ++s)
    ok(pkv_allocate(r.e, tokens + 7 * s, kPrompt[s], nullptr, &r.ids[s], nullptr), "pkv_allocate");
  printf("emulated CUDA engine, stream work %s; counted between pkv_batch_begin and "
         "pkv_batch_end:\n",
         simt::stream_mode() == simt::StreamMode::deferred ? "deferred" : "immediate");
  step(r, kPrompt, false, true, "prefill");
  const uint32_t ones[kSeqs] = {1, 1, 1};
  char name[32];
  for (uint32_t i = 0; i < 2 * kSteps && failures == 0; ++i) {
    const bool graph = i >= kSteps;
    for (uint32_t s = 0; s < kSeqs; ++s) {
      const int32_t t = int32_t(2000 + i);
      ok(pkv_append(r.e, r.ids[s], &t, 1), "pkv_append");
    }
    snprintf(name, sizeof name, "%s %u", graph ? "graph" : "decode", i % kSteps);
    step(r, ones, graph, i == 0, name);
  }
  if (r.graph) kvtest::check_cuda(cudaGraphExecDestroy(r.graph), "cudaGraphExecDestroy");
  pkv_engine_destroy(r.e);
  kvtest::check_cuda(cudaStreamDestroy(r.stream), "cudaStreamDestroy");
  printf("emu_engine_decode: %s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
