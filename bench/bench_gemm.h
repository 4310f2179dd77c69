/*
 * bench_gemm.h - the yardstick of the CPU prefill: OpenBLAS GEMMs with causal attention's shapes
 * and FLOPs, in the same run. Without OpenBLAS at build time (PKV_BENCH_OPENBLAS undefined) every
 * call says so: bench_gemm_library returns NULL.
 */
#ifndef PKV_BENCH_GEMM_H
#define PKV_BENCH_GEMM_H

#include <stdint.h>

/* "OpenBLAS <version and build> (kernels for <core>)", or NULL when the bench has no GEMM. */
const char *bench_gemm_library(void);

/* The GEMM set beside attention whose model dtype is `dtype` (PKV_DTYPE_*): "sbgemm" (bf16 in,
 * fp32 out) for bf16 when this OpenBLAS exports cblas_sbgemm, else "sgemm" (fp32), a stand-in
 * (*exact = 0) since OpenBLAS has no f16 GEMM. NULL without OpenBLAS. */
const char *bench_gemm_for(int32_t dtype, int *exact);

/* GFLOP/s of the GEMMs `name` (from bench_gemm_for) with the FLOPs of causal attention over n
 * tokens of `heads` q heads of head_dim hd, on `threads` threads: for each of heads / 2 heads,
 * S = Q K^T ([n][hd] x [hd][n]) and O = P V ([n][n] x [n][hd]), 2 * M * N * K FLOPs each, so
 * heads / 2 * 4 * n^2 * hd in all: the 4 * heads * hd * n(n+1)/2 FLOPs of the causal attention
 * (a GEMM computes the whole n x n square, causal attention half of it). Median of calls as
 * bench_time_calls takes them; *busy as there. 0 on failure (out of memory, no OpenBLAS). */
double bench_gemm_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads, uint32_t threads,
                         uint32_t max_runs, double *busy);

#endif /* PKV_BENCH_GEMM_H */
