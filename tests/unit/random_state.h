/*
 * random_state.h - test_random_ops.c's recurrent state (DESIGN.md §13): STATE layers among the
 * drawn ones, and two models beside random_world.h's.
 *
 * A shadow of the state slots (the last entries of the world's shadow): which token context a
 * slot's state has taken in. The test is the host's recurrence: after a batch it writes each
 * member's working slot (pkv_batch_view.state_slots) with a digest of the context of its last
 * computed token (state_fill: in every part of every STATE layer, the context, then a pattern of
 * it); PKV_COPY_STATE copies (a fork's, a checkpoint taken, a checkpoint restored) are counted
 * and learnt from the views like offloads (random_copies.h), and done in the shadow and, by the
 * host or by pkv_batch_copy, in the slots. So after every operation each running sequence's slot
 * holds, once the pending copies are done, exactly the context of its computed tokens: an
 * admission's restored slot the context of its hit, and a checkpoint the context of the boundary
 * its node ends at. The real slots are compared with the shadow byte for byte. With a host tier
 * the shadow also holds the host state slots (pkv_pool_info.host_state_base): a swap-out's
 * STATE_OUT copy gives one the context of the device slot it came from, and the STATE_IN of the
 * swap-in brings it back to the working slot the sequence then holds.
 *
 * A model of the admission rule, from the KV events (random_ckpt.h): the nodes holding KV and
 * the nodes holding a checkpoint, in LRU order. A prompt hits at the longest boundary h whose
 * blocks < h hold KV and whose node h - 1 holds a checkpoint (the restore is counted, and the KV
 * up to the longest cached run is counted as recomputed); a batch that ends a member on a
 * boundary its policy wants leaves a checkpoint there, evicting the least recently used one when
 * the slots are full, and the events must say exactly that.
 */
#ifndef PKV_RANDOM_STATE_H
#define PKV_RANDOM_STATE_H

#include "random_world.h"

/* The run's STATE argument, 1 .. 3, is 1 + PROMPT_END, EVERY or NONE. */
static inline int state_policy(const world *w) { return w->state - 1; }

/* A STATE layer: part 0 (f32 [2, 4 or 6][2 or 3]) and part 1 (a drawn dtype, [1 or 2][2 or
 * 4][4 or 8]), one of them or both; every part a multiple of 8 bytes and at least 16. */
static inline void draw_state_layer(world *w, pkv_layer_spec *s) {
  memset(s, 0, sizeof *s);
  s->kind = PKV_LAYER_STATE;
  const uint64_t parts = rnd(w, 3); /* 0 both, 1 the conv part alone, 2 the SSM part alone */
  if (parts != 2) {
    s->state_dtype[0] = PKV_DTYPE_F32;
    s->state_shape[0] = 2 * (1 + (uint32_t)rnd(w, 3)), s->state_shape[1] = 2 + (uint32_t)rnd(w, 2);
  }
  if (parts != 1) {
    static const uint32_t dtypes[3] = {PKV_DTYPE_F32, PKV_DTYPE_F16, PKV_DTYPE_BF16};
    uint32_t *shape = &s->state_shape[PKV_MAX_STATE_DIMS];
    s->state_dtype[1] = dtypes[rnd(w, 3)];
    shape[0] = 1 + (uint32_t)rnd(w, 2), shape[1] = 2u << rnd(w, 2), shape[2] = 4u << rnd(w, 2);
  }
}

/* The engine's state: working slots for every sequence the test keeps and the probe, a few
 * checkpoint slots (so they run out), the policy the run's argument names, KV events on. */
static inline void state_params(world *w, pkv_engine_params *p) {
  w->num_working = MAX_SEQS + 1;
  w->ckpt_interval = 1 + (uint32_t)rnd(w, 3);
  p->max_num_seqs = w->num_working;
  p->state_checkpoint_policy = (uint32_t)state_policy(w);
  if (state_policy(w) == PKV_STATE_CHECKPOINT_EVERY)
    p->state_checkpoint_interval = w->ckpt_interval;
  p->num_state_checkpoints =
      state_policy(w) == PKV_STATE_CHECKPOINT_NONE ? 0 : 2 + (uint32_t)rnd(w, 5);
  p->enable_kv_events = 1;
  printf("state: policy %d, interval %u, %u checkpoint slots\n", state_policy(w),
         p->state_checkpoint_interval, p->num_state_checkpoints);
}

