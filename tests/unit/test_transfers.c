/*
 * test_transfers.c - KV transfers between engines (DESIGN.md §10), one state each:
 *   - a producer's hold: pkv_hold of a sequence, a request's hold_on_finish, their end (done,
 *     failed), their timeout on the engine's clock, the bound max_held_blocks, the refusals;
 *   - a consumer's remote fill: a request admitted RECEIVING past its local prefix hit, the
 *     producer's segments copied into its segments, then done (sealed and cached as if
 *     computed: a later prompt hits them, and the step that runs on from them computes what a
 *     single engine computes), failed (nothing it wrote is used: it computes its prompt
 *     itself) and failed-and-finished;
 *   - the same with a sliding-window group, an MLA cache and STATE layers (the recurrent state
 *     arrives with the blocks; its checkpoint is taken as a step's);
 *   - every refusal, with nothing changed.
 * The "transport" is memcpy between two engines' segments of equal fingerprints.
 */
#include <math.h>
#include <string.h>

#include "test_util.h"

enum { BS = 4, LAYERS = 2, QH = 4, KVH = 2, HD = 8, ROW = KVH * HD, QROW = QH * HD };

static void tweak_none(pkv_engine_params *p) { (void)p; }

static pkv_engine *make(uint32_t blocks, void (*tweak)(pkv_engine_params *)) {
  pkv_engine_params p;
  tu_params(&p, BS, blocks);
  p.debug_flags = PKV_DEBUG_TEST_CLOCK;
  if (tweak) tweak(&p);
  return tu_engine_p(&p);
}

static struct pkv_seq_info info_of(pkv_engine *e, uint64_t seq) {
  struct pkv_seq_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  CHECK_OK(pkv_seq_info(e, seq, &i));
  return i;
}

/* K, V and Q of position p in layer l: the same on every engine, so two engines computing the
 * same tokens write the same bytes and get the same outputs. kv_width: values of K (and V) per
 * token; MLA: the latent alone. */
static void qkv(uint32_t p, uint32_t l, uint32_t kv_width, float *q, float *k, float *v) {
  for (uint32_t i = 0; i < QROW; i++) q[i] = 0.01f * (float)((i + p + l) % 13);
  for (uint32_t i = 0; i < kv_width; i++) {
    const float x = (float)((p * 7 + l * 3 + i) % 17) * 0.125f - 1.0f;
    k[i] = x;
    if (v) v[i] = -0.5f * x;
  }
}

/* Runs every layer of an open batch with qkv's values; out_last (nullable) gets the last row's
 * output of every layer ([LAYERS][QROW]). */
static void run_layers(pkv_batch *b, uint32_t kv_width, int mla, float *out_last) {
  pkv_batch_view v = tu_view(b);
  static float q[256 * QROW], k[256 * 64], val[256 * 64], out[256 * QROW];
  if (!CHECK(v.num_tokens <= 256)) return;
  const uint32_t orow = mla ? 2 * 8 : QROW; /* MLA: 2 q heads of kv_lora_rank 8 */
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (uint32_t t = 0; t < v.num_tokens; t++)
      qkv((uint32_t)v.positions[t], l, kv_width, q + t * QROW, k + t * kv_width,
          mla ? NULL : val + t * kv_width);
    CHECK_OK(pkv_attention(b, l, q, k, mla ? NULL : val, out));
    if (out_last)
      memcpy(out_last + l * QROW, out + (v.num_tokens - 1) * orow, sizeof(float) * orow);
  }
}

/* A pkv_allocate sequence of tokens[n], computed in one batch; out_last as run_layers. */
static uint64_t computed_seq(pkv_engine *e, const int32_t *tokens, uint32_t n, uint32_t kv_width,
                             int mla, float *out_last) {
  uint64_t seq = tu_alloc(e, tokens, n, NULL);
  pkv_batch *b = NULL;
  if (!seq || !CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return 0;
  run_layers(b, kv_width, mla, out_last);
  CHECK_OK(pkv_batch_end(b));
  return seq;
}

static uint64_t submit(pkv_engine *e, const int32_t *prompt, uint32_t n, uint32_t remote,
                       uint32_t hold, uint32_t max_new) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = max_new;
  rp.num_remote_tokens = remote;
  rp.hold_on_finish = hold;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_submit(e, prompt, n, &rp, &seq))) return 0;
  return seq;
}

