/*
 * test_agent_procs.c - the UCX transfer agent between two processes on 127.0.0.1 (DESIGN.md
 * §10): a producer child (its engine, its agent listening on a free port) and the consumer in
 * the parent, the address and the held sequence's id passed over a pipe.
 *   - pull_done: a held sequence pulled into a receiving request; the consumer's step then
 *     computes what the producer computed (its outputs, sent over the pipe), the received blocks
 *     are in its prefix cache, both agents count the bytes, the producer's hold is ended;
 *   - fingerprint_mismatch: engines of another dtype refuse each other at the handshake;
 *   - not_held: a pull of a sequence the producer does not hold fails, the request computes;
 *   - peer_killed: the producer killed while the consumer reads (a small in-flight window keeps
 *     reads going): the pull fails, nothing it wrote is sealed, the request computes itself;
 *   - no_listener: connecting where nobody listens fails with PKV_ERR_DEVICE.
 * Exit 77 (skip) when libpkv was built without UCX.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_util.h"

enum { BS = 4, LAYERS = 2, QH = 4, KVH = 2, HD = 8, ROW = KVH * HD, QROW = QH * HD, N = 13 };

static void qkv(uint32_t p, uint32_t l, float *q, float *k, float *v) {
  for (uint32_t i = 0; i < QROW; i++) q[i] = 0.01f * (float)((i + p + l) % 13);
  for (uint32_t i = 0; i < ROW; i++) {
    const float x = (float)((p * 7 + l * 3 + i) % 17) * 0.125f - 1.0f;
    k[i] = x, v[i] = -0.5f * x;
  }
}

static void run_layers(pkv_batch *b, float *out_last) {
  pkv_batch_view v = tu_view(b);
  static float q[64 * QROW], k[64 * ROW], val[64 * ROW], out[64 * QROW];
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (uint32_t t = 0; t < v.num_tokens; t++)
      qkv((uint32_t)v.positions[t], l, q + t * QROW, k + t * ROW, val + t * ROW);
    CHECK_OK(pkv_attention(b, l, q, k, val, out));
    if (out_last)
      memcpy(out_last + l * QROW, out + (v.num_tokens - 1) * QROW, sizeof(float) * QROW);
  }
}

static pkv_engine *engine(uint32_t dtype, uint32_t blocks) {
  pkv_engine_params p;
  tu_params(&p, BS, blocks);
  p.dtype = dtype;
  return tu_engine_p(&p);
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return 0;
    c += w, n -= (size_t)w;
  }
  return 1;
}

static int read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    c += r, n -= (size_t)r;
  }
  return 1;
}

/* What the producer tells the consumer. */
typedef struct offer {
  char address[64];
  uint64_t seq;             /* its held sequence (0: none held) */
  float out[LAYERS * QROW]; /* its outputs for the prompt's last token */
} offer;

typedef struct producer {
  pid_t pid;
  int from, to; /* the child's pipe to us; ours to it (closing it ends the child) */
  offer o;
} producer;

/* The producer's child: an engine of dtype with a held sequence of `tokens` tokens (hold 1),
 * computed with run_layers, or (big) written as a byte pattern without attention. It serves
 * pulls until its parent closes the pipe, then reports its agent's counters as its exit code:
 * 0 when served_done == want_done. */
