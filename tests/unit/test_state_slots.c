/* Recurrent state slots (DESIGN.md §13) through pkv.h: a running sequence of a model with STATE
 * layers holds one working slot, listed by the batch view (state_slots); pkv_pool_info and
 * pkv_layer_info say where the slots and each layer's parts are; a fork takes a new slot and
 * queues a PKV_COPY_STATE copy that the next batch lists and pkv_batch_copy does (bytes checked);
 * release and preemption give the slot back; no free slot is refused with nothing changed; the
 * scheduler admits only while a slot is free; a prefix hit needs a checkpoint of the state at its
 * boundary (test_state_checkpoints), which a batch running past the boundary does not leave. */
#include "test_util.h"

#define LAYERS 4
#define MAX_SEQS 3
#define CHECKPOINTS 2
#define SLOT_BYTES 768 /* by hand below */

static pkv_layer_spec specs_[LAYERS];

/* f32, blocks of 4 tokens. Layers 0 and 2: full attention (the flat fields: 2 kv heads x 8).
 * Layer 1: STATE, a conv part f32 [6][3] (72 bytes, 256 aligned) and an SSM part f32 [2][4][4]
 * (128 bytes, 256 aligned). Layer 3: STATE, its SSM part alone, bf16 [2][4][8] (128 bytes, 256).
 * A slot: 256 + 256 + 256 = 768 bytes; layer 1's parts at 0 and 256, layer 3's at 512. */
static void params(pkv_engine_params *p, uint32_t num_blocks) {
  tu_params(p, 4, num_blocks);
  p->num_layers = LAYERS;
  p->max_num_seqs = MAX_SEQS;
  p->num_state_checkpoints = CHECKPOINTS;
  memset(specs_, 0, sizeof specs_);
  specs_[1].kind = PKV_LAYER_STATE;
  specs_[1].state_dtype[0] = PKV_DTYPE_F32, specs_[1].state_dtype[1] = PKV_DTYPE_F32;
  specs_[1].state_shape[0] = 6, specs_[1].state_shape[1] = 3;
  specs_[1].state_shape[4] = 2, specs_[1].state_shape[5] = 4, specs_[1].state_shape[6] = 4;
  specs_[3].kind = PKV_LAYER_STATE;
  specs_[3].state_dtype[1] = PKV_DTYPE_BF16;
  specs_[3].state_shape[4] = 2, specs_[3].state_shape[5] = 4, specs_[3].state_shape[6] = 8;
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

static pkv_engine *engine(uint32_t num_blocks) {
  pkv_engine_params p;
  params(&p, num_blocks);
  return tu_engine_p(&p);
}

/* One batch of seq's uncomputed tokens; its slot from the view (-1 on failure). */
static int32_t slot_of(pkv_engine *e, uint64_t seq) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return -1;
  const pkv_batch_view v = tu_view(b);
  const int32_t slot = CHECK(v.state_slots != NULL) ? v.state_slots[0] : -1;
  CHECK_OK(pkv_batch_end(b));
  return slot;
}

static void test_layout(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  const struct pkv_pool_info in = tu_pool(e);
  CHECK(in.state_base != NULL);
  CHECK_EQ_INT(in.state_slot_bytes, SLOT_BYTES);
  CHECK_EQ_INT(in.num_state_slots, MAX_SEQS + CHECKPOINTS);
  CHECK_EQ_INT((uintptr_t)in.state_base % 256, 0);
  static const uint64_t offset[LAYERS][2] = {{0, 0}, {0, 256}, {0, 0}, {0, 512}};
  static const uint64_t bytes[LAYERS][2] = {{0, 0}, {72, 128}, {0, 0}, {0, 128}};
  for (uint32_t l = 0; l < LAYERS; l++) {
    struct pkv_layer_info li;
    memset(&li, 0, sizeof li);
    li.struct_size = sizeof li;
    CHECK_OK(pkv_layer_info(e, l, &li));
    CHECK_EQ_INT(li.kind, l % 2 ? PKV_LAYER_STATE : PKV_LAYER_ATTENTION);
    for (int i = 0; i < 2; i++) {
      CHECK_EQ_INT(li.state_offset[i], offset[l][i]);
      CHECK_EQ_INT(li.state_bytes[i], bytes[l][i]);
    }
    if (l % 2) CHECK(li.k_base == NULL && li.v_base == NULL && li.group == UINT32_MAX);
  }
  /* Every slot's bytes can be written and read back (the whole region is mapped). */
  memset(in.state_base, 0x5a, in.state_slot_bytes * in.num_state_slots);
  CHECK_EQ_INT(((unsigned char *)in.state_base)[in.state_slot_bytes * in.num_state_slots - 1],
               0x5a);
  pkv_engine_destroy(e);

  /* Without STATE layers: no slots, and the view's state_slots is NULL. */
  pkv_engine *flat = tu_engine(4, 32, 0);
  if (!flat) return;
  const struct pkv_pool_info fi = tu_pool(flat);
  CHECK(fi.state_base == NULL && fi.state_slot_bytes == 0 && fi.num_state_slots == 0);
  int32_t tokens[6];
  tu_fill(tokens, 6, 1);
  uint64_t s = tu_alloc(flat, tokens, 6, NULL);
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(flat, &s, NULL, 1, &b))) {
    CHECK(tu_view(b).state_slots == NULL);
    CHECK_OK(pkv_batch_end(b));
  }
  pkv_engine_destroy(flat);
}

