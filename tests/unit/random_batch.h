/*
 * random_batch.h - test_random_ops.c's batches: begun on a random subset of the running sequences
 * with random counts (their rows, slots and the copies the view lists checked against the model),
 * their copies done by pkv_batch_copy or by the test, ended (the test writes the K/V and the
 * states as the host's kernels would) or aborted, and the calls refused on a batch's members.
 */
#ifndef PKV_RANDOM_BATCH_H
#define PKV_RANDOM_BATCH_H

#include "random_world.h"

/* Checks member k's rows of the view and queues its writes, each group's into its slot of that
 * group's table (the view's group_slot_mapping); none may go to a shared block. */
static void plan_writes(world *w, const pkv_batch_view *v, uint32_t k, const rseq *s) {
  int32_t table[MAX_LEN];
  int32_t row = v->query_start[k];
  EXPECT(v->seq_ids[k] == s->id);
  EXPECT(v->query_start[k + 1] - row == (int32_t)s->batch_new);
  EXPECT(v->context_lens[k] == (int32_t)(s->computed + s->batch_new));
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t nt = get_gtable(w, s, g, table);
    const int64_t *map = g ? v->group_slot_mapping + (size_t)g * v->num_tokens : v->slot_mapping;
    for (uint32_t j = 0; j < s->batch_new; j++) {
      uint32_t pos = s->computed + j;
      int64_t slot = map[row + (int32_t)j];
      EXPECT(v->positions[row + (int32_t)j] == (int32_t)pos);
      if (!EXPECT(pos / w->bs < nt && table[pos / w->bs] >= 0 &&
                  slot == (int64_t)table[pos / w->bs] * w->bs + pos % w->bs))
        continue;
      if (!EXPECT(w->refs[slot / w->bs] == 1))
        fprintf(stderr, "  write into shared block %lld\n", (long long)(slot / w->bs));
      w->write_slot[w->nwrites] = slot;
      w->write_group[w->nwrites] = (uint8_t)g;
      w->write_ctx[w->nwrites++] = ident(s->ctx[pos], g);
    }
  }
}

static void op_begin(world *w) {
  if (w->batch) return;
  uint64_t ids[MAX_SEQS];
  uint32_t counts[MAX_SEQS], n = 0;
  int idx[MAX_SEQS], all = rnd(w, 4) == 0;
  for (uint32_t i = 0; i < w->nseqs; i++) {
    const rseq *s = &w->seqs[i];
    if (s->preempted || s->swapped || s->computed == s->len || rnd(w, 2)) continue;
    idx[n] = (int)i;
    ids[n] = s->id;
    counts[n++] = all ? s->len - s->computed : 1 + (uint32_t)rnd(w, s->len - s->computed);
  }
  if (n == 0 || !CHECK_OK(pkv_batch_begin(w->e, ids, all ? NULL : counts, n, &w->batch))) return;
  pkv_batch_view v = tu_view(w->batch);
  EXPECT(v.num_seqs == n && v.block_size == w->bs);
  count_refs(w);
  take_copies(w, &v);
  w->nwrites = w->nstate_writes = 0;
  for (uint32_t k = 0; k < n; k++) {
    w->seqs[idx[k]].batch_new = counts[k];
    plan_writes(w, &v, k, &w->seqs[idx[k]]);
    state_member(w, &v, k, &w->seqs[idx[k]]);
  }
  EXPECT(v.num_tokens * w->ngroups == w->nwrites && v.num_kv_groups == w->ngroups);
}

/* pkv does the open batch's copies now (a host without pkv_attention); once only. */
static void op_batch_copy(world *w) {
  if (!w->batch || !CHECK_OK(pkv_batch_copy(w->batch)) || w->copies_done) return;
  do_taken(w, 0);
  w->num_batch_copy++;
}

static void op_end(world *w, int abort) {
  if (!w->batch) return;
  if (abort) {
    pkv_batch_abort(w->batch);
    if (!w->copies_done) untake_copies(w);
  } else {
    if (!w->copies_done && rnd(w, 2)) op_batch_copy(w);
    if (!w->copies_done)
      do_taken(w, 1); /* the host's own kernels: the copies first, then the writes */
    for (uint32_t i = 0; i < w->nwrites; i++)
      pool_write(w, w->write_slot[i], w->write_ctx[i], w->write_group[i]);
    state_write(w);
    if (CHECK_OK(pkv_batch_end(w->batch))) {
      for (uint32_t i = 0; i < w->nwrites; i++)
        shadow_write(w, w->write_slot[i], w->write_ctx[i], w->write_group[i]);
      for (uint32_t i = 0; i < w->nseqs; i++) w->seqs[i].computed += w->seqs[i].batch_new;
      state_batch_ended(w);
    }
  }
  w->nstate_writes = 0;
  w->batch = NULL;
  w->copies_done = 0;
  for (uint32_t i = 0; i < w->nseqs; i++) w->seqs[i].batch_new = 0;
}

/* Calls refused while a batch is open: a second batch, changes to a member. */
static void misuse_member(world *w) {
  int i = pick(w, MEMBER);
  if (!w->batch || i < 0) return;
  uint64_t id = w->seqs[i].id, child = 0, st = world_state(w);
  int32_t t = 1;
  pkv_batch *b = NULL;
  switch (rnd(w, 7)) {
    case 0:
      CHECK_ERR(w->e, pkv_batch_begin(w->e, &id, NULL, 1, &b), PKV_ERR_STATE);
      break;
    case 1:
      CHECK_ERR(w->e, pkv_append(w->e, id, &t, 1), PKV_ERR_STATE);
      break;
    case 2:
      CHECK_ERR(w->e, pkv_fork(w->e, id, &child), PKV_ERR_STATE);
      break;
    case 3:
      CHECK_ERR(w->e, pkv_release(w->e, id), PKV_ERR_STATE);
      break;
    case 4:
      CHECK_ERR(w->e, pkv_swap_out(w->e, id), PKV_ERR_STATE);
      break;
    case 5:
      CHECK_ERR(w->e, pkv_swap_in(w->e, id), PKV_ERR_STATE);
      break;
    default:
      CHECK_ERR(w->e, pkv_preempt(w->e, id), PKV_ERR_STATE);
      break;
  }
  EXPECT(world_state(w) == st);
}

#endif /* PKV_RANDOM_BATCH_H */
