/*
 * model.h - the tiny transformer of `pkv demo`: deterministic random weights from a seed, a
 * Llama-shaped block (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP), f32, greedy sampling.
 *
 * The model owns weights and GEMMs; attention is the caller's (pkv_attention on pkv's paged pool,
 * or the demo's contiguous baseline), through a callback per layer - exactly the split pkv
 * expects of a host.
 */
#ifndef PKV_TOOLS_MODEL_H
#define PKV_TOOLS_MODEL_H

#include <stdint.h>

typedef struct model_config {
  uint32_t num_layers, hidden, num_q_heads, num_kv_heads, head_dim, intermediate, vocab;
  uint32_t max_positions; /* RoPE table length */
  uint64_t seed;
  int32_t bias_token; /* this token's logit gets + bias (the demo's stop token); -1 = none */
  float bias;
} model_config;

typedef struct model_layer {
  float *attn_norm; /* [hidden] */
  float *wqkv;      /* [hidden][q_dim + 2 * kv_dim]: q, k, v side by side */
  float *wo;        /* [q_dim][hidden] */
  float *mlp_norm;  /* [hidden] */
  float *w_gate_up; /* [hidden][2 * intermediate]: gate, up side by side */
  float *w_down;    /* [intermediate][hidden] */
} model_layer;

typedef struct model {
  model_config c;
  uint32_t q_dim, kv_dim;
  float *embed;               /* [vocab][hidden] */
  model_layer *layers;        /* [num_layers] */
  float *final_norm;          /* [hidden] */
  float *lm_head;             /* [hidden][vocab] */
  float *rope_cos, *rope_sin; /* [max_positions][head_dim / 2] */
  uint64_t num_params;
} model;

/* Attention of one layer for the rows of a forward pass, in row order:
 *   q [rows][num_q_heads][head_dim], k, v [rows][num_kv_heads][head_dim] -> out like q.
 * Returns 0, or -1 (the forward stops). */
typedef int (*model_attention_fn)(void *ctx, uint32_t layer, const float *q, const float *k,
                                  const float *v, float *out);

/* Scratch for forward passes of up to max_rows rows; grows on demand. */
typedef struct model_workspace {
  uint32_t max_rows;
  float *x, *h, *qkv, *q, *k, *v, *att, *ff, *logits;
} model_workspace;

/* Builds the model from c (weights from c.seed); 0, or -1 when out of memory. */
int model_init(model *m, const model_config *c);
void model_free(model *m);
void model_workspace_free(model_workspace *ws);

/* One forward pass over rows tokens at their positions; for each of the num_samples rows listed
 * in sample_rows, the greedy next token into out_tokens. Returns 0, or -1 (out of memory, or
 * the attention callback failed). */
int model_forward(const model *m, model_workspace *ws, const int32_t *tokens,
                  const int32_t *positions, uint32_t rows, const int32_t *sample_rows,
                  uint32_t num_samples, model_attention_fn attend, void *ctx, int32_t *out_tokens);

/* The GEMM in use: "OpenBLAS (cblas_sgemm)" or "plain C (OpenBLAS not found at build time)". */
const char *model_gemm_name(void);

#endif /* PKV_TOOLS_MODEL_H */
