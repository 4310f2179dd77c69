/* Retention (issue 30 item 3, DESIGN.md §4): eviction by priority, LRU within one, decay after
 * the retention time (the test clock), pkv_cache_set_priority, pins and their cap, stats, the 0.7
 * struct sizes and bad arguments. Block size 4; a prompt of 5 tokens holds 2 blocks, the first
 * sealed once computed, so each released prompt leaves one cached block and one free one. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>

#include "test_util.h"

enum { BS = 4 };

static void clock_at(const char *ms) { setenv("PKV_TEST_CLOCK_MS", ms, 1); }

/* A prompt of n tokens from `first`, allocated with a priority, computed; 0 on failure. */
static uint64_t run_prompt(pkv_engine *e, int32_t first, uint32_t n, int32_t priority,
                           uint32_t retention_ms) {
  int32_t t[64];
  tu_fill(t, n, first);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_priority = priority;
  sp.cache_retention_ms = retention_ms;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_allocate(e, t, n, &sp, &seq, NULL))) return 0;
  tu_compute1(e, seq);
  return seq;
}

/* run_prompt, then released: its sealed blocks become cached with its priority. */
static void cache_prompt(pkv_engine *e, int32_t first, uint32_t n, int32_t priority,
                         uint32_t retention_ms) {
  uint64_t seq = run_prompt(e, first, n, priority, retention_ms);
  if (seq) CHECK_OK(pkv_release(e, seq));
}

/* Tokens of the prompt from `first` the cache would serve now (changes nothing). */
static uint32_t cached_of(pkv_engine *e, int32_t first, uint32_t n) {
  int32_t t[64];
  tu_fill(t, n, first);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, n, NULL, NULL, &cached));
  return cached;
}

/* The four evictions by priority add up to num_evictions. */
static void check_sums(pkv_engine *e) {
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(
      s.num_evictions_low + s.num_evictions_normal + s.num_evictions_high + s.num_evictions_highest,
      s.num_evictions);
  CHECK_ENGINE(e);
}

/* The lowest priority goes first, LRU within a priority, the highest last. */
static void test_priority_order(void) {
  pkv_engine *e = tu_engine(BS, 4, 0);
  if (!e) return;
  cache_prompt(e, 100, 5, 0, 0);  /* A */
  cache_prompt(e, 200, 5, 2, 0);  /* B */
  cache_prompt(e, 300, 5, -1, 0); /* C */
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 3);
  uint64_t d = run_prompt(e, 400, 5, 0, 0); /* a free block, then C (low) evicted */
  CHECK_EQ_INT(cached_of(e, 300, 5), 0);
  CHECK_EQ_INT(cached_of(e, 100, 5), 4);
  CHECK_EQ_INT(cached_of(e, 200, 5), 4);
  CHECK_EQ_INT(tu_stats(e).num_evictions_low, 1);
  CHECK_OK(pkv_release(e, d));              /* D: normal, newer than A */
  uint64_t f = run_prompt(e, 500, 5, 0, 0); /* A: the oldest normal one */
  CHECK_EQ_INT(cached_of(e, 100, 5), 0);
  CHECK_EQ_INT(cached_of(e, 400, 5), 4);
  uint64_t g = run_prompt(e, 600, 5, 0, 0); /* D (normal), then B (highest) */
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_evictions_low, 1);
  CHECK_EQ_INT(s.num_evictions_normal, 2);
  CHECK_EQ_INT(s.num_evictions_high, 0);
  CHECK_EQ_INT(s.num_evictions_highest, 1);
  CHECK_EQ_INT(s.num_evictions, 4);
  check_sums(e);
  CHECK_OK(pkv_release(e, f));
  CHECK_OK(pkv_release(e, g));
  pkv_engine_destroy(e);
}

/* A priority holds for its retention after the release, then the block is a normal one in its
 * place of release order. */
