// emu_demo_gemm: `pkv demo --device cuda`'s GEMM glue (tools/model_cuda.c, tools/cuda_api.c) on
// the emulator's CUDA runtime and cuBLAS subset (tests/simt/simt_cublas.cpp), against the host's
// GEMM.
//   1. cuda_api_resolve fills the table from the emulator's functions, and names what it lacks.
//   2. The emulated cublasSgemm against an fp64 column-major reference: every transpose pair, odd
//      sizes, padded leading dimensions, alpha and beta (beta 0 over NaN-filled memory), and its
//      argument checks (nothing written on a refusal).
//   3. The glue's GEMM of each of the model's weights (each shape the forward uses: wqkv, wo,
//      gate_up, down, lm_head) at 1, 3 and 17 rows against model_host_gemm, on mapped activations.
//   4. A whole forward pass with the glue against the host's, attention on the host: the same
//      greedy tokens where the host's choice is no near tie, one GEMM per weight.
// The exit code: 0, or 1 with the first failures printed.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "emu_cuda_api.h"

extern "C" {
#include "model.h"
#include "model_cuda.h"
}

namespace {

int g_failures = 0;

void check(bool ok, const std::string &what) {
  if (ok) return;
  if (++g_failures <= 10) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

uint64_t g_rng = 12345;
float rand_unit() {  // [-1, 1)
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return float(g_rng >> 40) / 8388608.0f - 1.0f;
}

void test_resolve(cuda_api *api) {
  char error[128] = "";
  cuda_api partial;
  check(cuda_api_resolve(&partial, emu_cuda_symbol, const_cast<char *>("cublasSgemm_v2"), error,
                         sizeof error) == -1 &&
            std::strstr(error, "cublasSgemm_v2") && !partial.blas_create,
        std::string("a missing symbol is named and leaves a zeroed table: ") + error);
  check(emu_cuda_api_load(api, error, sizeof error) == 0,
        std::string("the emulator's table: ") + error);
}

// C = alpha op(A) op(B) + beta C, column-major, in double.
void ref_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
              const std::vector<float> &A, int lda, const std::vector<float> &B, int ldb,
              float beta, std::vector<double> &C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int l = 0; l < k; ++l) {
        const double a = ta == CUBLAS_OP_N ? A[i + size_t(l) * lda] : A[l + size_t(i) * lda];
        const double b = tb == CUBLAS_OP_N ? B[l + size_t(j) * ldb] : B[j + size_t(l) * ldb];
        acc += a * b;
      }
      double &c = C[i + size_t(j) * ldc];
      c = alpha * acc + (beta != 0 ? beta * c : 0.0);
    }
}

void sgemm_case(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                float beta) {
  const int lda = (ta == CUBLAS_OP_N ? m : k) + 2, ldb = (tb == CUBLAS_OP_N ? k : n) + 1,
            ldc = m + 3;
  std::vector<float> A(size_t(lda) * (ta == CUBLAS_OP_N ? k : m)),
      B(size_t(ldb) * (tb == CUBLAS_OP_N ? n : k));
  for (float &x : A) x = rand_unit();
  for (float &x : B) x = rand_unit();
  float *dA, *dB, *dC;  // device memory: NaN until written
  cudaMalloc(reinterpret_cast<void **>(&dA), A.size() * 4);
  cudaMalloc(reinterpret_cast<void **>(&dB), B.size() * 4);
  cudaMalloc(reinterpret_cast<void **>(&dC), size_t(ldc) * n * 4);
  cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
  std::vector<double> want(size_t(ldc) * n);
  if (beta != 0) {  // else C stays NaN: beta 0 must not read it
    std::vector<float> C0(want.size());
    for (size_t i = 0; i < C0.size(); ++i) want[i] = C0[i] = rand_unit();
    cudaMemcpy(dC, C0.data(), C0.size() * 4, cudaMemcpyHostToDevice);
  }
  const float alpha = 1.5f;
  ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, want, ldc);
  const cublasStatus_t s =
      cublasSgemm(h, ta, tb, m, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc);
  cudaDeviceSynchronize();  // the GEMM is stream work: queued until now under SIMT_STREAMS=deferred
  char what[96];
  std::snprintf(what, sizeof what, "sgemm %c%c m %d n %d k %d beta %g", "NTC"[ta], "NTC"[tb], m, n,
                k, beta);
  check(s == CUBLAS_STATUS_SUCCESS, std::string(what) + ": status");
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const double w = want[i + size_t(j) * ldc], got = dC[i + size_t(j) * ldc];
      check(std::fabs(got - w) <= 1e-5 * (1 + k), std::string(what) + ": value");
    }
  cudaFree(dA), cudaFree(dB), cudaFree(dC);
}

