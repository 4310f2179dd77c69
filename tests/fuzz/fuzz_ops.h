/*
 * fuzz_ops.h - fuzz_api's calls: each op reads its arguments from the input (valid ones most of
 * the time, invalid ones - unknown ids, NULL pointers, short buffers, bad struct sizes, stale
 * handles - the rest), makes one pkv call and checks its result with fz_after.
 */
#ifndef PKV_FUZZ_OPS_H
#define PKV_FUZZ_OPS_H

#include "fuzz_world.h"

static int32_t fz_tokens_buf[FZ_MAX_TOKENS];
static char fz_big_salt[65537];

/* n tokens from a small alphabet (prefix hits), sometimes any int32. */
static uint32_t fz_tokens(fz_input *in, uint32_t max) {
  uint32_t n = fz_pick(in, 8) == 0 ? fz_u8(in) + 40u : fz_pick(in, 40);
  if (n > max) n = max;
  for (uint32_t i = 0; i < n; i++) {
    uint8_t b = fz_u8(in);
    fz_tokens_buf[i] = b < 224 ? b % 5 : b < 240 ? (int32_t)b : (int32_t)fz_u32(in);
  }
  return n;
}

/* A live id most of the time; else 0, a released one, the next one or any. */
static uint64_t fz_seq(fz_world *w, fz_input *in) {
  uint32_t r = fz_pick(in, 16);
  if (r < 12 && w->nseqs) return w->seqs[r % w->nseqs];
  if (r == 13 && w->ndead)
    return w->dead[fz_u8(in) % (w->ndead < FZ_MAX_DEAD ? w->ndead : FZ_MAX_DEAD)];
  if (r == 14) return w->max_id + 1;
  if (r == 15) return fz_u64(in);
  return 0;
}

static const pkv_seq_params *fz_salt(fz_input *in, pkv_seq_params *sp, char *bytes) {
  pkv_seq_params_init(sp, sizeof *sp);
  switch (fz_pick(in, 11)) {
    case 0:
      return NULL;
    case 1:
      sp->cache_salt = "a", sp->cache_salt_len = 1;
      break;
    case 2:
      sp->cache_salt = "b", sp->cache_salt_len = 1;
      break;
    case 3:
      sp->cache_salt_len = fz_pick(in, 4);
      for (uint32_t i = 0; i < sp->cache_salt_len; i++) bytes[i] = (char)fz_u8(in);
      sp->cache_salt = bytes;
      break;
    case 4:
      sp->cache_salt_len = 1 + fz_pick(in, 3);
      break; /* NULL salt with a length */
    case 5:
      sp->cache_salt = fz_big_salt, sp->cache_salt_len = 65536 + fz_pick(in, 2);
      break;
    case 6:
      sp->struct_size = fz_pick(in, sizeof *sp);
      break;
    case 7: { /* (0.5) an image's key over a few tokens, under an adapter */
      static pkv_extra_key item;
      memset(&item, 0, sizeof item);
      item.start_token = fz_pick(in, 8);
      item.end_token = item.start_token + 1 + fz_pick(in, 8);
      item.key = fz_pick(in, 2) ? "img-a" : "img-b", item.key_len = 5;
      sp->extra_keys = &item, sp->num_extra_keys = 1;
      sp->lora_id = fz_pick(in, 3);
      break;
    }
    case 8: { /* (0.5) raw key fields, most of them refused; room for any element size read */
      static pkv_extra_key raw[8];
      static char key[PKV_MAX_EXTRA_KEY_BYTES + 1];
      for (int i = 0; i < 2; i++) {
        raw[i].start_token = fz_pick(in, 24), raw[i].end_token = fz_pick(in, 24);
        raw[i].key = fz_pick(in, 8) ? key : NULL;
        raw[i].key_len = fz_pick(in, PKV_MAX_EXTRA_KEY_BYTES + 2);
        raw[i].reserved0 = fz_pick(in, 8) == 0;
      }
      sp->extra_keys = fz_pick(in, 8) ? raw : NULL;
      sp->num_extra_keys = fz_pick(in, 3);
      sp->extra_key_size = fz_pick(in, 4) ? (uint32_t)sizeof(pkv_extra_key) : fz_pick(in, 65);
      sp->lora_id = fz_u64(in);
      break;
    }
    default:
      break;
  }
  return sp;
}

