/*
 * demo_disagg.c - `pkv demo --disaggregated`: the workload served by a prefill engine and a
 * decode engine in two processes on 127.0.0.1, as disaggregated serving splits them, the
 * prompts' KV moved between them by pkv's UCX agent (pkv_agent_*):
 *   - the prefill process (a child) submits every request with max_new_tokens 1 and
 *     hold_on_finish: each prompt is computed, its first token sampled, its blocks held; it
 *     sends (request, held sequence, first token) over a pipe and serves its agent's pulls;
 *   - the decode process (this one) submits each arriving request as its prompt and first token
 *     with num_remote_tokens = the prompt, pulls the prompt's KV when pkv_step makes it
 *     receiving (pkv_drain_receiving, pkv_agent_pull), and decodes it to the end.
 * Before it, the same workload through one engine (demo_run_paged): the tokens must be the same,
 * request by request. The report: time to first token of both, the KV bytes the pulls moved and
 * their rate over the time a pull was in flight, against ucx_perftest's one-sided reads of the
 * same bytes between two processes on 127.0.0.1 in the same run.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

/* What the prefill process tells the decode process, per request; then its report. */
typedef struct arrival {
  uint32_t req;
  uint32_t held; /* 1: its blocks are held for a pull; 0: not (max_held_blocks), decode computes */
  uint64_t seq;  /* the prefill engine's sequence */
  int32_t token; /* its first token */
  uint32_t last; /* 1: a request ended at its first token (stop token, or max_new_tokens 1) */
} arrival;

typedef struct prefill_report {
  uint64_t served_done, served_failed, bytes_served, rows;
  double wall_s;
  char error[256];
} prefill_report;

/* One side's engine, its agent and the model's scratch. */
typedef struct side {
  const demo_options *o;
  const demo_workload *w;
  const model *m;
  pkv_engine *e;
  pkv_agent *a;
  model_workspace ws;
  int32_t *tokens, *positions, *sample_rows, *out;
  uint32_t *sample_seq, cap;
  uint32_t *req_of; /* [sequence id] its request (ids count from 1 in submission order) */
  uint32_t num_seqs;
  char *error;
  size_t error_cap;
} side;

const char *demo_disagg_check(const demo_options *o) {
  if (!o->disaggregated) return NULL;
  if (o->store || o->hybrid || o->retention || o->windows || o->host_cache)
    return "--disaggregated runs plain engines: drop --store, --hybrid, --retention, --windows "
           "and --host-cache";
  if (o->device && strcmp(o->device, "cpu") != 0)
    return "--disaggregated runs CPU engines (pkv's agent reads host memory): drop --device";
  return NULL;
}

static int say(side *s, const char *what, pkv_status st) {
  if (st == PKV_OK)
    snprintf(s->error, s->error_cap, "%s", what);
  else
    snprintf(s->error, s->error_cap, "%s: %s: %s", what, pkv_status_string(st), pkv_last_error());
  return -1;
}

static int readable(int fd) {
  fd_set r;
  FD_ZERO(&r);
  FD_SET(fd, &r);
  struct timeval tv = {0, 0};
  return select(fd + 1, &r, NULL, NULL, &tv) > 0;
}

static int side_open(side *s, int listen) {
  pkv_engine_params ep;
  demo_engine_params(s->o, s->m, &ep);
  /* The prefill engine may hold its whole pool: a prompt waits for blocks until the decode
     engine has pulled earlier ones (back pressure), rather than finishing without a hold. */
  ep.max_held_blocks = listen ? ep.num_blocks : 0;
  pkv_status st = pkv_engine_create(&ep, &s->e);
  if (st != PKV_OK) return say(s, "pkv_engine_create", st);
  pkv_agent_params ap;
  pkv_agent_params_init(&ap, sizeof ap);
  if (!listen) ap.listen_address = NULL;
  st = pkv_agent_create(s->e, &ap, &s->a);
  if (st != PKV_OK) return say(s, "pkv_agent_create", st);
  s->req_of = calloc(s->w->num_requests + 1, sizeof *s->req_of);
  return s->req_of ? 0 : say(s, "out of memory", PKV_OK);
}

