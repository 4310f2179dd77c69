/*
 * soak.c - `pkv soak`: millions of random operations on one small CPU engine, the way a
 * long-running server would drive it, with pkv_engine_check every N operations.
 *
 * One operation is one random action: allocate (three salts, a small alphabet so prompts share
 * prefixes), append, fork, release, preempt + resume, a batch (partial chunks, attention on every
 * layer, end or abort), a scheduler round (submit, step, attention, commit, drain and release the
 * finished), a KV-event drain, rarely a prefix-cache reset. Arguments are always valid, so the
 * only statuses allowed are OK, NO_SPACE (the pool is full) and STATE (fork of an uncomputed or
 * preempted sequence, a batch while a step is open, ...); anything else, or a failed check, stops
 * the run with exit 1. Prints operations (and pkv calls) per second and the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"

enum { SOAK_SEQS = 32, SOAK_MAX_LEN = 160, SOAK_MAX_ROWS = SOAK_SEQS * SOAK_MAX_LEN };

typedef struct soak {
  pkv_engine *e;
  uint64_t rng, calls, failures, no_space, state, batches, steps;
  uint64_t seqs[SOAK_SEQS];
  uint32_t nseqs;
  float *q, *k, *v, *out; /* [SOAK_MAX_ROWS][4 q | 2 kv heads][8] */
} soak;

static uint32_t rnd(soak *s, uint32_t n) {
  s->rng += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  uint64_t z = s->rng;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) % n);
}

/* Counts the call; returns its status, or records a failure when it is not an allowed one. */
static pkv_status expect(soak *s, pkv_status st, int allow_no_space, int allow_state,
                         const char *what) {
  s->calls++;
  s->no_space += st == PKV_ERR_NO_SPACE;
  s->state += st == PKV_ERR_STATE;
  if (st == PKV_OK || (allow_no_space && st == PKV_ERR_NO_SPACE) ||
      (allow_state && st == PKV_ERR_STATE))
    return st;
  if (s->failures++ < 10)
    fprintf(stderr, "pkv soak: %s -> %s: %s\n", what, pkv_status_string(st), pkv_last_error());
  return st;
}

static struct pkv_seq_info info_of(soak *s, uint64_t id) {
  struct pkv_seq_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  expect(s, pkv_seq_info(s->e, id, &info), 0, 0, "pkv_seq_info");
  return info;
}

static void forget(soak *s, uint32_t i) { s->seqs[i] = s->seqs[--s->nseqs]; }

static void op_allocate(soak *s) {
  if (s->nseqs == SOAK_SEQS) return;
  static const char *salts[] = {NULL, "tenant-a", "tenant-b"};
  int32_t t[64];
  uint32_t n = 1 + rnd(s, 48), shared = rnd(s, 4) * 8;
  for (uint32_t i = 0; i < n; i++) t[i] = i < shared ? (int32_t)i : (int32_t)rnd(s, 6);
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_salt = salts[rnd(s, 3)];
  sp.cache_salt_len = sp.cache_salt ? (uint32_t)strlen(sp.cache_salt) : 0;
  uint64_t id = 0;
  if (expect(s, pkv_allocate(s->e, t, n, &sp, &id, NULL), 1, 0, "pkv_allocate") == PKV_OK)
    s->seqs[s->nseqs++] = id;
}

static void op_sequence(soak *s, uint32_t which) {
  if (s->nseqs == 0) {
    op_allocate(s);
    return;
  }
  uint32_t i = rnd(s, s->nseqs);
  uint64_t id = s->seqs[i], child = 0;
  int32_t t[4] = {1, 2, 3, 4};
  switch (which) {
    case 0:
      if (info_of(s, id).num_tokens + 4 > SOAK_MAX_LEN) break;
      expect(s, pkv_append(s->e, id, t, 1 + rnd(s, 4)), 1, 1, "pkv_append");
      break;
    case 1:
      if (s->nseqs == SOAK_SEQS) break;
      if (expect(s, pkv_fork(s->e, id, &child), 0, 1, "pkv_fork") == PKV_OK)
        s->seqs[s->nseqs++] = child;
      break;
    case 2:
      if (expect(s, pkv_release(s->e, id), 0, 1, "pkv_release") == PKV_OK) forget(s, i);
      break;
    default:
      expect(s, pkv_preempt(s->e, id), 0, 1, "pkv_preempt");
      expect(s, pkv_resume(s->e, id, NULL), 1, 1, "pkv_resume");
      break;
  }
}

