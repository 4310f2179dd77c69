/* Swapping (DESIGN.md §11, tier 1): pkv_swap_out moves a sequence's KV to host-tier blocks and
 * pkv_swap_in brings it back, through copies the next batch lists (copy_kind) and does first
 * (pkv_batch_copy here, as a host without pkv_attention would). The KV that comes back is the KV
 * that left, byte for byte; a block shared by a fork moves once; NO_SPACE and bad states change
 * nothing. */
#include "test_util.h"

enum { BS = 4, BLOCKS = 12, HOST_BLOCKS = 6, D = 8, KVH = 2, LAYERS = 2 };

static pkv_engine *engine(uint32_t host_blocks) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS); /* f32, 2 layers, 2 kv heads of 8 */
  p.host_num_blocks = host_blocks;
  return tu_engine_p(&p);
}

/* Runs a batch of seq's uncomputed tokens whose only work is the listed copies (each of a kind in
 * the mask 1 << PKV_COPY_*); returns how many there were. */
static uint32_t run_copies(pkv_engine *e, uint64_t seq, unsigned kinds) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return 0;
  const pkv_batch_view v = tu_view(b);
  for (uint32_t i = 0; i < v.num_copies; i++) CHECK(kinds >> v.copy_kind[i] & 1);
  CHECK_OK(pkv_batch_copy(b));
  CHECK_OK(pkv_batch_copy(b)); /* once only */
  CHECK_OK(pkv_batch_end(b));
  return v.num_copies;
}

static void test_round_trip(void) {
  pkv_engine *e = engine(HOST_BLOCKS);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 10, NULL);
  tu_compute1(e, a);
  tu_kv_pattern(e, a, 7, 10, 0);
  const uint32_t free0 = (uint32_t)tu_stats(e).num_free_blocks;
  CHECK_OK(pkv_swap_out(e, a));
  struct pkv_seq_info in = tu_info(e, a);
  CHECK_EQ_INT(in.kv_tier, PKV_TIER_HOST);
  CHECK_EQ_INT(in.num_host_blocks, 3);
  CHECK_EQ_INT(in.num_blocks, 0);
  CHECK_EQ_INT(in.num_computed_tokens, 10);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_swapped_seqs, 1);
  CHECK_EQ_INT(st.num_host_free_blocks, HOST_BLOCKS - 3);
  CHECK_EQ_INT(st.num_swapped_out_blocks, 3);
  CHECK_EQ_INT(st.num_free_blocks, free0 + 3); /* free at once: the copies come first */
  CHECK_ENGINE(e);
  /* A swapped sequence cannot grow, fork, be batched or swapped out again. */
  uint64_t child = 0;
  pkv_batch *b = NULL;
  CHECK_ERR(e, pkv_append(e, a, t, 1), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_fork(e, a, &child), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_batch_begin(e, &a, NULL, 1, &b), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_swap_out(e, a), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_resume(e, a, NULL), PKV_ERR_STATE);
  /* The next step does the copies; the pool blocks come back, and others overwrite them. */
  const uint64_t o = tu_alloc(e, t + 10, 6, NULL);
  CHECK_EQ_INT(run_copies(e, o, 1u << PKV_COPY_SWAP_OUT), 3);
  const uint64_t fill = tu_alloc(e, t, 16, NULL); /* takes the freed blocks */
  tu_compute1(e, fill);
  tu_kv_pattern(e, fill, 9, 16, 0);
  CHECK_OK(pkv_release(e, fill));
  /* Back: its blocks hold exactly what they held. */
  CHECK_OK(pkv_swap_in(e, a));
  in = tu_info(e, a);
  CHECK_EQ_INT(in.kv_tier, PKV_TIER_DEVICE);
  CHECK_EQ_INT(in.num_blocks, 3);
  CHECK_EQ_INT(in.num_host_blocks, 0);
  CHECK_EQ_INT(tu_stats(e).num_swapped_in_blocks, 3);
  CHECK_OK(pkv_append(e, a, t, 1));
  CHECK_EQ_INT(run_copies(e, a, 1u << PKV_COPY_SWAP_IN), 3);
  CHECK_EQ_INT(tu_stats(e).num_host_free_blocks, HOST_BLOCKS);
  CHECK_EQ_INT(tu_kv_pattern(e, a, 7, 10, 1), 0);
  CHECK_ENGINE(e);
  /* Its full blocks are cached again: the same prompt hits them. */
  uint32_t cached = 0;
  const uint64_t again = tu_alloc_salt(e, t, 9, NULL, &cached);
  CHECK_EQ_INT(cached, 8);
  CHECK_OK(pkv_release(e, again));
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, o));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A forked pair: swapped out one after the other, its shared blocks move once and stay shared;
 * swapped in while the sharer still holds the same pool blocks, nothing is copied. */