static void op_allocate(fz_world *w, fz_input *in) {
  pkv_seq_params sp;
  char salt[4];
  const pkv_seq_params *spp = fz_salt(in, &sp, salt);
  uint32_t n = fz_tokens(in, FZ_MAX_TOKENS);
  const int32_t *tokens = fz_pick(in, 16) ? fz_tokens_buf : NULL;
  uint64_t before = fz_state(w);
  uint32_t q_blocks = 0, q_cached = 0;
  pkv_status qs = pkv_allocate_query(w->e, tokens, n, spp, &q_blocks, &q_cached);
  fz_after(w, before, qs, "pkv_allocate_query");
  FZ_CHECK(fz_state(w) == before, "pkv_allocate_query changed the state");
  pkv_stats s = fz_stats(w);
  uint64_t id = 0;
  uint32_t cached = 0;
  int null_out = fz_pick(in, 16) == 0;
  pkv_status as = pkv_allocate(w->e, tokens, n, spp, null_out ? NULL : &id, &cached);
  if (as == PKV_OK && w->nseqs == FZ_MAX_SEQS) { /* no room to track it */
    FZ_CHECK(pkv_release(w->e, id) == PKV_OK, "release");
    return;
  }
  if (as == PKV_OK) fz_add_seq(w, id);
  fz_after(w, before, as, "pkv_allocate");
  /* The query does not ask a store: pkv_allocate may find more there. */
  FZ_CHECK(as != PKV_OK || (qs == PKV_OK && (w->p.store ? cached >= q_cached : cached == q_cached)),
           "allocate cached %u, the query said %d/%u", cached, qs, q_cached);
  /* NO_SPACE with blocks enough: every working state slot is held (one per running sequence). */
  const int slots_full =
      fz_has_state(&w->p) &&
      s.num_seqs - s.num_preempted_seqs - s.num_swapped_seqs >= w->p.max_num_seqs;
  FZ_CHECK(qs != PKV_OK || q_blocks > s.num_free_blocks || slots_full || as != PKV_ERR_NO_SPACE,
           "query: %u blocks of %llu free, allocate: no space", q_blocks,
           (unsigned long long)s.num_free_blocks);
  if (as == PKV_OK) {
    FZ_CHECK(cached < n && cached % w->p.block_size == 0, "%u cached of %u", cached, n);
    FZ_CHECK(w->p.enable_prefix_caching || cached == 0, "a hit without prefix caching");
  }
}

static void op_append(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  uint32_t n = fz_tokens(in, 12);
  uint64_t before = fz_state(w);
  fz_after(w, before, pkv_append(w->e, seq, fz_pick(in, 16) ? fz_tokens_buf : NULL, n),
           "pkv_append");
}

static void op_fork(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in), child = 0;
  int null_out = fz_pick(in, 16) == 0;
  uint64_t before = fz_state(w);
  pkv_status s = pkv_fork(w->e, seq, null_out ? NULL : &child);
  if (s == PKV_OK && w->nseqs == FZ_MAX_SEQS) {
    FZ_CHECK(pkv_release(w->e, child) == PKV_OK, "release");
    return;
  }
  if (s == PKV_OK) fz_add_seq(w, child);
  fz_after(w, before, s, "pkv_fork");
}

static void op_release(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  uint64_t before = fz_state(w);
  pkv_status s = pkv_release(w->e, seq);
  if (s == PKV_OK) fz_forget_seq(w, seq);
  fz_after(w, before, s, "pkv_release");
}