static int producer_main(int to_parent, int from_parent, uint32_t dtype, uint32_t tokens, int hold,
                         int big, uint32_t want_done) {
  pkv_engine *e = NULL;
  if (big) {
    pkv_engine_params p;
    tu_params(&p, 16, tokens / 16 + 8);
    p.num_layers = 8, p.num_kv_heads = 8, p.num_q_heads = 8, p.head_dim = 128;
    p.max_held_blocks = p.num_blocks;
    e = tu_engine_p(&p);
  } else {
    e = engine(dtype, 64);
  }
  pkv_agent *a = NULL;
  if (!e || !CHECK_OK(pkv_agent_create(e, NULL, &a))) return 2;
  offer o;
  memset(&o, 0, sizeof o);
  CHECK_OK(pkv_agent_address(a, o.address, sizeof o.address));
  int32_t t[4096];
  tu_fill(t, tokens, 300);
  uint64_t seq = tu_alloc(e, t, tokens, NULL);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b));
  if (!big) run_layers(b, o.out);
  CHECK_OK(pkv_batch_end(b));
  if (big) { /* its KV: a pattern, one byte value per block */
    static pkv_segment seg[1 << 14];
    uint32_t n = 0;
    CHECK_OK(pkv_seq_segments(e, 0, seq, 0, (tokens + 15) / 16, seg, 1 << 14, &n));
    for (uint32_t i = 0; i < n; i++) memset(seg[i].base, (int)(i % 251), seg[i].bytes);
  }
  if (hold) CHECK_OK(pkv_hold(e, seq, UINT32_MAX));
  o.seq = seq;
  if (!write_all(to_parent, &o, sizeof o)) return 3;
  /* Serve until the parent closes its end. */
  for (;;) {
    pkv_agent_completion c[4];
    uint32_t n = 0;
    CHECK_OK(pkv_agent_progress(a, 1, c, 4, &n));
    char byte;
    fd_set r;
    FD_ZERO(&r);
    FD_SET(from_parent, &r);
    struct timeval tv = {0, 0};
    if (select(from_parent + 1, &r, NULL, NULL, &tv) > 0 && read(from_parent, &byte, 1) <= 0) break;
  }
  pkv_agent_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(pkv_agent_stats_get(a, &st));
  pkv_stats es = tu_stats(e);
  const int ok = st.served_done == want_done && es.num_holds_done == want_done &&
                 es.num_held_seqs == (hold ? 1 - want_done : 0);
  pkv_agent_destroy(a);
  pkv_engine_destroy(e);
  if (!ok)
    printf("producer: served %llu done (%u wanted), engine %llu holds done, %llu held\n",
           (unsigned long long)st.served_done, want_done, (unsigned long long)es.num_holds_done,
           (unsigned long long)es.num_held_seqs);
  fflush(stdout);
  return ok && tu_failed_ == 0 ? 0 : 1;
}

static int start(producer *p, uint32_t dtype, uint32_t tokens, int hold, int big,
                 uint32_t want_done) {
  int up[2], down[2];
  if (!CHECK(pipe(up) == 0 && pipe(down) == 0)) return 0;
  fflush(stdout);
  p->pid = fork();
  if (p->pid == 0) {
    close(up[0]), close(down[1]);
    _exit(producer_main(up[1], down[0], dtype, tokens, hold, big, want_done));
  }
  close(up[1]), close(down[0]);
  p->from = up[0], p->to = down[1];
  return CHECK(read_all(p->from, &p->o, sizeof p->o));
}

/* Ends the child (closing its pipe) and returns its exit code (-signal when killed). */
static int stop(producer *p) {
  close(p->to), close(p->from);
  int status = 0;
  waitpid(p->pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static struct pkv_seq_info info_of(pkv_engine *e, uint64_t seq) {
  struct pkv_seq_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  CHECK_OK(pkv_seq_info(e, seq, &i));
  return i;
}

static uint64_t receiving(pkv_engine *c, const int32_t *t, uint32_t n, uint32_t remote) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  rp.num_remote_tokens = remote;
  uint64_t seq = 0;
  CHECK_OK(pkv_submit(c, t, n, &rp, &seq));
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(c, &b));
  CHECK(b == NULL);
  CHECK_EQ_INT(info_of(c, seq).transfer, PKV_TRANSFER_RECEIVING);
  return seq;
}