void test_sgemm_refusals(cublasHandle_t h) {
  float A[16], B[16], C[16];
  for (int i = 0; i < 16; ++i) A[i] = B[i] = 1.0f, C[i] = -7.0f;
  const float one = 1.0f, zero = 0.0f;
  const auto op = CUBLAS_OP_N;
  check(cublasSgemm(nullptr, op, op, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 2) ==
            CUBLAS_STATUS_NOT_INITIALIZED,
        "a NULL handle: CUBLAS_STATUS_NOT_INITIALIZED");
  const cublasStatus_t bad[] = {
      cublasSgemm(h, cublasOperation_t(7), op, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 2),
      cublasSgemm(h, op, op, -1, 2, 2, &one, A, 2, B, 2, &zero, C, 2),
      cublasSgemm(h, op, op, 2, 2, -1, &one, A, 2, B, 2, &zero, C, 2),
      cublasSgemm(h, op, op, 3, 2, 2, &one, A, 2, B, 2, &zero, C, 3),           // lda < m
      cublasSgemm(h, CUBLAS_OP_T, op, 2, 2, 3, &one, A, 2, B, 3, &zero, C, 2),  // lda < k
      cublasSgemm(h, op, CUBLAS_OP_T, 2, 3, 2, &one, A, 2, B, 2, &zero, C, 2),  // ldb < n
      cublasSgemm(h, op, op, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 1),           // ldc < m
      cublasSgemm(h, op, op, 0, 2, 2, &one, A, 0, B, 2, &zero, C, 1),           // lda < 1
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
    check(bad[i] == CUBLAS_STATUS_INVALID_VALUE,
          "refusal " + std::to_string(i) + ": CUBLAS_STATUS_INVALID_VALUE");
  bool untouched = true;
  for (float c : C) untouched = untouched && c == -7.0f;
  check(untouched, "a refused sgemm wrote C");
  check(cublasSgemm(h, op, op, 0, 2, 2, &one, A, 1, B, 2, &zero, C, 1) == CUBLAS_STATUS_SUCCESS &&
            C[0] == -7.0f,
        "m 0: success, nothing written");
  check(cublasSetMathMode(h, cublasMath_t(99)) == CUBLAS_STATUS_INVALID_VALUE,
        "an unknown math mode is refused");
}

// A GEMM on a capturing stream is recorded, not run; each replay reads the inputs as they are
// then (here: A rewritten between replays), as cuBLAS's kernels in a CUDA graph do.
void test_sgemm_capture(cublasHandle_t h) {
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
  float *A, *B, *C;  // 2 x 2 each, column-major
  cudaMalloc(reinterpret_cast<void **>(&A), 16), cudaMalloc(reinterpret_cast<void **>(&B), 16);
  cudaMalloc(reinterpret_cast<void **>(&C), 16);
  const float b_vals[4] = {1, 0, 0, 1}, one = 1.0f, zero = 0.0f;  // B = I: C = A
  cudaMemcpy(B, b_vals, 16, cudaMemcpyHostToDevice);
  cublasSetStream(h, stream);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "capture");
  check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, A, 2, B, 2, &zero, C, 2) ==
            CUBLAS_STATUS_SUCCESS,
        "sgemm while capturing");
  check(cudaStreamEndCapture(stream, &graph) == cudaSuccess &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess,
        "end capture, instantiate");
  check(std::isnan(C[0]), "a captured GEMM does not run at capture");
  for (float base : {10.0f, 20.0f}) {
    const float a_vals[4] = {base, base + 1, base + 2, base + 3};
    cudaMemcpy(A, a_vals, 16, cudaMemcpyHostToDevice);
    check(cudaGraphLaunch(exec, stream) == cudaSuccess && cudaStreamSynchronize(stream) == 0,
          "replay");
    for (int i = 0; i < 4; ++i) check(C[i] == a_vals[i], "a replay reads A as it is then");
  }
  cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
  cublasSetStream(h, nullptr);
  cudaStreamDestroy(stream);
  cudaFree(A), cudaFree(B), cudaFree(C);
}

