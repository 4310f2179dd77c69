/* pkv_engine_params.layer_specs (DESIGN.md §12) through pkv.h: specs that say what the flat fields
 * say give the same budget, groups and pool; the bytes of gpt-oss-, Gemma-4- and Llama-4-like
 * spec lists, computed by hand here; the page chosen for unequal layers and what it wastes
 * (pkv_kv_budget, pkv_kv_group_info); every bad spec refused, naming the layer and field. */
#include "test_util.h"

#define MAX_LAYERS 64

static pkv_layer_spec specs_[MAX_LAYERS];

/* bf16 params of `layers` layers whose specs (all zeros: the flat layer) are specs_, a fixed
 * pool of 64 blocks of 16 tokens. */
static void spec_params(pkv_engine_params *p, uint32_t layers, uint32_t q_heads, uint32_t kv_heads,
                        uint32_t head_dim) {
  tu_params(p, 16, 64);
  p->dtype = PKV_DTYPE_BF16;
  p->num_layers = layers;
  p->num_q_heads = q_heads;
  p->num_kv_heads = kv_heads;
  p->head_dim = head_dim;
  memset(specs_, 0, sizeof specs_);
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

static pkv_kv_budget budget_of(const pkv_engine_params *p) {
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_profile(p, &b));
  return b;
}

static struct pkv_kv_group_info group_of(const pkv_engine_params *p, uint32_t g) {
  struct pkv_kv_group_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_kv_group_info(p, g, &info));
  return info;
}

typedef struct groups {
  uint32_t num_groups, group_layers;
  uint32_t window[MAX_LAYERS], group[MAX_LAYERS], slot[MAX_LAYERS];
} groups;

static groups groups_of(const pkv_engine_params *p) {
  groups g;
  memset(&g, 0xab, sizeof g);
  CHECK_OK(pkv_kv_groups(p, g.group, g.slot, g.window, MAX_LAYERS, &g.num_groups, &g.group_layers));
  return g;
}

/* The fields of a budget, its new ones included, are those of the flat params. The memory is
 * given, not measured: two reads of /proc/meminfo differ on a busy machine (used_bytes). */
static void check_same(const pkv_engine_params *flat, const pkv_engine_params *spec) {
  pkv_engine_params fixed_flat = *flat, fixed_spec = *spec;
  fixed_flat.memory_total_bytes = fixed_spec.memory_total_bytes = 64ull << 30;
  const pkv_kv_budget a = budget_of(&fixed_flat), b = budget_of(&fixed_spec);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  CHECK_EQ_INT(a.padding_bytes_per_block, 0);
  const groups ga = groups_of(flat), gb = groups_of(spec);
  CHECK(memcmp(&ga, &gb, sizeof ga) == 0);
  pkv_engine *ea = tu_engine_p(flat), *eb = tu_engine_p(spec);
  if (ea && eb) {
    struct pkv_pool_info pa, pb;
    memset(&pa, 0, sizeof pa), memset(&pb, 0, sizeof pb);
    pa.struct_size = pb.struct_size = sizeof pa;
    CHECK_OK(pkv_pool_info(ea, &pa));
    CHECK_OK(pkv_pool_info(eb, &pb));
    pa.k_base = pb.k_base, pa.v_base = pb.v_base; /* the rest equal, strides and bytes */
    CHECK(memcmp(&pa, &pb, sizeof pa) == 0);
    CHECK(pb.v_base != NULL);
  }
  pkv_engine_destroy(ea);
  pkv_engine_destroy(eb);
}

static void test_specs_equal_flat_fields(void) {
  pkv_engine_params flat, spec;
  spec_params(&spec, 6, 8, 2, 64);
  flat = spec;
  flat.layer_specs = NULL;
  flat.layer_spec_size = 0;
  check_same(&flat, &spec); /* zeros: the flat layer */
  static const uint32_t windows[6] = {0, 32, 0, 32, 0, 64};
  flat.layer_windows = windows;
  for (uint32_t l = 0; l < 6; l++) {
    specs_[l].attention = windows[l] ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
    specs_[l].window = windows[l];
    specs_[l].num_kv_heads = 2, specs_[l].head_dim = 64; /* as the flat fields, spelt out */
  }
  check_same(&flat, &spec);
  /* tp: each layer's heads per rank as today's */
  flat.tp_size = spec.tp_size = 4;
  flat.num_kv_heads = spec.num_kv_heads = 2;
  check_same(&flat, &spec);
}

/* gpt-oss-like: 24 layers alternating sliding 128 and full, 64 q / 8 kv heads of 64, sinks on
 * every layer. A layer's token: 2 (K, V) x 8 x 64 x 2 bytes = 2048; equal layers: two groups of
 * 12, today's layout. */
