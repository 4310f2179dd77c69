/* kw_step and kw_fill_direct: one batch through pkv_attention (or straight into the pool) and
 * its checks. See kv_world.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "kv_world.h"

/* Reference work per (sequence, layer) of one step, in multiply-adds: bigger prefills are checked
 * on a sample of their rows (the first and last ones always). */
#define KW_REF_BUDGET 1.0e8

typedef struct step_bufs {
  size_t q_row, kv_row, out_row;  /* bytes of one token's q, k (and v), out row */
  unsigned char *q, *k, *v, *out; /* [layers][tokens][heads][head_dim (out: v_dim)], the
                                     engine's dtype; MLA: v NULL */
  double *qd;                     /* [layers][tokens][q_heads][head_dim] */
} step_bufs;

static pkv_batch_view view_of(const pkv_batch *b) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  CHECK_OK(pkv_batch_info(b, &v));
  return v;
}

/* The rows of seq i must be its next tokens: positions computed .. computed + count - 1. */
static int check_view(const kw_world *w, const pkv_batch_view *v, const int *s,
                      const uint32_t *num_new, uint32_t n) {
  int ok = CHECK(v->num_seqs == n) && CHECK(v->block_size == w->c.block_size);
  for (uint32_t i = 0; ok && i < n; i++) {
    const kw_seq *q = &w->seqs[s[i]];
    const uint32_t count = num_new ? num_new[i] : q->num_tokens - q->num_computed;
    ok = CHECK(v->seq_ids[i] == q->id) &&
         CHECK(v->query_start[i + 1] - v->query_start[i] == (int32_t)count) &&
         CHECK(v->context_lens[i] == (int32_t)(q->num_computed + count));
    for (uint32_t r = 0; ok && r < count; r++)
      ok = CHECK(v->positions[v->query_start[i] + r] == (int32_t)(q->num_computed + r));
  }
  return ok;
}

static void bufs_alloc(const kw_world *w, step_bufs *b, uint32_t tokens) {
  const size_t nl = w->c.num_layers, nt = tokens ? tokens : 1;
  b->q_row = (size_t)w->q_heads * w->c.head_dim * w->elt;
  b->kv_row = (size_t)w->kv_heads * w->c.head_dim * w->elt;
  b->out_row = (size_t)w->q_heads * w->v_dim * w->elt;
  b->k = malloc(nl * nt * b->kv_row);
  b->v = w->mla ? NULL : malloc(nl * nt * b->kv_row);
  b->q = malloc(nl * nt * b->q_row);
  b->out = malloc(nl * nt * b->out_row);
  b->qd = malloc(nl * nt * w->q_heads * w->c.head_dim * sizeof(double));
  memset(b->out, 0xff, nl * nt * b->out_row); /* NaN in every dtype: unwritten rows fail */
}

static void bufs_free(step_bufs *b) {
  free(b->q), free(b->k), free(b->v), free(b->out), free(b->qd);
}

/* Generates every row's q, k and v, on every layer, in the view's order. */
static void gen_rows(const kw_world *w, const pkv_batch_view *v, const int *s, step_bufs *b) {
  const size_t nt = v->num_tokens, qn = (size_t)w->q_heads * w->c.head_dim;
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    const kw_seq *q = &w->seqs[s[i]];
    for (int32_t r = v->query_start[i]; r < v->query_start[i + 1]; r++) {
      const uint64_t prefix = q->prefix[v->positions[r]];
      for (uint32_t l = 0; l < w->c.num_layers; l++) {
        const size_t row = l * nt + (size_t)r;
        kw_gen_row(w, prefix, l, 0, b->q + row * b->q_row, b->qd + row * qn);
        kw_gen_row(w, prefix, l, 1, b->k + row * b->kv_row, NULL);
        if (!w->mla) kw_gen_row(w, prefix, l, 2, b->v + row * b->kv_row, NULL);
      }
    }
  }
}

/* Where row r's K (or V) of layer l starts in the pool, in elements: its group's slot, the
 * layer's place in the pool's layer dimension. -1 when the group has no slot for it. */
static int64_t pool_at(const kw_world *w, const pkv_batch_view *v, const struct pkv_pool_info *p,
                       uint32_t l, uint32_t r) {
  const int64_t slot = v->group_slot_mapping[(size_t)w->layer_group[l] * v->num_tokens + r];
  return slot < 0
             ? -1
             : (int64_t)(w->layer_slot[l] * p->layer_stride + (uint64_t)slot * p->token_stride);
}

/* Reads row r's K and V (MLA: its latent; the pool has no V) back from the pool, head by head,
 * on every layer: the row itself, or its fp8 codes. */
