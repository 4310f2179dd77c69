/* Long contexts: decode over > 4k tokens of context (the split over keys and its merge), two
 * sequences sharing those 4k tokens after a fork, a 300-token chunk at the end of a long prompt,
 * in batches that mix the long decodes with a 1-token decode, a prefill after a prefix hit and a
 * chunk of a 700-token prompt, against the fp64 reference; and 12 tokens appended to the long
 * prompt and computed alone: a tile of 12 rows over 4k keys, split over keys (prefill partials
 * and their merge).
 *
 * The first 3800 tokens of the long prompt are written into the pool by the test itself
 * (kw_fill_direct): checking their prefill would cost minutes of reference time.
 *
 * Usage: test_attention_long [CONFIG]   (no argument: every config) */
#include <string.h>

#include "kv_world.h"

static const kw_config configs[] = {
    {"long_bs16_hd128_gqa4_bf16", 2, 8, 2, 128, PKV_DTYPE_BF16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"long_bs7_hd80_gqa8_f16", 2, 8, 1, 80, PKV_DTYPE_F16, 7, 0, 2, 0, 0, 0, 4, 0, 0, 0},
    {"long_bs32_hd64_gqa1_f32", 2, 4, 4, 64, PKV_DTYPE_F32, 32, 0, 3, 0, 0, 0, 3, 0, 0, 0},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0], LONG_TOKENS = 4100, DIRECT = 3800 };

static void append1(kw_world *w, int s, uint32_t i) {
  const int32_t t = kw_token(77, 5000 + i);
  kw_append(w, s, &t, 1);
}

static void run_config(const kw_config *c) {
  kw_config cc = *c;
  cc.num_blocks = 2 * (LONG_TOKENS + 400) / c->block_size + 64;
  kw_world w;
  if (!kw_init(&w, &cc)) return;
  static int32_t t[LONG_TOKENS];
  uint32_t cached = 99;
  kw_tokens(t, LONG_TOKENS, 1234 + c->block_size);
  const int p = kw_alloc(&w, t, LONG_TOKENS, &cached);
  kw_tokens(t, 40, 99);
  const int q = kw_alloc(&w, t, 40, &cached);
  if (p < 0 || q < 0 || !kw_fill_direct(&w, p, DIRECT)) {
    kw_free(&w);
    return;
  }

  /* The long prompt's last 300 tokens (a chunk over 3800 cached ones) beside q's prefill. */
  {
    const int s[2] = {q, p};
    kw_step(&w, s, NULL, 2, 0);
  }
  /* p decodes alone, then computes 12 more tokens alone (split over keys), is forked (f shares
   * its 4k tokens); h hits q's blocks; c is chunked. */
  append1(&w, p, 0);
  kw_step(&w, &p, NULL, 1, 0);
  for (uint32_t i = 0; i < 12; i++) append1(&w, p, 100 + i);
  kw_step(&w, &p, NULL, 1, 0);
  const int f = kw_fork(&w, p);
  memcpy(t, w.seqs[q].tokens, 32 * sizeof t[0]);
  kw_tokens(t + 32, 12, 98);
  const int h = kw_alloc(&w, t, 44, &cached);
  CHECK(cached == 32 / c->block_size * c->block_size);
  kw_tokens(t, 700, 97);
  const int cq = kw_alloc(&w, t, 700, NULL);
  /* Three steps: p, q and f decode (f and p on 4k shared tokens, the first step copying their
   * shared last block), h prefills then decodes, c goes in chunks of 250, 250 and 200. */
  for (uint32_t step = 0; f >= 0 && h >= 0 && cq >= 0 && step < 3; step++) {
    const int s[5] = {p, q, f, h, cq};
    const uint32_t n[5] = {1, 1, 1, step ? 1 : 44 - cached, step < 2 ? 250 : 200};
    for (int i = 0; i < 4; i++)
      if (i < 3 || step > 0) append1(&w, s[i], 1 + step * 4 + (uint32_t)i);
    kw_step(&w, s, n, 5, step == 0 ? KW_REVERSE_LAYERS : 0);
  }
  for (int s = 0; s < KW_MAX_SEQS; s++)
    if (w.seqs[s].id) kw_release(&w, s);
  kw_free(&w);
}

int main(int argc, char **argv) { return kw_main(argc, argv, configs, NUM_CONFIGS, run_config); }
