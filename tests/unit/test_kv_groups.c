/* KV groups (DESIGN.md §12): layers grouped by sliding window, each group with its own block
 * table in the one pool. A windowed group holds at most ceil(window / block_size) + 1 blocks of a
 * sequence once its tokens are computed, however long it grows; a prefix hit needs every full
 * group to hold the whole prefix and every windowed group the blocks of its window before the hit
 * point (tried at every block boundary); the batch view, the group block tables and the KV events
 * say the group. The randomized part checks admissions against a model of that rule built from
 * the KV events alone, with pkv_engine_check after every operation. */
#include "test_util.h"

#include <stdlib.h>

enum { MAX_GROUPS = 8, MAX_BLOCKS = 512 };

/* 2 x num_layers layers: windows[i % n] for layer i (0 = full attention). */
static pkv_engine *windowed_engine(uint32_t bs, uint32_t blocks, const uint32_t *windows,
                                   uint32_t num_layers, int caching, int events) {
  pkv_engine_params p;
  tu_params(&p, bs, blocks);
  p.num_layers = num_layers;
  p.layer_windows = windows;
  p.enable_prefix_caching = (uint32_t)caching;
  p.enable_kv_events = (uint32_t)events;
  p.kv_events_capacity = 1u << 20;
  return tu_engine_p(&p);
}

static uint32_t group_windows(pkv_engine *e, uint32_t *out) {
  pkv_engine_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  CHECK_OK(pkv_engine_params_get(e, &p));
  uint32_t n = 0;
  CHECK_OK(pkv_kv_groups(&p, NULL, NULL, out, MAX_GROUPS, &n, NULL));
  return n;
}

static uint32_t group_table(pkv_engine *e, uint64_t seq, uint32_t g, int32_t *out) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_group_block_table(e, seq, g, out, MAX_BLOCKS, &len));
  return len;
}

static uint32_t held(const int32_t *t, uint32_t n) {
  uint32_t k = 0;
  for (uint32_t i = 0; i < n; i++) k += t[i] >= 0;
  return k;
}

/* The first block a group holds with the next token at `next` (caching: never past the last
 * sealed block, the next one's parent) - the rule written out once more, apart from pkv's. */
static uint32_t first_held(uint32_t w, uint32_t bs, uint32_t next, int caching) {
  if (!w) return 0;
  const uint32_t first = (next >= w ? next - w + 1 : 0) / bs;
  if (!caching) return first;
  const uint32_t sealed = next / bs;
  return first < (sealed ? sealed - 1 : 0) ? first : (sealed ? sealed - 1 : 0);
}

/* Decode far past the window: every windowed group keeps at most ceil(w / bs) + 1 blocks, the
 * full group all of them, and the pool's used blocks are exactly the tables' entries. */
static void test_block_bound(uint32_t bs, uint32_t w, int caching) {
  const uint32_t windows[4] = {w, 0, w, 0};
  pkv_engine *e = windowed_engine(bs, 400, windows, 4, caching, 0);
  if (!e) return;
  uint32_t gw[MAX_GROUPS];
  if (!CHECK_EQ_INT(group_windows(e, gw), 2) || !CHECK(gw[0] == 0 && gw[1] == w)) goto out;
  int32_t prompt[30];
  tu_fill(prompt, 30, 1);
  const uint64_t s = tu_alloc(e, prompt, 30, NULL);
  tu_compute1(e, s);
  const uint32_t bound = (w + bs - 1) / bs + 1;
  for (uint32_t step = 0; step < 300; step++) {
    int32_t tok = 1000 + (int32_t)step;
    if (!CHECK_OK(pkv_append(e, s, &tok, 1)) || !tu_compute1(e, s) || !CHECK_ENGINE(e)) break;
    int32_t t0[MAX_BLOCKS], t1[MAX_BLOCKS];
    const uint32_t n0 = group_table(e, s, 0, t0), n1 = group_table(e, s, 1, t1);
    const uint32_t tokens = 31 + step;
    CHECK_EQ_INT(n0, (tokens + bs - 1) / bs);
    CHECK_EQ_INT(n1, n0);
    CHECK_EQ_INT(held(t0, n0), n0);
    if (!CHECK(held(t1, n1) <= bound)) {
      printf("  window %u bs %u: %u blocks held at %u tokens\n", w, bs, held(t1, n1), tokens);
      break;
    }
    CHECK_EQ_INT(held(t1, n1), n1 - first_held(w, bs, tokens, caching));
    CHECK_EQ_INT(tu_stats(e).num_used_blocks, held(t0, n0) + held(t1, n1));
  }
  CHECK_OK(pkv_release(e, s));
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 0);
  CHECK_ENGINE(e);
