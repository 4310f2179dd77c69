/* pkv_kv_groups (DESIGN.md §12): layers grouped by window into equal groups of group_layers
 * layers (the fewest any window has), full-attention groups first, each layer in exactly one
 * (group, slot); the groups pkv_profile and an engine report; pkv_seq_group_block_table. */
#include "test_util.h"

#define MAX_LAYERS 256

typedef struct groups {
  uint32_t num_groups, group_layers;
  uint32_t group_window[MAX_LAYERS];
  uint32_t layer_group[MAX_LAYERS], layer_slot[MAX_LAYERS];
} groups;

/* The groups of p (checked OK), with every per-layer answer checked against the rules:
 * windows match, no (group, slot) twice, slots below group_layers and in layer order within a
 * group, full groups first then windows ascending, groups of one window all full but the last. */
static int get_groups(const pkv_engine_params *p, groups *g) {
  memset(g, 0xff, sizeof *g);
  if (!CHECK_OK(pkv_kv_groups(p, g->layer_group, g->layer_slot, g->group_window, MAX_LAYERS,
                              &g->num_groups, &g->group_layers)))
    return 0;
  const uint32_t L = p->num_layers;
  if (!CHECK(g->num_groups >= 1 && g->num_groups <= L && g->group_layers >= 1 &&
             g->group_layers <= L))
    return 0;
  static uint8_t used[MAX_LAYERS][MAX_LAYERS];
  uint32_t members[MAX_LAYERS] = {0};
  memset(used, 0, sizeof used);
  int ok = 1;
  for (uint32_t l = 0; l < L; l++) {
    const uint32_t grp = g->layer_group[l], slot = g->layer_slot[l];
    const uint32_t window = p->layer_windows ? p->layer_windows[l] : p->sliding_window;
    ok &= CHECK(grp < g->num_groups && slot < g->group_layers);
    if (grp >= g->num_groups || slot >= g->group_layers) continue;
    ok &= CHECK_EQ_INT(g->group_window[grp], window);
    ok &= CHECK(!used[grp][slot]); /* no two layers share a slot */
    used[grp][slot] = 1;
    ok &= CHECK_EQ_INT(slot, members[grp]); /* a group's layers fill its slots in layer order */
    members[grp]++;
  }
  for (uint32_t i = 0; i < g->num_groups; i++) {
    ok &= CHECK(members[i] >= 1);
    if (i > 0)
      ok &=
          CHECK(g->group_window[i] >= g->group_window[i - 1]); /* 0 (full) first, then ascending */
    /* only the last group of a window is padded */
    if (i + 1 < g->num_groups && g->group_window[i + 1] == g->group_window[i])
      ok &= CHECK_EQ_INT(members[i], g->group_layers);
  }
  ok &= CHECK_EQ_INT(g->group_window[g->num_groups], 0xffffffffu); /* nothing past the groups */
  return ok;
}

static void params(pkv_engine_params *p, uint32_t layers) {
  tu_params(p, 16, 64);
  p->num_layers = layers;
}

static void test_one_group(void) {
  pkv_engine_params p;
  params(&p, 6);
  groups g;
  if (get_groups(&p, &g)) { /* no windows: one full group of every layer */
    CHECK_EQ_INT(g.num_groups, 1);
    CHECK_EQ_INT(g.group_layers, 6);
    CHECK_EQ_INT(g.group_window[0], 0);
    for (uint32_t l = 0; l < 6; l++) CHECK(g.layer_group[l] == 0 && g.layer_slot[l] == l);
  }
  p.sliding_window = 64; /* one window everywhere: still one group */
  if (get_groups(&p, &g))
    CHECK(g.num_groups == 1 && g.group_layers == 6 && g.group_window[0] == 64);
  uint32_t same[6] = {128, 128, 128,
                      128, 128, 128}; /* layer_windows all alike, in place of sliding_window */
  p.layer_windows = same;
  if (get_groups(&p, &g))
    CHECK(g.num_groups == 1 && g.group_layers == 6 && g.group_window[0] == 128);
  /* the outputs are optional but the count */
  uint32_t n = 0, gl = 0;
  CHECK_OK(pkv_kv_groups(&p, NULL, NULL, NULL, 0, &n, &gl));
  CHECK(n == 1 && gl == 6);
  CHECK_OK(pkv_kv_groups(&p, NULL, NULL, NULL, 0, &n, NULL));
}

