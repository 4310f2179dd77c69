/*
 * bench_store.c - whole-block put and get through the store tier's backends (src/tiers: the file
 * store and the Redis store, built into the bench from their sources, no engine around them),
 * each next to a reference measured in the same run on the same bytes:
 *   file   store put   against a plain sequential write of the same bytes into one file, with an
 *                      fsync per block (the store fsyncs each block: the fair reference) and
 *                      without any; store get against a sequential read of that file (both from
 *                      the page cache: everything was just written)
 *   redis  store put / get (one connection, a batch = a pipeline) against
 *          `redis-benchmark -t set,get -d <value bytes> -n <blocks> -P <batch> -c 1` on the same
 *          server: a redis-server of the bench's own on a free port of 127.0.0.1, no persistence,
 *          stopped at the end. Without redis-server or redis-benchmark, Redis is skipped (said so).
 * Two block shapes: Llama-3-8B's (32 layers, 8 kv heads of 128, bf16, block 16: 2 MiB of K and V)
 * and a small one (8 layers, 4 kv heads of 64: 128 KiB). Median of --reps passes (default 3).
 *
 * Run: build/bench/bench_store [--quick] [--reps N] [--dir DIR (default $TMPDIR or /tmp)]
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_store_backend.h"
#include "bench_util.h"

enum { MAX_REPS = 9, BATCH = 16 };
enum {
  OP_PUT,
  OP_GET,
  OP_REF_WRITE_FSYNC,
  OP_REF_WRITE,
  OP_REF_FILES,
  OP_REF_READ,
  OP_REF_SET,
  OP_REF_GET,
  NUM_STORE_OPS
};

typedef struct shape {
  const char *name;
  uint32_t layers, kv_heads, head_dim, block_size;
} shape;

typedef struct pass_data {
  uint64_t value_bytes;
  uint32_t num_blocks;
  uint8_t *keys, *values, *out;      /* [num_blocks][32], [num_blocks][value_bytes] twice */
  double s[NUM_STORE_OPS][MAX_REPS]; /* seconds per pass */
} pass_data;

static double now_s(void) { return bench_now_ns() * 1e-9; }

static int io_all(int fd, void *buf, uint64_t n, int writing) {
  for (char *p = buf; n > 0;) {
    const ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k, n -= (uint64_t)k;
  }
  return 0;
}

/* The reference write: the blocks one after the other into path, with an fsync after each or none. */
static int ref_write(const char *path, const pass_data *d, int fsync_each, double *s) {
  const double t = now_s();
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = fd < 0 ? -1 : 0;
  for (uint32_t i = 0; rc == 0 && i < d->num_blocks; i++) {
    rc = io_all(fd, d->values + (uint64_t)i * d->value_bytes, d->value_bytes, 1);
    if (rc == 0 && fsync_each) rc = fsync(fd);
  }
  *s = now_s() - t;
  if (fd >= 0 && !fsync_each) fsync(fd); /* untimed: no writeback left to slow what runs next */
  if (fd >= 0) close(fd);
  if (rc != 0) fprintf(stderr, "bench_store: writing %s: %s\n", path, strerror(errno));
  return rc;
}

/* The reference of a file per block: each block into a new file of dir, fsync'ed (no rename and no
 * directory fsync, which the store adds for crash safety). */
static int ref_files(const char *dir, const pass_data *d, double *s) {
  char path[4400];
  int rc = mkdir(dir, 0755);
  const double t = now_s();
  for (uint32_t i = 0; rc == 0 && i < d->num_blocks; i++) {
    snprintf(path, sizeof path, "%s/%u", dir, i);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    rc = fd < 0 ? -1 : io_all(fd, d->values + (uint64_t)i * d->value_bytes, d->value_bytes, 1);
    if (rc == 0) rc = fsync(fd);
    if (fd >= 0) close(fd);
  }
  *s = now_s() - t;
  if (rc != 0) fprintf(stderr, "bench_store: writing under %s: %s\n", dir, strerror(errno));
  return rc;
}

static int ref_read(const char *path, pass_data *d, double *s) {
  const double t = now_s();
  const int fd = open(path, O_RDONLY);
  int rc = fd < 0 ? -1 : 0;
  for (uint32_t i = 0; rc == 0 && i < d->num_blocks; i++)
    rc = io_all(fd, d->out + (uint64_t)i * d->value_bytes, d->value_bytes, 0);
  if (fd >= 0) close(fd);
  *s = now_s() - t;
  if (rc != 0) fprintf(stderr, "bench_store: reading %s: %s\n", path, strerror(errno));
  return rc;
}

