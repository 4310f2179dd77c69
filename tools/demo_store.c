/*
 * demo_store.c - `pkv demo --store DIR|redis://HOST[:PORT]`: the workload served through pkv with
 * a store below the host tier, twice, each time by a new engine in a new process (fork; this
 * process makes no engine): cold, the store filled by write-through as blocks are sealed (the
 * engine's destruction finishes the queued writes before the process exits), then warm, an empty
 * pool and host tier whose requests find their prefixes in the store, fetched in the background.
 * Each child sends its result back through a pipe; the report puts time to first token, forward
 * rows, prefix hits by tier and the generated tokens of the two side by side.
 *
 * The demo never starts a Redis server: redis:// names one the user runs. A directory is made if
 * missing. A store that already holds this workload's blocks (an earlier run) makes the cold run
 * warm too; the report says so.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

static const char redis_scheme[] = "redis://";

/* The write queue's bytes, at most: a fsync per block makes a file store's writer fall behind a
 * prefill burst, and a block that finds the queue full is dropped (and recomputed by the warm
 * run), so the demo's queue is deeper than pkv's default of 256 blocks. */
static const uint64_t write_queue_bytes = 256ull << 20;

typedef struct store_target {
  pkv_store_params p;
  char host[256];
} store_target;

/* Fills t from spec (p.path points into spec); NULL, or why not. */
static const char *target_of(const char *spec, store_target *t) {
  memset(t, 0, sizeof *t);
  pkv_store_params_init(&t->p, sizeof t->p);
  if (!*spec) return "--store needs a directory or redis://HOST:PORT";
  if (strncmp(spec, redis_scheme, sizeof redis_scheme - 1) != 0) {
    if (strstr(spec, "://"))
      return "--store: a URL must be redis://HOST[:PORT] (else give a directory)";
    struct stat sb;
    if (stat(spec, &sb) == 0 && !S_ISDIR(sb.st_mode))
      return "--store: that path is not a directory";
    t->p.kind = PKV_STORE_FILE, t->p.path = spec;
    return NULL;
  }
  const char *host = spec + sizeof redis_scheme - 1, *colon = strchr(host, ':');
  const size_t host_len = colon ? (size_t)(colon - host) : strlen(host);
  uint32_t port = 6379;
  if (host_len == 0)
    return "--store redis://HOST[:PORT]: the host is missing (e.g. redis://127.0.0.1:6379)";
  if (host_len >= sizeof t->host || strcspn(host, "/@?") < host_len)
    return "--store redis://HOST[:PORT]: HOST must be a host name or an IPv4 address (no user, database or path)";
  if (colon && (cli_parse_u32(colon + 1, &port) != 0 || port == 0 || port > 65535))
    return "--store redis://HOST:PORT: PORT must be a number in 1 .. 65535";
  memcpy(t->host, host, host_len);
  t->p.kind = PKV_STORE_REDIS, t->p.host = t->host, t->p.port = port;
  t->p.key_prefix = "pkv-demo:";
  return NULL;
}

const char *demo_store_check(const char *spec) {
  store_target t;
  return target_of(spec, &t);
}

/* A result through a pipe: the struct (its pointers mean nothing on the other side), then the
 * per-request arrays, then each request's generated tokens, then the per-step trace (the plot's). */
static int send_result(int fd, const demo_result *r, const demo_workload *w) {
  const uint32_t n = w->num_requests;
  int rc = cli_write_all(fd, r, sizeof *r);
  if (rc == 0) rc = cli_write_all(fd, r->num_generated, n * sizeof *r->num_generated);
  if (rc == 0) rc = cli_write_all(fd, r->finish, n * sizeof *r->finish);
  if (rc == 0) rc = cli_write_all(fd, r->ttft_steps, n * sizeof *r->ttft_steps);
  if (rc == 0) rc = cli_write_all(fd, r->ttft_ms, n * sizeof *r->ttft_ms);
  for (uint32_t i = 0; rc == 0 && i < n; i++)
    rc = cli_write_all(fd, r->generated[i], r->num_generated[i] * sizeof(int32_t));
  if (rc == 0 && r->steps) rc = cli_write_all(fd, r->trace_util, r->steps * sizeof *r->trace_util);
  if (rc == 0 && r->steps)
    rc = cli_write_all(fd, r->trace_reserved, r->steps * sizeof *r->trace_reserved);
  if (rc == 0 && r->steps)
    rc = cli_write_all(fd, r->trace_running, r->steps * sizeof *r->trace_running);
  return rc;
}

