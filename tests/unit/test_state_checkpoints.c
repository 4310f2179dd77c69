/* Checkpoints of the recurrent state (DESIGN.md §13) through pkv.h: a batch that ends on a block
 * boundary the policy wants copies the working slot into a checkpoint slot (a PKV_COPY_STATE the
 * next batch lists first; bytes checked); a later prompt sharing the tokens up to it hits there and
 * its working slot starts from a copy of it; a prompt whose cached KV reaches a boundary without a
 * checkpoint falls back (to an earlier checkpoint, or token 0) and leaves one there; checkpoints are
 * LRU among themselves, go with their block, and are KV events of the group after the KV groups;
 * pkv_step's chunks end on wanted boundaries; policy NONE hits nothing; pkv_truncate of computed
 * tokens rolls back to a checkpoint. */
#include "test_util.h"

#define BS 4
#define LAYERS 2
#define SLOT_BYTES 256

static pkv_layer_spec specs_[LAYERS];

/* f32, blocks of 4 tokens, max_num_seqs 3. Layer 0 full attention (flat: 2 kv heads x 8), layer 1
 * STATE with one f32 [4][4] part (64 bytes, a 256-byte slot). window: layer 0 slides instead. */
static pkv_engine *engine_w(uint32_t policy, uint32_t interval, uint32_t checkpoints,
                            uint32_t window, uint32_t events) {
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.num_layers = LAYERS;
  p.max_num_seqs = 3;
  p.state_checkpoint_policy = policy;
  p.state_checkpoint_interval = interval;
  p.num_state_checkpoints = checkpoints;
  p.enable_kv_events = events;
  p.kv_events_capacity = events ? 256 : 0;
  memset(specs_, 0, sizeof specs_);
  if (window) specs_[0].attention = PKV_ATTENTION_SLIDING, specs_[0].window = window;
  specs_[1].kind = PKV_LAYER_STATE;
  specs_[1].state_dtype[1] = PKV_DTYPE_F32;
  specs_[1].state_shape[4] = 4, specs_[1].state_shape[5] = 4;
  p.layer_specs = specs_;
  p.layer_spec_size = sizeof(pkv_layer_spec);
  return tu_engine_p(&p);
}

static pkv_engine *engine(uint32_t policy, uint32_t checkpoints) {
  return engine_w(policy, 0, checkpoints, 0, 0);
}

/* One batch of n of seq's tokens (0: all uncomputed). The host's "kernel": the state after it is
 * filled with a byte naming the tokens taken in, so a checkpoint names the prefix it holds.
 * Returns the batch's working slot; *copies (nullable) gets its PKV_COPY_STATE copies (src, dst). */
static int32_t run(pkv_engine *e, uint64_t seq, uint32_t n, int32_t copies[][2], uint32_t *nc) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, n ? &n : NULL, 1, &b))) return -1;
  const pkv_batch_view v = tu_view(b);
  uint32_t k = 0;
  for (uint32_t i = 0; i < v.num_copies; i++)
    if (v.copy_kind[i] == PKV_COPY_STATE && copies) {
      copies[k][0] = v.copy_src[i], copies[k][1] = v.copy_dst[i];
      k++;
    }
  if (nc) *nc = k;
  CHECK_OK(pkv_batch_copy(b));
  const int32_t slot = v.state_slots[0];
  const uint32_t done = tu_info(e, seq).num_computed_tokens + v.num_tokens;
  memset(tu_state_slot(e, slot, 0), (int)done, SLOT_BYTES);
  CHECK_OK(pkv_batch_end(b));
  return slot;
}

/* PROMPT_END: a prompt of 10 tokens leaves its checkpoint at boundary 2 (8 tokens) when its batch
 * ends there; the same prompt hits 8 tokens and its slot starts from the checkpoint's bytes. A
 * batch that runs past the boundary leaves none. */
