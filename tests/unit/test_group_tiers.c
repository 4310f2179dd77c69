/* Every tier with KV groups (DESIGN.md §11, §12): a Gemma-3-like engine (full-attention layers
 * beside sliding-window ones, so a windowed group gives back blocks behind its window) and one of
 * unequal layers in pages move every group's blocks, and only those a group holds:
 * pkv_swap_out / pkv_swap_in, offload of evicted prefix blocks and their load on a later hit,
 * pkv_truncate taking back a window's block from the host tier, and a FILE store read by a new
 * engine (each group's blocks under keys of their own, a fingerprint naming the layout). After
 * each move every held position holds the bytes a host wrote there, in every layer. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw under -std=c11 */
#include <ftw.h>
#include <sys/stat.h>

#include "test_util.h"

/* 4 layers: 0 and 1 full attention, 2 and 3 a window of 6 tokens: KV groups of 2 layers. */
enum { BS = 4, WINDOW = 6, LAYERS = 4, MAXB = 64, MAXT = 96 };

typedef struct {
  uint32_t blocks, host_blocks, offload;
  int pages;         /* unequal layers in pages (layer specs) instead of flat layer_windows */
  uint32_t window;   /* the windowed layers' window (0: every layer full attention) */
  const char *store; /* a FILE store's directory (write-through), or NULL */
} setup;

static uint32_t windows_[LAYERS];
static pkv_layer_spec specs_[LAYERS];

static pkv_engine *engine(setup c) {
  pkv_engine_params p;
  tu_params(&p, BS, c.blocks);
  p.num_layers = LAYERS;
  p.enable_prefix_caching = 1;
  p.host_num_blocks = c.host_blocks, p.host_offload = c.offload;
  for (uint32_t l = 0; l < LAYERS; l++) windows_[l] = l >= 2 ? c.window : 0;
  if (c.pages) { /* K and V of 2 heads of 8 in layers 0-1, K = V of 2 heads of 16 in 2-3 */
    memset(specs_, 0, sizeof specs_);
    for (uint32_t l = 0; l < LAYERS; l++) {
      specs_[l].attention = windows_[l] ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
      specs_[l].window = windows_[l];
      specs_[l].head_dim = l >= 2 ? 16 : 8;
      specs_[l].k_eq_v = l >= 2;
    }
    p.layer_specs = specs_, p.layer_spec_size = sizeof specs_[0];
  } else if (c.window) {
    p.layer_windows = windows_;
  }
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE, st.path = c.store, st.model_id = "test-group-tiers";
  if (c.store) p.store = &st;
  return tu_engine_p(&p);
}

static uint32_t group_table(pkv_engine *e, uint64_t seq, uint32_t g, int32_t *out) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_group_block_table(e, seq, g, out, MAXB, &len));
  return len;
}

/* Writes (check 0) or counts the floats that differ (check 1) of positions [from, to) of seq,
 * tagged tag, in every layer's K and V where the layer's group holds the position's block. held
 * (nullable) gets how many (layer, position) pairs were held. */
static uint32_t kv(pkv_engine *e, uint64_t seq, uint32_t tag, uint32_t from, uint32_t to, int check,
                   uint32_t *held) {
  uint32_t bad = 0, n = 0;
  for (uint32_t l = 0; l < LAYERS; l++) {
    const struct pkv_layer_info in = tu_layer_info(e, l);
    int32_t table[MAXB];
    const uint32_t nb = group_table(e, seq, in.group, table);
    for (uint32_t pos = from; pos < to; pos++) {
      if (!CHECK(pos / BS < nb)) return bad + 1;
      const int32_t b = table[pos / BS];
      if (b < 0) continue;
      n++;
      for (int v = 0; v < (in.k_eq_v ? 1 : 2); v++) {
        float *row = (float *)(v ? in.v_base : in.k_base) + (uint64_t)b * in.block_stride +
                     (pos % BS) * (v ? in.v_token_stride : in.token_stride);
        const uint32_t width = in.kv_heads * (v ? in.v_head_dim : in.head_dim);
        for (uint32_t i = 0; i < width; i++) {
          if (check)
            bad += row[i] != tu_kv_value(tag, v, l, pos, i);
          else
            row[i] = tu_kv_value(tag, v, l, pos, i);
        }
      }
    }
  }
  if (held) *held = n;
  return bad;
}

/* A host's step: its copies done, then tag's K/V of seq's uncomputed tokens written. Returns how
 * many copies of `kind` the batch listed. */
