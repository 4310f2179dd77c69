/*
 * test_tenant_isolation.c - what a cache salt guarantees (DESIGN.md §4 "Cache salt"): a tenant
 * cannot learn another salt's prompts through what pkv tells it.
 *
 *  - its cached-token counts (pkv_allocate, pkv_allocate_query, pkv_resume, a request's
 *    num_cached_tokens) never reflect another salt's prompts, also with PKV_DEBUG_CONSTANT_HASH
 *    and for salts with embedded NUL bytes or that are prefixes of each other;
 *  - live block tables of different salts never share a block;
 *  - the strongest form: everything tenant B observes while admitting and computing a prompt G
 *    (its cached count, its query, its block table, the engine-wide stats deltas and values) is
 *    identical whether tenant A computed G before or another prompt of the same length: the
 *    engine-wide stats reveal A's volume of work, never which prompt;
 *  - KV events of a salted prompt hash from the salt's root (pkv_block_hash_root), so a router
 *    without the salt cannot match them to the same tokens unsalted (it can with the salt: a
 *    guessable salt lets whoever sees the events confirm a guessed prompt).
 */
#include "test_util.h"

enum { BS = 4, LEN = 14 }; /* 3 full blocks + 2 tokens */

static void fill_prompt(int32_t *t, int32_t first) { tu_fill(t, LEN, first); }

/* Allocates under salt (bytes, len) and computes it; returns the id. */
static uint64_t compute_salted(pkv_engine *e, const int32_t *t, uint32_t n, const void *salt,
                               uint32_t salt_len, uint32_t *cached) {
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = salt;
  sp.cache_salt_len = salt_len;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_allocate(e, t, n, &sp, &seq, cached))) return 0;
  tu_compute1(e, seq);
  return seq;
}

static uint32_t query_cached(pkv_engine *e, const int32_t *t, uint32_t n, const void *salt,
                             uint32_t salt_len, uint32_t *blocks) {
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = salt;
  sp.cache_salt_len = salt_len;
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, n, &sp, blocks, &cached));
  return cached;
}

static void test_cached_counts_per_salt(uint32_t debug_flags) {
  pkv_engine *e = tu_engine(BS, 64, debug_flags);
  if (!e) return;
  int32_t p[LEN];
  fill_prompt(p, 100);
  uint32_t cached = 99, blocks = 0;
  uint64_t a = compute_salted(e, p, LEN, "alice", 5, &cached);
  CHECK_EQ_INT(cached, 0);
  /* the same salt hits (the test is not vacuous) */
  CHECK_EQ_INT(query_cached(e, p, LEN, "alice", 5, &blocks), 3 * BS);
  /* other salts, and no salt, see nothing */
  static const struct {
    const char *s;
    uint32_t len;
  } others[] = {{"bob", 3}, {"alic", 4}, {"alicee", 6}, {"", 0}, {"alice\0x", 7}, {"ALICE", 5}};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    CHECK_EQ_INT(query_cached(e, p, LEN, others[i].s, others[i].len, &blocks), 0);
    CHECK_EQ_INT(blocks, 4); /* as for a prompt never seen */
    uint64_t b = compute_salted(e, p, LEN, others[i].s, others[i].len, &cached);
    CHECK_EQ_INT(cached, 0);
    struct pkv_seq_info info = tu_info(e, b);
    CHECK_EQ_INT(info.num_cached_tokens, 0);
    CHECK_OK(pkv_preempt(e, b)); /* its own prefix is cached now: resume hits only its own */
    CHECK_OK(pkv_resume(e, b, &cached));
    CHECK_EQ_INT(cached, 3 * BS);
    CHECK_OK(pkv_release(e, b));
  }
  /* embedded NUL: "x\0a" and "x\0b" are different salts */
  uint64_t n1 = compute_salted(e, p, LEN, "x\0a", 3, &cached);
  CHECK_EQ_INT(query_cached(e, p, LEN, "x\0b", 3, &blocks), 0);
  CHECK_EQ_INT(query_cached(e, p, LEN, "x", 1, &blocks), 0);
  CHECK_OK(pkv_release(e, n1));
  CHECK_OK(pkv_release(e, a));
  /* released (cached, ref 0) blocks of alice are still alice's only */
  CHECK_EQ_INT(query_cached(e, p, LEN, "carol", 5, &blocks), 0);
  CHECK_EQ_INT(query_cached(e, p, LEN, "alice", 5, &blocks), 3 * BS);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_counts_per_salt(void) { test_cached_counts_per_salt(0); }
