/* Sliding windows (params.sliding_window: every layer) under pkv_attention, against the fp64
 * reference that masks keys older than the window: windows 1, 7, 16 and 4096 with block sizes 1,
 * 7 and 16, GQA 1, 4 and 8, f32, f16, bf16 and fp8 caches. Every batch is checked.
 *
 * Windows up to 16: a prompt prefilled in chunks that cross the window's edge (a chunk before
 * the window fills, one across it, a short one, the rest), a prompt that shares the first one's
 * blocks, a chunked 200-token prompt in mixed batches, a fork whose appends copy a shared block,
 * a preemption and resume, and 2000 decode steps of four sequences: thousands of tokens past the
 * window. Window 4096: a 4896-token prompt (its first 3900 tokens written into the pool by the
 * test: kw_fill_direct) prefilled in chunks across position 4096, beside a short prompt, then
 * 300 decode steps over 4096-key windows, one of them 9 tokens long (a tile split over keys). Configs named mixed_* give their layers different
 * windows (full attention on some): KV groups, each layer checked through its own group's slot
 * mapping and pool slot. Every run must have seen blocks given back (-1 in the block tables).
 *
 * Usage: test_attention_window [CONFIG]   (no argument: every config) */
#include <stdio.h>
#include <string.h>

#include "kv_world.h"

enum { F32 = PKV_DTYPE_F32, F16 = PKV_DTYPE_F16, BF16 = PKV_DTYPE_BF16 };
enum { E4M3 = PKV_DTYPE_FP8_E4M3, E5M2 = PKV_DTYPE_FP8_E5M2 };
enum { DECODES = 2000, LONG_PROMPT = 4896, LONG_DIRECT = 3900, LONG_DECODES = 300 };

/* name, layers, q heads, kv heads, head_dim, dtype, block size, blocks, threads, tp, rank,
 * softmax scale, q amplitude, kv dtype, window */
static const kw_config configs[] = {
    {"w1_bs1_hd64_gqa4_bf16", 2, 8, 2, 64, BF16, 1, 0, 2, 0, 0, 0, 3, 0, 1, 0},
    {"w1_bs16_hd64_gqa1_f32", 2, 2, 2, 64, F32, 16, 0, 2, 0, 0, 0, 3, 0, 1, 0},
    {"w1_bs7_hd40_gqa8_f16_e4m3", 2, 8, 1, 40, F16, 7, 0, 2, 0, 0, 0, 3, E4M3, 1, 0},
    {"w7_bs7_hd80_gqa8_f16", 2, 8, 1, 80, F16, 7, 0, 2, 0, 0, 0, 3, 0, 7, 0},
    {"w7_bs1_hd64_gqa4_f32_e4m3", 2, 8, 2, 64, F32, 1, 0, 2, 0, 0, 0, 3, E4M3, 7, 0},
    {"w7_bs16_hd128_gqa4_bf16", 2, 8, 2, 128, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 7, 0},
    {"w16_bs16_hd64_gqa4_f16_e5m2", 2, 8, 2, 64, F16, 16, 0, 2, 0, 0, 0, 3, E5M2, 16, 0},
    {"w16_bs7_hd128_gqa8_bf16", 2, 8, 1, 128, BF16, 7, 0, 2, 0, 0, 0, 3, 0, 16, 0},
    {"w16_bs1_hd40_gqa1_f32", 2, 2, 2, 40, F32, 1, 0, 2, 0, 0, 0, 5, 0, 16, 0},
    {"w4096_bs16_hd64_gqa4_bf16", 2, 8, 2, 64, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 4096, 0},
    {"w4096_bs7_hd64_gqa8_f16_e4m3", 2, 8, 1, 64, F16, 7, 0, 2, 0, 0, 0, 3, E4M3, 4096, 0},
    {"w4096_bs1_hd64_gqa1_f32", 2, 2, 2, 64, F32, 1, 0, 2, 0, 0, 0, 3, 0, 4096, 0},
    /* window: the largest of the layers' windows (mixed below) */
    {"mixed_w7_full_w16_bs7_hd64_gqa4_bf16", 3, 8, 2, 64, BF16, 7, 0, 2, 0, 0, 0, 3, 0, 16, 0},
    {"mixed_full_w1_full_bs1_hd64_gqa8_f32_e5m2", 3, 8, 1, 64, F32, 1, 0, 2, 0, 0, 0, 3, E5M2, 1,
     0},
    {"mixed_w4096_full_bs16_hd64_gqa4_f16_e4m3", 2, 8, 2, 64, F16, 16, 0, 2, 0, 0, 0, 3, E4M3, 4096,
     0},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0] };

/* The mixed configs' windows per layer. */
static const struct {
  const char *name;
  uint32_t windows[3];
} mixed[] = {
    {"mixed_w7_full_w16_bs7_hd64_gqa4_bf16", {7, 0, 16}},
    {"mixed_full_w1_full_bs1_hd64_gqa8_f32_e5m2", {0, 1, 0}},
    {"mixed_w4096_full_bs16_hd64_gqa4_f16_e4m3", {4096, 0}},
};

static const uint32_t *layer_windows(const kw_config *c) {
  for (size_t i = 0; i < sizeof mixed / sizeof mixed[0]; i++)
    if (strcmp(c->name, mixed[i].name) == 0) return mixed[i].windows;
  return NULL;
}

/* kw_init, with the config's per-layer windows when it has them: then a group per window (or
 * several: the pool holds num_blocks blocks of every group's layers) and a shorter decode (a
 * full-attention layer's reference reads the whole context at every step). */