static void side_close(side *s) {
  pkv_agent_destroy(s->a);
  pkv_engine_destroy(s->e);
  model_workspace_free(&s->ws);
  free(s->tokens), free(s->positions), free(s->sample_rows), free(s->out), free(s->sample_seq);
  free(s->req_of);
}

static int attend(void *ctx, uint32_t layer, const float *q, const float *k, const float *v,
                  float *out) {
  pkv_status st = pkv_attention(ctx, layer, q, k, v, out);
  return st == PKV_OK ? 0 : -1;
}

/* The model over batch b: token_of gives each row's token; sampled[i] the batch's i-th
 * sequence's greedy token (-1: it samples none). */
static int forward(side *s, pkv_batch *b, const pkv_batch_view *v,
                   int32_t (*token_of)(side *, uint32_t req, uint32_t pos, void *), void *ctx,
                   int32_t *sampled) {
  const uint32_t need = v->num_tokens > v->num_seqs ? v->num_tokens : v->num_seqs;
  if (need > s->cap) {
    free(s->tokens), free(s->positions), free(s->sample_rows), free(s->out), free(s->sample_seq);
    s->tokens = malloc(need * sizeof *s->tokens);
    s->positions = malloc(need * sizeof *s->positions);
    s->sample_rows = malloc(need * sizeof *s->sample_rows);
    s->out = malloc(need * sizeof *s->out);
    s->sample_seq = malloc(need * sizeof *s->sample_seq);
    s->cap = need;
    if (!s->tokens || !s->positions || !s->sample_rows || !s->out || !s->sample_seq)
      return say(s, "out of memory", PKV_OK);
  }
  uint32_t n = 0;
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    const uint32_t req = s->req_of[v->seq_ids[i]];
    for (int32_t row = v->query_start[i]; row < v->query_start[i + 1]; row++) {
      s->positions[row] = v->positions[row];
      s->tokens[row] = token_of(s, req, (uint32_t)v->positions[row], ctx);
    }
    sampled[i] = -1;
    if (v->sample_rows[i] >= 0) s->sample_seq[n] = i, s->sample_rows[n++] = v->sample_rows[i];
  }
  if (model_forward(s->m, &s->ws, s->tokens, s->positions, v->num_tokens, s->sample_rows, n, attend,
                    b, s->out) != 0)
    return say(s, "the model's forward pass (pkv_attention)", PKV_OK);
  for (uint32_t k = 0; k < n; k++) sampled[s->sample_seq[k]] = s->out[k];
  return 0;
}

static pkv_request_params request_params(const demo_workload *w, uint32_t req, int32_t stop) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.stop_token = stop;
  rp.cache_salt = w->salts[w->requests[req].tenant];
  rp.cache_salt_len = (uint32_t)strlen(w->salts[w->requests[req].tenant]);
  return rp;
}

/* ---------------------------------------------------------------- the prefill process */

static int32_t prompt_token(side *s, uint32_t req, uint32_t pos, void *ctx) {
  (void)ctx;
  return s->w->requests[req].prompt[pos];
}