static void test_capture_and_restore(void) {
  pkv_engine *e = engine(PKV_STATE_CHECKPOINT_PROMPT_END, 2);
  if (!e) return;
  int32_t t[10];
  tu_fill(t, 10, 100);
  const uint64_t a = tu_alloc(e, t, 10, NULL);
  run(e, a, 8, NULL, NULL);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_checkpoints_taken, 1);
  CHECK_EQ_INT(st.num_state_checkpoints_held, 1);
  int32_t c[4][2];
  uint32_t nc = 0;
  const int32_t wa = run(e, a, 0, c, &nc); /* the capture is done first, then a moves on */
  CHECK_EQ_INT(nc, 1);
  const int32_t cp = c[0][1];
  CHECK(c[0][0] == wa && cp >= 3 && cp < 5); /* working slots 0..2, checkpoints 3..4 */
  CHECK(tu_state_slot(e, cp, 0)[0] == 8 && tu_state_slot(e, cp, 0)[SLOT_BYTES - 1] == 8);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, 10, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 8);
  const uint64_t b = tu_alloc(e, t, 10, &cached);
  CHECK_EQ_INT(cached, 8);
  const int32_t wb = run(e, b, 0, c, &nc);
  CHECK(nc == 1 && c[0][0] == cp && c[0][1] == wb);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_restores, 1);
  CHECK_EQ_INT(st.prefix_hit_tokens, 8);
  CHECK_EQ_INT(st.num_state_checkpoints_taken, 1); /* b's boundary 2 has one already */
  /* Run past the boundary in one batch: no checkpoint at 3 for a prompt of 13. */
  int32_t u[13];
  tu_fill(u, 13, 500);
  const uint64_t d = tu_alloc(e, u, 13, NULL);
  run(e, d, 0, NULL, NULL);
  CHECK_EQ_INT(tu_stats(e).num_state_checkpoints_taken, 1);
  CHECK_OK(pkv_allocate_query(e, u, 13, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A prompt whose cached KV reaches a boundary without a checkpoint falls back to the last one
 * before it (here none: token 0), counts the fallback, and leaves one at that branch point: the
 * next prompt sharing the prefix hits there. */
static void test_branch_point(void) {
  pkv_engine *e = engine(PKV_STATE_CHECKPOINT_PROMPT_END, 4);
  if (!e) return;
  int32_t t[14];
  tu_fill(t, 14, 1); /* a "system prompt" of 8 tokens, then a question */
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  run(e, a, 12, NULL, NULL); /* its prompt end: boundary 3 */
  run(e, a, 0, NULL, NULL);
  tu_fill(t + 8, 6, 900);
  uint32_t cached = 99;
  const uint64_t b = tu_alloc(e, t, 14, &cached);
  CHECK_EQ_INT(cached, 0);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.state_fallback_tokens, 8);
  run(e, b, 8, NULL, NULL); /* ends at the branch point: a checkpoint at boundary 2 */
  run(e, b, 0, NULL, NULL);
  CHECK_EQ_INT(tu_stats(e).num_state_checkpoints_taken, 2);
  tu_fill(t + 8, 6, 700);
  const uint64_t c = tu_alloc(e, t, 14, &cached);
  CHECK_EQ_INT(cached, 8);
  int32_t cp[4][2];
  uint32_t nc = 0;
  run(e, c, 0, cp, &nc);
  CHECK(nc == 1 && tu_state_slot(e, cp[0][1], 0)[0] == 14); /* c's own state after the run */
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_restores, 1);
  CHECK_EQ_INT(st.state_fallback_tokens, 8);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Two checkpoint slots: a third capture evicts the least recently used (a hit touches its one);
 * a checkpoint goes with the last copy of its block; pkv_reset_prefix_cache drops them all. Each
 * is a STORED / REMOVED event of group 1 (one KV group). */
static void test_lru_and_events(void) {
  pkv_engine *e = engine_w(PKV_STATE_CHECKPOINT_PROMPT_END, 0, 2, 0, 1);
  if (!e) return;
  int32_t p[3][6];
  uint64_t s[3];
  for (int i = 0; i < 3; i++) {
    tu_fill(p[i], 6, 100 * (i + 1));
    s[i] = tu_alloc(e, p[i], 6, NULL);
    run(e, s[i], 4, NULL, NULL);
    if (i == 1) { /* p[0]'s checkpoint becomes the newest */
      uint32_t cached = 0;
      const uint64_t again = tu_alloc(e, p[0], 6, &cached);
      CHECK_EQ_INT(cached, 4);
      CHECK_OK(pkv_release(e, again));
    }
  }
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_checkpoints_taken, 3);
  CHECK_EQ_INT(st.num_state_checkpoint_evictions, 1);
  CHECK_EQ_INT(st.num_state_checkpoints_held, 2);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, p[1], 6, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0); /* p[1]'s was the oldest */
  CHECK_OK(pkv_allocate_query(e, p[0], 6, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 4);
  pkv_kv_event ev[64];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 64, &n));
  uint32_t stored = 0, removed = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (ev[i].group != 1) continue;
    stored += ev[i].type == PKV_EVENT_BLOCK_STORED;
    removed += ev[i].type == PKV_EVENT_BLOCK_REMOVED;
  }
  CHECK_EQ_INT(stored, 3);
  CHECK_EQ_INT(removed, 1);
  CHECK_ENGINE(e);
  /* Released and reset: every checkpoint goes, with the blocks. */
  for (int i = 0; i < 3; i++) CHECK_OK(pkv_release(e, s[i]));
  CHECK_OK(pkv_reset_prefix_cache(e));
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_checkpoints_held, 0);
  CHECK_EQ_INT(st.num_state_checkpoint_evictions, 3);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A checkpoint's block evicted from the pool (its last copy) takes the checkpoint with it. */
