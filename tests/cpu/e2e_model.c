/* e2e_model.c - the tiny transformer of the end-to-end tests (e2e_model.h): weights, forward
 * pass, the recurrent layer, the naive contiguous KV cache, and the layer calls on pkv (on one
 * rank, or split over the tensor-parallel ranks of one engine with ranks ALL). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "e2e_model.h"
#include "kv_world.h"

static uint64_t rng_state = 42;
static float uniform(float a) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return a * (2.0f * (float)((rng_state >> 40) * (1.0 / 16777216.0)) - 1.0f);
}

static void fill(float *w, size_t n, float a) {
  for (size_t i = 0; i < n; i++) w[i] = uniform(a);
}

void init_model(model *m) {
  fill(&m->embed[0][0], sizeof m->embed / 4, 1.0f);
  for (int l = 0; l < LAYERS; l++) {
    layer_w *w = &m->layer[l];
    for (int i = 0; i < HID; i++)
      w->norm1[i] = 1.0f + uniform(0.2f), w->norm2[i] = 1.0f + uniform(0.2f);
    const float a = 1.7f / sqrtf(HID);           /* uniform(a) has variance a^2/3: about 1/HID */
    fill(&w->wq[0][0], sizeof w->wq / 4, 2 * a); /* peakier attention */
    fill(&w->wk[0][0], sizeof w->wk / 4, 2 * a);
    fill(&w->wv[0][0], sizeof w->wv / 4, a);
    fill(&w->wo[0][0], sizeof w->wo / 4, 1.7f / sqrtf(QH * HD));
    fill(&w->gate[0][0], sizeof w->gate / 4, a);
    fill(&w->up[0][0], sizeof w->up / 4, a);
    fill(&w->down[0][0], sizeof w->down / 4, 1.7f / sqrtf(FFN));
  }
  for (int i = 0; i < HID; i++) m->norm_f[i] = 1.0f;
  fill(&m->head[0][0], sizeof m->head / 4, 3.0f / sqrtf(HID));
  for (int l = 0; l < LAYERS; l++) { /* last: the other modes' weights keep their values */
    layer_w *w = &m->layer[l];
    const float a = 1.7f / sqrtf(HID);
    fill(&w->mq[0][0], sizeof w->mq / 4, 2 * a);
    fill(&w->dkv[0][0], sizeof w->dkv / 4, a);
    fill(&w->uk[0][0][0], sizeof w->uk / 4, 2 * 1.7f / sqrtf(RANK));
    fill(&w->uv[0][0][0], sizeof w->uv / 4, 1.7f / sqrtf(RANK));
  }
  for (int l = 0; l < LAYERS; l++) { /* DSA's indexer, last for the same reason */
    layer_w *w = &m->layer[l];
    const float a = 1.7f / sqrtf(HID);
    fill(&w->iq[0][0], sizeof w->iq / 4, 2 * a);
    fill(&w->ik[0][0], sizeof w->ik / 4, 2 * a);
    fill(&w->iw[0][0], sizeof w->iw / 4, a);
  }
}

/* y[rows] = W[rows][cols] x[cols] */
static void matvec(const float *w, const float *x, float *y, int rows, int cols) {
  for (int r = 0; r < rows; r++) {
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += w[(size_t)r * cols + c] * x[c];
    y[r] = s;
  }
}

static void rmsnorm(const float *x, const float *g, float *y) {
  float ss = 0.0f;
  for (int i = 0; i < HID; i++) ss += x[i] * x[i];
  const float inv = 1.0f / sqrtf(ss / HID + 1e-5f);
  for (int i = 0; i < HID; i++) y[i] = x[i] * inv * g[i];
}

/* Rotary embedding (rotate-half form) at position pos of values [offset, offset + dims) of each
 * of the heads of x (stride values apart). */
