/*
 * bench_step_gpu.h - bench_attention_gpu's decode-step table (bench_step_gpu.c) and write_kv
 * table (bench_write_kv_gpu.cpp).
 */
#ifndef PKV_BENCH_STEP_GPU_H
#define PKV_BENCH_STEP_GPU_H

#ifdef __cplusplus
extern "C" {
#endif

/* A whole decode step of a 32-layer model on a CUDA engine per batch size: host time, GPU time,
 * launches per layer, syncs per step (a stream capture of the step), graph replay against eager.
 * 0, or 1 when a row failed. */
int bench_step_gpu_table(int quick);

/* The write_kv kernel alone (launch_write_kv, called directly: one launch a call), in GB/s of
 * the bytes it moves, as % of ref_gbs. 0, or 1 when a row failed. */
int bench_write_kv_gpu_table(double ref_gbs, const char *ref_name, int quick);

#ifdef __cplusplus
}
#endif

#endif /* PKV_BENCH_STEP_GPU_H */
