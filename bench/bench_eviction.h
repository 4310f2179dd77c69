/* bench_eviction.h - eviction with retention priorities against plain LRU (bench_eviction.c). */
#ifndef PKV_BENCH_EVICTION_H
#define PKV_BENCH_EVICTION_H

/* Prints ns per evicted block with priorities and with LRU only, and their ratio; 0 on success.
 * quick: a smoke run. */
int bench_eviction_priorities(int quick);

#endif