/* The transport: producer sequence ps's blocks [first, first + n) into consumer sequence cs's
 * same blocks, segment by segment (both engines of one fingerprint). Returns the bytes moved. */
static uint64_t transfer(pkv_engine *p, uint64_t ps, pkv_engine *c, uint64_t cs, uint32_t first,
                         uint32_t n) {
  uint8_t fp[32], fc[32];
  CHECK_OK(pkv_layout_fingerprint(p, 0, fp));
  CHECK_OK(pkv_layout_fingerprint(c, 0, fc));
  if (!CHECK(memcmp(fp, fc, 32) == 0)) return 0;
  static pkv_segment from[4096], to[4096];
  uint32_t nf = 0, nt = 0;
  CHECK_OK(pkv_seq_segments(p, 0, ps, first, n, from, 4096, &nf));
  CHECK_OK(pkv_seq_segments(c, 0, cs, first, n, to, 4096, &nt));
  if (!CHECK_EQ_INT(nf, nt)) return 0;
  uint64_t moved = 0;
  for (uint32_t i = 0; i < nt; i++) {
    if (!to[i].base) continue; /* a window's given-back block: nothing to write */
    if (!CHECK(from[i].base != NULL && from[i].bytes == to[i].bytes)) return 0;
    memcpy(to[i].base, from[i].base, to[i].bytes);
    moved += to[i].bytes;
  }
  pkv_segment sf, st;
  CHECK_OK(pkv_seq_state_segment(p, 0, ps, &sf));
  CHECK_OK(pkv_seq_state_segment(c, 0, cs, &st));
  CHECK_EQ_INT(sf.bytes, st.bytes);
  if (st.base) memcpy(st.base, sf.base, st.bytes), moved += st.bytes;
  return moved;
}

/* Steps c once (it must run exactly seq, computing its remaining prompt); returns the token the
 * step samples for it and its last row's outputs. */
static void step_one(pkv_engine *c, uint64_t seq, uint32_t kv_width, int mla, float *out_last) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(c, &b)) || !CHECK(b != NULL)) return;
  pkv_batch_view v = tu_view(b);
  CHECK_EQ_INT(v.num_seqs, 1);
  CHECK(v.seq_ids[0] == seq);
  run_layers(b, kv_width, mla, out_last);
  int32_t sampled = 7;
  CHECK_OK(pkv_commit(b, &sampled));
  CHECK_ENGINE(c);
}

static int close_to(const float *a, const float *b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (fabsf(a[i] - b[i]) > 1e-5f * (1.0f + fabsf(b[i]))) return 0;
  return 1;
}

/* ---------------------------------------------------------------- producer: holds */