/* Its finished prefills: each one's first token and held sequence to the decode process. */
static int send_prefilled(side *s, int up, uint32_t *held_now, uint32_t *sent) {
  uint64_t ids[64];
  uint32_t n = 0;
  do {
    pkv_status st = pkv_drain_finished(s->e, ids, 64, &n);
    if (st != PKV_OK) return say(s, "pkv_drain_finished", st);
    for (uint32_t k = 0; k < n; k++) {
      struct pkv_seq_info info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      int32_t tokens[2];
      uint32_t len = 0;
      pkv_seq_info(s->e, ids[k], &info);
      int32_t *all = malloc((info.num_tokens + 1) * sizeof *all);
      if (!all) return say(s, "out of memory", PKV_OK);
      st = pkv_seq_tokens(s->e, ids[k], all, info.num_tokens, &len);
      tokens[0] = len ? all[len - 1] : -1;
      free(all);
      if (st != PKV_OK) return say(s, "pkv_seq_tokens", st);
      arrival a = {s->req_of[ids[k]], info.transfer == PKV_TRANSFER_HOLDING, ids[k], tokens[0], 0};
      a.last = tokens[0] == s->o->stop_token || s->w->requests[a.req].max_new_tokens == 1;
      /* A request that ends at its first token needs no decode: its hold ends here. */
      if (a.held && a.last) pkv_hold_end(s->e, ids[k], PKV_TRANSFER_FAILED);
      if (!a.held || a.last) pkv_release(s->e, ids[k]);
      *held_now += a.held && !a.last;
      if (cli_write_all(up, &a, sizeof a) != 0) return say(s, "the decode process is gone", PKV_OK);
      ++*sent;
    }
  } while (n == 64);
  return 0;
}

static int prefill_main(side *s, int up, int down, prefill_report *rep) {
  if (side_open(s, 1) != 0) return -1;
  char address[64] = {0};
  pkv_status st = pkv_agent_address(s->a, address, sizeof address);
  if (st != PKV_OK || cli_write_all(up, address, sizeof address) != 0)
    return say(s, "pkv_agent_address", st);
  const double t0 = cli_now_s();
  for (uint32_t i = 0; i < s->w->num_requests; i++) {
    pkv_request_params rp = request_params(s->w, i, s->o->stop_token);
    rp.max_new_tokens = 1;
    rp.hold_on_finish = 1;
    uint64_t seq = 0;
    st = pkv_submit(s->e, s->w->requests[i].prompt, s->w->requests[i].prompt_len, &rp, &seq);
    if (st != PKV_OK) return say(s, "pkv_submit", st);
    s->req_of[seq] = i;
  }
  uint32_t held = 0, ended = 0, sent = 0;
  int32_t *sampled = malloc(s->o->max_num_seqs * sizeof *sampled);
  if (!sampled) return say(s, "out of memory", PKV_OK);
  int rc = 0;
  for (;;) {
    pkv_batch *b = NULL;
    if ((st = pkv_step(s->e, &b)) != PKV_OK) {
      rc = say(s, "pkv_step", st);
      break;
    }
    if (b) {
      pkv_batch_view v;
      memset(&v, 0, sizeof v);
      v.struct_size = sizeof v;
      pkv_batch_info(b, &v);
      if (forward(s, b, &v, prompt_token, NULL, sampled) != 0) {
        pkv_batch_abort(b);
        rc = -1;
        break;
      }
      rep->rows += v.num_tokens;
      if ((st = pkv_commit(b, sampled)) != PKV_OK) {
        rc = say(s, "pkv_commit", st);
        break;
      }
      if (send_prefilled(s, up, &held, &sent) != 0) {
        rc = -1;
        break;
      }
      if (sent == s->w->num_requests && rep->wall_s == 0) rep->wall_s = cli_now_s() - t0;
    }
    /* Serve the pulls; a hold that ended (pulled, or failed) is released. */
    pkv_agent_completion c[16];
    uint32_t n = 0;
    pkv_agent_progress(s->a, b ? 0 : 1, c, 16, &n);
    for (uint32_t k = 0; k < n; k++)
      if (c[k].served) {
        ended++;
        pkv_release(s->e, c[k].seq);
      }
    /* Until the decode process is done (or gone): its last pulls' acknowledgements must go. */
    if (readable(down)) break;
  }
  free(sampled);
  pkv_agent_stats as;
  memset(&as, 0, sizeof as);
  as.struct_size = sizeof as;
  pkv_agent_stats_get(s->a, &as);
  rep->served_done = as.served_done, rep->served_failed = as.served_failed;
  rep->bytes_served = as.bytes_served;
  return rc;
}

