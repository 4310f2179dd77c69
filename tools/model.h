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

#include <stddef.h>
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

/* Where a forward pass's GEMMs run and its scratch lives: model_cuda.c's cuBLAS on pinned,
 * mapped host memory. The host's own code (norms, RoPE, SwiGLU, sampling) reads and writes the
 * same scratch, so gemm returns once C is written. */
typedef struct model_gemm_backend {
  void *ctx;
  /* C[M][N] = A[M][K] * W[K][N], row-major; W is one of the model's weights, named by its host
   * pointer; A and C are scratch from alloc. 0, or -1. */
  int (*gemm)(void *ctx, uint32_t M, uint32_t N, uint32_t K, const float *A, const float *W,
              float *C);
  void *(*alloc)(void *ctx, size_t bytes); /* NULL when out of memory */
  void (*free)(void *ctx, void *p);
} model_gemm_backend;

/* Scratch for forward passes of up to max_rows rows; grows on demand. backend: set by the caller
 * before the first pass (NULL = the host's GEMM and malloc); it stays across model_workspace_free.
 * margin[s]: sampled row s's top logit minus its runner-up, after the pass (how near a tie the
 * greedy choice was). */
typedef struct model_workspace {
  uint32_t max_rows;
  float *x, *h, *qkv, *q, *k, *v, *att, *ff, *logits, *margin;
  const model_gemm_backend *backend;
} model_workspace;

/* Builds the model from c (weights from c.seed); 0, or -1 when out of memory. */
int model_init(model *m, const model_config *c);
void model_free(model *m);
void model_workspace_free(model_workspace *ws);

/* One forward pass over rows tokens at their positions; for each of the num_samples rows listed
 * in sample_rows, the greedy next token into out_tokens. Returns 0, or -1 (out of memory, or
 * the attention callback or the backend's GEMM failed). */
int model_forward(const model *m, model_workspace *ws, const int32_t *tokens,
                  const int32_t *positions, uint32_t rows, const int32_t *sample_rows,
                  uint32_t num_samples, model_attention_fn attend, void *ctx, int32_t *out_tokens);

/* The host's GEMM, row-major C[M][N] = A[M][K] * B[K][N] (the reference the CUDA glue's test
 * checks cuBLAS against). */
void model_host_gemm(uint32_t M, uint32_t N, uint32_t K, const float *A, const float *B, float *C);

/* The host GEMM in use: "OpenBLAS (cblas_sgemm)" or "plain C (OpenBLAS not found at build time)". */
const char *model_gemm_name(void);

#endif /* PKV_TOOLS_MODEL_H */
