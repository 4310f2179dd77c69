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

/* The reference itself on hand-computed cases: what the kernels are held to. */
static void test_reference(void) {
  const float three[2] = {1344.0f, -1.0f}, over[1] = {449.0f}, exact[1] = {448.0f};
  CHECK(pkv_ref_indexer_scale(three, 2, 0) == 3.0f && pkv_ref_indexer_scale(three, 2, 1) == 4.0f);
  CHECK(pkv_ref_indexer_scale(over, 1, 1) == 2.0f && pkv_ref_indexer_scale(exact, 1, 1) == 1.0f);
  const float zeros[2] = {0.0f, -0.0f}, x[4] = {1.0f, -896.0f, 3.0f, 0.0f};
  CHECK(pkv_ref_indexer_scale(zeros, 2, 0) == 1.0f && pkv_ref_indexer_scale(zeros, 2, 1) == 1.0f);
  uint8_t codes[4];
  float scale = 0.0f;
  pkv_ref_indexer_quantize_fp8(x, 4, 0, codes, &scale); /* 0.5, -448, 1.5, 0 */
  CHECK(scale == 2.0f && codes[0] == 0x30 && codes[1] == 0xfe && codes[2] == 0x3c && !codes[3]);
  /* bf16: halfway cases go to the even code */
  CHECK(pkv_ref_bf16_bits(1.00390625f) == 0x3f80 && pkv_ref_bf16_bits(1.01171875f) == 0x3f82);
  CHECK(pkv_ref_bf16_bits(-1.0f) == 0xbf80 && pkv_ref_bf16_value(0x4040) == 3.0);
  const double key[2] = {1.0, 2.0}, q[4] = {1.0, 1.0, -1.0, 0.0}, w[2] = {2.0, 5.0};
  CHECK(pkv_ref_indexer_score(q, w, key, 2, 2) == 6.0); /* 2 * relu(3) + 5 * relu(-1) */
  const double scores[8] = {1, NAN, 3, 3, 2, NAN, 3, 0};
  int32_t top[10];
  CHECK(pkv_ref_topk(scores, 8, 3, top) == 3 && top[0] == 2 && top[1] == 3 && top[2] == 6);
  CHECK(pkv_ref_topk(scores, 8, 4, top) == 4 && top[0] == 2 && top[3] == 6 && top[1] == 3);
  CHECK(pkv_ref_topk(scores, 8, 5, top) == 5 && top[0] == 0 && top[4] == 6); /* score 1 beats 0 */
  CHECK(pkv_ref_topk(scores, 8, 7, top) == 7 && top[1] == 1 && top[6] == 7); /* NaN 1, not 5 */
  CHECK(pkv_ref_topk(scores, 8, 10, top) == 8 && top[7] == 7 && top[8] == -1 && top[9] == -1);
  const int32_t table[2] = {9, 4};
  int32_t slots[4], pos[4] = {0, 6, 3, -1};
  pkv_ref_positions_to_slots(pos, 4, table, 4, slots);
  CHECK(slots[0] == 36 && slots[1] == 18 && slots[2] == 39 && slots[3] == -1);
  /* sparse MLA, 1 head, rank 1 + rope 1: scores ln 3 and 0 -> weights 3/4, 1/4 */
  const double lat[4] = {1.0, 0.0, 0.0, 0.0}, mq[2] = {log(3.0), 0.0};
  const int32_t idx[4] = {0, 1, -1, 5}, twice[3] = {0, 0, 1}, none[2] = {-1, 7};
  double out = -1.0;
  pkv_ref_sparse_mla(mq, lat, idx, 4, 1, 1, 1, 1, 1.0, &out);
  CHECK(fabs(out - 0.75) < 1e-15);
  pkv_ref_sparse_mla(mq, lat, twice, 3, 1, 1, 1, 1, 1.0, &out); /* a position twice: 6/7 */
  CHECK(fabs(out - 6.0 / 7.0) < 1e-15);
  pkv_ref_sparse_mla(mq, lat, none, 2, 1, 1, 1, 1, 1.0, &out);
  CHECK(out == 0.0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "reference") == 0) {
    test_reference();
    return kw_summary();
  }
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