static void test_counts_per_salt_constant_hash(void) {
  test_cached_counts_per_salt(PKV_DEBUG_CONSTANT_HASH);
}

static void test_tables_never_shared(void) {
  pkv_engine *e = tu_engine(BS, 64, 0);
  if (!e) return;
  int32_t p[LEN];
  fill_prompt(p, 7);
  uint64_t a = compute_salted(e, p, LEN, "alice", 5, NULL);
  uint64_t a2 = compute_salted(e, p, LEN, "alice", 5, NULL);
  uint64_t b = compute_salted(e, p, LEN, "bob", 3, NULL);
  uint64_t u = compute_salted(e, p, LEN, NULL, 0, NULL);
  uint64_t fork = 0;
  CHECK_OK(pkv_fork(e, b, &fork));
  int32_t ta[8], ta2[8], tb[8], tu[8], tf[8];
  uint32_t na = tu_table(e, a, ta, 8), na2 = tu_table(e, a2, ta2, 8), nb = tu_table(e, b, tb, 8);
  uint32_t nu = tu_table(e, u, tu, 8), nf = tu_table(e, fork, tf, 8);
  CHECK_EQ_INT(ta[0], ta2[0]); /* same salt shares its full blocks */
  CHECK_EQ_INT(tb[0], tf[0]);  /* a fork shares its parent's */
  for (uint32_t i = 0; i < na; i++) {
    for (uint32_t j = 0; j < nb; j++) CHECK(ta[i] != tb[j]);
    for (uint32_t j = 0; j < nu; j++) CHECK(ta[i] != tu[j]);
    for (uint32_t j = 0; j < nf; j++) CHECK(ta[i] != tf[j]);
  }
  for (uint32_t i = 0; i < nb; i++)
    for (uint32_t j = 0; j < nu; j++) CHECK(tb[i] != tu[j]);
  (void)na2;
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* What tenant B ("bob") observes while admitting and computing g, after A ("alice") computed
 * a_prompt. Fills out[] with B's cached count, query, table and the full stats after. */
typedef struct {
  uint32_t query_blocks, query_cached, cached;
  int32_t table[8];
  pkv_stats before, after;
} observation;

static void observe(const int32_t *a_prompt, const int32_t *g, uint32_t num_blocks,
                    observation *o) {
  memset(o, 0, sizeof *o);
  pkv_engine *e = tu_engine(BS, num_blocks, 0);
  if (!e) return;
  /* alice: her prompt computed and released (3 sealed blocks cached), then a 9-token prefix of
   * it admitted (2 of them revived: hits) and kept: 1 of her blocks cached, 3 in use */
  CHECK_OK(pkv_release(e, compute_salted(e, a_prompt, LEN, "alice", 5, NULL)));
  uint64_t a = compute_salted(e, a_prompt, 9, "alice", 5, NULL);
  o->before = tu_stats(e);
  o->query_cached = query_cached(e, g, LEN, "bob", 3, &o->query_blocks);
  uint64_t b = compute_salted(e, g, LEN, "bob", 3, &o->cached);
  tu_table(e, b, o->table, 8);
  o->after = tu_stats(e);
  (void)a;
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_nothing_learned_from_other_salts(void) {
  int32_t g[LEN], h[LEN];
  fill_prompt(g, 500);
  fill_prompt(h, 900); /* as long as g, different tokens */
  /* 64 blocks: no pressure; 7 blocks: bob's admission evicts alice's cached block */
  static const uint32_t pools[] = {64, 7};
  for (int i = 0; i < 2; i++) {
    observation same, other;
    observe(g, g, pools[i], &same);  /* alice computed bob's guess */
    observe(h, g, pools[i], &other); /* alice computed something else */
    CHECK_EQ_INT(same.cached, 0);
    CHECK_EQ_INT(same.query_cached, 0);
    CHECK(memcmp(&same, &other, sizeof same) == 0);
    /* engine-wide stats do move with alice's work (volume), identically in both worlds */
    CHECK(same.before.num_prefix_nodes > 0 && same.before.prefix_hit_tokens > 0);
    CHECK(same.after.num_evictions == (pools[i] == 7 ? 1u : 0u));
  }
}

static void test_events_hash_from_salt_root(void) {
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.enable_kv_events = 1;
  p.hash_seed = 1234;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  int32_t t[LEN];
  fill_prompt(t, 40);
  compute_salted(e, t, LEN, "alice", 5, NULL);
  pkv_kv_event ev[16];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 16, &n));
  CHECK_EQ_INT(n, 3);
  uint64_t salted = 0, plain = 0, unsalted_chain[3];
  CHECK_OK(pkv_block_hash_root(1234, "alice", 5, &salted));
  CHECK_OK(pkv_block_hash_root(1234, NULL, 0, &plain));
  CHECK(salted != plain);
  uint64_t parent = salted, uparent = plain;
  for (uint32_t i = 0; i < 3; i++) {
    uint64_t h = 0;
    CHECK_OK(pkv_block_hash(1234, parent, t + i * BS, BS, &h));
    CHECK_OK(pkv_block_hash(1234, uparent, t + i * BS, BS, &unsalted_chain[i]));
    if (i < n) {
      CHECK_EQ_INT(ev[i].type, PKV_EVENT_BLOCK_STORED);
      CHECK(ev[i].parent_hash == parent && ev[i].block_hash == h);
    }
    parent = h, uparent = unsalted_chain[i];
  }
  /* a router that knows only the tokens (no salt) matches none of them */
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < 3; j++)
      CHECK(ev[i].block_hash != unsalted_chain[j] && ev[i].parent_hash != plain);
  pkv_engine_destroy(e);
}

