/* Checkpoints of the recurrent state in the store (DESIGN.md §13) through pkv.h: a checkpoint
 * taken is written to the store (in either write mode) beside its blocks; a new engine on the
 * same store (a restart) fetches the blocks and the longest checkpoint where they reach, stages
 * it in a host state slot and restores it (PKV_COPY_STATE_IN, bytes checked), by pkv_allocate and
 * by pkv_step's background lookups alike; `pkv_store_verify` finds the values good; a corrupted
 * checkpoint is a counted, explained miss and the prompt falls back (its KV still served);
 * another state layout never hits. */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw under -std=c11 */
#include <ftw.h>
#include <sys/stat.h>

#include "test_util.h"

#define BS 4
#define LAYERS 2
#define SEQS 3
#define SLOT_BYTES 256
#define STATE_VALUE_BYTES (152 + 4 * BS + SLOT_BYTES) /* header, tokens, the slot */

static pkv_layer_spec specs_[LAYERS];
static char dir_[64];

/* f32, blocks of 4 tokens, max_num_seqs 3, a host tier of 32 blocks, a FILE store in dir_. Layer
 * 0 full attention, layer 1 STATE with one f32 [4][n] part (n 4: a 256-byte slot). */
static pkv_engine *engine(uint32_t write_mode, uint32_t n) {
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE;
  st.path = dir_;
  st.write_mode = write_mode;
  st.model_id = "test-state-store";
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.num_layers = LAYERS;
  p.max_num_seqs = SEQS;
  p.num_state_checkpoints = 2;
  p.host_num_blocks = 32;
  p.store = &st;
  memset(specs_, 0, sizeof specs_);
  specs_[1].kind = PKV_LAYER_STATE;
  specs_[1].state_dtype[1] = PKV_DTYPE_F32;
  specs_[1].state_shape[4] = 4, specs_[1].state_shape[5] = n;
  p.layer_specs = specs_;
  p.layer_spec_size = sizeof(pkv_layer_spec);
  return tu_engine_p(&p);
}

/* One batch of n of seq's tokens (0: all uncomputed); the "kernel" fills the state after it with
 * the count of tokens taken in. Returns the working slot; *in gets the source of a STATE_IN copy
 * the batch lists (-1: none), *state_at0 the slot's first byte after the copies. */
static int32_t run(pkv_engine *e, uint64_t seq, uint32_t n, int32_t *in, int *state_at0) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, n ? &n : NULL, 1, &b))) return -1;
  const pkv_batch_view v = tu_view(b);
  if (in) *in = -1;
  for (uint32_t i = 0; i < v.num_copies; i++)
    if (v.copy_kind[i] == PKV_COPY_STATE_IN && in) *in = v.copy_src[i];
  CHECK_OK(pkv_batch_copy(b));
  const int32_t slot = v.state_slots[0];
  if (state_at0) *state_at0 = tu_state_slot(e, slot, 0)[0];
  const uint32_t done = tu_info(e, seq).num_computed_tokens + v.num_tokens;
  memset(tu_state_slot(e, slot, 0), (int)done, SLOT_BYTES);
  CHECK_OK(pkv_batch_end(b));
  return slot;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Flips the last payload byte of every checkpoint value in the store directory. */
static int corrupted_;
static int corrupt_state(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)ftw;
  if (flag != FTW_F || st->st_size != STATE_VALUE_BYTES) return 0;
  FILE *f = fopen(path, "r+b");
  if (!f) return 0;
  fseek(f, STATE_VALUE_BYTES - 1, SEEK_SET);
  const int c = fgetc(f);
  fseek(f, STATE_VALUE_BYTES - 1, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
  corrupted_++;
  return 0;
}

/* Engine A computes a 10-token prompt in batches of 8 and 2 (a checkpoint at boundary 2, written
 * with blocks 0 and 1) and is destroyed; engine B on the same store hits 8 tokens from it. */
