/*
 * bench_attention_prefill.h - the CPU attention bench's prefill table: causal prompts of 2k and
 * 8k tokens, GFLOP/s beside GEMMs of the same dtype, shapes and FLOPs (bench_gemm.h: oneDNN's
 * matmul, or OpenBLAS's).
 */
#ifndef PKV_BENCH_ATTENTION_PREFILL_H
#define PKV_BENCH_ATTENTION_PREFILL_H

#include <stdint.h>

#include "bench_attention_engine.h"

/* Prints the table for each of the num_kinds KV kinds (2k-token prompts only with quick) and the
 * worst ratio to the GEMM; 0, or 1 when a measurement failed. */
int bench_prefill_table(const kv_kind *kinds, int num_kinds, uint32_t threads, uint32_t max_runs,
                        int quick);

#endif /* PKV_BENCH_ATTENTION_PREFILL_H */
