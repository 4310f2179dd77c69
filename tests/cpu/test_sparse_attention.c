/* Sparse attention on the CPU backend (DESIGN.md §14), through pkv.h only, against the fp64
 * reference of tests/common/indexer_ref.h: an engine of two MLA layers with indexers (layer 0's
 * of the config's dtype, layer 1's of the other, other widths, heads and top-k), sequences of
 * contexts shorter and longer than index_topk, prompt chunks and decodes, one decode past 1024
 * keys alone in its batch (2 threads: cpu_indexer.cpp's split over keys), latents of the
 * engine's dtype or fp8 (e4m3, e5m2). Per batch and layer:
 * - pkv_indexer_write: the cached keys and scales (pkv_layer_info's index_base,
 *   index_scale_base, index_block_bytes) byte for byte as the reference quantizes them;
 * - pkv_indexer_topk: positions equal to the reference's, slots their block table's. The
 *   "exact" sequences' keys are small integers times a power of two whose fp8 scale is a power
 *   of two too (|x| max 7 * 2^m: scale 2^(m-6), codes exact), and their indexer queries and
 *   weights small integers: every fp32 score is exact, so fp32 and fp64 rank alike, keys drawn
 *   from a few prototypes tie and must resolve by the rule (the lower position), a NaN key ranks
 *   last. The "random" sequence's keys are arbitrary (scales of every kind, a key of zeros): its
 *   top-k must be a top-k of the fp64 scores up to the rounding of fp32 scores;
 * - pkv_sparse_mla_attention within a tolerance of the reference, and equal to pkv_attention
 *   (dense MLA) where the context is at most index_topk.
 * At the end every cached key of every sequence is read back through its block table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "indexer_ref.h"
#include "kv_world.h"
#include "test_sparse_attention_world.h"

static const sa_config configs[] = {
    {"fp8_bs16_f32", PKV_DTYPE_F32, PKV_DTYPE_FP8_E4M3, 0, 16, 0},
    {"fp8_ue8m0_bs7_bf16", PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3, 1, 7, 0},
    {"fp8_bs7_f16", PKV_DTYPE_F16, PKV_DTYPE_FP8_E4M3, 0, 7, 0},
    {"fp8_ue8m0_bs16_f32", PKV_DTYPE_F32, PKV_DTYPE_FP8_E4M3, 1, 16, 0},
    {"bf16_bs16_bf16", PKV_DTYPE_BF16, PKV_DTYPE_BF16, 0, 16, 0},
    {"bf16_bs7_f16", PKV_DTYPE_F16, PKV_DTYPE_BF16, 1, 7, 0},
    {"fp8_bs16_bf16_kv_e4m3", PKV_DTYPE_BF16, PKV_DTYPE_FP8_E4M3, 0, 16, PKV_DTYPE_FP8_E4M3},
    {"bf16_bs7_f32_kv_e5m2", PKV_DTYPE_F32, PKV_DTYPE_BF16, 1, 7, PKV_DTYPE_FP8_E5M2},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0] };

/* A: 1100 tokens (exact, a NaN key at position 3 of layer 0), B: 30 (exact, never past either
 * top-k), C: 70 (exact, past layer 0's top-k from its prompt), R: 90 (random keys). */
static void run_config(const sa_config *c) {
  sa_world w;
  if (!sa_init(&w, c)) return;
  const int a = sa_alloc(&w, 1100, SA_EXACT, 11), bq = sa_alloc(&w, 30, SA_EXACT, 12);
  const int cq = sa_alloc(&w, 70, SA_EXACT, 13), r = sa_alloc(&w, 90, SA_RANDOM, 14);
  if (a < 0 || bq < 0 || cq < 0 || r < 0) {
    sa_free(&w);
    return;
  }
  { /* prompt chunks: A's first 500, B and C whole, R's first 41 */
    const int s[4] = {a, bq, cq, r};
    const uint32_t n[4] = {500, 30, 70, 41};
    sa_step(&w, s, n, 4);
  }
  sa_append(&w, bq, 1), sa_append(&w, cq, 1);
  { /* A's last 600 beside decodes, and the rest of R */
    const int s[4] = {cq, a, bq, r};
    const uint32_t n[4] = {1, 600, 1, 49};
    sa_step(&w, s, n, 4);
  }
  sa_append(&w, a, 1);
  sa_step(&w, &a, NULL, 1); /* one decode over 1101 keys: the split over keys */
  for (int round = 0; round < 2; round++) {
    const int s[4] = {r, bq, a, cq};
    for (int i = 0; i < 4; i++) sa_append(&w, s[i], round + 1);
    sa_step(&w, s, NULL, 4); /* decodes (2 tokens each in the second round) */
  }
  sa_check_cache(&w);
  printf("%u top-k rows decided by the tie rule, %u left a NaN out\n", w.tie_rows, w.nan_rows);
  CHECK(w.tie_rows > 100 && w.nan_rows > 100);
  sa_free(&w);
}

int main(int argc, char **argv) {
  kw_skip_unless_isa();
  int ran = 0;
  for (int i = 0; i < NUM_CONFIGS; i++) {
    if (argc > 1 && strcmp(argv[1], configs[i].name) != 0) continue;
    const int failed_before = kw_failed;
    run_config(&configs[i]);
    printf("%s %s\n", kw_failed == failed_before ? "ok  " : "FAIL", configs[i].name);
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no config named %s\n", argc > 1 ? argv[1] : "");
    return 1;
  }
  return kw_summary();
}