/* Each running sequence its own working slot (< max_num_seqs: checkpoints come after); the
 * max_num_seqs + 1-th allocation is refused with nothing changed; a release frees its slot. */
static void test_allocate_release(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  int32_t tokens[6];
  uint64_t seqs[MAX_SEQS];
  int32_t slots[MAX_SEQS];
  for (uint32_t i = 0; i < MAX_SEQS; i++) {
    tu_fill(tokens, 6, (int32_t)(10 * i));
    seqs[i] = tu_alloc(e, tokens, 6, NULL);
  }
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, seqs, NULL, MAX_SEQS, &b))) return;
  const pkv_batch_view v = tu_view(b);
  for (uint32_t i = 0; i < MAX_SEQS; i++) {
    slots[i] = v.state_slots[i];
    CHECK(slots[i] >= 0 && slots[i] < MAX_SEQS);
    for (uint32_t j = 0; j < i; j++) CHECK(slots[i] != slots[j]);
  }
  CHECK_OK(pkv_batch_end(b));
  const uint64_t before = tu_state(e, seqs, MAX_SEQS);
  uint64_t extra = 0;
  CHECK_ERR(e, pkv_allocate(e, tokens, 6, NULL, &extra, NULL), PKV_ERR_NO_SPACE);
  CHECK(strstr(pkv_engine_last_error(e), "state slot") != NULL);
  CHECK_EQ_INT(tu_state(e, seqs, MAX_SEQS), before);
  CHECK_EQ_INT(tu_stats(e).num_seqs, MAX_SEQS);
  CHECK_ENGINE(e);
  /* The released sequence's slot goes to the next one. */
  CHECK_OK(pkv_release(e, seqs[1]));
  const uint64_t next = tu_alloc(e, tokens, 6, NULL);
  CHECK_EQ_INT(slot_of(e, next), slots[1]);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A fork takes a new slot and queues one copy of the parent's state, which the next batch lists
 * (PKV_COPY_STATE, parent's slot -> child's) and pkv_batch_copy does; the batch after lists none.
 * No free slot: the fork is refused, nothing changed. */