static void test_retention_decay(void) {
  clock_at("1000");
  pkv_engine *e = tu_engine(BS, 4, PKV_DEBUG_TEST_CLOCK);
  if (!e) return;
  cache_prompt(e, 100, 5, 2, 500); /* A: highest until 1500 */
  cache_prompt(e, 200, 5, 0, 0);   /* B */
  cache_prompt(e, 300, 5, 0, 0);   /* C */
  clock_at("1400");
  uint64_t d = run_prompt(e, 400, 5, 0, 0); /* B, the oldest normal: A still held */
  CHECK_EQ_INT(cached_of(e, 100, 5), 4);
  CHECK_EQ_INT(cached_of(e, 200, 5), 0);
  CHECK_OK(pkv_release(e, d));
  clock_at("1500");
  uint64_t f = run_prompt(e, 500, 5, 0, 0); /* A decayed: released before C and D */
  CHECK_EQ_INT(cached_of(e, 100, 5), 0);
  CHECK_EQ_INT(cached_of(e, 300, 5), 4);
  CHECK_EQ_INT(cached_of(e, 400, 5), 4);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_evictions_normal, 2); /* A counted at the priority it had: normal */
  CHECK_EQ_INT(s.num_evictions_highest, 0);
  check_sums(e);
  CHECK_OK(pkv_release(e, f));
  pkv_engine_destroy(e);
  unsetenv("PKV_TEST_CLOCK_MS");
}

/* A low priority's decay raises the block to normal: an older low block of one retention that
 * has decayed must not hide a later one still low (found by test_random_retention: the victim was
 * the decayed head of the class, not the later low block). */
static void test_low_decay_behind(void) {
  clock_at("1000");
  pkv_engine *e = tu_engine(BS, 4, PKV_DEBUG_TEST_CLOCK);
  if (!e) return;
  cache_prompt(e, 100, 5, -1, 100); /* A: low until 1100 */
  clock_at("1050");
  cache_prompt(e, 200, 5, 0, 0); /* B */
  clock_at("1080");
  cache_prompt(e, 300, 5, -1, 100); /* C: low until 1180 */
  clock_at("1120");
  uint64_t d = run_prompt(e, 400, 5, 0, 0); /* C, the only low one now */
  CHECK_EQ_INT(cached_of(e, 300, 5), 0);
  CHECK_EQ_INT(cached_of(e, 100, 5), 4);
  CHECK_EQ_INT(cached_of(e, 200, 5), 4);
  CHECK_EQ_INT(tu_stats(e).num_evictions_low, 1);
  CHECK_OK(pkv_release(e, d));
  check_sums(e);
  pkv_engine_destroy(e);
  unsetenv("PKV_TEST_CLOCK_MS");
}

/* A cached block moves at once; a block in use keeps the priority for its release; a block
 * shared by holders of different priorities keeps the highest. */