static int check_pool_rows(kw_world *w, const pkv_batch_view *v, const step_bufs *b, uint32_t r) {
  const struct pkv_pool_info p = kw_pool(w);
  const size_t head_bytes = (size_t)w->c.head_dim * w->kv_elt;
  unsigned char *want_k = malloc(b->kv_row), *want_v = malloc(b->kv_row); /* >= a pool row */
  int ok = !w->mla || (CHECK(p.v_base == NULL) && CHECK(p.host_v_base == NULL));
  for (uint32_t l = 0; ok && l < w->c.num_layers; l++) {
    const int64_t row_at = pool_at(w, v, &p, l, r);
    const size_t src = ((size_t)l * v->num_tokens + r) * b->kv_row;
    if (!CHECK(row_at >= 0)) break;
    kw_cache_row(w, l, 1, b->k + src, want_k, NULL);
    if (!w->mla) kw_cache_row(w, l, 2, b->v + src, want_v, NULL);
    for (uint32_t h = 0; ok && h < w->kv_heads; h++) {
      const size_t at = ((size_t)row_at + h * p.head_stride) * w->kv_elt;
      ok = CHECK(memcmp((const char *)p.k_base + at, want_k + h * head_bytes, head_bytes) == 0) &&
           (w->mla ||
            CHECK(memcmp((const char *)p.v_base + at, want_v + h * head_bytes, head_bytes) == 0));
      if (!ok)
        fprintf(stderr, "  pool row: layer %u at %lld head %u (batch row %u)\n", l,
                (long long)row_at, h, r);
    }
  }
  free(want_k), free(want_v);
  return ok;
}

/* Compares seq i's output rows on layer l with the reference over its context (the window's
 * part of it: K/V are made only from the first position a checked row sees). */
static int check_seq_layer(kw_world *w, const pkv_batch_view *v, const kw_seq *q, uint32_t i,
                           uint32_t l, const step_bufs *b, const char *tag) {
  const uint32_t hd = w->c.head_dim, ctx = (uint32_t)v->context_lens[i], win = kw_window(w, l);
  const uint32_t r0 = (uint32_t)v->query_start[i], rows = (uint32_t)v->query_start[i + 1] - r0;
  const uint32_t pos0 = (uint32_t)v->positions[r0], first = win && pos0 >= win ? pos0 - win + 1 : 0;
  const size_t qn = (size_t)w->q_heads * hd, kvn = (size_t)w->kv_heads * hd, keys = ctx - first;
  const size_t on = (size_t)w->q_heads * w->v_dim; /* an out row */
  double *kd = malloc(keys * kvn * sizeof(double)), *vd = malloc(keys * kvn * sizeof(double));
  double *got = malloc(rows * on * sizeof(double)), *ref = malloc(rows * on * sizeof(double));
  for (uint32_t pos = first; pos < ctx; pos++) {
    kw_kv_values(w, q->prefix[pos], l, 1, kd + (pos - first) * kvn);
    if (!w->mla) kw_kv_values(w, q->prefix[pos], l, 2, vd + (pos - first) * kvn);
  }
  const double per_row = (double)(win && win < ctx ? win : ctx) * qn * 2.0;
  uint32_t want = (uint32_t)fmin(rows, fmax(12.0, KW_REF_BUDGET / per_row)), stride = 1;
  if (want < rows)
    stride = (rows - 8) / (want - 8) | 1; /* odd: rows of every residue of the kernels' tiles */
  size_t m = 0;
  for (uint32_t r = 0; r < rows; r++) {
    if (!(r < 4 || r + 4 >= rows || r % stride == 0)) continue;
    const size_t row = (size_t)l * v->num_tokens + r0 + r;
    const uint32_t pos = (uint32_t)v->positions[r0 + r];
    if (w->mla)
      pkv_ref_mla_attention(b->qd + row * qn, kd, ref + m * on, 1, pos + 1, w->q_heads, w->v_dim,
                            hd - w->v_dim, w->scale);
    else
      pkv_ref_attention_window(b->qd + row * qn, kd, vd, ref + m * on, 1, pos + 1 - first,
                               w->q_heads, w->kv_heads, hd, w->scale, win);
    for (size_t j = 0; j < on; j++)
      got[m * on + j] = kw_load(w->c.dtype, b->out + row * b->out_row, j);
    m++;
  }
  char label[160];
  snprintf(label, sizeof label, "%s step %llu seq %u (ctx %u, %u new, %zu checked) layer %u", tag,
           (unsigned long long)w->steps, i, ctx, rows, m, l);
  const size_t bad = pkv_ref_compare(label, got, ref, m * on, w->atol, w->rtol);
  free(kd), free(vd), free(got), free(ref);
  return CHECK(bad == 0);
}

static int run_layers(kw_world *w, pkv_batch *b, const step_bufs *sb, uint32_t tokens,
                      unsigned flags) {
  const uint32_t nl = w->c.num_layers;
  int ok = 1;
  for (uint32_t k = 0; ok && k < nl; k++) {
    const uint32_t l = flags & KW_REVERSE_LAYERS ? nl - 1 - k : k;
    const size_t qo = (size_t)l * tokens * sb->q_row, ko = (size_t)l * tokens * sb->kv_row;
    const size_t oo = (size_t)l * tokens * sb->out_row;
    ok = CHECK_OK(
        pkv_attention(b, l, sb->q + qo, sb->k + ko, sb->v ? sb->v + ko : NULL, sb->out + oo));
  }
  return ok;
}

