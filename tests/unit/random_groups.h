/*
 * random_groups.h - test_random_ops.c's layouts of several KV groups (DESIGN.md §12), drawn from
 * its seed by the SPECS argument, and the operations whose model they change:
 *   SPECS_WINDOWS  flat layer_windows: 2 to 4 layers, a full one, a windowed one, the rest either;
 *   SPECS_SLIDING  layer specs: heads and widths of unequal bytes per token (pages), K = V,
 *                  SHARED layers, some of them SLIDING;
 *   SPECS_CHUNKED  the same with CHUNKED (chunked local attention) for SLIDING;
 *   SPECS_HETERO   the same, every layer FULL: groups by bytes per token alone.
 * Windows and chunks are 1 .. 4 * block_size + 4 tokens (MAX_LEN is 96), so give-backs are
 * frequent. No STATE layer is drawn here (random_state.h models one KV group's events). With a
 * store (per group since 0.8), a fetched block's group and contexts are read from its bytes
 * (random_store.h).
 *
 * Each group has its own table per sequence (random_world.h's check_tables: -1 before
 * first_held, exactly), writes go to every group's slot (random_batch.h), swaps move every
 * group's held blocks (random_swap.h), and pkv_truncate below the computed tokens takes back the
 * window's or chunk's blocks a group gave back (take_back): from the prefix cache, by a LOAD
 * copy from the host tier, or refused (PKV_ERR_STATE when no tier holds one, NO_SPACE) changing
 * nothing.
 */
#ifndef PKV_RANDOM_GROUPS_H
#define PKV_RANDOM_GROUPS_H

#include "random_specs.h"

enum { SPECS_DRAWN = 1, SPECS_WINDOWS = 2, SPECS_SLIDING = 3, SPECS_CHUNKED = 4, SPECS_HETERO = 5 };

static uint32_t drawn_windows[MAX_POOL_LAYERS];

/* Shapes of unequal bytes per token (K + V floats: 32, 32, 32, 16, 64, 32 with K = V). */
static void draw_shape(world *w, pkv_layer_spec *s, uint32_t not_floats) {
  static const uint32_t heads[6] = {2, 1, 4, 1, 4, 1}, dims[6] = {8, 16, 4, 8, 8, 32};
  uint64_t k;
  do k = rnd(w, 6);
  while (heads[k] * dims[k] * (k == 5 ? 1 : 2) == not_floats);
  s->num_kv_heads = heads[k], s->head_dim = dims[k], s->k_eq_v = k == 5;
}

static uint32_t spec_floats(const pkv_layer_spec *s) {
  return s->num_kv_heads * s->head_dim * (s->k_eq_v ? 1 : 2);
}

/* Layer 0 FULL, layer 1 of the mode's attention (HETERO: of other bytes per token), later ones
 * SHARED now and then, else either attention. */
static void draw_layer(world *w, uint32_t l, uint32_t attention, uint32_t mode) {
  pkv_layer_spec *s = &drawn_specs[l];
  if (l > 1 && rnd(w, 3) == 0) {
    const uint32_t src = shared_source(w, l);
    *s = drawn_specs[src];
    s->kind = PKV_LAYER_SHARED, s->source_layer = src;
    return;
  }
  draw_shape(w, s, mode == SPECS_HETERO && l == 1 ? spec_floats(&drawn_specs[0]) : 0);
  if (l == 1 || (l > 1 && rnd(w, 2))) s->attention = attention;
  if (s->attention != PKV_ATTENTION_FULL) s->window = 1 + (uint32_t)rnd(w, 4 * w->bs + 4);
}

static void draw_group_specs(world *w, pkv_engine_params *p, int mode) {
  memset(drawn_specs, 0, sizeof drawn_specs);
  p->num_layers = 2 + (uint32_t)rnd(w, MAX_POOL_LAYERS - 1);
  if (mode == SPECS_WINDOWS) {
    printf("layer windows:");
    for (uint32_t l = 0; l < p->num_layers; l++) {
      const int windowed = l == 1 || (l > 1 && rnd(w, 2));
      drawn_windows[l] = windowed ? 1 + (uint32_t)rnd(w, 4 * w->bs + 4) : 0;
      printf(" %u", drawn_windows[l]);
    }
    printf("\n");
    p->layer_windows = drawn_windows;
    return;
  }
  const uint32_t attention = mode == SPECS_SLIDING   ? PKV_ATTENTION_SLIDING
                             : mode == SPECS_CHUNKED ? PKV_ATTENTION_CHUNKED
                                                     : PKV_ATTENTION_FULL;
  for (uint32_t l = 0; l < p->num_layers; l++) draw_layer(w, l, attention, (uint32_t)mode);
  p->layer_specs = drawn_specs;
  p->layer_spec_size = sizeof drawn_specs[0];
  printf("layer specs (attention window):");
  for (uint32_t l = 0; l < p->num_layers; l++) {
    const pkv_layer_spec *s = &drawn_specs[l];
    if (s->kind == PKV_LAYER_SHARED)
      printf(" shared(%u)", s->source_layer);
    else
      printf(" %ux%u%s(%u %u)", s->num_kv_heads, s->head_dim, s->k_eq_v ? "(k=v)" : "",
             s->attention, s->window);
  }
  printf("\n");
}

