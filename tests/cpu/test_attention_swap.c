/* Swapping under pkv_attention, against the fp64 reference: sequences computed by pkv_attention,
 * a forked pair (and one with tokens not yet computed) swapped out to the host tier, another
 * prompt prefilled into every freed pool block (its K/V overwrite theirs), the pair swapped back
 * in, and decodes over the whole context checked against the reference (every layer's output
 * depends on every K/V row of the context) and the context's K/V read back from the pool byte for
 * byte. The copies are done by pkv_batch_copy in one step, by the first pkv_attention (layers
 * last to first) in the other; a sequence swapped back in before its copies ran (it takes its
 * pool blocks back) decodes too. Last, a prompt whose blocks were offloaded hits the host tier
 * and its loaded KV is attended over (host_tier_hit).
 *
 * Usage: test_attention_swap [CONFIG]   (no argument: every config) */
#include <string.h>

#include "kv_world.h"

enum { F32 = PKV_DTYPE_F32, F16 = PKV_DTYPE_F16, BF16 = PKV_DTYPE_BF16, POOL = 24, HOST = 16 };

/* name, layers, q heads, kv heads, head_dim, dtype, block size, blocks, threads, tp, rank,
 * softmax scale, q amplitude, kv dtype, window, kv_lora_rank (MLA); a host tier of HOST blocks */
static const kw_config configs[] = {
    {"swap_bs7_hd80_gqa4_bf16", 2, 8, 2, 80, BF16, 7, POOL, 2, 0, 0, 0, 3, 0, 0, 0},
    {"swap_bs16_hd128_gqa4_bf16", 2, 8, 2, 128, BF16, 16, POOL, 2, 0, 0, 0, 3, 0, 0, 0},
    {"swap_bs7_hd64_gqa8_f16", 3, 8, 1, 64, F16, 7, POOL, 1, 0, 0, 0, 4, 0, 0, 0},
    {"swap_bs16_hd72_gqa4_f16", 2, 8, 2, 72, F16, 16, POOL, 2, 0, 0, 0, 3, 0, 0, 0},
    {"swap_bs7_hd128_gqa1_f32", 2, 2, 2, 128, F32, 7, POOL, 2, 0, 0, 0, 3, 0, 0, 0},
    {"swap_bs16_hd64_gqa4_f32", 2, 8, 2, 64, F32, 16, POOL, 3, 0, 0, 0, 5, 0, 0, 0},
    {"swap_bs7_hd64_gqa4_bf16_e4m3", 2, 8, 2, 64, BF16, 7, POOL, 2, 0, 0, 0, 3, PKV_DTYPE_FP8_E4M3,
     0, 0},
    {"swap_bs16_hd128_gqa4_f32_e5m2", 2, 8, 2, 128, F32, 16, POOL, 2, 0, 0, 0, 3,
     PKV_DTYPE_FP8_E5M2, 0, 0},
    /* MLA: the host tier holds latents alone */
    {"swap_mla_bs7_r128_h8_bf16", 2, 8, 1, 160, BF16, 7, POOL, 2, 0, 0, 0.1f, 3, 0, 0, 128},
    {"swap_mla_bs16_r64_h4_f32_e4m3", 2, 4, 1, 80, F32, 16, POOL, 2, 0, 0, 0.1f, 3,
     PKV_DTYPE_FP8_E4M3, 0, 64},
};
enum { NUM_CONFIGS = sizeof configs / sizeof configs[0], MAX_BLOCKS = 64 };

static pkv_stats stats(kw_world *w) {
  pkv_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  CHECK_OK(pkv_engine_stats(w->e, &s));
  return s;
}

static struct pkv_seq_info info(kw_world *w, int s) {
  struct pkv_seq_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_seq_info(w->e, w->seqs[s].id, &in));
  return in;
}

static uint32_t table(kw_world *w, int s, int32_t *out) {
  uint32_t n = 0;
  CHECK_OK(pkv_seq_block_table(w->e, w->seqs[s].id, out, MAX_BLOCKS, &n));
  return n;
}

static void append1(kw_world *w, int s, uint32_t i) {
  const int32_t t = kw_token(w->c.block_size * 31u + w->c.head_dim, 7000 + i);
  kw_append(w, s, &t, 1);
}

/* Adds s's blocks to set[0..*n) (distinct). */
static void add_blocks(kw_world *w, int s, int32_t *set, uint32_t *n) {
  int32_t t[MAX_BLOCKS];
  const uint32_t len = table(w, s, t);
  for (uint32_t i = 0; i < len; i++) {
    uint32_t k = 0;
    while (k < *n && set[k] != t[i]) k++;
    if (k == *n) set[(*n)++] = t[i];
  }
}

/* Every computed token of s: its K and V rows in the pool, on every layer, are the ones the test
 * generates from its tokens, byte for byte. */
