/*
 * test_segments.c - block descriptors (pkv_block_segments, pkv_seq_segments) and the layout
 * fingerprint (pkv_layout_fingerprint), the pieces a transport moves blocks by (DESIGN.md §10):
 *   - each segment is where pkv_pool_info says the block's K or V of a layer is, in the order
 *     block, layer, K then V, for the pool and the host tier;
 *   - a sequence's segments list each block index's groups in order, a window's given-back
 *     blocks as empty segments, so two engines of one layout line up;
 *   - copying one engine's segments to another's of an equal fingerprint (and other block
 *     counts) moves the KV byte for byte;
 *   - the fingerprint differs for another dtype, rank, window or scale, not for other counts;
 *   - every refusal, with nothing written.
 */
#include <string.h>

#include "test_util.h"

enum { BS = 4, LAYERS = 2, KVH = 2, HD = 8 };

static pkv_engine *make(uint32_t blocks, uint32_t host, void (*tweak)(pkv_engine_params *)) {
  pkv_engine_params p;
  tu_params(&p, BS, blocks);
  p.host_num_blocks = host;
  if (tweak) tweak(&p);
  return tu_engine_p(&p);
}

static void fingerprint(pkv_engine *e, uint8_t out[32]) {
  CHECK_OK(pkv_layout_fingerprint(e, 0, out));
}

/* One batch of every uncomputed token of seq, K and V of token t, layer l, head h, dim d being
 * a value of (tag, t, l, h, d) so two engines write the same bytes for the same tokens. */
static void compute(pkv_engine *e, uint64_t seq, uint32_t tag) {
  pkv_batch *b = NULL;
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return;
  CHECK_OK(pkv_batch_info(b, &v));
  float q[64 * 4 * HD], k[64 * KVH * HD], val[64 * KVH * HD], out[64 * 4 * HD];
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (uint32_t t = 0; t < v.num_tokens; t++) {
      for (uint32_t i = 0; i < 4 * HD; i++) q[t * 4 * HD + i] = 0.01f * (float)i;
      for (uint32_t i = 0; i < KVH * HD; i++) {
        const float x = (float)(tag * 1000 + (uint32_t)v.positions[t] * 10 + l) + 0.001f * i;
        k[t * KVH * HD + i] = x, val[t * KVH * HD + i] = -x;
      }
    }
    CHECK_OK(pkv_attention(b, l, q, k, val, out));
  }
  CHECK_OK(pkv_batch_end(b));
}

static void places(void) {
  pkv_engine *e = make(16, 8, NULL);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_pool_info(e, &info));
  const int32_t blocks[3] = {5, 0, 15};
  pkv_segment seg[16];
  uint32_t n = 0;
  CHECK_OK(pkv_block_segments(e, 0, PKV_TIER_DEVICE, blocks, 3, NULL, 0, &n));
  CHECK_EQ_INT(n, 3 * LAYERS * 2); /* the count alone */
  CHECK_OK(pkv_block_segments(e, 0, PKV_TIER_DEVICE, blocks, 3, seg, 16, &n));
  CHECK_EQ_INT(n, 12);
  const uint64_t bb = (uint64_t)BS * KVH * HD * 4; /* f32 */
  for (uint32_t i = 0; i < 3; i++)
    for (uint32_t l = 0; l < LAYERS; l++) {
      const uint64_t at = (l * info.layer_stride + (uint64_t)blocks[i] * info.block_stride) * 4;
      const pkv_segment *s = &seg[(i * LAYERS + l) * 2];
      CHECK(s[0].base == (char *)info.k_base + at && s[0].bytes == bb);
      CHECK(s[1].base == (char *)info.v_base + at && s[1].bytes == bb);
    }
  const int32_t host_blocks[2] = {7, 1};
  CHECK_OK(pkv_block_segments(e, 0, PKV_TIER_HOST, host_blocks, 2, seg, 16, &n));
  CHECK_EQ_INT(n, 8);
  CHECK(seg[0].base == (char *)info.host_k_base + 7 * info.block_stride * 4);
  CHECK(seg[3].base ==
        (char *)info.host_v_base + (info.host_layer_stride + 7 * info.block_stride) * 4);
  pkv_engine_destroy(e);
}