/* ---------------------------------------------------------------- the decode process */

typedef struct decode_run {
  side s;
  demo_result *r;
  uint64_t *remote_seq; /* [request] the prefill engine's held sequence */
  uint32_t *local;      /* [request] this engine's sequence (0: none yet) */
  uint32_t peer, pulls, pulls_failed, computed_here;
  uint64_t bytes;
  double *pull_from; /* [request] when its pull started */
  double pull_s, t0; /* the pulls' latencies, summed */
  uint32_t in_flight;
} decode_run;

static int32_t stream_token(side *s, uint32_t req, uint32_t pos, void *ctx) {
  decode_run *d = ctx;
  (void)s;
  return demo_token_at(d->s.w, d->r, req, pos);
}

static int arrive(decode_run *d, const arrival *a) {
  side *s = &d->s;
  const demo_request *q = &s->w->requests[a->req];
  const double ms = (cli_now_s() - d->t0) * 1e3;
  const uint32_t finish = demo_result_token(d->r, s->w, a->req, a->token, s->o->stop_token, ms);
  if (finish != PKV_FINISH_NONE || a->last) return 0;
  int32_t *prompt = malloc((q->prompt_len + 1) * sizeof *prompt);
  if (!prompt) return say(s, "out of memory", PKV_OK);
  memcpy(prompt, q->prompt, q->prompt_len * sizeof *prompt);
  prompt[q->prompt_len] = a->token;
  pkv_request_params rp = request_params(s->w, a->req, s->o->stop_token);
  rp.max_new_tokens = q->max_new_tokens - 1;
  rp.num_remote_tokens = a->held ? q->prompt_len : 0;
  d->computed_here += !a->held;
  uint64_t seq = 0;
  pkv_status st = pkv_submit(s->e, prompt, q->prompt_len + 1, &rp, &seq);
  free(prompt);
  if (st != PKV_OK) return say(s, "pkv_submit", st);
  s->req_of[seq] = a->req;
  d->remote_seq[a->req] = a->seq;
  return 0;
}

/* Receiving requests get their pulls; ended pulls are counted. */
static int transfers(decode_run *d, uint32_t wait_ms) {
  side *s = &d->s;
  uint64_t ids[64];
  uint32_t n = 0;
  do {
    pkv_status st = pkv_drain_receiving(s->e, ids, 64, &n);
    if (st != PKV_OK) return say(s, "pkv_drain_receiving", st);
    for (uint32_t k = 0; k < n; k++) {
      st = pkv_agent_pull(s->a, d->peer, d->remote_seq[s->req_of[ids[k]]], ids[k]);
      if (st != PKV_OK) return say(s, "pkv_agent_pull", st);
      d->pull_from[s->req_of[ids[k]]] = cli_now_s();
      d->in_flight++, d->pulls++;
    }
  } while (n == 64);
  pkv_agent_completion c[64];
  pkv_status st = pkv_agent_progress(s->a, wait_ms, c, 64, &n);
  if (st != PKV_OK) return say(s, "pkv_agent_progress", st);
  for (uint32_t k = 0; k < n; k++) {
    if (c[k].served) continue;
    d->in_flight--;
    d->pull_s += cli_now_s() - d->pull_from[s->req_of[c[k].seq]];
    d->bytes += c[k].bytes;
    d->pulls_failed += c[k].outcome != PKV_TRANSFER_DONE;
  }
  return 0;
}

