// Host entry points of simt_selftest.cu (the emulator's own test kernels).
#pragma once

void selftest_collectives(int *out);    // out: 64 * 6 ints
void selftest_atomic(int *counter);     // 8 blocks of 64 threads add 1
void selftest_smem_poison(float *out);  // 32 floats read from unwritten dynamic shared memory
void selftest_divergent_barrier();
void selftest_exit_before_barrier();
void selftest_exited_lane(int *out);
void selftest_bad_mask(int *out);
void selftest_too_many_threads();
