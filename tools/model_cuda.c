/*
 * model_cuda.c - the tiny transformer's GEMMs on cuBLAS (model_cuda.h).
 *
 * Row-major Y[M][N] = X[M][K] * W[K][N] is, read column-major as cuBLAS reads memory,
 * Y^T[N][M] = W^T[N][K] * X^T[K][M]: a row-major [R][C] array with leading dimension C is the
 * column-major C x R matrix. So each projection is cublasSgemm(N, N, m = N, n = M, k = K,
 * W (lda N), X (ldb K), Y (ldc N)), with no transpose and no copy of the weights' layout.
 */
#include "model_cuda.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cuda_fail(model_cuda *g, const char *what, int err) {
  snprintf(g->error, sizeof g->error, "%s: %s (CUDA error %d)", what, g->api->get_error_string(err),
           err);
  return -1;
}

static int blas_fail(model_cuda *g, const char *what, int status) {
  char buf[32];
  snprintf(g->error, sizeof g->error, "%s: %s", what,
           cuda_api_blas_status(status, buf, sizeof buf));
  return -1;
}

static const model_cuda_weight *find_weight(const model_cuda *g, const float *host) {
  for (uint32_t i = 0; i < g->num_weights; i++)
    if (g->weights[i].host == host) return &g->weights[i];
  return NULL;
}

static int gemm(void *ctx, uint32_t M, uint32_t N, uint32_t K, const float *A, const float *W,
                float *C) {
  model_cuda *g = ctx;
  const model_cuda_weight *w = find_weight(g, W);
  if (!w) {
    snprintf(g->error, sizeof g->error, "GEMM of a matrix that is not one of the model's weights");
    return -1;
  }
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX) {
    snprintf(g->error, sizeof g->error, "GEMM %u x %u x %u: cuBLAS takes int dimensions", M, N, K);
    return -1;
  }
  const float one = 1.0f, zero = 0.0f;
  int s = g->api->blas_sgemm(g->blas, CUDA_API_OP_N, CUDA_API_OP_N, (int)N, (int)M, (int)K, &one,
                             w->device, (int)N, A, (int)K, &zero, C, (int)N);
  if (s != 0) return blas_fail(g, "cublasSgemm", s);
  g->num_gemms++;
  /* the host reads C next (a residual add, SwiGLU, the argmax) */
  const int e = g->api->stream_synchronize(g->stream);
  return e == 0 ? 0 : cuda_fail(g, "cudaStreamSynchronize after cublasSgemm", e);
}

/* Pinned host memory mapped into the device: the same pointer on both sides, which unified
 * addressing (every 64-bit CUDA platform) guarantees and this checks. */
static void *alloc(void *ctx, size_t bytes) {
  model_cuda *g = ctx;
  void *host = NULL, *device = NULL;
  int e = g->api->host_alloc(&host, bytes, CUDA_API_HOST_ALLOC_MAPPED);
  if (e != 0) {
    cuda_fail(g, "cudaHostAlloc (mapped) of the activations", e);
    return NULL;
  }
  e = g->api->host_get_device_pointer(&device, host, 0);
  if (e != 0 || device != host) {
    if (e != 0)
      cuda_fail(g, "cudaHostGetDevicePointer", e);
    else
      snprintf(g->error, sizeof g->error,
               "mapped host memory has another address on the device: unified addressing needed");
    g->api->free_host(host);
    return NULL;
  }
  return host;
}

static void release(void *ctx, void *p) {
  model_cuda *g = ctx;
  if (p) g->api->free_host(p);
}

static int upload(model_cuda *g, const float *host, size_t floats) {
  model_cuda_weight *w = &g->weights[g->num_weights];
  int e = g->api->device_malloc((void **)&w->device, floats * sizeof(float));
  if (e != 0) return cuda_fail(g, "cudaMalloc of a weight", e);
  w->host = host;
  g->num_weights++;
  g->weight_bytes += floats * sizeof(float);
  e = g->api->copy(w->device, host, floats * sizeof(float), CUDA_API_MEMCPY_HOST_TO_DEVICE);
  return e == 0 ? 0 : cuda_fail(g, "cudaMemcpy of a weight", e);
}

static int upload_all(model_cuda *g, const model *m) {
  const size_t H = m->c.hidden, NI = m->c.intermediate, qkv = m->q_dim + 2 * m->kv_dim;
  g->weights = calloc(4 * (size_t)m->c.num_layers + 1, sizeof *g->weights);
  if (!g->weights) {
    snprintf(g->error, sizeof g->error, "out of memory");
    return -1;
  }
  for (uint32_t l = 0; l < m->c.num_layers; l++) {
    const model_layer *L = &m->layers[l];
    if (upload(g, L->wqkv, H * qkv) != 0 || upload(g, L->wo, (size_t)m->q_dim * H) != 0 ||
        upload(g, L->w_gate_up, H * 2 * NI) != 0 || upload(g, L->w_down, NI * H) != 0)
      return -1;
  }
  return upload(g, m->lm_head, H * m->c.vocab);
}

int model_cuda_init(model_cuda *g, const cuda_api *api, void *stream, const model *m) {
  memset(g, 0, sizeof *g);
  g->api = api, g->stream = stream;
  g->backend.ctx = g, g->backend.gemm = gemm, g->backend.alloc = alloc, g->backend.free = release;
  int s = api->blas_create(&g->blas);
  if (s != 0) {
    g->blas = NULL;
    blas_fail(g, "cublasCreate", s);
  } else if ((s = api->blas_set_stream(g->blas, stream)) != 0) {
    blas_fail(g, "cublasSetStream", s);
  } else if ((s = api->blas_set_math_mode(g->blas, CUDA_API_DEFAULT_MATH)) != 0) {
    blas_fail(g, "cublasSetMathMode", s);
  } else if (upload_all(g, m) == 0) {
    return 0;
  }
  char error[sizeof g->error];
  memcpy(error, g->error, sizeof error);
  model_cuda_free(g);
  g->api = api;
  memcpy(g->error, error, sizeof error);
  return -1;
}

void model_cuda_free(model_cuda *g) {
  for (uint32_t i = 0; i < g->num_weights; i++) g->api->device_free(g->weights[i].device);
  free(g->weights);
  if (g->blas) g->api->blas_destroy(g->blas);
  memset(g, 0, sizeof *g);
}