static void test_set_priority(void) {
  pkv_engine *e = tu_engine(BS, 3, 0);
  if (!e) return;
  int32_t a[5];
  tu_fill(a, 5, 100);
  cache_prompt(e, 100, 5, 0, 0); /* A */
  cache_prompt(e, 200, 5, 0, 0); /* B */
  uint32_t n = 99;
  CHECK_OK(pkv_cache_set_priority(e, a, 5, NULL, 2, 0, &n));
  CHECK_EQ_INT(n, 1);
  uint64_t c = run_prompt(e, 300, 5, 0, 0); /* B goes, not the older A */
  CHECK_EQ_INT(cached_of(e, 100, 5), 4);
  CHECK_EQ_INT(cached_of(e, 200, 5), 0);
  CHECK_OK(pkv_release(e, c));
  /* Lowered: A goes before C, which was released later. */
  CHECK_OK(pkv_cache_set_priority(e, a, 5, NULL, -1, 0, &n));
  CHECK_EQ_INT(n, 1);
  uint64_t d = run_prompt(e, 400, 5, 0, 0);
  CHECK_EQ_INT(cached_of(e, 100, 5), 0);
  CHECK_EQ_INT(cached_of(e, 300, 5), 4);
  CHECK_OK(pkv_release(e, d));
  /* In use: E holds its block when it gets priority 2, and releases it as a normal sequence. */
  uint64_t x = run_prompt(e, 500, 5, 0, 0);
  int32_t t5[5];
  tu_fill(t5, 5, 500);
  CHECK_OK(pkv_cache_set_priority(e, t5, 5, NULL, 2, 0, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_OK(pkv_release(e, x));
  cache_prompt(e, 600, 5, 0, 0); /* evicts C or D (normal), F cached after */
  uint64_t y = run_prompt(e, 700, 5, 0, 0);
  CHECK_EQ_INT(cached_of(e, 500, 5), 4);
  CHECK_OK(pkv_release(e, y));
  /* Shared: G (highest) and H (normal) hold one block; G releases first. */
  uint64_t g = run_prompt(e, 800, 5, 2, 0);
  uint64_t h = run_prompt(e, 800, 5, 0, 0);
  CHECK_OK(pkv_release(e, g));
  CHECK_OK(pkv_release(e, h));
  cache_prompt(e, 900, 5, 0, 0); /* K, normal and newer */
  uint64_t z = run_prompt(e, 1000, 5, 0, 0);
  CHECK_EQ_INT(cached_of(e, 800, 5), 4);
  CHECK_EQ_INT(cached_of(e, 900, 5), 0);
  CHECK_OK(pkv_release(e, z));
  /* Nothing cached: nothing given it. */
  int32_t none[8];
  tu_fill(none, 8, 5000);
  CHECK_OK(pkv_cache_set_priority(e, none, 8, NULL, 1, 0, &n));
  CHECK_EQ_INT(n, 0);
  check_sums(e);
  pkv_engine_destroy(e);
}

/* A preempted sequence's blocks keep its priority too. */
static void test_preempt_keeps_priority(void) {
  pkv_engine *e = tu_engine(BS, 3, 0);
  if (!e) return;
  cache_prompt(e, 100, 5, 0, 0);
  uint64_t a = run_prompt(e, 200, 5, 1, 0);
  CHECK_OK(pkv_preempt(e, a));
  uint64_t b = run_prompt(e, 300, 5, 0, 0); /* the normal one goes */
  CHECK_EQ_INT(cached_of(e, 100, 5), 0);
  CHECK_EQ_INT(cached_of(e, 200, 5), 4);
  CHECK_EQ_INT(tu_stats(e).num_evictions_normal, 1);
  CHECK_OK(pkv_release(e, b));
  CHECK_OK(pkv_release(e, a));
  check_sums(e);
  pkv_engine_destroy(e);
}

static uint64_t pin_prompt(pkv_engine *e, int32_t first, uint32_t n, uint32_t *out_tokens) {
  int32_t t[64];
  tu_fill(t, n, first);
  uint64_t pin = 0;
  if (!CHECK_OK(pkv_cache_pin(e, t, n, NULL, &pin, out_tokens))) return 0;
  CHECK(pin != 0);
  return pin;
}

/* Pinned blocks are held: never evicted, not free; unpinned they are cached again. */
static void test_pins(void) {
  pkv_engine *e = tu_engine(BS, 8, 0);
  if (!e) return;
  cache_prompt(e, 100, 9, -1, 0); /* 2 sealed blocks, lowest priority */
  uint32_t tokens = 99;
  uint64_t pin = pin_prompt(e, 100, 9, &tokens);
  CHECK_EQ_INT(tokens, 8);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_pins, 1);
  CHECK_EQ_INT(s.num_pinned_blocks, 2);
  CHECK_EQ_INT(s.num_cached_blocks, 0);
  CHECK_EQ_INT(s.num_free_blocks, 6);
  /* The rest of the pool, twice over: the pinned prefix stays. */
  for (int i = 0; i < 4; ++i) cache_prompt(e, 1000 * (i + 1), 21, 0, 0);
  CHECK_EQ_INT(cached_of(e, 100, 9), 8);
  int32_t big[25];
  tu_fill(big, 25, 9000);
  uint64_t seq = 0;
  CHECK_ERR(e, pkv_allocate(e, big, 25, NULL, &seq, NULL), PKV_ERR_NO_SPACE); /* 7 > 6 */
  /* Nothing cached: a pin of 0 tokens that holds nothing. */
  uint64_t empty = pin_prompt(e, 7000, 9, &tokens);
  CHECK_EQ_INT(tokens, 0);
  CHECK_EQ_INT(tu_stats(e).num_pins, 2);
  CHECK_OK(pkv_cache_unpin(e, empty));
  CHECK_ENGINE(e);
  CHECK_OK(pkv_cache_unpin(e, pin));
  s = tu_stats(e);
  CHECK_EQ_INT(s.num_pins, 0);
  CHECK_EQ_INT(s.num_pinned_blocks, 0);
  CHECK_EQ_INT(s.num_free_blocks, 8);
  CHECK_EQ_INT(cached_of(e, 100, 9), 8);
  uint64_t a = run_prompt(e, 9000, 9, 0, 0); /* 3 blocks: the unpinned lowest ones go first */
  CHECK_EQ_INT(cached_of(e, 100, 9), 0);
  CHECK_OK(pkv_release(e, a));
  CHECK_ERR(e, pkv_cache_unpin(e, pin), PKV_ERR_NOT_FOUND);
  CHECK(strstr(pkv_last_error(), "no pin") != NULL);
  CHECK_ERR(e, pkv_cache_unpin(e, 0), PKV_ERR_NOT_FOUND);
  check_sums(e);
  pkv_engine_destroy(e);
}

/* All pins together hold at most PKV_MAX_PINNED_PERCENT of the pool; past it nothing changes. */
static void test_pin_cap(void) {
  pkv_engine *e = tu_engine(BS, 8, 0); /* at most 4 pinned blocks */
  if (!e) return;
  cache_prompt(e, 100, 13, 0, 0); /* 3 sealed blocks */
  cache_prompt(e, 200, 9, 0, 0);  /* 2 sealed blocks (evicts nothing: 8 blocks) */
  uint32_t tokens = 0;
  uint64_t a = pin_prompt(e, 100, 13, &tokens);
  CHECK_EQ_INT(tokens, 12);
  pkv_stats before = tu_stats(e);
  int32_t t[9];
  tu_fill(t, 9, 200);
  uint64_t pin = 77;
  CHECK_ERR(e, pkv_cache_pin(e, t, 9, NULL, &pin, &tokens), PKV_ERR_NO_SPACE);
  CHECK(strstr(pkv_last_error(), "PKV_MAX_PINNED_PERCENT") != NULL);
  CHECK(strstr(pkv_last_error(), "3 of the pool's 8") != NULL);
  CHECK_EQ_INT(pin, 77);
  pkv_stats after = tu_stats(e);
  CHECK_EQ_INT(after.num_pins, before.num_pins);
  CHECK_EQ_INT(after.num_pinned_blocks, before.num_pinned_blocks);
  CHECK_EQ_INT(after.num_cached_blocks, before.num_cached_blocks);
  CHECK_EQ_INT(after.num_free_blocks, before.num_free_blocks);
  /* The same prefix again costs nothing more. */
  uint64_t b = pin_prompt(e, 100, 13, &tokens);
  CHECK_EQ_INT(tokens, 12);
  CHECK_EQ_INT(tu_stats(e).num_pinned_blocks, 3);
  CHECK(b != a);
  CHECK_OK(pkv_cache_unpin(e, a));
  CHECK_EQ_INT(tu_stats(e).num_pinned_blocks, 3); /* b still holds them */
  CHECK_OK(pkv_cache_unpin(e, b));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* pkv_reset_prefix_cache keeps pinned blocks: they are in use. */
static void test_reset_keeps_pins(void) {
  pkv_engine *e = tu_engine(BS, 8, 0);
  if (!e) return;
  cache_prompt(e, 100, 9, 0, 0);
  cache_prompt(e, 200, 9, 0, 0);
  uint32_t tokens = 0;
  uint64_t pin = pin_prompt(e, 100, 9, &tokens);
  CHECK_OK(pkv_reset_prefix_cache(e));
  CHECK_EQ_INT(cached_of(e, 100, 9), 8);
  CHECK_EQ_INT(cached_of(e, 200, 9), 0);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_cached_blocks, 0);
  CHECK_EQ_INT(s.num_pinned_blocks, 2);
  CHECK_OK(pkv_cache_unpin(e, pin));
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 2);
  check_sums(e);
  pkv_engine_destroy(e);
}

