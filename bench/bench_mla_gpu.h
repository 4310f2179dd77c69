/*
 * bench_mla_gpu.h - bench_attention_gpu's MLA decode table (bench_mla_gpu.c).
 */
#ifndef PKV_BENCH_MLA_GPU_H
#define PKV_BENCH_MLA_GPU_H

/* Decode rows of multi-head latent attention (DeepSeek V3's shape: 128 q heads, a bf16 latent of
 * 512 + 64): GB/s of latents read as % of ref_gbs (named ref_name), TFLOP/s as % of tc_peak
 * (GFLOP/s; 0: unknown). 0, or 1 when a measurement failed; an engine refused for its MLA layout
 * is reported and skipped. */
int bench_mla_decode_table(double ref_gbs, const char *ref_name, double tc_peak, int quick);

#endif /* PKV_BENCH_MLA_GPU_H */
