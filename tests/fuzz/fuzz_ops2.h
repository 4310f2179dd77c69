/*
 * fuzz_ops2.h - fuzz_api's read-only calls (infos, tables with short buffers, stats, drains, pool
 * info, hashes), the prefix-cache reset, and fz_op, which picks the next call from the input.
 * Included by fuzz_ops.h.
 */

/* A caller buffer of cap entries (exactly: ASan sees any write past it), sometimes NULL. */
static void op_table(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  uint32_t cap = fz_pick(in, 24);
  int which = fz_pick(in, 2), null_out = fz_pick(in, 8) == 0, null_len = fz_pick(in, 16) == 0;
  int32_t *out = cap && !null_out ? malloc(cap * sizeof *out) : NULL;
  uint32_t len = 0xffffffffu;
  uint64_t before = fz_state(w);
  pkv_status s = which ? pkv_seq_tokens(w->e, seq, out, cap, null_len ? NULL : &len)
                       : pkv_seq_block_table(w->e, seq, out, cap, null_len ? NULL : &len);
  fz_after(w, before, s, which ? "pkv_seq_tokens" : "pkv_seq_block_table");
  if (s == PKV_OK) FZ_CHECK(len <= cap || out == NULL, "%u entries in a buffer of %u", len, cap);
  if (s == PKV_ERR_INVALID_ARGUMENT && out && !null_len && len != 0xffffffffu)
    FZ_CHECK(len > cap, "short buffer refused, needed %u of %u", len, cap);
  free(out);
}

static void op_info(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = fz_pick(in, 8) ? sizeof info : fz_pick(in, sizeof info);
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = fz_pick(in, 8) ? sizeof st : fz_pick(in, sizeof st);
  int null_out = fz_pick(in, 16) == 0;
  uint64_t before = fz_state(w);
  fz_after(w, before, pkv_seq_info(w->e, seq, null_out ? NULL : &info), "pkv_seq_info");
  fz_after(w, before, pkv_engine_stats(w->e, null_out ? NULL : &st), "pkv_engine_stats");
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = fz_pick(in, 8) ? sizeof v : fz_pick(in, sizeof v);
  pkv_status s = pkv_batch_info(fz_batch(w, in), &v);
  fz_after(w, before, s, "pkv_batch_info");
  if (s == PKV_OK && v.struct_size == sizeof v) {
    FZ_CHECK(v.num_seqs >= 1 && v.query_start[v.num_seqs] == (int32_t)v.num_tokens, "view rows");
    for (uint32_t i = 0; i < v.num_tokens; i++)
      FZ_CHECK(
          v.slot_mapping[i] >= -1 && v.slot_mapping[i] < (int64_t)w->p.num_blocks * w->p.block_size,
          "slot %lld", (long long)v.slot_mapping[i]);
  }
}

static void op_drain(fz_world *w, fz_input *in) {
  uint32_t cap = fz_pick(in, 6), len = 0;
  int null_out = fz_pick(in, 8) == 0;
  uint64_t before = fz_state(w);
  if (fz_pick(in, 2)) {
    uint64_t *out = cap && !null_out ? malloc(cap * sizeof *out) : NULL;
    pkv_status s = pkv_drain_finished(w->e, out, cap, &len);
    fz_after(w, before, s, "pkv_drain_finished");
    FZ_CHECK(s != PKV_OK || len <= cap, "drained %u into %u", len, cap);
    free(out);
    return;
  }
  pkv_kv_event *ev = cap && !null_out ? malloc(cap * sizeof *ev) : NULL;
  pkv_status s = pkv_drain_kv_events(w->e, ev, cap, &len);
  fz_after(w, before, s, "pkv_drain_kv_events");
  for (uint32_t i = 0; s == PKV_OK && i < len; i++) {
    FZ_CHECK(w->p.enable_kv_events, "an event with events off");
    FZ_CHECK(ev[i].type >= PKV_EVENT_BLOCK_STORED && ev[i].type <= PKV_EVENT_OVERFLOW, "type %u",
             ev[i].type);
    FZ_CHECK(ev[i].seq_no > w->last_event_seq_no, "seq_no %llu after %llu",
             (unsigned long long)ev[i].seq_no, (unsigned long long)w->last_event_seq_no);
    w->last_event_seq_no = ev[i].seq_no;
    if (ev[i].type <= PKV_EVENT_BLOCK_REMOVED)
      FZ_CHECK(ev[i].num_tokens == w->p.block_size, "event of %u tokens", ev[i].num_tokens);
  }
  free(ev);
}

static void op_reset(fz_world *w, fz_input *in) {
  (void)in;
  uint64_t before = fz_state(w);
  pkv_stats s0 = fz_stats(w);
  pkv_status s = pkv_reset_prefix_cache(w->e);
  fz_after(w, before, s, "pkv_reset_prefix_cache");
  if (s == PKV_OK) {
    pkv_stats s1 = fz_stats(w);
    FZ_CHECK(s1.num_cached_blocks == 0 && s1.num_used_blocks == s0.num_used_blocks, "reset");
  }
}

