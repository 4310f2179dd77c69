/* Offload (DESIGN.md §11, tier 1): a sealed block evicted from the pool is copied to the host tier
 * (PKV_COPY_OFFLOAD) and its prefix node keeps that copy, on the host tier's own LRU list; a later
 * prompt that reaches the node takes a pool block and loads it (PKV_COPY_LOAD), counted as cached
 * tokens served by the host tier. The copies are listed by the next batch and done by
 * pkv_batch_copy here (a host without pkv_attention); the KV that comes back is the KV that left,
 * byte for byte. */
#include "test_util.h"

enum { BS = 4, BLOCKS = 12, D = 8, KVH = 2, LAYERS = 2 };

static pkv_engine *engine(uint32_t host_blocks, uint32_t offload, uint32_t events) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS); /* f32, 2 layers, 2 kv heads of 8 */
  p.host_num_blocks = host_blocks;
  p.host_offload = offload;
  p.enable_kv_events = events;
  return tu_engine_p(&p);
}

/* A prompt computed (its KV written as tag) and released: its full blocks stay cached. */
static void cache_prompt(pkv_engine *e, const int32_t *t, uint32_t n, uint32_t tag) {
  const uint64_t s = tu_alloc(e, t, n, NULL);
  tu_compute1(e, s);
  tu_kv_pattern(e, s, tag, n, 0);
  CHECK_OK(pkv_release(e, s));
}

/* Begins a batch of seq's uncomputed tokens, checks that it lists `want` copies of `kind` (among
 * any others) and does them (pkv_batch_copy); ends the batch, or aborts it when abort != 0 (the
 * copies stay done). */
static void do_copies(pkv_engine *e, uint64_t seq, int32_t kind, uint32_t want, int abort) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return;
  const pkv_batch_view v = tu_view(b);
  uint32_t got = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) got += v.copy_kind[i] == kind;
  CHECK_EQ_INT(got, want);
  CHECK_OK(pkv_batch_copy(b));
  if (abort)
    pkv_batch_abort(b);
  else
    CHECK_OK(pkv_batch_end(b));
}

/* A prompt of every pool block, never computed: it evicts every cached block. Released after its
 * batch did the copies its evictions queued. */
static void flush_pool(pkv_engine *e, int32_t first, uint32_t offloads) {
  int32_t t[BLOCKS * BS];
  tu_fill(t, BLOCKS * BS, first);
  const uint64_t f = tu_alloc(e, t, BLOCKS * BS, NULL);
  do_copies(e, f, PKV_COPY_OFFLOAD, offloads, 1);
  CHECK_OK(pkv_release(e, f));
}

static uint32_t query(pkv_engine *e, const int32_t *t, uint32_t n) {
  uint32_t blocks = 0, cached = 0;
  CHECK_OK(pkv_allocate_query(e, t, n, NULL, &blocks, &cached));
  return cached;
}

static uint32_t count_events(const pkv_kv_event *ev, uint32_t n, uint32_t type, uint32_t medium) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) k += ev[i].type == type && ev[i].medium == medium;
  return k;
}

/* Offload, then a hit that loads the blocks back with the same bytes; a third prompt hits the
 * node's pool copy (it has one in each tier now) and loads nothing. */
