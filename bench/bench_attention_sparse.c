/*
 * bench_attention_sparse.c - sparse MLA decode on the CPU (issue 29): DeepSeek V3.2's layer (the
 * latent 512 + 64 in bf16, an fp8 indexer of 64 heads x 128 with one fp32 scale per token, top-k
 * 2048) over one sequence of a 32k, 64k or 128k context, one new token, against dense MLA decode
 * (pkv_attention) of the same engine, batch and context.
 * Each row times, as medians of bench_time_calls:
 *   dense   pkv_attention over every layer: reads every latent of the context;
 *   topk    pkv_indexer_write + pkv_indexer_topk over every layer: reads every indexer key;
 *   attn    pkv_sparse_mla_attention over every layer on 2048 positions drawn afresh per call (32
 *           sets in turn, spread over the context, as a top-k's are), so that the latents it
 *           reads are mostly not in the caches from the call before;
 *   sparse  the decode step a model runs: write, top-k, then sparse attention on the top-k's own
 *           positions, every layer.
 * GB/s = the bytes each must read (latents of 1152 B, indexer keys of 132 B) / its time, against
 * the read probe (bench_probe: a sum over 1 GiB on the same threads) taken before the row. The
 * engine has as many layers as make dense read >= 64 MiB a step, each its own pages (block 64).
 */
#include "bench_attention_sparse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "bench_cpu.h"
#include "bench_util.h"

enum { LATENT = 576, RANK = 512, IDIM = 128, IHEADS = 64, TOPK = 2048, BS = 64, SETS = 32 };
#define STEP_MIN_BYTES (64.0 * 1048576.0)

typedef struct sparse_run {
  pkv_engine *e;
  pkv_batch *b;
  uint32_t layers, ctx, q_heads, next;
  uint16_t *q, *k, *iq, *ik, *out; /* bf16: [q_heads][576], [576], [64][128], [128], [q][512] */
  float *w;                        /* [64] indexer head weights */
  int32_t *top;                    /* [layers][TOPK]: pkv_indexer_topk's positions */
  int32_t *sets;                   /* [SETS][TOPK]: drawn positions, ascending */
} sparse_run;

static uint16_t bf16_small(uint64_t *state, size_t i) { /* ~ +-0.1 .. 0.25, no NaN or denormal */
  return (uint16_t)(((i & 1) << 15) | 0x3e00 | (bench_next(state) & 0x7f));
}

static int make_engine(sparse_run *r, uint32_t threads) {
  pkv_layer_spec *specs = calloc(r->layers, sizeof *specs);
  if (!specs) return -1;
  for (uint32_t l = 0; l < r->layers; l++) {
    specs[l].kind = PKV_LAYER_MLA, specs[l].index_head_dim = IDIM;
    specs[l].index_dtype = PKV_DTYPE_FP8_E4M3, specs[l].index_n_heads = IHEADS;
    specs[l].index_topk = TOPK;
  }
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = r->layers, p.num_q_heads = r->q_heads, p.num_kv_heads = 1;
  p.head_dim = LATENT, p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CPU;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = RANK, p.qk_rope_head_dim = LATENT - RANK;
  p.softmax_scale = 0.0722f; /* 1/sqrt(qk_nope 128 + qk_rope 64), no yarn */
  p.block_size = BS, p.num_blocks = r->ctx / BS + 2, p.num_threads = threads;
  p.enable_prefix_caching = 0;
  p.layer_specs = specs, p.layer_spec_size = sizeof *specs;
  const pkv_status s = pkv_engine_create(&p, &r->e);
  free(specs);
  return s == PKV_OK ? 0 : bench_fail(NULL, "pkv_engine_create", s);
}

/* Every page: random latents and key codes (one block's, repeated), and per token a random
 * scale, so that scores differ from block to block and the top-k is spread over the context. */
static int fill_pages(sparse_run *r, uint64_t *state) {
  uint16_t lat[BS * LATENT];
  uint8_t codes[BS * IDIM];
  for (size_t i = 0; i < BS * LATENT; i++) lat[i] = bf16_small(state, i);
  for (size_t i = 0; i < BS * IDIM; i++)
    codes[i] = (uint8_t)(((i & 1) << 7) | (0x18 + bench_next(state) % 0x38));
  for (uint32_t l = 0; l < r->layers; l++) {
    struct pkv_layer_info in;
    memset(&in, 0, sizeof in);
    in.struct_size = sizeof in;
    const pkv_status s = pkv_layer_info(r->e, l, &in);
    if (s != PKV_OK || !in.index_base) return bench_fail(r->e, "pkv_layer_info", s);
    for (uint32_t blk = 0; blk < r->ctx / BS + 2; blk++) {
      memcpy((uint16_t *)in.k_base + blk * in.block_stride, lat, sizeof lat);
      memcpy((char *)in.index_base + blk * in.index_block_bytes, codes, sizeof codes);
      float *scale = (float *)((char *)in.index_scale_base + blk * in.index_block_bytes);
      for (uint32_t t = 0; t < BS; t++) scale[t] = (float)(1 + bench_next(state) % 1024) / 448e3f;
    }
  }
  return 0;
}