out:
  pkv_engine_destroy(e);
}

/* The batch view lists each group's tables and slots; KV events say the group. */
static void test_view_and_events(void) {
  const uint32_t windows[2] = {0, 6};
  pkv_engine *e = windowed_engine(4, 64, windows, 2, 1, 1);
  if (!e) return;
  int32_t t[40];
  tu_fill(t, 40, 7);
  const uint64_t s = tu_alloc(e, t, 21, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_append(e, s, t + 21, 3));
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b))) {
    const pkv_batch_view v = tu_view(b);
    CHECK_EQ_INT(v.num_kv_groups, 2);
    CHECK_EQ_INT(v.num_tokens, 3);
    for (uint32_t g = 0; g < 2; g++) {
      int32_t table[MAX_BLOCKS];
      const uint32_t n = group_table(e, s, g, table);
      CHECK_EQ_INT(n, v.max_blocks_per_seq);
      for (uint32_t j = 0; j < n; j++)
        CHECK_EQ_INT(v.group_block_tables[g * v.max_blocks_per_seq + j], table[j]);
      for (uint32_t i = 0; i < v.num_tokens; i++) {
        const int32_t pos = v.positions[i];
        CHECK_EQ_INT(v.group_slot_mapping[g * v.num_tokens + i],
                     (int64_t)table[pos / 4] * 4 + pos % 4);
      }
      if (g == 0) {
        for (uint32_t j = 0; j < n; j++) CHECK_EQ_INT(v.block_indices[j], table[j]);
        CHECK_EQ_INT(held(table, n), n);
      } else {
        /* Window 6 at next token 21: keys from 16 on, block 4; blocks 0..3 given back. */
        CHECK_EQ_INT(held(table, n), n - 4);
        CHECK_EQ_INT(table[3], -1);
        CHECK(table[4] >= 0);
      }
    }
    CHECK_OK(pkv_batch_end(b));
  }
  /* Five sealed blocks per group, same hashes, one STORED event each per group. */
  pkv_kv_event ev[64];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  uint32_t stored[2] = {0, 0};
  uint64_t hash_sum[2] = {0, 0};
  for (uint32_t i = 0; i < n; i++)
    if (ev[i].type == PKV_EVENT_BLOCK_STORED && CHECK(ev[i].group < 2)) {
      stored[ev[i].group]++;
      hash_sum[ev[i].group] += ev[i].block_hash;
    }
  CHECK_EQ_INT(stored[0], 6);
  CHECK_EQ_INT(stored[1], 6);
  CHECK(hash_sum[0] == hash_sum[1]);
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A hit needs the window's blocks: a second prompt sharing a long prefix hits it whole while the
 * windowed group still caches its window, and hits only where every group allows once the
 * windowed blocks are evicted. */
static void test_hybrid_hits(void) {
  const uint32_t windows[2] = {0, 8};
  pkv_engine *e = windowed_engine(4, 40, windows, 2, 1, 0);
  if (!e) return;
  int32_t t[64];
  tu_fill(t, 64, 100);
  const uint64_t a = tu_alloc(e, t, 33, NULL);
  tu_compute1(e, a);
  /* While a runs, its window's blocks (from token 33 - 8 + 1 = 26: block 6; the last sealed one,
   * 7) are held by it and the earlier ones cached: a prompt of the same 33 tokens hits 32. */
  uint32_t cached = 0, blocks = 0;
  CHECK_OK(pkv_allocate_query(e, t, 33, NULL, &blocks, &cached));
  CHECK_EQ_INT(cached, 32);
  /* Shorter prompts hit at their own last boundary: the windowed blocks they need were cached
   * when a gave them back. */
  CHECK_OK(pkv_allocate_query(e, t, 17, NULL, &blocks, &cached));
  CHECK_EQ_INT(cached, 16);
  CHECK_OK(pkv_release(e, a));
  /* Evict the cached windowed blocks of the middle: fill the pool with another prompt. */
  int32_t other[120];
  tu_fill(other, 120, 5000);
  const pkv_stats st = tu_stats(e);
  const uint32_t take = (uint32_t)st.num_free_blocks / 2 * 4 - 4; /* two groups */
  const uint64_t o = tu_alloc(e, other, take, NULL);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_allocate_query(e, t, 33, NULL, &blocks, &cached));
  /* Whatever survived, the answer follows the rule: checked in detail by the random run below;
   * here it is at most the full hit and a multiple of the block size. */
  CHECK(cached <= 32 && cached % 4 == 0);
  CHECK_OK(pkv_release(e, o));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Rollback in a windowed group: the blocks the kept window needs again come back from the cache;
 * when the cache no longer holds them the cut is refused and nothing changes. */