/* ---------------------------------------------------------------- the slots' bytes */

/* Word i of part `part` of STATE layer l, in a slot whose state has taken in context ctx. */
static inline uint64_t state_word(uint64_t ctx, uint32_t l, int part, uint64_t i) {
  if (!ctx) return 0; /* never written: the slots start zeroed */
  return i == 0 ? ctx : mix64(ctx + 0x9e3779b97f4a7c15ull * (2u * l + (uint32_t)part + 1u) + i);
}

/* host: a host state slot (pkv_pool_info.host_state_base), laid out as a device one */
static inline unsigned char *state_part_at(const world *w, int host, int32_t slot, uint32_t l,
                                           int part) {
  return (unsigned char *)(host ? w->pool.host_state_base : w->pool.state_base) +
         (size_t)slot * w->pool.state_slot_bytes + w->layer[l].state_offset[part];
}

static inline unsigned char *state_part(const world *w, int32_t slot, uint32_t l, int part) {
  return state_part_at(w, 0, slot, l, part);
}

/* The host's recurrence has taken in context ctx: slot's every state part says so. */
static inline void state_fill(world *w, int32_t slot, uint64_t ctx) {
  for (uint32_t l = 0; l < w->num_layers; l++)
    for (int part = 0; part < PKV_MAX_STATE_PARTS; part++)
      for (uint64_t i = 0; i < w->layer[l].state_bytes[part] / 8; i++) {
        const uint64_t word = state_word(ctx, l, part, i);
        memcpy(state_part(w, slot, l, part) + 8 * i, &word, 8);
      }
}

/* Every slot, device and host, holds what the shadow says (up to 3 mismatches reported). */
static inline void check_state_pool(world *w) {
  uint32_t bad = 0;
  const uint32_t n = w->num_state_slots + w->num_host_state_slots;
  for (uint32_t e = 0; e < n; e++) {
    const int host = e >= w->num_state_slots;
    const int32_t slot = (int32_t)(host ? e - w->num_state_slots : e);
    const uint64_t ctx = w->shadow[state0(w) + e]; /* the host slots' entries follow */
    for (uint32_t l = 0; l < w->num_layers; l++)
      for (int part = 0; part < PKV_MAX_STATE_PARTS; part++)
        for (uint64_t i = 0; i < w->layer[l].state_bytes[part] / 8; i++) {
          uint64_t got;
          memcpy(&got, state_part_at(w, host, slot, l, part) + 8 * i, 8);
          if (got == state_word(ctx, l, part, i)) continue;
          if (bad++ < 3)
            fprintf(stderr,
                    "  %sstate slot %d layer %u part %d word %llu: %016llx, the shadow %016llx\n",
                    host ? "host " : "", slot, l, part, (unsigned long long)i,
                    (unsigned long long)got, (unsigned long long)ctx);
        }
  }
  EXPECT(bad == 0);
}

#include "random_ckpt.h"

/* Learns s's working slot from a batch of one of its tokens, aborted at once (it changes
 * nothing); the view also lists every copy queued, learnt as random_copies.h does. */
static inline void state_probe(world *w, rseq *s) {
  if (w->batch || s->preempted || s->swapped || s->computed == s->len) return;
  note_tier_copies(w); /* the copies counted so far: the view lists them */
  const uint64_t before = world_state(w);
  pkv_batch *b = NULL;
  const uint32_t one = 1;
  if (!CHECK_OK(pkv_batch_begin(w->e, &s->id, &one, 1, &b))) return;
  const pkv_batch_view v = tu_view(b);
  learn_copies(w, &v);
  if (EXPECT(v.state_slots != NULL)) s->state_slot = v.state_slots[0];
  pkv_batch_abort(b);
  EXPECT(world_state(w) == before);
  w->num_state_probes++;
}

/* Every running sequence whose slot is not known yet and that a batch can take: probed. */
static inline void state_probes(world *w) {
  if (!w->state) return;
  for (uint32_t i = 0; i < w->nseqs; i++)
    if (w->seqs[i].state_slot < 0) state_probe(w, &w->seqs[i]);
}