static void rope_part(float *x, int heads, int stride, int offset, int dims, int32_t pos) {
  for (int h = 0; h < heads; h++)
    for (int i = 0; i < dims / 2; i++) {
      const double angle = pos * pow(10000.0, -2.0 * i / dims);
      const float c = (float)cos(angle), s = (float)sin(angle);
      float *a = x + h * stride + offset + i, *b = a + dims / 2;
      const float x0 = *a, x1 = *b;
      *a = x0 * c - x1 * s;
      *b = x0 * s + x1 * c;
    }
}

static void rope(float *x, int heads, int32_t pos) { rope_part(x, heads, HD, 0, HD, pos); }

/* MLA's projections of n rows (normed hidden states h [n][HID]) into q, k, v for attn, and the
 * heads' outputs back to o [n][QH][VD]. absorbed (pkv): q in latent space, k the latents, v NULL;
 * else (the naive side) K and V decompressed per head. dsa: the indexer's rows too, in
 * dsa_current. */
static int mla_attention(const layer_w *w, uint32_t l, const float *h, const int32_t *positions,
                         uint32_t n, int absorbed, int dsa, attention_fn attn, void *ctx,
                         float *o) {
  if (dsa) dsa_project(w, h, n);
  float *q = malloc(sizeof(float) * n * QH * QKD), *lat = malloc(sizeof(float) * n * LATENT);
  float *qa = malloc(sizeof(float) * n * QH * LATENT), *ol = malloc(sizeof(float) * n * QH * RANK);
  float *k = malloc(sizeof(float) * n * QH * QKD), *v = malloc(sizeof(float) * n * QH * VD);
  for (uint32_t r = 0; r < n; r++) {
    matvec(&w->mq[0][0], h + r * HID, q + r * QH * QKD, QH * QKD, HID);
    matvec(&w->dkv[0][0], h + r * HID, lat + r * LATENT, LATENT, HID);
    rope_part(q + r * QH * QKD, QH, QKD, NOPE, ROPE, positions[r]);
    rope_part(lat + r * LATENT, 1, LATENT, RANK, ROPE, positions[r]);
    for (int hd = 0; hd < QH; hd++) {
      const float *qh = q + (r * QH + hd) * QKD, *c = lat + r * LATENT;
      float *qa_h = qa + (r * QH + hd) * LATENT, *kh = k + (r * QH + hd) * QKD;
      for (int j = 0; j < RANK; j++) { /* q_nope . (uk c) = (uk^T q_nope) . c */
        float sum = 0.0f;
        for (int i = 0; i < NOPE; i++) sum += w->uk[hd][i][j] * qh[i];
        qa_h[j] = sum;
      }
      memcpy(qa_h + RANK, qh + NOPE, ROPE * sizeof(float));
      matvec(&w->uk[hd][0][0], c, kh, NOPE, RANK);
      memcpy(kh + NOPE, c + RANK, ROPE * sizeof(float));
      matvec(&w->uv[hd][0][0], c, v + (r * QH + hd) * VD, VD, RANK);
    }
  }
  int ok;
  if (absorbed) {
    ok = attn(ctx, l, qa, lat, NULL, ol);
    for (uint32_t r = 0; ok && r < n; r++) /* each head's output up-projected from latent space */
      for (int hd = 0; hd < QH; hd++)
        matvec(&w->uv[hd][0][0], ol + (r * QH + hd) * RANK, o + (r * QH + hd) * VD, VD, RANK);
  } else {
    ok = attn(ctx, l, q, k, v, o);
  }
  free(q), free(lat), free(qa), free(ol), free(k), free(v);
  if (dsa) dsa_release();
  return ok;
}

/* Runs n rows (token, position) through the model, the KV side by attn; logits [n][VOCAB].
 * mla: the model's MLA attention, absorbed (pkv's form) or not (the naive side's). */
