// The store's administration through pkv.h (pkv_store_*) on a Redis server of the test's own
// (redis_server.h; exit 77 without redis-server): an engine writes its blocks under a prefix;
// the admin handle counts and lists them (pages of one), finds a value damaged with SETRANGE,
// removes it, and clears the prefix leaving other prefixes' keys alone. A server that is gone is
// PKV_ERR_STORE, and a failed page leaves the cursor where it was.
#include <hiredis/hiredis.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "redis_server.h"

namespace {

constexpr uint32_t BS = 4;

pkv_store_params redis_params(unsigned port, const char *prefix) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_REDIS;
  sp.port = port;
  sp.key_prefix = prefix;
  sp.connect_timeout_ms = 500;
  sp.io_timeout_ms = 500;
  return sp;
}

// An engine on the server computes a prompt of 13 tokens: 3 full blocks written through.
bool write_blocks(unsigned port, const char *prefix, int32_t first) {
  pkv_store_params sp = redis_params(port, prefix);
  pkv_engine_params p;
  tu_params(&p, BS, 16);
  p.host_num_blocks = 8;
  p.store = &sp;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return false;
  int32_t t[13];
  tu_fill(t, 13, first);
  const uint64_t s = tu_alloc(e, t, 13, nullptr);
  pkv_batch *b = nullptr;
  if (CHECK_OK(pkv_batch_begin(e, &s, nullptr, 1, &b))) CHECK_OK(pkv_batch_end(b));
  pkv_engine_destroy(e);  // the writer thread finishes its queue
  return true;
}

std::vector<pkv_store_entry> list_all(pkv_store *s, uint32_t cap) {
  std::vector<pkv_store_entry> all;
  uint64_t cursor = 0;
  int pages = 0;
  do {
    std::vector<pkv_store_entry> page(cap);
    uint32_t len = 0;
    if (!CHECK_OK(pkv_store_list(s, &cursor, 0, page.data(), sizeof page[0], cap, &len)) ||
        !CHECK(++pages < 1000))
      break;
    all.insert(all.end(), page.begin(), page.begin() + len);
  } while (cursor != 0);
  return all;
}

pkv_store_verify_result verify(pkv_store *s, uint32_t remove_bad) {
  pkv_store_verify_result r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  CHECK_OK(pkv_store_verify(s, remove_bad, &r));
  return r;
}

std::string hex(const uint8_t *b) {
  char out[65];
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
  return out;
}

pkv_test::RedisServer *g_server;

void test_admin() {
  pkv_test::RedisServer &server = *g_server;
  const unsigned port = server.port();
  if (!write_blocks(port, "adm:", 1) || !write_blocks(port, "other:", 1)) return;
  pkv_store_params sp = redis_params(port, "adm:");
  pkv_store *s = nullptr;
  if (!CHECK_OK(pkv_store_open(&sp, &s))) return;
  struct pkv_store_info in;
  std::memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_store_info(s, &in));
  CHECK_EQ_INT(in.kind, PKV_STORE_REDIS);
  CHECK_EQ_INT(in.num_blocks, 3);

  std::vector<pkv_store_entry> e = list_all(s, 1);
  CHECK_EQ_INT(e.size(), 3);
  for (const pkv_store_entry &x : e) {
    CHECK_EQ_INT(x.state, PKV_STORE_VALUE_GOOD);
    CHECK_EQ_INT(x.num_tokens, BS);
    CHECK(in.total_bytes == 3 * x.value_bytes);
  }

  // Damage one value's payload in place (SETRANGE near its end).
  if (e.empty()) return;
  redisContext *c = redisConnect("127.0.0.1", int(port));
  if (!CHECK(c && !c->err)) return;
  const std::string victim = "adm:" + hex(e[1].key.bytes);
  freeReplyObject(redisCommand(c, "SETRANGE %s %llu XYZ", victim.c_str(),
                               static_cast<unsigned long long>(e[1].value_bytes - 8)));
  pkv_store_verify_result r = verify(s, 0);
  CHECK(r.num_blocks == 3 && r.num_good == 2 && r.num_bad == 1);
  CHECK(std::strstr(r.first_bad_problem, "checksum") != nullptr);
  CHECK(std::memcmp(r.first_bad_key.bytes, e[1].key.bytes, 32) == 0);
  r = verify(s, 1);
  CHECK(r.num_removed == 1);
  redisReply *exists = static_cast<redisReply *>(redisCommand(c, "EXISTS %s", victim.c_str()));
  CHECK(exists && exists->integer == 0);
  freeReplyObject(exists);

  uint64_t removed = 0;
  CHECK_OK(pkv_store_clear(s, &removed));
  CHECK_EQ_INT(removed, 2);
  CHECK_EQ_INT(list_all(s, 4).size(), 0);
  redisReply *left = static_cast<redisReply *>(redisCommand(c, "DBSIZE"));
  CHECK(left && left->integer == 3);  // the other prefix's blocks
  freeReplyObject(left);
  redisFree(c);

  // The server gone: a clear error, and a failed page changes nothing.
  std::vector<pkv_store_entry> page(2);
  uint64_t cursor = 0;
  uint32_t len = 0;
  pkv_store_close(s);
  sp = redis_params(port, "other:");
  if (!CHECK_OK(pkv_store_open(&sp, &s))) return;
  CHECK_OK(pkv_store_list(s, &cursor, 0, page.data(), sizeof page[0], 2, &len));
  CHECK(len == 2 && cursor != 0);
  const uint64_t kept = cursor;
  server.kill();
  len = 77;
  CHECK_STATUS(pkv_store_list(s, &cursor, 0, page.data(), sizeof page[0], 2, &len), PKV_ERR_STORE);
  CHECK(cursor == kept && len == 77);
  CHECK_STATUS(pkv_store_info(s, &in), PKV_ERR_STORE);
  fprintf(stderr, "  (server gone: %s)\n", pkv_last_error());
  pkv_store_close(s);
  CHECK_STATUS(pkv_store_open(&sp, &s), PKV_ERR_STORE);
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
  TU_RUN(test_admin);
  return tu_summary();
}