static void hold_manual(void) {
  pkv_engine *e = make(32, NULL);
  int32_t t[10];
  tu_fill(t, 10, 100);
  uint64_t s = computed_seq(e, t, 10, ROW, 0, NULL);
  pkv_stats before = tu_stats(e);
  CHECK_OK(pkv_hold(e, s, UINT32_MAX));
  struct pkv_seq_info i = info_of(e, s);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_HOLDING);
  CHECK_EQ_INT(i.kv_tier, PKV_TIER_DEVICE);
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_held_seqs, 1);
  CHECK_EQ_INT(st.num_held_blocks, 3);
  CHECK_EQ_INT(st.num_used_blocks, before.num_used_blocks); /* nothing moved */
  /* Its bytes are readable; it cannot change, run or be released meanwhile. */
  pkv_segment seg[64];
  uint32_t n = 0;
  CHECK_OK(pkv_seq_segments(e, 0, s, 0, 3, seg, 64, &n));
  CHECK_EQ_INT(n, 3 * LAYERS * 2);
  CHECK_ERR(e, pkv_release(e, s), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_append(e, s, t, 1), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_STATE);
  pkv_batch *b = NULL;
  CHECK_ERR(e, pkv_batch_begin(e, &s, NULL, 1, &b), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_hold_end(e, s, 7), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ENGINE(e);
  /* Its sealed blocks stay in the prefix cache: another prompt shares them while it is held. */
  uint32_t cached = 0;
  uint64_t other = tu_alloc(e, t, 10, &cached);
  CHECK_EQ_INT(cached, 8);
  CHECK_OK(pkv_release(e, other));
  CHECK_OK(pkv_hold_end(e, s, PKV_TRANSFER_DONE));
  i = info_of(e, s);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(i.kv_tier, PKV_TIER_NONE);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_held_seqs, 0);
  CHECK_EQ_INT(st.num_held_blocks, 0);
  CHECK_EQ_INT(st.num_holds_done, 1);
  CHECK_EQ_INT(st.num_used_blocks, 0);
  CHECK_ERR(e, pkv_hold_end(e, s, PKV_TRANSFER_DONE), PKV_ERR_STATE); /* ended once */
  CHECK_ERR(e, pkv_seq_segments(e, 0, s, 0, 1, seg, 64, &n), PKV_ERR_STATE);
  CHECK_OK(pkv_release(e, s));
  /* FAILED is counted apart. */
  s = computed_seq(e, t, 10, ROW, 0, NULL);
  CHECK_OK(pkv_hold(e, s, 0));
  CHECK_OK(pkv_hold_end(e, s, PKV_TRANSFER_FAILED));
  CHECK_EQ_INT(tu_stats(e).num_holds_failed, 1);
  CHECK_OK(pkv_release(e, s));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void hold_refusals(void) {
  pkv_engine *e = make(32, NULL);
  int32_t t[10];
  tu_fill(t, 10, 100);
  CHECK_ERR(e, pkv_hold(e, 99, 0), PKV_ERR_NOT_FOUND);
  CHECK_ERR(e, pkv_hold_end(e, 99, PKV_TRANSFER_DONE), PKV_ERR_NOT_FOUND);
  uint64_t s = tu_alloc(e, t, 10, NULL); /* not computed */
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_STATE);
  CHECK_ERR(e, pkv_hold_end(e, s, PKV_TRANSFER_DONE), PKV_ERR_STATE);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b));
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_STATE); /* in the open batch */
  CHECK_OK(pkv_batch_end(b));
  CHECK_OK(pkv_preempt(e, s));
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_STATE); /* preempted */
  CHECK_OK(pkv_release(e, s));
  uint64_t r = submit(e, t, 10, 0, 0, 2);
  CHECK_ERR(e, pkv_hold(e, r, 0), PKV_ERR_STATE); /* a request holds when it finishes */
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_held_seqs, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);

  /* The bound: 2 blocks at most. */
  pkv_engine_params p;
  tu_params(&p, BS, 32);
  p.max_held_blocks = 33;
  pkv_engine *bad = NULL;
  CHECK_STATUS(pkv_engine_create(&p, &bad), PKV_ERR_INVALID_ARGUMENT);
  p.max_held_blocks = 2;
  e = tu_engine_p(&p);
  s = computed_seq(e, t, 10, ROW, 0, NULL); /* 3 blocks */
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_NO_SPACE);
  CHECK_EQ_INT(info_of(e, s).transfer, PKV_TRANSFER_NONE);
  uint64_t small = computed_seq(e, t, 6, ROW, 0, NULL); /* 2 blocks, 1 shared with s */
  CHECK_OK(pkv_hold(e, small, 0));
  CHECK_EQ_INT(tu_stats(e).num_held_blocks, 2);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e); /* a hold ends with its engine */

  /* A timeout on one rank of several would let ranks disagree. */
  tu_params(&p, BS, 32);
  p.tp_size = 2;
  e = tu_engine_p(&p);
  s = computed_seq(e, t, 10, ROW / 2, 0, NULL);
  CHECK_ERR(e, pkv_hold(e, s, 0), PKV_ERR_UNSUPPORTED);
  CHECK_ERR(e, pkv_hold(e, s, 1000), PKV_ERR_UNSUPPORTED);
  CHECK_OK(pkv_hold(e, s, UINT32_MAX));
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.hold_on_finish = 1;
  uint64_t id = 0;
  CHECK_ERR(e, pkv_submit(e, t, 10, &rp, &id), PKV_ERR_UNSUPPORTED);
  rp.hold_timeout_ms = UINT32_MAX;
  CHECK_OK(pkv_submit(e, t, 10, &rp, &id));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void hold_timeout(void) {
  setenv("PKV_TEST_CLOCK_MS", "1000", 1);
  pkv_engine *e = make(32, NULL);
  int32_t t[10];
  tu_fill(t, 10, 100);
  uint64_t a = computed_seq(e, t, 10, ROW, 0, NULL);
  uint64_t b = computed_seq(e, t + 1, 9, ROW, 0, NULL);
  uint64_t c = computed_seq(e, t + 2, 8, ROW, 0, NULL);
  CHECK_OK(pkv_hold(e, a, 500));        /* until 1500 */
  CHECK_OK(pkv_hold(e, b, 0));          /* the default: until 1000 + 480000 */
  CHECK_OK(pkv_hold(e, c, UINT32_MAX)); /* never */
  setenv("PKV_TEST_CLOCK_MS", "1499", 1);
  CHECK_EQ_INT(tu_stats(e).num_held_seqs, 3);
  setenv("PKV_TEST_CLOCK_MS", "1500", 1);
  pkv_stats st = tu_stats(e); /* any call reads the clock */
  CHECK_EQ_INT(st.num_held_seqs, 2);
  CHECK_EQ_INT(st.num_holds_timed_out, 1);
  CHECK_EQ_INT(info_of(e, a).transfer, PKV_TRANSFER_NONE);
  CHECK_ERR(e, pkv_hold_end(e, a, PKV_TRANSFER_DONE), PKV_ERR_STATE); /* too late */
  setenv("PKV_TEST_CLOCK_MS", "480999", 1);
  CHECK_EQ_INT(tu_stats(e).num_held_seqs, 2);
  setenv("PKV_TEST_CLOCK_MS", "481000", 1);
  CHECK_EQ_INT(tu_stats(e).num_held_seqs, 1);
  setenv("PKV_TEST_CLOCK_MS", "999999999", 1);
  st = tu_stats(e);
  CHECK_EQ_INT(st.num_held_seqs, 1); /* c never times out */
  CHECK_EQ_INT(st.num_holds_timed_out, 2);
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, b));
  CHECK_OK(pkv_hold_end(e, c, PKV_TRANSFER_DONE));
  CHECK_OK(pkv_release(e, c));
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 0);
  pkv_engine_destroy(e);
  unsetenv("PKV_TEST_CLOCK_MS");
}

