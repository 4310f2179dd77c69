/*
 * bench_step_gpu.c - a decode step of a whole model on a CUDA engine, as a serving engine runs
 * it: Llama-3-8B's attention (32 layers, 32 q / 8 kv heads of 128, bf16, block size 16) over
 * sequences of CTX tokens, batches of 1 .. 64, eager and replayed from a CUDA graph. Per step:
 *   host us   the CPU side: pkv_batch_begin, pkv_attention for every layer, pkv_batch_end, timed
 *             on the host without waiting for the GPU (a step that waits inside shows it here);
 *   GPU ms    events on the engine's stream around the same calls;
 *   waits, allocs  pkv's own counts (pkv_stats.num_host_waits, num_device_allocs) per step;
 *   launches per layer, syncs per step: one eager step captured on the engine's stream in
 *             cudaStreamCaptureModeGlobal, which refuses what a CUDA graph cannot hold (a stream
 *             or device sync, a cudaMalloc or cudaFree, a host-blocking copy): a capture that
 *             holds had 0 of them, and its graph's kernel nodes are pkv's launches (counted by
 *             CUDA, not by hand); one that fails says which call broke it;
 *   graph     steps planned for graphs (pkv_batch_plan_graph, bucket = the batch's sequences),
 *             their attention calls captured once and replayed each step (cudaGraphLaunch) as
 *             the contexts grow: host us and GPU ms, and eager GPU ms / graph GPU ms.
 * bench_attention_gpu's pkv_attention timings are per call; this is the step they add up to.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <pkv/pkv.h>

#include "bench_attention_gpu.h"
#include "bench_step_gpu.h"
#include "bench_util.h"

enum { LAYERS = 32, Q_HEADS = 32, KV_HEADS = 8, HEAD_DIM = 128, BLOCK = 16, CTX = 2048 };
enum { MAX_SEQS = 64, STEPS = 9, REPLAYS = 9 };

typedef struct step_run {
  pkv_engine *e;
  uint64_t ids[MAX_SEQS];
  uint32_t seqs;
  void *q, *k, *v, *out;
} step_run;

static void close_step_run(step_run *r) {
  pkv_engine_destroy(r->e);
  cudaFree(r->q), cudaFree(r->k), cudaFree(r->v), cudaFree(r->out);
}

/* The engine, seqs prompts of CTX tokens (computed: one batch with no attention), a random pool
 * and q/k/v/out of one token per sequence; 0 or -1. */
static int open_step_run(step_run *r, uint32_t seqs) {
  memset(r, 0, sizeof *r);
  r->seqs = seqs;
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS;
  p.head_dim = HEAD_DIM, p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CUDA, p.device_id = 0;
  p.block_size = BLOCK, p.enable_prefix_caching = 0, p.max_num_seqs = MAX_SEQS;
  p.max_model_len = CTX + 2 * (STEPS + REPLAYS + 4); /* graph plans split decodes for it */
  p.num_blocks = seqs * (p.max_model_len / BLOCK + 2) + 1;
  pkv_status st = pkv_engine_create(&p, &r->e);
  if (st == PKV_OK) st = pkv_engine_set_stream(r->e, bench_gpu_stream());
  uint64_t state = 11;
  int32_t *tokens = malloc(sizeof(int32_t) * CTX);
  for (uint32_t s = 0; st == PKV_OK && s < seqs; s++) {
    for (uint32_t i = 0; i < CTX; i++) tokens[i] = bench_token(&state);
    st = pkv_allocate(r->e, tokens, CTX, NULL, &r->ids[s], NULL);
  }
  free(tokens);
  pkv_batch *b = NULL;
  if (st == PKV_OK) st = pkv_batch_begin(r->e, r->ids, NULL, seqs, &b);
  if (st == PKV_OK) st = pkv_batch_end(b);
  if (st != PKV_OK) return bench_fail(r->e, "the step bench's engine", st);
  struct pkv_pool_info pool = {.struct_size = sizeof pool};
  if ((st = pkv_pool_info(r->e, &pool)) != PKV_OK) return bench_fail(r->e, "pkv_pool_info", st);
  const size_t qb = (size_t)seqs * Q_HEADS * HEAD_DIM * 2,
               kb = (size_t)seqs * KV_HEADS * HEAD_DIM * 2;
  cudaError_t err;
  if ((err = cudaMalloc(&r->q, qb)) || (err = cudaMalloc(&r->out, qb)) ||
      (err = cudaMalloc(&r->k, kb)) || (err = cudaMalloc(&r->v, kb)))
    return bench_gpu_cuda_fail(err, "cudaMalloc of q/k/v/out");
  return bench_gpu_fill(pool.k_base, pool.bytes_per_pool, PKV_DTYPE_BF16, &state) ||
                 bench_gpu_fill(pool.v_base, pool.bytes_per_pool, PKV_DTYPE_BF16, &state) ||
                 bench_gpu_fill(r->q, qb, PKV_DTYPE_BF16, &state) ||
                 bench_gpu_fill(r->k, kb, PKV_DTYPE_BF16, &state) ||
                 bench_gpu_fill(r->v, kb, PKV_DTYPE_BF16, &state)
             ? -1
             : 0;
}