/* Attention on every layer of an open batch, then end (commit) or abort it. */
static void finish_batch(soak *s, pkv_batch *b, int from_step) {
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  expect(s, pkv_batch_info(b, &v), 0, 0, "pkv_batch_info");
  if (rnd(s, from_step ? 16 : 8) == 0) { /* the step did not run */
    pkv_batch_abort(b);
    return;
  }
  for (uint32_t layer = 0; layer < 2 && v.num_tokens <= SOAK_MAX_ROWS; layer++)
    expect(s, pkv_attention(b, layer, s->q, s->k, s->v, s->out), 0, 0, "pkv_attention");
  from_step ? s->steps++ : s->batches++;
  if (!from_step) {
    expect(s, pkv_batch_end(b), 0, 0, "pkv_batch_end");
    return;
  }
  int32_t sampled[SOAK_SEQS * 2];
  for (uint32_t i = 0; i < v.num_seqs && i < SOAK_SEQS * 2; i++) sampled[i] = (int32_t)rnd(s, 6);
  expect(s, pkv_commit(b, sampled), 0, 0, "pkv_commit");
}

static void op_batch(soak *s) {
  uint64_t ids[SOAK_SEQS];
  uint32_t counts[SOAK_SEQS], n = 0;
  for (uint32_t i = 0; i < s->nseqs; i++) {
    struct pkv_seq_info info = info_of(s, s->seqs[i]);
    uint32_t todo = info.num_tokens - info.num_computed_tokens;
    if (info.is_preempted || info.in_batch || info.is_request || todo == 0 || rnd(s, 3) == 0)
      continue;
    ids[n] = s->seqs[i];
    counts[n++] = 1 + rnd(s, todo); /* a chunk of what is left */
  }
  if (n == 0) return;
  pkv_batch *b = NULL;
  if (expect(s, pkv_batch_begin(s->e, ids, counts, n, &b), 0, 1, "pkv_batch_begin") == PKV_OK)
    finish_batch(s, b, 0);
}

static void op_scheduler(soak *s) {
  if (rnd(s, 2) == 0 && s->nseqs < SOAK_SEQS) {
    int32_t t[40];
    uint32_t n = 1 + rnd(s, 40);
    for (uint32_t i = 0; i < n; i++) t[i] = i < 16 ? (int32_t)i : (int32_t)rnd(s, 6);
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = 1 + rnd(s, 16);
    rp.stop_token = rnd(s, 2) ? 5 : -1;
    rp.priority = (int32_t)rnd(s, 3);
    uint64_t id = 0;
    if (expect(s, pkv_submit(s->e, t, n, &rp, &id), 0, 0, "pkv_submit") == PKV_OK)
      s->seqs[s->nseqs++] = id;
  }
  pkv_batch *b = NULL;
  if (expect(s, pkv_step(s->e, &b), 0, 0, "pkv_step") == PKV_OK && b) finish_batch(s, b, 1);
  uint64_t done[8];
  uint32_t len = 0;
  expect(s, pkv_drain_finished(s->e, done, 8, &len), 0, 0, "pkv_drain_finished");
  for (uint32_t d = 0; d < len; d++)
    for (uint32_t i = 0; i < s->nseqs; i++)
      if (s->seqs[i] == done[d] &&
          expect(s, pkv_release(s->e, done[d]), 0, 0, "pkv_release") == PKV_OK) {
        forget(s, i);
        break;
      }
}

static void op_misc(soak *s) {
  pkv_kv_event ev[16];
  uint32_t len = 0;
  expect(s, pkv_drain_kv_events(s->e, ev, 16, &len), 0, 0, "pkv_drain_kv_events");
  if (rnd(s, 50) == 0) expect(s, pkv_reset_prefix_cache(s->e), 0, 0, "pkv_reset_prefix_cache");
}

static void check(soak *s) {
  expect(s, pkv_engine_check(s->e), 0, 0, "pkv_engine_check");
  pkv_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  expect(s, pkv_engine_stats(s->e, &st), 0, 0, "pkv_engine_stats");
  if (st.num_free_blocks + st.num_used_blocks != st.num_blocks || st.num_seqs != s->nseqs) {
    fprintf(stderr,
            "pkv soak: stats disagree: %llu free + %llu used of %llu, %llu seqs (%u live)\n",
            (unsigned long long)st.num_free_blocks, (unsigned long long)st.num_used_blocks,
            (unsigned long long)st.num_blocks, (unsigned long long)st.num_seqs, s->nseqs);
    s->failures++;
  }
}

