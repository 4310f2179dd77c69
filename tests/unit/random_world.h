/*
 * random_world.h - the model test_random_ops.c keeps beside a pkv engine: every live sequence's
 * tokens, salt, computed count and state (running, preempted, swapped out), and a shadow of both
 * KV tiers (the pool and the host tier) that records, for every slot (block * block_size +
 * offset), the identity of the full token context (salt + every token up to and including that
 * position) whose K/V is there. The test writes those identities into the real pool as a host's
 * kernels would (random_pool.h), so the shadow is also checked against the bytes.
 *
 * With several KV groups (random_groups.h) each group has its own table per sequence and writes
 * its own layers into its own blocks: a slot's shadow is ident(context, group), and a block's
 * bytes are checked in the layout of the group that wrote it (bgroup).
 *
 * check_world() compares the engine with the model after every operation: pkv_engine_check, the
 * stats, each sequence's info and table, that every computed token's slot holds that token's
 * context (nothing overwrote or evicted KV in use, no hit served foreign KV, a sequence swapped
 * back in holds exactly the KV it left with), and that the real pool holds the shadow.
 *
 * Block copies (random_copies.h) are queued in pkv's order: copy-on-write copies seen at append
 * (the sequence's last block id changes), swap-out and swap-in copies seen as counts in the stats
 * (pkv_seq_block_table does not show host-tier blocks): their ids are learnt from the next batch
 * view that lists them, a batch begun and aborted at once on a private probe sequence when no
 * batch is open. A batch's copies are done, in their listed order and before its writes, by
 * pkv_batch_copy or by the test itself at batch end (a host with its own kernels); an aborted
 * batch whose copies are not done gives them back. Until done, checks read the shadow with them
 * applied.
 */
#ifndef PKV_RANDOM_WORLD_H
#define PKV_RANDOM_WORLD_H

#include "test_util.h"

enum {
  MAX_SEQS = 24,
  MAX_LEN = 96,
  MAX_GROUPS = 4, /* KV groups: at most one per drawn layer (MAX_POOL_LAYERS) */
  MAX_WRITES = MAX_SEQS * MAX_LEN * MAX_GROUPS,
  MAX_COPIES = 1024,
  MAX_CANDS = 64
};

/* A shadow slot whose bytes another KV group's write made unknown (never a context). */
#define SLOT_UNKNOWN UINT64_MAX

/* Only failures are counted in the hot loops; passes would be millions of lines of nothing. */
#define EXPECT(cond) ((cond) ? 1 : CHECK(cond))

typedef struct {
  uint64_t id;
  int salt; /* 0 = none, 1 = "a", 2 = "b" */
  int lora; /* its adapter id: 0 (none) or 1 */
  int item; /* 0 = none, else the extra key item_name(item) over tokens [item_start, item_end) */
  uint32_t item_start, item_end;
  uint32_t len, computed, batch_new;
  int preempted, swapped;
  int32_t state_slot;  /* its working state slot as a view listed it; -1: not known yet, none */
  uint32_t prompt_len; /* tokens at its admission (random_state.h's checkpoint policy) */
  uint32_t branch;     /* the boundary (blocks) where its cached KV ended at admission with no
                          checkpoint there; 0: none */
  int32_t tokens[MAX_LEN];
  uint64_t ctx[MAX_LEN]; /* ctx[i]: identity of (salt, adapter, tokens[0..i] and the item's
                            key and offset at each token it covers) */
} rseq;

/* A queued block copy (PKV_COPY_* kind). A swap copy is known by its count before a view lists
 * it: src and dst are -1 and cand names the pool blocks it may read (swap-out) or write
 * (swap-in): the sequence's table at the swap. */
typedef struct {
  int32_t src, dst, kind, cand;
} rcopy;

enum { MAX_POOL_LAYERS = 4, MAX_NODES = 512 };

