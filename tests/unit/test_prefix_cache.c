/* The prefix cache: exact hits, sharing, the whole-block cap, stale blocks, in-use copies. */
#include "test_util.h"

/* The seeds' example: S2's first 512 tokens are S1's, so it shares S1's first two blocks. */
static void test_s1_s2(void) {
  pkv_engine *e = tu_engine(256, 16, 0);
  if (!e) return;
  int32_t s1[600], s2[520];
  tu_fill(s1, 600, 1000);
  memcpy(s2, s1, 512 * sizeof s1[0]);
  tu_fill(s2 + 512, 8, 50000);
  uint32_t cached = 99;
  uint64_t a = tu_alloc(e, s1, 600, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_info(e, a).num_blocks, 3);
  tu_compute1(e, a);

  uint32_t q_blocks = 0, q_cached = 0;
  CHECK_OK(pkv_allocate_query(e, s2, 520, NULL, &q_blocks, &q_cached));
  CHECK_EQ_INT(q_cached, 512);
  CHECK_EQ_INT(q_blocks, 1); /* the two hits are in use: only the last block is taken */

  uint64_t b = tu_alloc(e, s2, 520, &cached);
  CHECK_EQ_INT(cached, 512);
  int32_t ta[8], tb[8];
  CHECK_EQ_INT(tu_table(e, a, ta, 8), 3);
  CHECK_EQ_INT(tu_table(e, b, tb, 8), 3);
  CHECK_EQ_INT(tb[0], ta[0]);
  CHECK_EQ_INT(tb[1], ta[1]);
  CHECK(tb[2] != ta[2]);
  struct pkv_seq_info info = tu_info(e, b);
  CHECK_EQ_INT(info.num_tokens, 520);
  CHECK_EQ_INT(info.num_cached_tokens, 512);
  CHECK_EQ_INT(info.num_computed_tokens, 512);
  pkv_stats s = tu_stats(e);
  CHECK_EQ_INT(s.num_used_blocks, 4);
  CHECK_EQ_INT(s.num_free_blocks, 12);
  CHECK_EQ_INT(s.prefix_hit_tokens, 512);
  CHECK(s.prefix_query_tokens >= 512);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A = [x, y, t], B = [z, y]: B's y must never be served to a prompt [x, y, ...] - neither while
 * A's y is alive, nor after A's y block was reused for y under z (nano-vllm's stale entry). */
static void test_same_tokens_other_prefix(void) {
  pkv_engine *e = tu_engine(4, 3, 0);
  if (!e) return;
  const int32_t x[4] = {1, 2, 3, 4}, y[4] = {5, 6, 7, 8}, z[4] = {9, 10, 11, 12};
  int32_t pa[9], pb[8];
  memcpy(pa, x, sizeof x);
  memcpy(pa + 4, y, sizeof y);
  pa[8] = 77;
  memcpy(pb, z, sizeof z);
  memcpy(pb + 4, y, sizeof y);
  uint32_t cached = 99;
  uint64_t a = tu_alloc(e, pa, 9, &cached);
  tu_compute1(e, a);
  int32_t ta[3], tb[3], td[3];
  tu_table(e, a, ta, 3);
  CHECK_OK(pkv_release(e, a));
  /* free list now [a2 (unsealed), a1 (y under x), a0 (x)] */

  uint64_t b = tu_alloc(e, pb, 8, &cached);
  CHECK_EQ_INT(cached, 0); /* z misses, so y is never looked up */
  tu_table(e, b, tb, 3);
  CHECK_EQ_INT(tb[0], ta[2]);
  CHECK_EQ_INT(tb[1], ta[1]); /* a1 reused for y under z */
  CHECK_EQ_INT(tu_stats(e).num_evictions, 1);
  tu_compute1(e, b);
  CHECK_OK(pkv_release(e, b));
  CHECK_ENGINE(e);

  uint64_t d = tu_alloc(e, pa, 9, &cached);
  CHECK_EQ_INT(cached, 4); /* x still cached; y under x is gone */
  tu_table(e, d, td, 3);
  CHECK_EQ_INT(td[0], ta[0]);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, d));

  /* d's new blocks were [a1, a2]: both y under z and z itself were evicted */
  CHECK_EQ_INT(tu_stats(e).num_evictions, 3);
  int32_t pe[9];
  memcpy(pe, pb, sizeof pb);
  pe[8] = 1;
  uint32_t q_cached = 99;
  CHECK_OK(pkv_allocate_query(e, pe, 9, NULL, NULL, &q_cached));
  CHECK_EQ_INT(q_cached, 0);
  pkv_engine_destroy(e);
}

/* Two live sequences with the same 2 blocks, then B with [z, y]: B's y has its own block. */
static void test_same_tokens_live(void) {
  pkv_engine *e = tu_engine(4, 32, 0);
  if (!e) return;
  int32_t pa[9] = {1, 2, 3, 4, 5, 6, 7, 8, 77};
  int32_t pb[9] = {9, 10, 11, 12, 5, 6, 7, 8, 77};
  uint32_t cached = 99;
  uint64_t a = tu_alloc(e, pa, 9, &cached);
  tu_compute1(e, a);
  uint64_t b = tu_alloc(e, pb, 9, &cached);
  CHECK_EQ_INT(cached, 0);
  int32_t ta[3], tb[3];
  tu_table(e, a, ta, 3);
  tu_table(e, b, tb, 3);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) CHECK(ta[i] != tb[j]);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A prompt of whole blocks, fully cached, still recomputes its last block. */
