/*
 * model_cuda.h - the tiny transformer's GEMMs on cuBLAS (`pkv demo --device cuda`): the weights
 * are uploaded once to device memory; each projection is one cublasSgemm on the engine's stream
 * (the model is f32, so Sgemm in f32 math: no TF32). The activations (the model's workspace) are
 * pinned host memory mapped into the device's address space: the host's own parts of the forward
 * (norms, RoPE, SwiGLU, sampling) read and write them in place, pkv_attention and cuBLAS read and
 * write them through the same pointers (unified addressing), and no copy is queued between the
 * two. A GEMM returns once the stream has finished it, since the host's code reads its result
 * next; attention is not waited for, as the GEMM after it is on the same stream.
 *
 * The CUDA calls go through a cuda_api table (cuda_api.h): dlopen'ed libraries in the tool, the
 * CUDA emulator's functions in the test emu_demo_gemm.
 */
#ifndef PKV_TOOLS_MODEL_CUDA_H
#define PKV_TOOLS_MODEL_CUDA_H

#include <stdint.h>

#include "cuda_api.h"
#include "model.h"

typedef struct model_cuda_weight {
  const float *host; /* the model's weight [in][out] */
  float *device;     /* its copy in device memory */
} model_cuda_weight;

typedef struct model_cuda {
  const cuda_api *api;
  void *blas;   /* cublasHandle_t */
  void *stream; /* cudaStream_t: the engine's */
  model_cuda_weight *weights;
  uint32_t num_weights; /* per layer wqkv, wo, w_gate_up, w_down; then lm_head */
  uint64_t weight_bytes, num_gemms;
  model_gemm_backend backend; /* for model_workspace.backend */
  char error[256];            /* the failure of init, or of the last GEMM or allocation */
} model_cuda;

/* Creates a cuBLAS handle on stream and uploads m's GEMM weights; g->backend then runs m's GEMMs.
 * 0, or -1 with g->error set and nothing held. m must outlive g. */
int model_cuda_init(model_cuda *g, const cuda_api *api, void *stream, const model *m);

/* Frees the device weights and the handle. Accepts a zeroed g. */
void model_cuda_free(model_cuda *g);

#endif /* PKV_TOOLS_MODEL_CUDA_H */