/* A request of hold_on_finish: finished and listed as any, its blocks held. */
static void hold_request(void) {
  pkv_engine_params p;
  tu_params(&p, BS, 32);
  p.max_held_blocks = 5;
  pkv_engine *e = tu_engine_p(&p);
  int32_t t[10];
  tu_fill(t, 10, 100);
  uint64_t r = submit(e, t, 10, 0, 1, 1);
  uint64_t plain = submit(e, t, 10, 0, 0, 1);
  uint64_t big = 0;
  {
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = 1;
    rp.hold_on_finish = 1;
    int32_t u[20];
    tu_fill(u, 20, 500);
    CHECK_OK(pkv_submit(e, u, 20, &rp, &big)); /* 5 blocks: past the bound once r holds 3 */
  }
  for (int i = 0; i < 4; i++) {
    pkv_batch *b = NULL;
    CHECK_OK(pkv_step(e, &b));
    if (!b) break;
    run_layers(b, ROW, 0, NULL);
    int32_t sampled[4] = {1, 2, 3, 4};
    CHECK_OK(pkv_commit(b, sampled));
    CHECK_ENGINE(e);
  }
  uint64_t done[8];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_finished(e, done, 8, &n));
  CHECK_EQ_INT(n, 3);
  struct pkv_seq_info i = info_of(e, r);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_HOLDING);
  CHECK_EQ_INT(i.finish_reason, PKV_FINISH_LENGTH);
  CHECK_EQ_INT(i.num_tokens, 11);
  CHECK_EQ_INT(i.num_computed_tokens, 10);
  CHECK_EQ_INT(info_of(e, plain).transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(info_of(e, big).transfer, PKV_TRANSFER_NONE); /* refused: the bound */
  pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_holds_refused, 1);
  CHECK_EQ_INT(st.num_held_blocks, 3);
  CHECK_EQ_INT(st.num_finished_requests, 3);
  pkv_segment seg[64];
  uint32_t ns = 0;
  CHECK_OK(pkv_seq_segments(e, 0, r, 0, 3, seg, 64, &ns));
  CHECK_ERR(e, pkv_release(e, r), PKV_ERR_STATE);
  CHECK_OK(pkv_hold_end(e, r, PKV_TRANSFER_DONE));
  CHECK_OK(pkv_release(e, r));
  CHECK_OK(pkv_release(e, plain));
  CHECK_OK(pkv_release(e, big));
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 0);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- consumer: remote fills */