/* Each group's kind, from pkv_kv_group_info of the engine's params. */
static int groups_init(world *w, const pkv_engine_params *p) {
  uint32_t window[MAX_GROUPS];
  w->caching = p->enable_prefix_caching != 0;
  if (!CHECK_OK(pkv_kv_groups(p, NULL, NULL, window, MAX_GROUPS, &w->ngroups, NULL)) ||
      !CHECK(w->ngroups >= 1 && w->ngroups <= MAX_GROUPS))
    return 0;
  for (uint32_t g = 0; g < w->ngroups; g++) {
    struct pkv_kv_group_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (!CHECK_OK(pkv_kv_group_info(p, g, &info)) || !CHECK(info.window == window[g])) return 0;
    w->group_attention[g] = info.attention, w->group_span[g] = info.window;
    if (w->ngroups > 1)
      printf("group %u: attention %u, window %u\n", g, info.attention, info.window);
  }
  return 1;
}

/* Whether truncating s to n tokens (n below its computed ones) needs blocks a group gave back:
 * the window or chunk of token n starts before the blocks the group holds now. */
static int takes_back(const world *w, const rseq *s, uint32_t n) {
  const uint32_t need = (n + w->bs - 1) / w->bs;
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t first = first_held(w, g, n), now = first_held(w, g, s->computed);
    if (first < now && first < need) return 1;
  }
  return 0;
}

/* pkv_truncate gave back the blocks past the kept tokens: the queued copy-on-writes into those
 * no table holds any more go (random_copies.h's undo_copy_into), group after group, each table
 * from its end (pkv's order). before[g][0..nb): the tables before the cut. */
static void undo_dropped(world *w, const rseq *s, int32_t (*before)[MAX_LEN], uint32_t nb) {
  count_refs(w);
  for (uint32_t g = 0; g < w->ngroups && !s->preempted; g++)
    for (uint32_t k = nb; k-- > num_table_blocks(w, s);)
      if (before[g][k] >= 0 && w->refs[before[g][k]] == 0) undo_copy_into(w, before[g][k]);
}

/* A cut below the computed tokens that needs given-back blocks again: pkv takes them back from
 * the pool's cache or loads them from the host tier (LOAD copies, counted in the stats: not
 * hits), and check_world then finds the kept tokens' contexts in every group's blocks; or it
 * refuses (PKV_ERR_STATE: no tier holds one; NO_SPACE: no room for them) changing nothing. */
static void take_back(world *w, rseq *s, uint32_t n, int32_t (*before)[MAX_LEN], uint32_t nb) {
  const uint64_t st = world_state(w), loaded = tu_stats(w->e).num_loaded_blocks;
  const pkv_status r = pkv_truncate(w->e, s->id, n);
  if (r == PKV_ERR_STATE || r == PKV_ERR_NO_SPACE) {
    CHECK_ERR(w->e, r, r); /* a message says why (before another call replaces it) */
    EXPECT(world_state(w) == st);
    w->num_take_back_refused++;
    w->num_no_space += r == PKV_ERR_NO_SPACE;
    return;
  }
  if (!CHECK_OK(r)) return;
  w->take_back_loads += tu_stats(w->e).num_loaded_blocks - loaded;
  s->len = n;
  s->computed = n;
  w->num_truncates++;
  w->num_take_back++;
  undo_dropped(w, s, before, nb);
}

static void groups_report(const world *w) {
  if (w->ngroups == 1 && w->group_attention[0] == PKV_ATTENTION_FULL) return;
  printf("groups: %u, %llu given-back entries seen, %llu truncates took blocks back (%llu "
         "loads), %llu refused\n",
         w->ngroups, (unsigned long long)w->num_given_back, (unsigned long long)w->num_take_back,
         (unsigned long long)w->take_back_loads, (unsigned long long)w->num_take_back_refused);
  CHECK(w->ngroups > 1);
  int gives_back = 0;
  for (uint32_t g = 0; g < w->ngroups; g++)
    gives_back |= w->group_attention[g] != PKV_ATTENTION_FULL;
  if (gives_back) CHECK(w->num_given_back > 0 && w->num_take_back > 0);
  if (gives_back && w->host_blocks && w->offload) /* some taken back from the host tier */
    CHECK(w->take_back_loads > 0 && w->num_take_back_refused > 0);
}

#endif /* PKV_RANDOM_GROUPS_H */
