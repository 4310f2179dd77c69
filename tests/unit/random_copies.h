/*
 * random_copies.h - random_world.h's model of pkv's queue of block copies (pkv.h, pkv_batch_view
 * copy_src / copy_dst / copy_kind): queued in pkv's order as the operations that make them
 * happen, learnt exactly from the batch view that lists them, done in the shadow (and, by the
 * host, in the real pool) in that order. Included by random_world.h.
 *
 * The shadow holds both tiers: [num_blocks * bs] pool slots, then [host_blocks * bs] host-tier
 * slots; a copy's ids are in the tiers its kind names.
 *
 * Offloads and loads (PKV_COPY_OFFLOAD / LOAD) depend on pkv's LRU lists, which the model does
 * not keep: it counts them in the stats after each operation (note_tier_copies) and learns them,
 * where they fall among the copies it predicts, from the next view. Their content is then
 * checked like every other copy's: a sequence admitted with a host-tier hit must hold exactly its
 * contexts once the listed copies are done.
 *
 * State copies (PKV_COPY_STATE, slot -> slot; STATE_OUT / STATE_IN, to and from a host state
 * slot) are placed the same way: counted (a fork's, a swap's, and the checkpoints taken and
 * restored in the stats), learnt from the view; the shadow's last num_state_slots +
 * num_host_state_slots entries are the slots, device then host (random_state.h).
 */
#ifndef PKV_RANDOM_COPIES_H
#define PKV_RANDOM_COPIES_H

static inline size_t shadow_len(const world *w) {
  return ((size_t)w->num_blocks + w->host_blocks) * w->bs + w->num_state_slots +
         w->num_host_state_slots;
}

/* Where the state slots' entries begin in a shadow. */
static inline size_t state0(const world *w) {
  return ((size_t)w->num_blocks + w->host_blocks) * w->bs;
}

/* Where host state slot `slot`'s entry is in a shadow: after the device's. */
static inline size_t host_state0(const world *w) { return state0(w) + w->num_state_slots; }

/* A copy the model counts but cannot place before a view lists it. */
static inline int counted_copy(int32_t kind) { return tier_copy(kind) || state_copy(kind); }

/* A state copy's source (dst 0) or destination (dst 1) entry in a shadow. */
static inline size_t state_entry(const world *w, const rcopy *c, int dst) {
  const int host = dst ? c->kind == PKV_COPY_STATE_OUT : c->kind == PKV_COPY_STATE_IN;
  return (host ? host_state0(w) : state0(w)) + (size_t)(dst ? c->dst : c->src);
}

static inline int copy_valid(const world *w, const rcopy *c) {
  if (state_copy(c->kind)) {
    const uint32_t src_n =
        c->kind == PKV_COPY_STATE_IN ? w->num_host_state_slots : w->num_state_slots;
    const uint32_t dst_n =
        c->kind == PKV_COPY_STATE_OUT ? w->num_host_state_slots : w->num_state_slots;
    return c->src >= 0 && c->dst >= 0 && (c->kind != PKV_COPY_STATE || c->src != c->dst) &&
           (uint32_t)c->src < src_n && (uint32_t)c->dst < dst_n;
  }
  const uint32_t src_n = reads_host(c->kind) ? w->host_blocks : w->num_blocks;
  const uint32_t dst_n = writes_host(c->kind) ? w->host_blocks : w->num_blocks;
  return c->kind >= PKV_COPY_COW && c->kind <= PKV_COPY_LOAD && c->src >= 0 && c->dst >= 0 &&
         (uint32_t)c->src < src_n && (uint32_t)c->dst < dst_n &&
         (c->kind != PKV_COPY_COW || c->src != c->dst);
}

static inline void copy_block(world *w, uint64_t *shadow, const rcopy *c) {
  if (!EXPECT(copy_valid(w, c))) return;
  if (state_copy(c->kind)) {
    shadow[state_entry(w, c, 1)] = shadow[state_entry(w, c, 0)];
    return;
  }
  const size_t host0 = (size_t)w->num_blocks * w->bs;
  const uint64_t *from = shadow + (reads_host(c->kind) ? host0 : 0) + (size_t)c->src * w->bs;
  uint64_t *to = shadow + (writes_host(c->kind) ? host0 : 0) + (size_t)c->dst * w->bs;
  memmove(to, from, w->bs * sizeof to[0]);
  if (shadow == w->shadow) /* done: the block's layout goes with its bytes */
    w->bgroup[(writes_host(c->kind) ? w->num_blocks : 0) + (uint32_t)c->dst] =
        w->bgroup[(reads_host(c->kind) ? w->num_blocks : 0) + (uint32_t)c->src];
}