/* A producer computes prompt[n] and holds it; the consumer receives its first `remote` tokens,
 * then steps once. The consumer's bytes of the received blocks are the producer's, its output
 * for the last prompt token is the producer's, and a later prompt hits the received blocks. */
static void fill_case(void (*tweak)(pkv_engine_params *), uint32_t kv_width, int mla, uint32_t n,
                      uint32_t remote, uint32_t preload) {
  pkv_engine *p = make(64, tweak), *c = make(64, tweak);
  int32_t t[64];
  tu_fill(t, n, 300);
  float want[LAYERS * QROW] = {0}, got[LAYERS * QROW] = {0};
  uint64_t ps = computed_seq(p, t, n, kv_width, mla, want);
  CHECK_OK(pkv_hold(p, ps, UINT32_MAX));
  /* The consumer may cache a prefix already: the hit is subtracted. */
  uint32_t hit = 0;
  if (preload) {
    uint64_t pre = computed_seq(c, t, preload, kv_width, mla, NULL);
    CHECK_OK(pkv_release(c, pre));
    hit = (preload / BS) * BS;
  }
  uint64_t cs = submit(c, t, n, remote, 0, 1);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(c, &b));
  CHECK(b == NULL); /* nothing to run: it receives */
  uint64_t ids[4];
  uint32_t k = 0;
  CHECK_OK(pkv_drain_receiving(c, ids, 4, &k));
  if (!CHECK_EQ_INT(k, 1) || !CHECK(ids[0] == cs)) return;
  CHECK_OK(pkv_drain_receiving(c, ids, 4, &k));
  CHECK_EQ_INT(k, 0); /* listed once */
  struct pkv_seq_info i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_RECEIVING);
  CHECK_EQ_INT(i.num_computed_tokens, hit);
  CHECK_EQ_INT(i.remote_first_block, hit / BS);
  CHECK_EQ_INT(i.remote_num_blocks, (remote + BS - 1) / BS - hit / BS);
  CHECK_EQ_INT(i.num_remote_tokens, remote);
  pkv_stats st = tu_stats(c);
  CHECK_EQ_INT(st.num_receiving_requests, 1);
  CHECK_EQ_INT(st.num_receiving_blocks, i.remote_num_blocks);
  CHECK_ERR(c, pkv_release(c, cs), PKV_ERR_STATE);
  CHECK_OK(pkv_step(c, &b));
  CHECK(b == NULL); /* still receiving: never run */
  CHECK_ENGINE(c);
  CHECK(transfer(p, ps, c, cs, i.remote_first_block, i.remote_num_blocks) > 0);
  CHECK_OK(pkv_receive_end(c, cs, PKV_TRANSFER_DONE));
  i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(i.num_computed_tokens, remote);
  st = tu_stats(c);
  CHECK_EQ_INT(st.num_receives_done, 1);
  CHECK_EQ_INT(st.received_tokens, remote - hit);
  CHECK_EQ_INT(st.num_receiving_requests, 0);
  CHECK_ENGINE(c);
  /* The received full blocks are in the prefix cache, as if computed. */
  uint32_t cached = 0;
  CHECK_OK(pkv_allocate_query(c, t, n, NULL, NULL, &cached));
  CHECK_EQ_INT(cached,
               (remote / BS) * BS < (n - 1) / BS * BS ? (remote / BS) * BS : (n - 1) / BS * BS);
  /* Its step computes the rest and gets the producer's output. */
  step_one(c, cs, kv_width, mla, got);
  CHECK(close_to(got, want, LAYERS * QROW));
  CHECK_OK(pkv_hold_end(p, ps, PKV_TRANSFER_DONE));
  CHECK_ENGINE(p);
  pkv_engine_destroy(p);
  pkv_engine_destroy(c);
}

static void fill_done(void) {
  fill_case(tweak_none, ROW, 0, 10, 9, 0);  /* a partial last block */
  fill_case(tweak_none, ROW, 0, 13, 12, 0); /* whole blocks */
  fill_case(tweak_none, ROW, 0, 13, 12, 6); /* a local hit of one block first */
}

static void tweak_window(pkv_engine_params *p) {
  static const uint32_t windows[LAYERS] = {4, 0}; /* layer 0 slides: two KV groups */
  p->layer_windows = windows;
}