int forward(const model *m, const int32_t *tokens, const int32_t *positions, uint32_t n, int mla,
            int absorbed, attention_fn attn, void *ctx, float *logits) {
  float *x = malloc(sizeof(float) * n * HID), *q = malloc(sizeof(float) * n * QH * HD);
  float *k = malloc(sizeof(float) * n * KVH * HD), *v = malloc(sizeof(float) * n * KVH * HD);
  float *o = malloc(sizeof(float) * n * QH * HD);
  float h[HID], t[HID], g[FFN], u[FFN];
  int ok = 1;
  for (uint32_t r = 0; r < n; r++) memcpy(x + r * HID, m->embed[tokens[r]], sizeof h);
  float *hn = mla ? malloc(sizeof(float) * n * HID) : NULL;
  for (uint32_t l = 0; ok && l < LAYERS; l++) {
    const layer_w *w = &m->layer[l];
    for (uint32_t r = 0; r < n; r++) {
      rmsnorm(x + r * HID, w->norm1, h);
      if (mla) {
        memcpy(hn + r * HID, h, sizeof h);
        continue;
      }
      matvec(&w->wq[0][0], h, q + r * QH * HD, QH * HD, HID);
      matvec(&w->wk[0][0], h, k + r * KVH * HD, KVH * HD, HID);
      matvec(&w->wv[0][0], h, v + r * KVH * HD, KVH * HD, HID);
      rope(q + r * QH * HD, QH, positions[r]);
      rope(k + r * KVH * HD, KVH, positions[r]);
    }
    ok = mla ? mla_attention(w, l, hn, positions, n, absorbed, mla == E2E_DSA, attn, ctx, o)
             : attn(ctx, l, q, k, v, o);
    for (uint32_t r = 0; ok && r < n; r++) {
      float *xr = x + r * HID;
      matvec(&w->wo[0][0], o + r * QH * HD, t, HID, QH * HD);
      for (int i = 0; i < HID; i++) xr[i] += t[i];
      rmsnorm(xr, w->norm2, h);
      matvec(&w->gate[0][0], h, g, FFN, HID);
      matvec(&w->up[0][0], h, u, FFN, HID);
      for (int i = 0; i < FFN; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
      matvec(&w->down[0][0], g, t, HID, FFN);
      for (int i = 0; i < HID; i++) xr[i] += t[i];
    }
  }
  for (uint32_t r = 0; ok && r < n; r++) {
    rmsnorm(x + r * HID, m->norm_f, h);
    matvec(&m->head[0][0], h, logits + (size_t)r * VOCAB, VOCAB, HID);
  }
  free(x), free(q), free(k), free(v), free(o), free(hn);
  return ok;
}

/* The best (rank 0) or second best (rank 1) token. */
int32_t pick(const float *logits, int rank) {
  int32_t best = 0, second = -1;
  for (int32_t i = 1; i < VOCAB; i++) {
    if (logits[i] > logits[best])
      second = best, best = i;
    else if (second < 0 || logits[i] > logits[second])
      second = i;
  }
  return rank ? second : best;
}

/* The recurrent layer on n rows of one sequence, its state (conv, ssm) updated in place: per row,
 * v' = 0.5 v_t + 0.3 v_{t-1} + 0.2 v_{t-2} (the causal conv), then per kv head the gate
 * g = sigmoid(k[0]) and S = g S + k v'^T, and per q head out = q S / HD. Both sides run this very
 * function, so only where the state lives differs: pkv's slot, or the naive side's own arrays. */
static void recurrence(float *conv, float *ssm, const float *q, const float *k, const float *v,
                       uint32_t n, float *out) {
  const int row = KVH * HD;
  for (uint32_t r = 0; r < n; r++) {
    const float *kr = k + r * row, *vr = v + r * row;
    float vc[KVH * HD];
    for (int i = 0; i < row; i++) vc[i] = 0.5f * vr[i] + 0.3f * conv[row + i] + 0.2f * conv[i];
    memmove(conv, conv + row, sizeof(float) * row);
    memcpy(conv + row, vr, sizeof(float) * row);
    for (int h = 0; h < KVH; h++) {
      float *st = ssm + h * HD * HD;
      const float g = 1.0f / (1.0f + expf(-kr[h * HD]));
      for (int a = 0; a < HD; a++)
        for (int b = 0; b < HD; b++)
          st[a * HD + b] = g * st[a * HD + b] + kr[h * HD + a] * vc[h * HD + b];
    }
    for (int h = 0; h < QH; h++) {
      const float *qh = q + (r * QH + h) * HD, *st = ssm + (h / (QH / KVH)) * HD * HD;
      for (int b = 0; b < HD; b++) {
        float acc = 0.0f;
        for (int a = 0; a < HD; a++) acc += qh[a] * st[a * HD + b];
        out[(r * QH + h) * HD + b] = acc / HD;
      }
    }
  }
}

/* ---------------------------------------------------------------- the naive side */
typedef struct naive_seq {
  float k[LAYERS][MAX_TOKENS][KVH * HD], v[LAYERS][MAX_TOKENS][KVH * HD];
  float mk[LAYERS][MAX_TOKENS][QH * QKD], mv[LAYERS][MAX_TOKENS][QH * VD]; /* MLA, decompressed */
  dsa_key ik[LAYERS][MAX_TOKENS];           /* DSA: the indexer keys as cached */
  float conv[CONV_FLOATS], ssm[SSM_FLOATS]; /* the recurrent layer's state, zero at first */
  int32_t len;                              /* tokens in the cache */
  uint32_t n;                               /* rows of the current call */
  const kv_mode *mode;
  float (*amax)[2][KVH]; /* NULL, or [LAYERS]: the largest |k| and |v| stored, per kv head */
} naive_seq;

/* How close an fp8 run came to a value on the other side of a rounding edge (relative distance
 * of x / scale to the nearest midpoint between codes, over every value cached): pkv and the naive
 * side differ by f32 noise, so a flip needs a value that close. */
double closest_edge = INFINITY;

static void note_edge(float y, uint8_t code, int e5m2) {
  const double v = pkv_ref_fp8_decode(code, e5m2);
  for (int d = -1; d <= 1; d += 2) {
    const uint8_t other = (uint8_t)(code + d);
    const double w = pkv_ref_fp8_decode(other, e5m2), mid = (v + w) / 2;
    if (((other ^ code) & 0x80) == 0 && isfinite(w) && mid != 0)
      closest_edge = fmin(closest_edge, fabs(y - mid) / fabs(mid));
  }
}

/* A value as the cache keeps it. */
static float kv_round(const kv_mode *mode, float x, uint32_t l, int kind, int head) {
  if (mode->kv_dtype == PKV_DTYPE_BF16) {
    uint16_t b;
    kw_store(PKV_DTYPE_BF16, x, &b, 0);
    return (float)kw_load(PKV_DTYPE_BF16, &b, 0);
  }
  if (mode->kv_dtype != PKV_DTYPE_FP8_E4M3 && mode->kv_dtype != PKV_DTYPE_FP8_E5M2) return x;
  const int e5m2 = mode->kv_dtype == PKV_DTYPE_FP8_E5M2;
  const float scale = mode->scales[l][kind][head];
  const uint8_t code = pkv_ref_fp8_encode(x, scale, e5m2);
  note_edge(x / scale, code, e5m2);
  return (float)(pkv_ref_fp8_decode(code, e5m2) * scale);
}

static int naive_attention(void *ctx, uint32_t l, const float *q, const float *k, const float *v,
                           float *out) {
  naive_seq *s = ctx;
  const kv_mode *mode = s->mode;
  if (layer_recurrent(mode, l)) {
    recurrence(s->conv, s->ssm, q, k, v, s->n, out);
    return 1;
  }
  const uint32_t src = layer_source(mode, l), w = layer_window(mode, l);
  const int kvh_n = layer_kv_heads(mode, l), keqv = layer_k_eq_v(mode, l);
  float p[MAX_TOKENS];
  for (uint32_t r = 0; r < s->n; r++) {
    const int32_t pos = s->len + (int32_t)r;
    const int32_t first = w && (uint32_t)pos >= w ? pos - (int32_t)w + 1 : 0;
    for (int i = 0; src == l && i < kvh_n * HD; i++) { /* a SHARED layer keeps nothing */
      const float kx = k[r * KVH * HD + i], vx = keqv ? kx : v[r * KVH * HD + i];
      s->k[l][pos][i] = kv_round(mode, kx, l, 0, i / HD);
      s->v[l][pos][i] = kv_round(mode, vx, l, 1, i / HD);
      if (s->amax) {
        s->amax[l][0][i / HD] = fmaxf(s->amax[l][0][i / HD], fabsf(kx));
        s->amax[l][1][i / HD] = fmaxf(s->amax[l][1][i / HD], fabsf(vx));
      }
    }
    for (int h = 0; h < QH; h++) {
      const float *qh = q + (r * QH + h) * HD;
      const int kvh = h / (QH / kvh_n);
      const float sink = layer_sink(mode, l, h);
      float mx = sink, sum = 0.0f;
      for (int32_t j = first; j <= pos; j++) {
        float d = 0.0f;
        for (int i = 0; i < HD; i++) d += qh[i] * s->k[src][j][kvh * HD + i];
        p[j] = d / sqrtf(HD);
        mx = fmaxf(mx, p[j]);
      }
      for (int32_t j = first; j <= pos; j++) sum += p[j] = expf(p[j] - mx);
      sum += expf(sink - mx); /* the sink takes weight and adds nothing (0 without one) */
      float *o = out + (r * QH + h) * HD;
      for (int i = 0; i < HD; i++) {
        float acc = 0.0f;
        for (int32_t j = first; j <= pos; j++) acc += p[j] * s->v[src][j][kvh * HD + i];
        o[i] = acc / sum;
      }
    }
  }
  return 1;
}

/* MLA's attention as its model is written: every head's own key (QKD) and value (VD), scale
 * 1/sqrt(QKD), each token's decompressed K/V kept in a contiguous cache. DSA: each row's keys
 * are the top-k of its own indexer over the keys cached so far (its own included). */
static int naive_mla_attention(void *ctx, uint32_t l, const float *q, const float *k,
                               const float *v, float *out) {
  naive_seq *s = ctx;
  const int dsa = s->mode->mla == E2E_DSA;
  float p[MAX_TOKENS];
  int32_t keys[MAX_TOKENS];
  for (uint32_t r = 0; r < s->n; r++) {
    const int32_t pos = s->len + (int32_t)r;
    memcpy(s->mk[l][pos], k + r * QH * QKD, sizeof s->mk[l][pos]);
    memcpy(s->mv[l][pos], v + r * QH * VD, sizeof s->mv[l][pos]);
    uint32_t nk = (uint32_t)pos + 1;
    for (uint32_t j = 0; j < nk; j++) keys[j] = (int32_t)j;
    if (dsa) {
      dsa_quantize(dsa_current.k + r * IDX_DIM, &s->ik[l][pos]);
      nk = dsa_select(s->ik[l], pos, dsa_current.q + r * IDX_HEADS * IDX_DIM,
                      dsa_current.w + r * IDX_HEADS, keys);
    }
    for (int h = 0; h < QH; h++) {
      const float *qh = q + (r * QH + h) * QKD;
      float mx = -INFINITY, sum = 0.0f;
      for (uint32_t j = 0; j < nk; j++) {
        float d = 0.0f;
        for (int i = 0; i < QKD; i++) d += qh[i] * s->mk[l][keys[j]][h * QKD + i];
        p[j] = d / sqrtf(QKD);
        mx = fmaxf(mx, p[j]);
      }
      for (uint32_t j = 0; j < nk; j++) sum += p[j] = expf(p[j] - mx);
      for (int i = 0; i < VD; i++) {
        float acc = 0.0f;
        for (uint32_t j = 0; j < nk; j++) acc += p[j] * s->mv[l][keys[j]][h * VD + i];
        out[(r * QH + h) * VD + i] = acc / sum;
      }
    }
  }
  return 1;
}

/* Greedy generation of GEN tokens after prompt (token `second_at` takes the second best), K/V
 * kept as mode says; amax (may be NULL) grows to the largest |k| and |v| seen. With forced, the
 * tokens fed back are forced[g], not the picks (teacher forcing). */
void naive_generate(const model *m, const int32_t *prompt, uint32_t len, int second_at,
                    const kv_mode *mode, float (*amax)[2][KVH], const int32_t *forced,
                    int32_t *out_tokens, float (*out_logits)[VOCAB]) {
  naive_seq *s = calloc(1, sizeof *s);
  s->mode = mode;
  s->amax = amax;
  int32_t toks[MAX_TOKENS], pos[MAX_TOKENS];
  memcpy(toks, prompt, len * sizeof toks[0]);
  float *logits = malloc(sizeof(float) * MAX_TOKENS * VOCAB);
  uint32_t n = len;
  for (int g = 0; g < GEN; g++) {
    for (uint32_t r = 0; r < n; r++) pos[r] = s->len + (int32_t)r;
    s->n = n;
    forward(m, toks + s->len, pos, n, mode->mla, 0,
            mode->mla ? naive_mla_attention : naive_attention, s, logits);
    s->len += (int32_t)n;
    memcpy(out_logits[g], logits + (size_t)(n - 1) * VOCAB, sizeof out_logits[g]);
    out_tokens[g] = pick(out_logits[g], g == second_at);
    toks[s->len] = forced ? forced[g] : out_tokens[g];
    n = 1;
  }
  free(logits);
  free(s);
}

/* The mode pkv runs (the per-layer models pass each layer's own K and V), its engine and the
 * engine's ranks. */
const kv_mode *e2e_mode;
pkv_engine *e2e_engine;
uint32_t e2e_tp = 1;

/* The recurrent layer on pkv: the batch's queued copies first (PKV_COPY_STATE: a fork's state, a
 * checkpoint restored into a working slot or taken from one at a block boundary), then each
 * sequence's rows on the state in its working slot (view.state_slots), where pkv_pool_info and
 * pkv_layer_info say; a sequence whose rows start at position 0 starts from a zero state. */
static int recurrence_on_pkv(pkv_batch *b, uint32_t l, const float *q, const float *k,
                             const float *v, float *out) {
  pkv_batch_view view;
  struct pkv_pool_info pool;
  struct pkv_layer_info li;
  memset(&view, 0, sizeof view), memset(&pool, 0, sizeof pool), memset(&li, 0, sizeof li);
  view.struct_size = sizeof view, pool.struct_size = sizeof pool, li.struct_size = sizeof li;
  if (!CHECK_OK(pkv_batch_info(b, &view)) || !CHECK_OK(pkv_pool_info(e2e_engine, &pool)) ||
      !CHECK_OK(pkv_layer_info(e2e_engine, l, &li)) || !CHECK_OK(pkv_batch_copy(b)) ||
      !CHECK(view.state_slots != NULL && li.kind == PKV_LAYER_STATE &&
             li.state_bytes[0] == sizeof(float) * CONV_FLOATS &&
             li.state_bytes[1] == sizeof(float) * SSM_FLOATS))
    return 0;
  for (uint32_t i = 0; i < view.num_seqs; i++) {
    char *slot = (char *)pool.state_base + (uint64_t)view.state_slots[i] * pool.state_slot_bytes;
    float *conv = (float *)(slot + li.state_offset[0]), *ssm = (float *)(slot + li.state_offset[1]);
    const int32_t r0 = view.query_start[i], n = view.query_start[i + 1] - r0;
    if (view.positions[r0] == 0) {
      memset(conv, 0, sizeof(float) * CONV_FLOATS);
      memset(ssm, 0, sizeof(float) * SSM_FLOATS);
    }
    recurrence(conv, ssm, q + r0 * QH * HD, k + r0 * KVH * HD, v + r0 * KVH * HD, (uint32_t)n,
               out + r0 * QH * HD);
  }
  return 1;
}

/* One layer's attention split over e2e_tp ranks: rank r gets q heads [r * qpr, (r + 1) * qpr)
 * and kv heads [r * kvpr, (r + 1) * kvpr) of every row (qpr = QH / tp, kvpr = KVH / tp), runs
 * pkv_attention on its handle, and its output rows go back to those q heads of out. */
static int attention_on_ranks(pkv_batch *b, uint32_t l, const float *q, const float *k,
                              const float *v, float *out) {
  const uint32_t qpr = QH / e2e_tp, kvpr = KVH / e2e_tp;
  pkv_batch_view view;
  memset(&view, 0, sizeof view);
  view.struct_size = sizeof view;
  if (!CHECK(!e2e_mode->mla && !e2e_mode->specs && qpr * e2e_tp == QH && kvpr * e2e_tp == KVH) ||
      !CHECK_OK(pkv_batch_info(b, &view)))
    return 0;
  const uint32_t n = view.num_tokens;
  float *qr = malloc(sizeof(float) * n * qpr * HD), *orr = malloc(sizeof(float) * n * qpr * HD);
  float *kr = malloc(sizeof(float) * n * kvpr * HD), *vr = malloc(sizeof(float) * n * kvpr * HD);
  int ok = 1;
  for (uint32_t r = 0; ok && r < e2e_tp; r++) {
    for (uint32_t t = 0; t < n; t++) {
      memcpy(qr + t * qpr * HD, q + (t * QH + r * qpr) * HD, sizeof(float) * qpr * HD);
      memcpy(kr + t * kvpr * HD, k + (t * KVH + r * kvpr) * HD, sizeof(float) * kvpr * HD);
      memcpy(vr + t * kvpr * HD, v + (t * KVH + r * kvpr) * HD, sizeof(float) * kvpr * HD);
    }
    pkv_batch *rb = NULL;
    ok = CHECK_OK(pkv_batch_rank(b, r, &rb)) && CHECK(rb != b) &&
         CHECK_OK(pkv_attention(rb, l, qr, kr, vr, orr));
    for (uint32_t t = 0; ok && t < n; t++)
      memcpy(out + (t * QH + r * qpr) * HD, orr + t * qpr * HD, sizeof(float) * qpr * HD);
  }
  free(qr), free(kr), free(vr), free(orr);
  return ok;
}

int attention_on_pkv(void *ctx, uint32_t l, const float *q, const float *k, const float *v,
                     float *out) {
  pkv_batch *b = ctx;
  if (e2e_tp > 1) return attention_on_ranks(b, l, q, k, v, out);
  if (e2e_mode->mla == E2E_DSA) return dsa_on_pkv(b, l, q, k, out);
  if (layer_recurrent(e2e_mode, l)) return recurrence_on_pkv(b, l, q, k, v, out);
  if (layer_source(e2e_mode, l) != l) /* SHARED: its source's cache, nothing written */
    return CHECK_OK(pkv_attention(b, l, q, NULL, NULL, out));
  if (!layer_k_eq_v(e2e_mode, l)) return CHECK_OK(pkv_attention(b, l, q, k, v, out));
  /* K = V, one kv head: the first head of each row of the model's k, v NULL */
  pkv_batch_view view;
  memset(&view, 0, sizeof view);
  view.struct_size = sizeof view;
  if (!CHECK_OK(pkv_batch_info(b, &view))) return 0;
  float *k1 = malloc(sizeof(float) * view.num_tokens * HD);
  for (uint32_t r = 0; r < view.num_tokens; r++) memcpy(k1 + r * HD, k + r * KVH * HD, HD * 4);
  const int ok = CHECK_OK(pkv_attention(b, l, q, k1, NULL, out));
  free(k1);
  return ok;
}
