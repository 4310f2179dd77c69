/*
 * cuda_api.h - the CUDA runtime and cuBLAS calls of `pkv demo --device cuda`, as a table of
 * function pointers filled at run time (dlopen of libcudart.so.13 and libcublas.so.13, then the
 * unversioned names), so that the pkv tool builds without CUDA's headers and still loads and runs
 * on a machine without them. A test fills the same table from the CUDA emulator (tests/simt)
 * through cuda_api_resolve.
 *
 * The types are CUDA's ABI spelled without its headers: cudaError_t, cublasStatus_t and the
 * enums are ints (0 = success), cudaStream_t and cublasHandle_t are opaque pointers.
 */
#ifndef PKV_TOOLS_CUDA_API_H
#define PKV_TOOLS_CUDA_API_H

#include <stddef.h>

/* CUDA's values of the constants the demo passes (driver_types.h, cublas_api.h). */
enum {
  CUDA_API_MEMCPY_HOST_TO_DEVICE = 1, /* cudaMemcpyHostToDevice */
  CUDA_API_HOST_ALLOC_MAPPED = 2,     /* cudaHostAllocMapped */
  CUDA_API_STREAM_NON_BLOCKING = 1,   /* cudaStreamNonBlocking */
  CUDA_API_OP_N = 0,                  /* CUBLAS_OP_N */
  CUDA_API_OP_T = 1,                  /* CUBLAS_OP_T */
  CUDA_API_DEFAULT_MATH = 0           /* CUBLAS_DEFAULT_MATH: f32 GEMMs in f32, no TF32 */
};

typedef struct cuda_api {
  /* the CUDA runtime */
  int (*get_device_count)(int *count);
  int (*set_device)(int device);
  int (*device_malloc)(void **ptr, size_t bytes);
  int (*device_free)(void *ptr);
  int (*host_alloc)(void **ptr, size_t bytes, unsigned int flags);
  int (*free_host)(void *ptr);
  int (*host_get_device_pointer)(void **device, void *host, unsigned int flags);
  int (*copy)(void *dst, const void *src, size_t bytes, int kind);
  int (*stream_create_with_flags)(void **stream, unsigned int flags);
  int (*stream_destroy)(void *stream);
  int (*stream_synchronize)(void *stream);
  const char *(*get_error_string)(int error);
  /* cuBLAS */
  int (*blas_create)(void **handle);
  int (*blas_destroy)(void *handle);
  int (*blas_set_stream)(void *handle, void *stream);
  int (*blas_set_math_mode)(void *handle, int mode);
  /* column-major C[m][n] = alpha op(A) op(B) + beta C, as cublasSgemm */
  int (*blas_sgemm)(void *handle, int transa, int transb, int m, int n, int k, const float *alpha,
                    const float *A, int lda, const float *B, int ldb, const float *beta, float *C,
                    int ldc);
  void *libs[2]; /* the dlopen handles (cudart, cublas); NULL when filled by cuda_api_resolve */
} cuda_api;

/* Fills api from resolve(ctx, name) for each CUDA symbol name (cudaMalloc, cublasSgemm_v2, ...).
 * Returns 0, or -1 with the first name resolve did not know in error[cap]; api is zeroed then. */
int cuda_api_resolve(cuda_api *api, void *(*resolve)(void *ctx, const char *name), void *ctx,
                     char *error, size_t cap);

/* Loads libcudart and libcublas (the .so.13 names, then the unversioned ones) and fills api.
 * Returns 0, or -1 with what is missing in error[cap] (the library names tried and dlerror's
 * words, or a symbol a library lacks); nothing stays loaded then. */
int cuda_api_load(cuda_api *api, char *error, size_t cap);

/* Unloads what cuda_api_load loaded; zeroes api. Accepts a zeroed api. */
void cuda_api_unload(cuda_api *api);

/* A cuBLAS status's name ("CUBLAS_STATUS_INVALID_VALUE"), or "cuBLAS status N". */
const char *cuda_api_blas_status(int status, char *buf, size_t cap);

#endif /* PKV_TOOLS_CUDA_API_H */
