/*
 * bench_mla_gpu.c - bench_attention_gpu's MLA decode table: pkv_attention on a latent cache
 * (kv_layout MLA) with DeepSeek V3's shape, 128 q heads (one rank) over a bf16 latent of 512 +
 * 64 values, block size 64, 1 and 32 sequences of 2k, 8k and 32k tokens. GB/s counts the latents
 * read (each once: the kernels share it between the q heads); TFLOP/s counts 2 * q_heads * (576
 * + 512) per key, QK^T and PV of the absorbed form. Not a test; not installed.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_mla_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_attention_gpu.h"
#include "bench_util.h"

enum {
  MLA_Q_HEADS = 128,
  MLA_RANK = 512,
  MLA_ROPE = 64,
  MLA_WIDTH = MLA_RANK + MLA_ROPE,
  MLA_BLOCK = 64,
  MLA_MAX_SEQS = 32
};

static pkv_status make_mla_engine(bench_run *r, uint64_t num_blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 1, p.num_q_heads = MLA_Q_HEADS, p.num_kv_heads = 1, p.head_dim = MLA_WIDTH;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = MLA_RANK, p.qk_rope_head_dim = MLA_ROPE;
  p.softmax_scale = 1.0f / sqrtf(128 + MLA_ROPE); /* DeepSeek V3: qk_nope 128 + rope 64 */
  p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CUDA, p.device_id = 0, p.block_size = MLA_BLOCK;
  p.num_blocks = (uint32_t)num_blocks, p.enable_prefix_caching = 0;
  memset(r, 0, sizeof *r);
  const pkv_status s = pkv_engine_create(&p, &r->e);
  return s != PKV_OK ? s : pkv_engine_set_stream(r->e, bench_gpu_stream());
}

/* num_seqs prompts of ctx tokens whose latents are random (written straight into the pool), then
 * a decode batch of one more token each, with q, k (its latent) and out on the device. */
static int setup_mla_batch(bench_run *r, uint32_t num_seqs, uint32_t ctx) {
  uint64_t ids[MLA_MAX_SEQS], state = 11;
  int32_t *tokens = malloc(sizeof(int32_t) * (ctx + 1));
  pkv_status st = tokens ? PKV_OK : PKV_ERR_OUT_OF_MEMORY;
  for (uint32_t s = 0; st == PKV_OK && s < num_seqs; s++) {
    for (uint32_t i = 0; i <= ctx; i++) tokens[i] = bench_token(&state);
    st = pkv_allocate(r->e, tokens, ctx, NULL, &ids[s], NULL);
  }
  struct pkv_pool_info pool = {.struct_size = sizeof pool};
  if (st == PKV_OK) st = pkv_pool_info(r->e, &pool);
  if (st == PKV_OK && bench_gpu_fill(pool.k_base, pool.bytes_per_pool, PKV_DTYPE_BF16, &state)) {
    free(tokens);
    return -1;
  }
  if (st == PKV_OK) st = bench_open_batch(r->e, ids, num_seqs, tokens + ctx, 1, &r->b);
  free(tokens);
  if (st != PKV_OK) return bench_fail(r->e, "building the MLA batch", st);
  const size_t qb = (size_t)num_seqs * MLA_Q_HEADS * MLA_WIDTH * 2,
               kb = (size_t)num_seqs * MLA_WIDTH * 2;
  const size_t ob = (size_t)num_seqs * MLA_Q_HEADS * MLA_RANK * 2;
  cudaError_t err;
  if ((err = cudaMalloc(&r->q, qb)) || (err = cudaMalloc(&r->k, kb)) ||
      (err = cudaMalloc(&r->out, ob)))
    return bench_gpu_cuda_fail(err, "cudaMalloc of q/k/out");
  return bench_gpu_fill(r->q, qb, PKV_DTYPE_BF16, &state) ||
                 bench_gpu_fill(r->k, kb, PKV_DTYPE_BF16, &state)
             ? -1
             : 0;
}

int bench_mla_decode_table(double ref_gbs, const char *ref_name, double tc_peak, int quick) {
  printf("\nMLA decode: %d q heads, latent %d + %d bf16, block size %d; GB/s = latents read "
         "(once for all heads) / median, TFLOP/s = 2 * q_heads * (%d + %d) * keys / median\n",
         MLA_Q_HEADS, MLA_RANK, MLA_ROPE, MLA_BLOCK, MLA_WIDTH, MLA_RANK);
  printf("%5s %8s %10s %10s %8s %9s %9s %8s\n", "seqs", "context", "median ms", "latent MiB",
         "GB/s", ref_name, "TFLOP/s", "of peak");
  const uint32_t all_seqs[] = {1, MLA_MAX_SEQS}, all_ctx[] = {2048, 8192, 32768};
  int rc = 0;
  for (int si = 0; si < 2; si++)
    for (int ci = 0; ci < 3; ci++) {
      const uint32_t seqs = all_seqs[si], ctx = all_ctx[ci];
      const uint64_t blocks = (uint64_t)seqs * ((ctx + MLA_BLOCK) / MLA_BLOCK) + 1;
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      if ((double)blocks * MLA_BLOCK * MLA_WIDTH * 2 > 0.8 * (double)free_bytes ||
          (quick && seqs > 1 && ctx > 8192))
        continue;
      bench_run r;
      const pkv_status s = make_mla_engine(&r, blocks);
      if (s == PKV_ERR_UNSUPPORTED ||
          s == PKV_ERR_INVALID_ARGUMENT) { /* engines over MLA not yet */
        printf("MLA engines refused by this build: %s\n", pkv_last_error());
        bench_gpu_free_run(&r);
        return rc;
      }
      if (s != PKV_OK || setup_mla_batch(&r, seqs, ctx)) {
        if (s != PKV_OK) bench_fail(r.e, "pkv_engine_create (MLA)", s);
        bench_gpu_free_run(&r);
        rc = 1;
        continue;
      }
      const double sec = bench_gpu_time_calls(&r, quick ? 5 : 15);
      bench_gpu_free_run(&r);
      rc |= sec <= 0;
      const double keys = (double)seqs * (ctx + 1), bytes = keys * MLA_WIDTH * 2;
      const double flops = 2.0 * MLA_Q_HEADS * (MLA_WIDTH + MLA_RANK) * keys;
      const double gbs = sec > 0 ? bytes / sec * 1e-9 : 0.0,
                   tflops = sec > 0 ? flops / sec * 1e-12 : 0.0;
      printf("%5u %8u %10.4f %10.1f %8.1f %8.0f%% %9.1f", seqs, ctx, sec * 1e3, bytes / 1048576.0,
             gbs, 100.0 * gbs / ref_gbs, tflops);
      if (ctx == 32768 && gbs > 0) { /* scripts/gpu-check.sh's roofline: long contexts */
        char shape[48];
        snprintf(shape, sizeof shape, "%u seqs x %uk", seqs, ctx / 1024);
        bench_gpu_roofline("MLA decode", shape, gbs);
      }
      if (tc_peak > 0)
        printf(" %7.0f%%\n", 100.0 * tflops * 1e3 / tc_peak);
      else
        printf(" %8s\n", "?");
      fflush(stdout);
    }
  return rc;
}