static void test_whole_block_cap(void) {
  pkv_engine *e = tu_engine(4, 32, 0);
  if (!e) return;
  int32_t t[12];
  tu_fill(t, 12, 100);
  uint32_t cached = 99, q_blocks = 0, q_cached = 99;
  uint64_t a = tu_alloc(e, t, 8, &cached);
  tu_compute1(e, a);
  CHECK_OK(pkv_allocate_query(e, t, 8, NULL, &q_blocks, &q_cached));
  CHECK_EQ_INT(q_cached, 4);
  CHECK_EQ_INT(q_blocks, 1);
  uint64_t b = tu_alloc(e, t, 8, &cached);
  CHECK_EQ_INT(cached, 4);
  int32_t ta[3], tb[3];
  tu_table(e, a, ta, 3);
  CHECK_EQ_INT(tu_table(e, b, tb, 3), 2);
  CHECK_EQ_INT(tb[0], ta[0]);
  CHECK(tb[1] != ta[1]);
  CHECK_EQ_INT(tu_info(e, b).num_computed_tokens, 4);

  /* a one-block prompt never hits */
  uint64_t c = tu_alloc(e, t, 4, &cached);
  CHECK_EQ_INT(cached, 0);
  tu_compute1(e, c);
  tu_alloc(e, t, 4, &cached);
  CHECK_EQ_INT(cached, 0);
  /* one token more than the cached blocks: every full block hits */
  uint64_t d = tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  (void)d;
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Different salts never share; the same salt (other buffer, same bytes) does. */
static void test_salts(void) {
  pkv_engine *e = tu_engine(4, 64, 0);
  if (!e) return;
  int32_t t[9];
  tu_fill(t, 9, 500);
  char salt_a2[] = "tenant-a";
  uint32_t cached = 99;
  uint64_t a = tu_alloc_salt(e, t, 9, "tenant-a", &cached);
  tu_compute1(e, a);
  uint64_t b = tu_alloc_salt(e, t, 9, "tenant-b", &cached);
  CHECK_EQ_INT(cached, 0);
  tu_compute1(e, b);
  uint64_t c = tu_alloc_salt(e, t, 9, salt_a2, &cached);
  CHECK_EQ_INT(cached, 8);
  uint64_t d = tu_alloc_salt(e, t, 9, "tenant-", &cached); /* a prefix of the salt */
  CHECK_EQ_INT(cached, 0);
  uint64_t f = tu_alloc(e, t, 9, &cached); /* no salt */
  CHECK_EQ_INT(cached, 0);
  tu_compute1(e, f);
  uint64_t g = tu_alloc_salt(e, t, 9, "", &cached); /* empty salt = no salt */
  CHECK_EQ_INT(cached, 8);
  CHECK_EQ_INT(tu_info(e, a).cache_salt_len, 8);

  int32_t ta[3], tb[3], tc[3], tf[3], tg[3];
  tu_table(e, a, ta, 3);
  tu_table(e, b, tb, 3);
  tu_table(e, c, tc, 3);
  tu_table(e, f, tf, 3);
  tu_table(e, g, tg, 3);
  for (int i = 0; i < 2; i++) {
    CHECK_EQ_INT(tc[i], ta[i]);
    CHECK_EQ_INT(tg[i], tf[i]);
    CHECK(tb[i] != ta[i] && tf[i] != ta[i] && tf[i] != tb[i]);
  }
  (void)d;
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Same-step duplicates are two copies of one node; a hit prefers the copy in use. */
static void test_hit_prefers_used_copy(void) {
  pkv_engine *e = tu_engine(4, 32, 0);
  if (!e) return;
  int32_t t[9];
  tu_fill(t, 9, 700);
  uint32_t cached = 99;
  uint64_t ab[2];
  ab[0] = tu_alloc(e, t, 9, &cached);
  ab[1] = tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 0); /* nothing sealed before the step ran */
  tu_compute(e, ab, 2);
  int32_t ta[3], tb[3], tc[3];
  tu_table(e, ab[0], ta, 3);
  tu_table(e, ab[1], tb, 3);
  CHECK(ta[0] != tb[0]);
  CHECK_OK(pkv_release(e, ab[0])); /* a's copies become cached */
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 2);
  uint32_t q_blocks = 0;
  CHECK_OK(pkv_allocate_query(e, t, 9, NULL, &q_blocks, NULL));
  CHECK_EQ_INT(q_blocks, 1);
  uint64_t c = tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  tu_table(e, c, tc, 3);
  CHECK_EQ_INT(tc[0], tb[0]);
  CHECK_EQ_INT(tc[1], tb[1]);
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 2);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Prefix caching off: nothing is ever shared. */
static void test_prefix_caching_off(void) {
  pkv_engine_params p;
  tu_params(&p, 4, 32);
  p.enable_prefix_caching = 0;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  int32_t t[9];
  tu_fill(t, 9, 1);
  uint32_t cached = 99;
  uint64_t a = tu_alloc(e, t, 9, &cached);
  tu_compute1(e, a);
  tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_stats(e).prefix_hit_tokens, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_s1_s2);
  TU_RUN(test_same_tokens_other_prefix);
  TU_RUN(test_same_tokens_live);
  TU_RUN(test_whole_block_cap);
  TU_RUN(test_salts);
  TU_RUN(test_hit_prefers_used_copy);
  TU_RUN(test_prefix_caching_off);
  return tu_summary();
}