/* Progresses a until one completion (at most ~20 s). */
static pkv_agent_completion wait_one(pkv_agent *a) {
  pkv_agent_completion c;
  memset(&c, 0, sizeof c);
  for (int i = 0; i < 2000; i++) {
    uint32_t n = 0;
    CHECK_OK(pkv_agent_progress(a, 10, &c, 1, &n));
    if (n) return c;
  }
  CHECK(!"no completion");
  return c;
}

static void pull_done(void) {
  producer p;
  if (!start(&p, PKV_DTYPE_F32, N, 1, 0, 1)) return;
  pkv_engine *c = engine(PKV_DTYPE_F32, 64);
  pkv_agent_params ap;
  pkv_agent_params_init(&ap, sizeof ap);
  ap.listen_address = NULL; /* it only connects */
  pkv_agent *a = NULL;
  CHECK_OK(pkv_agent_create(c, &ap, &a));
  char addr[64];
  CHECK_STATUS(pkv_agent_address(a, addr, sizeof addr), PKV_ERR_STATE);
  uint32_t peer = 99;
  CHECK_OK(pkv_agent_connect(a, p.o.address, &peer));
  CHECK_EQ_INT(peer, 0);
  int32_t t[N];
  tu_fill(t, N, 300);
  const uint64_t cs = receiving(c, t, N, N - 1);
  CHECK_OK(pkv_agent_pull(a, peer, p.o.seq, cs));
  CHECK_STATUS(pkv_agent_pull(a, peer, p.o.seq, cs), PKV_ERR_STATE); /* one at a time */
  const pkv_agent_completion done = wait_one(a);
  CHECK(done.seq == cs);
  CHECK_EQ_INT(done.outcome, PKV_TRANSFER_DONE);
  CHECK_EQ_INT(done.served, 0);
  CHECK_EQ_INT(done.bytes, 3ull * LAYERS * 2 * BS * ROW * 4); /* 3 blocks, K and V, f32 */
  pkv_agent_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(pkv_agent_stats_get(a, &st));
  CHECK_EQ_INT(st.pulls_done, 1);
  CHECK_EQ_INT(st.pulls_in_flight, 0);
  CHECK_EQ_INT(st.bytes_pulled, done.bytes);
  CHECK_EQ_INT(st.num_peers, 1);
  struct pkv_seq_info i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(i.num_computed_tokens, N - 1);
  uint32_t cached = 0;
  CHECK_OK(pkv_allocate_query(c, t, N, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 12);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(c, &b));
  if (CHECK(b != NULL)) {
    float got[LAYERS * QROW];
    CHECK_EQ_INT(tu_view(b).num_tokens, 1);
    run_layers(b, got);
    for (uint32_t k = 0; k < LAYERS * QROW; k++) CHECK(fabsf(got[k] - p.o.out[k]) < 1e-5f);
    int32_t s = 1;
    CHECK_OK(pkv_commit(b, &s));
  }
  CHECK_ENGINE(c);
  /* The producer's side saw it end: its hold ended DONE (its exit code says). */
  for (int k = 0; k < 50; k++) {
    uint32_t n = 0;
    pkv_agent_completion x;
    pkv_agent_progress(a, 2, &x, 1, &n);
  }
  CHECK_EQ_INT(stop(&p), 0);
  pkv_agent_destroy(a);
  pkv_engine_destroy(c);
}

static void fingerprint_mismatch(void) {
  producer p;
  if (!start(&p, PKV_DTYPE_BF16, N, 1, 0, 0)) return;
  pkv_engine *c = engine(PKV_DTYPE_F32, 64);
  pkv_agent *a = NULL;
  CHECK_OK(pkv_agent_create(c, NULL, &a));
  uint32_t peer = 0;
  CHECK_STATUS(pkv_agent_connect(a, p.o.address, &peer), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "fingerprints differ") != NULL);
  pkv_agent_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_OK(pkv_agent_stats_get(a, &st));
  CHECK_EQ_INT(st.fingerprint_mismatches, 1);
  CHECK_EQ_INT(st.num_peers, 0);
  CHECK_STATUS(pkv_agent_pull(a, 0, p.o.seq, 1), PKV_ERR_STATE); /* that peer is gone */
  pkv_agent_destroy(a);
  CHECK_EQ_INT(stop(&p), 0); /* it served nothing and still holds its sequence */
  pkv_engine_destroy(c);
}