static void op_preempt_resume(fz_world *w, fz_input *in) {
  uint64_t seq = fz_seq(w, in);
  uint32_t cached = 0;
  int resume = fz_pick(in, 2);
  uint64_t before = fz_state(w);
  pkv_status s =
      resume ? pkv_resume(w->e, seq, fz_pick(in, 4) ? &cached : NULL) : pkv_preempt(w->e, seq);
  fz_after(w, before, s, resume ? "pkv_resume" : "pkv_preempt");
}

static void op_batch_begin(fz_world *w, fz_input *in) {
  uint64_t seqs[6];
  uint32_t counts[6];
  uint32_t n = fz_pick(in, 6);
  for (uint32_t i = 0; i < n; i++) {
    seqs[i] = fz_seq(w, in);
    counts[i] = fz_pick(in, 5);
  }
  int mode = fz_pick(in, 16);
  pkv_batch *b = NULL;
  uint64_t before = fz_state(w);
  pkv_status s = pkv_batch_begin(w->e, mode == 0 ? NULL : seqs, mode < 8 ? counts : NULL, n,
                                 mode == 1 ? NULL : &b);
  if (s == PKV_OK) {
    FZ_CHECK(w->batch == NULL && b != NULL, "a second batch opened");
    w->batch = b, w->batch_from_step = 0;
  }
  fz_after(w, before, s, "pkv_batch_begin");
}

/* The open batch mostly; else NULL or a stale handle (never one that is open again). */
static pkv_batch *fz_batch(fz_world *w, fz_input *in) {
  uint32_t r = fz_pick(in, 16);
  if (r == 0) return NULL;
  if (r == 1 && w->stale != w->batch) return w->stale;
  return w->batch;
}

static void fz_closed(fz_world *w, pkv_batch *b) {
  FZ_CHECK(b == w->batch, "a handle that is not open was ended");
  w->stale = w->batch;
  w->batch = NULL;
}

/* Sparse attention's calls (0.7) on a layer with an indexer: a write of the new tokens' keys,
 * their top-k (whose rows must be ascending positions of the token's context, as many as it and
 * index_topk allow, then -1) or sparse MLA over drawn positions (some outside the context: skipped),
 * each now and then with a NULL pointer, a bad flag or out_kind. */
