/* bench_chunk_admission.h - admission per chunk against whole-prompt admission
 * (bench_chunk_admission.c). */
#ifndef PKV_BENCH_CHUNK_ADMISSION_H
#define PKV_BENCH_CHUNK_ADMISSION_H

/* Prints ns per prompt block admitted per chunk (pkv_step) and whole (pkv_allocate), their ratio
 * and each mode's peak blocks per KV group; 0 on success. quick: a smoke run. */
int bench_admission_per_chunk(int quick);

#endif
