/* Sparse attention's indexer in every tier (DESIGN.md §14, §11): an MLA engine whose layers have
 * an indexer keeps each block as one page (latents, indexer keys, fp8 scales), and every move of
 * a block moves the page: copy-on-write after pkv_fork, pkv_swap_out / pkv_swap_in, offload of an
 * evicted prefix block and its load on a later hit, and a FILE store read by a new engine. After
 * each move the latents, keys and scales (through pkv_layer_info) are the bytes that
 * pkv_attention and pkv_indexer_write wrote, and pkv_indexer_topk on the moved sequence selects
 * what it selected before. The store's fingerprint tells an indexer from none and fp8 from bf16;
 * KV events are the same with and without an indexer (one block, one unit). */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw under -std=c11 */
#include <ftw.h>
#include <sys/stat.h>

#include "test_util.h"

/* Latents of 16 + 8 values, indexer keys of 16, 2 indexer heads keeping 4 keys: contexts of 9
 * tokens already need the top-k. */
enum { BS = 4, BLOCKS = 12, LAYERS = 2, RANK = 16, ROPE = 8, W = RANK + ROPE, QH = 2 };
enum { IDIM = 16, IHEADS = 2, TOPK = 4, MAXT = BLOCKS * BS, NO_INDEXER = 0xff };

typedef struct {
  uint32_t index_dtype; /* PKV_DTYPE_FP8_E4M3, PKV_DTYPE_BF16 or NO_INDEXER */
  uint32_t host_blocks, offload, events;
  const char *store; /* a FILE store's directory (write-through), or NULL */
} setup;

static pkv_layer_spec specs_[LAYERS];
static char dir_[64];

static pkv_engine *engine(setup c) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.num_q_heads = QH, p.num_kv_heads = 1, p.head_dim = W;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = RANK, p.qk_rope_head_dim = ROPE;
  p.softmax_scale = 0.125f;
  p.host_num_blocks = c.host_blocks, p.host_offload = c.offload, p.enable_kv_events = c.events;
  memset(specs_, 0, sizeof specs_);
  for (uint32_t l = 0; l < LAYERS && c.index_dtype != NO_INDEXER; l++) {
    specs_[l].kind = PKV_LAYER_MLA;
    specs_[l].index_head_dim = IDIM, specs_[l].index_dtype = c.index_dtype;
    specs_[l].index_n_heads = IHEADS, specs_[l].index_topk = TOPK;
  }
  if (c.index_dtype != NO_INDEXER) p.layer_specs = specs_, p.layer_spec_size = sizeof specs_[0];
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE, st.path = c.store, st.model_id = "test-indexer-tiers";
  if (c.store) p.store = &st;
  return tu_engine_p(&p);
}

/* ---------------------------------------------------------------- what the kernels write */
/* Key value i of a token: c * s with c a small integer, one c of +-448, and s a power of two, so
 * that fp8 quantizes it exactly (scale max|x| / 448 = s, codes c) and bf16 holds it exactly. */
static float key_scale(uint32_t tag, uint32_t l, uint32_t pos) {
  return 1.0f / (float)(2u << ((tag + l + pos) % 4));
}
static int key_int(uint32_t tag, uint32_t l, uint32_t pos, uint32_t i) {
  if (i == pos % IDIM) return pos % 2 ? -448 : 448;
  return (int)((tag * 7 + l * 5 + pos * 3 + i * 11) % 33) - 16;
}
static float latent(uint32_t tag, uint32_t l, uint32_t pos, uint32_t i) {
  return (float)(tag * 10000 + l * 1000 + pos * 10) + (float)i / 32;
}

/* The e4m3 code of an integer that e4m3 holds exactly (|c| <= 16, or 448). */
static uint8_t e4m3_code(int c) {
  const uint8_t sign = c < 0 ? 0x80 : 0;
  const unsigned a = (unsigned)(c < 0 ? -c : c);
  if (a == 0) return sign;
  unsigned e = 0;
  while (a >> (e + 1)) e++;
  return sign | (uint8_t)((e + 7) << 3) | (uint8_t)(((a << 3) >> e) - 8);
}

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* exact values only: no rounding needed */
}

/* Mismatches of token pos (tag's values) in block `block` of layer l: its latent, its key and
 * (fp8) its scale, in the device pool or (host 1) the host tier. */