static void test_restart(void) {
  int32_t t[10];
  tu_fill(t, 10, 300);
  pkv_engine *a = engine(PKV_STORE_WRITE_THROUGH, 4);
  if (!a) return;
  const uint64_t s = tu_alloc(a, t, 10, NULL);
  run(a, s, 8, NULL, NULL);
  run(a, s, 0, NULL, NULL);
  CHECK_OK(pkv_release(a, s));
  CHECK_ENGINE(a);
  pkv_engine_destroy(a); /* its writes are finished */
  pkv_engine *b = engine(PKV_STORE_WRITE_THROUGH, 4);
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s2 = tu_alloc(b, t, 10, &cached);
  CHECK_EQ_INT(cached, 8);
  int32_t in = -1;
  int at0 = 0;
  run(b, s2, 0, &in, &at0);
  CHECK(in >= SEQS); /* a host checkpoint slot, after the swap slots */
  CHECK_EQ_INT(at0, 8);
  const pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.num_state_restores, 1);
  CHECK_EQ_INT(st.num_state_restores_from_host, 1);
  CHECK_EQ_INT(st.store_hit_tokens, 8);
  CHECK_ENGINE(b);
  CHECK_OK(pkv_release(b, s2));
  pkv_engine_destroy(b);
}

/* pkv_step's lookup runs in the background: the request's admission restores the same state. */
static void test_step_lookup(void) {
  int32_t t[10];
  tu_fill(t, 10, 300);
  pkv_engine *e = engine(PKV_STORE_READ_ONLY, 4);
  if (!e) return;
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  uint64_t id = 0;
  CHECK_OK(pkv_submit(e, t, 10, &rp, &id));
  pkv_batch *b = NULL;
  uint32_t steps = 0, first_tokens = 0;
  while (CHECK_OK(pkv_step(e, &b)) && b) {
    const pkv_batch_view v = tu_view(b);
    if (steps++ == 0) first_tokens = v.num_tokens;
    const int32_t one = 1;
    CHECK_OK(pkv_commit(b, &one));
  }
  CHECK_EQ_INT(first_tokens, 2); /* 8 of 10 hit */
  CHECK_EQ_INT(tu_stats(e).num_state_restores_from_host, 1);
  CHECK_OK(pkv_release(e, id));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* The store's own check finds the two blocks and the checkpoint good; a corrupted checkpoint is
 * rejected (counted, explained), and the prompt recomputes from token 0 with its KV cached. A
 * state of another layout (a [4][8] part) finds no checkpoint at all. */
static void test_verify_and_corrupt(void) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir_;
  pkv_store *s = NULL;
  if (CHECK_OK(pkv_store_open(&sp, &s))) {
    pkv_store_verify_result r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    CHECK_OK(pkv_store_verify(s, 0, &r));
    CHECK_EQ_INT(r.num_good, 3);
    CHECK_EQ_INT(r.num_bad, 0);
    pkv_store_close(s);
  }
  int32_t t[10];
  tu_fill(t, 10, 300);
  pkv_engine *e = engine(PKV_STORE_READ_ONLY, 8);
  if (e) {
    uint32_t cached = 99;
    const uint64_t q = tu_alloc(e, t, 10, &cached);
    CHECK_EQ_INT(cached, 0);
    CHECK_EQ_INT(tu_stats(e).num_store_rejected, 0); /* another layout: no key of it exists */
    CHECK_OK(pkv_release(e, q));
    pkv_engine_destroy(e);
  }
  corrupted_ = 0;
  nftw(dir_, corrupt_state, 8, FTW_PHYS);
  CHECK_EQ_INT(corrupted_, 1);
  e = engine(PKV_STORE_READ_ONLY, 4);
  if (!e) return;
  uint32_t cached = 99;
  const uint64_t q = tu_alloc(e, t, 10, &cached);
  CHECK_EQ_INT(cached, 0);
  const pkv_stats st = tu_stats(e);
  CHECK_EQ_INT(st.num_store_rejected, 1);
  CHECK_EQ_INT(st.state_fallback_tokens, 8);
  char why[512] = "";
  uint32_t len = 0;
  CHECK_OK(pkv_engine_store_error(e, why, sizeof why, &len));
  if (!CHECK(strstr(why, "checkpoint") && strstr(why, "checksum")))
    fprintf(stderr, "  the store's error: \"%s\"\n", why);
  CHECK_OK(pkv_release(e, q));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  if (!CHECK(mkdtemp(strcpy(dir_, "/tmp/pkv-state-store-XXXXXX")) != NULL)) return tu_summary();
  test_restart();
  test_step_lookup();
  test_verify_and_corrupt();
  nftw(dir_, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  return tu_summary();
}