typedef struct {
  pkv_engine *e;
  uint32_t bs, num_blocks, host_blocks;
  uint64_t rng;
  rseq seqs[MAX_SEQS];
  uint32_t nseqs;
  uint64_t probe;   /* a 1-token sequence outside seqs, never computed: batches that list copies */
  uint64_t *shadow; /* [num_blocks * bs] then [host_blocks * bs]; 0 = never written; then
                       [num_state_slots]: the context whose state a slot holds (0: zeros) */
  uint64_t *eff;    /* the same, scratch: the shadow after the copies not yet done */
  uint32_t *refs;   /* [num_blocks] scratch: live tables referencing each block */
  struct pkv_pool_info pool;                    /* where the real K/V are */
  uint32_t num_layers;                          /* the model's (drawn layer specs: random_pool.h) */
  struct pkv_layer_info layer[MAX_POOL_LAYERS]; /* where each layer's K and V are */
  rcopy queued[MAX_COPIES];   /* copies not yet taken by a batch, in pkv's order */
  uint32_t nqueued, nunknown; /* of which swap copies not yet seen in a view */
  uint32_t nextra;            /* offloads and loads queued in pkv, not yet seen in a view */
  uint64_t tier_copies;       /* offloads and loads counted in the stats so far */
  int offload;                /* pkv_engine_params.host_offload */
  int store;                  /* a store below the host tier (random_store.h) */
  uint64_t store_hits_seen, num_store_synced;
  rcopy taken[MAX_COPIES]; /* the open batch's copies, done (in order) by batch_copy or its end */
  uint32_t ntaken;
  int32_t cands[MAX_CANDS][MAX_GROUPS * MAX_LEN]; /* the held blocks of the tables unknown copies
                                                     name; freed when none is left */
  uint32_t ncand_len[MAX_CANDS], ncands;
  pkv_batch *batch;
  int copies_done;  /* the open batch's copies were done by pkv_batch_copy */
  uint32_t nwrites; /* the open batch's writes, done at batch_end */
  int64_t write_slot[MAX_WRITES];
  uint64_t write_ctx[MAX_WRITES]; /* ident(context, group) */
  uint8_t write_group[MAX_WRITES];
  /* KV groups (DESIGN.md §12; pkv_kv_group_info): 1 full-attention group but in the SPECS modes
   * of random_groups.h. A group's table holds -1 before first_held (the kind's rule). */
  uint32_t ngroups;
  uint32_t group_attention[MAX_GROUPS], group_span[MAX_GROUPS]; /* PKV_ATTENTION_*, window */
  int caching;     /* pkv_engine_params.enable_prefix_caching */
  uint8_t *bgroup; /* [num_blocks + host_blocks]: the group whose layout a block's bytes are in
                      (its last writer's; a copy moves it): check_pool reads that group's layers */
  /* recurrent state (random_state.h); all 0 without STATE layers */
  int state;                     /* 1 + pkv_engine_params.state_checkpoint_policy; 0: no STATE */
  uint32_t ckpt_interval;        /* pkv_engine_params.state_checkpoint_interval */
  uint32_t num_working;          /* working slots (max_num_seqs); checkpoint slots follow */
  uint32_t num_state_slots;      /* working and checkpoint slots: the shadow's last entries but */
  uint32_t num_host_state_slots; /* with a host tier: host state slots, after them */
  uint32_t num_kv_groups;        /* the state group's id in KV events */
  uint64_t kv_nodes[MAX_NODES], ckpt_nodes[MAX_NODES]; /* held, by the events: hashes */
  uint32_t nkv, nckpt; /* ckpt_nodes in LRU order: [0] the least recently used */
  /* the same in the host tier: blocks offloaded, checkpoints offloaded (host_offload) */
  uint64_t kv_host_nodes[MAX_NODES], ckpt_host_nodes[MAX_NODES];
  uint32_t nkv_host, nckpt_host;
  uint32_t num_host_ckpt_slots;       /* host state slots for offloaded checkpoints */
  uint64_t expect_hash[4 * MAX_SEQS]; /* checkpoint events a batch's end must queue, in order */
  uint8_t expect_add[4 * MAX_SEQS], expect_host[4 * MAX_SEQS];
  uint32_t nexpect, expect_at;
  uint32_t nstate_writes;            /* the open batch's state writes, done at batch_end */
  uint64_t state_write_id[MAX_SEQS]; /* the members in the batch's order */
  int32_t state_write_slot[MAX_SEQS];
  uint64_t state_write_ctx[MAX_SEQS];
  uint64_t num_state_swaps; /* swap-outs and swap-ins of a sequence with a working state */
  uint64_t num_state_hits, num_state_fallbacks, num_state_probes, num_captures_seen,
      num_lru_evictions, num_ckpt_offloads, num_host_restores;
  /* what the run exercised */
  uint64_t num_no_space, num_hits, num_cow, num_preempt, num_unsupported, num_swap_out, num_swap_in,
      num_swap_no_space, num_swap_in_no_space, num_twin_shares, num_swapped_release, num_batch_copy,
      num_probes, num_truncates;
  /* KV groups (random_groups.h): -1 entries seen, truncates that took blocks back (and their
   * LOAD copies: counted in the stats' loaded blocks, not hits), refused ones */
  uint64_t num_given_back, num_take_back, take_back_loads, num_take_back_refused;
} world;

