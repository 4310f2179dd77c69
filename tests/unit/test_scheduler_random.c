/* The scheduler under random load: random prompts sharing prefixes (two salts), random
 * max_new_tokens, stop tokens and priorities, a small pool so that preemption happens, releases of
 * requests in every state. Every step runs pkv_attention on sched_util.h's checkable model and
 * checks the outputs, the sampled tokens, the batch against a model of the queue policy, the
 * counters and pkv_engine_check. Every request must finish with exactly the tokens the model
 * gives, whether prefix caching is on or off. With a window on layer 0 (a sliding group beside
 * the full one) requests are admitted per chunk (DESIGN.md §7) and layer 0's outputs are checked
 * against the window's average. */
#include "sched_util.h"

enum { MAX_REQS = 512, NUM_PREFIXES = 4, PREFIX_MAX = 24 };

typedef struct world {
  pkv_engine *e;
  pkv_engine_params p;
  su_req reqs[MAX_REQS];
  uint32_t num_reqs, target_reqs;
  int running[MAX_REQS], waiting[MAX_REQS]; /* admission order; queue order */
  uint32_t num_running, num_waiting, num_finished, num_released, num_done;
  int32_t prefixes[NUM_PREFIXES][PREFIX_MAX];
  uint32_t prefix_len[NUM_PREFIXES];
  uint64_t rng;
  uint64_t steps;
  uint32_t window; /* layer 0's; 0: none */
} world;

static uint32_t rnd(world *w, uint32_t n) {
  w->rng = su_mix(w->rng, 12345);
  return (uint32_t)(w->rng % n);
}

static int find(world *w, uint64_t seq) {
  for (uint32_t i = 0; i < w->num_reqs; i++)
    if (w->reqs[i].seq == seq) return (int)i;
  CHECK(!"a batch lists an unknown sequence");
  return 0;
}

static void list_remove(int *list, uint32_t *n, int r) {
  for (uint32_t i = 0; i < *n; i++)
    if (list[i] == r) {
      memmove(list + i, list + i + 1, (*n - i - 1) * sizeof *list);
      (*n)--;
      return;
    }
}

static void list_insert(int *list, uint32_t *n, uint32_t at, int r) {
  memmove(list + at + 1, list + at, (*n - at) * sizeof *list);
  list[at] = r;
  (*n)++;
}

/* The blocks a request of total tokens holds at its peak, the rule written out once more apart
 * from pkv's (DESIGN.md §7): without a window its blocks; with one, admitted per chunk of up to
 * B = max_num_batched_tokens, the full group's blocks and the windowed group's largest of its
 * decode window, a chunk's window + B - 1 keys from a block's last slot and, with caching, the
 * last sealed block kept before a chunk - never more than its blocks. */
static uint64_t peak_blocks(const world *w, uint64_t total) {
  const uint64_t bs = w->p.block_size, all = (total + bs - 1) / bs, b = w->p.max_num_batched_tokens;
  if (!w->window) return all;
  uint64_t win = (w->window + bs - 1) / bs + 1;
  const uint64_t chunk = (w->window + b - 2 + bs - 1) / bs + 1,
                 sealed = (bs - 1 + b + bs - 1) / bs + 1;
  win = chunk > win ? chunk : win;
  if (w->p.enable_prefix_caching) win = sealed > win ? sealed : win;
  return all + (win < all ? win : all);
}

/* A new request: a shared prefix (or none), a random tail; refused at submit when it can never
 * fit, as pkv must. */
