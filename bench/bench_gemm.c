/*
 * bench_gemm.c - OpenBLAS GEMMs with causal attention's shapes and FLOPs (see bench_gemm.h).
 * Debian's OpenBLAS 0.3.21 declares cblas_sbgemm in its header but is built without it, so the
 * build checks the library (PKV_BENCH_SBGEMM) and not the header.
 */
#include "bench_gemm.h"

#include <stdio.h>
#include <stdlib.h>

#include <pkv/pkv.h>

#include "bench_cpu.h"

#ifdef PKV_BENCH_OPENBLAS
#include <cblas.h>
#include <string.h>

const char *bench_gemm_library(void)
{
  static char text[256];
  snprintf(text, sizeof text, "%s (kernels for %s)", openblas_get_config(), openblas_get_corename());
  return text;
}

const char *bench_gemm_for(int32_t dtype, int *exact)
{
#ifdef PKV_BENCH_SBGEMM
  *exact = dtype == PKV_DTYPE_BF16 || dtype == PKV_DTYPE_F32;
  return dtype == PKV_DTYPE_BF16 ? "sbgemm" : "sgemm";
#else
  *exact = dtype == PKV_DTYPE_F32;
  return "sgemm";
#endif
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

static int gemm_heads(void *arg)
{
  const gemm_run *g = arg;
  const int n = (int)g->n, hd = (int)g->hd;
  for (uint32_t h = 0; h < g->heads; h++) {
#ifdef PKV_BENCH_SBGEMM
    if (g->bf16) {
      cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, hd, 1.0f, g->q, hd, g->k, hd, 0.0f,
                   g->s, n);
      cblas_sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hd, n, 1.0f, g->p, n, g->v, hd, 0.0f,
                   g->o, hd);
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

/* n values of 0.01..0.08 in fp32, or their bf16 bits (the top half of the fp32 word). */
static void *gemm_fill(size_t n, int bf16)
{
  void *buf = malloc(n * (bf16 ? 2 : 4));
  for (size_t i = 0; buf && i < n; i++) {
    const float x = 0.01f * (float)(1 + i % 8);
    if (bf16) {
      uint32_t bits;
      memcpy(&bits, &x, 4);
      ((uint16_t *)buf)[i] = (uint16_t)(bits >> 16);
    } else {
      ((float *)buf)[i] = x;
    }
  }
  return buf;
}

double bench_gemm_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads, uint32_t threads,
                         uint32_t max_runs, double *busy)
{
  gemm_run g = {strcmp(name, "sbgemm") == 0, n, hd, heads / 2 ? heads / 2 : 1, NULL, NULL, NULL, NULL,
                NULL, NULL};
  const size_t nh = (size_t)n * hd, nn = (size_t)n * n;
  g.q = gemm_fill(nh, g.bf16), g.k = gemm_fill(nh, g.bf16), g.v = gemm_fill(nh, g.bf16);
  g.s = gemm_fill(nn, 0), g.o = gemm_fill(nh, 0);
  g.p = g.bf16 ? gemm_fill(nn, 1) : g.s;
  double sec = -1.0;
  openblas_set_num_threads((int)threads);
  if (g.q && g.k && g.v && g.s && g.o && g.p)
    sec = bench_time_calls(gemm_heads, &g, max_runs, threads, busy);
  if (g.p != g.s)
    free(g.p);
  free(g.q), free(g.k), free(g.v), free(g.s), free(g.o);
  return sec > 0 ? g.heads * 4.0 * (double)nn * hd / sec * 1e-9 : 0.0;
}

#else /* no OpenBLAS */

const char *bench_gemm_library(void) { return NULL; }

const char *bench_gemm_for(int32_t dtype, int *exact)
{
  (void)dtype;
  *exact = 0;
  return NULL;
}

double bench_gemm_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads, uint32_t threads,
                         uint32_t max_runs, double *busy)
{
  (void)name, (void)n, (void)hd, (void)heads, (void)threads, (void)max_runs;
  *busy = 0.0;
  return 0.0;
}

#endif
