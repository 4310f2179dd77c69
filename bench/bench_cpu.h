/*
 * bench_cpu.h - the CPU attention bench's yardsticks: a read-bandwidth probe, the CPU's model
 * name, the process's CPU time.
 */
#ifndef PKV_BENCH_CPU_H
#define PKV_BENCH_CPU_H

#include <stddef.h>
#include <stdint.h>

/* A buffer of `bytes` (a multiple of 64), written once so its pages are mapped, in transparent
 * huge pages where the kernel gives them (MADV_HUGEPAGE, as pkv's CPU pool asks for its blocks:
 * on 4 KiB pages this project's Zen 4 VM streamed ~13% less on 2 threads, ~25% less on one);
 * NULL on failure. Free it with bench_probe_buffer_free. */
uint64_t *bench_probe_buffer(size_t bytes);
void bench_probe_buffer_free(uint64_t *buf, size_t bytes);
/* Best GB/s of `reps` sums over buf with `threads` threads (1..64), each summing an equal slice:
 * the read bandwidth a streaming kernel with these threads can hope for. */
double bench_probe(const uint64_t *buf, size_t bytes, uint32_t threads, int reps);

/* The same sum with a software prefetch (into L2) of every line ahead_bytes (>= 64) ahead of the
 * loads: what a kernel that must prefetch each line (rows a stride apart, blocks scattered) pays
 * against the hardware prefetchers' streaming. */
double bench_probe_prefetched(const uint64_t *buf, size_t bytes, size_t ahead_bytes,
                              uint32_t threads, int reps);

/* The same sum over buf's blocks of block_bytes (a multiple of 64 that divides bytes), visited in
 * a shuffled order (a fixed seed), each block from its start to its end: the read bandwidth of a
 * paged KV pool whose blocks are scattered, as a long-running engine's are. 0 on bad arguments or
 * no memory. */
double bench_probe_blocks(const uint64_t *buf, size_t bytes, size_t block_bytes, uint32_t threads,
                          int reps);

/* /proc/cpuinfo's first "model name" into out (cap bytes); "unknown" when it has none. */
void bench_cpu_model(char *out, size_t cap);

/* The process's CPU time in seconds (all threads). */
double bench_cpu_seconds(void);

/* Median seconds of fn(arg) (0 = success) over timed calls after one warm-up call: as many as
 * fit in about 1.5 s, at least 3 and at most max_runs; a first call of over 2 s is itself the
 * measurement (what a warm-up saves is below 1% of it). *busy: the process's CPU time over the
 * timed calls' wall time * threads (well below 100%: waits, or a machine busy with other work).
 * -1 when a call fails. */
double bench_time_calls(int (*fn)(void *), void *arg, uint32_t max_runs, uint32_t threads,
                        double *busy);

#endif /* PKV_BENCH_CPU_H */