static void window(pkv_engine_params *p) { p->sliding_window = 4; }
static uint32_t windows[LAYERS] = {0, 4};
static void hybrid(pkv_engine_params *p) { p->layer_windows = windows; }
static void bf16(pkv_engine_params *p) { p->dtype = PKV_DTYPE_BF16; }
static void rank1(pkv_engine_params *p) { p->tp_size = 2, p->tp_rank = 1; }
static void fp8(pkv_engine_params *p) { p->kv_dtype = PKV_DTYPE_FP8_E4M3; }

/* Copies src's segments into dst's, one by one: what a transport does. */
static void move(const pkv_segment *src, const pkv_segment *dst, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    CHECK(src[i].bytes == dst[i].bytes);
    if (src[i].bytes) memcpy(dst[i].base, src[i].base, src[i].bytes);
  }
}

static void transfer(void) {
  pkv_engine *a = make(16, 0, NULL), *b = make(24, 0, NULL);
  uint8_t fa[32], fb[32];
  fingerprint(a, fa), fingerprint(b, fb);
  CHECK(memcmp(fa, fb, 32) == 0); /* other block counts, one layout */
  int32_t t[12];
  tu_fill(t, 12, 100);
  const uint64_t sa = tu_alloc(a, t, 12, NULL);
  compute(a, sa, 1);
  /* b's blocks of the same prompt, at other ids (a block taken first). */
  int32_t other[4];
  tu_fill(other, 4, 900);
  tu_alloc(b, other, 4, NULL);
  const uint64_t sb = tu_alloc(b, t, 12, NULL);
  pkv_segment from[32], to[32];
  uint32_t nf = 0, nt = 0;
  CHECK_OK(pkv_seq_segments(a, 0, sa, 0, 3, from, 32, &nf));
  CHECK_OK(pkv_seq_segments(b, 0, sb, 0, 3, to, 32, &nt));
  CHECK_EQ_INT(nf, 3 * LAYERS * 2);
  CHECK_EQ_INT(nt, nf);
  move(from, to, nf);
  /* b's blocks now hold a's bytes: every segment equal, and b computing the same tokens writes
   * what it holds already. */
  size_t differ = 0;
  for (uint32_t i = 0; i < nf; i++) differ += memcmp(from[i].base, to[i].base, from[i].bytes) != 0;
  CHECK(differ == 0);
  compute(b, sb, 1);
  CHECK_OK(pkv_seq_segments(b, 0, sb, 0, 3, to, 32, &nt));
  differ = 0;
  for (uint32_t i = 0; i < nf; i++) differ += memcmp(from[i].base, to[i].base, from[i].bytes) != 0;
  CHECK(differ == 0);
  /* A part of the blocks: block 1 alone is the middle of the list. */
  pkv_segment mid[8];
  CHECK_OK(pkv_seq_segments(a, 0, sa, 1, 1, mid, 8, &nf));
  CHECK(nf == LAYERS * 2 && mid[0].base == from[LAYERS * 2].base);
  pkv_engine_destroy(a);
  pkv_engine_destroy(b);
}

/* Two groups (full, a window of 4): each block index lists group 0's block, then group 1's;
 * blocks the window gave back are empty segments. */
static void groups(void) {
  pkv_engine *e = make(32, 0, hybrid);
  int32_t t[16];
  tu_fill(t, 16, 300);
  const uint64_t s = tu_alloc(e, t, 16, NULL);
  compute(e, s, 2);
  int32_t g0[8], g1[8];
  uint32_t n0 = 0, n1 = 0;
  CHECK_OK(pkv_seq_group_block_table(e, s, 0, g0, 8, &n0));
  CHECK_OK(pkv_seq_group_block_table(e, s, 1, g1, 8, &n1));
  CHECK(n0 == 4 && n1 == 4 && g1[0] == -1); /* the window's first block was given back */
  pkv_segment seg[64], one[8];
  uint32_t n = 0, m = 0;
  CHECK_OK(pkv_seq_segments(e, 0, s, 0, 4, seg, 64, &n));
  const uint32_t per = 2; /* each group's block: one layer slot (group_layers 1), K and V */
  CHECK_EQ_INT(n, 4 * 2 * per);
  for (uint32_t i = 0; i < 4; i++) {
    CHECK_OK(pkv_block_segments(e, 0, PKV_TIER_DEVICE, &g0[i], 1, one, 8, &m));
    CHECK(m == per && seg[(i * 2) * per].base == one[0].base);
    if (g1[i] < 0) {
      CHECK(seg[(i * 2 + 1) * per].base == NULL && seg[(i * 2 + 1) * per].bytes == 0);
    } else {
      CHECK_OK(pkv_block_segments(e, 0, PKV_TIER_DEVICE, &g1[i], 1, one, 8, &m));
      CHECK(seg[(i * 2 + 1) * per].base == one[0].base);
    }
  }
  pkv_engine_destroy(e);
}

