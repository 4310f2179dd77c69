/*
 * fuzz_world.h - fuzz_api's view of one engine: the live sequence ids, the open batch, and the
 * checks run around every call: a fingerprint of everything observable (a failed call must leave
 * it unchanged) and the consistency of stats, infos and tables (after every call).
 */
#ifndef PKV_FUZZ_WORLD_H
#define PKV_FUZZ_WORLD_H

#include "fuzz_util.h"

enum { FZ_MAX_SEQS = 16, FZ_MAX_DEAD = 8, FZ_MAX_TOKENS = 320, FZ_TABLE_CAP = 512 };

typedef struct {
  pkv_engine *e;
  pkv_engine_params p;
  uint64_t seqs[FZ_MAX_SEQS];
  uint32_t nseqs;
  uint64_t dead[FZ_MAX_DEAD]; /* released ids: never valid again */
  uint32_t ndead;
  uint64_t max_id;
  pkv_batch *batch; /* the open batch, or NULL */
  int batch_from_step;
  pkv_batch *stale; /* a handle that was ended, committed or aborted */
  uint64_t last_event_seq_no;
  uint32_t dtype_bytes, q_heads, kv_heads; /* per rank */
  uint32_t num_kv_groups;                  /* pkv_kv_groups */
  /* the widest layer's row of q (and out) and of k or v, in elements (layer specs may differ) */
  uint64_t q_row, kv_row;
} fz_world;