static void op_indexer(fz_world *w, fz_input *in, pkv_batch *b, uint32_t layer,
                       const struct pkv_layer_info *li, uint32_t rows) {
  const uint32_t dim = li->index_head_dim, heads = li->index_n_heads, topk = li->index_topk;
  float *keys = calloc((size_t)rows * dim + 1, sizeof(float));
  float *q = calloc((size_t)rows * heads * dim + 1, sizeof(float));
  float *wts = calloc((size_t)rows * heads + 1, sizeof(float));
  int32_t *out = calloc((size_t)rows * topk + 1, sizeof(int32_t));
  unsigned char *mq = calloc((size_t)rows * w->q_row * w->dtype_bytes + 1, 1);
  unsigned char *mk = calloc((size_t)rows * w->kv_row * w->dtype_bytes + 1, 1);
  unsigned char *mo = calloc((size_t)rows * w->q_row * w->dtype_bytes + 1, 1);
  for (size_t i = 0; i < (size_t)rows * dim; i++) keys[i] = (float)fz_pick(in, 5) - 2.0f;
  for (size_t i = 0; i < (size_t)rows * heads * dim; i++) q[i] = (float)fz_pick(in, 3) - 1.0f;
  for (size_t i = 0; i < (size_t)rows * heads; i++) wts[i] = 1.0f;
  for (size_t i = 0; i < (size_t)rows * topk; i++) out[i] = (int32_t)fz_pick(in, 48) - 8;
  const int bad = fz_pick(in, 16), call = fz_pick(in, 3);
  uint64_t before = fz_state(w);
  pkv_status s;
  /* the model's dtype: keys, q and weights as f32 bytes are read as f16 / bf16 pairs there */
  if (call == 0) {
    s = pkv_indexer_write(b, layer, bad == 0 ? NULL : keys, bad == 1 ? 2u : 0u);
    fz_after(w, before, s, "pkv_indexer_write");
  } else if (call == 1) {
    s = pkv_indexer_topk(b, layer, bad == 0 ? NULL : q, wts, bad == 1 ? 7u : PKV_TOPK_POSITIONS,
                         out);
    fz_after(w, before, s, "pkv_indexer_topk");
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    if (s == PKV_OK) FZ_CHECK(pkv_batch_info(b, &v) == PKV_OK, "batch_info");
    for (uint32_t t = 0; s == PKV_OK && t < rows; t++) {
      const uint32_t ctx = (uint32_t)v.positions[t] + 1, keep = ctx < topk ? ctx : topk;
      for (uint32_t j = 0; j < topk; j++) {
        const int32_t x = out[(size_t)t * topk + j];
        FZ_CHECK(j < keep
                     ? x >= 0 && (uint32_t)x < ctx && (j == 0 || x > out[(size_t)t * topk + j - 1])
                     : x == -1,
                 "top-k row %u entry %u is %d (context %u, index_topk %u)", t, j, x, ctx, topk);
      }
    }
  } else {
    s = pkv_sparse_mla_attention(b, layer, mq, mk, bad == 0 ? NULL : out,
                                 bad == 1 ? (void *)mq : mo);
    fz_after(w, before, s, "pkv_sparse_mla_attention");
  }
  if (s == PKV_OK) FZ_CHECK(bad > 1, "bad argument %d of an indexer call accepted", bad);
  free(keys), free(q), free(wts), free(out), free(mq), free(mk), free(mo);
}

static void op_attention(fz_world *w, fz_input *in) {
  pkv_batch *b = fz_batch(w, in);
  uint32_t rows = 1;
  if (b && b == w->batch) {
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    FZ_CHECK(pkv_batch_info(b, &v) == PKV_OK, "batch_info");
    rows = v.num_tokens;
  }
  /* buffers of the widest layer: pkv reads each layer at its own shape */
  size_t qn = (size_t)rows * w->q_row * w->dtype_bytes;
  size_t kn = (size_t)rows * w->kv_row * w->dtype_bytes;
  unsigned char *q = malloc(qn), *k = malloc(kn), *v = malloc(kn), *out = malloc(qn);
  int fill = fz_pick(in, 2) ? 0x3c : 0;
  memset(q, fill, qn), memset(k, fill, kn), memset(v, fill, kn);
  uint32_t layer = fz_pick(in, w->p.num_layers + 1);
  struct pkv_layer_info il;
  memset(&il, 0, sizeof il);
  il.struct_size = sizeof il;
  if (layer < w->p.num_layers && pkv_layer_info(w->e, layer, &il) == PKV_OK && il.index_head_dim &&
      fz_pick(in, 2)) {
    op_indexer(w, in, b, layer, &il, rows);
    free(q), free(k), free(v), free(out);
    return;
  }
  /* 0, 1: a NULL q, out aliasing q; 2: v NULL (K = V and MLA layers take it so); 3: k and v NULL
   * (SHARED layers take them so): each refused where the layer takes the other form */
  int bad = fz_pick(in, 16);
  uint64_t before = fz_state(w);
  pkv_status s = pkv_attention(b, layer, bad == 0 ? NULL : q, bad == 3 ? NULL : k,
                               bad == 2 || bad == 3 ? NULL : v, bad == 1 ? (void *)q : out);
  fz_after(w, before, s, "pkv_attention");
  struct pkv_layer_info li;
  memset(&li, 0, sizeof li);
  li.struct_size = sizeof li;
  if (s == PKV_OK) {
    FZ_CHECK(pkv_layer_info(w->e, layer, &li) == PKV_OK, "layer_info of an attended layer");
    FZ_CHECK(li.head_dim % 8 == 0, "attention with head_dim %u", li.head_dim);
    FZ_CHECK((bad == 3) == (li.kind == PKV_LAYER_SHARED), "k and v NULL on a layer of kind %u",
             li.kind);
    FZ_CHECK(li.kind == PKV_LAYER_SHARED || (bad == 2) == (li.k_eq_v != 0),
             "v %s on a layer with k_eq_v %u", bad == 2 ? "NULL" : "given", li.k_eq_v);
    FZ_CHECK(!li.sinks, "attention on layer %u, whose sinks the fuzzer never set", layer);
  }
  free(q), free(k), free(v), free(out);
}