static int run(uint64_t ops, uint64_t seed, uint64_t check_every, uint32_t block_size,
               uint32_t num_blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 2, p.num_q_heads = 4, p.num_kv_heads = 2, p.head_dim = 8;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.num_threads = 1;
  p.block_size = block_size, p.num_blocks = num_blocks, p.max_model_len = SOAK_MAX_LEN * 2;
  p.enable_kv_events = 1, p.max_num_seqs = 8, p.max_num_batched_tokens = 64;
  soak s;
  memset(&s, 0, sizeof s);
  s.rng = seed;
  if (pkv_engine_create(&p, &s.e) != PKV_OK) {
    fprintf(stderr, "pkv soak: cannot create the engine: %s\n", pkv_last_error());
    return CLI_EXIT_FAIL;
  }
  s.q = calloc((size_t)SOAK_MAX_ROWS * 32, 4), s.out = calloc((size_t)SOAK_MAX_ROWS * 32, 4);
  s.k = calloc((size_t)SOAK_MAX_ROWS * 16, 4), s.v = calloc((size_t)SOAK_MAX_ROWS * 16, 4);
  const double t0 = cli_now_s();
  uint64_t done = 0, checks = 0;
  for (; done < ops && s.failures == 0; done++) {
    uint32_t r = rnd(&s, 100);
    if (r < 20)
      op_allocate(&s);
    else if (r < 60)
      op_sequence(&s, r % 4);
    else if (r < 78)
      op_batch(&s);
    else if (r < 93)
      op_scheduler(&s);
    else
      op_misc(&s);
    if (check_every && (done + 1) % check_every == 0) check(&s), checks++;
    if ((done + 1) % 1000000 == 0)
      fprintf(stderr, "pkv soak: %llu ops\n", (unsigned long long)done + 1);
  }
  if (s.failures == 0) check(&s), checks++;
  const double secs = cli_now_s() - t0;
  printf("pkv soak: %llu ops (%llu pkv calls) in %.1f s: %.0f ops/s, %.0f calls/s; seed %llu, "
         "%llu checks (every %llu ops)\n",
         (unsigned long long)done, (unsigned long long)s.calls, secs, done / secs, s.calls / secs,
         (unsigned long long)seed, (unsigned long long)checks, (unsigned long long)check_every);
  printf("pkv soak: %llu batches and %llu scheduler steps with attention; %llu NO_SPACE and %llu "
         "STATE refusals (expected ones)\n",
         (unsigned long long)s.batches, (unsigned long long)s.steps, (unsigned long long)s.no_space,
         (unsigned long long)s.state);
  printf("result: %s\n", s.failures ? "FAILED" : "ok");
  pkv_engine_destroy(s.e);
  free(s.q), free(s.k), free(s.v), free(s.out);
  return s.failures ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

int cmd_soak(int argc, char **argv) {
  uint64_t ops = 10000000, seed = 1, check_every = 1000;
  uint32_t block_size = 4, num_blocks = 96;
  cli_flag flags[] = {
      {"ops", CLI_U64, &ops, "N", "random operations to run (10000000)", 0},
      {"seed", CLI_U64, &seed, "N", "seed of the operations (1)", 0},
      {"check-every", CLI_U64, &check_every, "N",
       "pkv_engine_check every N operations; 0 = at the end (1000)", 0},
      {"block-size", CLI_U32, &block_size, "N", "tokens per block (4)", 0},
      {"num-blocks", CLI_U32, &num_blocks, "N", "blocks in the pool (96)", 0},
  };
  cli_command cmd = {"soak", "soak [--ops N] [--seed N] [--check-every N]",
                     "Drives one small CPU engine with random operations (sequences, batches with\n"
                     "attention, the scheduler, KV events) and checks its invariants every N of\n"
                     "them. Prints operations per second and the result; exit 1 on any failure.",
                     flags, sizeof flags / sizeof flags[0]};
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_PARSED) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (ops == 0 || block_size == 0 || block_size > 64 || num_blocks > 1000000 ||
      (uint64_t)num_blocks * block_size < 2 * SOAK_MAX_LEN) {
    fprintf(stderr,
            "pkv soak: --ops must be >= 1, --block-size 1..64, --num-blocks at most 1000000 "
            "and at least %u tokens' worth (num-blocks * block-size)\n",
            2 * SOAK_MAX_LEN);
    return CLI_EXIT_USAGE;
  }
  return run(ops, seed, check_every, block_size, num_blocks);
}