static void test_shared_blocks_move_once(void) {
  pkv_engine *e = engine(HOST_BLOCKS);
  if (!e) return;
  int32_t t[12];
  tu_fill(t, 12, 1);
  const uint64_t a = tu_alloc(e, t, 10, NULL);
  tu_compute1(e, a);
  tu_kv_pattern(e, a, 3, 10, 0);
  uint64_t f = 0;
  CHECK_OK(pkv_fork(e, a, &f));
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_EQ_INT(tu_stats(e).num_swapped_out_blocks, 3);
  CHECK_OK(pkv_swap_out(e, f)); /* its blocks are a's: their host copies are shared */
  CHECK_EQ_INT(tu_stats(e).num_swapped_out_blocks, 3);
  CHECK_EQ_INT(tu_stats(e).num_host_free_blocks, HOST_BLOCKS - 3);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_swap_in(e, f)); /* nobody holds the pool blocks any more: copied back */
  CHECK_EQ_INT(tu_stats(e).num_swapped_in_blocks, 3);
  CHECK_OK(pkv_swap_in(e, a)); /* f holds the same KV in the pool: shared, nothing copied */
  CHECK_EQ_INT(tu_stats(e).num_swapped_in_blocks, 3);
  CHECK_EQ_INT(tu_stats(e).num_host_free_blocks, HOST_BLOCKS);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_append(e, f, t, 1)); /* copy-on-write of the shared partial block */
  CHECK_EQ_INT(
      run_copies(e, f, 1u << PKV_COPY_SWAP_OUT | 1u << PKV_COPY_SWAP_IN | 1u << PKV_COPY_COW),
      3 + 3 + 1);
  CHECK_EQ_INT(tu_kv_pattern(e, f, 3, 10, 1), 0);
  CHECK_EQ_INT(tu_kv_pattern(e, a, 3, 10, 1), 0);
  /* Swapped out while its sharer stays: a's blocks are copied. Swapped back in while f still
   * holds the two full ones unchanged, only its own partial block is copied back. */
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_EQ_INT(tu_stats(e).num_swapped_out_blocks, 6);
  CHECK_OK(pkv_swap_in(e, a));
  CHECK_EQ_INT(tu_stats(e).num_swapped_in_blocks, 4);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_append(e, a, t, 1));
  CHECK_EQ_INT(run_copies(e, a, 1u << PKV_COPY_SWAP_OUT | 1u << PKV_COPY_SWAP_IN), 3 + 1);
  CHECK_EQ_INT(tu_kv_pattern(e, a, 3, 10, 1), 0);
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, f));
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_free_blocks, HOST_BLOCKS);
  CHECK_EQ_INT(st.num_free_blocks, BLOCKS);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Swapped back in before its swap-out copies are done: its KV comes back through the host blocks
 * those copies fill first (the step's copies run in order, out then in), its uncomputed tokens are
 * written after them, and pkv_engine_check holds throughout. */
static void test_back_before_copies(void) {
  pkv_engine *e = engine(HOST_BLOCKS);
  if (!e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t a = tu_alloc(e, t, 10, NULL);
  const uint32_t eight = 8;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &a, &eight, 1, &b)) || !CHECK_OK(pkv_batch_end(b))) return;
  tu_kv_pattern(e, a, 5, 8, 0);
  const uint64_t fresh = tu_alloc(e, t + 10, 3, NULL); /* nothing computed at all */
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_OK(pkv_swap_out(e, fresh));
  CHECK_ENGINE(e);
  CHECK_OK(pkv_swap_in(e, fresh));
  CHECK_OK(pkv_swap_in(e, a));
  CHECK_EQ_INT(tu_stats(e).num_swapped_in_blocks, 3 + 1);
  CHECK_EQ_INT(tu_info(e, a).num_computed_tokens, 8);
  CHECK_ENGINE(e);
  /* and a's last 2 tokens */
  CHECK_EQ_INT(run_copies(e, a, 1u << PKV_COPY_SWAP_OUT | 1u << PKV_COPY_SWAP_IN), 2 * (3 + 1));
  CHECK_EQ_INT(tu_kv_pattern(e, a, 5, 8, 1), 0);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, fresh));
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_host_free_blocks, HOST_BLOCKS);
  CHECK_EQ_INT(st.num_free_blocks, BLOCKS);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Released while its swap-out copies are pending: its pool blocks are free (cached: a prompt hits
 * them) and its host blocks too; the copies still run, into blocks nobody reads. (When a swap
 * held its pool blocks until the copies ran, a released swapped sequence left them held: with no
 * other sequence, the pool was lost for good.) */