static void check_context(kw_world *w, int s, const char *when) {
  const kw_seq *q = &w->seqs[s];
  const struct pkv_pool_info p = kw_pool(w);
  int32_t t[MAX_BLOCKS];
  const uint32_t n = table(w, s, t);
  const size_t row = (size_t)w->kv_heads * w->c.head_dim * w->kv_elt;
  unsigned char gen[4 * 8 * 256], want[2][4 * 8 * 256]; /* MLA: one latent of at most 640 */
  uint32_t bad = 0;
  for (uint32_t pos = 0; pos < q->num_computed && CHECK(pos / w->c.block_size < n); pos++)
    for (uint32_t l = 0; l < w->c.num_layers; l++) {
      const uint64_t slot =
          (uint64_t)t[pos / w->c.block_size] * w->c.block_size + pos % w->c.block_size;
      const size_t at = (l * p.layer_stride + slot * p.token_stride) * w->kv_elt;
      kw_gen_row(w, q->prefix[pos], l, 1, gen, NULL);
      kw_cache_row(w, l, 1, gen, want[0], NULL);
      int differs = memcmp((const char *)p.k_base + at, want[0], row) != 0;
      if (!w->mla) { /* MLA: the latent alone */
        kw_gen_row(w, q->prefix[pos], l, 2, gen, NULL);
        kw_cache_row(w, l, 2, gen, want[1], NULL);
        differs |= memcmp((const char *)p.v_base + at, want[1], row) != 0;
      }
      if (differs)
        if (bad++ < 3)
          fprintf(stderr, "  %s: seq slot %d pos %u layer %u: K/V differ from its tokens'\n", when,
                  s, pos, l);
    }
  CHECK(bad == 0);
}

static void swap_out(kw_world *w, int s) {
  if (CHECK_OK(pkv_swap_out(w->e, w->seqs[s].id))) CHECK(info(w, s).kv_tier == PKV_TIER_HOST);
}

static void swap_in(kw_world *w, int s) {
  if (CHECK_OK(pkv_swap_in(w->e, w->seqs[s].id)))
    CHECK(info(w, s).kv_tier == PKV_TIER_DEVICE &&
          info(w, s).num_computed_tokens == w->seqs[s].num_computed);
}

/* kw_step's hook: pkv_batch_copy does the step's copies, all of them swap-outs. */
static uint32_t copied;
static void copy_first(kw_world *w, pkv_batch *b, const void *q, const void *k, const void *v,
                       void *out) {
  (void)q, (void)k, (void)v, (void)out;
  pkv_batch_view view;
  memset(&view, 0, sizeof view);
  view.struct_size = sizeof view;
  CHECK_OK(pkv_batch_info(b, &view));
  for (uint32_t i = 0; i < view.num_copies; i++) CHECK(view.copy_kind[i] == PKV_COPY_SWAP_OUT);
  copied = view.num_copies;
  CHECK_OK(pkv_batch_copy(b));
  w->on_batch = NULL;
}

/* Offload and a host-tier hit: D's prompt is computed and released, E's prompt takes every pool
 * block (D's blocks are offloaded, their copies done by E's first pkv_attention, and E's prefill
 * overwrites them), and D's prompt again hits the host tier: its blocks are loaded back (the
 * copies done by its first pkv_attention), its last tokens and decodes attend over them against
 * the reference, and its context reads back byte for byte. */
static void host_tier_hit(kw_world *w, uint64_t seed) {
  const uint32_t bs = w->c.block_size, ld = 3 * bs + 2;
  int32_t td[4 * MAX_BLOCKS], t[MAX_BLOCKS * 32];
  kw_tokens(td, ld, seed + 5);
  int d = kw_alloc(w, td, ld, NULL);
  if (d < 0) return;
  kw_step(w, &d, NULL, 1, 0);
  kw_release(w, d);
  const pkv_stats st0 = stats(w);
  const uint32_t all = (uint32_t)st0.num_free_blocks;
  kw_tokens(t, all * bs, seed + 6);
  const int e = kw_alloc(w, t, all * bs, NULL);
  if (e < 0) return;
  const pkv_stats st1 = stats(w);
  CHECK(st1.num_offloaded_blocks - st0.num_offloaded_blocks >= 3);
  kw_step(w, &e, NULL, 1, KW_REVERSE_LAYERS);
  kw_release(w, e);
  uint32_t cached = 0;
  d = kw_alloc(w, td, ld, &cached);
  if (d < 0) return;
  const pkv_stats st2 = stats(w);
  CHECK(cached == 3 * bs);
  CHECK(st2.host_hit_tokens - st1.host_hit_tokens == 3 * bs &&
        st2.num_loaded_blocks - st1.num_loaded_blocks == 3);
  kw_step(w, &d, NULL, 1, 0);
  check_context(w, d, "after a host-tier hit");
  for (uint32_t i = 0; i < 2; i++) {
    append1(w, d, 90 + i);
    kw_step(w, &d, NULL, 1, 0);
  }
  check_context(w, d, "decoding after a host-tier hit");
  kw_release(w, d);
}

