/* Retention under random operations (issue 30 item 3): a shadow of the pool predicts every
 * eviction - lowest effective priority first, least recently released within one, a priority past
 * its retention counted as normal - and the engine must agree after every operation: which
 * prefixes stay cached (pkv_allocate_query), NO_SPACE exactly when the shadow runs out, the
 * evictions by priority, the pins and pkv_engine_check. Operations: allocate, release, preempt
 * and resume, set a prefix's priority, pin, unpin, advance the clock.
 *
 * Block size 2, prompts of 3 tokens: prompt k is one sealed block (its own node) and one unsealed
 * block, so the shadow follows one cached block per prompt. Retentions come from 4 values, so no
 * class ever merges (PKV_MAX_CACHE_RETENTIONS): the shadow's order is the exact rule. */
#define _POSIX_C_SOURCE 200809L
#include "test_util.h"

enum { POOL = 24, PROMPTS = 24, MAX_SEQS = 16, MAX_PINS = 8, UNSET = -100, NONE = -200 };

typedef struct {
  int ref;             /* holders: sequences and pins (0 with cached set: cached) */
  int cached, present; /* present: the prompt's block exists (held or cached) */
  int priority;        /* pending while held (UNSET: none given), its class's while cached */
  uint32_t retention_ms;
  uint64_t released_ms, stamp;
  int pins; /* pins holding it */
} Block;

typedef struct {
  uint64_t id;
  int prompt, priority;
  uint32_t retention_ms;
  int preempted; /* holds no block (pkv_preempt) until pkv_resume */
} Seq;

typedef struct {
  Block b[PROMPTS];
  Seq seqs[MAX_SEQS];
  int num_seqs;
  uint64_t pin_ids[MAX_PINS];
  int pin_prompt[MAX_PINS]; /* -1: a pin holding nothing */
  int num_pins;
  int num_used; /* blocks with ref >= 1: held block 0s and the sequences' block 1s */
  uint64_t now, stamp, evictions[4];
} Shadow;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return (uint32_t)(rng_state % n);
}

static void tokens_of(int prompt, int32_t *t) {
  for (int i = 0; i < 3; ++i) t[i] = 1000 * (prompt + 1) + i;
}

static int ended(const Shadow *s, const Block *b) {
  return b->priority != 0 && b->retention_ms && s->now - b->released_ms >= b->retention_ms;
}
static int effective(const Shadow *s, const Block *b) { return ended(s, b) ? 0 : b->priority; }

/* The stronger of two: the higher priority, then the longer retention (0 = forever). */
static void keep_stronger(Block *b, int priority, uint32_t retention_ms) {
  if (priority == NONE) return;
  uint64_t had = b->retention_ms ? b->retention_ms : UINT64_MAX;
  uint64_t got = retention_ms ? retention_ms : UINT64_MAX;
  if (b->priority == UNSET || priority > b->priority || (priority == b->priority && got > had)) {
    b->priority = priority;
    b->retention_ms = retention_ms;
  }
}

static void link_cached(Shadow *s, Block *b) {
  if (b->priority == UNSET) b->priority = 0;
  if (b->priority == 0) b->retention_ms = 0;
  b->cached = 1;
  b->released_ms = s->now;
  b->stamp = ++s->stamp;
}

static void hold(Shadow *s, Block *b) { /* one more holder; a cached block is revived */
  if (b->ref++ > 0) return;
  b->cached = 0;
  s->num_used++;
  if (b->priority == 0 || ended(s, b)) b->priority = UNSET, b->retention_ms = 0;
}

static void drop(Shadow *s, Block *b, int priority, uint32_t retention_ms) {
  keep_stronger(b, priority, retention_ms);
  if (--b->ref > 0) return;
  s->num_used--;
  link_cached(s, b);
}

static int num_cached(const Shadow *s) {
  int n = 0;
  for (int k = 0; k < PROMPTS; ++k) n += s->b[k].cached;
  return n;
}

/* One block for a new owner: a free unsealed one, else the victim evicted. */
static void take_block(Shadow *s) {
  int free_unsealed = POOL - s->num_used - num_cached(s);
  if (free_unsealed > 0) return;
  int victim = -1;
  for (int k = 0; k < PROMPTS; ++k) {
    const Block *b = &s->b[k];
    if (!b->cached) continue;
    if (victim < 0) {
      victim = k;
      continue;
    }
    const Block *v = &s->b[victim];
    int pb = effective(s, b), pv = effective(s, v);
    if (pb < pv || (pb == pv && b->stamp < v->stamp)) victim = k;
  }
  Block *v = &s->b[victim];
  s->evictions[effective(s, v) + 1]++;
  memset(v, 0, sizeof *v);
}