/* 0.7 callers: their struct sizes end before the new fields, which read as defaults (a bad value
 * beyond their size is never read), and pkv_stats is written only up to their size. */
static void test_struct_sizes_07(void) {
  pkv_engine *e = tu_engine(BS, 8, 0);
  if (!e) return;
  int32_t t[5];
  tu_fill(t, 5, 100);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.struct_size = (uint32_t)offsetof(pkv_seq_params, cache_priority);
  sp.cache_priority = 9; /* past a 0.7 struct: not read */
  uint64_t seq = 0;
  CHECK_OK(pkv_allocate(e, t, 5, &sp, &seq, NULL));
  CHECK_OK(pkv_release(e, seq));
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.struct_size = (uint32_t)offsetof(pkv_request_params, cache_priority);
  rp.cache_priority = -9;
  CHECK_OK(pkv_submit(e, t, 5, &rp, &seq));
  pkv_stats s;
  memset(&s, 0xab, sizeof s);
  s.struct_size = (uint32_t)offsetof(pkv_stats, num_pinned_blocks);
  CHECK_OK(pkv_engine_stats(e, &s));
  CHECK_EQ_INT(s.num_blocks, 8);
  CHECK(s.num_pins == 0xababababababababull); /* untouched */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Each bad argument: INVALID_ARGUMENT with a message naming it, nothing changed. */
static void test_bad_arguments(void) {
  pkv_engine *e = tu_engine(BS, 3, 0);
  if (!e) return;
  int32_t a[5];
  tu_fill(a, 5, 100);
  cache_prompt(e, 100, 5, 0, 0);
  cache_prompt(e, 200, 5, 0, 0);
  uint32_t n = 99;
  CHECK_ERR(e, pkv_cache_set_priority(e, a, 5, NULL, 3, 0, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "cache_priority 3 is outside") != NULL);
  CHECK_ERR(e, pkv_cache_set_priority(e, a, 5, NULL, -2, 0, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_cache_set_priority(e, NULL, 5, NULL, 1, 0, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "tokens is NULL") != NULL);
  CHECK_ERR(e, pkv_cache_set_priority(e, a, 0, NULL, 1, 0, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 99);
  uint64_t pin = 0;
  CHECK_ERR(e, pkv_cache_pin(e, a, 5, NULL, NULL, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "out_pin is NULL") != NULL);
  CHECK_ERR(e, pkv_cache_pin(e, NULL, 5, NULL, &pin, NULL), PKV_ERR_INVALID_ARGUMENT);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_priority = 3;
  uint64_t seq = 0;
  CHECK_ERR(e, pkv_allocate(e, a, 5, &sp, &seq, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "seq params' cache_priority 3") != NULL);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.cache_priority = -2;
  CHECK_ERR(e, pkv_submit(e, a, 5, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "request params' cache_priority -2") != NULL);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_seqs, 0);
  CHECK_EQ_INT(s.num_pins, 0);
  /* Still plain LRU: the older A goes first. */
  uint64_t c = run_prompt(e, 300, 5, 0, 0);
  CHECK_EQ_INT(cached_of(e, 100, 5), 0);
  CHECK_EQ_INT(cached_of(e, 200, 5), 4);
  /* An open batch refuses the calls. */
  pkv_batch *b = NULL;
  uint32_t one = 1;
  CHECK_OK(pkv_append(e, c, a, 1));
  CHECK_OK(pkv_batch_begin(e, &c, &one, 1, &b));
  CHECK_ERR(e, pkv_cache_pin(e, a, 5, NULL, &pin, NULL), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_cache_set_priority(e, a, 5, NULL, 1, 0, NULL), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_cache_unpin(e, 1), PKV_ERR_STATE);
  pkv_batch_abort(b);
  CHECK_OK(pkv_release(e, c));
  check_sums(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_priority_order);
  TU_RUN(test_retention_decay);
  TU_RUN(test_low_decay_behind);
  TU_RUN(test_set_priority);
  TU_RUN(test_preempt_keeps_priority);
  TU_RUN(test_pins);
  TU_RUN(test_pin_cap);
  TU_RUN(test_reset_keeps_pins);
  TU_RUN(test_struct_sizes_07);
  TU_RUN(test_bad_arguments);
  return tu_summary();
}
