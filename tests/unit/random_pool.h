/*
 * random_pool.h - the real K/V behind random_world.h's shadow. The test is the host's kernels: a
 * token's write puts a tag of its context into its row of every layer, K and V (at the row's start
 * and end), in the pool pkv_pool_info describes; copies are done by pkv (pkv_batch_copy) or by the
 * test (pool_copy: whole blocks, every layer, K and V, between the tiers the kind names).
 * check_pool() compares every slot of both tiers with the shadow. Included by random_world.h.
 *
 * Layout (f32): each of K and V, per tier, is [layers][blocks][block_size][kv_heads][head_dim].
 */
#ifndef PKV_RANDOM_POOL_H
#define PKV_RANDOM_POOL_H

/* What a slot holding context ctx holds on one layer's K (v = 0) or V (v = 1); 0 stays 0 (never
 * written: the pool starts zeroed). */
static inline uint64_t pool_tag(uint64_t ctx, uint32_t layer, int v) {
  return ctx ? ctx + 0x9e3779b97f4a7c15ull * (2u * layer + (uint32_t)v + 1u) : 0;
}

static inline unsigned char *pool_base(const world *w, int host, int v, uint32_t layer) {
  const struct pkv_pool_info *p = &w->pool;
  char *base = host ? (v ? p->host_v_base : p->host_k_base) : (v ? p->v_base : p->k_base);
  const uint64_t layer_stride = host ? p->host_layer_stride : p->layer_stride;
  return (unsigned char *)base + layer * layer_stride * sizeof(float);
}

static inline size_t row_bytes(const world *w) { return w->pool.token_stride * sizeof(float); }

static inline size_t block_bytes(const world *w) { return w->pool.block_stride * sizeof(float); }

/* Zeroes both tiers and reads their layout; 0 when the engine's pool is not what this expects. */
static inline int pool_init(world *w) {
  memset(&w->pool, 0, sizeof w->pool);
  w->pool.struct_size = sizeof w->pool;
  if (!CHECK_OK(pkv_pool_info(w->e, &w->pool)) || !CHECK(w->pool.dtype == PKV_DTYPE_F32) ||
      !CHECK(row_bytes(w) >= 16) || !CHECK(w->pool.host_num_blocks == w->host_blocks))
    return 0;
  memset(w->pool.k_base, 0, w->pool.bytes_per_pool);
  memset(w->pool.v_base, 0, w->pool.bytes_per_pool);
  if (w->host_blocks) {
    memset(w->pool.host_k_base, 0, w->pool.host_bytes_per_pool);
    memset(w->pool.host_v_base, 0, w->pool.host_bytes_per_pool);
  }
  return 1;
}

/* A write of the token whose context is ctx into slot of the pool (tier 0). */
static inline void pool_write(world *w, int64_t slot, uint64_t ctx) {
  const size_t rb = row_bytes(w);
  for (uint32_t l = 0; l < w->pool.num_layers; l++)
    for (int v = 0; v < 2; v++) {
      const uint64_t tag = pool_tag(ctx, l, v);
      unsigned char *row = pool_base(w, 0, v, l) + (size_t)slot * rb;
      memcpy(row, &tag, sizeof tag);
      memcpy(row + rb - sizeof tag, &tag, sizeof tag);
    }
}

/* A copy done by the host: the whole block, every layer, K and V. */
static inline void pool_copy(world *w, const rcopy *c) {
  const int from = reads_host(c->kind), to = writes_host(c->kind);
  const size_t bb = block_bytes(w);
  for (uint32_t l = 0; l < w->pool.num_layers; l++)
    for (int v = 0; v < 2; v++)
      memmove(pool_base(w, to, v, l) + (size_t)c->dst * bb,
              pool_base(w, from, v, l) + (size_t)c->src * bb, bb);
}

/* Every slot of both tiers holds what the shadow says (up to 3 mismatches reported). */
static inline void check_pool(world *w) {
  const size_t rb = row_bytes(w);
  uint32_t bad = 0;
  for (int host = 0; host < 2; host++) {
    const uint64_t slots = (uint64_t)(host ? w->host_blocks : w->num_blocks) * w->bs;
    const uint64_t *shadow = w->shadow + (host ? (size_t)w->num_blocks * w->bs : 0);
    for (uint64_t slot = 0; slot < slots; slot++)
      for (uint32_t l = 0; l < w->pool.num_layers; l++)
        for (int v = 0; v < 2; v++) {
          const unsigned char *row = pool_base(w, host, v, l) + slot * rb;
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
