/*
 * bench_events.c - what publishing KV events on the wire costs pkv_step. The same scheduler
 * workload (requests sharing prefixes, prompts admitted in chunks, decode, eviction under pool
 * pressure: many BlockStored and BlockRemoved per step) runs on one CPU engine per mode:
 *   off        no publisher (the reference)
 *   no-sub     a publisher (PUB + replay sockets on 127.0.0.1), nobody subscribed
 *   stalled    a publisher and a subscriber that connects and never reads (small receive
 *              buffers): it loses messages, the engine must not wait for it
 *   reading    a publisher and a subscriber thread that reads every message
 * Each mode prints, per step + commit (no attention: the host's compute is not part of it), the
 * median over --reps passes of the calling thread's CPU time (what publishing adds to the engine's
 * own thread: staging events, one hand-over per call) and of the wall time (which also counts
 * the publishing thread, ZeroMQ's I/O thread and the subscriber competing for the same cores),
 * each with its ratio to `off`, and the events per step, published and dropped. Target: a CPU
 * ratio near 1.00; the wall ratio depends on spare cores (a 2-core machine has none). The reading
 * subscriber also counts the payload bytes: bytes/event is what one event costs on the wire in
 * the chosen encoding (--format map, the default, or array: pkv_event_publisher_params.format).
 *
 * Run: build/bench/bench_events [--quick] [--reps N] [--format map|array]
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "bench_util.h"

enum { BS = 16, MAX_REPS = 9, MODES = 4 };
static const char *const kModes[MODES] = {"off", "no-sub", "stalled", "reading"};

typedef struct reader {
  void *ctx;
  const char *endpoint;
  volatile int stop;
  uint64_t messages, bytes; /* bytes: the payload frames' sizes */
} reader;

