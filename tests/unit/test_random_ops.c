/* Randomized operation sequences against the model of random_world.h: allocate (prompts from a few
 * shared prefixes, 3 salts, an adapter id and a multimodal item now and then), append, fork,
 * release, preempt/resume, swap-out/swap-in (a host tier of HOST_BLOCKS, small enough to run out; none: swap-out is UNSUPPORTED and changes nothing),
 * batches begun on random subsets with random counts, their copies done by pkv_batch_copy or by
 * the test, ended or aborted, calls refused on batch members and on sequences in the wrong state,
 * and NO_SPACE when either tier runs out. After every operation the whole engine is checked
 * against the model, the real K/V of both tiers included.
 *
 * With STATE (1 + a PKV_STATE_CHECKPOINT_* policy) some drawn layers are recurrent: the test
 * keeps a shadow of the state slots and a model of the admission rule (random_state.h).
 *
 * SPECS: 0 the flat fields' layers, 1 drawn layer specs of one full-attention group
 * (random_specs.h), 2-5 layouts of several KV groups: windows, sliding and chunked specs,
 * heterogeneous heads (random_groups.h), each group's table and blocks in the shadow.
 *
 * Usage: test_random_ops SEED BLOCK_SIZE NUM_BLOCKS NUM_OPS [DEBUG_FLAGS [HOST_BLOCKS [OFFLOAD
 *        [STORE [SPECS [STATE]]]]]] */
#include "random_world.h"
#include "random_specs.h"
#include "random_swap.h"
#include "random_batch.h"
#include "random_groups.h"

enum { NUM_BASES = 4, BASE_LEN = 48, ALPHABET = 6 };

static int32_t bases[NUM_BASES][BASE_LEN];

static void random_tokens(world *w, int32_t *t, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) t[i] = (int32_t)rnd(w, ALPHABET);
}

/* No false hit: a new sequence's cached tokens hold its contexts (later, when copies are
 * pending that no view has listed yet: check_world checks every computed token then). */
static void check_hit(world *w, const rseq *s, uint32_t cached) {
  note_tier_copies(w); /* loads of host-tier hits, offloads of the blocks it evicted */
  store_resync(w);     /* blocks fetched from the store into the host tier */
  const uint64_t *shadow = effective(w);
  if (shadow) check_slots(w, s, 0, cached, shadow);
}

static void op_allocate(world *w) {
  if (w->nseqs == MAX_SEQS) return;
  rseq *s = &w->seqs[w->nseqs];
  memset(s, 0, sizeof *s);
  s->salt = (int)rnd(w, 3);
  int32_t t[BASE_LEN + 4];
  uint32_t n = 1 + (uint32_t)rnd(w, 40), extra = (uint32_t)rnd(w, 4);
  memcpy(t, bases[rnd(w, NUM_BASES)], n * sizeof t[0]);
  random_tokens(w, t + n, extra);
  n += extra;
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = salt_name(s->salt);
  sp.cache_salt_len = s->salt ? 1 : 0;
  /* An adapter now and then; an item (a multimodal key) of 6 tokens at one of a few places, so
   * prompts of one base meet it again, with the same key or the other. */
  s->lora = rnd(w, 4) == 0;
  const uint32_t item_draw = (uint32_t)rnd(w, 6), item_start = 4 * (uint32_t)rnd(w, 3);
  s->item = item_draw >= 4 && item_start + 6 <= n ? (int)item_draw - 3 : 0;
  s->item_start = item_start, s->item_end = item_start + 6;
  pkv_extra_key item;
  memset(&item, 0, sizeof item);
  item.start_token = s->item_start, item.end_token = s->item_end;
  item.key = item_name(s->item), item.key_len = 6;
  sp.extra_keys = s->item ? &item : NULL;
  sp.num_extra_keys = s->item ? 1 : 0;
  sp.lora_id = (uint64_t)s->lora;
  seq_push(s, t, n); /* counted in the world once admitted */
  s->prompt_len = n;
  const state_want want = w->state ? state_expect(w, s) : (state_want){0};
  uint32_t q_blocks = 0, q_cached = 0, cached = 0, free_before = free_blocks(w);
  CHECK_OK(pkv_allocate_query(w->e, t, n, &sp, &q_blocks, &q_cached));
  uint64_t st = world_state(w);
  pkv_status r = pkv_allocate(w->e, t, n, &sp, &s->id, &cached);
  if (r == PKV_ERR_NO_SPACE) {
    w->num_no_space++;
    EXPECT(q_blocks > free_before);
    EXPECT(world_state(w) == st);
    return;
  }
  if (!CHECK_OK(r)) return;
  /* The query does not ask the store: a store hit needs as many blocks, or fewer in a group that
   * gives blocks back (it takes only the window's before the hit). */
  const uint32_t taken = free_before - free_blocks(w);
  EXPECT(w->store && gives_back(w) ? taken <= q_blocks
                                   : q_blocks <= free_before && taken == q_blocks);
  EXPECT(w->store ? cached >= q_cached : cached == q_cached);
  EXPECT(cached % w->bs == 0 && cached <= (n - 1) / w->bs * w->bs);
  s->computed = cached;
  w->nseqs++;
  w->num_hits += cached > 0;
  state_admitted(w, s, cached, &want);
  check_hit(w, s, cached);
}