static void not_held(void) {
  producer p;
  if (!start(&p, PKV_DTYPE_F32, N, 0, 0, 0)) return;
  pkv_engine *c = engine(PKV_DTYPE_F32, 64);
  pkv_agent *a = NULL;
  CHECK_OK(pkv_agent_create(c, NULL, &a));
  uint32_t peer = 0;
  CHECK_OK(pkv_agent_connect(a, p.o.address, &peer));
  int32_t t[N];
  tu_fill(t, N, 300);
  const uint64_t cs = receiving(c, t, N, N - 1);
  CHECK_OK(pkv_agent_pull(a, peer, p.o.seq, cs));
  const pkv_agent_completion done = wait_one(a);
  CHECK_EQ_INT(done.outcome, PKV_TRANSFER_FAILED);
  struct pkv_seq_info i = info_of(c, cs);
  CHECK_EQ_INT(i.transfer, PKV_TRANSFER_NONE);
  CHECK_EQ_INT(i.is_preempted, 1); /* it computes its prompt itself */
  CHECK_EQ_INT(tu_stats(c).num_receives_failed, 1);
  CHECK_ENGINE(c);
  CHECK_EQ_INT(stop(&p), 0);
  pkv_agent_destroy(a);
  pkv_engine_destroy(c);
}

static void peer_killed(void) {
  enum { TOKENS = 2048 };
  producer p;
  if (!start(&p, PKV_DTYPE_F32, TOKENS, 1, 1, 0)) return;
  pkv_engine_params ep;
  tu_params(&ep, 16, TOKENS / 16 + 8);
  ep.num_layers = 8, ep.num_kv_heads = 8, ep.num_q_heads = 8, ep.head_dim = 128;
  ep.max_num_batched_tokens = TOKENS + 16;
  pkv_engine *c = tu_engine_p(&ep);
  pkv_agent_params ap;
  pkv_agent_params_init(&ap, sizeof ap);
  ap.listen_address = NULL;
  ap.max_inflight_bytes = 1; /* one segment (64 KiB) at a time */
  ap.on_failure = PKV_TRANSFER_FAILED;
  pkv_agent *a = NULL;
  CHECK_OK(pkv_agent_create(c, &ap, &a));
  uint32_t peer = 0;
  CHECK_OK(pkv_agent_connect(a, p.o.address, &peer));
  static int32_t t[TOKENS + 1];
  tu_fill(t, TOKENS + 1, 300);
  const uint64_t cs = receiving(c, t, TOKENS + 1, TOKENS);
  const uint64_t nodes = tu_stats(c).num_prefix_nodes;
  CHECK_OK(pkv_agent_pull(a, peer, p.o.seq, cs));
  /* Reads under way, then the producer dies. */
  pkv_agent_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  for (int k = 0; k < 100000 && st.bytes_pulled == 0; k++) {
    uint32_t n = 0;
    pkv_agent_completion x;
    CHECK_OK(pkv_agent_progress(a, 0, &x, 1, &n));
    CHECK_EQ_INT(n, 0);
    CHECK_OK(pkv_agent_stats_get(a, &st));
  }
  CHECK(st.bytes_pulled > 0);
  kill(p.pid, SIGKILL);
  const pkv_agent_completion done = wait_one(a);
  CHECK(done.seq == cs);
  CHECK_EQ_INT(done.outcome, PKV_TRANSFER_FAILED);
  CHECK(done.bytes < 8ull * 2 * (TOKENS / 16) * 16 * 8 * 128 * 4); /* not all of it */
  CHECK_OK(pkv_agent_stats_get(a, &st));
  CHECK_EQ_INT(st.pulls_failed, 1);
  CHECK_EQ_INT(st.num_peers, 0);
  /* Nothing it wrote is used: no block sealed, nothing cached, the request computes. */
  const pkv_stats s = tu_stats(c);
  CHECK_EQ_INT(s.num_prefix_nodes, nodes);
  CHECK_EQ_INT(s.num_receives_failed, 1);
  CHECK_EQ_INT(s.num_used_blocks, 0);
  uint32_t cached = 1;
  CHECK_OK(pkv_allocate_query(c, t, TOKENS + 1, NULL, NULL, &cached));
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(info_of(c, cs).is_preempted, 1);
  CHECK_ENGINE(c);
  CHECK_EQ_INT(stop(&p), -SIGKILL);
  pkv_agent_destroy(a);
  pkv_engine_destroy(c);
}