/* The shadow's side of an admission of prompt k, after the engine said st: NO_SPACE exactly when
 * the blocks it needs are not free. Returns whether it was admitted. */
static int admit(Shadow *s, int k, pkv_status st) {
  Block *b = &s->b[k];
  const int needed = b->present && b->ref > 0 ? 1 : 2;
  if (needed > POOL - s->num_used) {
    CHECK_EQ_INT(st, PKV_ERR_NO_SPACE);
    return 0;
  }
  if (!CHECK_OK(st)) return 0;
  if (b->present) {
    hold(s, b); /* the hit is held before any pop */
  } else {
    take_block(s);
    memset(b, 0, sizeof *b);
    b->present = 1, b->ref = 1, b->priority = UNSET;
    s->num_used++;
  }
  take_block(s); /* the unsealed block of its last token */
  s->num_used++;
  return 1;
}

static void op_allocate(pkv_engine *e, Shadow *s) {
  if (s->num_seqs == MAX_SEQS) return;
  const int k = (int)rnd(PROMPTS), priority = (int)rnd(4) - 1;
  static const uint32_t retentions[4] = {0, 50, 200, 1000};
  const uint32_t retention_ms = retentions[rnd(4)];
  int32_t t[3];
  tokens_of(k, t);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_priority = priority;
  sp.cache_retention_ms = retention_ms;
  uint64_t id = 0;
  if (!admit(s, k, pkv_allocate(e, t, 3, &sp, &id, NULL))) return;
  CHECK(tu_compute1(e, id));
  s->seqs[s->num_seqs++] = (Seq){id, k, priority, retention_ms, 0};
}

/* A running sequence gives its blocks back as a release does (its priority too), or a preempted
 * one is admitted again. */
static void op_preempt_or_resume(pkv_engine *e, Shadow *s) {
  if (!s->num_seqs) return;
  Seq *q = &s->seqs[rnd((uint32_t)s->num_seqs)];
  if (q->preempted) {
    if (!admit(s, q->prompt, pkv_resume(e, q->id, NULL))) return;
    CHECK(tu_compute1(e, q->id));
    q->preempted = 0;
    return;
  }
  CHECK_OK(pkv_preempt(e, q->id));
  s->num_used--;
  drop(s, &s->b[q->prompt], q->priority, q->retention_ms);
  q->preempted = 1;
}

static void op_release(pkv_engine *e, Shadow *s) {
  if (!s->num_seqs) return;
  const int i = (int)rnd((uint32_t)s->num_seqs);
  Seq q = s->seqs[i];
  s->seqs[i] = s->seqs[--s->num_seqs];
  CHECK_OK(pkv_release(e, q.id));
  if (q.preempted) return; /* it held nothing */
  s->num_used--;           /* its unsealed block: free */
  drop(s, &s->b[q.prompt], q.priority, q.retention_ms);
}

static void op_set_priority(pkv_engine *e, Shadow *s) {
  const int k = (int)rnd(PROMPTS), priority = (int)rnd(4) - 1;
  const uint32_t retention_ms = rnd(2) ? 0 : 200;
  int32_t t[3];
  tokens_of(k, t);
  uint32_t n = 99;
  CHECK_OK(pkv_cache_set_priority(e, t, 3, NULL, priority, retention_ms, &n));
  Block *b = &s->b[k];
  CHECK_EQ_INT(n, b->present);
  if (!b->present) return;
  b->priority = priority;
  b->retention_ms = retention_ms;
  if (b->cached) link_cached(s, b); /* to its class's tail, released now */
}

static void op_pin(pkv_engine *e, Shadow *s) {
  if (s->num_pins == MAX_PINS) return;
  const int k = (int)rnd(PROMPTS);
  Block *b = &s->b[k];
  int pinned = 0;
  for (int j = 0; j < PROMPTS; ++j) pinned += s->b[j].pins > 0;
  const int fresh = b->present && b->pins == 0;
  int32_t t[3];
  tokens_of(k, t);
  uint64_t pin = 0;
  uint32_t tokens = 99;
  pkv_status st = pkv_cache_pin(e, t, 3, NULL, &pin, &tokens);
  if (pinned + fresh > POOL * PKV_MAX_PINNED_PERCENT / 100) {
    CHECK_EQ_INT(st, PKV_ERR_NO_SPACE);
    return;
  }
  if (!CHECK_OK(st)) return;
  CHECK_EQ_INT(tokens, b->present ? 2 : 0);
  s->pin_ids[s->num_pins] = pin;
  s->pin_prompt[s->num_pins++] = b->present ? k : -1;
  if (!b->present) return;
  b->pins++;
  hold(s, b);
}

