/*
 * bench_attention_sparse.h - the CPU attention bench's sparse MLA decode table (DeepSeek V3.2 /
 * GLM-5's indexer and top-k, then MLA over the kept latents) against dense MLA decode at the same
 * contexts, in the same run.
 */
#ifndef PKV_BENCH_ATTENTION_SPARSE_H
#define PKV_BENCH_ATTENTION_SPARSE_H

#include <stddef.h>
#include <stdint.h>

/* The yardstick the table divides by: the read-bandwidth probe (bench_probe) on probe_buf. */
typedef struct sparse_probe {
  const uint64_t *buf;
  size_t bytes;
  uint32_t threads;
  double start; /* the run's start probe */
} sparse_probe;

/* Prints the table: contexts 32k, 64k, 128k (quick: 32k), q_heads MLA heads (DeepSeek's 128, or
 * fewer on a slow machine); 0, or 1 when a case failed. */
int bench_sparse_table(const sparse_probe *probe, uint32_t q_heads, uint32_t max_runs, int quick);

#endif /* PKV_BENCH_ATTENTION_SPARSE_H */