static void test_fork(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  int32_t tokens[6];
  tu_fill(tokens, 6, 1);
  const uint64_t parent = tu_alloc(e, tokens, 6, NULL);
  const int32_t ps = slot_of(e, parent);
  if (!CHECK(ps >= 0)) return;
  /* The host's recurrence wrote the parent's state after its 6 tokens. */
  unsigned char *pb = tu_state_slot(e, ps, 0), expect[SLOT_BYTES];
  for (uint32_t i = 0; i < SLOT_BYTES; i++) pb[i] = expect[i] = (unsigned char)(i * 7 + 3);
  uint64_t child = 0;
  if (!CHECK_OK(pkv_fork(e, parent, &child))) return;
  const int32_t one = 42;
  CHECK_OK(pkv_append(e, child, &one, 1));
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &child, NULL, 1, &b))) return;
  pkv_batch_view v = tu_view(b);
  const int32_t cs = v.state_slots[0];
  CHECK(cs >= 0 && cs < MAX_SEQS && cs != ps);
  uint32_t listed = 0;
  for (uint32_t i = 0; i < v.num_copies; i++)
    if (v.copy_kind[i] == PKV_COPY_STATE) {
      listed++;
      CHECK_EQ_INT(v.copy_src[i], ps);
      CHECK_EQ_INT(v.copy_dst[i], cs);
    }
  CHECK_EQ_INT(listed, 1);
  CHECK(memcmp(tu_state_slot(e, cs, 0), expect, SLOT_BYTES) != 0); /* not yet copied */
  CHECK_OK(pkv_batch_copy(b));
  CHECK(memcmp(tu_state_slot(e, cs, 0), expect, SLOT_BYTES) == 0);
  CHECK(memcmp(tu_state_slot(e, ps, 0), expect, SLOT_BYTES) == 0);
  CHECK_OK(pkv_batch_end(b));
  CHECK_OK(pkv_append(e, child, &one, 1));
  if (CHECK_OK(pkv_batch_begin(e, &child, NULL, 1, &b))) {
    v = tu_view(b);
    for (uint32_t i = 0; i < v.num_copies; i++) CHECK(v.copy_kind[i] != PKV_COPY_STATE);
    CHECK_OK(pkv_batch_end(b));
  }
  /* A third sequence takes the last working slot; then a fork finds none. */
  tu_fill(tokens, 6, 100);
  uint64_t seqs[3] = {parent, child, tu_alloc(e, tokens, 6, NULL)};
  const uint64_t before = tu_state(e, seqs, 3);
  uint64_t none = 0;
  CHECK_ERR(e, pkv_fork(e, parent, &none), PKV_ERR_NO_SPACE);
  CHECK(strstr(pkv_engine_last_error(e), "pkv_fork") != NULL);
  CHECK_EQ_INT(tu_state(e, seqs, 3), before);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* A fork whose batch is aborted keeps its copy queued for the next batch, which does it. */
static void test_fork_copy_survives_abort(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  int32_t tokens[5];
  tu_fill(tokens, 5, 1);
  const uint64_t parent = tu_alloc(e, tokens, 5, NULL);
  const int32_t ps = slot_of(e, parent);
  if (!CHECK(ps >= 0)) return;
  memset(tu_state_slot(e, ps, 0), 0x3c, SLOT_BYTES);
  uint64_t child = 0;
  CHECK_OK(pkv_fork(e, parent, &child));
  const int32_t one = 7;
  CHECK_OK(pkv_append(e, child, &one, 1));
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &child, NULL, 1, &b))) return;
  pkv_batch_abort(b);
  if (!CHECK_OK(pkv_batch_begin(e, &child, NULL, 1, &b))) return;
  const pkv_batch_view v = tu_view(b);
  uint32_t listed = 0;
  for (uint32_t i = 0; i < v.num_copies; i++) listed += v.copy_kind[i] == PKV_COPY_STATE;
  CHECK_EQ_INT(listed, 1);
  CHECK_OK(pkv_batch_copy(b));
  unsigned char expect[SLOT_BYTES];
  memset(expect, 0x3c, SLOT_BYTES);
  CHECK(memcmp(tu_state_slot(e, v.state_slots[0], 0), expect, SLOT_BYTES) == 0);
  CHECK_OK(pkv_batch_end(b));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* pkv_preempt gives the slot back (another sequence can take it); pkv_resume takes one again and
 * recomputes from token 0: the 9-token prompts ran in one batch past boundary 2, so no checkpoint
 * was left and their cached KV serves no hit. */