static void tweak_mla(pkv_engine_params *p) {
  p->kv_layout = PKV_KV_LAYOUT_MLA;
  p->num_kv_heads = 1;
  p->kv_lora_rank = 8;
  p->qk_rope_head_dim = 8;
  p->head_dim = 16;
  p->num_q_heads = 2;
  p->softmax_scale = 0.25f;
}

static void fill_groups(void) {
  fill_case(tweak_window, ROW, 0, 18, 17, 0);
  fill_case(tweak_mla, 16, 1, 14, 13, 5);
}

/* STATE layers (a hybrid model): layers 0 and 2 attention, 1 and 3 recurrent (one f32 part of
 * [2][4][4] each). The producer holds its sequence after 12 tokens (3 blocks) with its working
 * state; the consumer's request is that prompt plus the first sampled token, its 12 tokens
 * remote: blocks and state arrive, the state's checkpoint at boundary 3 is taken as a step's
 * would be, and a later prompt hits all 12 tokens from it. */
static pkv_layer_spec state_specs_[4];

static void tweak_state(pkv_engine_params *p) {
  p->num_layers = 4;
  p->max_num_seqs = 3;
  p->num_state_checkpoints = 2;
  memset(state_specs_, 0, sizeof state_specs_);
  for (int l = 1; l < 4; l += 2) {
    state_specs_[l].kind = PKV_LAYER_STATE;
    state_specs_[l].state_dtype[0] = PKV_DTYPE_F32;
    state_specs_[l].state_shape[0] = 2, state_specs_[l].state_shape[1] = 4;
    state_specs_[l].state_shape[2] = 4;
  }
  p->layer_specs = state_specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* Attention on layers 0 and 2 of an open batch (the host runs the recurrent layers itself). */
static void run_attention_layers(pkv_batch *b) {
  pkv_batch_view v = tu_view(b);
  static float q[64 * QROW], k[64 * ROW], val[64 * ROW], out[64 * QROW];
  for (uint32_t l = 0; l < 4; l += 2) {
    for (uint32_t t = 0; t < v.num_tokens; t++)
      qkv((uint32_t)v.positions[t], l, ROW, q + t * QROW, k + t * ROW, val + t * ROW);
    CHECK_OK(pkv_attention(b, l, q, k, val, out));
  }
}

static void fill_state(void) {
  pkv_engine *p = make(64, tweak_state), *c = make(64, tweak_state);
  const struct pkv_pool_info pi = tu_pool(p), ci = tu_pool(c);
  int32_t t[13];
  tu_fill(t, 13, 300);
  /* The producer: 12 tokens, its working state written by "its recurrence" (a pattern). */
  uint64_t ps = tu_alloc(p, t, 12, NULL);
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(p, &ps, NULL, 1, &b))) return;
  const int32_t pslot = tu_view(b).state_slots[0];
  unsigned char *pstate = (unsigned char *)pi.state_base + (uint64_t)pslot * pi.state_slot_bytes;
  for (uint64_t i = 0; i < pi.state_slot_bytes; i++) pstate[i] = (unsigned char)(i * 7 + 3);
  run_attention_layers(b);
  CHECK_OK(pkv_batch_end(b));
  CHECK_OK(pkv_hold(p, ps, UINT32_MAX));
  pkv_segment seg;
  CHECK_OK(pkv_seq_state_segment(p, 0, ps, &seg));
  CHECK(seg.base == pstate && seg.bytes == pi.state_slot_bytes);
  /* The consumer: 12 remote tokens of 13. */
  uint64_t cs = submit(c, t, 13, 12, 0, 1);
  CHECK_OK(pkv_step(c, &b));
  CHECK(b == NULL);
  struct pkv_seq_info i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_RECEIVING);
  CHECK_EQ_INT(i.remote_num_blocks, 3);
  CHECK(transfer(p, ps, c, cs, 0, 3) > 0);
  const uint64_t before = tu_stats(c).num_state_checkpoints_taken;
  CHECK_OK(pkv_receive_end(c, cs, PKV_TRANSFER_DONE));
  CHECK_EQ_INT(tu_stats(c).num_state_checkpoints_taken, before + 1);
  CHECK_ENGINE(c);
  /* Its step: the checkpoint's copy first, from the received state. */
  CHECK_OK(pkv_step(c, &b));
  if (!CHECK(b != NULL)) return;
  pkv_batch_view v = tu_view(b);
  CHECK_EQ_INT(v.num_tokens, 1);
  const unsigned char *cstate =
      (unsigned char *)ci.state_base + (uint64_t)v.state_slots[0] * ci.state_slot_bytes;
  CHECK(memcmp(cstate, pstate, ci.state_slot_bytes) == 0);
  int32_t checkpoint = -1;
  for (uint32_t k = 0; k < v.num_copies; k++)
    if (v.copy_kind[k] == PKV_COPY_STATE && v.copy_src[k] == v.state_slots[0])
      checkpoint = v.copy_dst[k];
  CHECK(checkpoint >= 0);
  run_attention_layers(b); /* does the copies first */
  if (checkpoint >= 0)
    CHECK(memcmp((unsigned char *)ci.state_base + (uint64_t)checkpoint * ci.state_slot_bytes,
                 pstate, ci.state_slot_bytes) == 0);
  int32_t sampled = 5;
  CHECK_OK(pkv_commit(b, &sampled));
  /* A later prompt of the same tokens starts from the received checkpoint: 12 tokens hit. */
  uint32_t cached = 0;
  CHECK_OK(pkv_allocate_query(c, t, 13, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 12);
  CHECK_ENGINE(c);
  CHECK_OK(pkv_hold_end(p, ps, PKV_TRANSFER_DONE));
  pkv_engine_destroy(p);
  pkv_engine_destroy(c);
}

