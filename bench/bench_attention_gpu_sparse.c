/*
 * bench_attention_gpu_sparse.c - bench_attention_gpu's sparse MLA table (issue 29): DeepSeek
 * V3.2's layer on a CUDA engine (128 q heads over a bf16 latent of 512 + 64, an fp8 indexer of
 * 64 heads x 128 with one fp32 scale per token, top-k 2048, block size 64) at 32k, 64k and 128k
 * contexts, 1 and 16 sequences of one new token each. Each row times, as medians of cudaEvents
 * on the engine's stream with the L2 flushed before each call:
 *   dense   pkv_attention: reads every latent of the context;
 *   topk    pkv_indexer_write + pkv_indexer_topk: reads every indexer key;
 *   attn    pkv_sparse_mla_attention over 2048 positions spread over the context;
 *   sparse  the model's decode step: write, top-k, then sparse attention on the top-k's positions.
 * GB/s = the bytes each must read (latents of 1152 B, indexer keys of 132 B) / its time, and as
 * % of the reference (the device's peak, or the copy probe). x = dense ms / sparse ms. Not a
 * test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_attention_gpu_sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_attention_gpu.h"
#include "bench_util.h"

enum { Q_HEADS = 128, LATENT = 576, RANK = 512, IDIM = 128, IHEADS = 64, TOPK = 2048, BS = 64 };
enum { MAX_SEQS = 16 };

typedef struct sparse_gpu_run {
  pkv_engine *e;
  pkv_batch *b;
  uint32_t seqs, ctx;
  /* device, per token: [128][576], [576], [64][128], [128], [128][512] */
  void *q, *k, *iq, *ik, *out;
  float *w;           /* device [seqs][64] */
  int32_t *top, *set; /* device [seqs][TOPK]: the top-k's positions, drawn positions */
} sparse_gpu_run;

static pkv_status make_engine(sparse_gpu_run *r) {
  pkv_layer_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.kind = PKV_LAYER_MLA, spec.index_head_dim = IDIM, spec.index_dtype = PKV_DTYPE_FP8_E4M3;
  spec.index_n_heads = IHEADS, spec.index_topk = TOPK;
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = Q_HEADS, p.num_kv_heads = 1, p.head_dim = LATENT;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = RANK, p.qk_rope_head_dim = LATENT - RANK;
  p.softmax_scale = 0.0722f; /* 1/sqrt(qk_nope 128 + qk_rope 64) */
  p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CUDA, p.device_id = 0, p.block_size = BS;
  p.num_blocks = r->seqs * (r->ctx / BS + 1) + 1, p.enable_prefix_caching = 0;
  p.layer_specs = &spec, p.layer_spec_size = sizeof spec;
  const pkv_status s = pkv_engine_create(&p, &r->e);
  return s != PKV_OK ? s : pkv_engine_set_stream(r->e, bench_gpu_stream());
}

/* Every page: bf16 latents, then fp8 key codes (no NaN code) and small fp32 scales. */
static int fill_pages(sparse_gpu_run *r, uint64_t *state) {
  struct pkv_pool_info pool = {.struct_size = sizeof pool};
  struct pkv_layer_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  pkv_status s = pkv_pool_info(r->e, &pool);
  if (s == PKV_OK) s = pkv_layer_info(r->e, 0, &in);
  if (s != PKV_OK || !in.index_base) return bench_fail(r->e, "pkv_pool_info / _layer_info", s);
  if (bench_gpu_fill(pool.k_base, pool.bytes_per_pool, PKV_DTYPE_BF16, state)) return -1;
  const uint32_t blocks = r->seqs * (r->ctx / BS + 1) + 1;
  for (uint32_t blk = 0; blk < blocks; blk++)
    if (bench_gpu_fill((char *)in.index_base + (size_t)blk * in.index_block_bytes, BS * IDIM,
                       PKV_DTYPE_FP8_E4M3, state))
      return -1;
  return 0;
}

