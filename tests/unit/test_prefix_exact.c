/* Hits are exact even when every lookup hash collides (PKV_DEBUG_CONSTANT_HASH): the cached
 * tokens of each new prompt equal the longest common full-block prefix with an earlier prompt of
 * the same salt, computed here, and its blocks are that prompt's blocks. */
#include "test_util.h"

enum { BS = 4, MAX_BLOCKS = 6, MAX_LEN = MAX_BLOCKS * BS + 3, NUM_PROMPTS = 300 };

typedef struct {
  int32_t tokens[MAX_LEN];
  uint32_t len;
  int salt;
  int32_t table[MAX_BLOCKS + 1];
} prompt;

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Blocks drawn from 4 patterns that differ in one token, so hashes alone could never tell. */
static void make_prompt(prompt *p, uint64_t *rng) {
  static const int32_t patterns[4][BS] = {{7, 7, 7, 0}, {7, 7, 7, 1}, {0, 7, 7, 7}, {7, 0, 7, 7}};
  uint32_t nb = (uint32_t)(rng_next(rng) % (MAX_BLOCKS + 1));
  uint32_t tail = (uint32_t)(rng_next(rng) % 4);
  if (nb == 0 && tail == 0) tail = 1;
  p->len = 0;
  for (uint32_t b = 0; b < nb; b++)
    for (uint32_t i = 0; i < BS; i++) p->tokens[p->len++] = patterns[rng_next(rng) % 4][i];
  for (uint32_t i = 0; i < tail; i++) p->tokens[p->len++] = 7 + (int32_t)(rng_next(rng) % 2);
  p->salt = (int)(rng_next(rng) % 2);
}

/* Leading full blocks a and b have in common. */
static uint32_t common_blocks(const prompt *a, const prompt *b) {
  uint32_t n = 0;
  while ((n + 1) * BS <= a->len && (n + 1) * BS <= b->len &&
         memcmp(a->tokens + n * BS, b->tokens + n * BS, BS * sizeof(int32_t)) == 0)
    n++;
  return n;
}

static uint32_t num_blocks(const prompt *p) { return (p->len + BS - 1) / BS; }

/* Every prompt stays alive, so a block not served by the cache must be new to all of them. */
static int block_used_before(const prompt *ps, uint32_t k, int32_t block) {
  for (uint32_t j = 0; j < k; j++)
    for (uint32_t i = 0; i < num_blocks(&ps[j]); i++)
      if (ps[j].table[i] == block) return 1;
  return 0;
}

/* Is block i of prompt k the block i of an earlier prompt with the same first i+1 blocks? (Such a
 * block may have several copies - a recomputed last block - so any of them will do.) */
static int shares_block(const prompt *ps, uint32_t k, uint32_t i) {
  for (uint32_t j = 0; j < k; j++)
    if (ps[j].salt == ps[k].salt && common_blocks(&ps[j], &ps[k]) > i &&
        ps[j].table[i] == ps[k].table[i])
      return 1;
  return 0;
}

/* Checks prompt k against every earlier one; returns the expected cached tokens. */
static uint32_t check_hit(const prompt *ps, uint32_t k, uint32_t cached) {
  uint32_t best = 0;
  for (uint32_t j = 0; j < k; j++) {
    uint32_t c = ps[j].salt == ps[k].salt ? common_blocks(&ps[j], &ps[k]) : 0;
    if (c > best) best = c;
  }
  uint32_t cap = (ps[k].len - 1) / BS;
  if (best > cap) best = cap;
  if (!CHECK_EQ_INT(cached, best * BS))
    fprintf(stderr, "  prompt %u (len %u, salt %d)\n", k, ps[k].len, ps[k].salt);
  for (uint32_t i = 0; i < best; i++) CHECK(shares_block(ps, k, i));
  for (uint32_t i = best; i < num_blocks(&ps[k]); i++)
    CHECK(!block_used_before(ps, k, ps[k].table[i]));
  return best * BS;
}

static void run(uint32_t debug_flags, uint64_t seed) {
  pkv_engine *e = tu_engine(BS, NUM_PROMPTS * (MAX_BLOCKS + 1), debug_flags);
  if (!e) return;
  prompt *ps = calloc(NUM_PROMPTS, sizeof *ps);
  uint64_t rng = seed, expected_hits = 0;
  for (uint32_t k = 0; k < NUM_PROMPTS && ps; k++) {
    make_prompt(&ps[k], &rng);
    uint32_t cached = 99;
    uint64_t seq = tu_alloc_salt(e, ps[k].tokens, ps[k].len, ps[k].salt ? "s" : NULL, &cached);
    if (!seq) break;
    tu_table(e, seq, ps[k].table, MAX_BLOCKS + 1);
    expected_hits += check_hit(ps, k, cached);
    tu_compute1(e, seq);
  }
  CHECK_EQ_INT(tu_stats(e).prefix_hit_tokens, expected_hits);
  CHECK(expected_hits > 0);
  CHECK_ENGINE(e);
  free(ps);
  pkv_engine_destroy(e);
}

static void test_exact_with_constant_hash(void) {
  run(PKV_DEBUG_CONSTANT_HASH, 0x9e3779b97f4a7c15ull);
  run(PKV_DEBUG_CONSTANT_HASH, 12345);
}

static void test_exact_with_real_hash(void) { run(0, 0x9e3779b97f4a7c15ull); }

int main(void) {
  TU_RUN(test_exact_with_constant_hash);
  TU_RUN(test_exact_with_real_hash);
  return tu_summary();
}