static void op_append(world *w) {
  int i = pick(w, RUNNING | IDLE);
  if (i < 0) return;
  rseq *s = &w->seqs[i];
  uint32_t n = 1 + (uint32_t)rnd(w, w->bs + 2);
  if (n > MAX_LEN - s->len) n = MAX_LEN - s->len;
  if (n == 0) return;
  int32_t t[MAX_LEN], old[MAX_GROUPS][MAX_LEN];
  random_tokens(w, t, n);
  uint32_t n_old = get_gtables(w, s, old);
  uint64_t st = world_state(w);
  pkv_status r = pkv_append(w->e, s->id, t, n);
  if (r == PKV_ERR_NO_SPACE) {
    w->num_no_space++;
    EXPECT(world_state(w) == st);
    return;
  }
  if (!CHECK_OK(r)) return;
  seq_push(s, t, n);
  note_copies(w, s, old, n_old);
}

static void op_fork(world *w) {
  int i = pick(w, IDLE);
  if (i < 0 || w->nseqs == MAX_SEQS) return;
  rseq *p = &w->seqs[i], *c = &w->seqs[w->nseqs];
  uint64_t child = 0;
  if (p->computed < p->len || p->swapped) {
    uint64_t st = world_state(w);
    CHECK_ERR(w->e, pkv_fork(w->e, p->id, &child), PKV_ERR_STATE);
    EXPECT(world_state(w) == st);
    return;
  }
  if (!CHECK_OK(pkv_fork(w->e, p->id, &child))) return;
  *c = *p;
  c->id = child;
  w->nseqs++;
  state_forked(w, c);
  int32_t tp[MAX_LEN], tc[MAX_LEN];
  for (uint32_t g = 0; g < w->ngroups; g++) {
    uint32_t np = get_gtable(w, p, g, tp), nc = get_gtable(w, c, g, tc);
    EXPECT(np == nc && memcmp(tp, tc, np * sizeof tp[0]) == 0);
  }
}

static void op_release(world *w) {
  int i = pick(w, IDLE);
  if (i < 0) return;
  const int swapped = w->seqs[i].swapped;
  const uint64_t host_free = tu_stats(w->e).num_host_free_blocks;
  if (!CHECK_OK(pkv_release(w->e, w->seqs[i].id))) return;
  w->seqs[i] = w->seqs[--w->nseqs];
  w->num_swapped_release += (uint64_t)swapped;
  EXPECT(swapped ? tu_stats(w->e).num_host_free_blocks >= host_free
                 : tu_stats(w->e).num_host_free_blocks == host_free);
}

/* With STATE layers, a cut below a running sequence's computed tokens rolls back to a
 * checkpoint: pkv admits its first n tokens again, keeping its working slot, so the hit is the
 * model's (its own blocks and checkpoints are in the cache); NO_SPACE changes nothing. */