static int decode_step(decode_run *d, int32_t *sampled) {
  side *s = &d->s;
  pkv_batch *b = NULL;
  pkv_status st = pkv_step(s->e, &b);
  if (st != PKV_OK) return say(s, "pkv_step", st);
  if (!b) return 0;
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  pkv_batch_info(b, &v);
  if (forward(s, b, &v, stream_token, d, sampled) != 0) {
    pkv_batch_abort(b);
    return -1;
  }
  d->r->steps++, d->r->rows += v.num_tokens;
  const double ms = (cli_now_s() - d->t0) * 1e3;
  for (uint32_t i = 0; i < v.num_seqs; i++)
    if (sampled[i] >= 0)
      demo_result_token(d->r, s->w, s->req_of[v.seq_ids[i]], sampled[i], s->o->stop_token, ms);
  if ((st = pkv_commit(b, sampled)) != PKV_OK) return say(s, "pkv_commit", st);
  uint64_t done[64];
  uint32_t n = 0;
  do {
    if ((st = pkv_drain_finished(s->e, done, 64, &n)) != PKV_OK)
      return say(s, "pkv_drain_finished", st);
    for (uint32_t k = 0; k < n; k++) pkv_release(s->e, done[k]);
  } while (n == 64);
  return 1;
}

/* The decode side, with the prefill process at from (arrivals) and to (closed when done). */
static int decode_main(decode_run *d, int from) {
  side *s = &d->s;
  if (side_open(s, 0) != 0) return -1;
  char address[64];
  if (cli_read_all(from, address, sizeof address) != 0)
    return say(s, "the prefill process ended before it listened", PKV_OK);
  address[sizeof address - 1] = '\0';
  pkv_status st = pkv_agent_connect(s->a, address, &d->peer);
  if (st != PKV_OK) return say(s, "pkv_agent_connect", st);
  int32_t *sampled = malloc(s->o->max_num_seqs * sizeof *sampled);
  if (!sampled) return say(s, "out of memory", PKV_OK);
  uint32_t arrived = 0;
  int rc = 0;
  while (rc == 0 && d->r->num_finished < s->w->num_requests) {
    while (arrived < s->w->num_requests && readable(from)) {
      arrival a;
      if (cli_read_all(from, &a, sizeof a) != 0 || a.req >= s->w->num_requests) {
        rc = say(s, "the prefill process ended early", PKV_OK);
        break;
      }
      arrived++;
      if ((rc = arrive(d, &a)) != 0) break;
    }
    const int ran = rc == 0 ? decode_step(d, sampled) : -1;
    if (ran < 0) rc = -1;
    /* nothing to run: wait for a pull's end (or an arrival) a little */
    if (rc == 0) rc = transfers(d, ran ? 0 : 1);
  }
  free(sampled);
  return rc;
}

/* ---------------------------------------------------------------- ucx_perftest */

