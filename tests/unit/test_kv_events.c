/* KV events (pkv_drain_kv_events, pkv_reset_prefix_cache): off by default; STORED when a
 * prefix's first copy is sealed, with the canonical hashes (pkv_block_hash) and no STORED for a
 * duplicate; REMOVED when the last copy is evicted; ALL_CLEARED or REMOVED per node on a reset;
 * one OVERFLOW when the host falls behind; draining in batches; salted roots. */
#include "test_util.h"

enum { BS = 4, SEED = 7 };

static pkv_engine *engine(uint32_t num_blocks, uint32_t enable, uint32_t capacity) {
  pkv_engine_params p;
  tu_params(&p, BS, num_blocks);
  p.hash_seed = SEED;
  p.enable_kv_events = enable;
  p.kv_events_capacity = capacity;
  return tu_engine_p(&p);
}

static uint32_t drain(pkv_engine *e, pkv_kv_event *out, uint32_t cap) {
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, out, cap, &n));
  return n;
}

/* hashes[i] = canonical hash of block i of tokens[0 .. n*BS), under salt (NULL = none);
 * hashes[-1] is the root. */
static void chain(const int32_t *tokens, uint32_t n, const char *salt, uint64_t *hashes) {
  CHECK_OK(pkv_block_hash_root(SEED, salt, salt ? (uint32_t)strlen(salt) : 0, &hashes[-1]));
  for (uint32_t i = 0; i < n; i++)
    CHECK_OK(pkv_block_hash(SEED, hashes[(int)i - 1], tokens + i * BS, BS, &hashes[i]));
}

static void check_event(const pkv_kv_event *ev, uint32_t type, uint64_t seq_no, uint64_t hash,
                        uint64_t parent) {
  CHECK_EQ_INT(ev->type, type);
  CHECK_EQ_INT(ev->seq_no, seq_no);
  CHECK_EQ_INT(ev->num_tokens,
               type == PKV_EVENT_BLOCK_STORED || type == PKV_EVENT_BLOCK_REMOVED ? BS : 0);
  if (type == PKV_EVENT_BLOCK_STORED || type == PKV_EVENT_BLOCK_REMOVED) {
    CHECK(ev->block_hash == hash);
    CHECK(ev->parent_hash == parent);
  }
}

static void test_disabled_by_default(void) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  CHECK_EQ_INT(p.enable_kv_events, 0);
  pkv_engine *e = engine(16, 0, 0);
  if (!e) return;
  int32_t t[12];
  tu_fill(t, 12, 1);
  uint64_t s = tu_alloc(e, t, 12, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_release(e, s));
  CHECK_OK(pkv_reset_prefix_cache(e));
  pkv_kv_event ev[4];
  CHECK_EQ_INT(drain(e, ev, 4), 0);
  uint32_t n = 5;
  CHECK_ERR(e, pkv_drain_kv_events(e, NULL, 4, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_drain_kv_events(e, ev, 4, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_drain_kv_events(e, NULL, 0, &n));
  CHECK_EQ_INT(n, 0);
  pkv_engine_destroy(e);
}

/* Stored once per prefix, with the chain; removed when the last copy goes. */
static void test_stored_and_removed(void) {
  pkv_engine *e = engine(16, 1, 0);
  if (!e) return;
  int32_t t[12], big[64];
  tu_fill(t, 12, 1);
  tu_fill(big, 64, 1000);
  uint64_t h_[4], *h = h_ + 1;
  chain(t, 3, NULL, h);
  uint64_t a = tu_alloc(e, t, 12, NULL);
  pkv_kv_event ev[32];
  CHECK_EQ_INT(drain(e, ev, 32), 0); /* reserved, not sealed yet */
  tu_compute1(e, a);
  if (CHECK_EQ_INT(drain(e, ev, 32), 3))
    for (uint32_t i = 0; i < 3; i++)
      check_event(&ev[i], PKV_EVENT_BLOCK_STORED, i + 1, h[i], h[(int)i - 1]);
  /* a duplicate: hits two blocks, recomputes the last one into a second copy - no event */
  uint32_t cached = 0;
  uint64_t b = tu_alloc(e, t, 12, &cached);
  CHECK_EQ_INT(cached, 8);
  tu_compute1(e, b);
  CHECK_EQ_INT(drain(e, ev, 32), 0);
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, b));
  CHECK_EQ_INT(drain(e, ev, 32), 0); /* cached, still held */
  /* 16 blocks of other tokens evict all four cached blocks: 3 nodes removed, once each */
  uint64_t c = tu_alloc(e, big, 64, NULL);
  uint32_t n = drain(e, ev, 32);
  if (CHECK_EQ_INT(n, 3)) {
    int seen[3] = {0, 0, 0};
    for (uint32_t i = 0; i < n; i++)
      for (int k = 0; k < 3; k++)
        if (ev[i].block_hash == h[k]) {
          seen[k]++;
          check_event(&ev[i], PKV_EVENT_BLOCK_REMOVED, 4 + i, h[k], h[k - 1]);
        }
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1);
  }
  tu_compute1(e, c);
  CHECK_EQ_INT(drain(e, ev, 32), 16);
  CHECK_EQ_INT(ev[15].seq_no, 22);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A reset with nothing sealed in use: one ALL_CLEARED. With some in use: REMOVED per node that
 * went, and the nodes in use stay. */