static void test_preempt_resume(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  int32_t tokens[9];
  tu_fill(tokens, 9, 1);
  uint64_t seqs[MAX_SEQS];
  for (uint32_t i = 0; i < MAX_SEQS; i++) {
    seqs[i] = tu_alloc(e, tokens, 9, NULL);
    tu_compute1(e, seqs[i]);
  }
  uint32_t cached = 99;
  /* The same prompt again: its blocks are cached, but no checkpoint holds the state at 8. */
  CHECK_OK(pkv_allocate_query(e, tokens, 9, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0);
  CHECK_OK(pkv_preempt(e, seqs[0]));
  CHECK_ENGINE(e);
  const uint64_t other = tu_alloc(e, tokens, 9, &cached);
  CHECK_EQ_INT(cached, 0);
  uint64_t all[MAX_SEQS + 1] = {seqs[0], seqs[1], seqs[2], other};
  const uint64_t before = tu_state(e, all, MAX_SEQS + 1);
  CHECK_ERR(e, pkv_resume(e, seqs[0], &cached), PKV_ERR_NO_SPACE);
  CHECK_EQ_INT(tu_state(e, all, MAX_SEQS + 1), before);
  CHECK_OK(pkv_release(e, other));
  cached = 99;
  CHECK_OK(pkv_resume(e, seqs[0], &cached));
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_info(e, seqs[0]).num_computed_tokens, 0);
  CHECK(slot_of(e, seqs[0]) >= 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Truncating into the computed tokens goes back to a checkpoint (test_state_checkpoints): here
 * there is none below the cut, so the sequence starts over from token 0; dropping uncomputed
 * tokens, or a preempted sequence's, is fine. A STATE layer has no attention. */
static void test_truncate_attention(void) {
  pkv_engine *e = engine(32);
  if (!e) return;
  int32_t tokens[8];
  tu_fill(tokens, 8, 1);
  uint64_t s = tu_alloc(e, tokens, 8, NULL);
  tu_compute1(e, s);
  CHECK_OK(pkv_append(e, s, tokens, 3));
  CHECK_OK(pkv_truncate(e, s, 9)); /* two of the three uncomputed tokens */
  CHECK_EQ_INT(tu_info(e, s).num_computed_tokens, 8);
  CHECK_OK(pkv_truncate(e, s, 7)); /* (7 - 1) / 4 = 1 block a hit may serve: no checkpoint */
  CHECK_EQ_INT(tu_info(e, s).num_computed_tokens, 0);
  CHECK_EQ_INT(tu_info(e, s).num_tokens, 7);
  tu_compute1(e, s);
  CHECK_OK(pkv_append(e, s, tokens, 2));
  CHECK_OK(pkv_preempt(e, s));
  CHECK_OK(pkv_truncate(e, s, 5));
  CHECK_OK(pkv_resume(e, s, NULL));
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b))) {
    float q[5 * 4 * 8] = {0}, kv[5 * 2 * 8] = {0}, out[5 * 4 * 8];
    CHECK_STATUS(pkv_attention(b, 1, q, kv, kv, out), PKV_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pkv_last_error(), "STATE") != NULL);
    CHECK_OK(pkv_attention(b, 0, q, kv, kv, out));
    CHECK_OK(pkv_batch_end(b));
  }
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The scheduler: a sequence of pkv_allocate holds a slot, so at most MAX_SEQS - 1 requests run
 * at once; blocks run out and requests are preempted (their slots freed and retaken); every
 * step's slots are distinct working slots; every request finishes. */
static void run_scheduler(uint32_t preemption_mode) {
  pkv_engine_params p;
  params(&p, 10);
  if (preemption_mode == PKV_PREEMPT_SWAP) p.host_num_blocks = 32;
  p.preemption_mode = preemption_mode;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  int32_t tokens[12];
  tu_fill(tokens, 4, 500);
  const uint64_t manual = tu_alloc(e, tokens, 4, NULL);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 10;
  for (int r = 0; r < 4; r++) {
    tu_fill(tokens, 12, 1000 * (r + 1));
    uint64_t id = 0;
    CHECK_OK(pkv_submit(e, tokens, 12, &rp, &id));
  }
  uint32_t steps = 0, most = 0;
  pkv_batch *b = NULL;
  while (steps < 400 && CHECK_OK(pkv_step(e, &b)) && b) {
    const pkv_batch_view v = tu_view(b);
    CHECK(v.state_slots != NULL);
    CHECK(v.num_seqs <= MAX_SEQS - 1);
    most = v.num_seqs > most ? v.num_seqs : most;
    for (uint32_t i = 0; i < v.num_seqs; i++) {
      CHECK(v.state_slots[i] >= 0 && v.state_slots[i] < MAX_SEQS);
      for (uint32_t j = 0; j < i; j++) CHECK(v.state_slots[i] != v.state_slots[j]);
    }
    int32_t sampled[MAX_SEQS] = {1, 1, 1};
    CHECK_OK(pkv_commit(b, sampled));
    if (!CHECK_ENGINE(e)) break;
    steps++;
  }
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(most, MAX_SEQS - 1);
  CHECK_EQ_INT(st.num_finished_requests, 4);
  CHECK(st.num_preemptions > 0);
  if (preemption_mode == PKV_PREEMPT_SWAP) {
    /* Swapped out and back in, states with them: nothing recomputed. */
    CHECK_EQ_INT(st.num_swap_preemptions, st.num_preemptions);
    CHECK(st.num_swapped_in_blocks > 0);
  } else {
    /* A preempted request comes back from the checkpoint its prompt left (PROMPT_END), never
       from KV alone: every hit is a restore. */
    CHECK(st.num_state_restores > 0);
    CHECK(st.prefix_hit_tokens > 0);
  }
  CHECK(st.num_state_checkpoints_taken >= st.num_state_checkpoints_held);
  CHECK(slot_of(e, manual) >= 0); /* it kept its slot all along */
  pkv_engine_destroy(e);
}