/* Gemma 3's 5:1 pattern over 62 layers: 10 full layers set group_layers; the 52 windowed ones
 * fill 6 groups, the last with 2 layers and 8 padded slots. */
static void test_gemma3_pattern(void) {
  pkv_engine_params p;
  params(&p, 62);
  uint32_t w[62];
  for (uint32_t l = 0; l < 62; l++) w[l] = (l + 1) % 6 ? 1024 : 0;
  p.layer_windows = w;
  groups g;
  if (!get_groups(&p, &g)) return;
  CHECK_EQ_INT(g.num_groups, 7);
  CHECK_EQ_INT(g.group_layers, 10); /* the full layers' count */
  CHECK_EQ_INT(g.group_window[0], 0);
  for (uint32_t i = 1; i < 7; i++) CHECK_EQ_INT(g.group_window[i], 1024);
  CHECK(g.layer_group[5] == 0 && g.layer_slot[5] == 0 && g.layer_group[59] == 0 &&
        g.layer_slot[59] == 9);
  CHECK(g.layer_group[0] == 1 && g.layer_slot[0] == 0 && g.layer_group[10] == 1 &&
        g.layer_slot[10] == 9);
  CHECK(g.layer_group[12] == 2 && g.layer_slot[12] == 0);
  CHECK(g.layer_group[60] == 6 && g.layer_slot[60] == 0 && g.layer_group[61] == 6 &&
        g.layer_slot[61] == 1);
  /* pkv_profile agrees: 7 groups of 10, 8 padded slots, blocks of 10 layers */
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (CHECK_OK(pkv_profile(&p, &b))) {
    CHECK_EQ_INT(b.num_kv_groups, 7);
    CHECK_EQ_INT(b.group_layers, 10);
    CHECK_EQ_INT(b.padded_layers, 8);
    CHECK_EQ_INT(b.block_bytes, 2ull * 10 * 16 * 2 * 8 * 4);
  }
}

/* Several windows: the fewest layers any window has sets group_layers, every window split. */
static void test_several_windows(void) {
  pkv_engine_params p;
  params(&p, 12);
  /* 2 full, 4 of 64, 6 of 128, interleaved: groups [0] [64 64] [128 128 128] of 2 each */
  uint32_t w[12] = {128, 64, 0, 128, 64, 128, 64, 128, 0, 64, 128, 128};
  p.layer_windows = w;
  groups g;
  if (get_groups(&p, &g)) {
    CHECK_EQ_INT(g.num_groups, 6);
    CHECK_EQ_INT(g.group_layers, 2);
    const uint32_t want[6] = {0, 64, 64, 128, 128, 128};
    for (uint32_t i = 0; i < 6; i++) CHECK_EQ_INT(g.group_window[i], want[i]);
    CHECK(g.layer_group[2] == 0 && g.layer_group[8] == 0);
    CHECK(g.layer_group[1] == 1 && g.layer_group[4] == 1 && g.layer_group[6] == 2 &&
          g.layer_group[9] == 2);
  }
  /* unequal counts: 3 full, 7 windowed -> groups of 3: [0] [64 x3] [64 x3] [64 x1 + 2 padded] */
  uint32_t u[10] = {64, 64, 0, 64, 64, 0, 64, 64, 0, 64};
  p.num_layers = 10;
  p.layer_windows = u;
  if (get_groups(&p, &g)) {
    CHECK_EQ_INT(g.num_groups, 4);
    CHECK_EQ_INT(g.group_layers, 3);
    CHECK(g.layer_group[9] == 3 && g.layer_slot[9] == 0);
  }
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (CHECK_OK(pkv_profile(&p, &b)))
    CHECK(b.num_kv_groups == 4 && b.group_layers == 3 && b.padded_layers == 2);
  /* gpt-oss: 24 alternating layers, two groups of 12 */
  uint32_t a[24];
  for (uint32_t l = 0; l < 24; l++) a[l] = l % 2 ? 0 : 128;
  p.num_layers = 24;
  p.layer_windows = a;
  if (get_groups(&p, &g))
    CHECK(g.num_groups == 2 && g.group_layers == 12 && g.group_window[0] == 0 &&
          g.group_window[1] == 128 && g.layer_group[1] == 0 && g.layer_group[0] == 1 &&
          g.layer_slot[23] == 11);
  /* a single full layer among windowed ones: one group per layer */
  uint32_t one[5] = {256, 256, 0, 256, 256};
  p.num_layers = 5;
  p.layer_windows = one;
  if (get_groups(&p, &g))
    CHECK(g.num_groups == 5 && g.group_layers == 1 && g.layer_group[2] == 0 &&
          g.layer_group[4] == 4);
}