static void fill_failed(void) {
  pkv_engine *p = make(64, NULL), *c = make(64, NULL);
  int32_t t[16];
  tu_fill(t, 13, 300);
  float want[LAYERS * QROW], got[LAYERS * QROW];
  uint64_t ps = computed_seq(p, t, 13, ROW, 0, want);
  CHECK_OK(pkv_hold(p, ps, UINT32_MAX));
  uint64_t cs = submit(c, t, 13, 12, 0, 1);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(c, &b));
  CHECK(b == NULL);
  /* Half the bytes arrive, then the peer is gone: nothing of it may be used. */
  struct pkv_seq_info i = info_of(c, cs);
  CHECK(transfer(p, ps, c, cs, 0, 1) > 0);
  pkv_stats before = tu_stats(c);
  CHECK_OK(pkv_receive_end(c, cs, PKV_TRANSFER_FAILED));
  pkv_stats st = tu_stats(c);
  CHECK_EQ_INT(st.num_receives_failed, 1);
  CHECK_EQ_INT(st.num_prefix_nodes, before.num_prefix_nodes); /* nothing sealed */
  CHECK_EQ_INT(st.num_used_blocks, 0);
  uint32_t cached = 1;
  CHECK_OK(pkv_allocate_query(c, t, 13, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0);
  i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(i.is_preempted, 1);
  CHECK_ENGINE(c);
  /* It computes its prompt itself, and gets the same output. */
  step_one(c, cs, ROW, 0, got);
  CHECK(close_to(got, want, LAYERS * QROW));
  CHECK_EQ_INT(tu_stats(c).num_receives_done, 0);
  /* FAILED_FINISH: it ends, listed as finished. */
  uint64_t cs2 = submit(c, t + 1, 12, 11, 0, 1);
  CHECK_OK(pkv_step(c, &b));
  if (b) { /* cs's decode token */
    run_layers(b, ROW, 0, NULL);
    int32_t s[2] = {1, 1};
    CHECK_OK(pkv_commit(b, s));
  }
  CHECK_EQ_INT(info_of(c, cs2).transfer, PKV_TRANSFER_RECEIVING);
  CHECK_OK(pkv_receive_end(c, cs2, PKV_TRANSFER_FAILED_FINISH));
  i = info_of(c, cs2);
  CHECK_EQ_INT(i.finish_reason, PKV_FINISH_TRANSFER_FAILED);
  CHECK_EQ_INT(i.kv_tier, PKV_TIER_NONE);
  uint64_t done[4];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_finished(c, done, 4, &n));
  CHECK(n >= 1 && done[n - 1] == cs2);
  CHECK_OK(pkv_release(c, cs2));
  CHECK_ENGINE(c);
  CHECK_OK(pkv_hold_end(p, ps, PKV_TRANSFER_FAILED));
  pkv_engine_destroy(p);
  pkv_engine_destroy(c);
}

