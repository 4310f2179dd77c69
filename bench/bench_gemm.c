/*
 * bench_gemm.c - the prefill's GEMM yardstick (see bench_gemm.h): oneDNN's matmuls when the bench
 * is built with oneDNN (bench_gemm_dnnl.c), OpenBLAS's GEMMs beside them or alone.
 * Debian's OpenBLAS 0.3.21 declares cblas_sbgemm in its header but is built without it, so the
 * build checks the library (PKV_BENCH_SBGEMM) and not the header.
 */
#include "bench_gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "bench_cpu.h"
#include "bench_gemm_dnnl.h"

/* fp32 to bf16 by truncation, to f16 by rounding down: normal numbers only, as the fill's are. */
static uint16_t to_half(float x, gemm_elt elt) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  if (elt == GEMM_BF16) return (uint16_t)(bits >> 16);
  const uint32_t exp = ((bits >> 23) & 0xff) - 127 + 15;
  return (uint16_t)(((bits >> 16) & 0x8000) | (exp << 10) | ((bits >> 13) & 0x3ff));
}

void *bench_gemm_fill(size_t n, gemm_elt elt) {
  void *buf = malloc(n * (elt == GEMM_F32 ? 4 : 2));
  for (size_t i = 0; buf && i < n; i++) {
    const float x = 0.01f * (float)(1 + i % 8);
    if (elt == GEMM_F32)
      ((float *)buf)[i] = x;
    else
      ((uint16_t *)buf)[i] = to_half(x, elt);
  }
  return buf;
}

#ifdef PKV_BENCH_OPENBLAS
#include <cblas.h>

static const char *openblas_library(void) {
  static char text[256];
  snprintf(text, sizeof text, "%s (kernels for %s)", openblas_get_config(),
           openblas_get_corename());
  return text;
}

/* One head's operands: q, k, v [n][hd], s [n][n] (QK^T, fp32), p [n][n] (PV's left side: s
 * itself for sgemm, a bf16 copy for sbgemm), o [n][hd]. The values are small and fixed: only
 * the time matters. */
typedef struct gemm_run {
  int bf16;
  uint32_t n, hd, heads;
  void *q, *k, *v, *p;
  float *s, *o;
} gemm_run;

static int gemm_heads(void *arg) {
  const gemm_run *g = arg;
  const int n = (int)g->n, hd = (int)g->hd;
  for (uint32_t h = 0; h < g->heads; h++) {
#ifdef PKV_BENCH_SBGEMM
    if (g->bf16) {
      cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, g->q, hd, g->k, hd,
                   0.0f, g->s, n);
      cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, g->p, n, g->v, hd,
                   0.0f, g->o, hd);
      continue;
    }
#endif
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, g->q, hd, g->k, hd, 0.0f,
                g->s, n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, g->p, n, g->v, hd, 0.0f,
                g->o, hd);
  }
  return 0;
}

static double openblas_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads,
                              uint32_t threads, uint32_t max_runs, double *busy) {
  gemm_run g = {strcmp(name, "sbgemm") == 0,
                n,
                hd,
                heads / 2 ? heads / 2 : 1,
                NULL,
                NULL,
                NULL,
                NULL,
                NULL,
                NULL};
  const gemm_elt elt = g.bf16 ? GEMM_BF16 : GEMM_F32;
  const size_t nh = (size_t)n * hd, nn = (size_t)n * n;
  g.q = bench_gemm_fill(nh, elt), g.k = bench_gemm_fill(nh, elt), g.v = bench_gemm_fill(nh, elt);
  g.s = bench_gemm_fill(nn, GEMM_F32), g.o = bench_gemm_fill(nh, GEMM_F32);
  g.p = g.bf16 ? bench_gemm_fill(nn, elt) : g.s;
  double sec = -1.0;
  openblas_set_num_threads((int)threads);
  if (g.q && g.k && g.v && g.s && g.o && g.p)
    sec = bench_time_calls(gemm_heads, &g, max_runs, threads, busy);
  if (g.p != g.s) free(g.p);
  free(g.q), free(g.k), free(g.v), free(g.s), free(g.o);
  return sec > 0 ? g.heads * 4.0 * (double)nn * hd / sec * 1e-9 : 0.0;
}
#endif /* PKV_BENCH_OPENBLAS */

const char *bench_gemm_library(void) {
#if defined(PKV_BENCH_DNNL)
  return bench_dnnl_library();
#elif defined(PKV_BENCH_OPENBLAS)
  return openblas_library();
#else
  return NULL;
#endif
}

const char *bench_gemm_beside(void) {
#if defined(PKV_BENCH_DNNL) && defined(PKV_BENCH_OPENBLAS)
  return openblas_library();
#else
  return NULL;
#endif
}

const char *bench_gemm_for(int32_t dtype, int *exact) {
#if defined(PKV_BENCH_DNNL)
  return bench_dnnl_for(dtype, exact);
#elif defined(PKV_BENCH_SBGEMM)
  *exact = dtype == PKV_DTYPE_BF16 || dtype == PKV_DTYPE_F32;
  return dtype == PKV_DTYPE_BF16 ? "sbgemm" : "sgemm";
#elif defined(PKV_BENCH_OPENBLAS)
  *exact = dtype == PKV_DTYPE_F32;
  return "sgemm";
#else
  (void)dtype;
  *exact = 0;
  return NULL;
#endif
}

double bench_gemm_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads,
                         uint32_t threads, uint32_t max_runs, double *busy) {
  *busy = 0.0;
#ifdef PKV_BENCH_DNNL
  if (strncmp(name, "oneDNN ", 7) == 0)
    return bench_dnnl_gflops(name, n, hd, heads, threads, max_runs, busy);
#endif
#ifdef PKV_BENCH_OPENBLAS
  if (strcmp(name, "sgemm") == 0 || strcmp(name, "sbgemm") == 0)
    return openblas_gflops(name, n, hd, heads, threads, max_runs, busy);
#endif
  (void)name, (void)n, (void)hd, (void)heads, (void)threads, (void)max_runs;
  return 0.0;
}