static uint32_t step(pkv_engine *e, uint64_t seq, uint32_t tag, int32_t kind) {
  const uint32_t from = tu_info(e, seq).num_computed_tokens;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return 0;
  const pkv_batch_view v = tu_view(b);
  uint32_t copies = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) copies += v.copy_kind[i] == kind;
  CHECK_OK(pkv_batch_copy(b));
  kv(e, seq, tag, from, tu_info(e, seq).num_tokens, 0, NULL);
  CHECK_OK(pkv_batch_end(b));
  return copies;
}

/* Every held position of seq's first n tokens holds tag's bytes; returns the pairs held. */
static uint32_t check_seq(pkv_engine *e, uint64_t seq, uint32_t tag, uint32_t n) {
  uint32_t held = 0;
  CHECK_EQ_INT(kv(e, seq, tag, 0, n, 1, &held), 0);
  return held;
}

/* A sequence of other tokens that takes the pool's free blocks (evicting cached ones), computed,
 * then released. */
static void flush(pkv_engine *e, uint32_t n, int32_t first) {
  int32_t t[MAXT];
  tu_fill(t, n, first);
  const uint64_t f = tu_alloc(e, t, n, NULL);
  step(e, f, 9, 0);
  CHECK_OK(pkv_release(e, f));
}

/* ---------------------------------------------------------------- swap */
/* 14 tokens: the full group holds 4 blocks, the windowed one blocks 2 and 3 (its window's first
 * key, token 9, is in block 2); swap-out moves those 6 blocks, other KV overwrites the pool, and
 * swap-in brings back exactly the bytes that left, in both groups. */
static void test_swap(int pages) {
  pkv_engine *e = engine((setup){12, 8, 0, pages, WINDOW, NULL});
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  step(e, a, 3, 0);
  int32_t w[MAXB];
  CHECK_EQ_INT(group_table(e, a, 1, w), 4);
  CHECK(w[0] == -1 && w[1] == -1 && w[2] >= 0 && w[3] >= 0);
  const uint32_t held = check_seq(e, a, 3, 14);
  CHECK_EQ_INT(held, 2 * 14 + 2 * 6); /* full layers: every token; windowed: blocks 2 and 3 */
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_EQ_INT(tu_info(e, a).num_host_blocks, 6);
  CHECK_EQ_INT(tu_stats(e).num_swapped_out_blocks, 6);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, 12);
  flush(e, 6 * BS, 1000); /* 6 blocks in each group: every pool block rewritten */
  CHECK_OK(pkv_swap_in(e, a));
  CHECK_EQ_INT(tu_info(e, a).num_host_blocks, 0);
  CHECK_EQ_INT(group_table(e, a, 1, w), 4);
  CHECK(w[0] == -1 && w[1] == -1 && w[2] >= 0 && w[3] >= 0);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_append(e, a, t + 14, 1));
  CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b));
  CHECK_EQ_INT(tu_view(b).num_copies, 6); /* the swap-in's copies, all of them */
  CHECK_OK(pkv_batch_copy(b));
  kv(e, a, 3, 14, 15, 0, NULL);
  CHECK_OK(pkv_batch_end(b));
  CHECK_EQ_INT(check_seq(e, a, 3, 15), 2 * 15 + 2 * 7);
  CHECK_ENGINE(e); /* its sealed blocks are copies of their prefix's nodes again, every group */
  pkv_engine_destroy(e);
}

/* A swap-out with too few free host blocks changes nothing. */
static void test_swap_no_space(void) {
  pkv_engine *e = engine((setup){12, 5, 0, 0, WINDOW, NULL});
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  step(e, a, 3, 0);
  const pkv_stats before = tu_stats(e);
  CHECK_ERR(e, pkv_swap_out(e, a), PKV_ERR_NO_SPACE); /* 6 blocks, 5 host blocks */
  CHECK_EQ_INT(tu_stats(e).num_host_free_blocks, before.num_host_free_blocks);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, before.num_free_blocks);
  CHECK_EQ_INT(check_seq(e, a, 3, 14), 2 * 14 + 2 * 6);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- offload and load */
/* A 13-token prompt seals 3 blocks in each group (the windowed group gives back blocks 0 and 1,
 * cached); other KV evicts them all to the host tier; the same prompt hits 12 tokens: the full
 * group loads blocks 0-2, the windowed one its window's blocks 1 and 2, and they hold the
 * prompt's bytes again. */