/* Every block in batches of BATCH: put (get = 0) or get, checking that all come back intact. */
static int store_pass(bench_store *st, pass_data *d, int get, double *s) {
  char why[512] = "";
  uint32_t found = 0, all = 0;
  int rc = 0;
  memset(d->out, 0, (uint64_t)d->num_blocks * d->value_bytes);
  const double t = now_s();
  for (uint32_t i = 0; rc == 0 && i < d->num_blocks; i += BATCH) {
    const uint32_t n = d->num_blocks - i < BATCH ? d->num_blocks - i : BATCH;
    const uint64_t at = (uint64_t)i * d->value_bytes;
    rc = get ? bench_store_get(st, d->keys + 32ull * i, n, d->out + at, d->value_bytes, &found, why,
                               sizeof why)
             : bench_store_put(st, d->keys + 32ull * i, n, d->values + at, d->value_bytes, why,
                               sizeof why);
    all += found;
  }
  *s = now_s() - t;
  if (rc == 0 && get &&
      (all != d->num_blocks || memcmp(d->out, d->values, (uint64_t)d->num_blocks * d->value_bytes)))
    snprintf(why, sizeof why, "%u of %u blocks came back intact", all, d->num_blocks), rc = -1;
  if (rc != 0) fprintf(stderr, "bench_store: store %s: %s\n", get ? "get" : "put", why);
  return rc;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *f) {
  (void)sb, (void)flag, (void)f;
  return remove(path);
}

/* One file pass: in a new directory under base, the references and the store's put and get. */
static int file_pass(const char *base, pass_data *d, int rep) {
  char dir[4096], path[4200], why[512];
  snprintf(dir, sizeof dir, "%s/pkv-bench-store-XXXXXX", base);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "bench_store: mkdtemp under %s: %s\n", base, strerror(errno));
    return -1;
  }
  snprintf(path, sizeof path, "%s/store", dir);
  bench_store *st = bench_store_open_file(path, why, sizeof why);
  if (!st) fprintf(stderr, "bench_store: file store: %s\n", why);
  snprintf(path, sizeof path, "%s/ref", dir);
  int rc = st ? 0 : -1;
  if (rc == 0) rc = ref_write(path, d, 1, &d->s[OP_REF_WRITE_FSYNC][rep]);
  if (rc == 0) rc = store_pass(st, d, 0, &d->s[OP_PUT][rep]);
  if (rc == 0) rc = ref_read(path, d, &d->s[OP_REF_READ][rep]);
  if (rc == 0) rc = store_pass(st, d, 1, &d->s[OP_GET][rep]);
  snprintf(path, sizeof path, "%s/ref-files", dir);
  if (rc == 0) rc = ref_files(path, d, &d->s[OP_REF_FILES][rep]);
  snprintf(path, sizeof path, "%s/ref-no-fsync", dir);
  if (rc == 0) rc = ref_write(path, d, 0, &d->s[OP_REF_WRITE][rep]);
  if (st) bench_store_close(st);
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return rc;
}

/* ------------------------------------------------------------------ Redis */

static int on_path(const char *name, char *out, size_t cap) {
  const char *path = getenv("PATH");
  char dirs[8192];
  snprintf(dirs, sizeof dirs, "%s:/usr/sbin:/usr/bin", path ? path : "");
  for (char *save = NULL, *dir = strtok_r(dirs, ":", &save); dir;
       dir = strtok_r(NULL, ":", &save)) {
    snprintf(out, cap, "%s/%s", dir, name);
    if (access(out, X_OK) == 0) return 1;
  }
  return 0;
}

static uint32_t free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  uint32_t port = 0;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

typedef struct redis_server {
  pid_t pid;
  uint32_t port;
  char dir[4096];
} redis_server;