static void submit_one(world *w) {
  int32_t prompt[128];
  uint32_t n = 0, k = rnd(w, NUM_PREFIXES + 1);
  if (k < NUM_PREFIXES) memcpy(prompt, w->prefixes[k], (n = w->prefix_len[k]) * sizeof prompt[0]);
  for (uint32_t tail = 1 + rnd(w, rnd(w, 8) ? 24 : 90), i = 0; i < tail; i++)
    prompt[n++] = (int32_t)rnd(w, SU_VOCAB);
  uint32_t max_new = 1 + rnd(w, rnd(w, 8) ? 16 : 60);
  int32_t stop = rnd(w, 2) ? -1 : (int32_t)rnd(w, SU_VOCAB);
  int32_t prio = rnd(w, 4) ? 0 : (int32_t)rnd(w, 3);
  su_req *r = &w->reqs[w->num_reqs];
  if (!su_req_make(r, prompt, n, max_new, stop, prio)) return;
  r->salt = rnd(w, 5) ? NULL : "tenant-b";
  uint64_t total = n + max_new;
  if (peak_blocks(w, total) > w->p.num_blocks) {
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = max_new;
    uint64_t seq = 0;
    CHECK_ERR(w->e, pkv_submit(w->e, prompt, n, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
    su_req_free(r);
    return;
  }
  if (!su_submit(w->e, r)) return;
  uint32_t at = 0; /* the queue: before the first of lower priority */
  while (at < w->num_waiting && w->reqs[w->waiting[at]].priority >= prio) at++;
  list_insert(w->waiting, &w->num_waiting, at, (int)w->num_reqs++);
}

/* The batch against the policy: preempted requests are the newest running ones, and then nothing
 * is admitted; admitted ones are the front of the queue; whoever runs and is left out finds the
 * batch full. Updates the queue model. */
static void check_plan(world *w, const pkv_batch_view *v, const int *in_batch) {
  uint32_t preempted = 0, admitted = 0;
  for (uint32_t i = w->num_running; i-- > 0;) {
    if (!tu_info(w->e, w->reqs[w->running[i]].seq).is_preempted) break;
    preempted++;
  }
  for (uint32_t i = 0; i + preempted < w->num_running; i++)
    CHECK(!tu_info(w->e, w->reqs[w->running[i]].seq).is_preempted);
  while (admitted < w->num_waiting && in_batch[w->waiting[admitted]]) admitted++;
  for (uint32_t i = admitted; i < w->num_waiting; i++) CHECK(!in_batch[w->waiting[i]]);
  CHECK(preempted == 0 || admitted == 0);
  w->num_running -= preempted;
  for (uint32_t i = 0; i < preempted; i++)
    list_insert(w->waiting, &w->num_waiting, i, w->running[w->num_running + i]);
  for (uint32_t i = 0; i < admitted; i++) {
    w->running[w->num_running++] = w->waiting[0];
    list_remove(w->waiting, &w->num_waiting, w->waiting[0]);
  }
  int full = v->num_seqs == w->p.max_num_seqs || v->num_tokens == w->p.max_num_batched_tokens;
  for (uint32_t i = 0; i < w->num_running; i++) CHECK(in_batch[w->running[i]] || full);
  CHECK(v->num_seqs <= w->p.max_num_seqs && v->num_tokens <= w->p.max_num_batched_tokens);
  CHECK(w->num_running <= w->p.max_num_seqs);
}

static const su_req *req_of(void *ctx, uint64_t seq) {
  world *w = ctx;
  return &w->reqs[find(w, seq)];
}

/* After the commit: requests that sampled their last token finished, with exactly the model's
 * tokens; the others hold a prefix of them. */
static void check_after_commit(world *w, const su_plan *v) {
  static int32_t buf[1024];
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    int ri = find(w, v->seq_ids[i]);
    su_req *r = &w->reqs[ri];
    struct pkv_seq_info info = tu_info(w->e, r->seq);
    uint32_t len = su_tokens(w->e, r->seq, buf, 1024);
    CHECK_EQ_INT(len, info.num_tokens);
    CHECK_EQ_INT(info.num_prompt_tokens + info.num_generated_tokens, len);
    if (!CHECK(len <= r->len) || !CHECK(memcmp(buf, r->tokens, len * sizeof buf[0]) == 0)) continue;
    if (len < r->len) {
      CHECK_EQ_INT(info.finish_reason, PKV_FINISH_NONE);
      continue;
    }
    CHECK_EQ_INT(info.finish_reason, r->finish_reason);
    CHECK_EQ_INT(info.num_blocks, 0);
    r->state = SU_FINISHED;
    list_remove(w->running, &w->num_running, ri);
    w->num_finished++;
  }
}

static void drain(world *w) {
  uint64_t ids[3];
  uint32_t n = 0;
  do {
    CHECK_OK(pkv_drain_finished(w->e, ids, 3, &n));
    for (uint32_t k = 0; k < n; k++) {
      su_req *r = &w->reqs[find(w, ids[k])];
      CHECK_EQ_INT(r->state, SU_FINISHED);
      r->state = SU_DRAINED; /* drained, still readable */
      w->num_done++;
    }
  } while (n == 3);
}

/* Now and then releases a request in any state (between steps: none is in a batch). */
static void maybe_release(world *w, int releases) {
  if (rnd(w, 40) != 0 || !releases || w->num_reqs == 0) return;
  int ri = (int)rnd(w, w->num_reqs);
  su_req *r = &w->reqs[ri];
  if (r->state == SU_RELEASED) return;
  CHECK_OK(pkv_release(w->e, r->seq));
  if (r->state == SU_WAITING)
    list_remove(w->waiting, &w->num_waiting, ri);
  else if (r->state == SU_RUNNING)
    list_remove(w->running, &w->num_running, ri);
  else if (r->state == SU_FINISHED)
    w->num_finished--; /* never drained now */
  w->num_done += r->state != SU_DRAINED;
  r->state = SU_RELEASED;
  w->num_released++;
}

static void check_counters(world *w) {
  pkv_stats st = tu_stats(w->e);
  uint32_t finished_live = 0;
  for (uint32_t i = 0; i < w->num_reqs; i++)
    finished_live += w->reqs[i].state == SU_FINISHED || w->reqs[i].state == SU_DRAINED;
  CHECK_EQ_INT(st.num_waiting_requests, w->num_waiting);
  CHECK_EQ_INT(st.num_running_requests, w->num_running);
  CHECK_EQ_INT(st.num_finished_requests, finished_live);
  CHECK_EQ_INT(st.num_steps, w->steps);
  CHECK_ENGINE(w->e);
}

/* One step; 0 when pkv had nothing to run. */
static int step(world *w) {
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_step(w->e, &b)) || !b) return 0;
  w->steps++;
  pkv_batch_view v = tu_view(b);
  static int in_batch[MAX_REQS];
  memset(in_batch, 0, sizeof in_batch);
  for (uint32_t i = 0; i < v.num_seqs; i++) in_batch[find(w, v.seq_ids[i])] = 1;
  check_plan(w, &v, in_batch);
  for (uint32_t i = 0; i < w->num_running; i++) w->reqs[w->running[i]].state = SU_RUNNING;
  for (uint32_t i = 0; i < w->num_waiting; i++) w->reqs[w->waiting[i]].state = SU_WAITING;
  su_attend(b, &v, w->window, req_of, w);
  static int32_t sampled[MAX_REQS];
  for (uint32_t i = 0; i < v.num_seqs; i++) {
    struct pkv_seq_info info = tu_info(w->e, v.seq_ids[i]);
    int samples = (uint32_t)v.context_lens[i] == info.num_tokens;
    CHECK_EQ_INT(v.sample_rows[i], samples ? v.query_start[i + 1] - 1 : -1);
    sampled[i] = samples ? su_sample_row(w->e, &v, i) : -1;
  }
  static su_plan plan;
  su_plan_of(&v, &plan);
  if (!CHECK_OK(pkv_commit(b, sampled))) return 0;
  check_after_commit(w, &plan);
  return 1;
}