static void test_gpt_oss_like(void) {
  pkv_engine_params p;
  spec_params(&p, 24, 64, 8, 64);
  for (uint32_t l = 0; l < 24; l++) {
    specs_[l].attention = l % 2 ? PKV_ATTENTION_FULL : PKV_ATTENTION_SLIDING;
    specs_[l].window = l % 2 ? 0 : 128;
    specs_[l].sinks = 1;
  }
  const pkv_kv_budget b = budget_of(&p);
  CHECK_EQ_INT(b.num_kv_groups, 2);
  CHECK_EQ_INT(b.group_layers, 12);
  CHECK_EQ_INT(b.block_bytes, 12 * 2048 * 16);
  CHECK_EQ_INT(b.num_cached_layers, 24);
  CHECK_EQ_INT(b.model_bytes_per_token, 24 * 2048);
  CHECK_EQ_INT(b.padding_bytes_per_block, 0);
  CHECK_EQ_INT(b.padded_layers, 0);
  const struct pkv_kv_group_info full = group_of(&p, 0), slide = group_of(&p, 1);
  CHECK_EQ_INT(full.attention, PKV_ATTENTION_FULL);
  CHECK_EQ_INT(full.window, 0);
  CHECK_EQ_INT(full.num_layers, 12);
  CHECK_EQ_INT(full.bytes_per_token, 12 * 2048);
  CHECK_EQ_INT(slide.attention, PKV_ATTENTION_SLIDING);
  CHECK_EQ_INT(slide.window, 128);
  CHECK_EQ_INT(slide.padding_bytes_per_block, 0);
  const groups g = groups_of(&p);
  CHECK_EQ_INT(g.group[1], 0); /* full first */
  CHECK_EQ_INT(g.group[0], 1);
  CHECK_EQ_INT(g.slot[23], 11);
  CHECK_EQ_INT(g.window[1], 128);
  struct pkv_kv_group_info past;
  memset(&past, 0, sizeof past);
  past.struct_size = sizeof past;
  CHECK_STATUS(pkv_kv_group_info(&p, 2, &past), PKV_ERR_INVALID_ARGUMENT);
}

/* Gemma-4-like: 12 layers of 32 q heads, five sliding (window 512, 16 kv heads x 256) then one
 * full (4 kv heads x 512, K = V), twice; the last 4 layers SHARED (8, 9, 10 read layer 7, 11
 * reads 5). Tokens: sliding 2 x 16 x 256 x 2 = 16384 bytes, full 4 x 512 x 2 = 4096.
 * Cached: 7 sliding, 1 full. No page wastes nothing (lcm 16384 does not divide gcd(114688,
 * 4096) = 4096); the least waste is a page of one sliding layer: 8 groups, the full group's page
 * holding 4096 of 16384 bytes per token: 12288 x 16 = 196608 bytes of each of its blocks. */
static void gemma4_specs(pkv_engine_params *p) {
  spec_params(p, 12, 32, 16, 256);
  for (uint32_t l = 0; l < 12; l++) {
    const int full = l % 6 == 5;
    specs_[l].attention = full ? PKV_ATTENTION_FULL : PKV_ATTENTION_SLIDING;
    specs_[l].window = full ? 0 : 512;
    if (full) specs_[l].num_kv_heads = 4, specs_[l].head_dim = 512, specs_[l].k_eq_v = 1;
    if (l >= 8) specs_[l].kind = PKV_LAYER_SHARED, specs_[l].source_layer = full ? 5 : 7;
  }
}