/* A token appended to every sequence and the step's batch begun; the failing call's name. */
static pkv_status begin_step(step_run *r, pkv_batch **b, const char **what) {
  const int32_t token = 5;
  pkv_status st = PKV_OK;
  *what = "pkv_append";
  for (uint32_t s = 0; st == PKV_OK && s < r->seqs; s++)
    st = pkv_append(r->e, r->ids[s], &token, 1);
  *b = NULL;
  if (st == PKV_OK) *what = "pkv_batch_begin", st = pkv_batch_begin(r->e, r->ids, NULL, r->seqs, b);
  return st;
}

/* pkv_attention for every layer, then pkv_batch_end; the batch aborted on a failure. */
static pkv_status attend_and_end(step_run *r, pkv_batch *b, const char **what) {
  pkv_status st = PKV_OK;
  for (uint32_t l = 0; st == PKV_OK && l < LAYERS; l++)
    *what = "pkv_attention", st = pkv_attention(b, l, r->q, r->k, r->v, r->out);
  if (st == PKV_OK)
    *what = "pkv_batch_end", st = pkv_batch_end(b);
  else
    pkv_batch_abort(b);
  return st;
}

/* One eager decode step. */
static pkv_status run_step(step_run *r, const char **what) {
  pkv_batch *b = NULL;
  const pkv_status st = begin_step(r, &b, what);
  return st != PKV_OK ? st : attend_and_end(r, b, what);
}

static pkv_stats stats_of(pkv_engine *e) {
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  pkv_engine_stats(e, &st);
  return st;
}

/* A step's median host time (us) and GPU time (ms). */
typedef struct step_times {
  double host_us, gpu_ms;
} step_times;

/* Eager steps: median host us and GPU ms, pkv's waits and allocations per step (the first step, a
 * warm-up, left out). */
static int eager_steps(step_run *r, step_times *t, double *waits, double *allocs) {
  double host[STEPS], gpu[STEPS];
  pkv_stats s0 = stats_of(r->e);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  int rc = 0;
  for (int i = 0; i <= STEPS && rc == 0; i++) {
    const char *what = "";
    if (i == 1) s0 = stats_of(r->e);
    cudaEventRecord(e0, bench_gpu_stream());
    const double t0 = bench_now_ns();
    const pkv_status st = run_step(r, &what);
    const double t1 = bench_now_ns();
    cudaEventRecord(e1, bench_gpu_stream());
    float ms = 0.f;
    cudaError_t err = cudaEventSynchronize(e1);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, e0, e1);
    if (st != PKV_OK)
      rc = bench_fail(r->e, what, st);
    else if (err != cudaSuccess)
      rc = bench_gpu_cuda_fail(err, "timing a step");
    else if (i > 0)
      host[i - 1] = (t1 - t0) * 1e-3, gpu[i - 1] = ms;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  const pkv_stats s1 = stats_of(r->e);
  *waits = (double)(s1.num_host_waits - s0.num_host_waits) / STEPS;
  *allocs = (double)(s1.num_device_allocs - s0.num_device_allocs) / STEPS;
  t->host_us = rc ? 0 : bench_median(host, STEPS);
  t->gpu_ms = rc ? 0 : bench_median(gpu, STEPS);
  return rc;
}

/* Kernel nodes of a captured graph. */
static size_t kernel_nodes(cudaGraph_t g) {
  size_t n = 0, kernels = 0;
  if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess || n == 0) return 0;
  cudaGraphNode_t *nodes = malloc(sizeof *nodes * n);
  if (nodes && cudaGraphGetNodes(g, nodes, &n) == cudaSuccess)
    for (size_t i = 0; i < n; i++) {
      enum cudaGraphNodeType t;
      if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess)
        kernels += t == cudaGraphNodeTypeKernel;
    }
  free(nodes);
  return kernels;
}

/* One eager step captured in global mode: prints launches per layer and syncs per step (0 when
 * the capture held; else the call that broke it). The graph is not run. */
static void capture_eager_step(step_run *r) {
  cudaGraph_t g = NULL;
  const char *what = "";
  const cudaError_t begun = cudaStreamBeginCapture(bench_gpu_stream(), cudaStreamCaptureModeGlobal);
  const pkv_status st = begun == cudaSuccess ? run_step(r, &what) : PKV_OK;
  const cudaError_t err =
      begun == cudaSuccess ? cudaStreamEndCapture(bench_gpu_stream(), &g) : begun;
  cudaGetLastError(); /* a refused call left its error behind */
  if (st == PKV_OK && err == cudaSuccess)
    printf(" %8.2f %6d", (double)kernel_nodes(g) / LAYERS, 0);
  else
    printf(" %8s %6s (capture broken by %s: %s)", "?", ">=1",
           st != PKV_OK ? what : "cudaStreamEndCapture",
           st != PKV_OK ? pkv_engine_last_error(r->e) : cudaGetErrorString(err));
  if (g) cudaGraphDestroy(g);
}

