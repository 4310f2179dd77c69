/*
 * test_threads.c - pkv driven from many threads at once, built with ThreadSanitizer together with
 * pkv's own sources (tests/threads/meson.build), so a race inside pkv is reported, not only in
 * this file. Phase 1: one engine, 8 threads (allocate / append / fork / preempt / resume /
 * release / batch begin-attention-end / stats / seq info / tables; one thread runs the scheduler:
 * submit / step / commit / drain; every thread also reads the batch handle another thread
 * published, which may be ending at that moment). Phase 2: 4 engines side by side, 2 threads each.
 * Each thread works on its own sequences; statuses other than the expected ones (NO_SPACE when the
 * pool is full, STATE when another thread's batch is open) fail. pkv_engine_check runs every 40
 * iterations in every thread and at the end. A watchdog (alarm) fails a deadlock.
 */
#include "../unit/test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

enum { NUM_THREADS = 8, ITERS = 3000, MAX_OWN = 4, WATCHDOG_S = 240 };

typedef struct {
  pkv_engine *e;
  int id, scheduler;
  uint64_t rng;
  uint64_t own[MAX_OWN];
  int nown;
  int failures;
  long ops, batches, steps;
} worker;

static _Atomic(pkv_batch *) published; /* the last batch some thread opened */

static uint32_t rnd(worker *w, uint32_t n) {
  w->rng = w->rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(w->rng >> 33) % n;
}

/* The test's own check: counted per thread (the CHECK counters are not thread-safe). */
#define EXPECT_ST(w, st, ok1, ok2)                                                           \
  do {                                                                                       \
    pkv_status s_ = (st);                                                                    \
    if (s_ != PKV_OK && s_ != (ok1) && s_ != (ok2)) {                                        \
      fprintf(stderr, "FAIL thread %d line %d: %s -> %d (%s)\n", (w)->id, __LINE__, #st, s_, \
              pkv_last_error());                                                             \
      (w)->failures++;                                                                       \
    }                                                                                        \
  } while (0)

static void forget(worker *w, int i) { w->own[i] = w->own[--w->nown]; }

/* Computes own sequences' uncomputed tokens in one batch: attention on every layer, then end. */
static void run_batch(worker *w) {
  uint64_t seqs[MAX_OWN];
  uint32_t n = 0;
  for (int i = 0; i < w->nown; i++) {
    struct pkv_seq_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    EXPECT_ST(w, pkv_seq_info(w->e, w->own[i], &info), PKV_OK, PKV_OK);
    if (!info.is_preempted && info.num_computed_tokens < info.num_tokens) seqs[n++] = w->own[i];
  }
  if (n == 0) return;
  pkv_batch *b = NULL;
  pkv_status s = pkv_batch_begin(w->e, seqs, NULL, n, &b);
  EXPECT_ST(w, s, PKV_ERR_STATE, PKV_OK); /* STATE: another thread's batch is open */
  if (s != PKV_OK) return;
  atomic_store(&published, b);
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  EXPECT_ST(w, pkv_batch_info(b, &v), PKV_OK, PKV_OK);
  /* tu_params' model: 4 q heads, 2 kv heads, head_dim 8, f32 */
  size_t qn = (size_t)v.num_tokens * 4 * 8, kn = (size_t)v.num_tokens * 2 * 8;
  float *q = calloc(qn, 4), *k = calloc(kn, 4), *val = calloc(kn, 4), *out = calloc(qn, 4);
  for (size_t i = 0; i < kn; i++) k[i] = val[i] = (float)(i % 7) * 0.125f;
  for (uint32_t layer = 0; layer < 2; layer++)
    EXPECT_ST(w, pkv_attention(b, layer, q, k, val, out), PKV_OK, PKV_OK);
  free(q), free(k), free(val), free(out);
  EXPECT_ST(w, pkv_batch_end(b), PKV_OK, PKV_OK);
  w->batches++;
}