static void roll_back(world *w, rseq *s, uint32_t n) {
  const uint32_t len = s->len;
  s->len = n;
  const state_want want = state_expect(w, s);
  s->len = len;
  const uint64_t st = world_state(w);
  const pkv_status r = pkv_truncate(w->e, s->id, n);
  if (r == PKV_ERR_NO_SPACE) {
    w->num_no_space++;
    EXPECT(world_state(w) == st);
    return;
  }
  if (!CHECK_OK(r)) return;
  const uint32_t cached = tu_info(w->e, s->id).num_computed_tokens;
  s->len = n;
  s->prompt_len = n; /* its prompt, as an admission of n tokens */
  s->computed = cached;
  w->num_truncates++;
  w->num_hits += cached > 0;
  state_admitted(w, s, cached, &want);
  check_hit(w, s, cached);
}

/* Rollback: a running or preempted sequence outside the batch keeps a random prefix of its
 * tokens; a swapped one is refused. */
static void op_truncate(world *w) {
  int i = pick(w, IDLE);
  if (i < 0) return;
  rseq *s = &w->seqs[i];
  const uint32_t n = 1 + (uint32_t)rnd(w, s->len);
  if (s->swapped) {
    const uint64_t st = world_state(w);
    CHECK_ERR(w->e, pkv_truncate(w->e, s->id, n), PKV_ERR_STATE);
    EXPECT(world_state(w) == st);
    return;
  }
  if (w->state && !s->preempted && n < s->computed) {
    roll_back(w, s, n);
    return;
  }
  /* The model mirrors which queued copy-on-write pkv drops: every queued copy must be known. */
  if (w->nunknown && !w->batch) probe_copies(w);
  if (w->nunknown) return;
  int32_t before[MAX_GROUPS][MAX_LEN];
  const uint32_t nb = s->preempted ? 0 : get_gtables(w, s, before);
  if (!s->preempted && n < s->computed && takes_back(w, s, n)) {
    take_back(w, s, n, before, nb);
    return;
  }
  const uint32_t free0 = free_blocks(w);
  if (!CHECK_OK(pkv_truncate(w->e, s->id, n))) return;
  EXPECT(free_blocks(w) >= free0);
  s->len = n;
  if (s->computed > n) s->computed = n;
  w->num_truncates++;
  undo_dropped(w, s, before, nb);
}

static void op_preempt(world *w) {
  int i = pick(w, RUNNING | IDLE);
  if (i >= 0 && CHECK_OK(pkv_preempt(w->e, w->seqs[i].id))) {
    w->seqs[i].preempted = 1;
    w->seqs[i].computed = 0;
    w->seqs[i].state_slot = -1; /* given back */
    w->num_preempt++;
  }
}

static void op_resume(world *w) {
  int i = pick(w, PREEMPTED);
  if (i < 0) return;
  rseq *s = &w->seqs[i];
  s->prompt_len = s->len; /* its prompt when re-admitted: every token it has */
  const state_want want = w->state ? state_expect(w, s) : (state_want){0};
  uint64_t st = world_state(w);
  uint32_t cached = 0;
  pkv_status r = pkv_resume(w->e, s->id, &cached);
  if (r == PKV_ERR_NO_SPACE) {
    w->num_no_space++;
    EXPECT(world_state(w) == st);
    return;
  }
  if (!CHECK_OK(r)) return;
  EXPECT(cached % w->bs == 0 && cached <= (s->len - 1) / w->bs * w->bs);
  s->preempted = 0;
  s->computed = cached;
  w->num_hits += cached > 0;
  state_admitted(w, s, cached, &want);
  check_hit(w, s, cached);
}

static void step(world *w) {
  uint64_t r = rnd(w, 118);
  if (r < 18)
    op_allocate(w);
  else if (r < 36)
    op_append(w);
  else if (r < 52)
    op_begin(w);
  else if (r < 64)
    op_end(w, 0);
  else if (r < 67)
    op_end(w, 1);
  else if (r < 73)
    op_fork(w);
  else if (r < 85)
    op_release(w);
  else if (r < 89)
    op_preempt(w);
  else if (r < 95)
    op_resume(w);
  else if (r < 98)
    misuse_member(w);
  else if (r < 100)
    misuse_state(w);
  else if (r < 105)
    op_swap_out(w);
  else if (r < 110)
    op_swap_in(w);
  else if (r < 114)
    op_batch_copy(w);
  else
    op_truncate(w);
}