/* Steps planned for graphs: the first captured (its attention calls) and replayed, then REPLAYS
 * more, each planned and replayed; medians of the latter. 0, or -1 (what failed printed). */
static int graph_steps(step_run *r, step_times *t) {
  double host[REPLAYS], gpu[REPLAYS];
  cudaGraph_t g = NULL;
  cudaGraphExec_t exec = NULL;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  const char *what = "";
  pkv_status st = PKV_OK;
  cudaError_t err = cudaSuccess;
  int i = 0;
  for (; i <= REPLAYS && st == PKV_OK && err == cudaSuccess; i++) {
    pkv_batch *b = NULL;
    cudaEventRecord(e0, bench_gpu_stream());
    const double t0 = bench_now_ns();
    st = begin_step(r, &b, &what);
    if (st == PKV_OK && (st = pkv_batch_plan_graph(b, r->seqs)) != PKV_OK) {
      what = "pkv_batch_plan_graph";
      pkv_batch_abort(b);
    }
    if (st == PKV_OK && i == 0) { /* the capture: attention calls only, the batch ended after */
      err = cudaStreamBeginCapture(bench_gpu_stream(), cudaStreamCaptureModeGlobal);
      for (uint32_t l = 0; err == cudaSuccess && st == PKV_OK && l < LAYERS; l++)
        what = "pkv_attention", st = pkv_attention(b, l, r->q, r->k, r->v, r->out);
      if (err == cudaSuccess) err = cudaStreamEndCapture(bench_gpu_stream(), &g);
      if (err == cudaSuccess && st == PKV_OK) err = cudaGraphInstantiate(&exec, g, 0);
      if (st != PKV_OK || err != cudaSuccess) pkv_batch_abort(b), b = NULL;
    }
    if (st == PKV_OK && err == cudaSuccess) err = cudaGraphLaunch(exec, bench_gpu_stream());
    if (st == PKV_OK && err == cudaSuccess) what = "pkv_batch_end", st = pkv_batch_end(b);
    const double t1 = bench_now_ns();
    cudaEventRecord(e1, bench_gpu_stream());
    float ms = 0.f;
    if (err == cudaSuccess && (err = cudaEventSynchronize(e1)) == cudaSuccess)
      err = cudaEventElapsedTime(&ms, e0, e1);
    if (i > 0) host[i - 1] = (t1 - t0) * 1e-3, gpu[i - 1] = ms;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  if (exec) cudaGraphExecDestroy(exec);
  if (g) cudaGraphDestroy(g);
  if (st != PKV_OK || err != cudaSuccess) {
    printf(" (graph: %s: %s)", st != PKV_OK ? what : "CUDA",
           st != PKV_OK ? pkv_engine_last_error(r->e) : cudaGetErrorString(err));
    cudaGetLastError();
    return -1;
  }
  t->host_us = bench_median(host, REPLAYS);
  t->gpu_ms = bench_median(gpu, REPLAYS);
  return 0;
}

int bench_step_gpu_table(int quick) {
  printf("\ndecode step: %d layers of %d q / %d kv heads x %d, bf16, block %d, context %d+; host "
         "us = the CPU side of a step (no wait); waits, allocs: pkv_stats per step; launch/L, "
         "syncs: an eager step captured (global mode); graph: steps planned with "
         "pkv_batch_plan_graph and replayed\n",
         LAYERS, Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK, CTX);
  printf("%5s %9s %9s %6s %6s %9s %9s %7s %8s %6s\n", "seqs", "host us", "GPU ms", "waits",
         "allocs", "graph us", "graph ms", "eager/g", "launch/L", "syncs");
  static const uint32_t all_seqs[] = {1, 8, 64};
  int rc = 0;
  for (int si = 0; si < 3; si++) {
    const uint32_t seqs = all_seqs[si];
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    const double pool = (double)seqs * (CTX + 64) * LAYERS * KV_HEADS * HEAD_DIM * 2 * 2;
    if (pool > 0.8 * (double)free_bytes || (quick && seqs > 8)) continue;
    step_run r;
    step_times eager, graph;
    double waits = 0, allocs = 0;
    if (open_step_run(&r, seqs) || eager_steps(&r, &eager, &waits, &allocs)) {
      printf("%5u failed\n", seqs);
      close_step_run(&r);
      rc = 1;
      continue;
    }
    printf("%5u %9.1f %9.3f %6.2f %6.2f", seqs, eager.host_us, eager.gpu_ms, waits, allocs);
    if (graph_steps(&r, &graph) == 0)
      printf(" %9.1f %9.3f %6.2fx", graph.host_us, graph.gpu_ms, eager.gpu_ms / graph.gpu_ms);
    else
      printf(" %9s %9s %7s", "-", "-", ""), rc = 1;
    capture_eager_step(&r); /* last: a broken capture leaves the step's tokens uncomputed */
    printf("\n");
    fflush(stdout);
    close_step_run(&r);
    cudaGetLastError();
  }
  return rc;
}