static void sequence_op(worker *w) {
  int32_t tokens[40];
  uint32_t table_len;
  int32_t table[64];
  int i = w->nown ? (int)rnd(w, (uint32_t)w->nown) : -1;
  switch (rnd(w, 9)) {
    case 0:
    case 1: {
      if (w->nown == MAX_OWN) break;
      uint32_t n = 1 + rnd(w, 30);
      for (uint32_t t = 0; t < n; t++) /* a prefix every thread shares, then its own tokens */
        tokens[t] = t < 8 ? (int32_t)t : (int32_t)(w->id * 1000 + rnd(w, 4));
      uint64_t id = 0;
      pkv_status s = pkv_allocate(w->e, tokens, n, NULL, &id, NULL);
      EXPECT_ST(w, s, PKV_ERR_NO_SPACE, PKV_OK);
      if (s == PKV_OK) w->own[w->nown++] = id;
      break;
    }
    case 2:
      if (i >= 0) {
        tokens[0] = (int32_t)rnd(w, 50);
        EXPECT_ST(w, pkv_append(w->e, w->own[i], tokens, 1 + rnd(w, 3)), PKV_ERR_NO_SPACE,
                  PKV_ERR_STATE);
      }
      break;
    case 3:
      if (i >= 0 && w->nown < MAX_OWN) {
        uint64_t child = 0;
        pkv_status s = pkv_fork(w->e, w->own[i], &child); /* STATE: uncomputed or preempted */
        EXPECT_ST(w, s, PKV_ERR_STATE, PKV_OK);
        if (s == PKV_OK) w->own[w->nown++] = child;
      }
      break;
    case 4:
      if (i >= 0) {
        EXPECT_ST(w, pkv_release(w->e, w->own[i]), PKV_OK, PKV_OK);
        forget(w, i);
      }
      break;
    case 5:
      if (i >= 0) {
        EXPECT_ST(w, pkv_preempt(w->e, w->own[i]), PKV_ERR_STATE, PKV_OK);
        EXPECT_ST(w, pkv_resume(w->e, w->own[i], NULL), PKV_ERR_NO_SPACE, PKV_ERR_STATE);
      }
      break;
    case 6: {
      pkv_stats st = {0};
      st.struct_size = sizeof st;
      EXPECT_ST(w, pkv_engine_stats(w->e, &st), PKV_OK, PKV_OK);
      if (i >= 0) {
        EXPECT_ST(w, pkv_seq_block_table(w->e, w->own[i], table, 64, &table_len), PKV_OK, PKV_OK);
        EXPECT_ST(w, pkv_seq_tokens(w->e, w->own[i], NULL, 0, &table_len), PKV_OK, PKV_OK);
      }
      break;
    }
    case 7: { /* a handle another thread may be ending right now: OK or STATE, never a crash */
      pkv_batch_view v;
      memset(&v, 0, sizeof v);
      v.struct_size = sizeof v;
      EXPECT_ST(w, pkv_batch_info(atomic_load(&published), &v), PKV_ERR_STATE,
                PKV_ERR_INVALID_ARGUMENT);
      break;
    }
    default:
      run_batch(w);
      break;
  }
}

/* The scheduler's loop: submit, step (attention, commit), drain and release the finished. */
static void scheduler_op(worker *w, int submit) {
  int32_t prompt[24];
  uint32_t n = 1 + rnd(w, 20);
  for (uint32_t t = 0; t < n; t++) prompt[t] = t < 8 ? (int32_t)t : (int32_t)rnd(w, 9);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1 + rnd(w, 6);
  uint64_t id;
  if (submit && rnd(w, 3) == 0) EXPECT_ST(w, pkv_submit(w->e, prompt, n, &rp, &id), PKV_OK, PKV_OK);
  pkv_batch *b = NULL;
  pkv_status s = pkv_step(w->e, &b);
  EXPECT_ST(w, s, PKV_ERR_STATE, PKV_OK);
  if (s == PKV_OK && b) {
    atomic_store(&published, b);
    pkv_batch_view v;
    memset(&v, 0, sizeof v);
    v.struct_size = sizeof v;
    EXPECT_ST(w, pkv_batch_info(b, &v), PKV_OK, PKV_OK);
    int32_t *sampled = calloc(v.num_seqs + 1, sizeof *sampled);
    for (uint32_t i = 0; i < v.num_seqs; i++) sampled[i] = (int32_t)rnd(w, 9);
    EXPECT_ST(w, pkv_commit(b, sampled), PKV_OK, PKV_OK);
    free(sampled);
    w->steps++;
  }
  uint64_t done[8];
  uint32_t len = 0;
  EXPECT_ST(w, pkv_drain_finished(w->e, done, 8, &len), PKV_OK, PKV_OK);
  for (uint32_t i = 0; i < len; i++) EXPECT_ST(w, pkv_release(w->e, done[i]), PKV_OK, PKV_OK);
}