static void test_scheduler(void) {
  run_scheduler(PKV_PREEMPT_RECOMPUTE);
  run_scheduler(PKV_PREEMPT_SWAP);
}

/* With a host tier, pkv_swap_out moves a sequence's state to a host state slot
 * (PKV_COPY_STATE_OUT, listed and done; bytes checked) and gives its working slot back, which
 * another sequence takes; pkv_swap_in brings it back (PKV_COPY_STATE_IN) into a free working
 * slot, none free: NO_SPACE with nothing changed. */
static void test_swap(void) {
  pkv_engine_params p;
  params(&p, 32);
  p.host_num_blocks = 16;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  struct pkv_pool_info in = tu_pool(e);
  /* a host slot per sequence that may be swapped out, then one per offloaded checkpoint */
  CHECK(in.host_state_base != NULL && in.num_host_state_slots == MAX_SEQS + CHECKPOINTS);
  int32_t tokens[6];
  tu_fill(tokens, 6, 1);
  uint64_t a = tu_alloc(e, tokens, 6, NULL);
  const int32_t ws = slot_of(e, a);
  if (!CHECK(ws >= 0)) return;
  memset(tu_state_slot(e, ws, 0), 0x6b, SLOT_BYTES);
  CHECK_OK(pkv_swap_out(e, a));
  CHECK_ENGINE(e);
  /* The next batch lists the copy out, before the slot's new owner writes it. */
  tu_fill(tokens, 6, 50);
  uint64_t others[MAX_SEQS];
  for (uint32_t i = 0; i < MAX_SEQS; i++) others[i] = tu_alloc(e, tokens, 6, NULL);
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, others, NULL, MAX_SEQS, &b))) return;
  pkv_batch_view v = tu_view(b);
  int32_t host = -1;
  for (uint32_t i = 0; i < v.num_copies; i++)
    if (v.copy_kind[i] == PKV_COPY_STATE_OUT) {
      CHECK_EQ_INT(v.copy_src[i], ws);
      host = v.copy_dst[i];
    }
  if (!CHECK(host >= 0 && host < MAX_SEQS)) return;
  CHECK_OK(pkv_batch_copy(b));
  const unsigned char *hb = (const unsigned char *)in.host_state_base + host * SLOT_BYTES;
  CHECK(hb[0] == 0x6b && hb[SLOT_BYTES - 1] == 0x6b);
  for (uint32_t i = 0; i < MAX_SEQS; i++)
    memset(tu_state_slot(e, v.state_slots[i], 0), 0, SLOT_BYTES);
  CHECK_OK(pkv_batch_end(b));
  /* Every working slot is held: swap-in is refused, nothing changed. */
  uint64_t all[MAX_SEQS + 1] = {a, others[0], others[1], others[2]};
  const uint64_t before = tu_state(e, all, MAX_SEQS + 1);
  CHECK_ERR(e, pkv_swap_in(e, a), PKV_ERR_NO_SPACE);
  CHECK(strstr(pkv_engine_last_error(e), "state slot") != NULL);
  CHECK_EQ_INT(tu_state(e, all, MAX_SEQS + 1), before);
  CHECK_OK(pkv_release(e, others[1]));
  CHECK_OK(pkv_swap_in(e, a));
  CHECK_ENGINE(e);
  const int32_t one = 9;
  CHECK_OK(pkv_append(e, a, &one, 1));
  if (CHECK_OK(pkv_batch_begin(e, &a, NULL, 1, &b))) {
    v = tu_view(b);
    uint32_t listed = 0;
    for (uint32_t i = 0; i < v.num_copies; i++)
      if (v.copy_kind[i] == PKV_COPY_STATE_IN) {
        listed++;
        CHECK(v.copy_src[i] == host && v.copy_dst[i] == v.state_slots[0]);
      }
    CHECK_EQ_INT(listed, 1);
    CHECK_OK(pkv_batch_copy(b));
    CHECK(tu_state_slot(e, v.state_slots[0], 0)[0] == 0x6b);
    CHECK_OK(pkv_batch_end(b));
  }
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_layout);
  TU_RUN(test_allocate_release);
  TU_RUN(test_fork);
  TU_RUN(test_fork_copy_survives_abort);
  TU_RUN(test_preempt_resume);
  TU_RUN(test_truncate_attention);
  TU_RUN(test_scheduler);
  TU_RUN(test_swap);
  return tu_summary();
}