/* Requests of the scheduler: the salt of pkv_request_params isolates the same way. */
static void test_requests_isolated(void) {
  pkv_engine *e = tu_engine(BS, 64, 0);
  if (!e) return;
  int32_t t[LEN];
  fill_prompt(t, 300);
  uint64_t ids[3];
  const char *salts[3] = {"alice", "bob", "alice"};
  for (int r = 0; r < 3; r++) {
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = 1;
    rp.cache_salt = salts[r];
    rp.cache_salt_len = (uint32_t)strlen(salts[r]);
    CHECK_OK(pkv_submit(e, t, LEN, &rp, &ids[r]));
    pkv_batch *b = NULL;
    CHECK_OK(pkv_step(e, &b));
    if (!CHECK(b != NULL)) break;
    int32_t sampled[4] = {1, 1, 1, 1};
    CHECK_OK(pkv_commit(b, sampled));
  }
  CHECK_EQ_INT(tu_info(e, ids[0]).num_cached_tokens, 0);
  CHECK_EQ_INT(tu_info(e, ids[1]).num_cached_tokens, 0);      /* bob: nothing of alice's */
  CHECK_EQ_INT(tu_info(e, ids[2]).num_cached_tokens, 3 * BS); /* alice: her own prefix */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_counts_per_salt);
  TU_RUN(test_counts_per_salt_constant_hash);
  TU_RUN(test_tables_never_shared);
  TU_RUN(test_nothing_learned_from_other_salts);
  TU_RUN(test_events_hash_from_salt_root);
  TU_RUN(test_requests_isolated);
  return tu_summary();
}