static void fingerprints(void) {
  void (*tweaks[])(pkv_engine_params *) = {NULL, window, hybrid, bf16, rank1, fp8};
  uint8_t fp[6][32];
  for (int i = 0; i < 6; i++) {
    pkv_engine *e = make(16, 0, tweaks[i]);
    fingerprint(e, fp[i]);
    pkv_engine_destroy(e);
  }
  for (int i = 0; i < 6; i++)
    for (int j = i + 1; j < 6; j++) CHECK(memcmp(fp[i], fp[j], 32) != 0);
  /* fp8 scales are part of it: KV written under other scales reads other values. */
  pkv_engine *e = make(16, 0, fp8);
  float sk[KVH] = {0.5f, 2.0f}, sv[KVH] = {1.0f, 1.0f};
  CHECK_OK(pkv_set_kv_scales(e, 0, sk, sv));
  uint8_t scaled[32];
  fingerprint(e, scaled);
  CHECK(memcmp(scaled, fp[5], 32) != 0);
  pkv_engine_destroy(e);
}

static void page(pkv_engine_params *p) { p->block_layout = PKV_BLOCK_LAYOUT_PAGE; }

/* Each page of pb holds its block's LAYERS segments of la, in order. */
static int pages_equal(const pkv_segment *la, const pkv_segment *pb, uint32_t n) {
  size_t differ = 0;
  for (uint32_t i = 0; i < n; i++) {
    differ += pb[i].bytes != (uint64_t)LAYERS * 2 * la[0].bytes;
    uint64_t at = 0;
    for (uint32_t j = 0; j < LAYERS * 2; j++) {
      const pkv_segment *s = &la[i * LAYERS * 2 + j];
      differ += memcmp((const char *)pb[i].base + at, s->base, s->bytes) != 0;
      at += s->bytes;
    }
  }
  return differ == 0;
}

/* The PAGE layout: a block is one segment holding what the LAYERS layout keeps in 2 x layers
 * (layer by layer, K then V), and attention over it gives the same outputs. */
static void pages(void) {
  pkv_engine *a = make(16, 8, NULL), *b = make(16, 8, page);
  uint8_t fa[32], fb[32];
  fingerprint(a, fa), fingerprint(b, fb);
  CHECK(memcmp(fa, fb, 32) != 0);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_pool_info(b, &info));
  CHECK(info.num_layers == 1 && info.v_base == NULL);
  int32_t t[12];
  tu_fill(t, 12, 700);
  const uint64_t sa = tu_alloc(a, t, 12, NULL), sb = tu_alloc(b, t, 12, NULL);
  compute(a, sa, 3);
  compute(b, sb, 3);
  pkv_segment la[16], pb[4];
  uint32_t na = 0, nb = 0;
  CHECK_OK(pkv_seq_segments(a, 0, sa, 0, 3, la, 16, &na));
  CHECK_OK(pkv_seq_segments(b, 0, sb, 0, 3, pb, 4, &nb));
  CHECK(na == 3 * LAYERS * 2 && nb == 3);
  CHECK(pages_equal(la, pb, 3));
  /* Both swapped out to the host tier and back, a token more computed: the pages moved whole
   * hold what the layers moved layer by layer. */
  const int32_t more = 7;
  CHECK_OK(pkv_swap_out(a, sa));
  CHECK_OK(pkv_swap_out(b, sb));
  CHECK_OK(pkv_swap_in(a, sa));
  CHECK_OK(pkv_swap_in(b, sb));
  CHECK_OK(pkv_append(a, sa, &more, 1));
  CHECK_OK(pkv_append(b, sb, &more, 1));
  compute(a, sa, 3);
  compute(b, sb, 3);
  CHECK_OK(pkv_seq_segments(a, 0, sa, 0, 4, la, 16, &na));
  CHECK_OK(pkv_seq_segments(b, 0, sb, 0, 4, pb, 4, &nb));
  CHECK(na == 4 * LAYERS * 2 && nb == 4 && pages_equal(la, pb, 4));
  pkv_engine_destroy(a);
  pkv_engine_destroy(b);
}