static void test_goes_with_block(void) {
  pkv_engine *e = engine(PKV_STATE_CHECKPOINT_PROMPT_END, 2);
  if (!e) return;
  int32_t t[6];
  tu_fill(t, 6, 3);
  const uint64_t a = tu_alloc(e, t, 6, NULL);
  run(e, a, 4, NULL, NULL);
  CHECK_OK(pkv_release(e, a));
  CHECK_EQ_INT(tu_stats(e).num_state_checkpoints_held, 1);
  /* A prompt of every block of the pool reuses the cached one. */
  int32_t big[64 * BS];
  tu_fill(big, 64 * BS, 10000);
  const uint64_t hog = tu_alloc(e, big, 64 * BS, NULL);
  const pkv_stats st = tu_stats(e);
  CHECK(st.num_evictions >= 1);
  CHECK_EQ_INT(st.num_state_checkpoints_held, 0);
  CHECK_EQ_INT(st.num_state_checkpoint_evictions, 1);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, hog));
  pkv_engine_destroy(e);
}

/* pkv_step ends chunks on wanted boundaries: PROMPT_END splits a 10-token prompt 8 + 2; EVERY 2
 * splits a 22-token one 8 + 8 + 4 + 2 (boundaries 2, 4 and the prompt's last, 5). Without prefix
 * caching, or with NONE, nothing is split and nothing hits. */
static void chunks(pkv_engine *e, uint32_t n, const uint32_t *want, uint32_t num_want) {
  int32_t t[32];
  tu_fill(t, n, 42);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  uint64_t id = 0;
  CHECK_OK(pkv_submit(e, t, n, &rp, &id));
  pkv_batch *b = NULL;
  uint32_t k = 0;
  while (CHECK_OK(pkv_step(e, &b)) && b) {
    const pkv_batch_view v = tu_view(b);
    if (CHECK(k < num_want)) CHECK_EQ_INT(v.num_tokens, want[k]);
    k++;
    const int32_t one = 1;
    CHECK_OK(pkv_commit(b, &one));
  }
  CHECK_EQ_INT(k, num_want);
  CHECK_OK(pkv_release(e, id));
}

static void test_scheduler_chunks(void) {
  pkv_engine *e = engine(PKV_STATE_CHECKPOINT_PROMPT_END, 2);
  if (e) {
    const uint32_t want[] = {8, 2};
    chunks(e, 10, want, 2);
    CHECK_EQ_INT(tu_stats(e).num_state_checkpoints_taken, 1);
    CHECK_ENGINE(e);
    pkv_engine_destroy(e);
  }
  e = engine_w(PKV_STATE_CHECKPOINT_EVERY, 2, 4, 0, 0);
  if (e) {
    const uint32_t want[] = {8, 8, 4, 2};
    chunks(e, 22, want, 4);
    CHECK_EQ_INT(tu_stats(e).num_state_checkpoints_taken, 3);
    CHECK_ENGINE(e);
    pkv_engine_destroy(e);
  }
  e = engine(PKV_STATE_CHECKPOINT_NONE, 0);
  if (e) {
    const uint32_t want[] = {10};
    chunks(e, 10, want, 1);
    chunks(e, 10, want, 1);
    const pkv_stats st = tu_stats(e);
    CHECK(st.num_state_checkpoints_taken == 0 && st.prefix_hit_tokens == 0);
    CHECK_ENGINE(e);
    pkv_engine_destroy(e);
  }
}

/* A sliding-window attention layer anchors the checkpoints just as well: the hit needs the
 * window's blocks and the checkpoint at the boundary. */