static void test_reset(void) {
  pkv_engine *e = engine(16, 1, 0);
  if (!e) return;
  int32_t t[8], u[8];
  tu_fill(t, 8, 1);
  tu_fill(u, 8, 300);
  uint64_t hu_[3], *hu = hu_ + 1;
  chain(u, 2, NULL, hu);
  uint64_t a = tu_alloc(e, t, 8, NULL), b = tu_alloc(e, u, 8, NULL);
  uint64_t ab[2] = {a, b};
  tu_compute(e, ab, 2);
  pkv_kv_event ev[16];
  CHECK_EQ_INT(drain(e, ev, 16), 4);
  CHECK_OK(pkv_release(e, b));
  CHECK_OK(pkv_reset_prefix_cache(e)); /* a's blocks are sealed and in use */
  uint32_t n = drain(e, ev, 16);
  if (CHECK_EQ_INT(n, 2)) {
    CHECK_EQ_INT(ev[0].type, PKV_EVENT_BLOCK_REMOVED);
    CHECK_EQ_INT(ev[1].type, PKV_EVENT_BLOCK_REMOVED);
    CHECK(ev[0].block_hash + ev[1].block_hash == hu[0] + hu[1]);
  }
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_cached_blocks, 0);
  CHECK_EQ_INT(st.num_prefix_nodes, 2);
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_reset_prefix_cache(e));
  n = drain(e, ev, 16);
  if (CHECK_EQ_INT(n, 1)) check_event(&ev[0], PKV_EVENT_ALL_CLEARED, 7, 0, 0);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_cached_blocks + st.num_prefix_nodes, 0);
  uint32_t cached = 9;
  uint64_t again = tu_alloc(e, t, 8, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_OK(pkv_release(e, again));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Capacity 4: the fifth event overflows: the queue drops all and holds OVERFLOW, then goes on. */
static void test_overflow_and_batches(void) {
  pkv_engine *e = engine(32, 1, 4);
  if (!e) return;
  int32_t t[24];
  tu_fill(t, 24, 1);
  uint64_t h_[7], *h = h_ + 1;
  chain(t, 6, NULL, h);
  uint64_t a = tu_alloc(e, t, 24, NULL);
  tu_compute1(e, a);
  pkv_kv_event ev[2];
  uint32_t n = drain(e, ev, 2);
  if (CHECK_EQ_INT(n, 2)) {
    check_event(&ev[0], PKV_EVENT_OVERFLOW, 5, 0, 0);
    check_event(&ev[1], PKV_EVENT_BLOCK_STORED, 6, h[4], h[3]);
  }
  n = drain(e, ev, 2);
  if (CHECK_EQ_INT(n, 1)) check_event(&ev[0], PKV_EVENT_BLOCK_STORED, 7, h[5], h[4]);
  CHECK_EQ_INT(drain(e, ev, 2), 0);
  /* under capacity: drained in batches of 2, oldest first */
  int32_t u[12];
  tu_fill(u, 12, 500);
  uint64_t hu_[4], *hu = hu_ + 1;
  chain(u, 3, NULL, hu);
  uint64_t b = tu_alloc(e, u, 12, NULL);
  tu_compute1(e, b);
  n = drain(e, ev, 2);
  if (CHECK_EQ_INT(n, 2)) {
    check_event(&ev[0], PKV_EVENT_BLOCK_STORED, 8, hu[0], hu[-1]);
    check_event(&ev[1], PKV_EVENT_BLOCK_STORED, 9, hu[1], hu[0]);
  }
  if (CHECK_EQ_INT(drain(e, ev, 2), 1))
    check_event(&ev[0], PKV_EVENT_BLOCK_STORED, 10, hu[2], hu[1]);
  pkv_engine_destroy(e);
}

/* Salted prompts chain from the salt's root; the same tokens under two salts are two prefixes. */
static void test_salted_roots(void) {
  pkv_engine *e = engine(16, 1, 0);
  if (!e) return;
  int32_t t[8];
  tu_fill(t, 8, 1);
  uint64_t ha_[3], *ha = ha_ + 1, hb_[3], *hb = hb_ + 1;
  chain(t, 2, "tenant-a", ha);
  chain(t, 2, "tenant-b", hb);
  CHECK(ha[-1] != hb[-1] && ha[0] != hb[0]);
  uint64_t a = tu_alloc_salt(e, t, 8, "tenant-a", NULL);
  uint64_t b = tu_alloc_salt(e, t, 8, "tenant-b", NULL);
  uint64_t ab[2] = {a, b};
  tu_compute(e, ab, 2);
  pkv_kv_event ev[8];
  if (CHECK_EQ_INT(drain(e, ev, 8), 4)) {
    check_event(&ev[0], PKV_EVENT_BLOCK_STORED, 1, ha[0], ha[-1]);
    check_event(&ev[1], PKV_EVENT_BLOCK_STORED, 2, ha[1], ha[0]);
    check_event(&ev[2], PKV_EVENT_BLOCK_STORED, 3, hb[0], hb[-1]);
    check_event(&ev[3], PKV_EVENT_BLOCK_STORED, 4, hb[1], hb[0]);
  }
  pkv_engine_destroy(e);
}

/* pkv_drain_kv_events_sized: a caller's grown struct gets the known fields and zeroes after
 * them, at its own stride; sizes below 32 or not a multiple of 8 are refused and drain nothing. */
static void test_sized_drain(void) {
  pkv_engine *e = engine(16, 1, 0);
  if (!e) return;
  int32_t t[12];
  tu_fill(t, 12, 1);
  uint64_t s = tu_alloc(e, t, 12, NULL);
  tu_compute1(e, s); /* three full blocks: three STORED */
  uint64_t h_[4], *h = h_ + 1;
  chain(t, 3, NULL, h);
  enum { GROWN = 48 };
  unsigned char buf[4 * GROWN];
  memset(buf, 0xAB, sizeof buf);
  uint32_t n = 9;
  CHECK_ERR(e, pkv_drain_kv_events_sized(e, (pkv_kv_event *)buf, 24, 3, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_drain_kv_events_sized(e, (pkv_kv_event *)buf, 36, 3, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 9);
  CHECK_OK(pkv_drain_kv_events_sized(e, (pkv_kv_event *)buf, GROWN, 4, &n));
  CHECK_EQ_INT(n, 3);
  for (uint32_t i = 0; i < 3; i++) {
    pkv_kv_event ev;
    memcpy(&ev, buf + i * GROWN, sizeof ev);
    check_event(&ev, PKV_EVENT_BLOCK_STORED, i + 1, h[i], h[(int)i - 1]);
    for (uint32_t b = sizeof ev; b < GROWN; b++) CHECK_EQ_INT(buf[i * GROWN + b], 0);
  }
  CHECK_EQ_INT(buf[3 * GROWN], 0xAB); /* nothing past the events drained */
  /* The 0.1 size through the sized call is the 0.1 call. */
  CHECK_OK(pkv_release(e, s));
  CHECK_OK(pkv_reset_prefix_cache(e));
  pkv_kv_event ev[2];
  CHECK_OK(pkv_drain_kv_events_sized(e, ev, (uint32_t)sizeof ev[0], 2, &n));
  CHECK_EQ_INT(n, 1);
  check_event(&ev[0], PKV_EVENT_ALL_CLEARED, 4, 0, 0);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_disabled_by_default);
  TU_RUN(test_stored_and_removed);
  TU_RUN(test_reset);
  TU_RUN(test_overflow_and_batches);
  TU_RUN(test_salted_roots);
  TU_RUN(test_sized_drain);
  return tu_summary();
}