static void no_listener(void) {
  pkv_engine *c = engine(PKV_DTYPE_F32, 64);
  pkv_agent_params ap;
  pkv_agent_params_init(&ap, sizeof ap);
  ap.timeout_ms = 2000;
  pkv_agent *a = NULL;
  CHECK_OK(pkv_agent_create(c, &ap, &a));
  char addr[64];
  CHECK_OK(pkv_agent_address(a, addr, sizeof addr));
  CHECK(strncmp(addr, "127.0.0.1:", 10) == 0);
  CHECK_STATUS(pkv_agent_address(a, addr, 5), PKV_ERR_INVALID_ARGUMENT);
  /* A port nobody listens on: this agent's own port + 1 is free more often than not; the
     refusal is what counts. */
  pkv_agent *b = NULL;
  CHECK_OK(pkv_agent_create(c, &ap, &b));
  char other[64];
  CHECK_OK(pkv_agent_address(b, other, sizeof other));
  pkv_agent_destroy(b); /* its port is free again */
  uint32_t peer = 0;
  CHECK_STATUS(pkv_agent_connect(a, other, &peer), PKV_ERR_DEVICE);
  CHECK_STATUS(pkv_agent_connect(a, "localhost:1", &peer), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_agent_connect(a, "127.0.0.1", &peer), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_agent_connect(a, "127.0.0.1:99999", &peer), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_agent_pull(a, 7, 1, 1), PKV_ERR_INVALID_ARGUMENT);
  ap.listen_address = "nowhere:1";
  CHECK_STATUS(pkv_agent_create(c, &ap, &b), PKV_ERR_INVALID_ARGUMENT);
  ap.listen_address = NULL;
  ap.on_failure = PKV_TRANSFER_DONE;
  CHECK_STATUS(pkv_agent_create(c, &ap, &b), PKV_ERR_INVALID_ARGUMENT);
  ap.on_failure = PKV_TRANSFER_FAILED;
  ap.rank = 1;
  CHECK_STATUS(pkv_agent_create(c, &ap, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_agent_create(NULL, NULL, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_agent_progress(NULL, 0, NULL, 0, NULL), PKV_ERR_INVALID_ARGUMENT);
  pkv_agent_destroy(NULL);
  pkv_agent_destroy(a);
  pkv_engine_destroy(c);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  pkv_engine *e = engine(PKV_DTYPE_F32, 8);
  pkv_agent *a = NULL;
  const pkv_status st = pkv_agent_create(e, NULL, &a);
  pkv_agent_destroy(a);
  pkv_engine_destroy(e);
  if (st == PKV_ERR_UNSUPPORTED) {
    printf("skip: %s\n", pkv_last_error());
    return 77;
  }
  TU_RUN(no_listener);
  TU_RUN(pull_done);
  TU_RUN(not_held);
  TU_RUN(fingerprint_mismatch);
  TU_RUN(peer_killed);
  return tu_summary();
}
