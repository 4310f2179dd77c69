/*
 * bench_attention_gpu_sparse.h - bench_attention_gpu's sparse MLA table
 * (bench_attention_gpu_sparse.c).
 */
#ifndef PKV_BENCH_ATTENTION_GPU_SPARSE_H
#define PKV_BENCH_ATTENTION_GPU_SPARSE_H

/* Sparse MLA decode rows (DeepSeek V3.2's layer, top-k 2048, 32k .. 128k contexts) against dense
 * MLA decode of the same engine: ms, GB/s of the bytes each step must read, % of ref_gbs (named
 * ref_name). 0, or 1 when a measurement failed; a build that refuses sparse-attention engines is
 * reported and skipped. */
int bench_sparse_gpu_table(double ref_gbs, const char *ref_name, int quick);

#endif /* PKV_BENCH_ATTENTION_GPU_SPARSE_H */