static void test_offload_then_hit(void) {
  pkv_engine *e = engine(6, 1, 1);
  if (!e) return;
  int32_t a[9];
  tu_fill(a, 9, 1);
  cache_prompt(e, a, 9, 7);
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 2);
  flush_pool(e, 1000, 2);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_cached_blocks, 0);
  CHECK_EQ_INT(st.num_evictions, 2);
  CHECK_EQ_INT(st.num_offloaded_blocks, 2);
  CHECK_EQ_INT(st.num_host_cached_blocks, 2);
  CHECK_EQ_INT(st.num_host_free_blocks, 6); /* cached host blocks stay usable */
  CHECK_EQ_INT(st.num_prefix_nodes, 2);     /* held by their host copies */
  pkv_kv_event ev[32];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 32, &n));
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_STORED, PKV_TIER_DEVICE), 2);
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_STORED, PKV_TIER_HOST), 2);
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_REMOVED, PKV_TIER_DEVICE), 2);
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_REMOVED, PKV_TIER_HOST), 0);
  CHECK_ENGINE(e);

  /* The hit: 8 cached tokens, from the host tier, loaded into new pool blocks. */
  CHECK_EQ_INT(query(e, a, 9), 8);
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(e, a, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  st = tu_stats(e);
  CHECK_EQ_INT(st.host_hit_tokens, 8);
  CHECK_EQ_INT(st.device_hit_tokens, 0);
  CHECK_EQ_INT(st.prefix_hit_tokens, 8);
  CHECK_EQ_INT(st.num_loaded_blocks, 2);
  CHECK_EQ_INT(tu_info(e, s).num_computed_tokens, 8);
  CHECK_ENGINE(e);
  do_copies(e, s, PKV_COPY_LOAD, 2, 0);
  CHECK_EQ_INT(tu_kv_pattern(e, s, 7, 8, 1), 0); /* the loaded blocks hold the KV they left with */
  CHECK_OK(pkv_drain_kv_events(e, ev, 32, &n));
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_STORED, PKV_TIER_DEVICE),
               2); /* back in the pool */
  CHECK_EQ_INT(n, 2);

  /* Copies in both tiers: the pool copy serves, nothing is loaded. */
  const uint64_t s2 = tu_alloc(e, a, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  st = tu_stats(e);
  CHECK_EQ_INT(st.device_hit_tokens, 8);
  CHECK_EQ_INT(st.host_hit_tokens, 8);
  CHECK_EQ_INT(st.num_loaded_blocks, 2);
  CHECK_EQ_INT(tu_kv_pattern(e, s2, 7, 8, 1), 0);
  /* Evicted again, the nodes keep their host copies: nothing is offloaded twice. */
  CHECK_OK(pkv_release(e, s));
  CHECK_OK(pkv_release(e, s2));
  flush_pool(e, 2000, 0);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_offloaded_blocks, 2);
  CHECK_EQ_INT(st.num_host_cached_blocks, 2);
  CHECK_EQ_INT(query(e, a, 9), 8);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The host tier's LRU: a full host tier drops its least recently used blocks for new offloads; a
 * load counts as a use. */
