/*
 * bench_gemm_dnnl.h - bench_gemm's parts: oneDNN's matmuls (bench_gemm_dnnl.c, built with
 * PKV_BENCH_DNNL) and the operands both libraries fill (bench_gemm.c). Not the bench's interface:
 * that is bench_gemm.h.
 */
#ifndef PKV_BENCH_GEMM_DNNL_H
#define PKV_BENCH_GEMM_DNNL_H

#include <stddef.h>
#include <stdint.h>

/* An operand's element type. */
typedef enum gemm_elt { GEMM_F32, GEMM_BF16, GEMM_F16 } gemm_elt;

/* n values of 0.01..0.08 as elt (bf16: fp32 truncated, f16: rounded down, both exact enough for a
 * timing); NULL when out of memory. The caller frees it. */
void *bench_gemm_fill(size_t n, gemm_elt elt);

/* As bench_gemm_library, bench_gemm_for and bench_gemm_gflops, for oneDNN: names "oneDNN bf16",
 * "oneDNN f16" and "oneDNN f32". */
const char *bench_dnnl_library(void);
const char *bench_dnnl_for(int32_t dtype, int *exact);
double bench_dnnl_gflops(const char *name, uint32_t n, uint32_t hd, uint32_t heads,
                         uint32_t threads, uint32_t max_runs, double *busy);

#endif /* PKV_BENCH_GEMM_DNNL_H */