static void *read_all(void *arg) {
  reader *r = arg;
  void *s = zmq_socket(r->ctx, ZMQ_SUB);
  int linger = 0, timeout = 20;
  zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
  zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
  zmq_connect(s, r->endpoint);
  zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
  char buf[1 << 16];
  while (!r->stop) {
    int more = 0;
    size_t len = sizeof more;
    const int size = zmq_recv(s, buf, sizeof buf, 0); /* a frame's whole size, even if cut */
    if (size < 0) continue;
    zmq_getsockopt(s, ZMQ_RCVMORE, &more, &len);
    if (!more) {
      r->messages++;
      r->bytes += (uint64_t)size;
    }
  }
  zmq_close(s);
  return NULL;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct result {
  double step_s, cpu_s; /* medians: wall and calling-thread CPU seconds per step + commit */
  uint64_t steps, events, dropped, messages, bytes, batches; /* batches: the publisher's next_seq */
} result;

static int run(int mode, uint32_t format, uint32_t num_requests, uint32_t reps, result *out) {
  double per_step[MAX_REPS], cpu_per_step[MAX_REPS];
  memset(out, 0, sizeof *out);
  for (uint32_t rep = 0; rep < reps; rep++) {
    pkv_engine_params p;
    pkv_engine_params_init(&p, sizeof p);
    p.num_layers = 2; /* no attention runs: the shape only sizes the pool (32 MiB) */
    p.num_q_heads = 8;
    p.num_kv_heads = 2;
    p.head_dim = 64;
    p.dtype = PKV_DTYPE_BF16;
    p.device = PKV_DEVICE_CPU;
    p.block_size = BS;
    p.num_blocks = 1024;
    p.num_threads = 1;
    p.max_num_seqs = 64;
    p.max_num_batched_tokens = 2048;
    pkv_event_publisher_params pub;
    pkv_event_publisher_params_init(&pub, sizeof pub);
    pub.endpoint = "tcp://127.0.0.1:*";
    pub.replay_endpoint = "tcp://127.0.0.1:*";
    pub.format = format;
    if (mode > 0) p.event_publisher = &pub;
    pkv_engine *e = NULL;
    pkv_status s = pkv_engine_create(&p, &e);
    if (s != PKV_OK) return bench_fail(NULL, "pkv_engine_create", s);

    void *ctx = zmq_ctx_new();
    void *stalled = NULL;
    reader rd = {ctx, NULL, 0, 0, 0};
    pthread_t thread;
    struct pkv_event_publisher_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (mode > 0) pkv_event_publisher_info(e, &info);
    if (mode == 2) {
      stalled = zmq_socket(ctx, ZMQ_SUB);
      int small = 4096, hwm = 16, linger = 0;
      zmq_setsockopt(stalled, ZMQ_RCVBUF, &small, sizeof small);
      zmq_setsockopt(stalled, ZMQ_RCVHWM, &hwm, sizeof hwm);
      zmq_setsockopt(stalled, ZMQ_LINGER, &linger, sizeof linger);
      zmq_connect(stalled, info.endpoint);
      zmq_setsockopt(stalled, ZMQ_SUBSCRIBE, "", 0);
    }
    if (mode == 3) {
      rd.endpoint = info.endpoint;
      pthread_create(&thread, NULL, read_all, &rd);
    }
    struct timespec settle = {0, 100 * 1000000L}; /* subscriptions reach the publisher */
    nanosleep(&settle, NULL);

    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int32_t prompt[512];
    for (uint32_t r = 0; r < num_requests; r++) {
      const uint32_t shared =
          64 * (uint32_t)(bench_next(&rng) % 4); /* 0-3 shared 64-token prefixes */
      for (uint32_t i = 0; i < 512; i++)
        prompt[i] = i < shared ? (int32_t)(i + 1000 * (shared / 64)) : bench_token(&rng);
      pkv_request_params rp;
      pkv_request_params_init(&rp, sizeof rp);
      rp.max_new_tokens = 16;
      uint64_t id;
      s = pkv_submit(e, prompt, 256 + (uint32_t)(bench_next(&rng) % 256), &rp, &id);
      if (s != PKV_OK) return bench_fail(e, "pkv_submit", s);
    }
    int32_t sampled[64];
    uint64_t steps = 0;
    const double t0 = bench_now_ns(), c0 = thread_cpu_s();
    for (;;) {
      pkv_batch *b = NULL;
      s = pkv_step(e, &b);
      if (s != PKV_OK) return bench_fail(e, "pkv_step", s);
      if (!b) break;
      for (int i = 0; i < 64; i++) sampled[i] = bench_token(&rng);
      s = pkv_commit(b, sampled);
      if (s != PKV_OK) return bench_fail(e, "pkv_commit", s);
      steps++;
      uint64_t done[64];
      uint32_t n;
      do {
        pkv_drain_finished(e, done, 64, &n);
        for (uint32_t i = 0; i < n; i++) pkv_release(e, done[i]);
      } while (n == 64);
    }
    per_step[rep] = (bench_now_ns() - t0) * 1e-9 / (double)steps;
    cpu_per_step[rep] = (thread_cpu_s() - c0) / (double)steps;
    out->steps = steps;
    if (mode > 0) {
      uint64_t last = UINT64_MAX;
      for (int i = 0; i < 500; i++) { /* until the thread has sent everything */
        pkv_event_publisher_info(e, &info);
        if (!info.events_queued && info.events_published == last) break;
        last = info.events_published;
        struct timespec ms = {0, 5000000L};
        nanosleep(&ms, NULL);
      }
      out->events = info.events_published;
      out->dropped = info.events_dropped;
      out->batches = info.next_seq;
    }
    if (mode == 3) {
      struct timespec drain = {0, 200 * 1000000L};
      nanosleep(&drain, NULL);
      rd.stop = 1;
      pthread_join(thread, NULL);
      out->messages = rd.messages;
      out->bytes = rd.bytes;
    }
    if (stalled) zmq_close(stalled);
    pkv_engine_destroy(e);
    zmq_ctx_term(ctx);
  }
  out->step_s = bench_median(per_step, reps);
  out->cpu_s = bench_median(cpu_per_step, reps);
  return 0;
}

int main(int argc, char **argv) {
  int quick = 0;
  uint32_t reps = 5, format = PKV_EVENT_FORMAT_MAP;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--format") && i + 1 < argc && !strcmp(argv[i + 1], "map"))
      format = PKV_EVENT_FORMAT_MAP, i++;
    else if (!strcmp(argv[i], "--format") && i + 1 < argc && !strcmp(argv[i + 1], "array"))
      format = PKV_EVENT_FORMAT_ARRAY, i++;
    else {
      fprintf(stderr, "usage: %s [--quick] [--reps N (1..%d)] [--format map|array]\n", argv[0],
              MAX_REPS);
      return 2;
    }
  }
  if (reps < 1 || reps > MAX_REPS) reps = 5;
  if (quick) reps = reps > 3 ? 3 : reps;
  const uint32_t requests = quick ? 200 : 1000;
  bench_calibrate_clock();
  printf("bench_events: %u requests (256-511 prompt tokens, 16 new, 0-3 shared 64-token prefixes), "
         "block %d, 1024-block pool, median of %u passes, %s format\n",
         requests, BS, reps, format == PKV_EVENT_FORMAT_MAP ? "map" : "array");
  printf("%-8s %9s %6s %9s %6s %6s %11s %10s %8s %9s %11s\n", "mode", "cpu us", "ratio", "wall us",
         "ratio", "steps", "events/step", "published", "dropped", "received", "bytes/event");
  double ref = 0, ref_cpu = 0;
  for (int m = 0; m < MODES; m++) {
    result r;
    if (run(m, format, requests, reps, &r)) return 1;
    if (m == 0) ref = r.step_s, ref_cpu = r.cpu_s;
    /* bytes/event only when the reader heard every batch of the last pass ("-" otherwise) */
    char per_event[32] = "-";
    if (r.events && r.messages == r.batches)
      snprintf(per_event, sizeof per_event, "%.1f", (double)r.bytes / (double)r.events);
    printf("%-8s %9.1f %6.2f %9.1f %6.2f %6llu %11.1f %10llu %8llu %9llu %11s\n", kModes[m],
           r.cpu_s * 1e6, r.cpu_s / ref_cpu, r.step_s * 1e6, r.step_s / ref,
           (unsigned long long)r.steps, r.steps ? (double)r.events / (double)r.steps : 0.0,
           (unsigned long long)r.events, (unsigned long long)r.dropped,
           (unsigned long long)r.messages, per_event);
  }
  return 0;
}
