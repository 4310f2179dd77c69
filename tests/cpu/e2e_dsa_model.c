/* e2e_dsa_model.c - the tiny transformer's DSA parts (e2e_model.h): the naive side's own indexer
 * cache (pkv.h's fp8 quantization) and top-k, and a DSA layer's calls on pkv. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "e2e_model.h"
#include "kv_world.h"

dsa_rows dsa_current;
double dsa_closest_edge = INFINITY, dsa_min_cut_gap = INFINITY;
unsigned dsa_cut_ties, dsa_cuts;

/* y[rows] = W[rows][HID] x[HID] */
static void project(const float *w, const float *x, float *y, int rows) {
  for (int r = 0; r < rows; r++) {
    float s = 0.0f;
    for (int c = 0; c < HID; c++) s += w[r * HID + c] * x[c];
    y[r] = s;
  }
}

void dsa_project(const layer_w *w, const float *h, uint32_t n) {
  float *iq = malloc(sizeof(float) * n * IDX_HEADS * IDX_DIM);
  float *ik = malloc(sizeof(float) * n * IDX_DIM), *iw = malloc(sizeof(float) * n * IDX_HEADS);
  for (uint32_t r = 0; r < n; r++) {
    project(&w->iq[0][0], h + r * HID, iq + r * IDX_HEADS * IDX_DIM, IDX_HEADS * IDX_DIM);
    project(&w->ik[0][0], h + r * HID, ik + r * IDX_DIM, IDX_DIM);
    project(&w->iw[0][0], h + r * HID, iw + r * IDX_HEADS, IDX_HEADS);
  }
  dsa_current = (dsa_rows){iq, ik, iw};
}

void dsa_release(void) {
  free((void *)dsa_current.q), free((void *)dsa_current.k), free((void *)dsa_current.w);
  dsa_current = (dsa_rows){NULL, NULL, NULL};
}

/* How close y (a value over its scale) came to the midpoint between its code and a neighbour
 * (relative): pkv and the naive side see hidden states f32 noise apart, so only a value that
 * close can round to another code on the other side. */
static void note_edge(float y, uint8_t code) {
  const double v = pkv_ref_fp8_decode(code, 0);
  for (int d = -1; d <= 1; d += 2) {
    const uint8_t other = (uint8_t)(code + d);
    const double w = pkv_ref_fp8_decode(other, 0), mid = (v + w) / 2;
    if (((other ^ code) & 0x80) == 0 && isfinite(w) && mid != 0)
      dsa_closest_edge = fmin(dsa_closest_edge, fabs(y - mid) / fabs(mid));
  }
}

void dsa_quantize(const float *x, dsa_key *out) {
  float amax = 0.0f;
  for (int i = 0; i < IDX_DIM; i++) amax = fmaxf(amax, fabsf(x[i]));
  out->scale = amax > 0.0f ? amax / 448.0f : 1.0f; /* fp32, as pkv.h writes the rule */
  for (int i = 0; i < IDX_DIM; i++) {
    const uint8_t code = pkv_ref_fp8_encode(x[i], out->scale, 0);
    note_edge(x[i] / out->scale, code);
    out->code[i] = (float)pkv_ref_fp8_decode(code, 0);
  }
}

/* pkv.h's order of keys: a number before a NaN, a higher score first, then the lower position. */
static int ranks_before(const double *score, int32_t a, int32_t b) {
  const int na = isnan(score[a]), nb = isnan(score[b]);
  if (na != nb) return nb;
  if (!na && score[a] != score[b]) return score[a] > score[b];
  return a < b;
}

/* Notes how the cut between the last key kept (a) and the first dropped (b) was decided. */
static void note_cut(double a, double b) {
  dsa_cuts++;
  if (a == b) {
    dsa_cut_ties++;
  } else if (!isnan(b)) {
    dsa_min_cut_gap = fmin(dsa_min_cut_gap, (a - b) / fmax(fabs(a), fabs(b)));
  }
}