void test_sgemm() {
  cublasHandle_t h = nullptr;
  check(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
  const int shapes[][3] = {{1, 1, 1}, {5, 7, 3}, {17, 9, 33}, {4, 1, 40}};
  for (cublasOperation_t ta : ops)
    for (cublasOperation_t tb : ops)
      for (const auto &s : shapes) {
        sgemm_case(h, ta, tb, s[0], s[1], s[2], 0.0f);
        sgemm_case(h, ta, tb, s[0], s[1], s[2], 0.5f);
      }
  test_sgemm_refusals(h);
  test_sgemm_capture(h);
  check(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "cublasDestroy");
}

model_config small_config() {
  model_config c;
  std::memset(&c, 0, sizeof c);
  // odd sizes: 48 hidden, q_dim 48, kv_dim 16 (qkv 80), SwiGLU 37 (gate_up 74), vocab 101
  c.num_layers = 2, c.hidden = 48, c.num_q_heads = 3, c.num_kv_heads = 1, c.head_dim = 16;
  c.intermediate = 37, c.vocab = 101, c.max_positions = 64, c.seed = 5;
  c.bias_token = -1;
  return c;
}

void test_glue_gemms(model_cuda *g, const model *m) {
  const uint32_t H = m->c.hidden, NI = m->c.intermediate, qkv = m->q_dim + 2 * m->kv_dim;
  struct Shape {
    const char *name;
    const float *w;
    uint32_t in, out;
  };
  std::vector<Shape> shapes;
  for (uint32_t l = 0; l < m->c.num_layers; ++l) {
    const model_layer &L = m->layers[l];
    shapes.push_back({"wqkv", L.wqkv, H, qkv});
    shapes.push_back({"wo", L.wo, m->q_dim, H});
    shapes.push_back({"w_gate_up", L.w_gate_up, H, 2 * NI});
    shapes.push_back({"w_down", L.w_down, NI, H});
  }
  shapes.push_back({"lm_head", m->lm_head, H, m->c.vocab});
  const model_gemm_backend &b = g->backend;
  for (const Shape &s : shapes)
    for (uint32_t rows : {1u, 3u, 17u}) {
      float *A = static_cast<float *>(b.alloc(b.ctx, size_t(rows) * s.in * 4));
      float *C = static_cast<float *>(b.alloc(b.ctx, size_t(rows) * s.out * 4));
      std::vector<float> want(size_t(rows) * s.out);
      for (size_t i = 0; i < size_t(rows) * s.in; ++i) A[i] = rand_unit();
      model_host_gemm(rows, s.out, s.in, A, s.w, want.data());
      const std::string what = std::string(s.name) + " rows " + std::to_string(rows);
      check(b.gemm(b.ctx, rows, s.out, s.in, A, s.w, C) == 0, what + ": " + g->error);
      for (size_t i = 0; i < want.size(); ++i)
        check(std::fabs(C[i] - want[i]) <= 1e-5f * (1 + std::fabs(want[i])) + 1e-6f * s.in,
              what + ": value");
      b.free(b.ctx, A), b.free(b.ctx, C);
    }
  float x[4] = {0, 0, 0, 0}, y[4];
  check(b.gemm(b.ctx, 1, 2, 2, x, x, y) == -1 && std::strstr(g->error, "not one of the model"),
        std::string("a GEMM of a non-weight is refused: ") + g->error);
}

// Causal attention of one sequence whose rows are positions 0 .. rows - 1, on the host, in
// double: q [rows][q_heads][D], k, v [rows][kv_heads][D] -> out like q.
struct Pass {
  const model *m;
  uint32_t rows;
};

int host_attention(void *ctx, uint32_t, const float *q, const float *k, const float *v,
                   float *out) {
  const Pass *pass = static_cast<const Pass *>(ctx);
  const model *m = pass->m;
  const uint32_t D = m->c.head_dim, Hq = m->c.num_q_heads, Hkv = m->c.num_kv_heads;
  const uint32_t rows = pass->rows;
  std::vector<double> p(rows);
  for (uint32_t r = 0; r < rows; ++r)
    for (uint32_t h = 0; h < Hq; ++h) {
      const float *qr = q + (size_t(r) * Hq + h) * D;
      const uint32_t kh = h / (Hq / Hkv);
      double mx = -INFINITY, sum = 0;
      for (uint32_t t = 0; t <= r; ++t) {
        double s = 0;
        for (uint32_t d = 0; d < D; ++d) s += double(qr[d]) * k[(size_t(t) * Hkv + kh) * D + d];
        p[t] = s / std::sqrt(double(D));
        mx = std::max(mx, p[t]);
      }
      for (uint32_t t = 0; t <= r; ++t) sum += (p[t] = std::exp(p[t] - mx));
      for (uint32_t d = 0; d < D; ++d) {
        double o = 0;
        for (uint32_t t = 0; t <= r; ++t) o += p[t] * v[(size_t(t) * Hkv + kh) * D + d];
        out[(size_t(r) * Hq + h) * D + d] = float(o / sum);
      }
    }
  return 0;
}

// A prompt of `rows` tokens through the model twice, host GEMMs against the glue's: the logits
// of every row within f32 rounding, the same greedy tokens unless the host's was a near tie.
void test_forward(model_cuda *g, const model *mp, uint32_t rows) {
  const model &m = *mp;
  Pass pass = {mp, rows};
  std::vector<int32_t> tokens(rows), positions(rows), sample_rows(rows), want(rows), got(rows);
  for (uint32_t r = 0; r < rows; ++r)
    tokens[r] = int32_t((rand_unit() + 1) * 0.5f * float(m.c.vocab - 1)), positions[r] = r,
    sample_rows[r] = r;
  model_workspace host, cuda;
  std::memset(&host, 0, sizeof host), std::memset(&cuda, 0, sizeof cuda);
  cuda.backend = &g->backend;
  const uint64_t gemms = g->num_gemms;
  const std::string what = "forward of " + std::to_string(rows) + " rows";
  check(model_forward(mp, &host, tokens.data(), positions.data(), rows, sample_rows.data(), rows,
                      host_attention, &pass, want.data()) == 0,
        what + ": host");
  check(model_forward(mp, &cuda, tokens.data(), positions.data(), rows, sample_rows.data(), rows,
                      host_attention, &pass, got.data()) == 0,
        what + ": glue: " + g->error);
  check(g->num_gemms - gemms == 4 * m.c.num_layers + 1, what + ": one GEMM per weight");
  for (size_t i = 0; i < size_t(rows) * m.c.vocab; ++i)
    check(std::fabs(cuda.logits[i] - host.logits[i]) <= 1e-4f * (1 + std::fabs(host.logits[i])),
          what + ": logit " + std::to_string(i));
  for (uint32_t r = 0; r < rows; ++r)
    check(got[r] == want[r] || host.margin[r] < 1e-3f,
          what + ": token of row " + std::to_string(r));
  check(host.margin[0] >= 0 && cuda.margin[0] >= 0, what + ": margins");
  model_workspace_free(&host), model_workspace_free(&cuda);
  check(cuda.backend == &g->backend, what + ": the backend stays across model_workspace_free");
}

}  // namespace

int main() {
  cuda_api api;
  test_resolve(&api);
  test_sgemm();
  const model_config c = small_config();
  model m;
  if (model_init(&m, &c) != 0 || !api.blas_sgemm) {
    std::fprintf(stderr, "FAIL: model_init or the table\n");
    return 1;
  }
  void *stream = nullptr;
  check(api.stream_create_with_flags(&stream, CUDA_API_STREAM_NON_BLOCKING) == 0,
        "cudaStreamCreateWithFlags");
  model_cuda g;
  if (model_cuda_init(&g, &api, stream, &m) != 0) {
    std::fprintf(stderr, "FAIL: model_cuda_init: %s\n", g.error);
    return 1;
  }
  check(g.num_weights == 4 * c.num_layers + 1, "one device copy per GEMM weight");
  test_glue_gemms(&g, &m);
  test_forward(&g, &m, 1);
  test_forward(&g, &m, 13);
  model_cuda_free(&g);
  api.stream_destroy(stream);
  model_free(&m);
  if (g_failures)
    std::fprintf(stderr, "%d failures\n", g_failures);
  else
    std::printf("emu_demo_gemm: ok\n");
  return g_failures ? 1 : 0;
}