static void refusals(void) {
  pkv_engine *e = make(16, 0, NULL);
  int32_t t[8];
  tu_fill(t, 8, 50);
  const uint64_t s = tu_alloc(e, t, 8, NULL);
  const int32_t ok_block = 3, bad_block = 16, neg = -1;
  pkv_segment seg[8];
  memset(seg, 0xab, sizeof seg);
  uint32_t n = 77;
  CHECK_ERR(e, pkv_block_segments(e, 0, 3, &ok_block, 1, seg, 8, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_HOST, &ok_block, 1, seg, 8, &n),
            PKV_ERR_INVALID_ARGUMENT); /* no host tier */
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, &bad_block, 1, seg, 8, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, &neg, 1, seg, 8, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, NULL, 1, seg, 8, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_block_segments(e, 1, PKV_TIER_DEVICE, &ok_block, 1, seg, 8, &n),
            PKV_ERR_INVALID_ARGUMENT); /* one rank */
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, &ok_block, 1, NULL, 8, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, &ok_block, 1, seg, 8, NULL),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK(n == 77);
  CHECK_ERR(e, pkv_block_segments(e, 0, PKV_TIER_DEVICE, &ok_block, 1, seg, 3, &n),
            PKV_ERR_INVALID_ARGUMENT);
  CHECK(n == 4); /* the count, for a larger buffer */
  uint8_t probe[sizeof seg];
  memset(probe, 0xab, sizeof probe);
  CHECK(memcmp(seg, probe, sizeof seg) == 0); /* nothing written */
  CHECK_ERR(e, pkv_seq_segments(e, 0, s, 1, 2, seg, 8, &n), PKV_ERR_INVALID_ARGUMENT); /* past */
  CHECK_ERR(e, pkv_seq_segments(e, 0, s + 100, 0, 1, seg, 8, &n), PKV_ERR_NOT_FOUND);
  CHECK_OK(pkv_preempt(e, s));
  CHECK_ERR(e, pkv_seq_segments(e, 0, s, 0, 1, seg, 8, &n), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_layout_fingerprint(e, 0, NULL), PKV_ERR_INVALID_ARGUMENT);
  /* PAGE keeps each layer's place: at most 2^20 layers (LAYERS takes more); not with stages. */
  pkv_engine_params p;
  tu_params(&p, BS, 16);
  p.block_layout = PKV_BLOCK_LAYOUT_PAGE, p.num_layers = (1u << 20) + 1;
  pkv_kv_budget kb;
  memset(&kb, 0, sizeof kb);
  kb.struct_size = sizeof kb;
  CHECK_ERR(NULL, pkv_profile(&p, &kb), PKV_ERR_INVALID_ARGUMENT);
  p.block_layout = PKV_BLOCK_LAYOUT_LAYERS;
  CHECK_OK(pkv_profile(&p, &kb));
  p.block_layout = PKV_BLOCK_LAYOUT_PAGE, p.num_layers = LAYERS, p.pp_size = 2;
  CHECK_ERR(NULL, pkv_profile(&p, &kb), PKV_ERR_INVALID_ARGUMENT);
  p.block_layout = 2, p.pp_size = 1;
  CHECK_ERR(NULL, pkv_profile(&p, &kb), PKV_ERR_INVALID_ARGUMENT);
  uint8_t fp[32];
  CHECK_ERR(e, pkv_layout_fingerprint(e, 1, fp), PKV_ERR_INVALID_ARGUMENT);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(places);
  TU_RUN(transfer);
  TU_RUN(groups);
  TU_RUN(fingerprints);
  TU_RUN(pages);
  TU_RUN(refusals);
  return tu_summary();
}