static uint32_t bad_token(const struct pkv_layer_info *in, int host, int32_t block, uint32_t off,
                          uint32_t tag, uint32_t l, uint32_t pos) {
  uint32_t bad = 0;
  const float *lat = (const float *)(host ? in->host_k_base : in->k_base) +
                     (uint64_t)block * in->block_stride + off * in->token_stride;
  for (uint32_t i = 0; i < W; i++) bad += lat[i] != latent(tag, l, pos, i);
  const char *page = (const char *)(host ? in->host_index_base : in->index_base) +
                     (uint64_t)block * in->index_block_bytes;
  const float s = key_scale(tag, l, pos);
  if (in->index_dtype == PKV_DTYPE_BF16) {
    for (uint32_t i = 0; i < IDIM; i++) {
      uint16_t got;
      memcpy(&got, page + (off * IDIM + i) * 2, 2);
      bad += got != bf16_of((float)key_int(tag, l, pos, i) * s);
    }
    return bad;
  }
  for (uint32_t i = 0; i < IDIM; i++)
    bad += (uint8_t)page[off * IDIM + i] != e4m3_code(key_int(tag, l, pos, i));
  const char *scales = (const char *)(host ? in->host_index_scale_base : in->index_scale_base) +
                       (uint64_t)block * in->index_block_bytes;
  float got;
  memcpy(&got, scales + off * 4, 4);
  return bad + (got != s);
}

/* Mismatches of seq's positions [from, to) against tag's values, every layer, in the pool. */
static uint32_t bad_seq(pkv_engine *e, uint64_t seq, uint32_t from, uint32_t to, uint32_t tag) {
  int32_t table[BLOCKS];
  const uint32_t nb = tu_table(e, seq, table, BLOCKS);
  if (!CHECK(nb * BS >= to)) return 1;
  uint32_t bad = 0;
  for (uint32_t l = 0; l < LAYERS; l++) {
    const struct pkv_layer_info in = tu_layer_info(e, l);
    for (uint32_t pos = from; pos < to; pos++)
      bad += bad_token(&in, 0, table[pos / BS], pos % BS, tag, l, pos);
  }
  return bad;
}

/* ---------------------------------------------------------------- a host's step */
static float q_value(uint32_t l, uint32_t pos, uint32_t h, uint32_t i) {
  return (float)((int)((l * 3 + pos * 5 + h * 7 + i * 13) % 9) - 4) / 4;
}

/* One batch of n of seq's uncomputed tokens (0: all), as a host runs it on every layer:
 * pkv_indexer_write (tag's keys), pkv_indexer_topk (positions; the last token's row of layer l
 * into top[l] when top is not NULL; and slots, checked against the batch's block table) and
 * pkv_attention (tag's latents); without an indexer pkv_attention only. Returns how many
 * copies of `kind` the batch listed. */
static uint32_t step(pkv_engine *e, uint64_t seq, uint32_t n, uint32_t tag, int32_t kind,
                     int32_t (*top)[TOPK]) {
  static float k[MAXT][IDIM], q[MAXT][IHEADS][IDIM], wt[MAXT][IHEADS];
  static float lat[MAXT][W], mq[MAXT][QH][W], out[MAXT][QH][RANK];
  static int32_t idx[MAXT][TOPK], slot[MAXT][TOPK];
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, n ? &n : NULL, 1, &b))) return 0;
  const pkv_batch_view v = tu_view(b);
  uint32_t copies = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) copies += v.copy_kind[i] == kind;
  const int indexed = tu_layer_info(e, 0).index_head_dim != 0;
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (uint32_t t = 0; t < v.num_tokens; t++) {
      const uint32_t pos = (uint32_t)v.positions[t];
      for (uint32_t i = 0; i < IDIM; i++) {
        k[t][i] = (float)key_int(tag, l, pos, i) * key_scale(tag, l, pos);
        for (uint32_t h = 0; h < IHEADS; h++) q[t][h][i] = q_value(l, pos, h, i);
      }
      for (uint32_t h = 0; h < IHEADS; h++) wt[t][h] = 1.0f + 0.5f * (float)h;
      for (uint32_t i = 0; i < W; i++) {
        lat[t][i] = latent(tag, l, pos, i);
        for (uint32_t h = 0; h < QH; h++) mq[t][h][i] = q_value(l, pos, h, i) / 64;
      }
    }
    if (indexed) {
      CHECK_OK(pkv_indexer_write(b, l, k, 0));
      CHECK_OK(pkv_indexer_topk(b, l, q, &wt[0][0], PKV_TOPK_POSITIONS, &idx[0][0]));
      if (top) memcpy(top[l], idx[v.num_tokens - 1], sizeof top[l]);
      /* The same keys as slots of the sequence's blocks, wherever a tier put them. */
      CHECK_OK(pkv_indexer_topk(b, l, q, &wt[0][0], PKV_TOPK_SLOTS, &slot[0][0]));
      uint32_t wrong = 0;
      for (uint32_t t = 0; t < v.num_tokens; t++)
        for (uint32_t j = 0; j < TOPK; j++)
          wrong += slot[t][j] !=
                   (idx[t][j] < 0 ? -1 : v.block_tables[idx[t][j] / BS] * BS + idx[t][j] % BS);
      CHECK_EQ_INT(wrong, 0);
    }
    CHECK_OK(pkv_attention(b, l, mq, lat, NULL, out));
  }
  CHECK_OK(pkv_batch_end(b));
  return copies;
}

