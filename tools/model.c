/*
 * model.c - the tiny transformer of `pkv demo` (model.h). Row-major weights [in][out], so every
 * projection is one GEMM Y[rows][out] = X[rows][in] * W[in][out]: OpenBLAS's cblas_sgemm when the
 * build found it, else a plain C loop.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef PKV_DEMO_OPENBLAS
#include <cblas.h>
#endif

const char *model_gemm_name(void) {
#ifdef PKV_DEMO_OPENBLAS
  return "OpenBLAS (cblas_sgemm)";
#else
  return "plain C (OpenBLAS not found at build time)";
#endif
}

void model_host_gemm(uint32_t M, uint32_t N, uint32_t K, const float *A, const float *B, float *C) {
#ifdef PKV_DEMO_OPENBLAS
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)K, 1.0f, A, (int)K, B,
              (int)N, 0.0f, C, (int)N);
#else
  for (uint32_t i = 0; i < M; i++) {
    float *c = C + (size_t)i * N;
    memset(c, 0, N * sizeof *c);
    for (uint32_t k = 0; k < K; k++) {
      const float a = A[(size_t)i * K + k], *b = B + (size_t)k * N;
      for (uint32_t j = 0; j < N; j++) c[j] += a * b[j];
    }
  }
#endif
}

/* C[M][N] = A[M][K] * W[K][N] on the workspace's backend; 0, or -1. */
static int gemm(const model_workspace *ws, uint32_t M, uint32_t N, uint32_t K, const float *A,
                const float *W, float *C) {
  if (ws->backend) return ws->backend->gemm(ws->backend->ctx, M, N, K, A, W, C);
  model_host_gemm(M, N, K, A, W, C);
  return 0;
}

