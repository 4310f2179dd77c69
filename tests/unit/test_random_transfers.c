/*
 * test_random_transfers.c - disaggregated prefill and decode under random load (DESIGN.md §10):
 * a producer engine P prefills requests (hold_on_finish, one sampled token) and a consumer
 * engine C decodes them, their prompts' KV moved from P's held blocks into C's receiving ones by
 * a memcpy "transport", interleaved at random with C's own requests, steps of both engines,
 * transfers that fail half-way (FAILED: C computes the prompt itself; FAILED_FINISH: the request
 * ends), holds that time out on P's clock before their transfer (C's fill must then fail),
 * holds refused by max_held_blocks (C computes), releases, preemptions in C's small pool.
 *
 * Both engines run sched_util.h's checkable model: every attention output row of every step is
 * checked against the model (V of a token is a function of its whole context), so a received
 * block holding anything but the producer's bytes for the same tokens, or a block reused while
 * a transport reads or writes it, changes the numbers. The content shadow besides: when a fill
 * is done, every full block it received holds exactly the model's V (and K = 0) for its tokens,
 * byte for byte, checked through C's own segments. Every request ends with the model's tokens;
 * pkv_engine_check runs on both engines after every operation.
 */
#include "sched_util.h"

enum { MAX_REQS = 256, NUM_PREFIXES = 3, PREFIX_MAX = 20, BS = 4 };

typedef struct job {
  su_req p, c;         /* the prefill request on P; the decode request on C */
  int has_p, has_c;    /* submitted */
  int p_done, c_done;  /* finished and released / checked */
  int receiving;       /* C's request is receiving (drained) */
  uint32_t remote;     /* its num_remote_tokens */
  int c_failed_finish; /* C's request ended PKV_FINISH_TRANSFER_FAILED */
} job;

typedef struct world {
  pkv_engine *P, *C;
  job jobs[MAX_REQS];
  uint32_t num_jobs, target;
  int32_t prefixes[NUM_PREFIXES][PREFIX_MAX];
  uint32_t prefix_len[NUM_PREFIXES];
  uint64_t rng, clock_ms;
  uint32_t window;
  uint64_t fills_done, fills_failed, timeouts, refused, own;
} world;

static uint32_t rnd(world *w, uint32_t n) {
  w->rng = su_mix(w->rng, 777);
  return (uint32_t)(w->rng % n);
}

static void set_clock(world *w) {
  char text[32];
  snprintf(text, sizeof text, "%llu", (unsigned long long)w->clock_ms);
  setenv("PKV_TEST_CLOCK_MS", text, 1);
}

/* The request of engine e with id seq. */
static su_req *find(world *w, pkv_engine *e, uint64_t seq) {
  for (uint32_t i = 0; i < w->num_jobs; i++) {
    job *j = &w->jobs[i];
    if (e == w->P && j->has_p && j->p.seq == seq) return &j->p;
    if (e == w->C && j->has_c && j->c.seq == seq) return &j->c;
  }
  CHECK(!"a batch lists an unknown sequence");
  return &w->jobs[0].p;
}

static job *job_of_c(world *w, uint64_t seq) {
  for (uint32_t i = 0; i < w->num_jobs; i++)
    if (w->jobs[i].has_c && w->jobs[i].c.seq == seq) return &w->jobs[i];
  CHECK(!"unknown consumer request");
  return &w->jobs[0];
}

typedef struct engine_of {
  world *w;
  pkv_engine *e;
} engine_of;

static const su_req *req_of(void *ctx, uint64_t seq) {
  const engine_of *x = ctx;
  return find(x->w, x->e, seq);
}

/* One step of e with the model; 0 when it had nothing to run. */
static int step(world *w, pkv_engine *e) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(e, &b)) || !b) return 0;
  pkv_batch_view v = tu_view(b);
  engine_of x = {w, e};
  const uint64_t bad = su_attend(b, &v, w->window, req_of, &x);
  if (bad) {
    const struct pkv_seq_info si = tu_info(e, bad);
    printf("    %s seq %llu: a wrong output (prompt %u, cached %u)\n", e == w->P ? "P" : "C",
           (unsigned long long)bad, find(w, e, bad)->prompt_len, si.num_cached_tokens);
  }
  static int32_t sampled[64];
  su_sample(e, &v, sampled);
  CHECK_OK(pkv_commit(b, sampled));
  CHECK_ENGINE(e);
  return 1;
}