/* The trace of r->steps steps, into arrays of that size. */
static int receive_trace(int fd, demo_result *r) {
  if (!r->steps) return 0;
  r->trace_util = malloc(r->steps * sizeof *r->trace_util);
  r->trace_reserved = malloc(r->steps * sizeof *r->trace_reserved);
  r->trace_running = malloc(r->steps * sizeof *r->trace_running);
  if (!r->trace_util || !r->trace_reserved || !r->trace_running) return -1;
  r->trace_cap = r->steps;
  int rc = cli_read_all(fd, r->trace_util, r->steps * sizeof *r->trace_util);
  if (rc == 0) rc = cli_read_all(fd, r->trace_reserved, r->steps * sizeof *r->trace_reserved);
  if (rc == 0) rc = cli_read_all(fd, r->trace_running, r->steps * sizeof *r->trace_running);
  return rc;
}

/* Into r, made by demo_result_init: its arrays are kept, the rest comes from the child. */
static int receive_result(int fd, demo_result *r, const demo_workload *w) {
  const uint32_t n = w->num_requests;
  demo_result in;
  if (cli_read_all(fd, &in, sizeof in) != 0) return -1;
  in.name = r->name, in.generated = r->generated, in.num_generated = r->num_generated;
  in.finish = r->finish, in.ttft_steps = r->ttft_steps, in.ttft_ms = r->ttft_ms;
  in.trace_util = NULL, in.trace_reserved = NULL, in.trace_running = NULL, in.trace_cap = 0;
  in.error[sizeof in.error - 1] = '\0';
  *r = in;
  int rc = cli_read_all(fd, r->num_generated, n * sizeof *r->num_generated);
  if (rc == 0) rc = cli_read_all(fd, r->finish, n * sizeof *r->finish);
  if (rc == 0) rc = cli_read_all(fd, r->ttft_steps, n * sizeof *r->ttft_steps);
  if (rc == 0) rc = cli_read_all(fd, r->ttft_ms, n * sizeof *r->ttft_ms);
  for (uint32_t i = 0; rc == 0 && i < n; i++)
    rc = r->num_generated[i] > w->requests[i].max_new_tokens
             ? -1
             : cli_read_all(fd, r->generated[i], r->num_generated[i] * sizeof(int32_t));
  return rc == 0 ? receive_trace(fd, r) : rc;
}

/* One run through pkv by a new engine in a child process; prints its failure. */
static int run_in_child(const demo_options *o, const demo_workload *w, const model *m,
                        const char *name, demo_result *r) {
  if (demo_result_init(r, name, w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    fprintf(stderr, "pkv demo: pipe: %s\n", strerror(errno));
    return -1;
  }
  fflush(stdout), fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const int rc = demo_run_paged(o, w, m, r);
    _exit(send_result(fds[1], r, w) == 0 && rc == 0 ? 0 : 1);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    fprintf(stderr, "pkv demo: fork: %s\n", strerror(errno));
    return -1;
  }
  const int got = receive_result(fds[0], r, w);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got != 0) {
    fprintf(stderr, "pkv demo: the %s run's process ended without its result (%s %d)\n", name,
            WIFSIGNALED(status) ? "signal" : "exit status",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    return -1;
  }
  if (!r->error[0]) return 0;
  fprintf(stderr, "pkv demo: %s run failed: %s\n", name, r->error);
  return -1;
}

static void row(const char *label, const char *a, const char *b) {
  printf("  %-34s %22s %22s\n", label, a, b);
}

static void row_u64(const char *label, uint64_t a, uint64_t b) {
  char x[32], y[32];
  snprintf(x, sizeof x, "%llu", (unsigned long long)a);
  snprintf(y, sizeof y, "%llu", (unsigned long long)b);
  row(label, x, y);
}

