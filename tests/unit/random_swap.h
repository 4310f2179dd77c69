/*
 * random_swap.h - test_random_ops.c's operations of the host tier: swap-out and swap-in checked
 * against the stats (a block whose KV the other tier still holds is not copied again, all or
 * nothing on NO_SPACE, UNSUPPORTED without a host tier), their copies queued unknown until a view
 * lists them (random_copies.h), and the calls a sequence's state refuses.
 */
#ifndef PKV_RANDOM_SWAP_H
#define PKV_RANDOM_SWAP_H

#include "random_world.h"

/* With STATE layers a swap moves the working state too: one STATE_OUT copy into a host state
 * slot (out), one STATE_IN into a working slot (in), counted here and learnt from the next view
 * (random_copies.h); the slot it comes back to is learnt by a probe. */
static void swap_state(world *w, rseq *s) {
  if (!w->state) return;
  w->nextra++, w->nunknown++;
  s->state_slot = -1;
  w->num_state_swaps++;
}

/* Running -> swapped: the blocks its tables hold (every group's: not those a window gave back)
 * are copied (a block whose KV a sharer's earlier swap-out already holds is not), the host tier
 * loses as many free blocks. */
static void op_swap_out(world *w) {
  int i = pick(w, RUNNING | IDLE);
  if (i < 0 || w->ncands == MAX_CANDS) return;
  rseq *s = &w->seqs[i];
  int32_t old[MAX_GROUPS * MAX_LEN];
  const uint32_t n = held_list(w, s, old);
  EXPECT(n == held_blocks(w, s));
  const pkv_stats st0 = tu_stats(w->e);
  const uint64_t state = world_state(w);
  const pkv_status r = pkv_swap_out(w->e, s->id);
  if (w->host_blocks == 0 || r == PKV_ERR_NO_SPACE) {
    CHECK_ERR(w->e, r, w->host_blocks ? PKV_ERR_NO_SPACE : PKV_ERR_UNSUPPORTED);
    EXPECT(world_state(w) == state);
    EXPECT(w->host_blocks == 0 || st0.num_host_free_blocks < n);
    w->num_unsupported += w->host_blocks == 0;
    w->num_swap_no_space += w->host_blocks != 0;
    return;
  }
  if (!CHECK_OK(r)) return;
  const pkv_stats st1 = tu_stats(w->e);
  const uint32_t k = (uint32_t)(st1.num_swapped_out_blocks - st0.num_swapped_out_blocks);
  EXPECT(k <= n && st0.num_host_free_blocks - st1.num_host_free_blocks == k);
  /* Every block is given up at once (its copy comes first in the next step); those a sharer
   * keeps do not become free. */
  EXPECT(st1.num_free_blocks >= st0.num_free_blocks &&
         st1.num_free_blocks - st0.num_free_blocks <= n);
  s->swapped = 1;
  w->num_swap_out++;
  w->num_twin_shares += n - k;
  queue_unknown(w, PKV_COPY_SWAP_OUT, k, old, n);
  swap_state(w, s);
}

/* Swapped -> running, all or nothing: new pool blocks for the held blocks whose KV is not still
 * in the pool (a sharer's), each with a copy; computed tokens stay computed, and every group's
 * given-back entries stay -1 (check_tables). */
static void op_swap_in(world *w) {
  int i = pick(w, SWAPPED);
  if (i < 0 || w->ncands == MAX_CANDS) return;
  rseq *s = &w->seqs[i];
  const uint32_t nb = held_blocks(w, s);
  const pkv_stats st0 = tu_stats(w->e);
  const uint64_t state = world_state(w);
  const pkv_status r = pkv_swap_in(w->e, s->id);
  if (r == PKV_ERR_NO_SPACE) {
    CHECK_ERR(w->e, r, PKV_ERR_NO_SPACE);
    EXPECT(world_state(w) == state);
    EXPECT(st0.num_free_blocks < nb);
    w->num_swap_in_no_space++;
    return;
  }
  if (!CHECK_OK(r)) return;
  s->swapped = 0;
  int32_t table[MAX_GROUPS * MAX_LEN];
  const uint32_t n = held_list(w, s, table);
  const pkv_stats st1 = tu_stats(w->e);
  const uint32_t k = (uint32_t)(st1.num_swapped_in_blocks - st0.num_swapped_in_blocks);
  EXPECT(n == nb && k <= nb && st0.num_free_blocks - st1.num_free_blocks == k);
  EXPECT(st1.num_host_free_blocks >= st0.num_host_free_blocks);
  w->num_swap_in++;
  w->num_twin_shares += nb - k;
  queue_unknown(w, PKV_COPY_SWAP_IN, k, table, n);
  swap_state(w, s);
}

/* Calls refused by a sequence's state: a swapped one cannot grow, fork, compute, be preempted,
 * resumed or swapped out again; a preempted one has nothing to swap; a running one is not
 * swapped or preempted. */
static void misuse_state(world *w) {
  int i = pick(w, IDLE);
  if (i < 0) return;
  const rseq *s = &w->seqs[i];
  uint64_t id = s->id, child = 0, st = world_state(w);
  int32_t t = 1;
  pkv_batch *b = NULL;
  uint32_t cached = 0;
  const uint64_t r = rnd(w, 6);
  if (s->swapped) {
    switch (r) {
      case 0:
        CHECK_ERR(w->e, pkv_append(w->e, id, &t, 1), PKV_ERR_STATE);
        break;
      case 1:
        CHECK_ERR(w->e, pkv_fork(w->e, id, &child), PKV_ERR_STATE);
        break;
      case 2:
        CHECK_ERR(w->e, pkv_batch_begin(w->e, &id, NULL, 1, &b), PKV_ERR_STATE);
        break;
      case 3:
        CHECK_ERR(w->e, pkv_preempt(w->e, id), PKV_ERR_STATE);
        break;
      case 4:
        CHECK_ERR(w->e, pkv_resume(w->e, id, &cached), PKV_ERR_STATE);
        break;
      default:
        CHECK_ERR(w->e, pkv_swap_out(w->e, id), PKV_ERR_STATE);
        break;
    }
  } else if (s->preempted) {
    CHECK_ERR(w->e, r % 2 ? pkv_swap_out(w->e, id) : pkv_swap_in(w->e, id), PKV_ERR_STATE);
  } else {
    CHECK_ERR(w->e, r % 2 ? pkv_swap_in(w->e, id) : pkv_resume(w->e, id, &cached), PKV_ERR_STATE);
  }
  EXPECT(world_state(w) == st);
}

#endif /* PKV_RANDOM_SWAP_H */