static void test_released_before_copies(void) {
  pkv_engine *e = engine(HOST_BLOCKS);
  if (!e) return;
  int32_t t[4 * BLOCKS];
  tu_fill(t, 4 * BLOCKS, 1);
  const uint64_t a = tu_alloc(e, t, 4 * (BLOCKS / 2), NULL); /* half the pool: 6 blocks */
  tu_compute1(e, a);
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_OK(pkv_release(e, a));
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_used_blocks, 0);
  CHECK_EQ_INT(st.num_cached_blocks, BLOCKS / 2);
  CHECK_EQ_INT(st.num_host_free_blocks, HOST_BLOCKS);
  CHECK_ENGINE(e);
  uint32_t cached = 0;
  const uint64_t all = tu_alloc_salt(e, t, 4 * BLOCKS, NULL, &cached); /* the whole pool */
  CHECK_EQ_INT(cached, 4 * (BLOCKS / 2));
  /* The copies still run (into free host blocks) before any write of the next step. */
  CHECK_EQ_INT(run_copies(e, all, 1u << PKV_COPY_SWAP_OUT), 6);
  CHECK_OK(pkv_release(e, all));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Too few blocks in the tier moved to, no host tier, bad states: refused, nothing changed. */
static void test_refusals(void) {
  pkv_engine *none = engine(0);
  pkv_engine *e = engine(2);
  if (!none || !e) return;
  int32_t t[16];
  tu_fill(t, 16, 1);
  const uint64_t x = tu_alloc(none, t, 5, NULL);
  CHECK_ERR(none, pkv_swap_out(none, x), PKV_ERR_UNSUPPORTED);
  CHECK_EQ_INT(tu_info(none, x).kv_tier, PKV_TIER_DEVICE);
  CHECK_ERR(none, pkv_swap_in(none, x), PKV_ERR_STATE);
  CHECK_ERR(none, pkv_swap_out(none, 999), PKV_ERR_NOT_FOUND);
  pkv_engine_destroy(none);

  const uint64_t a = tu_alloc(e, t, 12, NULL); /* 3 blocks, the host tier has 2 */
  const uint64_t st0 = tu_state(e, &a, 1);
  CHECK_ERR(e, pkv_swap_out(e, a), PKV_ERR_NO_SPACE);
  CHECK(tu_state(e, &a, 1) == st0);
  const uint64_t s = tu_alloc(e, t, 6, NULL); /* 2 blocks: fits */
  tu_compute1(e, s);
  CHECK_OK(pkv_swap_out(e, s));
  CHECK_OK(pkv_preempt(e, a));
  CHECK_ERR(e, pkv_swap_out(e, a), PKV_ERR_STATE); /* preempted: nothing to move */
  /* Swap-in needs 2 free pool blocks: take all but one. */
  int32_t many[4 * BLOCKS];
  tu_fill(many, 4 * BLOCKS, 100);
  const uint64_t big = tu_alloc(e, many, 4 * (BLOCKS - 1), NULL);
  const uint64_t st1 = tu_state(e, &s, 1);
  CHECK_ERR(e, pkv_swap_in(e, s), PKV_ERR_NO_SPACE);
  CHECK(tu_state(e, &s, 1) == st1);
  CHECK_EQ_INT(tu_info(e, s).kv_tier, PKV_TIER_HOST);
  CHECK_OK(pkv_release(e, big));
  /* A request of the scheduler is moved by the scheduler only. */
  uint64_t r = 0;
  CHECK_OK(pkv_submit(e, t, 3, NULL, &r));
  CHECK_ERR(e, pkv_swap_out(e, r), PKV_ERR_STATE);
  /* Released while swapped: its host blocks come back. */
  CHECK_OK(pkv_release(e, s));
  CHECK_EQ_INT(tu_stats(e).num_host_free_blocks, 2);
  CHECK_EQ_INT(tu_stats(e).num_swapped_seqs, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_round_trip);
  TU_RUN(test_shared_blocks_move_once);
  TU_RUN(test_back_before_copies);
  TU_RUN(test_released_before_copies);
  TU_RUN(test_refusals);
  return tu_summary();
}