static void test_gemma4_like(void) {
  pkv_engine_params p;
  gemma4_specs(&p);
  const pkv_kv_budget b = budget_of(&p);
  CHECK_EQ_INT(b.num_cached_layers, 8);
  CHECK_EQ_INT(b.model_bytes_per_token, 7 * 16384 + 4096);
  CHECK_EQ_INT(b.num_kv_groups, 8);
  CHECK_EQ_INT(b.block_bytes, 16384 * 16);
  CHECK_EQ_INT(b.bytes_per_token, 16384);
  CHECK_EQ_INT(b.group_layers, 1);
  CHECK_EQ_INT(b.padded_layers, 3); /* the full group's page has room for 4 */
  CHECK_EQ_INT(b.padding_bytes_per_block, 12288 * 16);
  CHECK_EQ_INT(b.kv_heads_per_rank, 16);
  const struct pkv_kv_group_info full = group_of(&p, 0), slide = group_of(&p, 7);
  CHECK_EQ_INT(full.num_layers, 1);
  CHECK_EQ_INT(full.bytes_per_token, 4096);
  CHECK_EQ_INT(full.padding_bytes_per_block, 12288 * 16);
  CHECK_EQ_INT(slide.window, 512);
  CHECK_EQ_INT(slide.bytes_per_token, 16384);
  CHECK_EQ_INT(slide.padding_bytes_per_block, 0);
  const groups g = groups_of(&p);
  CHECK_EQ_INT(g.group[5], 0);
  CHECK_EQ_INT(g.group[11], 0); /* SHARED: its source's group and slot */
  CHECK_EQ_INT(g.group[9], g.group[7]);
  CHECK_EQ_INT(g.slot[9], g.slot[7]);
  /* The pool: 64 pages, one tensor; pkv_pool_info points at it, pkv_layer_info at each layer. */
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  struct pkv_pool_info pool;
  memset(&pool, 0, sizeof pool);
  pool.struct_size = sizeof pool;
  CHECK_OK(pkv_pool_info(e, &pool));
  CHECK(pool.v_base == NULL);
  CHECK_EQ_INT(pool.bytes_per_pool, 64ull * 16384 * 16);
  CHECK_EQ_INT(pool.block_stride, 16384 * 16 / 2);
  struct pkv_layer_info full5, shared11;
  memset(&full5, 0, sizeof full5), memset(&shared11, 0, sizeof shared11);
  full5.struct_size = shared11.struct_size = sizeof full5;
  CHECK_OK(pkv_layer_info(e, 5, &full5));
  CHECK_OK(pkv_layer_info(e, 11, &shared11));
  CHECK(full5.k_eq_v && full5.v_base == full5.k_base && full5.k_base == pool.k_base);
  CHECK_EQ_INT(full5.kv_heads, 4);
  CHECK_EQ_INT(full5.head_dim, 512);
  CHECK_EQ_INT(full5.block_stride, pool.block_stride);
  CHECK_EQ_INT(full5.token_stride, 4 * 512);
  CHECK_EQ_INT(shared11.kind, PKV_LAYER_SHARED);
  CHECK_EQ_INT(shared11.source_layer, 5);
  CHECK(shared11.k_base == full5.k_base);
  pkv_engine_destroy(e);
}

/* Llama-4-like: 48 layers, three chunked (8192) of every four, 40 q / 8 kv heads of 128. Equal
 * layers (2 x 8 x 128 x 2 = 4096 bytes a token): 12 full, 36 chunked in three groups of 12. */
static void test_llama4_like(void) {
  pkv_engine_params p;
  spec_params(&p, 48, 40, 8, 128);
  for (uint32_t l = 0; l < 48; l++)
    if (l % 4 != 3) specs_[l].attention = PKV_ATTENTION_CHUNKED, specs_[l].window = 8192;
  const pkv_kv_budget b = budget_of(&p);
  CHECK_EQ_INT(b.num_kv_groups, 4);
  CHECK_EQ_INT(b.group_layers, 12);
  CHECK_EQ_INT(b.block_bytes, 12 * 4096 * 16);
  CHECK_EQ_INT(b.model_bytes_per_token, 48 * 4096);
  CHECK_EQ_INT(b.padding_bytes_per_block, 0);
  for (uint32_t g = 1; g < 4; g++) {
    const struct pkv_kv_group_info info = group_of(&p, g);
    CHECK_EQ_INT(info.attention, PKV_ATTENTION_CHUNKED);
    CHECK_EQ_INT(info.window, 8192);
    CHECK_EQ_INT(info.num_layers, 12);
  }
  CHECK_EQ_INT(group_of(&p, 0).attention, PKV_ATTENTION_FULL);
}

/* Unequal layers with a page that wastes nothing: 4 layers of 4096 bytes and 2 of 8192 (a
 * gcd of 16384 that both divide): one group each, a page of 16384 bytes a token. */
static void test_page_without_waste(void) {
  pkv_engine_params p;
  spec_params(&p, 6, 8, 8, 128);
  for (uint32_t l = 4; l < 6; l++)
    specs_[l].attention = PKV_ATTENTION_SLIDING, specs_[l].window = 100, specs_[l].num_kv_heads = 8,
    specs_[l].head_dim = 256;
  for (uint32_t l = 0; l < 4; l++) specs_[l].num_kv_heads = 8; /* 2 x 8 x 128 x 2 = 4096 */
  const pkv_kv_budget b = budget_of(&p);
  CHECK_EQ_INT(b.num_kv_groups, 2);
  CHECK_EQ_INT(b.block_bytes, 16384 * 16);
  CHECK_EQ_INT(b.padding_bytes_per_block, 0);
  CHECK_EQ_INT(b.group_layers, 4);
  CHECK_EQ_INT(group_of(&p, 1).num_layers, 2);
}