/* What both tiers will hold once the copies taken and queued are done, in order: the content a
 * sequence's computed tokens refer to. NULL while some queued copy is not known yet. */
static inline const uint64_t *effective(world *w) {
  if (w->nunknown) return NULL;
  if (w->ntaken + w->nqueued == 0) return w->shadow;
  memcpy(w->eff, w->shadow, shadow_len(w) * sizeof w->eff[0]);
  for (uint32_t i = 0; i < w->ntaken; i++) copy_block(w, w->eff, &w->taken[i]);
  for (uint32_t i = 0; i < w->nqueued; i++) copy_block(w, w->eff, &w->queued[i]);
  return w->eff;
}

static inline void queue_copy(world *w, rcopy c) {
  if (EXPECT(w->nqueued < MAX_COPIES)) w->queued[w->nqueued++] = c;
}

/* k copies of kind queued by a swap of a sequence whose held pool blocks (every group's) are (or
 * were) table[0..n). The caller checked w->ncands < MAX_CANDS. */
static inline void queue_unknown(world *w, int32_t kind, uint32_t k, const int32_t *table,
                                 uint32_t n) {
  if (k == 0) return;
  memcpy(w->cands[w->ncands], table, n * sizeof table[0]);
  w->ncand_len[w->ncands] = n;
  for (uint32_t i = 0; i < k; i++) queue_copy(w, (rcopy){-1, -1, kind, (int32_t)w->ncands});
  w->nunknown += k;
  w->ncands++;
}

/* Offloads and loads queued since the last call, counted in the stats, and the state copies of
 * checkpoints taken, offloaded and restored: unknown until a view lists them. */
static inline void note_tier_copies(world *w) {
  const pkv_stats st = tu_stats(w->e);
  const uint64_t total = st.num_offloaded_blocks + st.num_loaded_blocks +
                         st.num_state_checkpoints_taken + st.num_state_checkpoints_offloaded +
                         st.num_state_restores;
  EXPECT(total >= w->tier_copies);
  w->nextra += (uint32_t)(total - w->tier_copies);
  w->nunknown += (uint32_t)(total - w->tier_copies);
  w->tier_copies = total;
}

/* Every group's table of s: old[g][0..n). */
static inline uint32_t get_gtables(world *w, const rseq *s, int32_t (*out)[MAX_LEN]) {
  uint32_t n = 0;
  for (uint32_t g = 0; g < w->ngroups; g++) n = get_gtable(w, s, g, out[g]);
  return n;
}

/* After an append to s whose tables were old[g][0..n_old): a changed entry is a copy-on-write
 * copy, queued in pkv for the next batch, group after group. Only the last old block may
 * change. */
static inline void note_copies(world *w, const rseq *s, int32_t (*old)[MAX_LEN], uint32_t n_old) {
  int32_t table[MAX_LEN];
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t n = get_gtable(w, s, g, table);
    EXPECT(n >= n_old);
    for (uint32_t k = 0; k < n_old && k < n; k++) {
      if (table[k] == old[g][k]) continue;
      EXPECT(k + 1 == n_old && old[g][k] >= 0 && table[k] >= 0);
      queue_copy(w, (rcopy){old[g][k], table[k], PKV_COPY_COW, -1});
      w->num_cow++;
    }
  }
}

static inline int in_cand(const world *w, int32_t cand, int32_t block) {
  for (uint32_t i = 0; i < w->ncand_len[cand]; i++)
    if (w->cands[cand][i] == block) return 1;
  return 0;
}

/* The next queued copy of a class (state copies, or block copies) from *at on; NULL at the end. */
static inline const rcopy *next_of(const world *w, uint32_t *at, int state) {
  while (*at < w->nqueued && state_copy(w->queued[*at].kind) != state) (*at)++;
  return *at < w->nqueued ? &w->queued[*at] : NULL;
}

/* A view lists exactly the queued copies, in order within each class (the block copies, the
 * state copies: they touch different memory, so pkv may list one class first): the known ones as they are, the unknown ones
 * with their kind and a pool block of the swapped table, and the offloads and loads counted
 * (anywhere among them); from now on all are known. */