/* A hit that covers the remote tokens: it runs as any request, never listed. Others run while
 * one receives. */
static void fill_hit_and_others(void) {
  pkv_engine *c = make(64, NULL);
  int32_t t[16];
  tu_fill(t, 13, 300);
  uint64_t pre = computed_seq(c, t, 13, ROW, 0, NULL);
  CHECK_OK(pkv_release(c, pre));
  uint64_t r = submit(c, t, 13, 8, 0, 1);
  uint64_t other = submit(c, t + 3, 6, 0, 0, 1);
  uint64_t recv = submit(c, t + 2, 11, 10, 0, 1);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(c, &b));
  if (!CHECK(b != NULL)) return;
  pkv_batch_view v = tu_view(b);
  CHECK_EQ_INT(v.num_seqs, 2); /* r (its hit covers 8) and other; recv receives */
  CHECK(v.seq_ids[0] == r && v.seq_ids[1] == other);
  run_layers(b, ROW, 0, NULL);
  int32_t s[2] = {1, 1};
  CHECK_OK(pkv_commit(b, s));
  uint64_t ids[4];
  uint32_t k = 0;
  CHECK_OK(pkv_drain_receiving(c, ids, 4, &k));
  CHECK_EQ_INT(k, 1);
  CHECK(ids[0] == recv);
  CHECK_EQ_INT(info_of(c, r).transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(info_of(c, recv).transfer, PKV_TRANSFER_RECEIVING);
  CHECK_ENGINE(c);
  CHECK_OK(pkv_receive_end(c, recv, PKV_TRANSFER_FAILED_FINISH));
  pkv_engine_destroy(c);
}

static void fill_refusals(void) {
  pkv_engine *c = make(64, NULL);
  int32_t t[16];
  tu_fill(t, 13, 300);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  uint64_t id = 0;
  rp.num_remote_tokens = 13; /* the last prompt token is computed here */
  CHECK_ERR(c, pkv_submit(c, t, 13, &rp, &id), PKV_ERR_INVALID_ARGUMENT);
  rp.num_remote_tokens = 12;
  rp.hold_on_finish = 2;
  CHECK_ERR(c, pkv_submit(c, t, 13, &rp, &id), PKV_ERR_INVALID_ARGUMENT);
  rp.hold_on_finish = 0;
  rp.reserved1 = 1;
  CHECK_ERR(c, pkv_submit(c, t, 13, &rp, &id), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(tu_stats(c).num_waiting_requests, 0);
  uint32_t k = 0;
  uint64_t ids[2];
  CHECK_ERR(c, pkv_drain_receiving(c, ids, 2, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(c, pkv_drain_receiving(c, NULL, 2, &k), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_drain_receiving(c, NULL, 0, &k));
  CHECK_EQ_INT(k, 0);
  CHECK_ERR(c, pkv_receive_end(c, 42, PKV_TRANSFER_DONE), PKV_ERR_NOT_FOUND);
  uint64_t plain = tu_alloc(c, t, 13, NULL);
  CHECK_ERR(c, pkv_receive_end(c, plain, PKV_TRANSFER_DONE), PKV_ERR_STATE);
  CHECK_ERR(c, pkv_receive_end(c, plain, 3), PKV_ERR_INVALID_ARGUMENT);
  pkv_segment seg;
  CHECK_OK(pkv_seq_state_segment(c, 0, plain, &seg)); /* no STATE layers: nothing to move */
  CHECK(seg.base == NULL && seg.bytes == 0);
  CHECK_ERR(c, pkv_seq_state_segment(c, 0, plain, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(c, pkv_seq_state_segment(c, 1, plain, &seg), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(c, pkv_seq_state_segment(c, 0, 42, &seg), PKV_ERR_NOT_FOUND);
  CHECK_ENGINE(c);
  pkv_engine_destroy(c);
}

int main(void) {
  TU_RUN(hold_manual);
  TU_RUN(hold_refusals);
  TU_RUN(hold_timeout);
  TU_RUN(hold_request);
  TU_RUN(fill_done);
  TU_RUN(fill_groups);
  TU_RUN(fill_state);
  TU_RUN(fill_failed);
  TU_RUN(fill_hit_and_others);
  TU_RUN(fill_refusals);
  return tu_summary();
}
