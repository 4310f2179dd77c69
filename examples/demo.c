/*
 * demo.c - the job every binding's example repeats, step for step (bindings/DEMO.md): load pkv,
 * create a CPU engine, admit three requests sharing a system prompt, prefill and decode them
 * with pkv_attention on small random q/k/v, fork one sequence (copy-on-write), release
 * everything, print the stats. Same seed, same output, in every language.
 *
 * Usage: demo [seed]   (default 42)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

enum {
  LAYERS = 2,
  Q_HEADS = 4,
  KV_HEADS = 2,
  HEAD_DIM = 16,
  SYSTEM_LEN = 32,
  REQUESTS = 3,
  DECODE_STEPS = 4,
  MAX_TOKENS = 64
};

#define CHECK(e, call)                                                     \
  do {                                                                     \
    pkv_status s_ = (call);                                                \
    if (s_ != PKV_OK) {                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, pkv_status_string(s_), \
              pkv_engine_last_error(e));                                   \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

/* splitmix64: the demo's only source of randomness, easy to repeat in any language. */
static uint64_t rng_state;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int32_t next_token(void) { return (int32_t)(next_u64() % 1000); }
static float next_value(void) { return (float)(next_u64() >> 40) / 16777216.0f - 0.5f; }

/* One step over seqs: random q/k/v for every new token, pkv_attention on every layer. Returns
 * the sum of all outputs (a checksum the bindings print with 6 significant digits). */
static double step(pkv_engine *e, const uint64_t *seqs, uint32_t n) {
  pkv_batch *b;
  pkv_batch_view v = {.struct_size = sizeof v};
  CHECK(e, pkv_batch_begin(e, seqs, NULL, n, &b));
  CHECK(e, pkv_batch_info(b, &v));
  const size_t q_len = (size_t)v.num_tokens * Q_HEADS * HEAD_DIM;
  const size_t kv_len = (size_t)v.num_tokens * KV_HEADS * HEAD_DIM;
  float *q = malloc(q_len * sizeof *q), *k = malloc(kv_len * sizeof *k);
  float *val = malloc(kv_len * sizeof *val), *out = malloc(q_len * sizeof *out);
  double sum = 0;
  for (uint32_t layer = 0; layer < LAYERS; layer++) {
    for (size_t i = 0; i < q_len; i++) q[i] = next_value();
    for (size_t i = 0; i < kv_len; i++) k[i] = next_value();
    for (size_t i = 0; i < kv_len; i++) val[i] = next_value();
    CHECK(e, pkv_attention(b, layer, q, k, val, out));
    for (size_t i = 0; i < q_len; i++) sum += out[i];
  }
  CHECK(e, pkv_batch_end(b));
  free(q);
  free(k);
  free(val);
  free(out);
  return sum;
}

int main(int argc, char **argv) {
  rng_state = argc > 1 ? strtoull(argv[1], NULL, 10) : 42;
  if (pkv_abi_version() != PKV_ABI_VERSION) {
    fprintf(stderr, "libpkv ABI %u, this program needs %d\n", pkv_abi_version(), PKV_ABI_VERSION);
    return 1;
  }
  pkv_engine_params p;
  CHECK(NULL, pkv_engine_params_init(&p, sizeof p));
  p.num_layers = LAYERS;
  p.num_q_heads = Q_HEADS;
  p.num_kv_heads = KV_HEADS;
  p.head_dim = HEAD_DIM;
  p.dtype = PKV_DTYPE_F32;
  p.block_size = 16;
  p.num_blocks = 64;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = 1;
  pkv_engine *e;
  CHECK(NULL, pkv_engine_create(&p, &e));
  printf("pkv %u abi %u\n", pkv_version(), pkv_abi_version());

  int32_t system[SYSTEM_LEN], tokens[MAX_TOKENS];
  for (int i = 0; i < SYSTEM_LEN; i++) system[i] = next_token();
  uint64_t seqs[REQUESTS + 1];
  double checksum = 0;
  printf("cached tokens:");
  for (int r = 0; r < REQUESTS; r++) {
    uint32_t len = SYSTEM_LEN + 5 + (uint32_t)(next_u64() % 10), cached = 0;
    memcpy(tokens, system, sizeof system);
    for (uint32_t i = SYSTEM_LEN; i < len; i++) tokens[i] = next_token();
    CHECK(e, pkv_allocate(e, tokens, len, NULL, &seqs[r], &cached));
    printf(" %u", cached);
    checksum += step(e, &seqs[r], 1); /* prefill */
  }
  printf("\n");
  for (int s = 0; s < DECODE_STEPS; s++) {
    for (int r = 0; r < REQUESTS; r++) {
      int32_t t = next_token();
      CHECK(e, pkv_append(e, seqs[r], &t, 1));
    }
    checksum += step(e, seqs, REQUESTS);
  }
  CHECK(e, pkv_fork(e, seqs[0], &seqs[REQUESTS]));
  int32_t t = next_token();
  CHECK(e, pkv_append(e, seqs[REQUESTS], &t, 1));
  checksum += step(e, &seqs[REQUESTS], 1);

  pkv_stats st = {.struct_size = sizeof st};
  CHECK(e, pkv_engine_stats(e, &st));
  printf("prefix: %llu of %llu tokens cached\n", (unsigned long long)st.prefix_hit_tokens,
         (unsigned long long)st.prefix_query_tokens);
  printf("blocks used: %llu of %llu, copy-on-write copies: %llu\n",
         (unsigned long long)st.num_used_blocks, (unsigned long long)st.num_blocks,
         (unsigned long long)st.num_cow_copies);
  printf("attention checksum: %.6g\n", checksum);
  for (int r = 0; r <= REQUESTS; r++) CHECK(e, pkv_release(e, seqs[r]));
  CHECK(e, pkv_engine_stats(e, &st));
  printf("after release: %llu blocks free, %llu of them cached\n",
         (unsigned long long)st.num_free_blocks, (unsigned long long)st.num_cached_blocks);
  pkv_engine_destroy(e);
  return 0;
}