/* SETS sets of TOPK distinct ascending positions in 0 .. ctx, one in each of TOPK equal strides. */
static void draw_sets(sparse_run *r, uint64_t *state) {
  const uint32_t stride = (r->ctx + 1) / TOPK;
  for (uint32_t s = 0; s < SETS; s++)
    for (uint32_t i = 0; i < TOPK; i++)
      r->sets[s * TOPK + i] = (int32_t)(i * stride + bench_next(state) % stride);
}

static void run_close(sparse_run *r) {
  pkv_batch_abort(r->b);
  pkv_engine_destroy(r->e);
  free(r->q), free(r->k), free(r->iq), free(r->ik), free(r->out);
  free(r->w), free(r->top), free(r->sets);
  memset(r, 0, sizeof *r);
}

static int run_open(sparse_run *r, uint32_t layers, uint32_t ctx, uint32_t q_heads,
                    uint32_t threads) {
  uint64_t state = 29, id = 0;
  memset(r, 0, sizeof *r);
  r->layers = layers, r->ctx = ctx, r->q_heads = q_heads;
  r->q = malloc(2 * q_heads * LATENT), r->k = malloc(2 * LATENT);
  r->iq = malloc(2 * IHEADS * IDIM), r->ik = malloc(2 * IDIM), r->out = malloc(2 * q_heads * RANK);
  r->w = malloc(sizeof(float) * IHEADS), r->top = malloc(sizeof(int32_t) * layers * TOPK);
  r->sets = malloc(sizeof(int32_t) * SETS * TOPK);
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  if (!r->q || !r->k || !r->iq || !r->ik || !r->out || !r->w || !r->top || !r->sets || !tokens)
    return free(tokens), fprintf(stderr, "bench: no memory\n"), -1;
  for (uint32_t i = 0; i < q_heads * LATENT; i++) r->q[i] = bf16_small(&state, i);
  for (uint32_t i = 0; i < LATENT; i++) r->k[i] = bf16_small(&state, i);
  for (uint32_t i = 0; i < IHEADS * IDIM; i++) r->iq[i] = bf16_small(&state, i);
  for (uint32_t i = 0; i < IDIM; i++) r->ik[i] = bf16_small(&state, i);
  for (uint32_t h = 0; h < IHEADS; h++) r->w[h] = 0.5f + (float)(h % 7) / 7;
  draw_sets(r, &state);
  for (uint32_t i = 0; i <= ctx; i++) tokens[i] = bench_token(&state);
  int rc = make_engine(r, threads);
  pkv_status st = PKV_OK;
  if (rc == 0) st = pkv_allocate(r->e, tokens, ctx, NULL, &id, NULL);
  if (rc == 0 && st != PKV_OK) rc = bench_fail(r->e, "pkv_allocate", st);
  if (rc == 0) rc = fill_pages(r, &state);
  if (rc == 0) st = bench_open_batch(r->e, &id, 1, tokens + ctx, 1, &r->b);
  if (rc == 0 && st != PKV_OK) rc = bench_fail(r->e, "building the batch", st);
  free(tokens);
  return rc;
}

static int dense_step(void *arg) {
  sparse_run *r = arg;
  for (uint32_t l = 0; l < r->layers; l++) {
    const pkv_status s = pkv_attention(r->b, l, r->q, r->k, NULL, r->out);
    if (s != PKV_OK) return bench_fail(r->e, "pkv_attention", s);
  }
  return 0;
}

static int topk_step(void *arg) {
  sparse_run *r = arg;
  for (uint32_t l = 0; l < r->layers; l++) {
    pkv_status s = pkv_indexer_write(r->b, l, r->ik, 0);
    if (s == PKV_OK)
      s = pkv_indexer_topk(r->b, l, r->iq, r->w, PKV_TOPK_POSITIONS, r->top + l * TOPK);
    if (s != PKV_OK) return bench_fail(r->e, "pkv_indexer_write / _topk", s);
  }
  return 0;
}

