/* Retention classes (issue 30 item 3): PKV_MAX_CACHE_RETENTIONS distinct retentions per priority
 * are cached at once; another joins the one nearest to it (ties: the shorter) and decays with it.
 * Block size 4; a prompt of 5 tokens leaves one cached block and one free one. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

enum { BS = 4 };

static void cache_prompt(pkv_engine *e, int32_t first, int32_t priority, uint32_t retention_ms) {
  int32_t t[5];
  tu_fill(t, 5, first);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_priority = priority;
  sp.cache_retention_ms = retention_ms;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_allocate(e, t, 5, &sp, &seq, NULL))) return;
  tu_compute1(e, seq);
  CHECK_OK(pkv_release(e, seq));
}

static uint32_t cached_of(pkv_engine *e, int32_t first) {
  int32_t t[5];
  tu_fill(t, 5, first);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, 5, NULL, NULL, &cached));
  return cached;
}

static void test_fifth_retention_merges(void) {
  CHECK_EQ_INT(PKV_MAX_CACHE_RETENTIONS, 4);
  setenv("PKV_TEST_CLOCK_MS", "1000", 1);
  pkv_engine *e = tu_engine(BS, 12, PKV_DEBUG_TEST_CLOCK);
  if (!e) return;
  cache_prompt(e, 100, 1, 100); /* A */
  cache_prompt(e, 200, 1, 200); /* B */
  cache_prompt(e, 300, 1, 300); /* C */
  cache_prompt(e, 400, 1, 400); /* D: 4 retentions of priority 1 in use */
  cache_prompt(e, 500, 1, 250); /* E: 200 and 300 are as near; the shorter, 200, is taken */
  cache_prompt(e, 600, 0, 0);   /* N: normal, released after E */
  setenv("PKV_TEST_CLOCK_MS", "1220", 1); /* A, B and E (200 ms) decayed; C and D hold */
  int32_t big[33];
  tu_fill(big, 33, 9000);
  uint64_t seq = 0;
  CHECK_OK(pkv_allocate(e, big, 33, NULL, &seq, NULL)); /* 9 blocks: 6 free, 3 evicted */
  CHECK_EQ_INT(cached_of(e, 100), 0);
  CHECK_EQ_INT(cached_of(e, 200), 0);
  CHECK_EQ_INT(cached_of(e, 500), 0); /* in its own class it would hold until 1250 */
  CHECK_EQ_INT(cached_of(e, 600), 4);
  CHECK_EQ_INT(cached_of(e, 300), 4);
  CHECK_EQ_INT(cached_of(e, 400), 4);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_evictions_normal, 3);
  CHECK_EQ_INT(s.num_evictions_high, 0);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, seq));
  pkv_engine_destroy(e);
  unsetenv("PKV_TEST_CLOCK_MS");
}

int main(void) {
  TU_RUN(test_fifth_retention_merges);
  return tu_summary();
}
