/* Checkpoints of the recurrent state in the host tier (DESIGN.md §13) through pkv.h: with a host
 * tier and host_offload, a device checkpoint evicted for room moves to a host state slot (a
 * PKV_COPY_STATE_OUT the next batch lists before the capture that reuses its slot; bytes checked)
 * instead of being dropped; a later prompt that hits at its boundary starts its working slot from
 * the host slot (PKV_COPY_STATE_IN); host checkpoints are LRU among themselves; a sequence that
 * computes through a boundary whose checkpoint is on the host takes a device one in its place;
 * without host_offload the evicted checkpoint is dropped. Events name the tier. The budget counts
 * the host state slots. */
#include "test_util.h"

#define BS 4
#define LAYERS 2
#define SEQS 3
#define SLOT_BYTES 256

static pkv_layer_spec specs_[LAYERS];

/* f32, blocks of 4 tokens, max_num_seqs 3, a host tier of 32 blocks. Layer 0 full attention,
 * layer 1 STATE with one f32 [4][4] part (a 256-byte slot). One device checkpoint slot. */
static void params(pkv_engine_params *p, uint32_t host_offload) {
  tu_params(p, BS, 64);
  p->num_layers = LAYERS;
  p->max_num_seqs = SEQS;
  p->state_checkpoint_policy = PKV_STATE_CHECKPOINT_PROMPT_END;
  p->num_state_checkpoints = 1;
  p->host_num_blocks = 32;
  p->host_offload = host_offload;
  p->enable_kv_events = 1;
  p->kv_events_capacity = 256;
  memset(specs_, 0, sizeof specs_);
  specs_[1].kind = PKV_LAYER_STATE;
  specs_[1].state_dtype[1] = PKV_DTYPE_F32;
  specs_[1].state_shape[4] = 4, specs_[1].state_shape[5] = 4;
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* The state copies of one batch, in order: kind, src, dst. */
typedef struct {
  uint32_t n;
  int32_t kind[8], src[8], dst[8];
} state_copies;

/* One batch of n of seq's tokens (0: all uncomputed). The host's "kernel" fills the state after
 * it with the count of tokens taken in, so a checkpoint names the prefix it holds. */
static int32_t run(pkv_engine *e, uint64_t seq, uint32_t n, state_copies *sc) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, n ? &n : NULL, 1, &b))) return -1;
  const pkv_batch_view v = tu_view(b);
  state_copies none;
  if (!sc) sc = &none;
  sc->n = 0;
  for (uint32_t i = 0; i < v.num_copies && sc->n < 8; i++) {
    const int32_t k = v.copy_kind[i];
    if (k != PKV_COPY_STATE && k != PKV_COPY_STATE_OUT && k != PKV_COPY_STATE_IN) continue;
    sc->kind[sc->n] = k, sc->src[sc->n] = v.copy_src[i], sc->dst[sc->n] = v.copy_dst[i];
    sc->n++;
  }
  CHECK_OK(pkv_batch_copy(b));
  const int32_t slot = v.state_slots[0];
  const uint32_t done = tu_info(e, seq).num_computed_tokens + v.num_tokens;
  memset(tu_state_slot(e, slot, 0), (int)done, SLOT_BYTES);
  CHECK_OK(pkv_batch_end(b));
  return slot;
}

/* Each of group 1's (the state's) events of the drained ones, counted by type and tier. */
static void state_events(pkv_engine *e, uint32_t count[2][2]) {
  pkv_kv_event ev[128];
  uint32_t n = 0;
  memset(count, 0, 4 * sizeof(uint32_t));
  CHECK_OK(pkv_drain_kv_events(e, ev, 128, &n));
  for (uint32_t i = 0; i < n; i++) {
    if (ev[i].group != 1) continue;
    const int stored = ev[i].type == PKV_EVENT_BLOCK_STORED;
    if (!stored && ev[i].type != PKV_EVENT_BLOCK_REMOVED) continue;
    count[stored][ev[i].medium == PKV_TIER_HOST]++;
  }
}

/* The budget's host state slots: max_num_seqs for swaps, plus the checkpoints with offload. */
static void test_budget(void) {
  pkv_engine_params p;
  pkv_kv_budget b;
  for (uint32_t off = 0; off < 2; off++) {
    params(&p, off);
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    CHECK_OK(pkv_profile(&p, &b));
    CHECK_EQ_INT(b.num_host_state_slots, SEQS + off);
    CHECK_EQ_INT(b.host_state_bytes, (SEQS + off) * SLOT_BYTES);
  }
  p.host_num_blocks = 0; /* no host tier: no host slots */
  CHECK_OK(pkv_profile(&p, &b));
  CHECK(b.num_host_state_slots == 0 && b.host_state_bytes == 0);
  params(&p, 1);
  p.enable_prefix_caching = 0; /* no hits: no checkpoints, none offloaded */
  CHECK_OK(pkv_profile(&p, &b));
  CHECK(b.num_state_checkpoints == 0 && b.num_host_state_slots == SEQS);
}

/* A's checkpoint (boundary 1, bytes 4) is evicted by B's (boundary 2, bytes 8): its STATE_OUT to
 * host slot 3 (after the 3 swap slots) comes before B's capture into the same device slot. A's
 * prompt then hits 4 tokens from the host (STATE_IN), B's 8 from the device. */