static void test_truncate_window(void) {
  const uint32_t windows[2] = {8, 0};
  pkv_engine *e = windowed_engine(4, 48, windows, 2, 1, 0);
  if (!e) return;
  uint32_t gw[MAX_GROUPS];
  group_windows(e, gw);
  CHECK(gw[0] == 0 && gw[1] == 8);
  int32_t t[64];
  tu_fill(t, 64, 1);
  const uint64_t s = tu_alloc(e, t, 20, NULL);
  tu_compute1(e, s);
  for (uint32_t i = 20; i < 40; i++) {
    CHECK_OK(pkv_append(e, s, t + i, 1));
    tu_compute1(e, s);
  }
  int32_t w1[MAX_BLOCKS];
  uint32_t n = group_table(e, s, 1, w1);
  CHECK_EQ_INT(n, 10);
  CHECK_EQ_INT(held(w1, n), 2); /* 40 - 8 + 1 = 33: block 8, and 9 */
  /* Back to 30 tokens: keys from 23 on (block 5), the last sealed block 6: blocks 5..7. */
  CHECK_OK(pkv_truncate(e, s, 30));
  CHECK_ENGINE(e);
  n = group_table(e, s, 1, w1);
  CHECK_EQ_INT(n, 8);
  CHECK_EQ_INT(held(w1, n), 3);
  CHECK(w1[4] == -1 && w1[5] >= 0 && w1[7] >= 0);
  /* Decode on: the window moves ahead again. */
  for (uint32_t i = 30; i < 44; i++) {
    CHECK_OK(pkv_append(e, s, t + i, 1));
    tu_compute1(e, s);
  }
  CHECK_ENGINE(e);
  /* Evict every cached block, then cut far back. */
  CHECK_OK(pkv_reset_prefix_cache(e));
  CHECK_EQ_INT(tu_stats(e).num_cached_blocks, 0);
  const uint64_t before = tu_state(e, &s, 1);
  CHECK_ERR(e, pkv_truncate(e, s, 12), PKV_ERR_STATE);
  CHECK(tu_state(e, &s, 1) == before);
  CHECK_ENGINE(e);
  /* A cut that keeps the window's first block needs nothing back (44 tokens: keys from 37 on,
   * block 9; 43: from 36, still block 9). */
  CHECK_OK(pkv_truncate(e, s, 43));
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Forks share every group's blocks; both decode on, each within its bound. */
static void test_fork(void) {
  const uint32_t windows[3] = {5, 0, 5};
  pkv_engine *e = windowed_engine(3, 64, windows, 3, 1, 0);
  if (!e) return;
  int32_t t[64];
  tu_fill(t, 64, 3);
  const uint64_t a = tu_alloc(e, t, 17, NULL);
  tu_compute1(e, a);
  uint64_t b = 0;
  CHECK_OK(pkv_fork(e, a, &b));
  CHECK_ENGINE(e);
  for (uint32_t i = 0; i < 12; i++) {
    int32_t x = 500 + (int32_t)i, y = 700 + (int32_t)i;
    CHECK_OK(pkv_append(e, a, &x, 1));
    CHECK_OK(pkv_append(e, b, &y, 1));
    const uint64_t both[2] = {a, b};
    tu_compute(e, both, 2);
    CHECK_ENGINE(e);
  }
  uint32_t gw[MAX_GROUPS];
  const uint32_t ng = group_windows(e, gw);
  for (uint32_t g = 0; g < ng; g++) {
    int32_t ta[MAX_BLOCKS];
    const uint32_t na = group_table(e, a, g, ta);
    if (gw[g]) CHECK(held(ta, na) <= (gw[g] + 2) / 3 + 1);
  }
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, b));
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The scheduler runs windowed requests whose full-attention KV would not fit the pool. */
static void test_scheduler(void) {
  pkv_engine_params p;
  tu_params(&p, 4, 24);
  p.sliding_window = 8; /* every layer: one windowed group */
  p.max_num_batched_tokens = 64;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  int32_t prompt[12];
  tu_fill(prompt, 12, 40);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 150; /* 162 tokens: 41 blocks under full attention, 4 with the window */
  uint64_t ids[3];
  for (int i = 0; i < 3; i++) CHECK_OK(pkv_submit(e, prompt, 12, &rp, &ids[i]));
  uint32_t steps = 0, finished = 0;
  int32_t sampled[8];
  for (; steps < 1000 && finished < 3; steps++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) break;
    const pkv_batch_view v = tu_view(b);
    for (uint32_t i = 0; i < v.num_seqs; i++) sampled[i] = 9;
    CHECK_OK(pkv_commit(b, sampled));
    if (!CHECK_ENGINE(e)) break;
    uint64_t done[8];
    uint32_t nd = 0;
    CHECK_OK(pkv_drain_finished(e, done, 8, &nd));
    finished += nd;
  }
  CHECK_EQ_INT(finished, 3);
  CHECK_EQ_INT(tu_stats(e).num_preemptions, 0);
  for (int i = 0; i < 3; i++) CHECK_EQ_INT(tu_info(e, ids[i]).num_generated_tokens, 150);
  /* A prompt whose whole length (25 blocks) exceeds the pool (24) runs too: admitted per chunk
   * (DESIGN.md §7), it holds at most ceil((8 + 64 - 2) / 4) + 1 = 19 blocks (the window and
   * one chunk of max_num_batched_tokens 64). Refused whole before 0.8. */
  int32_t big[100];
  tu_fill(big, 100, 1);
  uint64_t id = 0;
  CHECK_OK(pkv_submit(e, big, 100, &rp, &id));
  uint64_t most = 0;
  for (steps = 0; steps < 1000 && !tu_info(e, id).finish_reason; steps++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) break;
    const pkv_batch_view v = tu_view(b);
    const uint64_t used = tu_stats(e).num_used_blocks;
    most = used > most ? used : most;
    for (uint32_t i = 0; i < v.num_seqs; i++) sampled[i] = 9;
    if (!CHECK_OK(pkv_commit(b, sampled)) || !CHECK_ENGINE(e)) break;
  }
  CHECK_EQ_INT(tu_info(e, id).num_generated_tokens, 150);
  CHECK(most <= 19);
  pkv_engine_destroy(e);
}