static void test_offload(int pages) {
  pkv_engine *e = engine((setup){10, 12, 1, pages, WINDOW, NULL});
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 13, NULL);
  step(e, a, 4, 0);
  CHECK_OK(pkv_release(e, a));
  flush(e, 5 * BS, 1000); /* 5 blocks in each group: the whole pool */
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_offloaded_blocks, 6); /* 3 blocks in each group */
  uint32_t cached = 0;
  const uint64_t b = tu_alloc(e, t, 13, &cached);
  CHECK_EQ_INT(cached, 12);
  CHECK_EQ_INT(tu_stats(e).host_hit_tokens, 12);
  CHECK_EQ_INT(tu_stats(e).num_loaded_blocks, 5); /* 3 full, the window's 2 */
  CHECK_EQ_INT(step(e, b, 4, PKV_COPY_LOAD), 5);
  CHECK_EQ_INT(check_seq(e, b, 4, 13), 2 * 13 + 2 * 5); /* windowed: blocks 2 and 3 */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- truncate */
/* A 14-token sequence gave back its windowed blocks 0 and 1; other KV evicts them to the host
 * tier; truncated to 6 tokens, the next token's window needs both again: LOADs bring them back. */
static void test_truncate(void) {
  pkv_engine *e = engine((setup){10, 12, 1, 0, WINDOW, NULL});
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  step(e, a, 5, 0);
  flush(e, 2 * BS, 1000); /* the 4 free blocks: the two cached windowed ones evicted */
  CHECK_EQ_INT(tu_stats(e).num_offloaded_blocks, 2);
  CHECK_OK(pkv_truncate(e, a, 6));
  int32_t w[MAXB];
  CHECK_EQ_INT(group_table(e, a, 1, w), 2);
  CHECK(w[0] >= 0 && w[1] >= 0);
  CHECK_EQ_INT(tu_stats(e).num_loaded_blocks, 2);
  CHECK_OK(pkv_append(e, a, t + 6, 1));
  CHECK_EQ_INT(step(e, a, 5, PKV_COPY_LOAD), 2);
  CHECK_EQ_INT(check_seq(e, a, 5, 7), 2 * 7 + 2 * 7);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- the store */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* 13 tokens written through to a FILE store by one engine; a new engine of the same layout hits
 * 12 of them from the store in both groups, with their bytes; engines of another layout (every
 * layer full attention, another window) share none of its keys. */
static void test_store(int pages) {
  char dir[] = "/tmp/pkv-group-tiers-XXXXXX";
  if (!CHECK(mkdtemp(dir) != NULL)) return;
  pkv_engine *w = engine((setup){12, 8, 0, pages, WINDOW, dir});
  if (!w) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(w, t, 13, NULL);
  step(w, a, 6, 0);
  pkv_engine_destroy(w); /* its writer finishes the queued writes */
  pkv_engine *o = engine((setup){12, 8, 0, pages, 0, dir});
  pkv_engine *o2 = engine((setup){12, 8, 0, pages, WINDOW + 1, dir});
  uint32_t cached = 0;
  if (o) {
    CHECK_OK(pkv_release(o, tu_alloc(o, t, 13, &cached)));
    CHECK_EQ_INT(cached, 0);
    pkv_engine_destroy(o);
  }
  if (o2) {
    CHECK_OK(pkv_release(o2, tu_alloc(o2, t, 13, &cached)));
    CHECK_EQ_INT(cached, 0);
    pkv_engine_destroy(o2);
  }
  pkv_engine *r = engine((setup){12, 8, 0, pages, WINDOW, dir});
  if (r) {
    const uint64_t b = tu_alloc(r, t, 13, &cached);
    CHECK_EQ_INT(cached, 12);
    const pkv_stats st = tu_stats(r);
    CHECK_EQ_INT(st.store_hit_tokens, 12);
    CHECK_EQ_INT(st.host_hit_tokens, 0);
    CHECK_EQ_INT(st.num_store_hits, 5); /* 3 full blocks, the window's 2 */
    CHECK_EQ_INT(step(r, b, 6, PKV_COPY_LOAD), 5);
    CHECK_EQ_INT(check_seq(r, b, 6, 13), 2 * 13 + 2 * 5);
    CHECK_ENGINE(r);
    pkv_engine_destroy(r);
  }
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void) {
  for (int pages = 0; pages < 2; pages++) {
    test_swap(pages);
    test_offload(pages);
    test_store(pages);
  }
  test_swap_no_space();
  test_truncate();
  return tu_summary();
}