/* Device buffers of the step; the drawn positions, one in each of TOPK equal strides. */
static int alloc_buffers(sparse_gpu_run *r, uint64_t *state) {
  const size_t n = r->seqs;
  const size_t bytes[5] = {n * Q_HEADS * LATENT * 2, n * LATENT * 2, n * IHEADS * IDIM * 2,
                           n * IDIM * 2, n * Q_HEADS * RANK * 2};
  void **bufs[5] = {&r->q, &r->k, &r->iq, &r->ik, &r->out};
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 5 && err == cudaSuccess; i++) err = cudaMalloc(bufs[i], bytes[i]);
  if (err == cudaSuccess) err = cudaMalloc((void **)&r->w, n * IHEADS * sizeof(float));
  if (err == cudaSuccess) err = cudaMalloc((void **)&r->top, n * TOPK * sizeof(int32_t));
  if (err == cudaSuccess) err = cudaMalloc((void **)&r->set, n * TOPK * sizeof(int32_t));
  if (err != cudaSuccess) return bench_gpu_cuda_fail(err, "cudaMalloc of the step's buffers");
  for (int i = 0; i < 4; i++)
    if (bench_gpu_fill(*bufs[i], bytes[i], PKV_DTYPE_BF16, state)) return -1;
  float *w = malloc(n * IHEADS * sizeof(float));
  int32_t *set = malloc(n * TOPK * sizeof(int32_t));
  if (!w || !set) return free(w), free(set), fprintf(stderr, "bench: no memory\n"), -1;
  for (size_t i = 0; i < n * IHEADS; i++) w[i] = 0.5f + (float)(i % 7) / 7;
  const uint32_t stride = (r->ctx + 1) / TOPK;
  for (size_t i = 0; i < n * TOPK; i++)
    set[i] = (int32_t)(i % TOPK * stride + bench_next(state) % stride);
  err = cudaMemcpy(r->w, w, n * IHEADS * sizeof(float), cudaMemcpyHostToDevice);
  if (err == cudaSuccess)
    err = cudaMemcpy(r->set, set, n * TOPK * sizeof(int32_t), cudaMemcpyHostToDevice);
  free(w), free(set);
  return err == cudaSuccess ? 0 : bench_gpu_cuda_fail(err, "uploading weights and positions");
}

static void close_run(sparse_gpu_run *r) {
  pkv_batch_abort(r->b);
  pkv_engine_destroy(r->e);
  void *bufs[8] = {r->q, r->k, r->iq, r->ik, r->out, r->w, r->top, r->set};
  for (int i = 0; i < 8; i++) cudaFree(bufs[i]);
  memset(r, 0, sizeof *r);
}

/* 0; 1 when the build or device refuses the engine (reported); -1 on failure. */
static int open_run(sparse_gpu_run *r, uint32_t seqs, uint32_t ctx) {
  uint64_t state = 31, ids[MAX_SEQS];
  memset(r, 0, sizeof *r);
  r->seqs = seqs, r->ctx = ctx;
  const pkv_status s = make_engine(r);
  if (s == PKV_ERR_UNSUPPORTED) {
    printf("sparse-attention engines refused by this build: %s\n", pkv_last_error());
    return 1;
  }
  if (s != PKV_OK) return bench_fail(r->e, "pkv_engine_create (sparse MLA)", s);
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  pkv_status st = tokens ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
  for (uint32_t i = 0; st == PKV_OK && i < seqs; i++) {
    for (uint32_t t = 0; t <= ctx; t++) tokens[t] = bench_token(&state);
    st = pkv_allocate(r->e, tokens, ctx, NULL, &ids[i], NULL);
  }
  int rc = st == PKV_OK ? 0 : bench_fail(r->e, "pkv_allocate", st);
  if (rc == 0) rc = fill_pages(r, &state);
  if (rc == 0) rc = alloc_buffers(r, &state);
  if (rc == 0) st = bench_open_batch(r->e, ids, seqs, tokens + ctx, 1, &r->b);
  if (rc == 0 && st != PKV_OK) rc = bench_fail(r->e, "building the batch", st);
  free(tokens);
  return rc;
}

/* One call of step kind k: 0 dense, 1 topk, 2 attn, 3 sparse. */
static pkv_status run_step(sparse_gpu_run *r, int k) {
  if (k == 0) return pkv_attention(r->b, 0, r->q, r->k, NULL, r->out);
  pkv_status s = PKV_OK;
  if (k != 2) s = pkv_indexer_write(r->b, 0, r->ik, 0);
  if (s == PKV_OK && k != 2) s = pkv_indexer_topk(r->b, 0, r->iq, r->w, PKV_TOPK_POSITIONS, r->top);
  if (s == PKV_OK && k >= 2)
    s = pkv_sparse_mla_attention(r->b, 0, r->q, r->k, k == 2 ? r->set : r->top, r->out);
  return s;
}