/* After pkv admitted s (allocate or resume) with cached tokens: the hit is the model's, the
 * stats count a restore or the fallback, and its slot is learnt (its content is checked with
 * the world's). */
static inline void state_admitted(world *w, rseq *s, uint32_t cached, const state_want *want) {
  s->state_slot = -1;
  s->branch = want->kv > want->hit ? want->kv : 0;
  if (!w->state) return;
  if (!EXPECT(cached == want->hit * w->bs))
    fprintf(stderr, "  seq %llu admitted with %u cached tokens, the model %u (KV of %u blocks)\n",
            (unsigned long long)s->id, cached, want->hit * w->bs, want->kv);
  const pkv_stats st = tu_stats(w->e);
  EXPECT(st.num_state_restores - want->st.num_state_restores == (want->hit > 0));
  EXPECT(st.state_fallback_tokens - want->st.state_fallback_tokens ==
         (uint64_t)(want->kv - want->hit) * w->bs);
  if (want->hit && cached == want->hit * w->bs) {
    w->num_host_restores += node_find(w->ckpt_nodes, w->nckpt, want->anchor) < 0;
    ckpt_touch(w, want->anchor);
  }
  EXPECT(st.num_state_restores_from_host == w->num_host_restores);
  w->num_state_hits += want->hit > 0;
  w->num_state_fallbacks += want->kv > want->hit;
  state_probe(w, s);
}

/* A fork: the child's slot is not known yet; the copy into it is queued, listed by a later view. */
static inline void state_forked(world *w, rseq *child) {
  child->state_slot = -1;
  if (!w->state) return;
  w->nextra++;
  w->nunknown++;
}

/* Member k of the view: its slot (the one learnt, if any), and the state write its batch makes. */
static inline void state_member(world *w, const pkv_batch_view *v, uint32_t k, rseq *s) {
  if (!w->state) return;
  if (!EXPECT(v->state_slots != NULL)) return;
  const int32_t slot = v->state_slots[k];
  if (!EXPECT(slot >= 0 && (uint32_t)slot < w->num_working)) return;
  if (s->state_slot >= 0) EXPECT(slot == s->state_slot);
  s->state_slot = slot;
  w->state_write_id[w->nstate_writes] = s->id;
  w->state_write_slot[w->nstate_writes] = slot;
  w->state_write_ctx[w->nstate_writes++] = s->ctx[s->computed + s->batch_new - 1];
}

/* The host's recurrence runs (after the copies): the members' slots take in their new tokens. */
static inline void state_write(world *w) {
  for (uint32_t i = 0; i < w->nstate_writes; i++)
    state_fill(w, w->state_write_slot[i], w->state_write_ctx[i]);
}

/* Does s's policy want a checkpoint at boundary h >= 1 (blocks)? The last its prompt (its tokens
 * at admission) reaches, the branch, every interval-th with EVERY. */
static inline int state_wanted(const world *w, const rseq *s, uint32_t h) {
  if (state_policy(w) == PKV_STATE_CHECKPOINT_NONE) return 0;
  return h == s->prompt_len / w->bs || h == s->branch ||
         (state_policy(w) == PKV_STATE_CHECKPOINT_EVERY && h % w->ckpt_interval == 0);
}

/* The batch ended (its members' computed counts already advanced, batch_new still set): the
 * shadow takes the writes, and each member ending on a boundary its policy wants, in the batch's
 * order, holds a checkpoint there: one it touches, or a new one in a free slot or in the least
 * recently used one's (random_ckpt.h: the events must say exactly that). */
static inline void state_batch_ended(world *w) {
  for (uint32_t i = 0; i < w->nstate_writes; i++) {
    w->shadow[state0(w) + (size_t)w->state_write_slot[i]] = w->state_write_ctx[i];
    if (!w->state) continue;
    const rseq *s = NULL;
    for (uint32_t k = 0; k < w->nseqs && !s; k++)
      if (w->seqs[k].id == w->state_write_id[i]) s = &w->seqs[k];
    const uint32_t h = s ? s->computed / w->bs : 0;
    if (!s || s->computed % w->bs || !h || !state_wanted(w, s, h)) continue;
    uint64_t hashes[MAX_LEN];
    seq_hashes(s, w->bs, h, hashes);
    ckpt_capture(w, hashes[h - 1]);
    w->num_captures_seen++;
  }
  w->nstate_writes = 0;
  if (w->state) ckpt_expect_done(w);
}

