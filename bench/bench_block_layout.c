/*
 * bench_block_layout.c - what the PAGE block layout (pkv_engine_params.block_layout: a block of
 * all its group's layers as one segment, for transports) costs attention against the LAYERS
 * layout (a layer's blocks together): CPU decode steps of S sequences at a context of C, every
 * layer, the same engine but for the layout; the median step time of each and PAGE / LAYERS in
 * the same run, with the K and V bytes a step reads per second.
 * Run: build/bench/bench_block_layout [--quick] [--threads N]
 */
#include <pkv/pkv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

typedef struct shape {
  uint32_t layers, kv_heads, q_heads, head_dim, block_size, seqs, context;
} shape;

static void check(pkv_status s, const pkv_engine *e, const char *what) {
  if (s != PKV_OK) {
    bench_fail(e, what, s);
    exit(1);
  }
}

/* The median ms of a decode step (every layer) on an engine of this layout. */
static double step_ms(const shape *sh, uint32_t layout, uint32_t threads, uint32_t steps) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = sh->layers, p.num_q_heads = sh->q_heads, p.num_kv_heads = sh->kv_heads;
  p.head_dim = sh->head_dim, p.dtype = PKV_DTYPE_BF16, p.device = PKV_DEVICE_CPU;
  p.block_size = sh->block_size, p.num_threads = threads, p.block_layout = layout;
  p.max_num_seqs = sh->seqs, p.enable_prefix_caching = 0;
  p.num_blocks = sh->seqs * ((sh->context + sh->block_size) / sh->block_size + 1);
  pkv_engine *e = NULL;
  check(pkv_engine_create(&p, &e), NULL, "pkv_engine_create");
  /* Every page of the pool written: a pool never written reads the kernel's zero page, from
   * cache. */
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  check(pkv_pool_info(e, &info), e, "pkv_pool_info");
  memset(info.k_base, 0x3c, info.bytes_per_pool);
  if (info.v_base) memset(info.v_base, 0x3c, info.bytes_per_pool);
  uint64_t *ids = malloc(sizeof *ids * sh->seqs);
  int32_t *prompt = malloc(sizeof *prompt * sh->context);
  uint64_t rng = 5;
  for (uint32_t i = 0; i < sh->seqs; ++i) {
    for (uint32_t t = 0; t < sh->context; ++t) prompt[t] = bench_token(&rng);
    check(pkv_allocate(e, prompt, sh->context - 1, NULL, &ids[i], NULL), e, "pkv_allocate");
  }
  /* The prompts count as computed (their KV is whatever the pool holds: reads cost the same). */
  pkv_batch *b = NULL;
  check(pkv_batch_begin(e, ids, NULL, sh->seqs, &b), e, "pkv_batch_begin");
  check(pkv_batch_end(b), e, "pkv_batch_end");
  for (uint32_t i = 0; i < sh->seqs; ++i)
    check(pkv_append(e, ids[i], &prompt[sh->context - 1], 1), e, "pkv_append");
  const size_t q_row = (size_t)sh->q_heads * sh->head_dim,
               kv_row = (size_t)sh->kv_heads * sh->head_dim;
  uint16_t *q = calloc(sh->seqs * q_row, 2), *k = calloc(sh->seqs * kv_row, 2);
  uint16_t *v = calloc(sh->seqs * kv_row, 2), *out = calloc(sh->seqs * q_row, 2);
  double *ms = malloc(sizeof(double) * steps);
  for (uint32_t s = 0; s <= steps; ++s) {
    check(pkv_batch_begin(e, ids, NULL, sh->seqs, &b), e, "pkv_batch_begin");
    const double t0 = bench_now_ns();
    for (uint32_t l = 0; l < sh->layers; ++l)
      check(pkv_attention(b, l, q, k, v, out), e, "pkv_attention");
    const double t1 = bench_now_ns();
    pkv_batch_abort(b);                     /* the same step again: the context stays C */
    if (s > 0) ms[s - 1] = (t1 - t0) / 1e6; /* the first warms the pool's pages */
  }
  const double med = bench_median(ms, steps);
  free(ms), free(q), free(k), free(v), free(out), free(ids), free(prompt);
  pkv_engine_destroy(e);
  return med;
}

int main(int argc, char **argv) {
  int quick = 0;
  uint32_t threads = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = (uint32_t)atoi(argv[++i]);
  }
  bench_calibrate_clock();
  const uint32_t steps = quick ? 3 : 9;
  static const shape shapes[] = {
      {8, 8, 32, 128, 16, 4, 4096}, /* 32 KiB K blocks of a layer: 512 KiB pages */
      {8, 1, 8, 64, 16, 8, 4096},   /* 2 KiB K blocks: 32 KiB pages */
      {16, 2, 16, 128, 32, 2, 8192},
  };
  printf("decode steps (bf16, every layer), median of %u, ms; PAGE / LAYERS in the same run\n",
         steps);
  printf("%6s %5s %4s %4s %6s %8s %10s %10s %8s %10s\n", "layers", "kv", "hd", "bs", "seqs",
         "context", "LAYERS ms", "PAGE ms", "ratio", "GB/s");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    if (quick && i > 0) break;
    const shape *sh = &shapes[i];
    const double a = step_ms(sh, PKV_BLOCK_LAYOUT_LAYERS, threads, steps);
    const double b = step_ms(sh, PKV_BLOCK_LAYOUT_PAGE, threads, steps);
    const double bytes = 2.0 * 2 * sh->layers * sh->kv_heads * sh->head_dim * (double)sh->context *
                         sh->seqs; /* K and V, bf16 */
    printf("%6u %5u %4u %4u %6u %8u %10.2f %10.2f %8.3f %10.1f\n", sh->layers, sh->kv_heads,
           sh->head_dim, sh->block_size, sh->seqs, sh->context, a, b, b / a, bytes / (a * 1e6));
    fflush(stdout);
  }
  return 0;
}