static void report(const world *w, uint32_t ops) {
  printf("%u ops: %llu NO_SPACE, %llu admissions with hits, %llu copies, %llu preemptions\n", ops,
         (unsigned long long)w->num_no_space, (unsigned long long)w->num_hits,
         (unsigned long long)w->num_cow, (unsigned long long)w->num_preempt);
  printf("swap: %llu out, %llu in, NO_SPACE %llu out / %llu in, %llu blocks shared with a twin, "
         "%llu released swapped, %llu batch_copy, %llu probes, %llu UNSUPPORTED\n",
         (unsigned long long)w->num_swap_out, (unsigned long long)w->num_swap_in,
         (unsigned long long)w->num_swap_no_space, (unsigned long long)w->num_swap_in_no_space,
         (unsigned long long)w->num_twin_shares, (unsigned long long)w->num_swapped_release,
         (unsigned long long)w->num_batch_copy, (unsigned long long)w->num_probes,
         (unsigned long long)w->num_unsupported);
  /* what the run is for */
  CHECK(w->num_no_space > 0 && w->num_preempt > 0 && w->num_truncates > 0);
  CHECK(w->num_hits > 0 || state_policy(w) == PKV_STATE_CHECKPOINT_NONE);
  CHECK(w->num_cow > 0 || w->bs == 1); /* block size 1 has no partly filled block */
  if (w->host_blocks)
    CHECK(w->num_swap_out > 0 && w->num_swap_in > 0 && w->num_swap_no_space > 0 &&
          w->num_swap_in_no_space > 0 && w->num_twin_shares > 0 && w->num_swapped_release > 0 &&
          w->num_batch_copy > 0 && w->num_probes > 0);
  else
    CHECK(w->num_unsupported > 0);
  const pkv_stats st = tu_stats(w->e);
  printf("offload: %llu blocks offloaded, %llu loaded (%llu hit tokens from the host tier), "
         "%llu evicted from the host tier\n",
         (unsigned long long)st.num_offloaded_blocks, (unsigned long long)st.num_loaded_blocks,
         (unsigned long long)st.host_hit_tokens, (unsigned long long)st.num_host_evictions);
  if (w->host_blocks && w->offload)
    CHECK(st.num_offloaded_blocks > 0 && st.num_loaded_blocks > 0 && st.num_host_evictions > 0);
  if (w->store) {
    printf(
        "store: %llu blocks looked up, %llu fetched (%llu hit tokens), %llu written, %llu host slots synced\n",
        (unsigned long long)st.num_store_lookups, (unsigned long long)st.num_store_hits,
        (unsigned long long)st.store_hit_tokens, (unsigned long long)st.num_store_puts,
        (unsigned long long)w->num_store_synced);
    CHECK(st.num_store_hits > 0 && st.num_store_rejected == 0 && st.num_store_errors == 0);
  }
  state_report(w);
  groups_report(w);
}

/* Everything released and one step's copies done (the probe's batch, aborted after
 * pkv_batch_copy): both tiers are free again, but for the probe's block. */
static void drain(world *w) {
  op_end(w, 0);
  while (w->nseqs)
    if (!CHECK_OK(pkv_release(w->e, w->seqs[--w->nseqs].id))) return;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(w->e, &w->probe, NULL, 1, &b))) return;
  CHECK_OK(pkv_batch_copy(b));
  pkv_batch_abort(b);
  CHECK_ENGINE(w->e);
  const pkv_stats st = tu_stats(w->e);
  CHECK(st.num_used_blocks == w->ngroups && st.num_host_free_blocks == w->host_blocks &&
        st.num_seqs == 1 && st.num_swapped_seqs == 0); /* the probe's block in each group */
}