static void test_host_lru(void) {
  pkv_engine *e = engine(4, 1, 1);
  if (!e) return;
  int32_t a[9], b[9], d[9];
  tu_fill(a, 9, 1);
  tu_fill(b, 9, 100);
  tu_fill(d, 9, 200);
  cache_prompt(e, a, 9, 1);
  cache_prompt(e, b, 9, 2);
  flush_pool(e, 1000, 4); /* a's, then b's blocks: the host tier is full */
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_cached_blocks, 4);
  CHECK_EQ_INT(st.num_host_evictions, 0);
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(e, a, 9, &cached); /* a is used: b is now the oldest */
  CHECK_EQ_INT(cached, 8);
  do_copies(e, s, PKV_COPY_LOAD, 2, 0);
  CHECK_EQ_INT(tu_kv_pattern(e, s, 1, 8, 1), 0);
  CHECK_OK(pkv_release(e, s));
  cache_prompt(e, d, 9, 3);
  pkv_kv_event ev[64];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  flush_pool(e, 2000, 2); /* d's blocks go to the host tier, b's leave it */
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_evictions, 2);
  CHECK_EQ_INT(st.num_offloaded_blocks, 6);
  CHECK_EQ_INT(st.num_host_cached_blocks, 4);
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_REMOVED, PKV_TIER_HOST), 2);
  CHECK_EQ_INT(count_events(ev, n, PKV_EVENT_BLOCK_STORED, PKV_TIER_HOST), 2);
  CHECK_EQ_INT(query(e, b, 9), 0);
  CHECK_EQ_INT(query(e, a, 9), 8);
  CHECK_EQ_INT(query(e, d, 9), 8);
  const uint64_t s3 = tu_alloc(e, d, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  do_copies(e, s3, PKV_COPY_LOAD, 2, 0);
  CHECK_EQ_INT(tu_kv_pattern(e, s3, 3, 8, 1), 0);
  CHECK_OK(pkv_release(e, s3));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Uses the 9-token prompt t's 8 cached tokens, loaded from the host tier (2 blocks), and
 * releases it. */
static void use_from_host(pkv_engine *e, const int32_t *t) {
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  do_copies(e, s, PKV_COPY_LOAD, 2, 0);
  CHECK_OK(pkv_release(e, s));
}

/* A re-offload is a use too (issue 26 item 7): a prefix whose pool copy served a hit and was
 * evicted again becomes the host tier's newest, though its host copy was made first. Before the
 * fix the host copy kept the age of its first offload, so the prefix used a moment ago was the
 * first one dropped. */
static void test_host_lru_reoffload(void) {
  pkv_engine *e = engine(4, 1, 0);
  if (!e) return;
  int32_t a[9], b[9], d[9];
  tu_fill(a, 9, 1);
  tu_fill(b, 9, 100);
  tu_fill(d, 9, 200);
  cache_prompt(e, a, 9, 1);
  flush_pool(e, 1000, 2); /* host: a */
  cache_prompt(e, b, 9, 2);
  flush_pool(e, 2000, 2); /* host: a, b (a the oldest) */
  use_from_host(e, b);    /* loaded: b has a copy in each tier */
  use_from_host(e, a);    /* loaded: a is the host tier's newest */
  uint32_t cached = 0;
  const uint64_t sb2 = tu_alloc(e, b, 9, &cached); /* b used last, from its pool copy */
  CHECK_EQ_INT(cached, 8);
  CHECK_EQ_INT(tu_stats(e).device_hit_tokens, 8);
  CHECK_OK(pkv_release(e, sb2));
  cache_prompt(e, d, 9, 3);
  /* The pool evicts a's copies, then b's (both kept in the host tier: re-offloads, each the
   * newest there), then d's, whose offloads drop the oldest host blocks: a's. */
  flush_pool(e, 3000, 2);
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_evictions, 2);
  CHECK_EQ_INT(st.num_host_cached_blocks, 4);
  CHECK_EQ_INT(query(e, b, 9), 8); /* used last: kept */
  CHECK_EQ_INT(query(e, d, 9), 8);
  CHECK_EQ_INT(query(e, a, 9), 0);
  const uint64_t s = tu_alloc(e, b, 9, &cached);
  do_copies(e, s, PKV_COPY_LOAD, 2, 0);
  CHECK_EQ_INT(tu_kv_pattern(e, s, 2, 8, 1), 0); /* b's own KV, byte for byte */
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A load needs a pool block like any new block: NO_SPACE changes nothing, not even the LRU. */
static void test_load_no_space(void) {
  pkv_engine *e = engine(4, 1, 0);
  if (!e) return;
  int32_t a[9], big[BLOCKS * BS];
  tu_fill(a, 9, 1);
  tu_fill(big, BLOCKS * BS, 5000);
  cache_prompt(e, a, 9, 1);
  flush_pool(e, 1000, 2);
  const uint64_t hold = tu_alloc(e, big, (BLOCKS - 2) * BS, NULL); /* 2 free blocks left */
  const uint64_t st0 = tu_state(e, &hold, 1);
  const pkv_stats before = tu_stats(e);
  uint64_t seq = 0;
  CHECK_ERR(e, pkv_allocate(e, a, 9, NULL, &seq, NULL), PKV_ERR_NO_SPACE);
  CHECK(tu_state(e, &hold, 1) == st0);
  const pkv_stats after = tu_stats(e);
  CHECK_EQ_INT(after.num_loaded_blocks, before.num_loaded_blocks);
  CHECK_EQ_INT(after.num_host_cached_blocks, 2);
  CHECK_OK(pkv_release(e, hold));
  CHECK_EQ_INT(query(e, a, 9), 8);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* host_offload 0: the host tier holds swapped sequences only; an evicted prefix is gone. */
static void test_offload_off(void) {
  pkv_engine *e = engine(6, 0, 0);
  if (!e) return;
  int32_t a[9];
  tu_fill(a, 9, 1);
  cache_prompt(e, a, 9, 1);
  flush_pool(e, 1000, 0);
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_evictions, 2);
  CHECK_EQ_INT(st.num_offloaded_blocks, 0);
  CHECK_EQ_INT(st.num_host_cached_blocks, 0);
  CHECK_EQ_INT(query(e, a, 9), 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Swap-outs take host-tier blocks from the offloaded prefix blocks when none is free, and a reset
 * clears the host tier's cache too. */
static void test_swap_takes_cached_host_blocks(void) {
  pkv_engine *e = engine(4, 1, 1);
  if (!e) return;
  int32_t a[9], b[16];
  tu_fill(a, 9, 1);
  tu_fill(b, 16, 300);
  cache_prompt(e, a, 9, 1);
  flush_pool(e, 1000, 2);
  const uint64_t s = tu_alloc(e, b, 13, NULL); /* 4 blocks */
  tu_compute1(e, s);
  tu_kv_pattern(e, s, 4, 13, 0);
  CHECK_OK(pkv_swap_out(e, s)); /* 2 free host blocks + a's 2 cached ones */
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_free_blocks, 0);
  CHECK_EQ_INT(st.num_host_cached_blocks, 0);
  CHECK_EQ_INT(st.num_host_evictions, 2);
  CHECK_EQ_INT(query(e, a, 9), 0);
  CHECK_OK(pkv_swap_in(e, s));
  CHECK_OK(pkv_append(e, s, b + 13, 1));
  do_copies(e, s, PKV_COPY_SWAP_IN, 4, 0);
  CHECK_EQ_INT(tu_kv_pattern(e, s, 4, 13, 1), 0);
  CHECK_OK(pkv_release(e, s)); /* its 3 full blocks are cached */
  flush_pool(e, 2000, 3);
  CHECK_EQ_INT(tu_stats(e).num_host_cached_blocks, 3);
  pkv_kv_event ev[64];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  CHECK_OK(pkv_reset_prefix_cache(e));
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_cached_blocks, 0);
  CHECK_EQ_INT(st.num_prefix_nodes, 0);
  CHECK_EQ_INT(query(e, b, 13), 0);
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(ev[0].type, PKV_EVENT_ALL_CLEARED);
  CHECK_EQ_INT(ev[0].medium, PKV_TIER_NONE);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The 0.1 symbol still writes 32-byte events; the header's macro gives the 56-byte ones (0.5). */
static void test_event_sizes(void) {
  pkv_engine *e = engine(4, 1, 1);
  if (!e) return;
  int32_t a[9];
  tu_fill(a, 9, 1);
  cache_prompt(e, a, 9, 1);
  flush_pool(e, 1000, 2);
  unsigned char raw[6 * 32 + 8];
  memset(raw, 0xab, sizeof raw);
  uint32_t n = 0;
  CHECK_OK((pkv_drain_kv_events)(e, (pkv_kv_event *)raw, 6, &n)); /* the symbol, not the macro */
  CHECK_EQ_INT(n, 6);
  CHECK(raw[6 * 32] == 0xab); /* nothing past 6 * 32 bytes */
  pkv_kv_event first;
  memcpy(&first, raw, 32);
  CHECK_EQ_INT(first.type, PKV_EVENT_BLOCK_STORED);
  CHECK_EQ_INT(sizeof(pkv_kv_event), 56);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_offload_then_hit);
  TU_RUN(test_host_lru);
  TU_RUN(test_host_lru_reoffload);
  TU_RUN(test_load_no_space);
  TU_RUN(test_offload_off);
  TU_RUN(test_swap_takes_cached_host_blocks);
  TU_RUN(test_event_sizes);
  return tu_summary();
}