typedef struct config {
  uint64_t seed;
  uint32_t block_size, num_blocks, max_num_seqs, max_tokens, num_reqs, caching, releases;
  uint32_t window; /* layer 0's; 0: none */
} config;

/* Runs a whole workload; out_tokens (nullable) gets every request's final tokens, concatenated. */
static void run_world(const config *c, int32_t *out_tokens, uint64_t *out_preemptions) {
  static world w;
  memset(&w, 0, sizeof w);
  w.rng = c->seed, w.target_reqs = c->num_reqs, w.window = c->window;
  pkv_engine_params ep;
  tu_params(&ep, c->block_size, c->num_blocks);
  const uint32_t windows[SU_LAYERS] = {c->window, 0};
  ep.layer_windows = c->window ? windows : NULL;
  ep.max_num_seqs = c->max_num_seqs, ep.max_num_batched_tokens = c->max_tokens;
  ep.enable_prefix_caching = c->caching;
  w.e = tu_engine_p(&ep);
  if (!w.e) return;
  w.p.struct_size = sizeof w.p;
  CHECK_OK(pkv_engine_params_get(w.e, &w.p));
  for (int k = 0; k < NUM_PREFIXES; k++) {
    w.prefix_len[k] = 4 + rnd(&w, PREFIX_MAX - 4);
    for (uint32_t i = 0; i < w.prefix_len[k]; i++) w.prefixes[k][i] = (int32_t)rnd(&w, SU_VOCAB);
  }
  uint32_t idle = 0;
  while ((w.num_reqs < w.target_reqs || w.num_done < w.num_reqs) && idle < 10 && tu_failed_ < 20) {
    for (uint32_t n = rnd(&w, 3); n > 0 && w.num_reqs < w.target_reqs; n--) submit_one(&w);
    idle = step(&w) ? 0 : idle + 1;
    drain(&w);
    maybe_release(&w, (int)c->releases);
    check_counters(&w);
  }
  CHECK_EQ_INT(w.num_done, w.num_reqs);
  pkv_stats st = tu_stats(w.e);
  printf("  seed %llu bs %u blocks %u seqs %u tokens %u caching %u window %u: %u requests (%u "
         "released), %llu steps, %llu preemptions, %llu/%llu prompt tokens hit\n",
         (unsigned long long)c->seed, c->block_size, c->num_blocks, c->max_num_seqs, c->max_tokens,
         c->caching, c->window, w.num_reqs, w.num_released, (unsigned long long)w.steps,
         (unsigned long long)st.num_preemptions, (unsigned long long)st.prefix_hit_tokens,
         (unsigned long long)st.prefix_query_tokens);
  if (out_preemptions) *out_preemptions = st.num_preemptions;
  for (uint32_t i = 0; i < w.num_reqs; i++) {
    if (out_tokens && w.reqs[i].state != SU_RELEASED) {
      uint32_t len = su_tokens(w.e, w.reqs[i].seq, out_tokens, 1024);
      CHECK_EQ_INT(len, w.reqs[i].len);
      out_tokens += len;
    }
    if (w.reqs[i].state != SU_RELEASED) CHECK_OK(pkv_release(w.e, w.reqs[i].seq));
    su_req_free(&w.reqs[i]);
  }
  st = tu_stats(w.e);
  CHECK_EQ_INT(st.num_used_blocks + st.num_seqs, 0);
  CHECK_ENGINE(w.e);
  pkv_engine_destroy(w.e);
}