static void submit_c(world *w, job *j, uint32_t remote) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = j->c.max_new;
  rp.num_remote_tokens = remote;
  j->remote = remote;
  if (CHECK_OK(pkv_submit(w->C, j->c.tokens, j->c.prompt_len, &rp, &j->c.seq))) j->has_c = 1;
}

/* A new job: its prompt (a shared prefix or none, a random tail). Mostly a prefill on P whose
 * decode goes to C; else a request of C's own. */
static void new_job(world *w) {
  int32_t prompt[128];
  uint32_t n = 0, k = rnd(w, NUM_PREFIXES + 1);
  if (k < NUM_PREFIXES) memcpy(prompt, w->prefixes[k], (n = w->prefix_len[k]) * sizeof prompt[0]);
  for (uint32_t tail = 1 + rnd(w, 30), i = 0; i < tail; i++)
    prompt[n++] = (int32_t)rnd(w, SU_VOCAB);
  job *j = &w->jobs[w->num_jobs++];
  memset(j, 0, sizeof *j);
  const uint32_t max_new = 1 + rnd(w, 10);
  if (rnd(w, 5) == 0) { /* C's own */
    if (!su_req_make(&j->c, prompt, n, max_new, -1, 0)) return;
    submit_c(w, j, 0);
    j->p_done = 1;
    w->own++;
    return;
  }
  /* The decode's prompt is the prefill's and its first token; the model knows both. */
  if (!su_req_make(&j->p, prompt, n, 1, -1, 0)) return;
  prompt[n] = j->p.tokens[n];
  if (!su_req_make(&j->c, prompt, n + 1, max_new, -1, 0)) return;
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  rp.hold_on_finish = 1;
  rp.hold_timeout_ms = 200 + rnd(w, 1500);
  if (CHECK_OK(pkv_submit(w->P, j->p.tokens, n, &rp, &j->p.seq))) j->has_p = 1;
}

/* P's finished prefills: held ones go to C as remote fills, refused ones as C's own prompt. */
static void drain_p(world *w) {
  uint64_t ids[8];
  uint32_t n = 0;
  do {
    CHECK_OK(pkv_drain_finished(w->P, ids, 8, &n));
    for (uint32_t k = 0; k < n; k++) {
      su_req *r = find(w, w->P, ids[k]);
      job *j = (job *)((char *)r - offsetof(job, p));
      const struct pkv_seq_info i = tu_info(w->P, r->seq);
      CHECK_EQ_INT(i.num_tokens, r->len);
      if (i.transfer == PKV_TRANSFER_HOLDING) {
        submit_c(w, j, r->prompt_len);
      } else {
        w->refused++;
        submit_c(w, j, 0);
        CHECK_OK(pkv_release(w->P, r->seq));
        j->p_done = 1;
      }
    }
  } while (n == 8);
}

/* Content shadow: every full block of C's request's first `tokens` tokens holds the model's K
 * (0) and V for its tokens in every layer, byte for byte, read where pkv_layer_info says the
 * layer's K and V are in its group's blocks (a window's given-back blocks aside). */
static void check_shadow(world *w, const su_req *r, uint32_t tokens) {
  const uint32_t blocks = tokens / BS;
  static float want[SU_KV], zero[SU_KV];
  for (uint32_t layer = 0; layer < SU_LAYERS; layer++) {
    struct pkv_layer_info li;
    memset(&li, 0, sizeof li);
    li.struct_size = sizeof li;
    CHECK_OK(pkv_layer_info(w->C, layer, &li));
    int32_t table[256];
    uint32_t len = 0;
    if (!CHECK_OK(pkv_seq_group_block_table(w->C, r->seq, li.group, table, 256, &len))) return;
    for (uint32_t b = 0; b < blocks && b < len; b++) {
      if (table[b] < 0) continue;
      for (uint32_t t = 0; t < BS; t++) {
        const uint32_t pos = b * BS + t;
        const int32_t *s = r->vsum + (size_t)pos * SU_KV;
        for (uint32_t j = 0; j < SU_KV; j++)
          want[j] = (float)(s[j] - (pos ? s[(int)j - SU_KV] : 0) + (int32_t)layer);
        const uint64_t at = (uint64_t)table[b] * li.block_stride + t * li.token_stride;
        if (!CHECK(memcmp((const float *)li.k_base + at, zero, sizeof zero) == 0) ||
            !CHECK(memcmp((const float *)li.v_base + at, want, sizeof want) == 0))
          return;
      }
    }
  }
}

