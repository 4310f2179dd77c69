/*
 * bench_gemm.h - the yardstick of the CPU prefill: GEMMs with causal attention's shapes and FLOPs,
 * in the same run. oneDNN's matmul of the model's dtype when the bench is built with oneDNN
 * (PKV_BENCH_DNNL; oneDNN picks AVX-512 BF16, AMX and so on by CPUID), else OpenBLAS's GEMMs
 * (PKV_BENCH_OPENBLAS); with both, OpenBLAS's fp32 sgemm is a second figure. Without either every
 * call says so: bench_gemm_library returns NULL.
 */
#ifndef PKV_BENCH_GEMM_H
#define PKV_BENCH_GEMM_H

#include <stdint.h>

/* The yardstick's library: "oneDNN <version>, ISA <the best oneDNN may use> (matmul bf16: <the
 * code it picks>, ...)" or "OpenBLAS <version and build> (kernels for <core>)"; NULL when the
 * bench has no GEMM. Not thread-safe (a static buffer). */
const char *bench_gemm_library(void);

/* OpenBLAS's "<version and build> (kernels for <core>)" when it is built in beside oneDNN: its
 * "sgemm" is then a second figure, for comparison with runs that had only it; else NULL. */
const char *bench_gemm_beside(void);

/* The GEMM set beside attention whose model dtype is `dtype` (PKV_DTYPE_*). With oneDNN:
 * "oneDNN bf16", "oneDNN f16" (bf16 or f16 in, fp32 out) or "oneDNN f32"; f32 stands in
 * (*exact = 0) where oneDNN creates no matmul of the dtype on this CPU. With OpenBLAS alone:
 * "sbgemm" (bf16 in, fp32 out) for bf16 when it exports cblas_sbgemm, else "sgemm" (fp32), a
 * stand-in since OpenBLAS has no f16 GEMM. NULL without a GEMM. */
const char *bench_gemm_for(int32_t dtype, int *exact);

/* GFLOP/s of the GEMMs `name` (from bench_gemm_for, or "sgemm" when bench_gemm_beside is not
 * NULL) with the FLOPs of causal attention over n tokens of `heads` q heads of head_dim hd, on
 * `threads` threads: for each of heads / 2 heads, S = Q K^T ([n][hd] x [hd][n]) and O = P V
 * ([n][n] x [n][hd]), 2 * M * N * K FLOPs each, so heads / 2 * 4 * n^2 * hd in all: the
 * 4 * heads * hd * n(n+1)/2 FLOPs of the causal attention (a GEMM computes the whole n x n
 * square, causal attention half of it). Operands in plain row-major layouts, as pkv's lie; the
 * library's set-up (oneDNN's primitives) is made before the timed calls. Median of calls as
 * bench_time_calls takes them; *busy as there. 0 on failure (out of memory, no such GEMM). */
double bench_gemm_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads,
                         uint32_t threads, uint32_t max_runs, double *busy);

#endif /* PKV_BENCH_GEMM_H */