static inline uint64_t rnd(world *w, uint64_t n) {
  w->rng += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  uint64_t z = w->rng;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return n ? z % n : 0;
}

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline const char *salt_name(int salt) { return salt == 1 ? "a" : salt == 2 ? "b" : NULL; }

static inline const char *item_name(int item) { return item == 1 ? "item-1" : "item-2"; }

/* A block's identity in pkv is its tokens plus, for each item overlapping it, the overlap and the
 * item's key: the same as the item's (key, offset) at each token it covers, mixed in here. */
static inline void seq_push(rseq *s, const int32_t *tokens, uint32_t n) {
  for (uint32_t i = 0; i < n; i++, s->len++) {
    uint64_t prev =
        s->len ? s->ctx[s->len - 1] : mix64(0x5a17u + (uint64_t)s->salt + 4 * (uint64_t)s->lora);
    const int in_item = s->item && s->len >= s->item_start && s->len < s->item_end;
    const uint64_t label =
        in_item ? mix64(((uint64_t)s->item << 32) + (s->len - s->item_start) + 1) : 0;
    s->tokens[s->len] = tokens[i];
    s->ctx[s->len] =
        mix64(prev ^ label ^ (0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)tokens[i] + 1)));
  }
}

static inline uint32_t get_table(world *w, const rseq *s, int32_t *out) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_block_table(w->e, s->id, out, MAX_LEN, &len));
  return len;
}

/* s's block table in KV group g (-1: a block the group gave back). */
static inline uint32_t get_gtable(world *w, const rseq *s, uint32_t g, int32_t *out) {
  uint32_t len = 0;
  CHECK_OK(pkv_seq_group_block_table(w->e, s->id, g, out, MAX_LEN, &len));
  return len;
}

/* What a slot of group g holding context ctx holds in the shadow: group 0's is the context (the
 * runs of one group), another group's a mix of both, so one group's block never passes for
 * another's. */
static inline uint64_t ident(uint64_t ctx, uint32_t g) {
  return g ? mix64(ctx ^ (0x51ed270b27a9c5f3ull * g)) : ctx;
}

/* Whether some group gives blocks back (a window or chunk). */
static inline int gives_back(const world *w) {
  for (uint32_t g = 0; g < w->ngroups; g++)
    if (w->group_attention[g] != PKV_ATTENTION_FULL) return 1;
  return 0;
}

/* The first block group g holds with the next token to compute at `next` (DESIGN.md §12), the
 * rule written out apart from pkv's: a window's first key's block, a chunk's first token's
 * block, all for full attention; with prefix caching never past the last sealed block (the
 * parent of the next one sealed). */
static inline uint32_t first_held(const world *w, uint32_t g, uint32_t next) {
  const uint32_t span = w->group_span[g];
  uint32_t first = 0;
  if (w->group_attention[g] == PKV_ATTENTION_SLIDING)
    first = (next >= span ? next - span + 1 : 0) / w->bs;
  else if (w->group_attention[g] == PKV_ATTENTION_CHUNKED)
    first = next / span * span / w->bs;
  const uint32_t sealed = next / w->bs, last = sealed ? sealed - 1 : 0;
  return w->caching && first > last ? last : first;
}

static inline uint32_t num_table_blocks(const world *w, const rseq *s) {
  return (s->len + w->bs - 1) / w->bs;
}

/* The blocks s holds in every group together: what a swap moves. */
static inline uint32_t held_blocks(const world *w, const rseq *s) {
  const uint32_t nb = num_table_blocks(w, s);
  uint32_t held = 0;
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t first = first_held(w, g, s->computed);
    held += nb - (first < nb ? first : nb);
  }
  return held;
}

/* s's held blocks of every group, in group order (pkv's order of a swap's copies). */
static inline uint32_t held_list(world *w, const rseq *s, int32_t *out) {
  int32_t table[MAX_LEN];
  uint32_t k = 0;
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t n = get_gtable(w, s, g, table);
    for (uint32_t j = 0; j < n; j++)
      if (table[j] >= 0) out[k++] = table[j];
  }
  return k;
}

