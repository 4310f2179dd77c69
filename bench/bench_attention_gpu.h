/*
 * bench_attention_gpu.h - what bench_attention_gpu.c shares with its MLA table (bench_mla_gpu.c):
 * an engine with its open batch and device buffers, filling device memory, timing pkv_attention.
 */
#ifndef PKV_BENCH_ATTENTION_GPU_H
#define PKV_BENCH_ATTENTION_GPU_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <pkv/pkv.h>

/* An engine, its open batch and the device buffers of one pkv_attention call (v may be NULL). */
typedef struct bench_run {
  pkv_engine *e;
  pkv_batch *b;
  void *q, *k, *v, *out;
} bench_run;

/* The stream every engine of the bench runs on (pkv_engine_set_stream). */
cudaStream_t bench_gpu_stream(void);
/* Prints what failed; returns -1. */
int bench_gpu_cuda_fail(cudaError_t err, const char *what);
/* Fills `bytes` (even) of device memory with small random values of dtype (bf16, f16; fp8 codes
 * two to a 16-bit word), so no lane is a NaN or a denormal; 0 or -1. */
int bench_gpu_fill(void *dst, size_t bytes, int32_t dtype, uint64_t *state);
/* Median seconds of `runs` pkv_attention calls after one warm-up, the L2 flushed before each;
 * < 0 on failure. */
double bench_gpu_time_calls(bench_run *r, uint32_t runs);
/* Queues an untimed write over more than the L2 on the bench's stream (i: its byte). */
void bench_gpu_flush_l2(uint32_t i);
/* One row of scripts/gpu-check.sh's roofline table (scripts/roofline.py reads it): prints
 * "roofline<TAB>kernel<TAB>shape<TAB>GB/s". */
void bench_gpu_roofline(const char *kernel, const char *shape, double gbs);
/* Aborts the batch, destroys the engine, frees the buffers (NULL ones too). */
void bench_gpu_free_run(bench_run *r);

#endif /* PKV_BENCH_ATTENTION_GPU_H */
