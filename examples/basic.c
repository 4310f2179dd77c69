/*
 * basic.c - pkv in one page: a host admits two prompts that share a system prompt, prefills
 * them, decodes a few steps, forks one sequence (copy-on-write), and releases everything.
 * No attention is computed here: a real host runs its model between pkv_batch_begin and
 * pkv_batch_end, using the batch's slot mapping and block tables.
 *
 * Build: meson setup build && ninja -C build; run: build/examples/basic
 */
#include <stdio.h>

#include <pkv/pkv.h>

/* Every pkv call returns a status; on failure say which call, why, and stop. */
#define CHECK(e, call)                                                     \
  do {                                                                     \
    pkv_status s_ = (call);                                                \
    if (s_ != PKV_OK) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, pkv_status_string(s_), \
              pkv_engine_last_error(e));                                   \
      return 1;                                                            \
    }                                                                      \
  } while (0)

/* Prints a sequence's block table: the physical blocks holding its tokens, in order. */
static int print_blocks(pkv_engine *e, const char *name, uint64_t seq) {
  int32_t blocks[16];
  uint32_t n = 0;
  CHECK(e, pkv_seq_block_table(e, seq, blocks, 16, &n));
  printf("  %s's block table:", name);
  for (uint32_t i = 0; i < n; i++) printf(" %d", blocks[i]);
  printf("\n");
  return 0;
}

/* Prints a batch: which tokens go to which KV slot (block * block_size + offset), and copies. */
static int run_step(pkv_engine *e, const char *title, const uint64_t *seqs, uint32_t num_seqs) {
  pkv_batch *b = NULL;
  pkv_batch_view v = {.struct_size = sizeof v};
  CHECK(e, pkv_batch_begin(e, seqs, NULL, num_seqs, &b)); /* NULL: all uncomputed tokens */
  CHECK(e, pkv_batch_info(b, &v));
  printf("%s: %u sequence(s), %u new token(s)\n", title, v.num_seqs, v.num_tokens);
  for (uint32_t t = 0; t < v.num_tokens && t < 4; t++)
    printf("  row %u: position %d -> slot %lld (block %lld, offset %lld)\n", t, v.positions[t],
           (long long)v.slot_mapping[t], (long long)v.slot_mapping[t] / v.block_size,
           (long long)v.slot_mapping[t] % v.block_size);
  for (uint32_t c = 0; c < v.num_copies; c++)
    printf("  copy-on-write: block %d -> block %d before the step writes\n", v.copy_src[c],
           v.copy_dst[c]);
  /* ... the model's forward pass would run here, layer by layer ... */
  CHECK(e, pkv_batch_end(b)); /* the tokens are computed now; full blocks join the cache */
  return 0;
}

int main(void) {
  pkv_engine_params p;
  CHECK(NULL, pkv_engine_params_init(&p, sizeof p));
  p.num_layers = 2; /* a toy model: 2 layers, 8 query heads sharing 2 KV heads of 64 */
  p.num_q_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.block_size = 4; /* tiny blocks so the output stays short */
  p.num_blocks = 64;
  p.max_model_len = 256;
  p.device = PKV_DEVICE_CPU;
  pkv_engine *e = NULL;
  CHECK(NULL, pkv_engine_create(&p, &e));
  uint32_t ver = pkv_version();
  printf("pkv %u.%u.%u: engine with %u blocks of %u tokens\n", ver / 10000, ver / 100 % 100,
         ver % 100, p.num_blocks, p.block_size);

  /* Two chat requests: the same 8-token system prompt (two blocks), different questions. */
  int32_t prompt_a[] = {1, 2, 3, 4, 5, 6, 7, 8, 101, 102, 103};
  int32_t prompt_b[] = {1, 2, 3, 4, 5, 6, 7, 8, 201, 202};
  uint64_t a = 0, b = 0;
  uint32_t cached = 0;
  CHECK(e, pkv_allocate(e, prompt_a, 11, NULL, &a, &cached));
  printf("admitted A (11 tokens): %u cached\n", cached);
  if (run_step(e, "prefill A", &a, 1)) return 1;
  CHECK(e, pkv_allocate(e, prompt_b, 10, NULL, &b, &cached)); /* A's sealed blocks are hits */
  printf("admitted B (10 tokens): %u cached, only %u to compute\n", cached, 10 - cached);
  if (print_blocks(e, "A", a) || print_blocks(e, "B", b)) return 1; /* blocks 0, 1 shared */
  if (run_step(e, "prefill B", &b, 1)) return 1;

  /* Decode: the host samples a token per sequence, pkv reserves its slot, the step computes it. */
  uint64_t both[2] = {a, b};
  for (int step = 0; step < 3; step++) {
    int32_t next_a = 300 + step, next_b = 400 + step;
    CHECK(e, pkv_append(e, a, &next_a, 1));
    CHECK(e, pkv_append(e, b, &next_b, 1));
    if (run_step(e, "decode", both, 2)) return 1;
  }

  /* Parallel sampling: fork A. The child shares every block; its first append copies the shared,
   * partly filled last block (A has 14 tokens: 3 full blocks and 2 tokens in the fourth). */
  uint64_t child = 0;
  CHECK(e, pkv_fork(e, a, &child));
  int32_t next_child = 500;
  CHECK(e, pkv_append(e, child, &next_child, 1));
  if (run_step(e, "decode of the fork", &child, 1)) return 1;
  if (print_blocks(e, "A", a) || print_blocks(e, "child", child)) return 1;

  CHECK(e, pkv_release(e, a));
  CHECK(e, pkv_release(e, b));
  CHECK(e, pkv_release(e, child));
  pkv_stats st = {.struct_size = sizeof st};
  CHECK(e, pkv_engine_stats(e, &st));
  printf("stats: %llu blocks: %llu free (%llu of them cached), %llu used; prefix hits %llu of "
         "%llu tokens; %llu copy-on-write copies\n",
         (unsigned long long)st.num_blocks, (unsigned long long)st.num_free_blocks,
         (unsigned long long)st.num_cached_blocks, (unsigned long long)st.num_used_blocks,
         (unsigned long long)st.prefix_hit_tokens, (unsigned long long)st.prefix_query_tokens,
         (unsigned long long)st.num_cow_copies);
  pkv_engine_destroy(e);
  return 0;
}