static inline uint64_t world_state(world *w) {
  uint64_t ids[MAX_SEQS + 1];
  for (uint32_t i = 0; i < w->nseqs; i++) ids[i] = w->seqs[i].id;
  ids[w->nseqs] = w->probe;
  uint64_t h = tu_state(w->e, ids, w->nseqs + 1);
  for (uint32_t g = 1; g < w->ngroups; g++) /* tu_state hashes group 0's tables */
    for (uint32_t i = 0; i <= w->nseqs; i++) {
      int32_t table[MAX_LEN];
      uint32_t len = 0;
      const pkv_status r = pkv_seq_group_block_table(w->e, ids[i], g, table, MAX_LEN, &len);
      h = tu_mix_(h, &r, sizeof r);
      h = tu_mix_(h, table, (r == PKV_OK ? len : 0) * sizeof table[0]);
    }
  return h;
}

static inline uint32_t free_blocks(world *w) { return (uint32_t)tu_stats(w->e).num_free_blocks; }

/* The tiers a copy (PKV_COPY_*) reads and writes: 0 the pool, 1 the host tier. */
static inline int reads_host(int32_t kind) {
  return kind == PKV_COPY_SWAP_IN || kind == PKV_COPY_LOAD;
}

static inline int writes_host(int32_t kind) {
  return kind == PKV_COPY_SWAP_OUT || kind == PKV_COPY_OFFLOAD;
}

/* A copy of state slots (ids are slots): a fork's, a checkpoint's, a swap's (OUT / IN). */
static inline int state_copy(int32_t kind) {
  return kind == PKV_COPY_STATE || kind == PKV_COPY_STATE_OUT || kind == PKV_COPY_STATE_IN;
}

static inline int tier_copy(int32_t kind) {
  return kind == PKV_COPY_OFFLOAD || kind == PKV_COPY_LOAD;
}

#include "random_pool.h"
#include "random_copies.h"
#include "random_store.h"
#include "random_state.h"

/* Positions [from, to) of s hold s's contexts in the pool tier of shadow, in every group's
 * block where the group holds their block. */
static inline void check_slots(world *w, const rseq *s, uint32_t from, uint32_t to,
                               const uint64_t *shadow) {
  int32_t table[MAX_LEN];
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t n = get_gtable(w, s, g, table), first = first_held(w, g, s->computed);
    for (uint32_t pos = from > first * w->bs ? from : first * w->bs; pos < to; pos++) {
      if (!EXPECT(pos / w->bs < n && table[pos / w->bs] >= 0)) return;
      int64_t slot = (int64_t)table[pos / w->bs] * w->bs + pos % w->bs;
      if (!EXPECT(shadow[slot] == ident(s->ctx[pos], g))) {
        fprintf(stderr, "  seq %llu group %u pos %u: block %d holds another context\n",
                (unsigned long long)s->id, g, pos, table[pos / w->bs]);
        return;
      }
    }
  }
}

/* Each group's table of a running s covers its tokens and holds exactly the blocks from
 * first_held on: the ones before are -1 (given back, or never taken by a hit). */
static inline void check_tables(world *w, const rseq *s) {
  int32_t table[MAX_LEN];
  const uint32_t nb = num_table_blocks(w, s);
  for (uint32_t g = 0; g < w->ngroups; g++) {
    const uint32_t n = get_gtable(w, s, g, table), first = first_held(w, g, s->computed);
    if (!EXPECT(n == nb)) return;
    w->num_given_back += first < n ? first : n;
    for (uint32_t j = 0; j < n; j++)
      if (!EXPECT((table[j] < 0) == (j < first) && table[j] < (int32_t)w->num_blocks)) {
        fprintf(stderr, "  seq %llu group %u: block %u is %d, the rule holds blocks from %u\n",
                (unsigned long long)s->id, g, j, table[j], first);
        return;
      }
  }
}

/* shadow: NULL while swap copies are not yet known (the content is checked once they are). */
static inline void check_seq(world *w, const rseq *s, const uint64_t *shadow) {
  struct pkv_seq_info info = tu_info(w->e, s->id);
  const uint32_t nb = num_table_blocks(w, s);
  EXPECT(info.num_tokens == s->len);
  EXPECT(info.num_computed_tokens == s->computed);
  EXPECT(info.is_preempted == (uint32_t)s->preempted);
  EXPECT(info.in_batch == (s->batch_new > 0));
  EXPECT(info.cache_salt_len == (s->salt ? 1u : 0u));
  EXPECT(info.num_blocks == (s->preempted || s->swapped ? 0 : nb));
  EXPECT(info.num_host_blocks == (s->swapped ? held_blocks(w, s) : 0));
  EXPECT(info.kv_tier == (s->swapped     ? PKV_TIER_HOST
                          : s->preempted ? PKV_TIER_NONE
                                         : PKV_TIER_DEVICE));
  if (!s->preempted && !s->swapped) check_tables(w, s);
  if (!s->preempted && !s->swapped && shadow) check_slots(w, s, 0, s->computed, shadow);
}

