/*
 * random_world.h - the model test_random_ops.c keeps beside a pkv engine: every live sequence's
 * tokens, salt and computed count, and a shadow of the KV pool that records, for every slot
 * (block * block_size + offset), the identity of the full token context (salt + every token up to
 * and including that position) whose K/V was written there.
 *
 * check_world() compares the engine with the model after every operation: pkv_engine_check, the
 * stats, each sequence's info and table, and that every computed token's slot still holds that
 * token's context (nothing overwrote or evicted KV in use, no hit served foreign KV).
 *
 * Copy-on-write copies are seen at append (the sequence's last block id changes), must be listed
 * by the next batch_begin, and are done in the shadow in their listed order when that batch ends,
 * before its writes; an aborted batch gives them back. (Doing them at batch_begin would be wrong
 * after an abort: a copy's source block may be freed and become the destination of a later copy
 * before the copy is listed again.) Until done, checks read the shadow with them applied.
 */
#ifndef PKV_RANDOM_WORLD_H
#define PKV_RANDOM_WORLD_H

#include "test_util.h"

enum { MAX_SEQS = 24, MAX_LEN = 96, MAX_WRITES = MAX_SEQS * MAX_LEN, MAX_COPIES = 256 };

/* Only failures are counted in the hot loops; passes would be millions of lines of nothing. */
#define EXPECT(cond) ((cond) ? 1 : CHECK(cond))

typedef struct {
  uint64_t id;
  int salt; /* 0 = none, 1 = "a", 2 = "b" */
  uint32_t len, computed, batch_new;
  int preempted;
  int32_t tokens[MAX_LEN];
  uint64_t ctx[MAX_LEN]; /* ctx[i]: identity of (salt, tokens[0..i]) */
} rseq;

typedef struct {
  int32_t src, dst;
} rcopy;

typedef struct {
  pkv_engine *e;
  uint32_t bs, num_blocks;
  uint64_t rng;
  rseq seqs[MAX_SEQS];
  uint32_t nseqs;
  uint64_t *shadow; /* [num_blocks * bs], 0 = never written */
  uint64_t *eff;    /* [num_blocks * bs] scratch: the shadow after the copies not yet done */
  uint32_t *refs;   /* [num_blocks] scratch: live tables referencing each block */
  rcopy queued[MAX_COPIES]; /* copy-on-write copies seen at append, not yet taken by a batch */
  uint32_t nqueued;
  rcopy taken[MAX_COPIES]; /* the open batch's copies, done (in order) when it ends */
  uint32_t ntaken;
  pkv_batch *batch;
  uint32_t nwrites; /* the open batch's writes, done at batch_end */
  int64_t write_slot[MAX_WRITES];
  uint64_t write_ctx[MAX_WRITES];
  uint64_t num_no_space, num_hits, num_cow, num_preempt; /* what the run exercised */
} world;

static inline uint64_t rnd(world *w, uint64_t n)
{
  w->rng += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  uint64_t z = w->rng;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return n ? z % n : 0;
}