static void print_table(const demo_workload *w, const demo_result *c, const demo_result *h) {
  const uint32_t n = w->num_requests;
  double cs[3], cm[3], hs[3], hm[3];
  demo_result_ttft(c, n, 0, cs), demo_result_ttft(c, n, 1, cm);
  demo_result_ttft(h, n, 0, hs), demo_result_ttft(h, n, 1, hm);
  char a[48], b[48];
  row("", "cold (fills the store)", "warm (from the store)");
  snprintf(a, sizeof a, "%.2f s", c->wall_s), snprintf(b, sizeof b, "%.2f s", h->wall_s);
  row("wall time", a, b);
  row_u64("steps", c->steps, h->steps);
  row_u64("forward rows (tokens computed)", c->rows, h->rows);
  const char *names[3] = {"time to first token, mean", "time to first token, p50",
                          "time to first token, p90"};
  for (int k = 0; k < 3; k++) {
    snprintf(a, sizeof a, "%.0f steps %6.1f ms", cs[k], cm[k]);
    snprintf(b, sizeof b, "%.0f steps %6.1f ms", hs[k], hm[k]);
    row(names[k], a, b);
  }
  snprintf(a, sizeof a, "%.1f%%",
           c->query_tokens ? 100.0 * (double)c->hit_tokens / (double)c->query_tokens : 0.0);
  snprintf(b, sizeof b, "%.1f%%",
           h->query_tokens ? 100.0 * (double)h->hit_tokens / (double)h->query_tokens : 0.0);
  row("prefix hit rate (tokens)", a, b);
  row_u64("  hit tokens from the pool", c->device_hit_tokens, h->device_hit_tokens);
  row_u64("  from the host tier", c->host_hit_tokens, h->host_hit_tokens);
  row_u64("  from the store", c->store_hit_tokens, h->store_hit_tokens);
  row_u64("store blocks fetched", c->store_hits, h->store_hits);
  row_u64("  missed / bad", c->store_misses + c->store_bad, h->store_misses + h->store_bad);
  row_u64("store blocks written while serving", c->store_puts, h->store_puts);
  row_u64("  not written (queue full, error)", c->store_put_lost, h->store_put_lost);
  snprintf(a, sizeof a, "%.0f ms", 1e3 * c->close_s),
      snprintf(b, sizeof b, "%.0f ms", 1e3 * h->close_s);
  row("engine destroy (queued writes)", a, b);
}

/* Prints the verdicts and notes; 0 when the tokens are the same and the warm run hit the store. */
static int print_summary(const demo_workload *w, const demo_result *c, const demo_result *h) {
  uint32_t first = 0, at = 0;
  const uint32_t differ = demo_result_differ(w, c, h, &first, &at);
  double cm[3], hm[3];
  demo_result_ttft(c, w->num_requests, 1, cm), demo_result_ttft(h, w->num_requests, 1, hm);
  if (differ == 0)
    printf("\n  tokens identical: yes (%u requests, %llu generated tokens, cold vs warm)\n",
           w->num_requests, (unsigned long long)c->generated_tokens);
  else
    printf(
        "\n  tokens identical: NO - %u of %u requests differ; the first is request %u at generated\n"
        "  token %u\n",
        differ, w->num_requests, first, at);
  printf(
      "  warm: %.1f%% of the cold run's forward rows; first token %.2fx as soon (mean), %.2fx (p50)\n",
      c->rows ? 100.0 * (double)h->rows / (double)c->rows : 0.0, hm[0] > 0 ? cm[0] / hm[0] : 0.0,
      hm[1] > 0 ? cm[1] / hm[1] : 0.0);
  if (!h->store_hit_tokens)
    printf("  warm from the store: NO - the warm run found none of the cold run's blocks (see the\n"
           "  store's counts above)\n");
  if (c->store_hit_tokens)
    printf("  note: the store already held blocks of this workload (an earlier run?), so the cold\n"
           "  run was not cold: give a new directory, or empty the Redis database (FLUSHDB).\n");
  if (c->store_put_lost)
    printf("  note: %llu blocks were not written (the write queue was full, or the store failed);\n"
           "  the warm run computes them again.\n",
           (unsigned long long)c->store_put_lost);
  return differ || !h->store_hit_tokens ? -1 : 0;
}

/* The demo model's identity for the store (pkv_store_params.model_id): its config written as a
 * Hugging Face config.json, with the seed its weights come from, digested by
 * pkv_hf_config_digest. A model of other weights or shape never reads these blocks. */