static void test_random_runs(void) {
  const config runs[] = {
      {1, 4, 40, 6, 32, 300, 1, 1, 0}, {2, 1, 150, 8, 16, 300, 1, 1, 0},
      {3, 3, 60, 4, 64, 300, 1, 1, 0}, {4, 16, 12, 8, 48, 300, 1, 1, 0},
      {5, 2, 80, 3, 5, 200, 0, 1, 0},
  };
  uint64_t preemptions = 0, p = 0;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    run_world(&runs[i], NULL, &p);
    preemptions += p;
  }
  CHECK(preemptions > 0);
}

/* Windowed runs: requests admitted per chunk race for pools smaller than their prompts' whole
 * blocks in both groups; later chunks preempt as decode tokens do. */
static void test_random_runs_windows(void) {
  const config runs[] = {
      {21, 4, 48, 6, 32, 300, 1, 1, 8}, {22, 1, 150, 8, 16, 300, 1, 1, 5},
      {23, 3, 70, 4, 64, 300, 1, 1, 7}, {24, 16, 18, 8, 48, 300, 1, 1, 20},
      {25, 2, 90, 3, 5, 200, 0, 1, 3},  {26, 4, 48, 6, 32, 300, 0, 1, 2},
  };
  uint64_t preemptions = 0, p = 0;
  for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    run_world(&runs[i], NULL, &p);
    preemptions += p;
  }
  CHECK(preemptions > 0);
}

/* The same workload (no releases) with prefix caching on and off: the same tokens, request for
 * request - besides each run's own check against the model. With a window too. */
static void caching_does_not_change_tokens(uint32_t window) {
  static int32_t on[MAX_REQS * 160], off[MAX_REQS * 160];
  memset(on, 0, sizeof on), memset(off, 0, sizeof off);
  config c = {7, 4, 40, 6, 24, 250, 1, 0, window};
  run_world(&c, on, NULL);
  c.caching = 0;
  run_world(&c, off, NULL);
  CHECK(memcmp(on, off, sizeof on) == 0);
}

static void test_caching_does_not_change_tokens(void) {
  caching_does_not_change_tokens(0);
  caching_does_not_change_tokens(6);
}

int main(void) {
  TU_RUN(test_random_runs);
  TU_RUN(test_random_runs_windows);
  TU_RUN(test_caching_does_not_change_tokens);
  return tu_summary();
}