/* Median seconds of `runs` calls after a warm-up, the L2 flushed before each; < 0 on failure. */
static double time_step(sparse_gpu_run *r, int k, uint32_t runs) {
  double t[16], result = -1.0;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  for (uint32_t i = 0; i <= runs && i < 16; i++) {
    bench_gpu_flush_l2(i);
    cudaEventRecord(e0, bench_gpu_stream());
    const pkv_status s = run_step(r, k);
    cudaEventRecord(e1, bench_gpu_stream());
    float ms = 0.0f;
    cudaEventSynchronize(e1);
    const cudaError_t err = cudaEventElapsedTime(&ms, e0, e1);
    if (s != PKV_OK || err != cudaSuccess) {
      s != PKV_OK ? bench_fail(r->e, "the sparse step", s)
                  : bench_gpu_cuda_fail(err, "timing the sparse step");
      break;
    }
    t[i] = ms * 1e-3;
    if (i == runs) result = bench_median(t + 1, runs);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return result;
}

int bench_sparse_gpu_table(double ref_gbs, const char *ref_name, int quick) {
  printf("\nsparse MLA decode (DeepSeek V3.2's layer): %d q heads, latent %d + %d bf16, indexer "
         "%d heads x %d fp8 + fp32 scale, top-k %d, block %d. ms = median; GB/s = bytes read "
         "(latents %d B, keys %d B) / ms; %% = %s; x = dense ms / sparse ms\n",
         Q_HEADS, RANK, LATENT - RANK, IHEADS, IDIM, TOPK, BS, 2 * LATENT, IDIM + 4, ref_name);
  static const char *const names[4] = {"dense", "topk", "attn", "sparse"};
  printf("%4s %7s", "seqs", "context");
  for (int i = 0; i < 4; i++) printf(" %6s ms %7s %5s", names[i], "GB/s", "%");
  printf(" %7s\n", "x");
  static const uint32_t ctxs[] = {32768, 65536, 131072}, all_seqs[] = {1, MAX_SEQS};
  int rc = 0;
  for (int si = 0; si < 2; si++)
    for (int ci = 0; ci < (quick ? 1 : 3); ci++) {
      const uint32_t seqs = all_seqs[si], ctx = ctxs[ci];
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      if ((double)seqs * (ctx + BS) * (2.0 * LATENT + IDIM + 4) > 0.8 * (double)free_bytes)
        continue;
      sparse_gpu_run r;
      const int opened = open_run(&r, seqs, ctx);
      double sec[4] = {-1, -1, -1, -1};
      for (int k = 0; opened == 0 && k < 4; k++)
        if ((sec[k] = time_step(&r, k, quick ? 5 : 11)) <= 0) break;
      close_run(&r);
      if (opened == 1) return rc;
      if (opened < 0 || sec[3] <= 0) {
        printf("%4u %6uk failed\n", seqs, ctx / 1024);
        rc = 1;
        continue;
      }
      const double keys = (double)seqs * (ctx + 1), topk = (double)seqs * TOPK;
      const double bytes[4] = {keys * 2 * LATENT, keys * (IDIM + 4), topk * 2 * LATENT,
                               keys * (IDIM + 4) + topk * 2 * LATENT};
      printf("%4u %6uk", seqs, ctx / 1024);
      for (int k = 0; k < 4; k++) {
        const double gbs = bytes[k] / sec[k] * 1e-9;
        printf(" %9.4f %7.1f %4.0f%%", sec[k] * 1e3, gbs, 100.0 * gbs / ref_gbs);
      }
      printf(" %6.2fx\n", sec[0] / sec[3]);
      if (seqs == MAX_SEQS) { /* scripts/gpu-check.sh's roofline */
        char shape[48];
        snprintf(shape, sizeof shape, "%u seqs x %uk, top-k %d", seqs, ctx / 1024, TOPK);
        bench_gpu_roofline("indexer top-k", shape, bytes[1] / sec[1] * 1e-9);
        bench_gpu_roofline("sparse MLA", shape, bytes[2] / sec[2] * 1e-9);
      }
      fflush(stdout);
    }
  return rc;
}
