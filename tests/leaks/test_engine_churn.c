/*
 * test_engine_churn.c - a long-running host creates and destroys engines all day: 10,000
 * create/destroy cycles, each doing some work first (an allocation and a fork; every 4th a batch
 * with attention on a 2-thread CPU worker pool, so worker threads start and stop; every 3rd with
 * KV events and a scheduler request; every 5th destroyed with its batch still open), and the
 * process's resident memory (/proc/self/statm) must not grow by more than a small bound after a
 * warm-up: anything pkv keeps per engine after pkv_engine_destroy shows up here.
 *
 * Usage: test_engine_churn [CYCLES [MAX_GROWTH_KIB]]
 */
#include "../unit/test_util.h"

#include <unistd.h>

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* One engine's life; returns 0 when a call failed (counted by the CHECKs). */
static int cycle(int i) {
  pkv_engine_params p;
  tu_params(&p, 4, 24);
  p.num_threads = i % 4 == 0 ? 2 : 1;
  p.enable_kv_events = i % 3 == 0;
  pkv_engine *e = NULL;
  if (pkv_engine_create(&p, &e) != PKV_OK) return CHECK_OK(pkv_engine_create(&p, &e));
  int32_t tokens[12];
  tu_fill(tokens, 12, i % 7);
  uint64_t seq = 0, child = 0;
  int ok = pkv_allocate(e, tokens, 12, NULL, &seq, NULL) == PKV_OK;
  if (i % 4 == 0 && ok) {
    pkv_batch *b = NULL;
    ok = pkv_batch_begin(e, &seq, NULL, 1, &b) == PKV_OK;
    /* 12 tokens x (4 q heads | 2 kv heads) x head_dim 8, f32 */
    float q[12 * 4 * 8] = {0}, k[12 * 2 * 8] = {0}, v[12 * 2 * 8] = {0}, out[12 * 4 * 8];
    for (uint32_t layer = 0; ok && layer < 2; layer++)
      ok = pkv_attention(b, layer, q, k, v, out) == PKV_OK;
    if (i % 5 == 0) { /* destroyed with the batch open */
      pkv_engine_destroy(e);
      return CHECK(ok);
    }
    ok = ok && pkv_batch_end(b) == PKV_OK && pkv_fork(e, seq, &child) == PKV_OK;
  }
  if (i % 3 == 0 && ok) {
    uint64_t req = 0;
    pkv_batch *b = NULL;
    ok = pkv_submit(e, tokens, 6, NULL, &req) == PKV_OK && pkv_step(e, &b) == PKV_OK && b != NULL;
    if (ok) pkv_batch_abort(b); /* the step did not run */
    pkv_kv_event ev[8];
    uint32_t len = 0;
    ok = ok && pkv_drain_kv_events(e, ev, 8, &len) == PKV_OK;
  }
  pkv_engine_destroy(e);
  return CHECK(ok);
}

static void test_churn(int cycles, long max_growth_kib) {
  const int warmup = cycles / 10;
  long base = -1;
  for (int i = 0; i < cycles; i++) {
    if (i == warmup) base = rss_kib();
    if (!cycle(i)) return;
  }
  long end = rss_kib();
  printf("%d engines: RSS %ld KiB after %d, %ld KiB at the end (+%ld KiB, bound %ld)\n", cycles,
         base, warmup, end, end - base, max_growth_kib);
  CHECK(base > 0 && end > 0);
  CHECK(end - base <= max_growth_kib);
}

int main(int argc, char **argv) {
  int cycles = argc > 1 ? atoi(argv[1]) : 10000;
  long bound = argc > 2 ? atol(argv[2]) : 1024;
  test_churn(cycles, bound);
  return tu_summary();
}
