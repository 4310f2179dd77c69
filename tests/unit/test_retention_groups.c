/* Retention with KV groups (issue 30 item 3): a pin holds what a hit of its prefix needs in every
 * group - all of a full group's blocks, a sliding group's window before the hit's end - and
 * priorities reach every group's blocks. Block size 4; layers alternate full attention and a
 * window of 8 tokens: two groups. */
#include "test_util.h"

enum { BS = 4 };

static pkv_engine *two_groups(uint32_t num_blocks) {
  static const uint32_t windows[2] = {0, 8};
  pkv_engine_params p;
  tu_params(&p, BS, num_blocks);
  p.layer_windows = windows;
  return tu_engine_p(&p);
}

static void cache(pkv_engine *e, int32_t first, uint32_t n) {
  int32_t t[64];
  tu_fill(t, n, first);
  uint64_t seq = tu_alloc(e, t, n, NULL);
  if (!seq) return;
  tu_compute1(e, seq);
  CHECK_OK(pkv_release(e, seq));
}

static uint32_t cached_of(pkv_engine *e, int32_t first, uint32_t n) {
  int32_t t[64];
  tu_fill(t, n, first);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, n, NULL, NULL, &cached));
  return cached;
}

static void test_pin_windowed(void) {
  pkv_engine *e = two_groups(40);
  if (!e) return;
  cache(e, 100, 25); /* 6 sealed blocks in each group */
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 12);
  int32_t t[24];
  tu_fill(t, 24, 100);
  uint64_t pin = 0;
  uint32_t tokens = 0;
  CHECK_OK(pkv_cache_pin(e, t, 24, NULL, &pin, &tokens));
  CHECK_EQ_INT(tokens, 24);
  /* The full group's 6 blocks, and the window's blocks 4 and 5 (tokens 17 .. 24 attend to them). */
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_pinned_blocks, 8);
  CHECK_EQ_INT(s.num_cached_blocks, 4);
  for (int i = 0; i < 4; ++i) cache(e, 1000 * (i + 1), 25); /* 14 blocks each: evictions */
  s = tu_stats(e);
  CHECK(s.num_evictions >= 4);
  CHECK_EQ_INT(s.num_evictions_normal, s.num_evictions);
  CHECK_EQ_INT(cached_of(e, 100, 25), 24); /* the hit still served, in both groups */
  CHECK_ENGINE(e);
  CHECK_OK(pkv_cache_unpin(e, pin));
  CHECK_EQ_INT(tu_stats(e).num_pinned_blocks, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* pkv_cache_set_priority reaches every group's cached copies. */
static void test_priority_windowed(void) {
  pkv_engine *e = two_groups(40);
  if (!e) return;
  cache(e, 100, 25);
  int32_t t[24];
  tu_fill(t, 24, 100);
  uint32_t n = 0;
  CHECK_OK(pkv_cache_set_priority(e, t, 24, NULL, 2, 0, &n));
  CHECK_EQ_INT(n, 12);
  for (int i = 0; i < 4; ++i) cache(e, 1000 * (i + 1), 25);
  CHECK_EQ_INT(cached_of(e, 100, 25), 24); /* the normal blocks went first */
  CHECK_EQ_INT(tu_stats(e).num_evictions_highest, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_pin_windowed);
  TU_RUN(test_priority_windowed);
  return tu_summary();
}