static void run_config(const kw_config *c) {
  kw_world w;
  if (!kw_init_host(&w, c, HOST)) return;
  const uint32_t bs = c->block_size;
  int32_t t[MAX_BLOCKS * 32];
  const uint64_t seed = bs * 7919ull + c->head_dim * 13ull + (uint64_t)c->dtype;

  /* A: a prompt in two chunks, B: a short one; both decode twice. */
  const uint32_t la = 3 * bs + 4, lb = 2 * bs + 3;
  kw_tokens(t, la, seed);
  const int a = kw_alloc(&w, t, la, NULL);
  kw_tokens(t, lb, seed + 1);
  const int b = kw_alloc(&w, t, lb, NULL);
  if (a < 0 || b < 0) {
    kw_free(&w);
    return;
  }
  const uint32_t chunk = la / 2 + 1;
  kw_step(&w, &a, &chunk, 1, 0);
  {
    const int s[2] = {a, b};
    kw_step(&w, s, NULL, 2, 0);
    for (uint32_t i = 0; i < 2; i++) {
      append1(&w, a, i);
      append1(&w, b, 10 + i);
      kw_step(&w, s, NULL, 2, 0);
    }
  }
  /* F: a fork of A; both decode (the shared partial last block is copied), then A gets 3 more
   * tokens that no step computes before the swap. */
  const int f = kw_fork(&w, a);
  if (f < 0) {
    kw_free(&w);
    return;
  }
  append1(&w, a, 20);
  append1(&w, f, 21);
  {
    const int s[2] = {f, a};
    kw_step(&w, s, NULL, 2, 0);
  }
  for (uint32_t i = 0; i < 3; i++) append1(&w, a, 30 + i);

  /* Both out: their shared blocks move once. */
  int32_t moved[MAX_BLOCKS];
  uint32_t num_moved = 0;
  add_blocks(&w, a, moved, &num_moved);
  add_blocks(&w, f, moved, &num_moved);
  const pkv_stats st0 = stats(&w);
  swap_out(&w, a);
  swap_out(&w, f);
  const pkv_stats st1 = stats(&w);
  CHECK(st1.num_swapped_out_blocks - st0.num_swapped_out_blocks == num_moved);
  CHECK(st1.num_swapped_seqs == 2 && st1.num_host_free_blocks == HOST - num_moved);
  CHECK(info(&w, a).num_host_blocks + info(&w, f).num_host_blocks > num_moved); /* shared */

  /* B decodes: its step does the swap-out copies (pkv_batch_copy); then C's prompt takes every
   * free pool block, A's and F's among them, and its prefill overwrites them. */
  append1(&w, b, 40);
  w.on_batch = copy_first;
  kw_step(&w, &b, NULL, 1, 0);
  CHECK(copied == num_moved);
  const uint32_t free_blocks = (uint32_t)stats(&w).num_free_blocks;
  kw_tokens(t, free_blocks * bs, seed + 2);
  uint32_t cached = 99;
  const int cq = kw_alloc(&w, t, free_blocks * bs, &cached);
  if (cq < 0) {
    kw_free(&w);
    return;
  }
  int32_t taken[MAX_BLOCKS];
  uint32_t num_taken = 0;
  add_blocks(&w, cq, taken, &num_taken);
  CHECK(cached == 0 && num_taken == free_blocks);
  int32_t both[2 * MAX_BLOCKS];
  uint32_t num_both = num_moved;
  memcpy(both, moved, num_moved * sizeof moved[0]);
  add_blocks(&w, cq, both, &num_both);
  CHECK(num_both == num_taken); /* A's and F's old blocks are all C's */
  const uint32_t half = free_blocks * bs / 2;
  kw_step(&w, &cq, &half, 1, 0);
  kw_step(&w, &cq, NULL, 1, 0);
  kw_release(&w, cq);

  /* Back in, F first: A's blocks shared with F come back once. A's first step computes its 3
   * pending tokens, the copies done by its first pkv_attention (layers last to first). */
  const pkv_stats st2 = stats(&w);
  swap_in(&w, f);
  swap_in(&w, a);
  CHECK(stats(&w).num_swapped_in_blocks - st2.num_swapped_in_blocks == num_moved);
  kw_step(&w, &a, NULL, 1, KW_REVERSE_LAYERS);
  check_context(&w, a, "after swap-in");
  check_context(&w, f, "after swap-in");
  for (uint32_t i = 0; i < 3; i++) {
    const int s[3] = {a, f, b};
    append1(&w, a, 50 + i);
    append1(&w, f, 60 + i);
    append1(&w, b, 70 + i);
    kw_step(&w, s, NULL, 3, i == 1 ? KW_TWICE : 0);
  }

  /* B out and straight back in, before a step did its copies: it takes its pool blocks back. */
  swap_out(&w, b);
  swap_in(&w, b);
  append1(&w, b, 80);
  {
    const int s[2] = {b, a};
    append1(&w, a, 81);
    kw_step(&w, s, NULL, 2, 0);
  }
  check_context(&w, b, "swapped back before its copies");
  check_context(&w, a, "at the end");
  kw_release(&w, a);
  kw_release(&w, f);
  kw_release(&w, b);
  const pkv_stats end = stats(&w);
  CHECK(end.num_used_blocks == 0 && end.num_host_free_blocks == HOST && end.num_swapped_seqs == 0);
  host_tier_hit(&w, seed);
  kw_free(&w);
}

int main(int argc, char **argv) { return kw_main(argc, argv, configs, NUM_CONFIGS, run_config); }