static void test_offload_and_restore(void) {
  pkv_engine_params p;
  params(&p, 1);
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  CHECK_EQ_INT(tu_pool(e).num_host_state_slots, SEQS + 1);
  int32_t ta[6], tb[10];
  tu_fill(ta, 6, 100);
  tu_fill(tb, 10, 500);
  const uint64_t a = tu_alloc(e, ta, 6, NULL), b = tu_alloc(e, tb, 10, NULL);
  run(e, a, 4, NULL);
  run(e, b, 8, NULL); /* A's capture (working -> slot 3) runs first */
  state_copies sc;
  run(e, a, 0, &sc); /* B's: A's offload, then B's capture */
  if (CHECK_EQ_INT(sc.n, 2)) {
    CHECK(sc.kind[0] == PKV_COPY_STATE_OUT && sc.src[0] == SEQS && sc.dst[0] == SEQS);
    CHECK(sc.kind[1] == PKV_COPY_STATE && sc.dst[1] == SEQS);
  }
  CHECK(tu_state_slot(e, SEQS, 1)[0] == 4 && tu_state_slot(e, SEQS, 1)[SLOT_BYTES - 1] == 4);
  CHECK(tu_state_slot(e, SEQS, 0)[0] == 8);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_checkpoints_offloaded, 1);
  CHECK_EQ_INT(st.num_host_state_checkpoints_held, 1);
  CHECK_EQ_INT(st.num_state_checkpoints_held, 1);
  CHECK_EQ_INT(st.num_state_checkpoint_evictions, 0);
  uint32_t ev[2][2];
  state_events(e, ev); /* A stored, B stored; A removed from the device, stored on the host */
  CHECK(ev[1][0] == 2 && ev[1][1] == 1 && ev[0][0] == 1 && ev[0][1] == 0);
  uint32_t cached = 0;
  const uint64_t a2 = tu_alloc(e, ta, 6, &cached);
  CHECK_EQ_INT(cached, 4);
  const int32_t w = run(e, a2, 0, &sc);
  if (CHECK_EQ_INT(sc.n, 1))
    CHECK(sc.kind[0] == PKV_COPY_STATE_IN && sc.src[0] == SEQS && sc.dst[0] == w);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_state_restores, 1);
  CHECK_EQ_INT(st.num_state_restores_from_host, 1);
  CHECK_OK(pkv_release(e, a)); /* a working slot for b2 (max_num_seqs 3) */
  const uint64_t b2 = tu_alloc(e, tb, 10, &cached);
  CHECK_EQ_INT(cached, 8);
  st = tu_stats(e);
  CHECK(st.num_state_restores == 2 && st.num_state_restores_from_host == 1);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, b2));
  CHECK_OK(pkv_release(e, a2));
  /* reset drops both tiers' checkpoints */
  CHECK_OK(pkv_release(e, b));
  CHECK_OK(pkv_reset_prefix_cache(e));
  st = tu_stats(e);
  CHECK(st.num_state_checkpoints_held == 0 && st.num_host_state_checkpoints_held == 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* One host checkpoint slot: a second offload drops the first (LRU); a prompt that computes
 * through a boundary held on the host takes a device checkpoint there instead; without
 * host_offload an evicted checkpoint is dropped. */
static void test_host_lru_and_replace(void) {
  for (uint32_t off = 0; off < 2; off++) {
    pkv_engine_params p;
    params(&p, off);
    pkv_engine *e = tu_engine_p(&p);
    if (!e) return;
    int32_t t[3][6];
    for (int i = 0; i < 3; i++) {
      tu_fill(t[i], 6, 100 * (i + 1));
      const uint64_t s = tu_alloc(e, t[i], 6, NULL);
      run(e, s, 4, NULL);
      run(e, s, 0, NULL);
      CHECK_OK(pkv_release(e, s));
    }
    pkv_stats st = tu_stats(e);
    CHECK_EQ_INT(st.num_state_checkpoints_taken, 3);
    CHECK_EQ_INT(st.num_state_checkpoints_offloaded, off ? 2 : 0);
    CHECK_EQ_INT(st.num_state_checkpoint_evictions, off ? 1 : 2);
    uint32_t cached = 99;
    CHECK_OK(pkv_allocate_query(e, t[0], 6, NULL, NULL, &cached));
    CHECK_EQ_INT(cached, 0); /* dropped either way */
    CHECK_OK(pkv_allocate_query(e, t[1], 6, NULL, NULL, &cached));
    CHECK_EQ_INT(cached, off ? 4 : 0); /* on the host with offload */
    CHECK_OK(pkv_allocate_query(e, t[2], 6, NULL, NULL, &cached));
    CHECK_EQ_INT(cached, 4);
    if (off) { /* t[1]'s first block alone: no hit (the last token is computed), a capture at 1 */
      const uint64_t s = tu_alloc(e, t[1], 4, &cached);
      CHECK_EQ_INT(cached, 0);
      run(e, s, 0, NULL);
      st = tu_stats(e);
      CHECK_EQ_INT(st.num_host_state_checkpoints_held, 1); /* t[2]'s, offloaded for room */
      CHECK_EQ_INT(st.num_state_checkpoints_offloaded, 3);
      CHECK_OK(pkv_allocate_query(e, t[1], 6, NULL, NULL, &cached));
      CHECK_EQ_INT(cached, 4);
      CHECK_OK(pkv_allocate_query(e, t[2], 6, NULL, NULL, &cached));
      CHECK_EQ_INT(cached, 4);
      CHECK_OK(pkv_release(e, s));
    }
    CHECK_ENGINE(e);
    pkv_engine_destroy(e);
  }
}

int main(void) {
  test_budget();
  test_offload_and_restore();
  test_host_lru_and_replace();
  return tu_summary();
}
