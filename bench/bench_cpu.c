/*
 * bench_cpu.c - the CPU attention bench's yardsticks: a read-bandwidth probe, the CPU's model
 * name, the process's CPU time.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"

enum { PROBE_MAX_THREADS = 64 };

typedef struct probe_arg {
  const uint64_t *p;
  size_t n;
  pthread_barrier_t *start;
  uint64_t sum;
} probe_arg;

/* Four independent sums, so the adds are not what limits the loop (the compiler vectorizes it). */
static void *probe_thread(void *arg)
{
  probe_arg *a = arg;
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  pthread_barrier_wait(a->start);
  for (size_t i = 0; i + 4 <= a->n; i += 4) {
    s0 += a->p[i], s1 += a->p[i + 1], s2 += a->p[i + 2], s3 += a->p[i + 3];
  }
  a->sum = s0 + s1 + s2 + s3;
  return NULL;
}

uint64_t *bench_probe_buffer(size_t bytes)
{
  uint64_t *buf = malloc(bytes);
  for (size_t i = 0; buf && i < bytes / 8; i++)
    buf[i] = i * 0x9e3779b97f4a7c15ull;
  return buf;
}

double bench_probe(const uint64_t *buf, size_t bytes, uint32_t threads, int reps)
{
  double best = 0.0;
  volatile uint64_t sink = 0;
  if (threads < 1 || threads > PROBE_MAX_THREADS)
    return 0.0;
  for (int r = 0; r < reps; r++) {
    pthread_t tid[PROBE_MAX_THREADS];
    probe_arg args[PROBE_MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, threads + 1);
    const size_t per = bytes / 8 / threads;
    for (uint32_t t = 0; t < threads; t++) {
      args[t] = (probe_arg){buf + t * per, per, &start, 0};
      pthread_create(&tid[t], NULL, probe_thread, &args[t]);
    }
    pthread_barrier_wait(&start);
    const double t0 = bench_now_ns();
    for (uint32_t t = 0; t < threads; t++)
      pthread_join(tid[t], NULL);
    const double ns = bench_now_ns() - t0;
    for (uint32_t t = 0; t < threads; t++)
      sink += args[t].sum;
    pthread_barrier_destroy(&start);
    const double gbs = (double)per * 8 * threads / ns;
    if (gbs > best)
      best = gbs;
  }
  (void)sink;
  return best;
}

void bench_cpu_model(char *out, size_t cap)
{
  char line[512];
  snprintf(out, cap, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) != 0 || !colon)
      continue;
    colon += strspn(colon + 1, " \t") + 1;
    colon[strcspn(colon, "\n")] = '\0';
    snprintf(out, cap, "%s", colon);
    break;
  }
  fclose(f);
}

double bench_cpu_seconds(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double bench_time_calls(int (*fn)(void *), void *arg, uint32_t max_runs, uint32_t threads,
                        double *busy)
{
  double t[BENCH_MAX_RUNS], wall = 0.0, cpu = 0.0;
  uint32_t runs = max_runs;
  for (uint32_t i = 0; i <= runs; i++) {
    const double c0 = bench_cpu_seconds(), t0 = bench_now_ns();
    if (fn(arg) != 0)
      return -1.0;
    const double sec = (bench_now_ns() - t0) * 1e-9, cpu_sec = bench_cpu_seconds() - c0;
    if (i == 0) {
      if (sec > 2.0) {
        *busy = cpu_sec / (sec * threads);
        return sec;
      }
      const double fit = 1.5 / (sec > 1e-6 ? sec : 1e-6);
      runs = fit < 3 ? 3 : fit < max_runs ? (uint32_t)fit : max_runs;
      if (runs > BENCH_MAX_RUNS)
        runs = BENCH_MAX_RUNS;
      continue;
    }
    t[i - 1] = sec, wall += sec, cpu += cpu_sec;
  }
  *busy = wall > 0 ? cpu / (wall * threads) : 0.0;
  return bench_median(t, runs);
}