/* A redis-server of our own on 127.0.0.1 (dies with us: PR_SET_PDEATHSIG); 0 once it answers. */
static int redis_start(const char *exe, const char *base, redis_server *r) {
  snprintf(r->dir, sizeof r->dir, "%s/pkv-bench-redis-XXXXXX", base);
  if (!mkdtemp(r->dir) || (r->port = free_port()) == 0) return -1;
  char port[16];
  snprintf(port, sizeof port, "%u", r->port);
  fflush(stdout), fflush(stderr);
  if ((r->pid = fork()) == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1), dup2(null, 2);
    execl(exe, exe, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
          "--dir", r->dir, (char *)NULL);
    _exit(127);
  }
  char why[512];
  for (int tries = 0; r->pid > 0 && tries < 100; tries++) {
    bench_store *st = bench_store_open_redis(r->port, why, sizeof why);
    if (st) return bench_store_close(st), 0;
    usleep(50000);
  }
  fprintf(stderr, "bench_store: redis-server on port %u did not answer: %s\n", r->port, why);
  return -1;
}

static void redis_stop(redis_server *r) {
  if (r->pid > 0) {
    kill(r->pid, SIGTERM);
    waitpid(r->pid, NULL, 0);
  }
  nftw(r->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* redis-benchmark's SET and GET requests per second (CSV) for the pass's blocks. */
static int redis_benchmark(const char *exe, uint32_t port, const pass_data *d, double rps[2]) {
  char cmd[8192], line[512];
  snprintf(cmd, sizeof cmd,
           "%s -h 127.0.0.1 -p %u -t set,get -d %llu -n %u -P %u -c 1 --csv 2>/dev/null", exe, port,
           (unsigned long long)d->value_bytes, d->num_blocks, BATCH);
  FILE *f = popen(cmd, "r");
  if (!f) return -1;
  rps[0] = rps[1] = 0;
  while (fgets(line, sizeof line, f)) {
    double v;
    if (sscanf(line, "\"SET\",\"%lf\"", &v) == 1) rps[0] = v;
    if (sscanf(line, "\"GET\",\"%lf\"", &v) == 1) rps[1] = v;
  }
  return pclose(f) == 0 && rps[0] > 0 && rps[1] > 0 ? 0 : -1;
}

static int redis_pass(const char *bench_exe, uint32_t port, pass_data *d, int rep) {
  char why[512];
  bench_store *st = bench_store_open_redis(port, why, sizeof why);
  if (!st) {
    fprintf(stderr, "bench_store: redis store: %s\n", why);
    return -1;
  }
  int rc = store_pass(st, d, 0, &d->s[OP_PUT][rep]);
  if (rc == 0) rc = store_pass(st, d, 1, &d->s[OP_GET][rep]);
  bench_store_close(st);
  double rps[2];
  if (rc == 0 && (rc = redis_benchmark(bench_exe, port, d, rps)) != 0)
    fprintf(stderr, "bench_store: redis-benchmark failed\n");
  if (rc == 0)
    d->s[OP_REF_SET][rep] = d->num_blocks / rps[0], d->s[OP_REF_GET][rep] = d->num_blocks / rps[1];
  return rc;
}

/* ------------------------------------------------------------------ report */

static double median_s(const pass_data *d, int op, int reps) {
  return bench_median(d->s[op], (uint32_t)reps);
}

static void print_op(const pass_data *d, int reps, const char *label, int op, int ref) {
  const double s = median_s(d, op, reps), bytes = (double)d->num_blocks * (double)d->value_bytes;
  printf("  %-44s %8.2f %10.0f", label, bytes / s / 1e9, d->num_blocks / s);
  if (ref >= 0) printf("   %5.0f%%", 100.0 * median_s(d, ref, reps) / s);
  printf("\n");
}

static int run_shape(const shape *sh, const char *base, const char *redis_bench, uint32_t port,
                     int reps, uint64_t pass_bytes) {
  pass_data d;
  memset(&d, 0, sizeof d);
  d.value_bytes = bench_store_value_bytes(sh->layers, sh->kv_heads, sh->head_dim, sh->block_size);
  const uint64_t kv_bytes = 2ull * sh->layers * sh->block_size * sh->kv_heads * sh->head_dim * 2;
  d.num_blocks = (uint32_t)(pass_bytes / kv_bytes);
  if (d.num_blocks < BATCH) d.num_blocks = BATCH;
  d.keys = malloc(32ull * d.num_blocks);
  d.values = malloc((uint64_t)d.num_blocks * d.value_bytes);
  d.out = malloc((uint64_t)d.num_blocks * d.value_bytes);
  int rc = d.keys && d.values && d.out ? 0 : -1;
  uint64_t rng = 42;
  for (uint64_t i = 0; rc == 0 && i < 32ull * d.num_blocks; i += 8) {
    const uint64_t x = bench_next(&rng);
    memcpy(d.keys + i, &x, 8);
  }
  for (uint64_t i = 0; rc == 0 && i + 8 <= (uint64_t)d.num_blocks * d.value_bytes; i += 8) {
    const uint64_t x = bench_next(&rng);
    memcpy(d.values + i, &x, 8);
  }
  printf(
      "\n%s: %u layers, %u kv heads of %u, bf16, block %u: %.0f KiB of K/V + %llu B of header and\n"
      "tokens per block; %u blocks (%.0f MiB) per pass, in batches of %u\n",
      sh->name, sh->layers, sh->kv_heads, sh->head_dim, sh->block_size, kv_bytes / 1024.0,
      (unsigned long long)(d.value_bytes - kv_bytes), d.num_blocks,
      (double)d.num_blocks * (double)d.value_bytes / 1048576.0, BATCH);
  printf("  %-44s %8s %10s   %s\n", "", "GB/s", "blocks/s", "of ref");
  for (int rep = 0; rc == 0 && rep < reps; rep++) rc = file_pass(base, &d, rep);
  if (rc == 0) {
    print_op(&d, reps, "file store put (fsync each block, rename)", OP_PUT, OP_REF_WRITE_FSYNC);
    print_op(&d, reps, "  ref: sequential write, fsync each block", OP_REF_WRITE_FSYNC, -1);
    print_op(&d, reps, "  ref: sequential write, no fsync", OP_REF_WRITE, -1);
    print_op(&d, reps, "  (a new file per block, fsync each)", OP_REF_FILES, -1);
    print_op(&d, reps, "file store get (page cache)", OP_GET, OP_REF_READ);
    print_op(&d, reps, "  ref: sequential read (page cache)", OP_REF_READ, -1);
  }
  for (int rep = 0; rc == 0 && port && rep < reps; rep++)
    rc = redis_pass(redis_bench, port, &d, rep);
  if (rc == 0 && port) {
    print_op(&d, reps, "redis store put (one connection, pipelined)", OP_PUT, OP_REF_SET);
    print_op(&d, reps, "  ref: redis-benchmark SET -c 1 -P 16", OP_REF_SET, -1);
    print_op(&d, reps, "redis store get", OP_GET, OP_REF_GET);
    print_op(&d, reps, "  ref: redis-benchmark GET -c 1 -P 16", OP_REF_GET, -1);
  }
  free(d.keys), free(d.values), free(d.out);
  return rc;
}

int main(int argc, char **argv) {
  int quick = 0, reps = 3;
  const char *base = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0)
      quick = 1;
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
      base = argv[++i];
    else {
      fprintf(stderr, "usage: bench_store [--quick] [--reps N (1..%d)] [--dir DIR]\n", MAX_REPS);
      return 2;
    }
  }
  if (reps < 1 || reps > MAX_REPS) reps = reps < 1 ? 1 : MAX_REPS;
  signal(SIGPIPE, SIG_IGN);
  char server[4096], bench[4096];
  redis_server rs;
  memset(&rs, 0, sizeof rs);
  const int have_redis = on_path("redis-server", server, sizeof server) &&
                         on_path("redis-benchmark", bench, sizeof bench);
  printf(
      "pkv bench_store: whole blocks through src/tiers' stores, median of %d passes; file store and\n"
      "references under %s\n",
      reps, base);
  if (!have_redis)
    printf(
        "Redis: skipped (redis-server or redis-benchmark not found: Debian redis-server, redis-tools)\n");
  else if (redis_start(server, base, &rs) != 0)
    return redis_stop(&rs), 1;
  else
    printf("Redis: a redis-server of the bench's own on 127.0.0.1:%u (no persistence)\n", rs.port);
  const shape shapes[2] = {{"Llama-3-8B", 32, 8, 128, 16}, {"small", 8, 4, 64, 16}};
  int rc = 0;
  for (int i = 0; rc == 0 && i < 2; i++)
    rc = run_shape(&shapes[i], base, bench, rs.port, reps, quick ? 64ull << 20 : 256ull << 20);
  if (have_redis) redis_stop(&rs);
  return rc == 0 ? 0 : 1;
}