static void test_sliding_anchor(void) {
  pkv_engine *e = engine_w(PKV_STATE_CHECKPOINT_PROMPT_END, 0, 2, 4, 0);
  if (!e) return;
  int32_t t[14];
  tu_fill(t, 14, 77);
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  run(e, a, 12, NULL, NULL);
  run(e, a, 0, NULL, NULL);
  uint32_t cached = 0;
  const uint64_t b = tu_alloc(e, t, 14, &cached);
  CHECK_EQ_INT(cached, 12);
  CHECK_EQ_INT(tu_stats(e).num_state_restores, 1);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, b));
  pkv_engine_destroy(e);
}

/* pkv_truncate below the computed tokens goes back to the last checkpoint a hit of the kept
 * tokens may use: the slot starts from its bytes, the tokens after it are computed again; with
 * none, from token 0. A rollback that does not fit is refused with nothing changed. */
static void test_rollback(void) {
  pkv_engine *e = engine(PKV_STATE_CHECKPOINT_PROMPT_END, 2);
  if (!e) return;
  int32_t t[14];
  tu_fill(t, 14, 5);
  const uint64_t a = tu_alloc(e, t, 14, NULL);
  run(e, a, 12, NULL, NULL); /* the prompt's last boundary: 3 */
  run(e, a, 0, NULL, NULL);
  CHECK_OK(pkv_truncate(e, a, 13)); /* a hit of 13 tokens may use 3 blocks: the checkpoint */
  CHECK_EQ_INT(tu_info(e, a).num_computed_tokens, 12);
  CHECK_EQ_INT(tu_info(e, a).num_tokens, 13);
  int32_t c[4][2];
  uint32_t nc = 0;
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
    const pkv_batch_view v = tu_view(b);
    for (uint32_t i = 0; i < v.num_copies; i++)
      if (v.copy_kind[i] == PKV_COPY_STATE) c[nc][0] = v.copy_src[i], c[nc++][1] = v.copy_dst[i];
    CHECK(nc == 1 && c[0][1] == v.state_slots[0] && v.num_tokens == 1);
    CHECK_OK(pkv_batch_copy(b));
    CHECK(tu_state_slot(e, v.state_slots[0], 0)[0] == 12); /* the state after exactly 12 tokens */
    CHECK_OK(pkv_batch_end(b));
  }
  CHECK_OK(pkv_truncate(e, a, 6)); /* one block a hit may use: no checkpoint at 1 */
  CHECK_EQ_INT(tu_info(e, a).num_computed_tokens, 0);
  run(e, a, 0, c, &nc);
  CHECK_EQ_INT(nc, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A windowed group holds a rolled-back prompt's every block, as an admission does: with too few
 * free, NO_SPACE and nothing changed; the sequence goes on. */
static void test_rollback_no_space(void) {
  pkv_engine *e = engine_w(PKV_STATE_CHECKPOINT_PROMPT_END, 0, 2, 4, 0);
  if (!e) return;
  int32_t t[112];
  tu_fill(t, 112, 9);
  const uint64_t x = tu_alloc(e, t, 112, NULL);
  run(e, x, 0, NULL, NULL);
  const uint32_t free_blocks = (uint32_t)tu_stats(e).num_free_blocks;
  int32_t big[64 * BS];
  tu_fill(big, (free_blocks - 5) * BS, 30000);
  const uint64_t hog = tu_alloc(e, big, (free_blocks - 5) * BS, NULL);
  uint64_t seqs[2] = {x, hog};
  const uint64_t before = tu_state(e, seqs, 2);
  CHECK_ERR(e, pkv_truncate(e, x, 100), PKV_ERR_NO_SPACE);
  CHECK_EQ_INT(tu_state(e, seqs, 2), before);
  CHECK_EQ_INT(tu_info(e, x).num_computed_tokens, 112);
  CHECK_ENGINE(e);
  const int32_t one = 1;
  CHECK_OK(pkv_append(e, x, &one, 1));
  run(e, x, 0, NULL, NULL);
  CHECK_OK(pkv_release(e, hog));
  CHECK_OK(pkv_truncate(e, x, 100)); /* now it fits */
  CHECK(tu_info(e, x).num_computed_tokens < 100);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_capture_and_restore);
  TU_RUN(test_branch_point);
  TU_RUN(test_lru_and_events);
  TU_RUN(test_goes_with_block);
  TU_RUN(test_scheduler_chunks);
  TU_RUN(test_sliding_anchor);
  TU_RUN(test_rollback);
  TU_RUN(test_rollback_no_space);
  return tu_summary();
}
