/*
 * random_pool.h - the real K/V behind random_world.h's shadow. The test is the host's kernels: a
 * token's write puts a tag of its context into its row of every layer, K and V (at the row's start
 * and end), in the pool pkv_pool_info describes; copies are done by pkv (pkv_batch_copy) or by the
 * test (pool_copy: whole blocks, every layer, K and V, between the tiers the kind names).
 * check_pool() compares every slot of both tiers with the shadow. Included by random_world.h.
 *
 * Layout (f32): where pkv_layer_info says, per layer: K (and V) block b at block_stride * b
 * elements from its base, token t of the block token_stride (v_token_stride) further.
 */
#ifndef PKV_RANDOM_POOL_H
#define PKV_RANDOM_POOL_H

/* What a slot holding context ctx holds on one layer's K (v = 0) or V (v = 1); 0 stays 0 (never
 * written: the pool starts zeroed). */
static inline uint64_t pool_tag(uint64_t ctx, uint32_t layer, int v) {
  return ctx ? ctx + 0x9e3779b97f4a7c15ull * (2u * layer + (uint32_t)v + 1u) : 0;
}

/* Layer l's K (v 0) or V block 0 in a tier, through pkv_layer_info: the layout is pkv's to
 * choose (today's [layer][block] for equal layers, pages for drawn specs of unequal shape). */
static inline unsigned char *pool_base(const world *w, int host, int v, uint32_t layer) {
  const struct pkv_layer_info *in = &w->layer[layer];
  return (unsigned char *)(host ? (v ? in->host_v_base : in->host_k_base)
                                : (v ? in->v_base : in->k_base));
}

static inline size_t row_bytes(const world *w, uint32_t layer, int v) {
  return (v ? w->layer[layer].v_token_stride : w->layer[layer].token_stride) * sizeof(float);
}

static inline size_t block_bytes(const world *w, uint32_t layer) {
  return w->layer[layer].block_stride * sizeof(float);
}

/* The (layer, K or V) that hold bytes of their own: not a SHARED layer's (its source's), not
 * the V of a layer whose V is its K, not a STATE layer's (its state is in the slots). */
static inline int own_bytes(const world *w, uint32_t layer, int v) {
  const struct pkv_layer_info *in = &w->layer[layer];
  return in->kind != PKV_LAYER_STATE && in->source_layer == layer && !(v && in->k_eq_v);
}

/* Zeroes both tiers and the state slots, reads their layout; 0 when the engine's pool is not
 * what this expects. Before the shadow is made: it sizes it. */
static inline int pool_init(world *w) {
  memset(&w->pool, 0, sizeof w->pool);
  w->pool.struct_size = sizeof w->pool;
  if (!CHECK_OK(pkv_pool_info(w->e, &w->pool)) || !CHECK(w->pool.dtype == PKV_DTYPE_F32) ||
      !CHECK(w->pool.host_num_blocks == w->host_blocks) || !CHECK(w->num_layers <= MAX_POOL_LAYERS))
    return 0;
  for (uint32_t l = 0; l < w->num_layers; l++) {
    memset(&w->layer[l], 0, sizeof w->layer[l]);
    w->layer[l].struct_size = sizeof w->layer[l];
    if (!CHECK_OK(pkv_layer_info(w->e, l, &w->layer[l])) ||
        !CHECK(w->layer[l].kind == PKV_LAYER_STATE || row_bytes(w, l, 0) >= 16))
      return 0;
  }
  w->num_state_slots = w->pool.num_state_slots; /* the shadow's last entries */
  w->num_host_state_slots = w->pool.num_host_state_slots;
  /* after a slot per sequence that may be swapped out: the offloaded checkpoints' */
  w->num_host_ckpt_slots =
      w->num_host_state_slots > w->num_working ? w->num_host_state_slots - w->num_working : 0;
  if (w->num_host_state_slots)
    memset(w->pool.host_state_base, 0, w->pool.state_slot_bytes * w->num_host_state_slots);
  if (w->num_state_slots)
    memset(w->pool.state_base, 0, w->pool.state_slot_bytes * w->num_state_slots);
  memset(w->pool.k_base, 0, w->pool.bytes_per_pool);
  if (w->pool.v_base) memset(w->pool.v_base, 0, w->pool.bytes_per_pool);
  if (w->host_blocks) {
    memset(w->pool.host_k_base, 0, w->pool.host_bytes_per_pool);
    if (w->pool.host_v_base) /* pages (drawn specs) are one array: no V pool */
      memset(w->pool.host_v_base, 0, w->pool.host_bytes_per_pool);
  }
  return 1;
}

/* Where a slot's row of layer l's K (v 0) or V is in a tier. */
static inline unsigned char *pool_row(const world *w, int host, int v, uint32_t l, uint64_t slot) {
  return pool_base(w, host, v, l) + (slot / w->bs) * block_bytes(w, l) +
         (slot % w->bs) * row_bytes(w, l, v);
}