/* The transport of job j's fill: P's held blocks into C's receiving ones, all or (failing) part. */
static int transport(world *w, job *j, int whole) {
  const struct pkv_seq_info ci = tu_info(w->C, j->c.seq);
  CHECK_EQ_INT(ci.transfer, PKV_TRANSFER_RECEIVING);
  CHECK_EQ_INT(ci.num_remote_tokens, j->remote);
  const struct pkv_seq_info pi = tu_info(w->P, j->p.seq);
  if (pi.transfer != PKV_TRANSFER_HOLDING) return 0; /* the hold timed out: nothing to read */
  static pkv_segment from[4096], to[4096];
  uint32_t nf = 0, nt = 0;
  const uint32_t first = ci.remote_first_block, count = ci.remote_num_blocks;
  CHECK_OK(pkv_seq_segments(w->P, 0, j->p.seq, first, count, from, 4096, &nf));
  CHECK_OK(pkv_seq_segments(w->C, 0, j->c.seq, first, count, to, 4096, &nt));
  if (!CHECK_EQ_INT(nf, nt)) return 0;
  const uint32_t upto = whole ? nt : rnd(w, nt + 1);
  for (uint32_t i = 0; i < upto; i++) {
    if (!to[i].base) continue;
    if (!from[i].base) return 0; /* the producer gave back a block the consumer needs */
    memcpy(to[i].base, from[i].base, to[i].bytes);
  }
  return whole;
}

/* A receiving request's fill: done, failed or failed-and-finished; the producer's hold ends. */
static void fill(world *w, job *j) {
  const uint32_t how = rnd(w, 6);
  const int ok = transport(w, j, how < 4);
  uint32_t outcome = ok         ? PKV_TRANSFER_DONE
                     : how == 5 ? PKV_TRANSFER_FAILED_FINISH
                                : PKV_TRANSFER_FAILED;
  CHECK_OK(pkv_receive_end(w->C, j->c.seq, outcome));
  j->receiving = 0;
  if (outcome == PKV_TRANSFER_DONE) {
    w->fills_done++;
    check_shadow(w, &j->c, j->remote);
  } else {
    w->fills_failed++;
    j->c_failed_finish = outcome == PKV_TRANSFER_FAILED_FINISH;
  }
  if (tu_info(w->P, j->p.seq).transfer == PKV_TRANSFER_HOLDING)
    CHECK_OK(pkv_hold_end(w->P, j->p.seq, ok ? PKV_TRANSFER_DONE : PKV_TRANSFER_FAILED));
  else
    w->timeouts++;
  CHECK_OK(pkv_release(w->P, j->p.seq));
  j->p_done = 1;
  CHECK_ENGINE(w->P);
  CHECK_ENGINE(w->C);
}

static void drain_c(world *w) {
  uint64_t ids[8];
  uint32_t n = 0;
  do {
    CHECK_OK(pkv_drain_receiving(w->C, ids, 8, &n));
    for (uint32_t k = 0; k < n; k++) {
      job *j = job_of_c(w, ids[k]);
      CHECK(!j->receiving && j->remote > 0);
      j->receiving = 1;
    }
  } while (n == 8);
  do {
    CHECK_OK(pkv_drain_finished(w->C, ids, 8, &n));
    for (uint32_t k = 0; k < n; k++) {
      job *j = job_of_c(w, ids[k]);
      const struct pkv_seq_info i = tu_info(w->C, j->c.seq);
      if (j->c_failed_finish) {
        CHECK_EQ_INT(i.finish_reason, PKV_FINISH_TRANSFER_FAILED);
      } else {
        static int32_t buf[256];
        CHECK_EQ_INT(su_tokens(w->C, j->c.seq, buf, 256), j->c.len);
        CHECK(memcmp(buf, j->c.tokens, j->c.len * sizeof buf[0]) == 0);
      }
      CHECK_OK(pkv_release(w->C, j->c.seq));
      j->c_done = 1;
    }
  } while (n == 8);
}