/* Short buffers and bad arguments: refused with INVALID_ARGUMENT, nothing written but the count
 * needed. */
static void test_bad_arguments(void) {
  pkv_engine_params p;
  params(&p, 12);
  uint32_t w[12] = {0, 64, 64, 64, 0, 64, 64, 64, 0, 64, 64, 64};
  p.layer_windows = w;
  uint32_t layer_group[12], window[4] = {5, 5, 5, 5}, n = 0, gl = 0;
  memset(layer_group, 0xab, sizeof layer_group);
  CHECK_OK(pkv_kv_groups(&p, NULL, NULL, NULL, 0, &n, &gl));
  CHECK(n == 4 && gl == 3);
  n = gl = 0;
  CHECK_STATUS(pkv_kv_groups(&p, layer_group, NULL, window, 3, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 4); /* the groups it needs room for */
  CHECK(strstr(pkv_last_error(), "4 entries, the buffer holds 3") != NULL);
  CHECK(window[0] == 5 && window[2] == 5 && layer_group[0] == 0xabababab && gl == 0);
  CHECK_STATUS(pkv_kv_groups(&p, NULL, NULL, NULL, 0, NULL, &gl), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_kv_groups(&p, NULL, NULL, NULL, 4, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_kv_groups(NULL, NULL, NULL, NULL, 0, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
  /* params validated as by pkv_engine_create */
  w[7] = 0x80000000u;
  CHECK_STATUS(pkv_kv_groups(&p, layer_group, NULL, window, 4, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "layer_windows[7] = 2147483648 exceeds 2^31-1") != NULL);
  CHECK(window[0] == 5 && layer_group[0] == 0xabababab);
  w[7] = 64;
  p.num_layers = 0;
  CHECK_STATUS(pkv_kv_groups(&p, NULL, NULL, NULL, 0, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
  p.num_layers = 12;
  p.kv_dtype = 7;
  CHECK_STATUS(pkv_kv_groups(&p, NULL, NULL, NULL, 0, &n, &gl), PKV_ERR_INVALID_ARGUMENT);
}

/* An engine with one window for every layer (one KV group); group 0's table is the sequence's
 * table, any other group is refused. Several groups: the engine agrees with pkv_kv_groups. */
static void test_engine_groups(void) {
  pkv_engine_params p;
  tu_params(&p, 4, 32);
  p.sliding_window = 8;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  struct pkv_pool_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_pool_info(e, &in));
  CHECK_EQ_INT(in.num_kv_groups, 1);
  CHECK_EQ_INT(in.num_layers, 2);
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  CHECK_OK(pkv_engine_params_get(e, &got));
  CHECK_EQ_INT(got.sliding_window, 8);
  int32_t tokens[10], table[8], group_table[8];
  tu_fill(tokens, 10, 1);
  uint64_t seq = tu_alloc(e, tokens, 10, NULL);
  uint32_t n = tu_table(e, seq, table, 8), gn = 0;
  CHECK_EQ_INT(n, 3);
  if (CHECK_OK(pkv_seq_group_block_table(e, seq, 0, group_table, 8, &gn)) && CHECK_EQ_INT(gn, n))
    CHECK(memcmp(table, group_table, n * sizeof table[0]) == 0);
  CHECK_ERR(e, pkv_seq_group_block_table(e, seq, 1, group_table, 8, &gn), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_seq_group_block_table(e, seq + 100, 0, group_table, 8, &gn), PKV_ERR_NOT_FOUND);
  CHECK_ERR(e, pkv_seq_group_block_table(e, seq, 0, group_table, 2, &gn), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(gn, 3);
  pkv_engine_destroy(e);

  uint32_t w[2] = {0, 8};
  p.sliding_window = 0;
  p.layer_windows = w;
  e = NULL;
  if (!CHECK_OK(pkv_engine_create(&p, &e))) return;
  CHECK_OK(pkv_pool_info(e, &in));
  CHECK_EQ_INT(in.num_kv_groups, 2);
  CHECK_EQ_INT(in.num_layers, 1);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_one_group);
  TU_RUN(test_gemma3_pattern);
  TU_RUN(test_several_windows);
  TU_RUN(test_bad_arguments);
  TU_RUN(test_engine_groups);
  return tu_summary();
}
