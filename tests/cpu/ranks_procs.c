/*
 * ranks_procs.c - ranks_procs.h: child processes holding ranks POOL engines, and the messages
 * that drive them. A message is a command byte, then its fields; every reply starts with the
 * call's status.
 */
#define _POSIX_C_SOURCE 200809L
#include "ranks_procs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { MAX_CHILDREN = 16 };

typedef struct child {
  pid_t pid;
  int to, from; /* the parent's ends */
} child;

static child children[MAX_CHILDREN];
static uint32_t num_children;

static void put(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n) {
    const ssize_t w = write(fd, c, n);
    if (w <= 0) {
      perror("ranks_procs: write");
      exit(3);
    }
    c += w, n -= (size_t)w;
  }
}

static void get(int fd, void *p, size_t n) {
  char *c = p;
  while (n) {
    const ssize_t r = read(fd, c, n);
    if (r <= 0) {
      if (r < 0) perror("ranks_procs: read");
      exit(3); /* the other side is gone */
    }
    c += r, n -= (size_t)r;
  }
}

static void *take(int fd, uint64_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) exit(4);
  get(fd, p, n);
  return p;
}

/* ---------------------------------------------------------------- the child */
static void serve(pkv_engine *e, int in, int out) {
  pkv_batch *b = NULL;
  for (;;) {
    char cmd;
    get(in, &cmd, 1);
    pkv_status s = PKV_OK;
    if (cmd == 'Q') break;
    if (cmd == 'P') {
      uint64_t len;
      get(in, &len, sizeof len);
      void *plan = take(in, len);
      pkv_batch *nb = NULL;
      s = pkv_plan_import(e, plan, len, &nb);
      if (s == PKV_OK) b = nb;
      free(plan);
      put(out, &s, sizeof s);
    } else if (cmd == 'A') {
      uint32_t f[4]; /* layer, tokens, row_q, row_kv */
      get(in, f, sizeof f);
      const uint64_t nq = (uint64_t)f[1] * f[2], nkv = (uint64_t)f[1] * f[3];
      float *q = take(in, nq * 4), *k = take(in, nkv * 4), *v = take(in, nkv * 4);
      float *o = calloc(nq ? nq : 1, 4);
      s = pkv_attention(b, f[0], q, k, v, o);
      put(out, &s, sizeof s);
      put(out, o, nq * 4);
      free(q), free(k), free(v), free(o);
    } else if (cmd == 'E') {
      s = pkv_batch_end(b);
      if (s == PKV_OK) b = NULL;
      put(out, &s, sizeof s);
    } else if (cmd == 'D') {
      struct pkv_pool_info info;
      memset(&info, 0, sizeof info);
      info.struct_size = sizeof info;
      s = pkv_pool_info(e, &info);
      put(out, &s, sizeof s);
      put(out, &info, sizeof info);
      put(out, info.k_base, info.bytes_per_pool);
      put(out, info.v_base, info.bytes_per_pool);
      put(out, info.host_k_base, info.host_bytes_per_pool);
      put(out, info.host_v_base, info.host_bytes_per_pool);
    } else {
      fprintf(stderr, "ranks_procs: unknown command %d\n", cmd);
      exit(5);
    }
    if (s != PKV_OK) fprintf(stderr, "rank child: %c: %s\n", cmd, pkv_engine_last_error(e));
  }
  if (b) pkv_batch_abort(b);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- the parent */
void rp_start(uint32_t num_ranks, pkv_engine *(*make_pool)(uint32_t rank)) {
  num_children = num_ranks - 1;
  for (uint32_t r = 1; r < num_ranks; ++r) {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) {
      perror("ranks_procs: pipe");
      exit(3);
    }
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
      perror("ranks_procs: fork");
      exit(3);
    }
    if (pid == 0) {
      close(down[1]), close(up[0]);
      for (uint32_t c = 1; c < r; ++c) close(children[c - 1].to), close(children[c - 1].from);
      pkv_engine *e = make_pool(r);
      if (!e) _exit(6);
      serve(e, down[0], up[1]);
      _exit(0);
    }
    close(down[0]), close(up[1]);
    children[r - 1] = (child){pid, down[1], up[0]};
  }
}

int rp_stop(void) {
  int ok = 1;
  for (uint32_t c = 0; c < num_children; ++c) {
    put(children[c].to, "Q", 1);
    close(children[c].to), close(children[c].from);
    int status = 0;
    waitpid(children[c].pid, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  num_children = 0;
  return ok;
}

static child *of(uint32_t rank) { return &children[rank - 1]; }

pkv_status rp_import(uint32_t rank, const void *plan, uint64_t len) {
  child *c = of(rank);
  put(c->to, "P", 1);
  put(c->to, &len, sizeof len);
  put(c->to, plan, len);
  pkv_status s;
  get(c->from, &s, sizeof s);
  return s;
}

pkv_status rp_attention(uint32_t rank, uint32_t layer, uint32_t num_tokens, uint32_t row_q,
                        uint32_t row_kv, const float *q, const float *k, const float *v,
                        float *out) {
  child *c = of(rank);
  const uint32_t f[4] = {layer, num_tokens, row_q, row_kv};
  put(c->to, "A", 1);
  put(c->to, f, sizeof f);
  put(c->to, q, (size_t)num_tokens * row_q * 4);
  put(c->to, k, (size_t)num_tokens * row_kv * 4);
  put(c->to, v, (size_t)num_tokens * row_kv * 4);
  pkv_status s;
  get(c->from, &s, sizeof s);
  get(c->from, out, (size_t)num_tokens * row_q * 4);
  return s;
}

pkv_status rp_end(uint32_t rank) {
  child *c = of(rank);
  put(c->to, "E", 1);
  pkv_status s;
  get(c->from, &s, sizeof s);
  return s;
}

pkv_status rp_dump(uint32_t rank, struct pkv_pool_info *info, void *k, void *v, void *hk,
                   void *hv) {
  child *c = of(rank);
  put(c->to, "D", 1);
  pkv_status s;
  get(c->from, &s, sizeof s);
  get(c->from, info, sizeof *info);
  get(c->from, k, info->bytes_per_pool);
  get(c->from, v, info->bytes_per_pool);
  get(c->from, hk, info->host_bytes_per_pool);
  get(c->from, hv, info->host_bytes_per_pool);
  return s;
}