static void run(uint64_t seed, uint32_t window, uint32_t c_blocks, uint32_t max_held) {
  static world w;
  memset(&w, 0, sizeof w);
  w.rng = seed, w.window = window, w.target = 120, w.clock_ms = 1000;
  set_clock(&w);
  const uint32_t windows[SU_LAYERS] = {window, 0};
  pkv_engine_params p;
  tu_params(&p, BS, 160);
  p.layer_windows = window ? windows : NULL;
  p.max_num_seqs = 6, p.max_num_batched_tokens = 64;
  p.debug_flags = PKV_DEBUG_TEST_CLOCK;
  p.max_held_blocks = max_held;
  w.P = tu_engine_p(&p);
  p.num_blocks = c_blocks, p.max_held_blocks = 0;
  w.C = tu_engine_p(&p);
  if (!w.P || !w.C) return;
  for (int k = 0; k < NUM_PREFIXES; k++) {
    w.prefix_len[k] = 4 + rnd(&w, PREFIX_MAX - 4);
    for (uint32_t i = 0; i < w.prefix_len[k]; i++) w.prefixes[k][i] = (int32_t)rnd(&w, SU_VOCAB);
  }
  uint32_t idle = 0;
  for (;;) {
    uint32_t live = 0;
    for (uint32_t i = 0; i < w.num_jobs; i++) live += !w.jobs[i].c_done || !w.jobs[i].p_done;
    if ((w.num_jobs >= w.target && live == 0) || idle > 50 || tu_failed_ > 20) break;
    const uint32_t op = rnd(&w, 10);
    if (op < 2 && w.num_jobs < w.target) new_job(&w);
    if (op == 2 || op == 3) idle = step(&w, w.P) ? 0 : idle + 1;
    if (op == 4 || op == 5) idle = step(&w, w.C) ? 0 : idle + 1;
    if (op == 6) w.clock_ms += rnd(&w, 60), set_clock(&w);
    if (op == 7)
      for (uint32_t i = 0; i < w.num_jobs; i++)
        if (w.jobs[i].receiving && rnd(&w, 2)) fill(&w, &w.jobs[i]);
    if (op >= 8) idle++;
    drain_p(&w);
    drain_c(&w);
    CHECK_ENGINE(w.P);
    CHECK_ENGINE(w.C);
  }
  uint32_t open = 0;
  for (uint32_t i = 0; i < w.num_jobs; i++) open += !w.jobs[i].c_done || !w.jobs[i].p_done;
  CHECK_EQ_INT(open, 0);
  const pkv_stats sp = tu_stats(w.P), sc = tu_stats(w.C);
  CHECK_EQ_INT(sc.num_receives_done, w.fills_done);
  CHECK_EQ_INT(sc.num_receives_failed, w.fills_failed);
  CHECK_EQ_INT(sp.num_holds_refused, w.refused);
  CHECK_EQ_INT(sp.num_holds_timed_out, w.timeouts);
  CHECK_EQ_INT(sp.num_held_seqs + sp.num_used_blocks + sp.num_seqs, 0);
  CHECK_EQ_INT(sc.num_receiving_requests + sc.num_used_blocks + sc.num_seqs, 0);
  printf("  seed %llu window %u C blocks %u: %u jobs (%llu C's own), %llu fills done, %llu "
         "failed, %llu holds timed out, %llu refused; C: %llu preemptions, %llu received "
         "tokens, %llu/%llu prompt tokens hit\n",
         (unsigned long long)seed, window, c_blocks, w.num_jobs, (unsigned long long)w.own,
         (unsigned long long)w.fills_done, (unsigned long long)w.fills_failed,
         (unsigned long long)w.timeouts, (unsigned long long)w.refused,
         (unsigned long long)sc.num_preemptions, (unsigned long long)sc.received_tokens,
         (unsigned long long)sc.prefix_hit_tokens, (unsigned long long)sc.prefix_query_tokens);
  CHECK(w.fills_done > 0 && w.fills_failed > 0);
  for (uint32_t i = 0; i < w.num_jobs; i++) su_req_free(&w.jobs[i].p), su_req_free(&w.jobs[i].c);
  pkv_engine_destroy(w.P);
  pkv_engine_destroy(w.C);
  unsetenv("PKV_TEST_CLOCK_MS");
}

static void random_transfers(void) {
  run(1, 0, 48, 0);
  run(2, 0, 30, 12); /* a tight hold bound: refusals */
  run(3, 6, 48, 0);  /* a sliding window on layer 0 */
  run(4, 0, 24, 0);  /* a small consumer pool: preemptions around receiving requests */
}

int main(void) {
  TU_RUN(random_transfers);
  return tu_summary();
}
