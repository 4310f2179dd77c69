// The emulator's cuBLAS subset: the calls `pkv demo --device cuda`'s GEMM glue (tools/model_cuda.c)
// makes - cublasCreate, cublasDestroy, cublasSetStream, cublasGetStream, cublasSetMathMode,
// cublasSgemm - on host memory, as the emulator's runtime stands memory in for the device's.
//
// Semantics as cuBLAS documents them: column-major matrices; op(A) is m x k, op(B) k x n, C m x n;
// A is stored lda x (transa == N ? k : m), B ldb x (transb == N ? n : k); alpha and beta are host
// pointers (CUBLAS_POINTER_MODE_HOST, the default); beta == 0 means C is not read (the emulator's
// fresh device memory is NaN, so a glue that relies on reading it shows); m == 0 or n == 0 returns
// at once; k == 0 or alpha == 0 scales C by beta alone. The products are summed in f32 in k order
// (cuBLAS's f32 math, no TF32), so a test compares with a tolerance, as against a real GPU.
// Argument checks as cuBLAS makes them: a NULL handle is CUBLAS_STATUS_NOT_INITIALIZED; a bad op,
// a negative m, n or k, or a leading dimension below max(1, rows of the stored matrix) is
// CUBLAS_STATUS_INVALID_VALUE, and nothing is written. A NULL alpha, beta or C (A or B when they
// are read) is CUBLAS_STATUS_INVALID_VALUE here too, where cuBLAS would fault on it.
//
// The GEMM is stream work on the handle's stream (cublasSetStream; the null stream by default),
// submitted as the runtime's launches are (simt_stream.cpp): it runs inside the call in the
// immediate mode, is queued until the host waits in the deferred mode (SIMT_STREAMS=deferred), and
// is recorded into the graph while the stream captures, as cuBLAS's kernels are. The arguments are
// checked, and alpha and beta read, at the call, as cuBLAS reads host-mode scalars.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <new>
#include <vector>

#include "simt_stream_state.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

namespace {

bool valid_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

int max1(int x) { return x > 1 ? x : 1; }

// Element (i, j) of op(X), X stored column-major with leading dimension ld: real matrices, so
// CUBLAS_OP_C is CUBLAS_OP_T.
float op_at(const float *x, int ld, cublasOperation_t op, int i, int j) {
  return op == CUBLAS_OP_N ? x[i + size_t(j) * ld] : x[j + size_t(i) * ld];
}

}  // namespace

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext();
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

// The modes cuBLAS 13 knows, with or without the flag that forbids reduced-precision reductions.
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int base = int(mode) & ~int(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
      base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float *alpha, const float *A, int lda,
                                           const float *B, int ldb, const float *beta, float *C,
                                           int ldc) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 ||
      lda < max1(transa == CUBLAS_OP_N ? m : k) || ldb < max1(transb == CUBLAS_OP_N ? k : n) ||
      ldc < max1(m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (!alpha || !beta || !C) return CUBLAS_STATUS_INVALID_VALUE;
  const float a = *alpha, b = *beta;
  const bool products = k > 0 && a != 0.0f;
  if (products && (!A || !B)) return CUBLAS_STATUS_INVALID_VALUE;
  auto run = [=] {
    // column j: acc[i] summed over l in order, each element as a dot product in k order; l
    // outside i so that op(A)'s column is read along memory when A is not transposed
    std::vector<float> acc(static_cast<size_t>(m));
    for (int j = 0; j < n; ++j) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int l = 0; products && l < k; ++l) {
        const float bl = op_at(B, ldb, transb, l, j);
        for (int i = 0; i < m; ++i) acc[size_t(i)] += op_at(A, lda, transa, i, l) * bl;
      }
      for (int i = 0; i < m; ++i) {
        float &c = C[i + size_t(j) * ldc];
        c = (products ? a * acc[size_t(i)] : 0.0f) + (b != 0.0f ? b * c : 0.0f);
      }
    }
  };
  // a refusal (the stream destroyed, a forbidden capture) is a launch that failed
  return simt::submit_work("cublasSgemm", handle->stream, run, false) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
