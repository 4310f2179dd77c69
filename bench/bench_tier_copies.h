/*
 * bench_tier_copies.h - bench_tier_copies's CUDA table (bench_tier_copies_gpu.c, in CUDA builds).
 */
#ifndef PKV_BENCH_TIER_COPIES_H
#define PKV_BENCH_TIER_COPIES_H

#include <stdint.h>

/* The host tier's copies on a CUDA engine against cudaMemcpyAsync, batches of 1 .. max_blocks
 * blocks (powers of 4); without a usable GPU it says so and returns 0. 0, or 1 on a failure. */
int bench_tier_copies_gpu(uint32_t max_blocks);

#endif /* PKV_BENCH_TIER_COPIES_H */
