// A Redis store under hostile or faulty conditions (issue 26 item 12), through pkv.h, on a
// redis-server of the test's own (redis_server.h; exit 77 without one):
//  - the server stops answering (SIGSTOP) while a request decodes and others are submitted: each
//    pkv_step stays well under the 3 s timeouts (the fetcher's connection was made on the engine's
//    thread, so a step waited connect + I/O timeouts per submitted request). A stopped server
//    accepts connections (the kernel's backlog) and answers nothing, as a hung one does; the
//    engine itself is made while it answers (pkv_engine_create connects and PINGs);
//  - the crafted value whose header sizes wrap 64 bits: pkv_store_verify calls it bad (crashed);
//  - a 100 MiB value (SETRANGE, made by the server): verify's peak memory and an engine lookup's
//    stay bounded (both read it whole), and the lookup says what size it found.
#include <hiredis/hiredis.h>
#include <sys/resource.h>
#include <time.h>

#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "redis_server.h"

namespace {

constexpr uint32_t BS = 4, N = 13;
pkv_test::RedisServer *g_server;

pkv_store_params redis_params(const char *prefix, uint32_t timeout_ms) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_REDIS;
  sp.port = g_server->port();
  sp.key_prefix = prefix;
  sp.connect_timeout_ms = timeout_ms;
  sp.io_timeout_ms = timeout_ms;
  sp.lookup_timeout_ms = timeout_ms;
  sp.model_id = "test-model@1";
  return sp;
}

pkv_engine *engine(pkv_store_params *sp) {
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.host_num_blocks = 8;
  p.store = sp;
  return tu_engine_p(&p);
}

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

long max_rss_kib() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs one scheduler step: samples token 1 for every row that samples. Returns its seconds, or
// -1 when there was nothing to run.
double step(pkv_engine *e) {
  const double t0 = now_s();
  pkv_batch *b = nullptr;
  if (!CHECK_OK(pkv_step(e, &b)) || !b) return -1;
  const double took = now_s() - t0;
  const pkv_batch_view v = tu_view(b);
  std::vector<int32_t> sampled(v.num_seqs, 1);
  CHECK_OK(pkv_commit(b, sampled.data()));
  return took;
}

void test_hung_server_steps_fast() {
  pkv_store_params sp = redis_params("hang:", 3000);
  pkv_engine *e = engine(&sp);
  if (!CHECK(e != nullptr)) return;
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 40;
  const int32_t short_prompt[3] = {5, 6, 7};  // under one block: no store lookup
  uint64_t running = 0;
  CHECK_OK(pkv_submit(e, short_prompt, 3, &rp, &running));
  step(e);
  g_server->pause();  // accepts connections (the kernel's backlog), answers nothing
  double worst = 0;
  for (int i = 0; i < 4; i++) {
    int32_t t[N];
    tu_fill(t, N, 100 * (i + 1));
    uint64_t r = 0;
    rp.max_new_tokens = 2;
    CHECK_OK(pkv_submit(e, t, N, &rp, &r));
    for (int k = 0; k < 3; k++) worst = std::max(worst, step(e));
  }
  printf("  (server stopped: slowest of 12 steps %.3f s; timeouts 3 s)\n", worst);
  CHECK(worst < 1.0);
  g_server->resume();
  for (int k = 0; k < 200 && step(e) >= 0; k++) {
  }
  // Every request ran to its end once the server answered again (its lookup a miss).
  CHECK_EQ_INT(tu_stats(e).num_loading_requests, 0);
  uint64_t done[8];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_finished(e, done, 8, &n));
  CHECK_EQ_INT(n, 5);
  pkv_engine_destroy(e);
}

redisContext *client() {
  redisContext *c = redisConnect("127.0.0.1", int(g_server->port()));
  if (!CHECK(c != nullptr && !c->err)) return nullptr;
  return c;
}

bool command(redisContext *c, const char *fmt, const std::string &key, const void *bytes,
             size_t n) {
  redisReply *r = static_cast<redisReply *>(redisCommand(c, fmt, key.c_str(), bytes, n));
  const bool ok = r && r->type != REDIS_REPLY_ERROR;
  if (r) freeReplyObject(r);
  return ok;
}

pkv_store_verify_result verify(const char *prefix) {
  pkv_store_params sp = redis_params(prefix, 3000);
  pkv_store_verify_result r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  pkv_store *s = nullptr;
  if (CHECK_OK(pkv_store_open(&sp, &s))) CHECK_OK(pkv_store_verify(s, 0, &r));
  pkv_store_close(s);
  return r;
}