/* ---------------------------------------------------------------- weights */
static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* n values uniform in [-scale, scale), from the seed's stream. */
static float *random_tensor(uint64_t *rng, size_t n, float scale, uint64_t *count) {
  float *t = malloc(n * sizeof *t);
  if (!t) return NULL;
  for (size_t i = 0; i < n; i++)
    t[i] = ((float)(splitmix(rng) >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
  *count += n;
  return t;
}

static float *ones(size_t n, uint64_t *count) {
  float *t = malloc(n * sizeof *t);
  if (!t) return NULL;
  for (size_t i = 0; i < n; i++) t[i] = 1.0f;
  *count += n;
  return t;
}

static int rope_init(model *m) {
  const uint32_t half = m->c.head_dim / 2;
  const size_t n = (size_t)m->c.max_positions * half;
  m->rope_cos = malloc(n * sizeof(float));
  m->rope_sin = malloc(n * sizeof(float));
  if (!m->rope_cos || !m->rope_sin) return -1;
  for (uint32_t p = 0; p < m->c.max_positions; p++)
    for (uint32_t i = 0; i < half; i++) {
      double angle = p * pow(10000.0, -2.0 * i / m->c.head_dim);
      m->rope_cos[(size_t)p * half + i] = (float)cos(angle);
      m->rope_sin[(size_t)p * half + i] = (float)sin(angle);
    }
  return 0;
}

int model_init(model *m, const model_config *c) {
  memset(m, 0, sizeof *m);
  m->c = *c;
  m->q_dim = c->num_q_heads * c->head_dim;
  m->kv_dim = c->num_kv_heads * c->head_dim;
  uint64_t rng = c->seed, *n = &m->num_params;
  const uint32_t H = c->hidden, NI = c->intermediate, qkv = m->q_dim + 2 * m->kv_dim;
  m->layers = calloc(c->num_layers, sizeof *m->layers);
  if (!m->layers || rope_init(m) != 0) return -1;
  m->embed = random_tensor(&rng, (size_t)c->vocab * H, 1.0f, n);
  int ok = m->embed != NULL;
  for (uint32_t l = 0; l < c->num_layers && ok; l++) {
    model_layer *L = &m->layers[l];
    L->attn_norm = ones(H, n);
    L->wqkv = random_tensor(&rng, (size_t)H * qkv, sqrtf(3.0f / H), n);
    L->wo = random_tensor(&rng, (size_t)m->q_dim * H, sqrtf(3.0f / m->q_dim), n);
    L->mlp_norm = ones(H, n);
    L->w_gate_up = random_tensor(&rng, (size_t)H * 2 * NI, sqrtf(3.0f / H), n);
    L->w_down = random_tensor(&rng, (size_t)NI * H, sqrtf(3.0f / NI), n);
    ok = L->attn_norm && L->wqkv && L->wo && L->mlp_norm && L->w_gate_up && L->w_down;
  }
  m->final_norm = ok ? ones(H, n) : NULL;
  m->lm_head = ok ? random_tensor(&rng, (size_t)H * c->vocab, sqrtf(3.0f / H), n) : NULL;
  return m->final_norm && m->lm_head ? 0 : -1;
}

void model_free(model *m) {
  for (uint32_t l = 0; m->layers && l < m->c.num_layers; l++) {
    model_layer *L = &m->layers[l];
    free(L->attn_norm), free(L->wqkv), free(L->wo), free(L->mlp_norm), free(L->w_gate_up),
        free(L->w_down);
  }
  free(m->layers), free(m->embed), free(m->final_norm), free(m->lm_head);
  free(m->rope_cos), free(m->rope_sin);
  memset(m, 0, sizeof *m);
}

static float *ws_alloc(const model_workspace *ws, size_t floats) {
  const model_gemm_backend *b = ws->backend;
  return b ? b->alloc(b->ctx, floats * sizeof(float)) : malloc(floats * sizeof(float));
}

void model_workspace_free(model_workspace *ws) {
  float *bufs[] = {ws->x, ws->h,   ws->qkv, ws->q,      ws->k,
                   ws->v, ws->att, ws->ff,  ws->logits, ws->margin};
  const model_gemm_backend *b = ws->backend;
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (b)
      b->free(b->ctx, bufs[i]);
    else
      free(bufs[i]);
  memset(ws, 0, sizeof *ws);
  ws->backend = b;
}

static int workspace_reserve(const model *m, model_workspace *ws, uint32_t rows) {
  if (rows <= ws->max_rows) return 0;
  model_workspace_free(ws);
  const size_t r = rows, H = m->c.hidden;
  ws->x = ws_alloc(ws, r * H);
  ws->h = ws_alloc(ws, r * H);
  ws->qkv = ws_alloc(ws, r * (m->q_dim + 2 * m->kv_dim));
  ws->q = ws_alloc(ws, r * m->q_dim);
  ws->k = ws_alloc(ws, r * m->kv_dim);
  ws->v = ws_alloc(ws, r * m->kv_dim);
  ws->att = ws_alloc(ws, r * m->q_dim);
  ws->ff = ws_alloc(ws, r * 2 * m->c.intermediate);
  ws->logits = ws_alloc(ws, r * m->c.vocab);
  ws->margin = ws_alloc(ws, r);
  ws->max_rows = rows;
  if (ws->x && ws->h && ws->qkv && ws->q && ws->k && ws->v && ws->att && ws->ff && ws->logits &&
      ws->margin)
    return 0;
  model_workspace_free(ws);
  return -1;
}

/* ---------------------------------------------------------------- forward */
/* out[r] = x[r] / rms(x[r]) * w */
static void rms_norm(const float *x, const float *w, float *out, uint32_t rows, uint32_t n) {
  for (uint32_t r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * n;
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
    const float inv = (float)(1.0 / sqrt(ss / n + 1e-6));
    for (uint32_t i = 0; i < n; i++) out[(size_t)r * n + i] = xr[i] * inv * w[i];
  }
}

/* Rotates pairs (i, i + half) of every head of x [rows][heads][head_dim] by its position. */
static void rope(const model *m, float *x, uint32_t rows, uint32_t heads, const int32_t *pos) {
  const uint32_t D = m->c.head_dim, half = D / 2;
  for (uint32_t r = 0; r < rows; r++) {
    const float *cs = m->rope_cos + (size_t)pos[r] * half,
                *sn = m->rope_sin + (size_t)pos[r] * half;
    for (uint32_t h = 0; h < heads; h++) {
      float *v = x + ((size_t)r * heads + h) * D;
      for (uint32_t i = 0; i < half; i++) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = a * sn[i] + b * cs[i];
      }
    }
  }
}

/* x += attention(norm(x)) for one layer. */
static int attention_block(const model *m, model_workspace *ws, uint32_t l, const int32_t *pos,
                           uint32_t rows, model_attention_fn attend, void *ctx) {
  const model_layer *L = &m->layers[l];
  const uint32_t H = m->c.hidden, qd = m->q_dim, kvd = m->kv_dim, w = qd + 2 * kvd;
  rms_norm(ws->x, L->attn_norm, ws->h, rows, H);
  if (gemm(ws, rows, w, H, ws->h, L->wqkv, ws->qkv) != 0) return -1;
  for (uint32_t r = 0; r < rows; r++) { /* qkv: [rows][q | k | v] -> q, k, v */
    const float *src = ws->qkv + (size_t)r * w;
    memcpy(ws->q + (size_t)r * qd, src, qd * sizeof(float));
    memcpy(ws->k + (size_t)r * kvd, src + qd, kvd * sizeof(float));
    memcpy(ws->v + (size_t)r * kvd, src + qd + kvd, kvd * sizeof(float));
  }
  rope(m, ws->q, rows, m->c.num_q_heads, pos);
  rope(m, ws->k, rows, m->c.num_kv_heads, pos);
  if (attend(ctx, l, ws->q, ws->k, ws->v, ws->att) != 0) return -1;
  if (gemm(ws, rows, H, qd, ws->att, L->wo, ws->h) != 0) return -1;
  for (size_t i = 0; i < (size_t)rows * H; i++) ws->x[i] += ws->h[i];
  return 0;
}

/* x += down(silu(gate(norm(x))) * up(norm(x))) */
static int mlp_block(const model *m, model_workspace *ws, uint32_t l, uint32_t rows) {
  const model_layer *L = &m->layers[l];
  const uint32_t H = m->c.hidden, NI = m->c.intermediate;
  rms_norm(ws->x, L->mlp_norm, ws->h, rows, H);
  if (gemm(ws, rows, 2 * NI, H, ws->h, L->w_gate_up, ws->ff) != 0) return -1;
  /* in place, [rows][gate | up] -> [rows][NI]: each write lands at or before what is still unread */
  for (uint32_t r = 0; r < rows; r++)
    for (uint32_t j = 0; j < NI; j++) {
      const float g = ws->ff[(size_t)r * 2 * NI + j], u = ws->ff[(size_t)r * 2 * NI + NI + j];
      ws->ff[(size_t)r * NI + j] = g / (1.0f + expf(-g)) * u;
    }
  if (gemm(ws, rows, H, NI, ws->ff, L->w_down, ws->h) != 0) return -1;
  for (size_t i = 0; i < (size_t)rows * H; i++) ws->x[i] += ws->h[i];
  return 0;
}

/* Greedy tokens of the sampled rows: final norm, LM head, argmax (lowest id on ties), and each
 * one's margin over the runner-up. */
static int sample(const model *m, model_workspace *ws, const int32_t *sample_rows, uint32_t n,
                  int32_t *out) {
  const uint32_t H = m->c.hidden, V = m->c.vocab;
  for (uint32_t s = 0; s < n; s++)
    rms_norm(ws->x + (size_t)sample_rows[s] * H, m->final_norm, ws->h + (size_t)s * H, 1, H);
  if (gemm(ws, n, V, H, ws->h, m->lm_head, ws->logits) != 0) return -1;
  for (uint32_t s = 0; s < n; s++) {
    float *lg = ws->logits + (size_t)s * V;
    if (m->c.bias_token >= 0 && (uint32_t)m->c.bias_token < V) lg[m->c.bias_token] += m->c.bias;
    uint32_t best = 0;
    float second = -INFINITY;
    for (uint32_t t = 1; t < V; t++)
      if (lg[t] > lg[best]) {
        second = lg[best];
        best = t;
      } else if (lg[t] > second) {
        second = lg[t];
      }
    out[s] = (int32_t)best;
    ws->margin[s] = V > 1 ? lg[best] - second : INFINITY;
  }
  return 0;
}

int model_forward(const model *m, model_workspace *ws, const int32_t *tokens,
                  const int32_t *positions, uint32_t rows, const int32_t *sample_rows,
                  uint32_t num_samples, model_attention_fn attend, void *ctx, int32_t *out_tokens) {
  if (rows == 0) return 0;
  if (workspace_reserve(m, ws, rows) != 0) return -1;
  const uint32_t H = m->c.hidden;
  for (uint32_t r = 0; r < rows; r++)
    memcpy(ws->x + (size_t)r * H, m->embed + (size_t)tokens[r] * H, H * sizeof(float));
  for (uint32_t l = 0; l < m->c.num_layers; l++) {
    if (attention_block(m, ws, l, positions, rows, attend, ctx) != 0) return -1;
    if (mlp_block(m, ws, l, rows) != 0) return -1;
  }
  return num_samples ? sample(m, ws, sample_rows, num_samples, out_tokens) : 0;
}