static int init(kw_world *w, kw_config *c, uint32_t *decodes) {
  const uint32_t *windows = layer_windows(c);
  if (!windows) return kw_init(w, c);
  c->num_blocks *= c->num_layers;
  *decodes /= 3;
  return kw_init_windows(w, c, windows);
}

static void append1(kw_world *w, int s, uint32_t i) {
  const int32_t t = kw_token(w->c.window * 31u + w->c.block_size, 100000 + i);
  kw_append(w, s, &t, 1);
}

static void release_all(kw_world *w) {
  if (!kw_failed && !CHECK(w->given_back > 0))
    fprintf(stderr, "  %s: no block table held -1: nothing was given back\n", w->c.name);
  for (int s = 0; s < KW_MAX_SEQS; s++)
    if (w->seqs[s].id) kw_release(w, s);
  kw_free(w);
}

/* Computes slot s's prompt in chunks of sizes n[0..], the last chunk taking the rest. */
static void prefill_chunks(kw_world *w, int s, const uint32_t *n, uint32_t count) {
  for (uint32_t i = 0; i < count && w->seqs[s].num_computed < w->seqs[s].num_tokens; i++) {
    const uint32_t left = w->seqs[s].num_tokens - w->seqs[s].num_computed;
    const uint32_t c = i + 1 == count || n[i] > left ? left : n[i];
    if (kw_step(w, &s, &c, 1, 0)) return;
  }
}

/* The story for windows up to 16; see the top of the file. */
static void run_small(const kw_config *c) {
  kw_config cc = *c;
  const uint32_t win = c->window, bs = c->block_size;
  cc.num_blocks = 4 * (DECODES + 260) / bs + 64;
  kw_world w;
  uint32_t decodes = DECODES;
  if (!init(&w, &cc, &decodes)) return;
  const uint64_t seed = win * 7919ull + bs * 31ull + (uint64_t)c->dtype;
  int32_t t[256];
  const uint32_t la = 3 * win + 5 > 40 ? 3 * win + 5 : 40;
  kw_tokens(t, la, seed);
  const int a = kw_alloc(&w, t, la, NULL);
  const uint32_t chunks[4] = {win > 1 ? win - 1 : 1, win + 2, 5, 0};
  if (a >= 0) prefill_chunks(&w, a, chunks, 4);

  /* B shares A's first 2 * bs + 1 tokens; C has 200 of its own, in chunks of 90 and the rest,
   * in batches with A's decodes and B's prefill. */
  kw_tokens(t + 2 * bs + 1, 20, seed + 1);
  const int b = kw_alloc(&w, t, 2 * bs + 21, NULL);
  kw_tokens(t, 200, seed + 2);
  const int cq = kw_alloc(&w, t, 200, NULL);
  if (a < 0 || b < 0 || cq < 0) {
    release_all(&w);
    return;
  }
  append1(&w, a, 0);
  {
    const int s[3] = {a, b, cq};
    const uint32_t n[3] = {1, w.seqs[b].num_tokens - w.seqs[b].num_computed, 90};
    kw_step(&w, s, n, 3, 0);
  }
  append1(&w, a, 1);
  {
    const int s[2] = {cq, a};
    kw_step(&w, s, NULL, 2, KW_REVERSE_LAYERS);
  }

  /* F forks A; both append a different token (a partial last block is copied). */
  const int f = kw_fork(&w, a);
  if (f < 0) {
    release_all(&w);
    return;
  }
  const int live[4] = {a, b, cq, f};
  for (uint32_t step = 0; step < decodes && !kw_failed; step++) {
    for (int i = 0; i < 4; i++) append1(&w, live[i], 2 + step * 4 + (uint32_t)i);
    if (step == decodes / 2) { /* B is preempted with its token pending and recomputed */
      if (!kw_preempt(&w, b) || !kw_resume(&w, b, NULL)) break;
    }
    kw_step(&w, live, NULL, 4, step == 7 ? KW_TWICE : 0);
  }
  release_all(&w);
}

/* Window 4096; see the top of the file. */
static void run_long(const kw_config *c) {
  kw_config cc = *c;
  cc.num_blocks = 2 * (LONG_PROMPT + LONG_DECODES + 100) / c->block_size + 64;
  kw_world w;
  uint32_t decodes = LONG_DECODES;
  if (!init(&w, &cc, &decodes)) return;
  static int32_t t[LONG_PROMPT];
  kw_tokens(t, LONG_PROMPT, 4242 + c->block_size);
  const int p = kw_alloc(&w, t, LONG_PROMPT, NULL);
  kw_tokens(t, 40, 4343);
  const int q = kw_alloc(&w, t, 40, NULL);
  if (p < 0 || q < 0 || !kw_fill_direct(&w, p, LONG_DIRECT)) {
    release_all(&w);
    return;
  }
  /* Rows 3900 .. 4199: those from 4096 on no longer see position 0, then 4200 .. 4399. */
  for (uint32_t n = 300; n >= 200; n -= 100) kw_step(&w, &p, &n, 1, 0);
  {
    const int s[2] = {q, p};
    kw_step(&w, s, NULL, 2, 0); /* q's prompt beside p's last 497 rows */
  }
  const int live[2] = {p, q};
  for (uint32_t step = 0; step < decodes && !kw_failed; step++) {
    append1(&w, p, step * 2);
    for (uint32_t i = 0; step == decodes / 2 && i < 8; i++) append1(&w, p, 100000 + i);
    append1(&w, q, step * 2 + 1);
    kw_step(&w, live, NULL, 2, 0);
  }
  release_all(&w);
}

static void run_config(const kw_config *c) {
  if (c->window > 16)
    run_long(c);
  else
    run_small(c);
}

int main(int argc, char **argv) { return kw_main(argc, argv, configs, NUM_CONFIGS, run_config); }