/* A row's second word (rows of 24 bytes or more): which group wrote its tag, so the bytes of a
 * block the store filled say their group (random_store.h). */
static inline uint64_t row_check(uint64_t tag, uint32_t g) {
  return mix64(tag ^ (0x243f6a8885a308d3ull + g));
}

/* A write of group g's layers of the token whose shadow value is ctx (ident: its context in g)
 * into slot of the pool (tier 0): the slot is in a block of g's, laid out as g's layers. */
static inline void pool_write(world *w, int64_t slot, uint64_t ctx, uint32_t g) {
  for (uint32_t l = 0; l < w->num_layers; l++)
    for (int v = 0; v < 2; v++) {
      if (!own_bytes(w, l, v) || w->layer[l].group != g) continue;
      const size_t rb = row_bytes(w, l, v);
      const uint64_t tag = pool_tag(ctx, l, v), check = row_check(tag, g);
      unsigned char *row = pool_row(w, 0, v, l, (uint64_t)slot);
      memcpy(row, &tag, sizeof tag);
      if (rb >= 3 * sizeof tag) memcpy(row + sizeof tag, &check, sizeof check);
      memcpy(row + rb - sizeof tag, &tag, sizeof tag);
    }
}

/* A copy done by the host: the whole block, every layer, K and V; or a whole state slot. */
static inline void pool_copy(world *w, const rcopy *c) {
  if (state_copy(c->kind)) { /* STATE_OUT writes a host state slot, STATE_IN reads one */
    unsigned char *dev = (unsigned char *)w->pool.state_base;
    unsigned char *host = (unsigned char *)w->pool.host_state_base;
    const size_t sb = w->pool.state_slot_bytes;
    memmove((c->kind == PKV_COPY_STATE_OUT ? host : dev) + (size_t)c->dst * sb,
            (c->kind == PKV_COPY_STATE_IN ? host : dev) + (size_t)c->src * sb, sb);
    return;
  }
  const int from = reads_host(c->kind), to = writes_host(c->kind);
  for (uint32_t l = 0; l < w->num_layers; l++)
    for (int v = 0; v < 2; v++)
      if (own_bytes(w, l, v))
        memmove(pool_row(w, to, v, l, (uint64_t)c->dst * w->bs),
                pool_row(w, from, v, l, (uint64_t)c->src * w->bs),
                (size_t)w->bs * row_bytes(w, l, v));
}

/* The shadow learns group g's write of value ctx into slot. A block's bytes are in the layout of
 * the group whose table holds it (pages: another group's layers lie elsewhere in the block), so
 * the first write of a new group makes the block's other slots unknown: no table reads them
 * before they are written again (its earlier group's node left with the block). */
static inline void shadow_write(world *w, int64_t slot, uint64_t ctx, uint32_t g) {
  const int64_t b = slot / w->bs;
  if (w->bgroup[b] != g) {
    w->bgroup[b] = (uint8_t)g;
    for (uint32_t i = 0; i < w->bs; i++) w->shadow[b * w->bs + i] = SLOT_UNKNOWN;
  }
  w->shadow[slot] = ctx;
}

/* Every slot of both tiers holds what the shadow says in the layers of its block's group (up to
 * 3 mismatches reported). */
static inline void check_pool(world *w) {
  uint32_t bad = 0;
  for (int host = 0; host < 2; host++) {
    const uint64_t slots = (uint64_t)(host ? w->host_blocks : w->num_blocks) * w->bs;
    const uint64_t *shadow = w->shadow + (host ? (size_t)w->num_blocks * w->bs : 0);
    const uint8_t *bgroup = w->bgroup + (host ? w->num_blocks : 0);
    for (uint64_t slot = 0; slot < slots; slot++)
      for (uint32_t l = 0; l < w->num_layers && shadow[slot] != SLOT_UNKNOWN; l++)
        for (int v = 0; v < 2; v++) {
          if (!own_bytes(w, l, v) || w->layer[l].group != bgroup[slot / w->bs]) continue;
          const size_t rb = row_bytes(w, l, v);
          const unsigned char *row = pool_row(w, host, v, l, slot);
          uint64_t head, tail;
          memcpy(&head, row, sizeof head);
          memcpy(&tail, row + rb - sizeof tail, sizeof tail);
          const uint64_t want = pool_tag(shadow[slot], l, v);
          if (head == want && tail == want) continue;
          if (bad++ < 3)
            fprintf(stderr,
                    "  %s slot %llu layer %u %c: holds %016llx/%016llx, the shadow %016llx\n",
                    host ? "host-tier" : "pool", (unsigned long long)slot, l, v ? 'V' : 'K',
                    (unsigned long long)head, (unsigned long long)tail, (unsigned long long)want);
        }
  }
  EXPECT(bad == 0);
}

#endif /* PKV_RANDOM_POOL_H */