int kw_step(kw_world *w, const int *s, const uint32_t *num_new, uint32_t n, unsigned flags) {
  const int failed_before = kw_failed;
  uint64_t ids[KW_MAX_SEQS];
  for (uint32_t i = 0; i < n; i++) ids[i] = w->seqs[s[i]].id;
  w->steps++;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(w->e, ids, num_new, n, &b))) return kw_failed - failed_before;
  const pkv_batch_view v = view_of(b);
  if (!check_view(w, &v, s, num_new, n)) {
    pkv_batch_abort(b);
    return kw_failed - failed_before;
  }
  for (uint32_t g = 0; g < v.num_kv_groups; g++) /* the tables' -1 entries below each context */
    for (uint32_t i = 0; i < n; i++) {
      const int32_t *t = v.group_block_tables + ((size_t)g * n + i) * v.max_blocks_per_seq;
      for (uint32_t k = 0; k < ((uint32_t)v.context_lens[i] + v.block_size - 1) / v.block_size; k++)
        w->given_back += t[k] < 0;
    }
  step_bufs sb;
  bufs_alloc(w, &sb, v.num_tokens);
  gen_rows(w, &v, s, &sb);
  if (w->on_batch) w->on_batch(w, b, sb.q, sb.k, sb.v, sb.out);
  int ok = run_layers(w, b, &sb, v.num_tokens, flags);
  if (ok && (flags & KW_TWICE)) {
    const size_t bytes = (size_t)w->c.num_layers * v.num_tokens * sb.out_row;
    unsigned char *first = malloc(bytes);
    memcpy(first, sb.out, bytes);
    memset(sb.out, 0xff, bytes);
    ok = run_layers(w, b, &sb, v.num_tokens, flags ^ KW_REVERSE_LAYERS) &&
         CHECK(memcmp(first, sb.out, bytes) == 0);
    free(first);
  }
  for (uint32_t i = 0; ok && i < n; i++) {
    for (uint32_t l = 0; l < w->c.num_layers; l++)
      check_seq_layer(w, &v, &w->seqs[s[i]], i, l, &sb, w->c.name);
    const uint32_t r0 = (uint32_t)v.query_start[i], r1 = (uint32_t)v.query_start[i + 1];
    for (uint32_t r = r0; r < r1; r++)
      if (r1 - r0 <= 8 || r < r0 + 2 || r + 2 >= r1 || r % 13 == 0) check_pool_rows(w, &v, &sb, r);
  }
  bufs_free(&sb);
  uint32_t computed[KW_MAX_SEQS]; /* the view's arrays die with the batch */
  for (uint32_t i = 0; i < n; i++)
    computed[i] = flags & KW_ABORT ? w->seqs[s[i]].num_computed : (uint32_t)v.context_lens[i];
  if (flags & KW_ABORT)
    pkv_batch_abort(b);
  else if (!CHECK_OK(pkv_batch_end(b)))
    return kw_failed - failed_before;
  for (uint32_t i = 0; i < n; i++) {
    kw_seq *q = &w->seqs[s[i]];
    q->num_computed = computed[i];
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    CHECK_OK(pkv_seq_info(w->e, q->id, &info));
    CHECK(info.num_computed_tokens == q->num_computed && info.num_tokens == q->num_tokens);
  }
  return kw_failed - failed_before;
}

int kw_fill_direct(kw_world *w, int s, uint32_t n) {
  kw_seq *q = &w->seqs[s];
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(w->e, &q->id, n ? &n : NULL, 1, &b))) return 0;
  const pkv_batch_view v = view_of(b);
  const struct pkv_pool_info p = kw_pool(w);
  unsigned char *row = malloc((size_t)w->kv_heads * w->c.head_dim * 4);
  int ok = 1;
  for (uint32_t r = 0; ok && r < v.num_tokens; r++) {
    const uint64_t prefix = q->prefix[v.positions[r]];
    for (uint32_t l = 0; ok && l < w->c.num_layers; l++) {
      const int64_t row_at = pool_at(w, &v, &p, l, r);
      if (!(ok = CHECK(row_at >= 0))) break;
      const size_t at = (size_t)row_at * w->kv_elt;
      kw_gen_row(w, prefix, l, 1, row, NULL);
      kw_cache_row(w, l, 1, row, (char *)p.k_base + at, NULL);
      if (w->mla) continue;
      kw_gen_row(w, prefix, l, 2, row, NULL);
      kw_cache_row(w, l, 2, row, (char *)p.v_base + at, NULL);
    }
  }
  free(row);
  const uint32_t computed = (uint32_t)v.context_lens[0];
  ok = CHECK_OK(pkv_batch_end(b)) && ok;
  if (ok) q->num_computed = computed;
  return ok;
}