/* Random spec lists of unequal layers: the groups account for every cached layer, each group's
 * block is the page (its bytes plus its padding), and the page wastes nothing exactly when some
 * page can (every kind's bytes divide the gcd of the kinds' totals), else no candidate page (a
 * whole number of some kind's layers, at least the widest) wastes less per token. */
typedef struct kind {
  uint32_t attention, window, layers;
  uint64_t bytes;
} kind;

static uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    const uint64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* What pages of `page` bytes per token waste per token held by every group. */
static uint64_t waste_of(const kind *k, uint32_t n, uint64_t page) {
  uint64_t held = 0, used = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint64_t per = page / k[i].bytes;
    used += (k[i].layers + per - 1) / per * page, held += k[i].layers * k[i].bytes;
  }
  return used - held;
}

static void test_random_pages(void) {
  uint64_t rng = 7;
  for (int round = 0; round < 300; round++) {
    pkv_engine_params p;
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t layers = 2 + (uint32_t)(rng >> 60) % 12;
    spec_params(&p, layers, 8, 8, 64);
    kind kinds[MAX_LAYERS];
    uint32_t nk = 0;
    for (uint32_t l = 0; l < layers; l++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      pkv_layer_spec *sp = &specs_[l];
      const uint32_t r = (uint32_t)(rng >> 33);
      if (l > 0 && r % 5 == 0) { /* SHARED: layer 0's spec */
        *sp = specs_[0], sp->kind = PKV_LAYER_SHARED, sp->source_layer = 0;
        continue;
      }
      sp->attention = r / 5 % 3;
      sp->window = sp->attention ? 64u << sp->attention : 0;
      sp->num_kv_heads = 1u << (r / 15 % 4);
      sp->head_dim = 64u << (r / 60 % 3);
      sp->k_eq_v = r / 180 % 2;
      const uint64_t bytes = (sp->k_eq_v ? 1 : 2) * (uint64_t)sp->num_kv_heads * sp->head_dim * 2;
      uint32_t i = 0;
      while (i < nk && !(kinds[i].attention == sp->attention && kinds[i].window == sp->window &&
                         kinds[i].bytes == bytes))
        i++;
      if (i == nk) kinds[nk++] = (kind){sp->attention, sp->window, 0, bytes};
      kinds[i].layers++;
    }
    const pkv_kv_budget b = budget_of(&p);
    const uint64_t page = b.block_bytes / 16;
    uint64_t total = 0, cached = 0, all_gcd = 0, widest = 0;
    int equal = 1, exact = 1;
    for (uint32_t i = 0; i < nk; i++) {
      cached += kinds[i].layers, all_gcd = gcd64(all_gcd, kinds[i].layers * kinds[i].bytes);
      widest = kinds[i].bytes > widest ? kinds[i].bytes : widest;
      equal &= kinds[i].bytes == kinds[0].bytes;
    }
    for (uint32_t i = 0; i < nk; i++) exact &= all_gcd % kinds[i].bytes == 0;
    CHECK_EQ_INT(b.num_cached_layers, cached);
    for (uint32_t g = 0; g < b.num_kv_groups; g++) {
      const struct pkv_kv_group_info info = group_of(&p, g);
      CHECK_EQ_INT(info.bytes_per_token * 16 + info.padding_bytes_per_block, b.block_bytes);
      CHECK(info.padding_bytes_per_block <= b.padding_bytes_per_block);
      total += info.bytes_per_token;
    }
    CHECK_EQ_INT(total, b.model_bytes_per_token);
    if (equal) continue; /* today's groups: test_kv_groups */
    if (!CHECK_EQ_INT(b.padding_bytes_per_block == 0, exact))
      fprintf(stderr, "  round %d: page %llu\n", round, (unsigned long long)page);
    const uint64_t waste = waste_of(kinds, nk, page);
    for (uint32_t i = 0; i < nk; i++)
      for (uint64_t m = 1; m <= kinds[i].layers; m++)
        if (m * kinds[i].bytes >= widest &&
            !CHECK(waste <= waste_of(kinds, nk, m * kinds[i].bytes)))
          fprintf(stderr, "  round %d: page %llu wastes more than %llu\n", round,
                  (unsigned long long)page, (unsigned long long)(m * kinds[i].bytes));
  }
}

int main(void) {
  TU_RUN(test_specs_equal_flat_fields);
  TU_RUN(test_gpt_oss_like);
  TU_RUN(test_gemma4_like);
  TU_RUN(test_llama4_like);
  TU_RUN(test_page_without_waste);
  TU_RUN(test_random_pages);
  return tu_summary();
}