static void op_unpin(pkv_engine *e, Shadow *s) {
  if (!s->num_pins) return;
  const int i = (int)rnd((uint32_t)s->num_pins);
  const uint64_t pin = s->pin_ids[i];
  const int k = s->pin_prompt[i];
  s->pin_ids[i] = s->pin_ids[--s->num_pins];
  s->pin_prompt[i] = s->pin_prompt[s->num_pins];
  CHECK_OK(pkv_cache_unpin(e, pin));
  if (k < 0) return;
  s->b[k].pins--;
  drop(s, &s->b[k], NONE, 0);
}

static void advance(Shadow *s) {
  s->now += rnd(120);
  char text[32];
  snprintf(text, sizeof text, "%llu", (unsigned long long)s->now);
  setenv("PKV_TEST_CLOCK_MS", text, 1);
}

static int agree(pkv_engine *e, const Shadow *s) {
  int ok = 1;
  for (int k = 0; k < PROMPTS; ++k) {
    int32_t t[3];
    tokens_of(k, t);
    uint32_t cached = 99;
    ok &= CHECK_OK(pkv_allocate_query(e, t, 3, NULL, NULL, &cached));
    ok &= CHECK_EQ_INT(cached, s->b[k].present ? 2 : 0);
  }
  pkv_stats st = tu_stats(e);
  int pinned = 0;
  for (int k = 0; k < PROMPTS; ++k) pinned += s->b[k].pins > 0;
  ok &= CHECK_EQ_INT(st.num_pins, s->num_pins);
  ok &= CHECK_EQ_INT(st.num_pinned_blocks, pinned);
  ok &= CHECK_EQ_INT(st.num_cached_blocks, num_cached(s));
  ok &= CHECK_EQ_INT(st.num_evictions_low, s->evictions[0]);
  ok &= CHECK_EQ_INT(st.num_evictions_normal, s->evictions[1]);
  ok &= CHECK_EQ_INT(st.num_evictions_high, s->evictions[2]);
  ok &= CHECK_EQ_INT(st.num_evictions_highest, s->evictions[3]);
  ok &= CHECK_EQ_INT(st.num_evictions,
                     s->evictions[0] + s->evictions[1] + s->evictions[2] + s->evictions[3]);
  ok &= CHECK_ENGINE(e);
  return ok;
}

static void run_seed(uint64_t seed, int ops) {
  rng_state = seed;
  static Shadow s;
  memset(&s, 0, sizeof s);
  s.now = 1000;
  setenv("PKV_TEST_CLOCK_MS", "1000", 1);
  pkv_engine *e = tu_engine(2, POOL, PKV_DEBUG_TEST_CLOCK);
  if (!e) return;
  for (int i = 0; i < ops; ++i) {
    const uint32_t r = rnd(100);
    if (r < 35)
      op_allocate(e, &s);
    else if (r < 58)
      op_release(e, &s);
    else if (r < 65)
      op_preempt_or_resume(e, &s);
    else if (r < 75)
      op_set_priority(e, &s);
    else if (r < 81)
      op_pin(e, &s);
    else if (r < 87)
      op_unpin(e, &s);
    else
      advance(&s);
    if (!agree(e, &s)) {
      fprintf(stderr, "seed %llu: the engine and the shadow part at op %d\n",
              (unsigned long long)seed, i);
      break;
    }
  }
  uint64_t evicted = s.evictions[0] + s.evictions[1] + s.evictions[2] + s.evictions[3];
  CHECK(evicted > (uint64_t)ops / 20); /* the mix evicts: it tests the order */
  printf("seed %llu: %d ops, %llu evictions (low %llu, normal %llu, high %llu, highest %llu)\n",
         (unsigned long long)seed, ops, (unsigned long long)evicted,
         (unsigned long long)s.evictions[0], (unsigned long long)s.evictions[1],
         (unsigned long long)s.evictions[2], (unsigned long long)s.evictions[3]);
  pkv_engine_destroy(e);
}

static void test_random_retention(void) {
  for (uint64_t seed = 1; seed <= 8; ++seed) run_seed(seed * 0x9e3779b97f4a7c15ull, 5000);
}

int main(void) {
  TU_RUN(test_random_retention);
  unsetenv("PKV_TEST_CLOCK_MS");
  return tu_summary();
}