static inline uint64_t fz_mix(uint64_t h, const void *data, size_t n) {
  const unsigned char *c = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

static inline pkv_stats fz_stats(fz_world *w) {
  pkv_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  FZ_CHECK(pkv_engine_stats(w->e, &s) == PKV_OK, "stats");
  return s;
}

/* Stats, the open batch's view and every live sequence's info, block table and tokens. */
static inline uint64_t fz_state(fz_world *w) {
  pkv_stats s = fz_stats(w);
  /* The store's writer thread counts its writes whenever it finishes them, and its fetcher thread
   * the lookups of submitted requests whenever it answers them: not the call's doing. */
  s.num_store_puts = s.num_store_put_errors = 0;
  s.num_store_lookups = s.num_store_hits = s.num_store_misses = s.num_store_rejected =
      s.num_store_errors = 0;
  uint64_t h = fz_mix(14695981039346656037ull, &s, sizeof s);
  if (w->batch) {
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    pkv_status st = pkv_batch_info(w->batch, &v);
    h = fz_mix(h, &st, sizeof st);
    h = fz_mix(h, &v.num_seqs, 7 * sizeof(uint32_t));
  }
  static int32_t buf[FZ_TABLE_CAP];
  for (uint32_t i = 0; i < w->nseqs; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    pkv_status st = pkv_seq_info(w->e, w->seqs[i], &info);
    h = fz_mix(h, &st, sizeof st);
    h = fz_mix(h, &info, sizeof info);
    uint32_t len = 0;
    st = pkv_seq_block_table(w->e, w->seqs[i], buf, FZ_TABLE_CAP, &len);
    h = fz_mix(h, &st, sizeof st);
    if (st == PKV_OK) h = fz_mix(h, buf, len * sizeof buf[0]);
    st = pkv_seq_tokens(w->e, w->seqs[i], buf, FZ_TABLE_CAP, &len);
    h = fz_mix(h, &st, sizeof st);
    if (st == PKV_OK) h = fz_mix(h, buf, len * sizeof buf[0]);
  }
  return h;
}

/* Whether a KV group may be windowed (a window everywhere, per layer, or in a layer's spec):
 * then a table may hold -1, a block the group gave back. */
static inline int fz_windowed(const pkv_engine_params *p) {
  if (p->sliding_window || p->layer_windows) return 1;
  for (uint32_t l = 0; p->layer_specs && l < p->num_layers; l++)
    if (p->layer_specs[l].attention != PKV_ATTENTION_FULL) return 1;
  return 0;
}

/* Whether the model has STATE layers: a running sequence holds a working state slot. */
static inline int fz_has_state(const pkv_engine_params *p) {
  for (uint32_t l = 0; p->layer_specs && l < p->num_layers; l++)
    if (p->layer_specs[l].kind == PKV_LAYER_STATE) return 1;
  return 0;
}

/* Every invariant visible through the API, pkv_engine_check's included. */
static inline void fz_consistent(fz_world *w) {
  FZ_CHECK(pkv_engine_check(w->e) == PKV_OK, "pkv_engine_check: %s", pkv_engine_last_error(w->e));
  pkv_stats s = fz_stats(w);
  FZ_CHECK(s.num_free_blocks + s.num_used_blocks == s.num_blocks, "free %llu + used %llu != %llu",
           (unsigned long long)s.num_free_blocks, (unsigned long long)s.num_used_blocks,
           (unsigned long long)s.num_blocks);
  FZ_CHECK(s.num_cached_blocks <= s.num_free_blocks, "cached > free");
  FZ_CHECK(s.prefix_hit_tokens <= s.prefix_query_tokens, "hits > queries");
  FZ_CHECK(s.num_seqs == w->nseqs, "num_seqs %llu, %u live", (unsigned long long)s.num_seqs,
           w->nseqs);
  FZ_CHECK(s.num_host_blocks == w->p.host_num_blocks && s.num_host_free_blocks <= s.num_host_blocks,
           "host tier: %llu free of %llu, params %u", (unsigned long long)s.num_host_free_blocks,
           (unsigned long long)s.num_host_blocks, w->p.host_num_blocks);
  FZ_CHECK(
      s.device_hit_tokens + s.host_hit_tokens + s.store_hit_tokens == s.prefix_hit_tokens &&
          s.host_hit_tokens + s.store_hit_tokens == s.num_loaded_blocks * w->p.block_size &&
          /* <=: a background fetch counts its lookups first, its outcome when it knows it */
          s.num_store_hits + s.num_store_misses + s.num_store_rejected + s.num_store_errors <=
              s.num_store_lookups &&
          s.num_host_cached_blocks <= s.num_host_free_blocks &&
          (w->p.host_offload || s.num_offloaded_blocks == 0),
      "per-tier hits: device %llu + host %llu of %llu, %llu loads, %llu host cached of %llu free",
      (unsigned long long)s.device_hit_tokens, (unsigned long long)s.host_hit_tokens,
      (unsigned long long)s.prefix_hit_tokens, (unsigned long long)s.num_loaded_blocks,
      (unsigned long long)s.num_host_cached_blocks, (unsigned long long)s.num_host_free_blocks);
  static int32_t table[FZ_TABLE_CAP];
  const uint32_t bs = w->p.block_size;
  uint64_t swapped = 0;
  for (uint32_t i = 0; i < w->nseqs; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    FZ_CHECK(pkv_seq_info(w->e, w->seqs[i], &info) == PKV_OK, "info of live %llu",
             (unsigned long long)w->seqs[i]);
    uint32_t len = 0;
    FZ_CHECK(pkv_seq_block_table(w->e, w->seqs[i], table, FZ_TABLE_CAP, &len) == PKV_OK, "table");
    FZ_CHECK(len == info.num_blocks, "table %u, info %u blocks", len, info.num_blocks);
    /* -1: a block a windowed group gave back (group 0 is windowed when every cached layer is,
     * as with one windowed layer beside STATE layers). */
    for (uint32_t j = 0; j < len; j++)
      FZ_CHECK(
          table[j] >= (fz_windowed(&w->p) ? -1 : 0) && (int64_t)table[j] < (int64_t)s.num_blocks,
          "block id %d", table[j]);
    FZ_CHECK(info.num_computed_tokens <= info.num_tokens, "computed > tokens");
    FZ_CHECK(info.num_cached_tokens <= info.num_tokens, "cached > tokens");
    FZ_CHECK(w->batch != NULL || info.in_batch == 0, "in_batch with no batch open");
    if (info.is_preempted)
      FZ_CHECK(info.num_blocks == 0 && info.num_computed_tokens == 0, "preempted holds blocks");
    FZ_CHECK(info.kv_tier <= PKV_TIER_HOST, "kv_tier %u", info.kv_tier);
    FZ_CHECK((info.kv_tier == PKV_TIER_DEVICE) == (info.num_blocks > 0), "tier %u with %u blocks",
             info.kv_tier, info.num_blocks);
    FZ_CHECK((info.kv_tier == PKV_TIER_HOST) == (info.num_host_blocks > 0),
             "tier %u with %u host blocks", info.kv_tier, info.num_host_blocks);
    if (info.kv_tier == PKV_TIER_HOST) { /* swapped out: pkv_allocate's, idle, all its tokens */
      swapped++;
      FZ_CHECK(!info.is_request && !info.is_preempted && !info.in_batch, "swapped and more");
      /* (0.8) every group's held blocks: a table's worth per group at most, all of it with one
       * full-attention group */
      const uint32_t table_len = (info.num_tokens + bs - 1) / bs;
      const int one_full = w->num_kv_groups == 1 && !fz_windowed(&w->p);
      FZ_CHECK((one_full ? info.num_host_blocks == table_len
                         : info.num_host_blocks <= w->num_kv_groups * table_len) &&
                   info.num_host_blocks <= s.num_host_blocks - s.num_host_free_blocks,
               "%u host blocks for %u tokens in %u KV groups", info.num_host_blocks,
               info.num_tokens, w->num_kv_groups);
    }
    /* a pkv_allocate sequence in the pool (running or held) holds every token's block; one
     * whose hold ended (0.12) holds none, as a preempted one */
    if (!info.is_request && info.kv_tier == PKV_TIER_DEVICE)
      FZ_CHECK(info.num_blocks == (info.num_tokens + bs - 1) / bs, "%u blocks for %u tokens",
               info.num_blocks, info.num_tokens);
  }
  FZ_CHECK(s.num_swapped_seqs == swapped, "%llu swapped, %llu seen",
           (unsigned long long)s.num_swapped_seqs, (unsigned long long)swapped);
}

/* Before a call: the fingerprint. After it: a failure left a message and changed nothing; any
 * status is one of pkv's and never INTERNAL. */
static inline void fz_after(fz_world *w, uint64_t before, pkv_status s, const char *what) {
  FZ_CHECK(s <= PKV_OK && s >= PKV_ERR_STORE, "%s: status %d is not a pkv_status", what, s);
  FZ_CHECK(s != PKV_ERR_STORE, "%s: PKV_ERR_STORE after create", what);
  FZ_CHECK(s != PKV_ERR_INTERNAL && s != PKV_ERR_OUT_OF_MEMORY, "%s: %d", what, s);
  if (s != PKV_OK) {
    FZ_CHECK(pkv_last_error()[0] != '\0', "%s failed (%d) without a message", what, s);
    FZ_CHECK(fz_state(w) == before, "%s failed (%d: %s) and changed the state", what, s,
             pkv_last_error());
  }
  fz_consistent(w);
}

static inline void fz_add_seq(fz_world *w, uint64_t id) {
  FZ_CHECK(id != 0 && id > w->max_id, "new id %llu after %llu", (unsigned long long)id,
           (unsigned long long)w->max_id);
  w->max_id = id;
  w->seqs[w->nseqs++] = id;
}

static inline void fz_forget_seq(fz_world *w, uint64_t id) {
  for (uint32_t i = 0; i < w->nseqs; i++)
    if (w->seqs[i] == id) {
      w->seqs[i] = w->seqs[--w->nseqs];
      break;
    }
  w->dead[w->ndead++ % FZ_MAX_DEAD] = id;
}

static inline void fz_world_init(fz_world *w, pkv_engine *e, const pkv_engine_params *p) {
  memset(w, 0, sizeof *w);
  w->e = e;
  w->p.struct_size = sizeof w->p;
  FZ_CHECK(pkv_engine_params_get(e, &w->p) == PKV_OK, "params_get");
  w->dtype_bytes = w->p.dtype == PKV_DTYPE_F32 ? 4 : 2;
  w->q_heads = w->p.num_q_heads / w->p.tp_size;
  w->kv_heads = w->p.num_kv_heads / w->p.tp_size ? w->p.num_kv_heads / w->p.tp_size : 1;
  for (uint32_t l = 0; l < w->p.num_layers; l++) { /* each layer's own shape (pkv_layer_info) */
    struct pkv_layer_info li;
    memset(&li, 0, sizeof li);
    li.struct_size = sizeof li;
    FZ_CHECK(pkv_layer_info(e, l, &li) == PKV_OK, "layer_info %u", l);
    const uint32_t width = li.head_dim > li.v_head_dim ? li.head_dim : li.v_head_dim;
    if ((uint64_t)w->q_heads * width > w->q_row) w->q_row = (uint64_t)w->q_heads * width;
    if ((uint64_t)li.kv_heads * width > w->kv_row) w->kv_row = (uint64_t)li.kv_heads * width;
  }
  (void)p;
  uint32_t windows[64];
  FZ_CHECK(pkv_kv_groups(&w->p, NULL, NULL, windows, 64, &w->num_kv_groups, NULL) == PKV_OK &&
               w->num_kv_groups >= 1,
           "pkv_kv_groups of a created engine's params: %s", pkv_last_error());
  fz_consistent(w);
}

/* With every sequence released, swap-in copies may still hold host-tier blocks until a step does
 * them: one step of a 1-token sequence does (pkv_batch_copy, then aborted); then both tiers are
 * free. */
static inline void fz_drain_copies(fz_world *w) {
  const int32_t t = 0;
  uint64_t id = 0;
  pkv_batch *b = NULL;
  FZ_CHECK(pkv_allocate(w->e, &t, 1, NULL, &id, NULL) == PKV_OK, "allocate in an empty pool");
  FZ_CHECK(pkv_batch_begin(w->e, &id, NULL, 1, &b) == PKV_OK && pkv_batch_copy(b) == PKV_OK,
           "a step of the copies");
  pkv_batch_abort(b);
  FZ_CHECK(pkv_release(w->e, id) == PKV_OK, "release");
  FZ_CHECK(pkv_engine_check(w->e) == PKV_OK, "pkv_engine_check: %s", pkv_engine_last_error(w->e));
  pkv_stats s = fz_stats(w);
  FZ_CHECK(s.num_used_blocks == 0 && s.num_host_free_blocks == s.num_host_blocks,
           "held after the copies: %llu pool blocks, %llu of %llu host-tier blocks",
           (unsigned long long)s.num_used_blocks,
           (unsigned long long)(s.num_host_blocks - s.num_host_free_blocks),
           (unsigned long long)s.num_host_blocks);
}

/* Closes the batch, releases everything (the pool must then be all free) and destroys e; or
 * destroys e with its batch and sequences still there. */
static inline void fz_world_end(fz_world *w, int destroy_busy) {
  if (!destroy_busy) {
    pkv_batch_abort(w->batch);
    w->batch = NULL;
    while (w->nseqs > 0) {
      uint64_t id = w->seqs[0];
      /* a hold or a remote fill ends first: pkv_release refuses them */
      struct pkv_seq_info info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      FZ_CHECK(pkv_seq_info(w->e, id, &info) == PKV_OK, "info of live %llu",
               (unsigned long long)id);
      if (info.transfer == PKV_TRANSFER_HOLDING)
        FZ_CHECK(pkv_hold_end(w->e, id, PKV_TRANSFER_DONE) == PKV_OK, "hold_end");
      if (info.transfer == PKV_TRANSFER_RECEIVING)
        FZ_CHECK(pkv_receive_end(w->e, id, PKV_TRANSFER_FAILED_FINISH) == PKV_OK, "receive_end");
      FZ_CHECK(pkv_release(w->e, id) == PKV_OK, "release %llu", (unsigned long long)id);
      fz_forget_seq(w, id);
    }
    fz_consistent(w);
    pkv_stats s = fz_stats(w);
    FZ_CHECK(s.num_used_blocks == 0 && s.num_seqs == 0 && s.num_waiting_requests == 0 &&
                 s.num_running_requests == 0 && s.num_finished_requests == 0 &&
                 s.num_swapped_seqs == 0,
             "leftovers after releasing everything");
    fz_drain_copies(w);
  }
  pkv_engine_destroy(w->e);
}

#endif /* PKV_FUZZ_WORLD_H */