static int model_id_of(const model *m, char out[PKV_HF_CONFIG_DIGEST_BYTES]) {
  char json[512];
  const int n =
      snprintf(json, sizeof json,
               "{\"model_type\": \"pkv-demo\", \"num_hidden_layers\": %u, \"hidden_size\": %u, "
               "\"num_attention_heads\": %u, \"num_key_value_heads\": %u, \"head_dim\": %u, "
               "\"intermediate_size\": %u, \"vocab_size\": %u, \"max_position_embeddings\": %u, "
               "\"torch_dtype\": \"float32\", \"pkv_demo_weights_seed\": %llu}",
               m->c.num_layers, m->c.hidden, m->c.num_q_heads, m->c.num_kv_heads, m->c.head_dim,
               m->c.intermediate, m->c.vocab, m->c.max_positions, (unsigned long long)m->c.seed);
  if (n <= 0 || (size_t)n >= sizeof json ||
      pkv_hf_config_digest(json, (size_t)n, out, PKV_HF_CONFIG_DIGEST_BYTES) != PKV_OK) {
    fprintf(stderr, "pkv demo: the model's id for the store: %s\n", pkv_last_error());
    return -1;
  }
  return 0;
}

int demo_store_runs(const demo_options *o, const demo_workload *w, const model *m) {
  store_target t;
  const char *bad = target_of(o->store, &t);
  if (bad) {
    fprintf(stderr, "pkv demo: %s\n", bad);
    return -1;
  }
  char model_id[PKV_HF_CONFIG_DIGEST_BYTES];
  if (model_id_of(m, model_id) != 0) return -1;
  t.p.model_id = model_id;
  demo_options os = *o;
  os.store_params = &t.p;
  os.preemption_mode =
      o->preemption && strcmp(o->preemption, "auto") == 0 ? PKV_PREEMPT_AUTO : PKV_PREEMPT_SWAP;
  const uint64_t block_bytes =
      (uint64_t)o->block_size * 2 * m->c.num_layers * m->kv_dim * sizeof(float);
  if (!os.host_cache) os.host_cache = (uint64_t)o->num_blocks * block_bytes;
  const uint64_t queue = write_queue_bytes / block_bytes;
  t.p.write_queue_blocks = queue < 256 ? 256 : queue > 65536 ? 65536 : (uint32_t)queue;
  char size[32];
  if (t.p.kind == PKV_STORE_FILE)
    printf("  store      the directory %s (made if missing)\n", t.p.path);
  else
    printf(
        "  store      Redis at %s:%u, keys \"%s...\" (a server of yours: the demo starts none)\n",
        t.host, t.p.port, t.p.key_prefix);
  printf("             written through as blocks are sealed, through a queue of %u blocks\n",
         t.p.write_queue_blocks);
  printf("             model id %.30s... (its config and weights' seed: other models never\n"
         "             share these blocks)\n",
         t.p.model_id);
  printf("  host tier  %s (%llu blocks), preemption by %s%s\n",
         cli_format_size(os.host_cache, size, sizeof size),
         (unsigned long long)(os.host_cache / block_bytes),
         os.preemption_mode == PKV_PREEMPT_AUTO ? "auto" : "swap",
         o->host_cache ? ""
                       : "\n             (with --store, the pool's size unless --host-cache says)");
  printf(
      "  runs       two processes, one engine each: cold (filling the store), then warm (an empty\n"
      "             pool and host tier, the store the first one filled)\n\n");
  demo_result c, h;
  memset(&c, 0, sizeof c), memset(&h, 0, sizeof h);
  int rc =
      run_in_child(&os, w, m, "cold", &c) == 0 && run_in_child(&os, w, m, "warm", &h) == 0 ? 0 : -1;
  if (rc != 0 && t.p.kind == PKV_STORE_REDIS)
    fprintf(stderr,
            "pkv demo: (the demo starts no Redis server: run one, e.g. redis-server --port %u\n"
            "          --save \"\" --appendonly no, or give --store a directory)\n",
            t.p.port);
  if (rc == 0) {
    print_table(w, &c, &h);
    rc = print_summary(w, &c, &h);
  }
  if (rc == 0 && o->plot) {
    const demo_result *runs[2] = {&c, &h};
    rc = demo_plot(o->plot, runs, 2, o);
    if (rc == 0) printf("  plot: %s\n", o->plot);
  }
  demo_result_free(&c, w), demo_result_free(&h, w);
  return rc;
}