static inline void check_tokens(world *w, const rseq *s) {
  int32_t tokens[MAX_LEN];
  uint32_t n = 0;
  CHECK_OK(pkv_seq_tokens(w->e, s->id, tokens, MAX_LEN, &n));
  EXPECT(n == s->len && memcmp(tokens, s->tokens, n * sizeof tokens[0]) == 0);
}

static inline void check_world(world *w, int deep) {
  note_tier_copies(w);
  store_resync(w);
  state_probes(w);
  if (w->nunknown && !w->batch) probe_copies(w);
  if (!EXPECT(pkv_engine_check(w->e) == PKV_OK))
    fprintf(stderr, "  pkv_engine_check: %s\n", pkv_engine_last_error(w->e));
  pkv_stats st = tu_stats(w->e);
  uint32_t preempted = 0, swapped = 0;
  for (uint32_t i = 0; i < w->nseqs; i++) {
    preempted += (uint32_t)w->seqs[i].preempted;
    swapped += (uint32_t)w->seqs[i].swapped;
  }
  EXPECT(st.num_blocks == w->num_blocks);
  EXPECT(st.num_free_blocks + st.num_used_blocks == st.num_blocks);
  EXPECT(st.num_cached_blocks <= st.num_free_blocks);
  EXPECT(st.num_seqs == w->nseqs + 1); /* and the probe */
  EXPECT(st.num_preempted_seqs == preempted);
  EXPECT(st.num_cow_copies == w->num_cow);
  EXPECT(st.num_preemptions == w->num_preempt);
  EXPECT(st.num_host_blocks == w->host_blocks);
  EXPECT(st.num_host_free_blocks <= st.num_host_blocks);
  EXPECT(st.num_swapped_seqs == swapped);
  EXPECT(st.num_host_cached_blocks <= st.num_host_free_blocks);
  EXPECT(st.device_hit_tokens + st.host_hit_tokens + st.store_hit_tokens == st.prefix_hit_tokens);
  /* A hit's position counts once, however many groups loaded its block. */
  const uint64_t hit_tokens = st.host_hit_tokens + st.store_hit_tokens;
  const uint64_t loaded_tokens = (st.num_loaded_blocks - w->take_back_loads) * w->bs;
  EXPECT(w->ngroups == 1 ? hit_tokens == loaded_tokens
                         : hit_tokens <= loaded_tokens && loaded_tokens <= hit_tokens * w->ngroups);
  EXPECT(w->offload || st.num_offloaded_blocks + st.num_host_cached_blocks == 0);
  const uint64_t *shadow = effective(w);
  for (uint32_t i = 0; i < w->nseqs; i++) {
    check_seq(w, &w->seqs[i], shadow);
    if (deep) check_tokens(w, &w->seqs[i]);
  }
  check_pool(w);
  state_check(w, shadow);
}

/* Which sequences an operation may pick. */
enum { RUNNING = 1, IDLE = 2, PREEMPTED = 4, MEMBER = 8, SWAPPED = 16 };

static inline int pick(world *w, int want) {
  int cand[MAX_SEQS], n = 0;
  for (uint32_t i = 0; i < w->nseqs; i++) {
    const rseq *s = &w->seqs[i];
    if (((want & RUNNING) && (s->preempted || s->swapped)) || ((want & IDLE) && s->batch_new) ||
        ((want & PREEMPTED) && !s->preempted) || ((want & MEMBER) && !s->batch_new) ||
        ((want & SWAPPED) && !s->swapped))
      continue;
    cand[n++] = (int)i;
  }
  return n ? cand[rnd(w, (uint64_t)n)] : -1;
}

/* refs[b] = how many live tables (of every group) hold block b. */
static inline void count_refs(world *w) {
  memset(w->refs, 0, w->num_blocks * sizeof w->refs[0]);
  int32_t held[MAX_GROUPS * MAX_LEN];
  for (uint32_t i = 0; i < w->nseqs; i++) {
    if (w->seqs[i].preempted || w->seqs[i].swapped) continue;
    const uint32_t n = held_list(w, &w->seqs[i], held);
    for (uint32_t k = 0; k < n; k++)
      if (EXPECT((uint32_t)held[k] < w->num_blocks)) w->refs[held[k]]++;
  }
}

#endif /* PKV_RANDOM_WORLD_H */