static inline void learn_copies(world *w, const pkv_batch_view *v) {
  EXPECT(w->ntaken == 0);
  if (!EXPECT(v->num_copies == w->nqueued + w->nextra)) {
    fprintf(stderr,
            "  the view lists %u copies, the model queued %u and counted %u offloads, loads and "
            "state copies\n",
            v->num_copies, w->nqueued, w->nextra);
    for (uint32_t k = 0; k < v->num_copies && k < 8; k++)
      fprintf(stderr, "  listed %d -> %d kind %d\n", v->copy_src[k], v->copy_dst[k],
              v->copy_kind[k]);
    return;
  }
  static rcopy learnt[MAX_COPIES];
  uint32_t m = 0, extra = 0, at[2] = {0, 0};
  for (uint32_t k = 0; k < v->num_copies; k++) {
    const rcopy got = {v->copy_src[k], v->copy_dst[k], v->copy_kind[k], -1};
    learnt[k] = got;
    const int cls = state_copy(got.kind);
    const rcopy *q = next_of(w, &at[cls], cls);
    const int matches =
        q && got.kind == q->kind &&
        (q->cand < 0 ? got.src == q->src && got.dst == q->dst
                     : in_cand(w, q->cand, writes_host(q->kind) ? got.src : got.dst));
    if (!matches && counted_copy(got.kind) && extra < w->nextra) {
      extra++; /* an offload, a load or a state copy the model counted but could not place */
      if (!EXPECT(copy_valid(w, &got)))
        fprintf(stderr, "  copy %u: listed %d -> %d kind %d\n", k, got.src, got.dst, got.kind);
      continue;
    }
    if (!EXPECT(q != NULL)) return;
    m++, at[cls]++;
    if (!(EXPECT(matches) && EXPECT(copy_valid(w, &got))))
      fprintf(stderr, "  copy %u: listed %d -> %d kind %d, the model %d -> %d kind %d\n", k,
              got.src, got.dst, got.kind, q->src, q->dst, q->kind);
    w->nunknown -= q->cand >= 0;
  }
  EXPECT(extra == w->nextra && m == w->nqueued);
  w->nunknown -= extra;
  EXPECT(w->nunknown == 0);
  memcpy(w->queued, learnt, v->num_copies * sizeof learnt[0]);
  w->nqueued = v->num_copies;
  w->nunknown = w->nextra = 0;
  w->ncands = 0;
}

/* No batch is open: the copies are learnt from a batch of the probe, aborted at once (the abort
 * gives them back, nothing changes). */
static inline void probe_copies(world *w) {
  const uint64_t st = world_state(w);
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(w->e, &w->probe, NULL, 1, &b))) return;
  const pkv_batch_view v = tu_view(b);
  learn_copies(w, &v);
  pkv_batch_abort(b);
  EXPECT(world_state(w) == st);
  w->num_probes++;
}

/* pkv_truncate gave block back: the last queued copy-on-write into it goes from the queue (it is
 * not a batch's: those are taken), unless a later queued copy reads the block (pkv's rule). */
static inline void undo_copy_into(world *w, int32_t block) {
  for (uint32_t i = w->nqueued; i-- > 0;) {
    const rcopy *c = &w->queued[i];
    if (c->kind != PKV_COPY_COW || c->dst != block) continue;
    for (uint32_t j = i + 1; j < w->nqueued; j++)
      if (!reads_host(w->queued[j].kind) && w->queued[j].src == block) return;
    memmove(&w->queued[i], &w->queued[i + 1], (w->nqueued - i - 1) * sizeof w->queued[0]);
    w->nqueued--;
    return;
  }
}

/* A batch begins: it takes over every queued copy. (Whether a copy gives a block the content its
 * holders need is checked after every operation: check_slots reads the shadow with the queued
 * copies applied, so a copy into a block a new owner took would be caught there. A copy-on-write
 * into a shared block is right when a truncation made its sequence forkable before the copy ran.) */
static inline void take_copies(world *w, const pkv_batch_view *v) {
  learn_copies(w, v);
  memcpy(w->taken, w->queued, w->nqueued * sizeof w->taken[0]);
  w->ntaken = w->nqueued;
  w->nqueued = 0;
  w->copies_done = 0;
}

/* The open batch's copies are done, in order: in the shadow, and in the real pool when the host
 * does them (pkv did them otherwise). */
static inline void do_taken(world *w, int by_host) {
  for (uint32_t i = 0; i < w->ntaken; i++) {
    copy_block(w, w->shadow, &w->taken[i]);
    if (by_host && copy_valid(w, &w->taken[i])) pool_copy(w, &w->taken[i]);
  }
  w->ntaken = 0;
  w->copies_done = 1;
}

/* The batch was aborted before its copies were done: they go back to the head of the queue. */
static inline void untake_copies(world *w) {
  if (!EXPECT(w->ntaken + w->nqueued <= MAX_COPIES)) return;
  memmove(w->queued + w->ntaken, w->queued, w->nqueued * sizeof w->queued[0]);
  memcpy(w->queued, w->taken, w->ntaken * sizeof w->queued[0]);
  w->nqueued += w->ntaken;
  w->ntaken = 0;
}

#endif /* PKV_RANDOM_COPIES_H */