static void op_batch_end(fz_world *w, fz_input *in) {
  pkv_batch *b = fz_batch(w, in);
  int commit = fz_pick(in, 2);
  int32_t sampled[8];
  for (int i = 0; i < 8; i++) sampled[i] = (int32_t)fz_pick(in, 6) - 1;
  uint32_t num_seqs = 0;
  if (b && b == w->batch) {
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    FZ_CHECK(pkv_batch_info(b, &v) == PKV_OK, "batch_info");
    num_seqs = v.num_seqs;
  }
  int32_t *tokens = NULL;
  if (fz_pick(in, 8) && num_seqs) {
    tokens = malloc(num_seqs * sizeof *tokens);
    for (uint32_t i = 0; i < num_seqs; i++) tokens[i] = sampled[i % 8];
  }
  uint64_t before = fz_state(w);
  pkv_status s = commit ? pkv_commit(b, tokens) : pkv_batch_end(b);
  free(tokens);
  if (s == PKV_OK) {
    FZ_CHECK(w->batch_from_step == commit, "%s took a %s batch", commit ? "commit" : "end",
             w->batch_from_step ? "step" : "begin");
    fz_closed(w, b);
  }
  fz_after(w, before, s, commit ? "pkv_commit" : "pkv_batch_end");
}

static void op_abort(fz_world *w, fz_input *in) {
  pkv_batch *b = fz_batch(w, in);
  pkv_batch_abort(b);
  if (b && b == w->batch) fz_closed(w, b);
  fz_consistent(w);
}

static void op_step(fz_world *w, fz_input *in) {
  pkv_batch *b = NULL;
  int null_out = fz_pick(in, 16) == 0;
  uint64_t before = fz_state(w);
  pkv_status s = pkv_step(w->e, null_out ? NULL : &b);
  if (s == PKV_OK && b) {
    FZ_CHECK(w->batch == NULL, "pkv_step opened a second batch");
    w->batch = b, w->batch_from_step = 1;
  }
  fz_after(w, before, s, "pkv_step");
}

static void op_submit(fz_world *w, fz_input *in) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = fz_pick(in, 8);
  rp.stop_token = (int32_t)fz_pick(in, 6) - 1;
  rp.priority = (int32_t)fz_pick(in, 5) - 2;
  switch (fz_pick(in, 10)) {
    case 0:
      rp.cache_salt = "a", rp.cache_salt_len = 1;
      break;
    case 1:
      rp.cache_salt_len = 2;
      break;
    case 2:
      rp.reserved0 = 1;
      break;
    case 3:
      rp.struct_size = fz_pick(in, sizeof rp);
      break;
    default:
      break;
  }
  uint32_t n = fz_tokens(in, FZ_MAX_TOKENS);
  /* (0.12) a hold when it finishes (no timeout, or the default: never reached in a run, so a
   * failed call never sees the clock end one), its first tokens remote (past the prompt too) */
  if (fz_pick(in, 6) == 0) rp.hold_on_finish = fz_pick(in, 3);
  if (rp.hold_on_finish) rp.hold_timeout_ms = fz_pick(in, 2) ? UINT32_MAX : 0;
  if (fz_pick(in, 5) == 0) rp.num_remote_tokens = fz_pick(in, n + 2);
  int null_rp = fz_pick(in, 8) == 0;
  uint64_t id = 0, before = fz_state(w);
  pkv_status s = pkv_submit(w->e, fz_tokens_buf, n, null_rp ? NULL : &rp, &id);
  if (s == PKV_OK && w->nseqs == FZ_MAX_SEQS) {
    FZ_CHECK(pkv_release(w->e, id) == PKV_OK, "release a queued request");
    return;
  }
  if (s == PKV_OK) fz_add_seq(w, id);
  fz_after(w, before, s, "pkv_submit");
}