static int same_top(int32_t (*a)[TOPK], int32_t (*b)[TOPK]) {
  return memcmp(a, b, sizeof(int32_t) * LAYERS * TOPK) == 0;
}

/* ---------------------------------------------------------------- the tiers */
/* Copy-on-write: a child forked from a 6-token parent appends into the shared second block; its
 * copy holds the parent's 6 tokens, the parent's block keeps them, and both select the same top
 * keys for the same 7th token. */
static void test_cow(uint32_t index_dtype) {
  pkv_engine *e = engine((setup){index_dtype, 0, 0, 0, NULL});
  if (!e) return;
  int32_t t[8];
  tu_fill(t, 8, 1);
  const uint64_t p = tu_alloc(e, t, 6, NULL);
  step(e, p, 0, 1, 0, NULL);
  uint64_t c = 0;
  CHECK_OK(pkv_fork(e, p, &c));
  CHECK_OK(pkv_append(e, c, t + 6, 1));
  int32_t top_child[LAYERS][TOPK], top_parent[LAYERS][TOPK];
  CHECK_EQ_INT(step(e, c, 0, 2, PKV_COPY_COW, top_child), 1);
  int32_t pt[2], ct[2];
  tu_table(e, p, pt, 2), tu_table(e, c, ct, 2);
  CHECK(pt[0] == ct[0] && pt[1] != ct[1]);
  CHECK_EQ_INT(bad_seq(e, c, 0, 6, 1), 0);
  CHECK_EQ_INT(bad_seq(e, c, 6, 7, 2), 0);
  CHECK_EQ_INT(bad_seq(e, p, 0, 6, 1), 0);
  CHECK_OK(pkv_append(e, p, t + 6, 1));
  CHECK_EQ_INT(step(e, p, 0, 2, PKV_COPY_COW, top_parent), 0);
  CHECK(same_top(top_child, top_parent));
  CHECK_EQ_INT(top_child[0][TOPK - 1] >= 0, 1); /* 7 keys, 4 kept: a real selection */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Swap: 10 tokens go to the host tier (their pages there hold them), other KV overwrites the
 * pool, and back in the pool they are the bytes that left; the 11th token selects the same keys
 * as it did before the swap (then truncated away to run again). */
static void test_swap(uint32_t index_dtype) {
  pkv_engine *e = engine((setup){index_dtype, 6, 0, 0, NULL});
  if (!e) return;
  int32_t t[MAXT];
  tu_fill(t, MAXT, 1);
  const uint64_t a = tu_alloc(e, t, 10, NULL);
  step(e, a, 0, 3, 0, NULL);
  CHECK_OK(pkv_append(e, a, t + 10, 1));
  int32_t before[LAYERS][TOPK], after[LAYERS][TOPK];
  step(e, a, 0, 3, 0, before);
  CHECK_OK(pkv_truncate(e, a, 10)); /* the 11th token again, after the round trip */
  CHECK_OK(pkv_append(e, a, t + 10, 1));
  CHECK_OK(pkv_swap_out(e, a));
  const uint64_t o = tu_alloc(e, t + 20, 6, NULL);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &o, NULL, 1, &b));
  const pkv_batch_view v = tu_view(b);
  CHECK_OK(pkv_batch_copy(b));
  uint32_t outs = 0, bad = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) {
    if (v.copy_kind[i] != PKV_COPY_SWAP_OUT) continue;
    for (uint32_t l = 0; l < LAYERS; l++) {
      const struct pkv_layer_info in = tu_layer_info(e, l);
      for (uint32_t off = 0; off < BS && outs * BS + off < 10; off++)
        bad += bad_token(&in, 1, v.copy_dst[i], off, 3, l, outs * BS + off);
    }
    outs++;
  }
  pkv_batch_abort(b);
  CHECK_EQ_INT(outs, 3);
  CHECK_EQ_INT(bad, 0); /* the host tier's pages hold the latents, keys and scales */
  CHECK_OK(pkv_release(e, o));
  int32_t other[MAXT]; /* tokens no sequence had: no prefix hit */
  tu_fill(other, MAXT, 1000);
  const uint64_t fill = tu_alloc(e, other, MAXT - 16, NULL); /* overwrites the freed blocks */
  step(e, fill, 0, 9, 0, NULL);
  CHECK_OK(pkv_release(e, fill));
  CHECK_OK(pkv_swap_in(e, a));
  CHECK_EQ_INT(step(e, a, 0, 3, PKV_COPY_SWAP_IN, after), 3);
  CHECK_EQ_INT(bad_seq(e, a, 0, 11, 3), 0);
  CHECK(same_top(before, after));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Offload: a 9-token prompt's two sealed blocks are evicted to the host tier (their host pages
 * hold them) and loaded back on a hit; the 9th token then selects what it selected at first.
 * The run's KV events go to ev; returns their count. Without an indexer: the same run, unchecked
 * bytes (the events are compared). */