static void op_misc(fz_world *w, fz_input *in) {
  uint64_t before = fz_state(w);
  struct pkv_pool_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = fz_pick(in, 4) ? sizeof pi : fz_pick(in, sizeof pi);
  fz_after(w, before, pkv_pool_info(w->e, &pi), "pkv_pool_info");
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = fz_pick(in, 4) ? sizeof b : fz_pick(in, sizeof b);
  fz_after(w, before, pkv_engine_budget(w->e, &b), "pkv_engine_budget");
  int stream = 0;
  pkv_status s = pkv_engine_set_stream(w->e, fz_pick(in, 2) ? &stream : NULL);
  fz_after(w, before, s, "pkv_engine_set_stream");
  FZ_CHECK(pkv_engine_last_error(w->e) != NULL && pkv_status_string(fz_u32(in)) != NULL, "strings");
}

/* The canonical hash: deterministic, argument checks, a salted root differs from the unsalted. */
static void op_hash(fz_world *w, fz_input *in) {
  (void)w;
  char salt[8];
  uint32_t salt_len = fz_pick(in, 9);
  for (uint32_t i = 0; i < salt_len; i++) salt[i] = (char)fz_u8(in);
  uint64_t seed = fz_u64(in), root = 0, again = 1, h = 0, h2 = 1;
  pkv_status s = pkv_block_hash_root(seed, fz_pick(in, 16) ? salt : NULL, salt_len, &root);
  FZ_CHECK(s == PKV_OK || pkv_last_error()[0], "message");
  FZ_CHECK(pkv_block_hash_root(seed, salt, salt_len, &again) == PKV_OK, "root");
  FZ_CHECK(s != PKV_OK || root == again, "root not deterministic");
  uint32_t n = fz_tokens(in, FZ_MAX_TOKENS);
  const int32_t *t = fz_pick(in, 16) ? fz_tokens_buf : NULL;
  uint64_t *out = fz_pick(in, 16) ? &h : NULL;
  s = pkv_block_hash(seed, root, t, n, out);
  FZ_CHECK((s == PKV_OK) == (t != NULL && n > 0 && out != NULL), "pkv_block_hash -> %d", s);
  if (s == PKV_OK) {
    FZ_CHECK(pkv_block_hash(seed, root, t, n, &h2) == PKV_OK && h == h2, "hash not deterministic");
  }
}

/* Rollback to a fuzzed length (0 and past the end included): a failure changes nothing. */
static void op_truncate(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  uint32_t n = fz_pick(in, 4) ? fz_pick(in, FZ_MAX_TOKENS + 2) : fz_u32(in);
  uint64_t before = fz_state(w);
  pkv_status s = pkv_truncate(w->e, seq, n);
  fz_after(w, before, s, "pkv_truncate");
}

/* KV transfers (0.12): a hold (no timeout, or the default one), a hold's or a remote fill's end
 * with any outcome (unknown ones too), the receiving list, a state segment on a rank or past
 * them; a refusal changes nothing. */
static void op_transfer(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in), before = fz_state(w), ids[4];
  uint32_t n = 0;
  pkv_segment seg;
  pkv_status s;
  const char *what;
  switch (fz_pick(in, 5)) {
    case 0:
      s = pkv_hold(w->e, seq, fz_pick(in, 2) ? UINT32_MAX : 0), what = "pkv_hold";
      break;
    case 1:
      s = pkv_hold_end(w->e, seq, fz_pick(in, 4)), what = "pkv_hold_end";
      break;
    case 2:
      s = pkv_receive_end(w->e, seq, fz_pick(in, 4)), what = "pkv_receive_end";
      break;
    case 3:
      s = pkv_drain_receiving(w->e, fz_pick(in, 8) ? ids : NULL, fz_pick(in, 5), &n);
      what = "pkv_drain_receiving";
      FZ_CHECK(s != PKV_OK || n <= 4, "pkv_drain_receiving: %u ids", n);
      break;
    default:
      s = pkv_seq_state_segment(w->e, fz_pick(in, 3) ? 0 : 1, seq, &seg);
      what = "pkv_seq_state_segment";
      break;
  }
  fz_after(w, before, s, what);
}

typedef void (*fz_op_fn)(fz_world *, fz_input *);

static const fz_op_fn fz_ops[] = {
    op_allocate,  op_allocate,       op_append,      op_append,      op_fork,      op_release,
    op_release,   op_preempt_resume, op_batch_begin, op_batch_begin, op_attention, op_batch_end,
    op_batch_end, op_abort,          op_step,        op_step,        op_submit,    op_table,
    op_info,      op_drain,          op_reset,       op_misc,        op_hash,      op_swap,
    op_swap,      op_batch_copy,     op_truncate,    op_transfer,    op_transfer,
};

static inline void fz_op(fz_world *w, fz_input *in) {
  fz_ops[fz_pick(in, sizeof fz_ops / sizeof fz_ops[0])](w, in);
}