void test_wrapping_sizes() {
  std::vector<uint8_t> v(16600, 0);
  memcpy(v.data(), "PKVSTORE", 8);
  const uint32_t version = 1, header = 152, tokens = 1u << 30;
  const uint64_t payload = 16600 - 152 - (uint64_t(4) << 30);
  memcpy(v.data() + 8, &version, 4);
  memcpy(v.data() + 12, &header, 4);
  memcpy(v.data() + 112, &tokens, 4);
  memcpy(v.data() + 120, &payload, 8);
  redisContext *c = client();
  if (!c) return;
  CHECK(command(c, "SET %s %b", "wrap:" + std::string(64, 'a'), v.data(), v.size()));
  redisFree(c);
  const pkv_store_verify_result r = verify("wrap:");
  CHECK_EQ_INT(r.num_blocks, 1);
  CHECK_EQ_INT(r.num_bad, 1);
  CHECK(strstr(r.first_bad_problem, "1073741824 tokens") != nullptr);
}

// A 100 MiB value under a block's key: administration and lookups read none of it past a header
// or a block's size.
void test_huge_value() {
  pkv_store_params sp = redis_params("huge:", 3000);
  pkv_engine *e = engine(&sp);
  if (!CHECK(e != nullptr)) return;
  int32_t t[N];
  tu_fill(t, N, 500);
  const uint64_t s = tu_alloc(e, t, N, nullptr);
  tu_compute1(e, s);
  pkv_engine_destroy(e);  // 3 blocks written
  // The first block of the chain: the one whose parent is no block's key.
  pkv_store *admin = nullptr;
  if (!CHECK_OK(pkv_store_open(&sp, &admin))) return;
  pkv_store_entry entries[8];
  uint64_t cursor = 0;
  uint32_t len = 0;
  CHECK_OK(pkv_store_list(admin, &cursor, 0, entries, sizeof entries[0], 8, &len));
  pkv_store_close(admin);
  if (!CHECK_EQ_INT(len, 3)) return;
  const pkv_store_entry *first = nullptr;
  for (uint32_t i = 0; i < len; i++) {
    bool parent_listed = false;
    for (uint32_t j = 0; j < len; j++)
      parent_listed |= memcmp(entries[i].parent.bytes, entries[j].key.bytes, 32) == 0;
    if (!parent_listed) first = &entries[i];
  }
  if (!CHECK(first != nullptr)) return;
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", first->key.bytes[i]);
  const uint64_t block_value = first->value_bytes, huge = uint64_t(100) << 20;
  redisContext *c = client();
  if (!c) return;
  const uint8_t zero = 0;  // the server pads with zeros up to the offset: the client sends 1 byte
  const std::string setrange = "SETRANGE %s " + std::to_string(huge - 1) + " %b";
  CHECK(command(c, setrange.c_str(), std::string("huge:") + hex, &zero, 1));
  redisFree(c);
  const long before = max_rss_kib();
  const pkv_store_verify_result r = verify("huge:");
  CHECK_EQ_INT(r.num_bad, 1);
  CHECK_EQ_INT(r.num_good, 2);
  e = engine(&sp);
  if (CHECK(e != nullptr)) {
    uint32_t cached = 99;
    CHECK_OK(pkv_release(e, tu_alloc(e, t, N, &cached)));
    CHECK_EQ_INT(cached, 0);
    CHECK_EQ_INT(tu_stats(e).num_store_rejected, 1);
    char why[512] = "";
    uint32_t n = 0;
    CHECK_OK(pkv_engine_store_error(e, why, sizeof why, &n));
    const std::string want = std::to_string(huge) + " bytes, a block is " +
                             std::to_string(block_value) + " bytes (padded)";
    CHECK(strstr(why, want.c_str()) != nullptr);
    if (!strstr(why, want.c_str())) fprintf(stderr, "  store error: %s\n", why);
    pkv_engine_destroy(e);
  }
  const long grown_mib = (max_rss_kib() - before) / 1024;
  printf("  (verify and a lookup of a 100 MiB value: peak RSS grew %ld MiB)\n", grown_mib);
  CHECK(grown_mib < 64);
}

}  // namespace

int main() {
  std::string bin = pkv_test::redis_server_or_skip();
  pkv_test::RedisServer server(bin, "");
  if (!server.start()) {
    fprintf(stderr, "FAIL: could not start redis-server\n");
    return 1;
  }
  g_server = &server;
  TU_RUN(test_huge_value);  // first: its peak-memory bound is measured from this process's start
  TU_RUN(test_wrapping_sizes);
  TU_RUN(test_hung_server_steps_fast);
  return tu_summary();
}
