/*
 * random_specs.h - the layer specs test_random_ops.c draws from its seed (DESIGN.md §12, §13):
 * 2 to 4 full-attention layers of one KV group whose shapes differ at equal bytes per token (2 x 8,
 * 1 x 16, 4 x 4, or one head of 32 with V = K), so the pool is pages; later layers may be SHARED,
 * reading an earlier one's KV; with STATE layers (a run with a checkpoint policy), later layers
 * may be recurrent instead (random_state.h), at least one of them.
 */
#ifndef PKV_RANDOM_SPECS_H
#define PKV_RANDOM_SPECS_H

#include "random_state.h"

static pkv_layer_spec drawn_specs[MAX_POOL_LAYERS];

/* A SHARED layer reads an earlier cached layer's KV: never a STATE layer's (layer 0 is cached). */
static inline uint32_t shared_source(world *w, uint32_t l) {
  uint32_t src = (uint32_t)rnd(w, l);
  while (drawn_specs[src].kind == PKV_LAYER_SHARED) src = drawn_specs[src].source_layer;
  return drawn_specs[src].kind == PKV_LAYER_STATE ? 0 : src;
}

static inline void print_specs(uint32_t num_layers) {
  printf("layer specs:");
  for (uint32_t l = 0; l < num_layers; l++) {
    const pkv_layer_spec *s = &drawn_specs[l];
    if (s->kind == PKV_LAYER_SHARED)
      printf(" shared(%u)", s->source_layer);
    else if (s->kind == PKV_LAYER_STATE)
      printf(" state(%ux%u, %ux%ux%u of dtype %u)", s->state_shape[0], s->state_shape[1],
             s->state_shape[4], s->state_shape[5], s->state_shape[6], s->state_dtype[1]);
    else
      printf(" %ux%u%s", s->num_kv_heads, s->head_dim, s->k_eq_v ? "(k=v)" : "");
  }
  printf("\n");
}

/* Without STATE layers the draws are the ones runs before 0.6 made, seed for seed. */
static inline void draw_specs(world *w, pkv_engine_params *p) {
  static const uint32_t heads[4] = {2, 1, 4, 1}, dims[4] = {8, 16, 4, 32}, k_eq_v[4] = {0, 0, 0, 1};
  memset(drawn_specs, 0, sizeof drawn_specs);
  p->num_layers = 2 + (uint32_t)rnd(w, MAX_POOL_LAYERS - 1);
  int num_state = 0;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    pkv_layer_spec *s = &drawn_specs[l];
    if (w->state && l > 0 && rnd(w, 3) == 0) {
      draw_state_layer(w, s);
      num_state++;
      continue;
    }
    if (w->state && w->host_blocks) { /* a host tier takes attention layers of the flat fields */
      s->num_kv_heads = p->num_kv_heads, s->head_dim = p->head_dim;
      continue;
    }
    if (l > 0 && rnd(w, 3) == 0) { /* SHARED: an earlier cached layer's spec, its source */
      const uint32_t src = shared_source(w, l);
      *s = drawn_specs[src];
      s->kind = PKV_LAYER_SHARED, s->source_layer = src;
      continue;
    }
    const uint64_t k = rnd(w, 4);
    s->num_kv_heads = heads[k], s->head_dim = dims[k], s->k_eq_v = k_eq_v[k];
  }
  if (w->state && num_state == 0) /* no layer reads the last one's cache */
    draw_state_layer(w, &drawn_specs[p->num_layers - 1]);
  p->layer_specs = drawn_specs;
  p->layer_spec_size = sizeof drawn_specs[0];
  print_specs(p->num_layers);
}

#endif /* PKV_RANDOM_SPECS_H */