static int setup(world *w, uint32_t flags, int specs) {
  pkv_engine_params p;
  tu_params(&p, w->bs, w->num_blocks);
  if (specs >= SPECS_WINDOWS)
    draw_group_specs(w, &p, specs);
  else if (specs || w->state)
    draw_specs(w, &p);
  if (w->state) state_params(w, &p);
  w->num_layers = p.num_layers;
  p.max_model_len = MAX_LEN;
  p.debug_flags = flags;
  p.host_num_blocks = w->host_blocks;
  p.host_offload = (uint32_t)w->offload;
  static pkv_store_params store;
  if (w->store) {
    pkv_store_params_init(&store, sizeof store);
    store.kind = PKV_STORE_CALLBACK;
    store.callbacks = &rstore_callbacks;
    store.write_queue_blocks = 1u << 16;
    p.store = &store;
  }
  if (!(w->e = tu_engine_p(&p)) || !pool_init(w)) return 0;
  w->shadow = calloc(shadow_len(w), sizeof w->shadow[0]);
  w->eff = calloc(shadow_len(w), sizeof w->eff[0]);
  w->refs = calloc(w->num_blocks, sizeof w->refs[0]);
  w->bgroup = calloc((size_t)w->num_blocks + w->host_blocks, 1);
  if (!CHECK(w->shadow && w->eff && w->refs && w->bgroup) || !groups_init(w, &p)) return 0;
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = "probe";
  sp.cache_salt_len = 5;
  const int32_t t = 0;
  pkv_batch *b = NULL; /* the probe's first view says how many KV groups there are */
  if (!CHECK_OK(pkv_allocate(w->e, &t, 1, &sp, &w->probe, NULL)) ||
      !CHECK_OK(pkv_batch_begin(w->e, &w->probe, NULL, 1, &b)))
    return 0;
  w->num_kv_groups = tu_view(b).num_kv_groups;
  CHECK(w->num_kv_groups == w->ngroups);
  pkv_batch_abort(b);
  return 1;
}

static void run(uint64_t seed, uint32_t bs, uint32_t num_blocks, uint32_t num_ops, uint32_t flags,
                uint32_t host_blocks, int offload, int store, int specs, int state) {
  printf(
      "seed %llu, block_size %u, %u blocks, %u ops, debug_flags %u, %u host-tier blocks, offload %d, "
      "store %d, state %d\n",
      (unsigned long long)seed, bs, num_blocks, num_ops, flags, host_blocks, offload, store, state);
  world *w = calloc(1, sizeof *w);
  if (!CHECK(w != NULL)) return;
  w->rng = seed, w->bs = bs, w->num_blocks = num_blocks, w->host_blocks = host_blocks;
  w->offload = offload;
  w->store = store;
  w->state = state;
  if (!setup(w, flags, specs)) num_ops = 0;
  for (int k = 0; k < NUM_BASES; k++) random_tokens(w, bases[k], BASE_LEN);
  int failed_before = tu_failed_;
  uint32_t op = 0;
  for (; op < num_ops && tu_failed_ == failed_before; op++) {
    step(w);
    check_world(w, op % 64 == 0);
  }
  if (tu_failed_ != failed_before)
    fprintf(stderr, "seed %llu: first failure at operation %u\n", (unsigned long long)seed, op);
  else if (num_ops) {
    report(w, op);
    drain(w);
  }
  pkv_batch_abort(w->batch);
  pkv_engine_destroy(w->e);
  free(w->shadow);
  free(w->eff);
  free(w->refs);
  free(w->bgroup);
  free(w);
}

int main(int argc, char **argv) {
  if (!CHECK(argc >= 5)) {
    fprintf(
        stderr,
        "usage: %s SEED BLOCK_SIZE NUM_BLOCKS NUM_OPS [DEBUG_FLAGS [HOST_BLOCKS [OFFLOAD [STORE "
        "[SPECS [STATE]]]]]]\n",
        argv[0]);
    return tu_summary();
  }
  run(strtoull(argv[1], NULL, 0), (uint32_t)strtoul(argv[2], NULL, 0),
      (uint32_t)strtoul(argv[3], NULL, 0), (uint32_t)strtoul(argv[4], NULL, 0),
      argc > 5 ? (uint32_t)strtoul(argv[5], NULL, 0) : 0,
      argc > 6 ? (uint32_t)strtoul(argv[6], NULL, 0) : 0, argc > 7 ? atoi(argv[7]) : 1,
      argc > 8 ? atoi(argv[8]) : 0, argc > 9 ? atoi(argv[9]) : 0, argc > 10 ? atoi(argv[10]) : 0);
  rstore_free();
  return tu_summary();
}