uint32_t dsa_select(const dsa_key *keys, int32_t pos, const float *q, const float *w,
                    int32_t *sel) {
  double score[MAX_TOKENS];
  int32_t order[MAX_TOKENS];
  const uint32_t n = (uint32_t)pos + 1, keep = n < IDX_TOPK ? n : IDX_TOPK;
  for (int32_t s = 0; s <= pos; s++) {
    double sum = 0.0;
    for (int h = 0; h < IDX_HEADS; h++) {
      double dot = 0.0;
      for (int i = 0; i < IDX_DIM; i++) dot += (double)q[h * IDX_DIM + i] * keys[s].code[i];
      sum += w[h] * fmax(dot * keys[s].scale, 0.0);
    }
    score[s] = sum;
  }
  for (uint32_t i = 0; i < n; i++) { /* insertion sort by rank: n is at most MAX_TOKENS */
    int32_t j = (int32_t)i;
    for (; j > 0 && ranks_before(score, (int32_t)i, order[j - 1]); j--) order[j] = order[j - 1];
    order[j] = (int32_t)i;
  }
  if (keep < n) note_cut(score[order[keep - 1]], score[order[keep]]);
  for (uint32_t i = 0; i < keep; i++) { /* the kept ones, ascending by position */
    int32_t j = (int32_t)i;
    for (; j > 0 && sel[j - 1] > order[i]; j--) sel[j] = sel[j - 1];
    sel[j] = order[i];
  }
  return keep;
}

/* pkv_indexer_topk's rows as pkv.h promises them: per token at position p, min(p + 1, topk)
 * positions ascending in 0 .. p, then -1; and its PKV_TOPK_SLOTS row the same keys' slots
 * (block table entry * block_size + offset). 1 when every row is. */
static int check_topk(const pkv_batch_view *v, uint32_t l, const int32_t *pos,
                      const int32_t *slots) {
  unsigned bad = 0;
  for (uint32_t i = 0; i < v->num_seqs; i++)
    for (int32_t r = v->query_start[i]; r < v->query_start[i + 1]; r++) {
      const int32_t p = v->positions[r], keep = p + 1 < IDX_TOPK ? p + 1 : IDX_TOPK;
      const int32_t *table = v->block_tables + (size_t)i * v->max_blocks_per_seq;
      for (int32_t j = 0; j < IDX_TOPK; j++) {
        const int32_t at = pos[r * IDX_TOPK + j], slot = slots[r * IDX_TOPK + j];
        const int32_t lo = j ? pos[r * IDX_TOPK + j - 1] + 1 : 0;
        if (j >= keep) {
          bad += at != -1 || slot != -1;
          continue;
        }
        if (at < lo || at > p) {
          bad++;
          continue;
        }
        const int64_t want =
            (int64_t)table[at / (int32_t)v->block_size] * v->block_size + at % v->block_size;
        bad += slot != want;
      }
    }
  if (bad) fprintf(stderr, "  layer %u: %u top-k entries break pkv.h's contract\n", l, bad);
  return CHECK(bad == 0);
}

int dsa_on_pkv(pkv_batch *b, uint32_t l, const float *qa, const float *lat, float *out) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) return 0;
  int32_t *pos = malloc(sizeof(int32_t) * v.num_tokens * IDX_TOPK);
  int32_t *slots = malloc(sizeof(int32_t) * v.num_tokens * IDX_TOPK);
  const dsa_rows d = dsa_current;
  const int ok = CHECK_OK(pkv_indexer_write(b, l, d.k, 0)) &&
                 CHECK_OK(pkv_indexer_topk(b, l, d.q, d.w, PKV_TOPK_POSITIONS, pos)) &&
                 CHECK_OK(pkv_indexer_topk(b, l, d.q, d.w, PKV_TOPK_SLOTS, slots)) &&
                 check_topk(&v, l, pos, slots) &&
                 CHECK_OK(pkv_sparse_mla_attention(b, l, qa, lat, pos, out));
  free(pos), free(slots);
  return ok;
}