static uint32_t offload_run(uint32_t index_dtype, pkv_kv_event *ev, uint32_t cap) {
  const int indexed = index_dtype != NO_INDEXER;
  pkv_engine *e = engine((setup){index_dtype, 6, 1, 1, NULL});
  if (!e) return 0;
  int32_t a[9], f[MAXT], table[3];
  tu_fill(a, 9, 1), tu_fill(f, MAXT, 1000);
  int32_t before[LAYERS][TOPK], after[LAYERS][TOPK];
  const uint64_t s = tu_alloc(e, a, 9, NULL);
  step(e, s, 8, 4, 0, NULL);
  step(e, s, 0, 4, 0, before);
  tu_table(e, s, table, 3);
  CHECK_OK(pkv_release(e, s));
  const uint64_t flush = tu_alloc(e, f, MAXT, NULL); /* evicts both cached blocks */
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &flush, NULL, 1, &b));
  const pkv_batch_view v = tu_view(b);
  CHECK_OK(pkv_batch_copy(b));
  uint32_t offloads = 0, bad = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) {
    if (v.copy_kind[i] != PKV_COPY_OFFLOAD) continue;
    offloads++;
    const uint32_t j = v.copy_src[i] == table[0] ? 0 : 1; /* which of the prompt's blocks */
    CHECK(v.copy_src[i] == table[j]);
    for (uint32_t l = 0; l < LAYERS && indexed; l++) {
      const struct pkv_layer_info in = tu_layer_info(e, l);
      for (uint32_t off = 0; off < BS; off++)
        bad += bad_token(&in, 1, v.copy_dst[i], off, 4, l, j * BS + off);
    }
  }
  pkv_batch_abort(b);
  CHECK_EQ_INT(offloads, 2);
  CHECK_EQ_INT(bad, 0); /* the host pages hold latents, keys and scales */
  CHECK_OK(pkv_release(e, flush));
  uint32_t cached = 0;
  const uint64_t s2 = tu_alloc(e, a, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  CHECK_EQ_INT(tu_stats(e).host_hit_tokens, 8);
  CHECK_EQ_INT(step(e, s2, 0, 4, PKV_COPY_LOAD, after), 2);
  if (indexed) {
    CHECK_EQ_INT(bad_seq(e, s2, 0, 9, 4), 0);
    CHECK(same_top(before, after));
  }
  CHECK_ENGINE(e);
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, cap, &n));
  pkv_engine_destroy(e);
  return n;
}

static void test_offload(uint32_t index_dtype) {
  pkv_kv_event ev[64];
  offload_run(index_dtype, ev, 64);
}

/* One block, one unit: the offload run's events (stored, removed, offloaded, loaded) are the
 * same event for event with an indexer and without one. */