static inline uint64_t mix64(uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline const char *salt_name(int salt)
{
  return salt == 1 ? "a" : salt == 2 ? "b" : NULL;
}

static inline void seq_push(rseq *s, const int32_t *tokens, uint32_t n)
{
  for (uint32_t i = 0; i < n; i++, s->len++) {
    uint64_t prev = s->len ? s->ctx[s->len - 1] : mix64(0x5a17u + (uint64_t)s->salt);
    s->tokens[s->len] = tokens[i];
    s->ctx[s->len] = mix64(prev ^ (0x9e3779b97f4a7c15ull * ((uint64_t)(uint32_t)tokens[i] + 1)));
  }
}

static inline uint32_t get_table(world *w, const rseq *s, int32_t *out)
{
  uint32_t len = 0;
  CHECK_OK(pkv_seq_block_table(w->e, s->id, out, MAX_LEN, &len));
  return len;
}

static inline uint64_t world_state(world *w)
{
  uint64_t ids[MAX_SEQS];
  for (uint32_t i = 0; i < w->nseqs; i++)
    ids[i] = w->seqs[i].id;
  return tu_state(w->e, ids, w->nseqs);
}

static inline uint32_t free_blocks(world *w)
{
  return (uint32_t)tu_stats(w->e).num_free_blocks;
}

static inline void copy_block(world *w, uint64_t *pool, rcopy c)
{
  if (!EXPECT(c.src >= 0 && c.dst >= 0 && (uint32_t)c.src < w->num_blocks &&
              (uint32_t)c.dst < w->num_blocks && c.src != c.dst))
    return;
  memcpy(pool + (size_t)c.dst * w->bs, pool + (size_t)c.src * w->bs, w->bs * sizeof pool[0]);
}

/* What the pool will hold once the copies taken and queued are done, in order: the content a
 * sequence's computed tokens refer to. */
static inline const uint64_t *effective(world *w)
{
  if (w->ntaken + w->nqueued == 0)
    return w->shadow;
  memcpy(w->eff, w->shadow, (size_t)w->num_blocks * w->bs * sizeof w->eff[0]);
  for (uint32_t i = 0; i < w->ntaken; i++)
    copy_block(w, w->eff, w->taken[i]);
  for (uint32_t i = 0; i < w->nqueued; i++)
    copy_block(w, w->eff, w->queued[i]);
  return w->eff;
}

/* Positions [from, to) of s hold s's contexts in pool. */
static inline void check_slots(world *w, const rseq *s, uint32_t from, uint32_t to,
                               const uint64_t *pool)
{
  int32_t table[MAX_LEN];
  uint32_t n = get_table(w, s, table);
  for (uint32_t pos = from; pos < to; pos++) {
    if (!EXPECT(pos / w->bs < n))
      return;
    int64_t slot = (int64_t)table[pos / w->bs] * w->bs + pos % w->bs;
    if (!EXPECT(pool[slot] == s->ctx[pos])) {
      fprintf(stderr, "  seq %llu pos %u: block %d holds another context\n",
              (unsigned long long)s->id, pos, table[pos / w->bs]);
      return;
    }
  }
}

static inline void check_seq(world *w, const rseq *s, const uint64_t *pool)
{
  struct pkv_seq_info info = tu_info(w->e, s->id);
  EXPECT(info.num_tokens == s->len);
  EXPECT(info.num_computed_tokens == s->computed);
  EXPECT(info.is_preempted == (uint32_t)s->preempted);
  EXPECT(info.in_batch == (s->batch_new > 0));
  EXPECT(info.cache_salt_len == (s->salt ? 1u : 0u));
  EXPECT(info.num_blocks == (s->preempted ? 0 : (s->len + w->bs - 1) / w->bs));
  if (!s->preempted)
    check_slots(w, s, 0, s->computed, pool);
}

static inline void check_tokens(world *w, const rseq *s)
{
  int32_t tokens[MAX_LEN];
  uint32_t n = 0;
  CHECK_OK(pkv_seq_tokens(w->e, s->id, tokens, MAX_LEN, &n));
  EXPECT(n == s->len && memcmp(tokens, s->tokens, n * sizeof tokens[0]) == 0);
}

static inline void check_world(world *w, int deep)
{
  if (!EXPECT(pkv_engine_check(w->e) == PKV_OK))
    fprintf(stderr, "  pkv_engine_check: %s\n", pkv_engine_last_error(w->e));
  pkv_stats st = tu_stats(w->e);
  uint32_t preempted = 0;
  for (uint32_t i = 0; i < w->nseqs; i++)
    preempted += (uint32_t)w->seqs[i].preempted;
  EXPECT(st.num_blocks == w->num_blocks);
  EXPECT(st.num_free_blocks + st.num_used_blocks == st.num_blocks);
  EXPECT(st.num_cached_blocks <= st.num_free_blocks);
  EXPECT(st.num_seqs == w->nseqs);
  EXPECT(st.num_preempted_seqs == preempted);
  EXPECT(st.num_cow_copies == w->num_cow);
  EXPECT(st.num_preemptions == w->num_preempt);
  const uint64_t *pool = effective(w);
  for (uint32_t i = 0; i < w->nseqs; i++) {
    check_seq(w, &w->seqs[i], pool);
    if (deep)
      check_tokens(w, &w->seqs[i]);
  }
}

/* refs[b] = how many live tables hold block b. */
static inline void count_refs(world *w)
{
  memset(w->refs, 0, w->num_blocks * sizeof w->refs[0]);
  int32_t table[MAX_LEN];
  for (uint32_t i = 0; i < w->nseqs; i++) {
    if (w->seqs[i].preempted)
      continue;
    uint32_t n = get_table(w, &w->seqs[i], table);
    for (uint32_t k = 0; k < n; k++)
      if (EXPECT(table[k] >= 0 && (uint32_t)table[k] < w->num_blocks))
        w->refs[table[k]]++;
  }
}

/* After an append to s whose table was old[0..n_old): a changed entry is a copy-on-write copy,
 * queued in pkv for the next batch. Only the last old block may change. */
static inline void note_copies(world *w, const rseq *s, const int32_t *old, uint32_t n_old)
{
  int32_t table[MAX_LEN];
  uint32_t n = get_table(w, s, table);
  EXPECT(n >= n_old);
  for (uint32_t k = 0; k < n_old && k < n; k++) {
    if (table[k] == old[k])
      continue;
    EXPECT(k + 1 == n_old);
    if (EXPECT(w->nqueued < MAX_COPIES))
      w->queued[w->nqueued++] = (rcopy){old[k], table[k]};
    w->num_cow++;
  }
}

static inline int listed(const pkv_batch_view *v, rcopy c)
{
  for (uint32_t k = 0; k < v->num_copies; k++)
    if (v->copy_src[k] == c.src && v->copy_dst[k] == c.dst)
      return 1;
  return 0;
}

/* A batch takes over every queued copy (one whose sequence is gone may be dropped) and lists only
 * those; none copies into a shared block. They are done when the batch ends. */
static inline void take_copies(world *w, const pkv_batch_view *v)
{
  for (uint32_t i = 0; i < w->nqueued; i++) {
    rcopy c = w->queued[i];
    if (!EXPECT(listed(v, c) || w->refs[c.dst] == 0))
      fprintf(stderr, "  copy %d -> %d not listed\n", c.src, c.dst);
  }
  w->ntaken = 0;
  for (uint32_t k = 0; k < v->num_copies && EXPECT(k < MAX_COPIES); k++) {
    rcopy c = {v->copy_src[k], v->copy_dst[k]};
    int queued = 0;
    for (uint32_t i = 0; i < w->nqueued; i++)
      queued |= w->queued[i].src == c.src && w->queued[i].dst == c.dst;
    EXPECT(queued);
    if (EXPECT(c.dst >= 0 && (uint32_t)c.dst < w->num_blocks))
      EXPECT(w->refs[c.dst] <= 1);
    w->taken[w->ntaken++] = c;
  }
  w->nqueued = 0;
}

/* The batch was aborted: its copies go back to the head of the queue. */
static inline void untake_copies(world *w)
{
  if (!EXPECT(w->ntaken + w->nqueued <= MAX_COPIES))
    return;
  memmove(w->queued + w->ntaken, w->queued, w->nqueued * sizeof w->queued[0]);
  memcpy(w->queued, w->taken, w->ntaken * sizeof w->queued[0]);
  w->nqueued += w->ntaken;
  w->ntaken = 0;
}

#endif /* PKV_RANDOM_WORLD_H */
