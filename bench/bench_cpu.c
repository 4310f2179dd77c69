/*
 * bench_cpu.c - the CPU attention bench's yardsticks: a read-bandwidth probe, the CPU's model
 * name, the process's CPU time.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#define _POSIX_C_SOURCE 200809L

#include "bench_cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_util.h"

enum { PROBE_MAX_THREADS = 64 };

typedef struct probe_arg {
  const uint64_t *p;
  size_t n;              /* words per run */
  const uint32_t *order; /* NULL: one run of n words at p; else runs at p + order[i] * n */
  size_t runs;
  size_t ahead; /* words: a software prefetch of each line this far ahead (0: none) */
  pthread_barrier_t *start;
  uint64_t sum;
} probe_arg;

/* Four independent sums, so the adds are not what limits the loop (the compiler vectorizes it). */
static uint64_t sum_words(const uint64_t *p, size_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 4 <= n; i += 4) {
    s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  }
  return s0 + s1 + s2 + s3;
}

/* The same, with a prefetch into L2 of the line `ahead` words on before each line. */
static uint64_t sum_words_prefetched(const uint64_t *p, size_t n, size_t ahead) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    if (i + ahead < n) __builtin_prefetch(p + i + ahead, 0, 2);
    s0 += p[i] + p[i + 4], s1 += p[i + 1] + p[i + 5], s2 += p[i + 2] + p[i + 6],
        s3 += p[i + 3] + p[i + 7];
  }
  return s0 + s1 + s2 + s3;
}

static void *probe_thread(void *arg) {
  probe_arg *a = arg;
  uint64_t sum = 0;
  pthread_barrier_wait(a->start);
  if (!a->order)
    sum = a->ahead ? sum_words_prefetched(a->p, a->n, a->ahead) : sum_words(a->p, a->n);
  for (size_t i = 0; a->order && i < a->runs; i++)
    sum += sum_words(a->p + (size_t)a->order[i] * a->n, a->n);
  a->sum = sum;
  return NULL;
}

uint64_t *bench_probe_buffer(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE); /* as pkv's CPU pool: a hint, ignored where THP is off */
#endif
  uint64_t *buf = p;
  for (size_t i = 0; i < bytes / 8; i++) buf[i] = i * 0x9e3779b97f4a7c15ull;
  return buf;
}

void bench_probe_buffer_free(uint64_t *buf, size_t bytes) {
  if (buf) munmap(buf, bytes);
}

/* Best GB/s of reps passes: each thread sums its share, a slice of the words (order NULL) or of
 * the blocks of `words` words in order[0 .. blocks). */
static double probe_passes(const uint64_t *buf, size_t bytes, const uint32_t *order, size_t words,
                           size_t ahead, uint32_t threads, int reps) {
  double best = 0.0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; r++) {
    pthread_t tid[PROBE_MAX_THREADS];
    probe_arg args[PROBE_MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, threads + 1);
    const size_t per = bytes / 8 / threads, blocks_per = order ? bytes / 8 / words / threads : 0;
    for (uint32_t t = 0; t < threads; t++) {
      if (order)
        args[t] = (probe_arg){buf, words, order + t * blocks_per, blocks_per, 0, &start, 0};
      else
        args[t] = (probe_arg){buf + t * per, per, NULL, 0, ahead, &start, 0};
      pthread_create(&tid[t], NULL, probe_thread, &args[t]);
    }
    pthread_barrier_wait(&start);
    const double t0 = bench_now_ns();
    for (uint32_t t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    const double ns = bench_now_ns() - t0;
    for (uint32_t t = 0; t < threads; t++) sink += args[t].sum;
    pthread_barrier_destroy(&start);
    const double read =
        order ? (double)blocks_per * words * 8 * threads : (double)per * 8 * threads;
    const double gbs = read / ns;
    if (gbs > best) best = gbs;
  }
  (void)sink;
  return best;
}

double bench_probe(const uint64_t *buf, size_t bytes, uint32_t threads, int reps) {
  if (threads < 1 || threads > PROBE_MAX_THREADS) return 0.0;
  return probe_passes(buf, bytes, NULL, 0, 0, threads, reps);
}

double bench_probe_prefetched(const uint64_t *buf, size_t bytes, size_t ahead_bytes,
                              uint32_t threads, int reps) {
  if (threads < 1 || threads > PROBE_MAX_THREADS || ahead_bytes < 64) return 0.0;
  return probe_passes(buf, bytes, NULL, 0, ahead_bytes / 8, threads, reps);
}

double bench_probe_blocks(const uint64_t *buf, size_t bytes, size_t block_bytes, uint32_t threads,
                          int reps) {
  if (threads < 1 || threads > PROBE_MAX_THREADS || block_bytes < 64 || block_bytes % 64 ||
      bytes % block_bytes || bytes / block_bytes > UINT32_MAX)
    return 0.0;
  const size_t blocks = bytes / block_bytes;
  uint32_t *order = malloc(blocks * sizeof *order);
  if (!order) return 0.0;
  uint64_t state = 0x853c49e6748fea9bull;
  for (size_t i = 0; i < blocks; i++) order[i] = (uint32_t)i;
  for (size_t i = blocks - 1; i > 0; i--) { /* Fisher-Yates */
    const size_t j = (size_t)(bench_next(&state) % (i + 1));
    const uint32_t x = order[i];
    order[i] = order[j], order[j] = x;
  }
  const double gbs = probe_passes(buf, bytes, order, block_bytes / 8, 0, threads, reps);
  free(order);
  return gbs;
}

void bench_cpu_model(char *out, size_t cap) {
  char line[512];
  snprintf(out, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon) continue;
    colon += strspn(colon + 1, " \t") + 1;
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(out, cap, "%s", colon);
    break;
  }
  fclose(f);
}

double bench_cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bench_time_calls(int (*fn)(void *), void *arg, uint32_t max_runs, uint32_t threads,
                        double *busy) {
  double t[BENCH_MAX_RUNS], wall = 0.0, cpu = 0.0;
  uint32_t runs = max_runs;
  for (uint32_t i = 0; i <= runs; i++) {
    const double c0 = bench_cpu_seconds(), t0 = bench_now_ns();
    if (fn(arg) != 0) return -1.0;
    const double sec = (bench_now_ns() - t0) * 1e-9, cpu_sec = bench_cpu_seconds() - c0;
    if (i == 0) {
      if (sec > 2.0) {
        *busy = cpu_sec / (sec * threads);
        return sec;
      }
      const double fit = 1.5 / (sec > 1e-6 ? sec : 1e-6);
      runs = fit < 3 ? 3 : fit < max_runs ? (uint32_t)fit : max_runs;
      if (runs > BENCH_MAX_RUNS) runs = BENCH_MAX_RUNS;
      continue;
    }
    t[i - 1] = sec, wall += sec, cpu += cpu_sec;
  }
  *busy = wall > 0 ? cpu / (wall * threads) : 0.0;
  return bench_median(t, runs);
}