static void test_events(void) {
  pkv_kv_event with[64], without[64];
  memset(with, 0, sizeof with), memset(without, 0, sizeof without);
  const uint32_t n = offload_run(PKV_DTYPE_FP8_E4M3, with, 64);
  CHECK_EQ_INT(offload_run(NO_INDEXER, without, 64), n);
  CHECK(n >= 6); /* 2 stored, 2 offloaded, 2 removed, 2 stored again */
  uint32_t host_stored = 0;
  for (uint32_t i = 0; i < n; i++) {
    CHECK_EQ_INT(with[i].type, without[i].type);
    CHECK_EQ_INT(with[i].medium, without[i].medium);
    CHECK_EQ_INT(with[i].num_tokens, without[i].num_tokens);
    CHECK(with[i].block_hash == without[i].block_hash);
    CHECK(with[i].parent_hash == without[i].parent_hash);
    CHECK_EQ_INT(with[i].group, without[i].group);
    host_stored += with[i].type == PKV_EVENT_BLOCK_STORED && with[i].medium == PKV_TIER_HOST;
  }
  CHECK_EQ_INT(host_stored, 2);
}

/* The store: engine A writes a 9-token prompt's two blocks through to a FILE store and is
 * destroyed; engine B on the same store hits 8 tokens, loads the pages and selects the 9th
 * token's keys as A did. */
static void test_store(uint32_t index_dtype) {
  int32_t t[9];
  tu_fill(t, 9, 300);
  int32_t before[LAYERS][TOPK], after[LAYERS][TOPK];
  pkv_engine *a = engine((setup){index_dtype, 8, 0, 0, dir_});
  if (!a) return;
  const uint64_t s = tu_alloc(a, t, 9, NULL);
  step(a, s, 8, 5, 0, NULL);
  step(a, s, 0, 5, 0, before);
  CHECK_OK(pkv_release(a, s));
  pkv_engine_destroy(a); /* its writes are finished */
  pkv_engine *b = engine((setup){index_dtype, 8, 0, 0, dir_});
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s2 = tu_alloc(b, t, 9, &cached);
  CHECK_EQ_INT(cached, 8);
  CHECK_EQ_INT(tu_stats(b).store_hit_tokens, 8);
  CHECK_EQ_INT(step(b, s2, 0, 5, PKV_COPY_LOAD, after), 2);
  CHECK_EQ_INT(bad_seq(b, s2, 0, 9, 5), 0);
  CHECK(same_top(before, after));
  CHECK_ENGINE(b);
  pkv_engine_destroy(b);
}

/* A store of fp8 indexer pages is no store for a bf16 indexer or for none: no key of theirs is
 * in it (a miss, not a rejected value of the wrong size). */
static void test_fingerprint(uint32_t other) {
  int32_t t[9];
  tu_fill(t, 9, 300);
  pkv_engine *e = engine((setup){other, 8, 0, 0, dir_});
  if (!e) return;
  uint32_t cached = 99;
  const uint64_t s = tu_alloc(e, t, 9, &cached);
  CHECK_EQ_INT(cached, 0);
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_store_rejected, 0);
  CHECK_EQ_INT(st.store_hit_tokens, 0);
  CHECK_OK(pkv_release(e, s));
  pkv_engine_destroy(e);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

#define RUN_BOTH(fn)                                                        \
  do {                                                                      \
    int failed_before_ = tu_failed_;                                        \
    fn(PKV_DTYPE_FP8_E4M3);                                                 \
    fn(PKV_DTYPE_BF16);                                                     \
    printf("%s %s\n", tu_failed_ == failed_before_ ? "ok  " : "FAIL", #fn); \
  } while (0)

int main(void) {
  RUN_BOTH(test_cow);
  RUN_BOTH(test_swap);
  RUN_BOTH(test_offload);
  TU_RUN(test_events);
  if (!CHECK(mkdtemp(strcpy(dir_, "/tmp/pkv-indexer-tiers-XXXXXX")) != NULL)) return tu_summary();
  /* fp8 pages first: neither a bf16 indexer nor none reads them; then bf16's own. */
  int failed_before = tu_failed_;
  test_store(PKV_DTYPE_FP8_E4M3);
  test_fingerprint(PKV_DTYPE_BF16);
  test_fingerprint(NO_INDEXER);
  test_store(PKV_DTYPE_BF16);
  printf("%s test_store\n", tu_failed_ == failed_before ? "ok  " : "FAIL");
  nftw(dir_, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  return tu_summary();
}
