/* The CPU backend's pkv_attention against the fp64 reference over a sweep of shapes: block sizes
 * 1, 7, 16, 32; head_dim 40, 64, 72, 80, 128, 256; GQA 1, 4, 8; f32, f16, bf16; fp8 e4m3 and e5m2
 * caches; MLA latents (each value in several configs, not the cross product). Each config plays the same story, every batch checked:
 * a chunked prefill, a prefix hit, a chunked 600-token prompt (split over keys), mixed batches of
 * decodes, chunks and cached-prefix prefills, a fork whose appends copy-on-write the shared last
 * block (layers called last to first: the copy must cover every layer), a prefix hit on a
 * released sequence and one on a live one, preemption and resume.
 *
 * Usage: test_attention_sweep [CONFIG]   (no argument: every config) */
#include <string.h>

#include "kv_world.h"

enum { F32 = PKV_DTYPE_F32, F16 = PKV_DTYPE_F16, BF16 = PKV_DTYPE_BF16 };
enum { E4M3 = PKV_DTYPE_FP8_E4M3, E5M2 = PKV_DTYPE_FP8_E5M2 };

/* name, layers, q heads, kv heads, head_dim, dtype, block size, blocks, threads, tp, rank,
 * softmax scale, q amplitude, kv dtype, window, kv_lora_rank (MLA) */