/* A free TCP port of 127.0.0.1 (0 when none could be found). */
static uint16_t free_port(void) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin;
  memset(&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  uint16_t port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
      getsockname(fd, (struct sockaddr *)&sin, &len) == 0)
    port = ntohs(sin.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

/* ucx_perftest's one-sided reads (ucp_get) of `count` messages of `size` bytes between two
 * processes on 127.0.0.1, 64 in flight, with endpoints that handle a peer's failure (-e), as
 * pkv's agent's do (UCX then leaves out the shared-memory transports that cannot say a peer
 * died): its overall bandwidth in GB/s, or a negative value (why[cap] says). */
static double perftest_gbs(uint64_t size, uint64_t count, char *why, size_t cap) {
  const uint16_t port = free_port();
  char p[16], s[32], n[32];
  snprintf(p, sizeof p, "%u", port);
  snprintf(s, sizeof s, "%llu", (unsigned long long)size);
  snprintf(n, sizeof n, "%llu", (unsigned long long)(count ? count : 1));
  fflush(stdout), fflush(stderr);
  const pid_t server = fork();
  if (server == 0) {
    freopen("/dev/null", "w", stdout), freopen("/dev/null", "w", stderr);
    execlp("ucx_perftest", "ucx_perftest", "-p", p, "-e", (char *)NULL);
    _exit(127);
  }
  const struct timespec wait = {0, 300000000}; /* the server listening */
  nanosleep(&wait, NULL);
  int fds[2];
  if (server < 0 || pipe(fds) != 0) {
    snprintf(why, cap, "fork/pipe: %s", strerror(errno));
    return -1;
  }
  const pid_t client = fork();
  if (client == 0) {
    dup2(fds[1], 1), close(fds[0]);
    freopen("/dev/null", "w", stderr);
    execlp("ucx_perftest", "ucx_perftest", "127.0.0.1", "-p", p, "-e", "-t", "ucp_get", "-s", s,
           "-n", n, "-O", "64", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char out[8192];
  size_t len = 0;
  for (ssize_t k; len + 1 < sizeof out && (k = read(fds[0], out + len, sizeof out - 1 - len)) > 0;)
    len += (size_t)k;
  out[len] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(client, &status, 0);
  kill(server, SIGTERM); /* it serves until killed */
  waitpid(server, NULL, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    snprintf(why, cap, "ucx_perftest not found (Debian ucx-utils)");
    return -1;
  }
  const char *final = strstr(out, "Final:");
  double f[7];
  if (!final || sscanf(final, "Final: %lf %lf %lf %lf %lf %lf %lf", &f[0], &f[1], &f[2], &f[3],
                       &f[4], &f[5], &f[6]) != 7) {
    snprintf(why, cap, "ucx_perftest printed no result");
    return -1;
  }
  return f[5] * 1048576.0 / 1e9; /* its overall bandwidth, MB/s of 2^20 bytes */
}

/* ---------------------------------------------------------------- the runs */

int demo_disagg_runs(const demo_options *o, const demo_workload *w, const model *m) {
  demo_result one, two;
  memset(&one, 0, sizeof one), memset(&two, 0, sizeof two);
  if (demo_result_init(&one, "one engine", w) != 0 ||
      demo_result_init(&two, "prefill + decode", w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  if (demo_run_paged(o, w, m, &one) != 0) {
    fprintf(stderr, "pkv demo: the one-engine run failed: %s\n", one.error);
    return -1;
  }
  int up[2], down[2];
  if (pipe(up) != 0 || pipe(down) != 0) {
    fprintf(stderr, "pkv demo: pipe: %s\n", strerror(errno));
    return -1;
  }
  fflush(stdout), fflush(stderr);
  const double t0 = cli_now_s();
  const pid_t child = fork();
  if (child == 0) {
    close(up[0]), close(down[1]);
    prefill_report rep;
    memset(&rep, 0, sizeof rep);
    side s;
    memset(&s, 0, sizeof s);
    s.o = o, s.w = w, s.m = m;
    s.error = rep.error, s.error_cap = sizeof rep.error;
    const int rc = prefill_main(&s, up[1], down[0], &rep);
    side_close(&s);
    arrival end = {UINT32_MAX, 0, 0, 0, 0};
    cli_write_all(up[1], &end, sizeof end);
    cli_write_all(up[1], &rep, sizeof rep);
    _exit(rc == 0 ? 0 : 1);
  }
  close(up[1]), close(down[0]);
  decode_run d;
  memset(&d, 0, sizeof d);
  d.s.o = o, d.s.w = w, d.s.m = m, d.r = &two, d.t0 = t0;
  d.s.error = two.error, d.s.error_cap = sizeof two.error;
  d.remote_seq = calloc(w->num_requests, sizeof *d.remote_seq);
  d.pull_from = calloc(w->num_requests, sizeof *d.pull_from);
  int rc =
      d.remote_seq && d.pull_from ? decode_main(&d, up[0]) : say(&d.s, "out of memory", PKV_OK);
  two.wall_s = cli_now_s() - t0;
  pkv_agent_stats as;
  memset(&as, 0, sizeof as);
  as.struct_size = sizeof as;
  if (d.s.a) pkv_agent_stats_get(d.s.a, &as);
  side_close(&d.s);
  close(down[1]); /* the prefill process ends its serving */
  prefill_report rep;
  memset(&rep, 0, sizeof rep);
  for (arrival a; cli_read_all(up[0], &a, sizeof a) == 0;)
    if (a.req == UINT32_MAX) {
      cli_read_all(up[0], &rep, sizeof rep);
      break;
    }
  close(up[0]);
  int status = 0;
  waitpid(child, &status, 0);
  free(d.remote_seq), free(d.pull_from);
  if (rc != 0 || rep.error[0]) {
    fprintf(stderr, "pkv demo: the disaggregated run failed: %s\n",
            rc != 0 ? two.error : rep.error);
    demo_result_free(&one, w), demo_result_free(&two, w);
    return -1;
  }
  /* The same bytes through ucx_perftest: as many reads of a segment's bytes (a layer's K or V
     of one block, f32) as the pulls made. */
  char why[128] = "";
  const double seg_bytes = (double)o->block_size * m->c.num_kv_heads * m->c.head_dim * 4;
  const uint64_t segments = (uint64_t)(as.bytes_pulled / seg_bytes);
  const double perf = segments ? perftest_gbs((uint64_t)seg_bytes, segments, why, sizeof why) : -1;
  double a1[3], a2[3];
  demo_result_ttft(&one, w->num_requests, 1, a1);
  demo_result_ttft(&two, w->num_requests, 1, a2);
  printf("\n  disaggregated prefill and decode: two processes on 127.0.0.1, the prompts' KV pulled "
         "by pkv's UCX agent\n");
  printf("  %-34s %20s %20s\n", "", "one engine", "prefill + decode");
  DEMO_ROW("time to first token p50 (ms)", "%.1f", a1[1], "%.1f", a2[1]);
  DEMO_ROW("time to first token p90 (ms)", "%.1f", a1[2], "%.1f", a2[2]);
  DEMO_ROW("wall (s)", "%.2f", one.wall_s, "%.2f", two.wall_s);
  DEMO_ROW("forward rows", "%llu", (unsigned long long)one.rows, "%llu",
           (unsigned long long)(two.rows + rep.rows));
  printf("  %-34s %20s %20u\n", "pulls", "", d.pulls);
  printf("  %-34s %20s %20u\n", "pulls failed", "", d.pulls_failed);
  /* past the prefill engine's max_held_blocks (references: shared prefixes count per holder) */
  printf("  %-34s %20s %20u\n", "prompts not held: decode computed", "", d.computed_here);
  printf("  %-34s %20s %20.2f\n", "KV moved (MiB)", "", as.bytes_pulled / 1048576.0);
  printf("  %-34s %20s %20.2f\n", "a pull's latency, mean (ms)", "",
         d.pulls ? d.pull_s / d.pulls * 1e3 : 0);
  printf("  %-34s %20s %20.2f\n", "pulls' reads (GB/s)", "",
         as.read_ns ? (double)as.bytes_pulled / (double)as.read_ns : 0);
  if (perf > 0)
    printf("  %-34s %20s %20.2f  (%llu reads of %.0f bytes)\n", "ucx_perftest ucp_get (GB/s)", "",
           perf, (unsigned long long)segments, seg_bytes);
  else
    printf("  %-34s %20s %20s  (%s)\n", "ucx_perftest ucp_get (GB/s)", "", "-", why);
  printf("  %-34s %20s %20llu\n", "holds served (prefill process)", "",
         (unsigned long long)rep.served_done);
  uint32_t first = 0, at = 0;
  const uint32_t differ = demo_result_differ(w, &one, &two, &first, &at);
  if (differ)
    printf("  tokens: %u of %u requests differ (request %u from token %u)\n", differ,
           w->num_requests, first, at);
  else
    printf("  tokens: identical in all %u requests\n", w->num_requests);
  demo_result_free(&one, w), demo_result_free(&two, w);
  return differ || d.pulls_failed ? -1 : 0;
}