/* After every operation: the events' model agrees with the stats (a checkpoint only on a node
 * holding KV), working slots are distinct, each running sequence's slot holds (once the pending
 * copies are done) the context of its computed tokens, and the real slots hold the shadow. */
static inline void state_check(world *w, const uint64_t *eff) {
  if (!w->state) return;
  state_drain(w);
  const pkv_stats st = tu_stats(w->e);
  EXPECT(st.num_state_checkpoints_held == w->nckpt);
  EXPECT(st.num_host_state_checkpoints_held == w->nckpt_host);
  EXPECT(st.num_state_checkpoints_offloaded == w->num_ckpt_offloads);
  for (uint32_t i = 0; i < w->nckpt; i++) EXPECT(kv_held(w, w->ckpt_nodes[i]));
  for (uint32_t i = 0; i < w->nckpt_host; i++) EXPECT(kv_held(w, w->ckpt_host_nodes[i]));
  uint64_t used = 0; /* working slots as a bit set: MAX_SEQS + 1 of them */
  for (uint32_t i = 0; i < w->nseqs; i++) {
    const rseq *s = &w->seqs[i];
    if (s->preempted || s->swapped || s->state_slot < 0) continue;
    EXPECT(!(used >> s->state_slot & 1));
    used |= 1ull << s->state_slot;
    if (!eff || s->computed == 0) continue;
    const uint64_t got = eff[state0(w) + (size_t)s->state_slot];
    if (!EXPECT(got == s->ctx[s->computed - 1]))
      fprintf(stderr, "  seq %llu (%u computed): its slot %d holds another context%s\n",
              (unsigned long long)s->id, s->computed, s->state_slot,
              got ? "" : " (zeros: never written)");
  }
  check_state_pool(w);
}

static inline void state_report(const world *w) {
  if (!w->state) return;
  const pkv_stats st = tu_stats(w->e);
  printf("state: %llu hits from a checkpoint, %llu fallbacks (%llu tokens), %llu checkpoints "
         "taken, %llu evicted (%llu for room), %llu held, %llu captures checked, %llu slot "
         "probes\n",
         (unsigned long long)w->num_state_hits, (unsigned long long)w->num_state_fallbacks,
         (unsigned long long)st.state_fallback_tokens,
         (unsigned long long)st.num_state_checkpoints_taken,
         (unsigned long long)st.num_state_checkpoint_evictions,
         (unsigned long long)w->num_lru_evictions,
         (unsigned long long)st.num_state_checkpoints_held,
         (unsigned long long)w->num_captures_seen, (unsigned long long)w->num_state_probes);
  EXPECT(st.num_state_restores == w->num_state_hits);
  if (w->host_blocks) {
    printf("state: %llu swaps moved a working state (STATE_OUT / STATE_IN), %llu checkpoints "
           "offloaded, %llu restored from the host\n",
           (unsigned long long)w->num_state_swaps, (unsigned long long)w->num_ckpt_offloads,
           (unsigned long long)w->num_host_restores);
    CHECK(w->num_state_swaps > 0);
    if (w->num_host_ckpt_slots) CHECK(w->num_ckpt_offloads > 0 && w->num_host_restores > 0);
  }
  if (state_policy(w) == PKV_STATE_CHECKPOINT_NONE)
    CHECK(w->num_hits == 0 && st.num_state_checkpoints_taken == 0);
  else
    CHECK(w->num_state_hits > 0 && w->num_state_fallbacks > 0 && w->num_captures_seen > 0 &&
          st.num_state_checkpoint_evictions > w->num_lru_evictions &&
          (w->num_host_ckpt_slots ? w->num_ckpt_offloads > 0 : w->num_lru_evictions > 0));
}

#endif /* PKV_RANDOM_STATE_H */