/* pkv_swap_out / pkv_swap_in: without a host tier swap-out is refused; a move keeps the tokens
 * and the computed count and moves the sequence between the tiers. */
static void op_swap(fz_world *w, fz_input *in) {
  const int out = fz_pick(in, 2);
  uint64_t seq = fz_seq(w, in);
  const int want_swapped = !out && fz_pick(in, 2); /* for a swap-in, a swapped one mostly */
  for (uint32_t i = 0; want_swapped && i < w->nseqs; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (pkv_seq_info(w->e, w->seqs[i], &info) == PKV_OK && info.kv_tier == PKV_TIER_HOST) {
      seq = w->seqs[i];
      break;
    }
  }
  struct pkv_seq_info i0, i1;
  memset(&i0, 0, sizeof i0);
  i0.struct_size = sizeof i0;
  i1 = i0;
  const pkv_status s0 = pkv_seq_info(w->e, seq, &i0);
  uint64_t before = fz_state(w);
  pkv_status s = out ? pkv_swap_out(w->e, seq) : pkv_swap_in(w->e, seq);
  fz_after(w, before, s, out ? "pkv_swap_out" : "pkv_swap_in");
  if (out && w->p.host_num_blocks == 0)
    FZ_CHECK(s != PKV_OK && s != PKV_ERR_NO_SPACE, "swap-out without a host tier: %d", s);
  if (s != PKV_OK) return;
  FZ_CHECK(s0 == PKV_OK && pkv_seq_info(w->e, seq, &i1) == PKV_OK, "info");
  FZ_CHECK(i0.kv_tier == (out ? PKV_TIER_DEVICE : PKV_TIER_HOST) &&
               i1.kv_tier == (out ? PKV_TIER_HOST : PKV_TIER_DEVICE),
           "tier %u -> %u", i0.kv_tier, i1.kv_tier);
  FZ_CHECK(i1.num_tokens == i0.num_tokens && i1.num_computed_tokens == i0.num_computed_tokens &&
               i1.num_cached_tokens == i0.num_cached_tokens,
           "a move changed the tokens: %u/%u -> %u/%u", i0.num_tokens, i0.num_computed_tokens,
           i1.num_tokens, i1.num_computed_tokens);
}

/* pkv_batch_copy on the open batch (twice: the second does nothing), NULL or a stale handle. */
static void op_batch_copy(fz_world *w, fz_input *in) {
  pkv_batch *b = fz_batch(w, in);
  uint64_t before = fz_state(w);
  pkv_status s = pkv_batch_copy(b);
  fz_after(w, before, s, "pkv_batch_copy");
  FZ_CHECK((s == PKV_OK) == (b != NULL && b == w->batch), "pkv_batch_copy -> %d", s);
  if (s == PKV_OK && fz_pick(in, 2)) {
    before = fz_state(w);
    s = pkv_batch_copy(b);
    FZ_CHECK(s == PKV_OK && fz_state(w) == before, "a second pkv_batch_copy -> %d", s);
    fz_consistent(w);
  }
}

#include "fuzz_ops2.h"

#endif /* PKV_FUZZ_OPS_H */