static int attn_step(void *arg) {
  sparse_run *r = arg;
  const int32_t *set = r->sets + (r->next++ % SETS) * TOPK;
  for (uint32_t l = 0; l < r->layers; l++) {
    const pkv_status s = pkv_sparse_mla_attention(r->b, l, r->q, r->k, set, r->out);
    if (s != PKV_OK) return bench_fail(r->e, "pkv_sparse_mla_attention", s);
  }
  return 0;
}

static int sparse_step(void *arg) {
  sparse_run *r = arg;
  for (uint32_t l = 0; l < r->layers; l++) {
    pkv_status s = pkv_indexer_write(r->b, l, r->ik, 0);
    if (s == PKV_OK)
      s = pkv_indexer_topk(r->b, l, r->iq, r->w, PKV_TOPK_POSITIONS, r->top + l * TOPK);
    if (s == PKV_OK) s = pkv_sparse_mla_attention(r->b, l, r->q, r->k, r->top + l * TOPK, r->out);
    if (s != PKV_OK) return bench_fail(r->e, "the sparse decode step", s);
  }
  return 0;
}

/* One row: 0, or 1 when a call failed. */
static int sparse_row(const sparse_probe *probe, uint32_t ctx, uint32_t q_heads,
                      uint32_t max_runs) {
  const double latent_bytes = 2.0 * LATENT, key_bytes = IDIM + 4.0;
  const uint32_t layers = (uint32_t)(STEP_MIN_BYTES / ((ctx + 1) * latent_bytes)) + 1;
  printf("%6uk %6u", ctx / 1024, layers);
  fflush(stdout);
  const double now = bench_probe(probe->buf, probe->bytes, probe->threads, 3);
  const double best = now > probe->start ? now : probe->start;
  sparse_run r;
  double busy[4] = {0}, sec[4] = {-1, -1, -1, -1};
  int (*const steps[4])(void *) = {dense_step, topk_step, attn_step, sparse_step};
  if (run_open(&r, layers, ctx, q_heads, probe->threads) == 0)
    for (int i = 0; i < 4; i++) {
      sec[i] = bench_time_calls(steps[i], &r, max_runs, probe->threads, &busy[i]);
      if (sec[i] <= 0) break;
    }
  const int32_t kept = r.top ? r.top[TOPK - 1] : -1; /* the top-k's last position */
  run_close(&r);
  if (sec[0] <= 0 || sec[1] <= 0 || sec[2] <= 0 || sec[3] <= 0) {
    printf("  failed\n");
    return 1;
  }
  const double bytes[4] = {layers * (ctx + 1) * latent_bytes, layers * (ctx + 1) * key_bytes,
                           layers * (double)TOPK * latent_bytes,
                           layers * ((ctx + 1) * key_bytes + TOPK * latent_bytes)};
  for (int i = 0; i < 4; i++) {
    const double gbs = bytes[i] / sec[i] * 1e-9;
    printf(" %9.2f %6.2f %4.0f%% %4.0f%%", sec[i] * 1e3, gbs, 100.0 * gbs / best, 100.0 * busy[i]);
  }
  printf(" %7.2fx %6.1f  (top-k's last: %d)\n", sec[0] / sec[3], now, kept);
  fflush(stdout);
  return 0;
}

int bench_sparse_table(const sparse_probe *probe, uint32_t q_heads, uint32_t max_runs, int quick) {
  static const uint32_t ctxs[] = {32768, 65536, 131072};
  printf("\nsparse MLA decode (DeepSeek V3.2's layer): %u q heads over the latent %u + %u (bf16); "
         "indexer %u heads x %u, fp8 + an fp32 scale per token; top-k %u; 1 sequence, 1 new "
         "token, block %u.\nms = median time of a step over every layer; GB/s = bytes it must "
         "read (latents %u B, indexer keys %u B) / ms; %% = GB/s / the better of the probe "
         "before the row and the start probe; busy = CPU time / (wall time * threads).\n",
         q_heads, RANK, LATENT - RANK, IHEADS, IDIM, TOPK, BS, 2 * LATENT, IDIM + 4);
  printf("dense = pkv_attention; topk = pkv_indexer_write + _topk; attn = "
         "pkv_sparse_mla_attention on %u fresh positions; sparse = write + topk + attn (the "
         "model's step); x = dense ms / sparse ms\n",
         TOPK);
  static const char *const names[4] = {"dense", "topk", "attn", "sparse"};
  printf("%7s %6s", "context", "layers");
  for (int i = 0; i < 4; i++) printf(" %6s ms %6s %5s %5s", names[i], "GB/s", "%", "busy");
  printf(" %8s %6s\n", "x", "probe");
  int rc = 0;
  for (int i = 0; i < (quick ? 1 : 3); i++) rc |= sparse_row(probe, ctxs[i], q_heads, max_runs);
  return rc;
}