static const kw_config configs[] = {
    {"bs16_hd128_gqa4_bf16", 2, 8, 2, 128, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs1_hd64_gqa1_f32", 2, 4, 4, 64, F32, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs7_hd80_gqa8_f16", 2, 8, 1, 80, F16, 7, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs32_hd256_gqa4_f32", 2, 4, 1, 256, F32, 32, 0, 2, 0, 0, 0, 2, 0, 0, 0},
    {"bs7_hd40_gqa4_bf16", 3, 8, 2, 40, BF16, 7, 0, 1, 0, 0, 0, 4, 0, 0, 0},
    {"bs16_hd72_gqa8_f16", 2, 16, 2, 72, F16, 16, 0, 3, 0, 0, 0, 3, 0, 0, 0},
    {"bs1_hd128_gqa8_bf16", 2, 8, 1, 128, BF16, 1, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs32_hd64_gqa4_f16", 2, 8, 2, 64, F16, 32, 0, 2, 0, 0, 0, 6, 0, 0, 0},
    {"bs7_hd256_gqa1_bf16", 2, 2, 2, 256, BF16, 7, 0, 2, 0, 0, 0, 2, 0, 0, 0},
    {"bs16_hd80_gqa1_f32_scale", 2, 2, 2, 80, F32, 16, 0, 2, 0, 0, 0.3f, 3, 0, 0, 0},
    {"bs32_hd40_gqa8_f32", 2, 8, 1, 40, F32, 32, 0, 2, 0, 0, 0, 8, 0, 0, 0},
    {"bs1_hd256_gqa4_f16", 2, 4, 1, 256, F16, 1, 0, 2, 0, 0, 0, 2, 0, 0, 0},
    {"bs7_hd128_gqa1_f32", 2, 2, 2, 128, F32, 7, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs16_hd64_gqa8_bf16_tp2", 2, 16, 2, 64, BF16, 16, 0, 2, 2, 1, 0, 3, 0, 0, 0},
    {"bs7_hd80_gqa4_bf16", 2, 8, 2, 80, BF16, 7, 0, 2, 0, 0, 0, 5, 0, 0, 0},
    /* scores spread over hundreds: near one-hot softmax, the running max rescaled often */
    {"bs16_hd128_gqa4_f32_peaky", 2, 8, 2, 128, F32, 16, 0, 2, 0, 0, 0, 40, 0, 0, 0},
    /* fp8 caches: scales per (layer, head), some saturating, some on subnormal codes (kv_world.c) */
    {"bs16_hd128_gqa4_bf16_e4m3", 2, 8, 2, 128, BF16, 16, 0, 2, 0, 0, 0, 3, E4M3, 0, 0},
    {"bs7_hd80_gqa8_f16_e4m3", 2, 8, 1, 80, F16, 7, 0, 2, 0, 0, 0, 3, E4M3, 0, 0},
    {"bs1_hd64_gqa1_f32_e4m3", 3, 4, 4, 64, F32, 1, 0, 2, 0, 0, 0, 3, E4M3, 0, 0},
    {"bs16_hd72_gqa4_bf16_e5m2", 2, 8, 2, 72, BF16, 16, 0, 2, 0, 0, 0, 3, E5M2, 0, 0},
    {"bs7_hd128_gqa1_f32_e5m2", 3, 2, 2, 128, F32, 7, 0, 2, 0, 0, 0, 3, E5M2, 0, 0},
    {"bs32_hd256_gqa4_f16_e5m2_tp2", 2, 8, 4, 256, F16, 32, 0, 2, 2, 1, 0, 2, E5M2, 0, 0},
    /* the decode kernel's passes of 8/4/2/1 heads, 1-4 score registers, head_dim tiles of 32/16/8 */
    {"bs16_hd128_gqa7_bf16", 2, 14, 2, 128, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs16_hd64_gqa16_f16", 2, 16, 1, 64, F16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs7_hd96_gqa6_bf16_e4m3", 2, 12, 2, 96, BF16, 7, 0, 2, 0, 0, 0, 3, E4M3, 0, 0},
    {"bs16_hd96_gqa3_bf16", 2, 6, 2, 96, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs1_hd112_gqa2_f16_e5m2", 2, 4, 2, 112, F16, 1, 0, 2, 0, 0, 0, 3, E5M2, 0, 0},
    {"bs16_hd256_gqa16_bf16_e5m2", 2, 16, 1, 256, BF16, 16, 0, 2, 0, 0, 0, 2, E5M2, 0, 0},
    /* past 0.4's limit (256), up to PKV_ATTENTION_MAX_HEAD_DIM_CPU (Gemma 4's 512) */
    {"bs16_hd512_gqa4_bf16", 2, 8, 2, 512, BF16, 16, 0, 2, 0, 0, 0, 2, 0, 0, 0},
    {"bs7_hd264_gqa2_f32_e4m3", 2, 4, 2, 264, F32, 7, 0, 2, 0, 0, 0, 2, E4M3, 0, 0},
    /* bf16 models' scores with q heads in lanes: quads in pairs and alone, fp8 keys staged from a
   * partial 64-value block */
    {"bs16_hd64_gqa12_bf16", 2, 12, 1, 64, BF16, 16, 0, 2, 0, 0, 0, 3, 0, 0, 0},
    {"bs7_hd96_gqa8_bf16_e4m3", 2, 16, 2, 96, BF16, 7, 0, 2, 0, 0, 0, 3, E4M3, 0, 0},
    /* MLA (kv_layout MLA, the last field kv_lora_rank): one latent of kv_lora_rank + rope values
   * per token, every q head over it, out kv_lora_rank wide; DeepSeek's shape (512 + 64, scale
   * 1/sqrt(192)) with 16 heads, 128 heads over tp 2, and small latents */
    {"mla_bs16_r512_h16_bf16", 2, 16, 1, 576, BF16, 16, 0, 2, 0, 0, 0.0722f, 2, 0, 0, 512},
    {"mla_bs64_r512_h128_bf16_tp2", 2, 128, 1, 576, BF16, 64, 0, 2, 2, 1, 0.0722f, 2, 0, 0, 512},
    {"mla_bs1_r64_h8_f32", 2, 8, 1, 80, F32, 1, 0, 2, 0, 0, 0.125f, 3, 0, 0, 64},
    {"mla_bs7_r128_h4_f16_e4m3", 2, 4, 1, 160, F16, 7, 0, 2, 0, 0, 0.1f, 3, E4M3, 0, 128},
    {"mla_bs16_r512_h16_bf16_e5m2", 2, 16, 1, 576, BF16, 16, 0, 2, 0, 0, 0.0722f, 2, E5M2, 0, 512},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0] };

static uint64_t cow_copies(kw_world *w) {
  pkv_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(pkv_engine_stats(w->e, &s));
  return s.num_cow_copies;
}

static int32_t fresh(kw_world *w, uint32_t i) {
  return kw_token(w->c.block_size * 7919u + w->c.head_dim, 100000 + i);
}

static void append1(kw_world *w, int s, uint32_t i) {
  const int32_t t = fresh(w, i);
  kw_append(w, s, &t, 1);
}

static void release_all(kw_world *w) {
  for (int s = 0; s < KW_MAX_SEQS; s++)
    if (w->seqs[s].id) kw_release(w, s);
  kw_free(w);
}

/* The story; see the top of the file. */
static void run_config(const kw_config *c) {
  kw_config cc = *c;
  const uint32_t bs = c->block_size;
  cc.num_blocks = 4000 / bs + 64;
  kw_world w;
  if (!kw_init(&w, &cc)) return;
  const uint64_t seed = bs * 1000003ull + c->head_dim * 31ull + (uint64_t)c->dtype;
  int32_t t[1024];
  uint32_t cached = 99;

  /* A: a prompt in two chunks. */
  const uint32_t la = 3 * bs + 4 > 29 ? 3 * bs + 4 : 29;
  kw_tokens(t, la, seed);
  const int a = kw_alloc(&w, t, la, &cached);
  CHECK(cached == 0);
  const uint32_t chunk = la / 2 + 1;
  kw_step(&w, &a, &chunk, 1, 0);
  kw_step(&w, &a, NULL, 1, 0);

  /* B: A's first 2*bs + 1 tokens and its own: a prefix hit on A's sealed blocks.
   * C: 600 tokens of its own, prefilled in chunks of 200, 180 and the rest. */
  const uint32_t shared = 2 * bs + 1;
  kw_tokens(t + shared, 20, seed + 1);
  const int bq = kw_alloc(&w, t, shared + 20, &cached);
  CHECK(cached == shared / bs * bs && cached > 0);
  kw_tokens(t, 600, seed + 2);
  const int cq = kw_alloc(&w, t, 600, &cached);
  CHECK(cached == 0);

  /* Mixed: A decodes, B prefills after its hit, C's first chunk. */
  append1(&w, a, 0);
  {
    const int s[3] = {a, bq, cq};
    const uint32_t n[3] = {1, w.seqs[bq].num_tokens - w.seqs[bq].num_computed, 200};
    kw_step(&w, s, n, 3, 0);
  }
  append1(&w, a, 1);
  append1(&w, bq, 2);
  {
    const int s[3] = {cq, a, bq};
    const uint32_t n[3] = {180, 1, 1};
    kw_step(&w, s, n, 3, 0);
  }

  /* Fork A, then both append a different token: the shared partial last block is copied. */
  const int f = kw_fork(&w, a);
  if (f < 0) {
    release_all(&w);
    return;
  }
  const uint64_t copies0 = cow_copies(&w);
  append1(&w, a, 3);
  append1(&w, f, 4);
  CHECK(cow_copies(&w) == copies0 + ((w.seqs[a].num_tokens - 1) % bs ? 1u : 0u));
  {
    const int s[3] = {f, a, cq};
    kw_step(&w, s, NULL, 3, KW_REVERSE_LAYERS);
  }

  /* Decodes of everything live, once calling every layer twice. */
  for (uint32_t step = 0; step < 3; step++) {
    const int s[4] = {a, f, bq, cq};
    for (int i = 0; i < 4; i++) append1(&w, s[i], 10 + step * 4 + (uint32_t)i);
    kw_step(&w, s, NULL, 4, step == 1 ? KW_TWICE : 0);
  }

  /* E: B's tokens and more after B is released (a hit on cached blocks); G: a hit on the live
   * C's blocks. Both prefill in one batch with A's decode. */
  const uint32_t lb = w.seqs[bq].num_tokens;
  memcpy(t, w.seqs[bq].tokens, lb * sizeof t[0]);
  kw_release(&w, bq);
  kw_tokens(t + lb, 10, seed + 3);
  const int e = kw_alloc(&w, t, lb + 10, &cached);
  CHECK(cached == lb / bs * bs && cached > 0);
  memcpy(t, w.seqs[cq].tokens, 300 * sizeof t[0]);
  kw_tokens(t + 300, 5, seed + 4);
  const int g = kw_alloc(&w, t, 305, &cached);
  CHECK(cached == 300 / bs * bs);
  append1(&w, a, 30);
  {
    const int s[3] = {e, g, a};
    kw_step(&w, s, NULL, 3, 0);
  }

  /* F is preempted with a token pending and resumed: recompute of what the cache lost. */
  append1(&w, f, 31);
  if (kw_preempt(&w, f) && kw_resume(&w, f, &cached)) {
    CHECK(cached > 0 && cached < w.seqs[f].num_tokens);
    const int s[2] = {f, cq};
    append1(&w, cq, 32);
    kw_step(&w, s, NULL, 2, 0);
  }
  release_all(&w);
}

int main(int argc, char **argv) { return kw_main(argc, argv, configs, NUM_CONFIGS, run_config); }