static void test_refusals(void) {
  const uint32_t windows[2] = {0, 16};
  pkv_engine_params p;
  tu_params(&p, 4, 32);
  p.layer_windows = windows;
  p.host_num_blocks = 8; /* windows with a host tier (since 0.8: test_group_tiers moves them) */
  pkv_engine *e = tu_engine_p(&p);
  pkv_engine_destroy(e);
  p.host_num_blocks = 0;
  e = tu_engine_p(&p);
  if (!e) return;
  int32_t t[8];
  tu_fill(t, 8, 1);
  const uint64_t s = tu_alloc(e, t, 8, NULL);
  uint32_t len = 0;
  int32_t out[4];
  CHECK_ERR(e, pkv_seq_group_block_table(e, s, 2, out, 4, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_seq_group_block_table(e, s, 1, out, 1, &len), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(len, 2);
  CHECK_OK(pkv_seq_group_block_table(e, s, 1, NULL, 0, &len));
  CHECK_EQ_INT(len, 2);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- randomized, against a model */
/* The model knows only what the KV events said: per group, the canonical hashes whose blocks the
 * pool holds. An admission must hit the longest h that every group allows. */
typedef struct {
  uint64_t hash[4096];
  uint32_t count;
} HashSet;

static int set_has(const HashSet *s, uint64_t h) {
  for (uint32_t i = 0; i < s->count; i++)
    if (s->hash[i] == h) return 1;
  return 0;
}

static void set_add(HashSet *s, uint64_t h) {
  if (!set_has(s, h) && CHECK(s->count < 4096)) s->hash[s->count++] = h;
}

static void set_del(HashSet *s, uint64_t h) {
  for (uint32_t i = 0; i < s->count; i++)
    if (s->hash[i] == h) {
      s->hash[i] = s->hash[--s->count];
      return;
    }
  CHECK(!"REMOVED event of a hash never stored");
}

static HashSet model[MAX_GROUPS];

static void absorb_events(pkv_engine *e) {
  pkv_kv_event ev[256];
  uint32_t n = 0;
  do {
    CHECK_OK(pkv_drain_kv_events(e, ev, 256, &n));
    for (uint32_t i = 0; i < n; i++) {
      CHECK(ev[i].type != PKV_EVENT_OVERFLOW);
      if (ev[i].type == PKV_EVENT_ALL_CLEARED)
        for (uint32_t g = 0; g < MAX_GROUPS; g++) model[g].count = 0;
      if (!CHECK(ev[i].group < MAX_GROUPS) || ev[i].medium != PKV_TIER_DEVICE) continue;
      if (ev[i].type == PKV_EVENT_BLOCK_STORED) set_add(&model[ev[i].group], ev[i].block_hash);
      if (ev[i].type == PKV_EVENT_BLOCK_REMOVED) set_del(&model[ev[i].group], ev[i].block_hash);
    }
  } while (n == 256);
}

static uint32_t model_hit_tokens(const int32_t *tokens, uint32_t n, uint32_t bs, const uint32_t *gw,
                                 uint32_t ng) {
  uint64_t hashes[MAX_BLOCKS];
  uint64_t h = 0;
  pkv_block_hash_root(0, NULL, 0, &h);
  const uint32_t max_hits = (n - 1) / bs;
  for (uint32_t j = 0; j < max_hits; j++) {
    pkv_block_hash(0, h, tokens + j * bs, bs, &h);
    hashes[j] = h;
  }
  for (uint32_t hit = max_hits; hit > 0; hit--) {
    int ok = 1;
    for (uint32_t g = 0; g < ng && ok; g++)
      for (uint32_t j = first_held(gw[g], bs, hit * bs, 1); j < hit && ok; j++)
        ok = set_has(&model[g], hashes[j]);
    if (ok) return hit * bs;
  }
  return 0;
}

static void test_random(uint32_t seed, uint32_t bs, const uint32_t *windows, uint32_t num_layers,
                        uint32_t ops) {
  pkv_engine *e = windowed_engine(bs, 96, windows, num_layers, 1, 1);
  if (!e) return;
  memset(model, 0, sizeof model);
  uint32_t gw[MAX_GROUPS];
  const uint32_t ng = group_windows(e, gw);
  srand(seed);
  enum { FAMILIES = 3, MAX_LIVE = 6 };
  int32_t base[FAMILIES][80];
  for (int f = 0; f < FAMILIES; f++)
    for (int i = 0; i < 80; i++) base[f][i] = f * 1000 + i;
  uint64_t live[MAX_LIVE];
  uint32_t num_live = 0, hits_checked = 0, nonzero = 0, short_hits = 0;
  for (uint32_t op = 0; op < ops; op++) {
    const int r = rand() % 100;
    if (r < 30 && num_live < MAX_LIVE) {
      /* A prompt of a family, perhaps diverging after a while. */
      int32_t prompt[80];
      const int f = rand() % FAMILIES;
      const uint32_t n = 1 + (uint32_t)rand() % 60;
      memcpy(prompt, base[f], sizeof prompt);
      if (rand() % 3 == 0) prompt[rand() % n] = 77777 + rand() % 5;
      absorb_events(e);
      const uint32_t expect = model_hit_tokens(prompt, n, bs, gw, ng);
      uint32_t q_blocks = 0, q_cached = 0;
      CHECK_OK(pkv_allocate_query(e, prompt, n, NULL, &q_blocks, &q_cached));
      if (!CHECK_EQ_INT(q_cached, expect))
        printf("  seed %u op %u: query hit %u, the model says %u (prompt %u)\n", seed, op, q_cached,
               expect, n);
      uint64_t s = 0;
      uint32_t cached = 0;
      const pkv_status st = pkv_allocate(e, prompt, n, NULL, &s, &cached);
      if (st == PKV_OK) {
        CHECK_EQ_INT(cached, expect);
        live[num_live++] = s;
        hits_checked++;
        nonzero += cached > 0;
        /* A hit short of the prompt's cacheable blocks: some group did not hold the rest. */
        short_hits += cached > 0 && cached + bs <= (n - 1) / bs * bs;
      } else {
        CHECK_EQ_INT(st, PKV_ERR_NO_SPACE);
        CHECK(q_blocks > tu_stats(e).num_free_blocks);
      }
    } else if (r < 55 && num_live) {
      /* Compute some of a few sequences' tokens. */
      uint64_t seqs[MAX_LIVE];
      uint32_t counts[MAX_LIVE], k = 0;
      for (uint32_t i = 0; i < num_live; i++) {
        const struct pkv_seq_info in = tu_info(e, live[i]);
        const uint32_t left = in.num_tokens - in.num_computed_tokens;
        if (left && rand() % 2) {
          seqs[k] = live[i];
          counts[k++] = 1 + (uint32_t)rand() % left;
        }
      }
      pkv_batch *b = NULL;
      if (k && CHECK_OK(pkv_batch_begin(e, seqs, counts, k, &b))) CHECK_OK(pkv_batch_end(b));
    } else if (r < 75 && num_live) {
      /* Decode a token onto a computed sequence. */
      const uint64_t s = live[rand() % num_live];
      const struct pkv_seq_info in = tu_info(e, s);
      if (in.num_tokens == in.num_computed_tokens && in.num_tokens < 120) {
        int32_t tok = 3000 + rand() % 50;
        const pkv_status st = pkv_append(e, s, &tok, 1);
        CHECK(st == PKV_OK || st == PKV_ERR_NO_SPACE);
      }
    } else if (r < 85 && num_live) {
      const uint32_t i = (uint32_t)rand() % num_live;
      CHECK_OK(pkv_release(e, live[i]));
      live[i] = live[--num_live];
    } else if (r < 90 && num_live && num_live < MAX_LIVE) {
      const uint64_t s = live[rand() % num_live];
      const struct pkv_seq_info in = tu_info(e, s);
      uint64_t child = 0;
      if (in.num_tokens == in.num_computed_tokens && CHECK_OK(pkv_fork(e, s, &child)))
        live[num_live++] = child;
    } else if (r < 97 && num_live) {
      const uint64_t s = live[rand() % num_live];
      const uint32_t n = tu_info(e, s).num_tokens;
      const uint32_t keep = n > 1 ? n - (uint32_t)rand() % (n < 12 ? n - 1 : 12) : 1;
      const uint64_t before = tu_state(e, &s, 1);
      const pkv_status st = pkv_truncate(e, s, keep);
      if (st != PKV_OK) {
        CHECK_EQ_INT(st, PKV_ERR_STATE);
        CHECK(tu_state(e, &s, 1) == before);
      }
    } else if (r < 99) {
      CHECK_OK(pkv_reset_prefix_cache(e));
    }
    if (!CHECK_ENGINE(e)) {
      printf("  seed %u: invariant broken at op %u\n", seed, op);
      break;
    }
    /* The bound, for every computed sequence in every windowed group. */
    for (uint32_t i = 0; i < num_live; i++) {
      const struct pkv_seq_info in = tu_info(e, live[i]);
      if (in.num_tokens != in.num_computed_tokens) continue;
      for (uint32_t g = 0; g < ng; g++) {
        if (!gw[g]) continue;
        int32_t t[MAX_BLOCKS];
        const uint32_t n = group_table(e, live[i], g, t);
        CHECK(held(t, n) <= (gw[g] + bs - 1) / bs + 1);
      }
    }
  }
  printf(
      "  seed %u bs %u: %u admissions checked against the model, %u with hits, %u of them short\n",
      seed, bs, hits_checked, nonzero, short_hits);
  CHECK(hits_checked > ops / 20 && nonzero > 0);
  for (uint32_t i = 0; i < num_live; i++) CHECK_OK(pkv_release(e, live[i]));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_view_and_events);
  TU_RUN(test_hybrid_hits);
  TU_RUN(test_truncate_window);
  TU_RUN(test_fork);
  TU_RUN(test_scheduler);
  TU_RUN(test_refusals);
  static const uint32_t sizes[][2] = {{1, 1},  {1, 7},   {4, 1},   {4, 10},
                                      {7, 16}, {16, 16}, {16, 40}, {3, 4096}};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    test_block_bound(sizes[i][0], sizes[i][1], 1);
    test_block_bound(sizes[i][0], sizes[i][1], 0);
  }
  static const uint32_t hybrid[4] = {6, 0, 6, 0};
  static const uint32_t many[6] = {5, 5, 0, 11, 11, 11};
  static const uint32_t all[2] = {9, 9};
  for (uint32_t seed = 1; seed <= 4; seed++) {
    test_random(seed, 1 + seed % 4, hybrid, 4, 3000);
    test_random(100 + seed, 2 + seed % 3, many, 6, 3000);
    test_random(200 + seed, 1 + seed % 5, all, 2, 2000);
  }
  return tu_summary();
}