static void *work(void *arg) {
  worker *w = arg;
  for (int it = 0; it < ITERS; it++, w->ops++) {
    if (w->scheduler)
      scheduler_op(w, 1);
    else
      sequence_op(w);
    if (it % 40 == 0) EXPECT_ST(w, pkv_engine_check(w->e), PKV_OK, PKV_OK);
  }
  for (int i = 0; i < w->nown; i++) EXPECT_ST(w, pkv_release(w->e, w->own[i]), PKV_OK, PKV_OK);
  w->nown = 0;
  for (int it = 0; w->scheduler; it++) { /* run every request to its end, then release it */
    pkv_stats st = {0};
    st.struct_size = sizeof st;
    EXPECT_ST(w, pkv_engine_stats(w->e, &st), PKV_OK, PKV_OK);
    if (st.num_waiting_requests + st.num_running_requests + st.num_finished_requests == 0) break;
    if (it == 20000) {
      fprintf(stderr, "FAIL thread %d: requests never finished\n", w->id);
      w->failures++;
      break;
    }
    scheduler_op(w, 0);
  }
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAIL test_threads: watchdog: no progress (deadlock?)\n";
  (void)!write(2, msg, sizeof msg - 1);
  _exit(3);
}

static pkv_engine *threaded_engine_p(uint32_t num_blocks, const pkv_event_publisher_params *pub) {
  pkv_engine_params p;
  tu_params(&p, 4, num_blocks);
  p.event_publisher = pub;
  p.num_threads = 2; /* attention on the CPU worker pool */
  p.enable_kv_events = 1;
  p.kv_events_capacity = 64;
  p.max_num_seqs = 4;
  p.max_num_batched_tokens = 64;
  return tu_engine_p(&p);
}

static pkv_engine *threaded_engine(uint32_t num_blocks) {
  return threaded_engine_p(num_blocks, NULL);
}

/* Runs NUM_THREADS workers over engines[t % num_engines]; worker 0 of each engine schedules. */
static void run_workers(pkv_engine **engines, int num_engines) {
  worker w[NUM_THREADS];
  pthread_t tid[NUM_THREADS];
  memset(w, 0, sizeof w);
  for (int t = 0; t < NUM_THREADS; t++) {
    w[t].e = engines[t % num_engines];
    w[t].id = t;
    w[t].scheduler = t < num_engines && t == num_engines - 1; /* one engine runs the scheduler */
    w[t].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1);
    CHECK(pthread_create(&tid[t], NULL, work, &w[t]) == 0);
  }
  long batches = 0, steps = 0;
  for (int t = 0; t < NUM_THREADS; t++) {
    pthread_join(tid[t], NULL);
    CHECK_EQ_INT(w[t].failures, 0);
    batches += w[t].batches, steps += w[t].steps;
  }
  printf("%d threads on %d engine(s): %ld batches, %ld scheduler steps\n", NUM_THREADS, num_engines,
         batches, steps);
  CHECK(batches > 0);
  atomic_store(&published, NULL);
  for (int i = 0; i < num_engines; i++) {
    CHECK_ENGINE(engines[i]);
    pkv_stats s = tu_stats(engines[i]);
    CHECK_EQ_INT(s.num_seqs, 0);
    CHECK_EQ_INT(s.num_used_blocks, 0);
  }
}

static void test_one_engine_many_threads(void) {
  pkv_engine *e = threaded_engine(40);
  if (!e) return;
  run_workers(&e, 1);
  pkv_engine_destroy(e);
}

/* The event publisher's thread against 8 callers: every call stages events and hands them over
 * (a build without libzmq refuses the publisher: skipped). */
static void test_one_engine_publishing(void) {
  pkv_event_publisher_params pub;
  pkv_event_publisher_params_init(&pub, sizeof pub);
  pub.endpoint = "tcp://127.0.0.1:*";
  pub.replay_endpoint = "tcp://127.0.0.1:*";
  pub.max_queue_events = 16; /* small: the overflow path runs too */
  pkv_engine_params p;
  tu_params(&p, 4, 40);
  p.event_publisher = &pub;
  pkv_engine *e = NULL;
  if (pkv_engine_create(&p, &e) == PKV_ERR_UNSUPPORTED) {
    printf("built without libzmq: no publisher to race\n");
    return;
  }
  pkv_engine_destroy(e);
  if (!(e = threaded_engine_p(40, &pub))) return;
  run_workers(&e, 1);
  struct pkv_event_publisher_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_event_publisher_info(e, &info));
  CHECK(info.events_published + info.events_dropped + info.events_queued > 0);
  pkv_engine_destroy(e);
}

static void test_engines_side_by_side(void) {
  pkv_engine *e[4];
  for (int i = 0; i < 4; i++)
    if (!(e[i] = threaded_engine(16 + 8 * (uint32_t)i))) return;
  run_workers(e, 4);
  for (int i = 0; i < 4; i++) pkv_engine_destroy(e[i]);
}

int main(void) {
  signal(SIGALRM, on_alarm);
  alarm(WATCHDOG_S);
  TU_RUN(test_one_engine_many_threads);
  TU_RUN(test_engines_side_by_side);
  TU_RUN(test_one_engine_publishing);
  return tu_summary();
}
