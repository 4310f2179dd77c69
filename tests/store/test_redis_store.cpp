// src/tiers/redis_store.cpp against a redis-server of the test's own (redis_server.h; exit 77
// without one): binary values round trip (zero bytes, 4 MiB, 256 keys in one get), misses, a value
// of another size is a miss, key prefixes and databases keep stores apart, TTL, AUTH (right,
// wrong, missing password; ACL user), a refused connection at create; and a server that is killed,
// restarted (with and without the store noticing in between) or stopped (SIGSTOP): calls fail
// within their timeouts and later ones work again. Two stores on two threads, as an engine has.
// Listing (SCAN pages under a prefix with glob characters) and removing, as `pkv store` does.
#include "tiers/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.h"
#include "status.h"

namespace {

int passed, failed;

bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_redis_store.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)
// A StoreStatus that must be ok; its message when it is not.
#define CHECK_OK(s)                                                                      \
  do {                                                                                   \
    pkv::StoreStatus s_ = (s);                                                           \
    if (!check(s_.ok, #s, __LINE__)) fprintf(stderr, "  error: %s\n", s_.error.c_str()); \
  } while (0)

using pkv::StoreKey;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

StoreKey key_of(uint64_t id) {
  StoreKey k;
  for (int i = 0; i < 32; ++i) {
    id = id * 6364136223846793005ull + 1442695040888963407ull;
    k.bytes[i] = uint8_t(id >> 56);
  }
  return k;
}

std::vector<StoreKey> keys_of(uint64_t first, size_t n) {
  std::vector<StoreKey> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(key_of(first + i));
  return keys;
}

// n values of value_bytes: random bytes, every 7th one zero, and value 0 all zeros.
std::vector<uint8_t> values_of(uint32_t seed, size_t n, size_t value_bytes) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n * value_bytes);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 0 ? 0 : uint8_t(rng());
  if (n && value_bytes) std::memset(v.data(), 0, value_bytes);
  return v;
}

struct Params {
  pkv_store_params p{};
  std::string prefix;
  explicit Params(unsigned port, std::string key_prefix = "t:") : prefix(std::move(key_prefix)) {
    p.struct_size = sizeof p;
    p.kind = PKV_STORE_REDIS;
    p.port = port;
    p.key_prefix = prefix.c_str();
    p.connect_timeout_ms = 1000;
    p.io_timeout_ms = 1000;
  }
};

// make_redis_store's failure: its status and message ("" status 0 when it did not throw).
std::pair<pkv_status, std::string> create_error(const pkv_store_params &p) {
  try {
    pkv::make_redis_store(p);
  } catch (const pkv::Error &e) {
    return {e.status(), e.what()};
  }
  return {PKV_OK, ""};
}

bool contains(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

void test_round_trip(unsigned port) {
  const size_t n = 6, vb = 1000;
  auto store = pkv::make_redis_store(Params(port, "rt:").p);
  CHECK(std::string(store->kind()) == "redis");
  auto keys = keys_of(100, n);
  auto values = values_of(1, n, vb);
  CHECK_OK(store->put(keys.data(), n, values.data(), vb));

  // Asked for with two keys never written, in between.
  std::vector<StoreKey> ask = {keys[0],     key_of(900), keys[1], keys[2],
                               key_of(901), keys[3],     keys[4], keys[5]};
  std::vector<uint8_t> got(ask.size() * vb, 0xee), found(ask.size(), 9), held(ask.size(), 9);
  CHECK_OK(store->get(ask.data(), ask.size(), got.data(), vb, found.data(), 0));
  CHECK_OK(store->exists(ask.data(), ask.size(), held.data()));
  const int want[] = {0, -1, 1, 2, -1, 3, 4, 5};
  for (size_t i = 0; i < ask.size(); ++i) {
    CHECK(found[i] == (want[i] >= 0));
    CHECK(held[i] == (want[i] >= 0));
    if (want[i] >= 0) CHECK(std::memcmp(&got[i * vb], &values[want[i] * vb], vb) == 0);
  }

  // A put replaces.
  auto again = values_of(2, 1, vb);
  again[0] = 0x5a;
  CHECK_OK(store->put(&keys[3], 1, again.data(), vb));
  CHECK_OK(store->get(&keys[3], 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 1 && std::memcmp(got.data(), again.data(), vb) == 0);

  // n == 0 is nothing to do.
  CHECK_OK(store->get(keys.data(), 0, got.data(), vb, found.data(), 0));
  CHECK_OK(store->put(keys.data(), 0, values.data(), vb));
}

// A value of another size under the key (another writer's, a truncated one) is not read: found
// kStoreWrongSize with its size (an empty one too), a key never written kStoreAbsent.
void test_wrong_size(unsigned port) {
  auto store = pkv::make_redis_store(Params(port, "ws:").p);
  auto keys = keys_of(200, 3);
  auto shorter = values_of(3, 1, 999), longer = values_of(4, 1, 1001), empty = values_of(5, 1, 0);
  CHECK_OK(store->put(&keys[0], 1, shorter.data(), 999));
  CHECK_OK(store->put(&keys[1], 1, longer.data(), 1001));
  CHECK_OK(store->put(&keys[2], 1, empty.data(), 0));
  std::vector<uint8_t> got(4 * 1000, 0xEE), found(4, 9), held(3, 9);
  std::vector<uint64_t> sizes(4, 9);
  auto four = keys_of(200, 4);  // keys[0..2], then one never written
  CHECK_OK(store->get(four.data(), 4, got.data(), 1000, found.data(), 0, sizes.data()));
  CHECK(found[0] == pkv::kStoreWrongSize && found[1] == pkv::kStoreWrongSize &&
        found[2] == pkv::kStoreWrongSize);
  CHECK(found[3] == pkv::kStoreAbsent);
  CHECK(sizes[0] == 999 && sizes[1] == 1001 && sizes[2] == 0 && sizes[3] == 0);
  CHECK(std::count(got.begin(), got.end(), 0xEE) == 4000);  // nothing copied
  CHECK_OK(store->exists(keys.data(), 3, held.data()));
  CHECK(held[0] == 1 && held[1] == 1 && held[2] == 1);  // exists is a hint
}

// Different prefixes, or databases, never see each other's blocks.
void test_isolation(unsigned port) {
  const size_t vb = 64;
  auto a = pkv::make_redis_store(Params(port, "iso-a:").p);
  auto b = pkv::make_redis_store(Params(port, "iso-b:").p);
  Params db1(port, "iso-a:");
  db1.p.database = 1;
  auto c = pkv::make_redis_store(db1.p);
  StoreKey k = key_of(300);
  auto va = values_of(6, 1, vb), vb_ = values_of(7, 1, vb);
  CHECK_OK(a->put(&k, 1, va.data(), vb));
  std::vector<uint8_t> got(vb), found(1, 9);
  CHECK_OK(b->get(&k, 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 0);
  CHECK_OK(c->get(&k, 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 0);
  CHECK_OK(b->put(&k, 1, vb_.data(), vb));
  CHECK_OK(a->get(&k, 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 1 && std::memcmp(got.data(), va.data(), vb) == 0);
  CHECK_OK(b->get(&k, 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 1 && std::memcmp(got.data(), vb_.data(), vb) == 0);

  // A database the server does not have is a clear error at create.
  Params bad_db(port);
  bad_db.p.database = 100000;
  auto [status, message] = create_error(bad_db.p);
  CHECK(status == PKV_ERR_STORE);
  CHECK(contains(message, "DB index is out of range"));
}

void test_ttl(unsigned port) {
  const size_t vb = 32;
  Params p(port, "ttl:");
  p.p.ttl_seconds = 1;
  auto store = pkv::make_redis_store(p.p);
  StoreKey k = key_of(400);
  auto v = values_of(8, 1, vb);
  CHECK_OK(store->put(&k, 1, v.data(), vb));
  std::vector<uint8_t> got(vb), found(1, 9);
  CHECK_OK(store->get(&k, 1, got.data(), vb, found.data(), 0));
  CHECK(found[0] == 1);
  auto t0 = Clock::now();
  while (found[0] == 1 && ms_since(t0) < 3000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK_OK(store->get(&k, 1, got.data(), vb, found.data(), 0));
  }
  CHECK(found[0] == 0);
  CHECK(ms_since(t0) >= 500);  // not gone at once
}

void test_large_value(unsigned port) {
  const size_t vb = size_t(4) << 20;
  auto store = pkv::make_redis_store(Params(port, "big:").p);
  auto keys = keys_of(500, 2);
  auto values = values_of(9, 2, vb);
  CHECK_OK(store->put(keys.data(), 2, values.data(), vb));
  std::vector<uint8_t> got(2 * vb), found(2, 9);
  CHECK_OK(store->get(keys.data(), 2, got.data(), vb, found.data(), 5000));
  CHECK(found[0] == 1 && found[1] == 1);
  CHECK(got == values);
}

void test_batch_256(unsigned port) {
  const size_t n = 256, vb = 4096;
  auto store = pkv::make_redis_store(Params(port, "batch:").p);
  auto keys = keys_of(1000, n);
  auto values = values_of(10, n, vb);
  std::vector<StoreKey> even;
  std::vector<uint8_t> even_values;
  for (size_t i = 0; i < n; i += 2) {
    even.push_back(keys[i]);
    even_values.insert(even_values.end(), &values[i * vb], &values[(i + 1) * vb]);
  }
  CHECK_OK(store->put(even.data(), even.size(), even_values.data(), vb));
  std::vector<uint8_t> got(n * vb), found(n, 9), held(n, 9);
  CHECK_OK(store->get(keys.data(), n, got.data(), vb, found.data(), 0));
  CHECK_OK(store->exists(keys.data(), n, held.data()));
  size_t right = 0;
  for (size_t i = 0; i < n; ++i)
    right += found[i] == (i % 2 == 0) && held[i] == (i % 2 == 0) &&
             (i % 2 || std::memcmp(&got[i * vb], &values[i * vb], vb) == 0);
  CHECK(right == n);
}

// The engine's two stores: lookups on one thread while another writes.
void test_two_threads(unsigned port) {
  const size_t n = 16, vb = 2048, rounds = 50;
  auto reader = pkv::make_redis_store(Params(port, "thr:").p);
  auto writer = pkv::make_redis_store(Params(port, "thr:").p);
  auto keys = keys_of(2000, n);
  auto values = values_of(11, n, vb);
  bool write_ok = true;
  std::thread t([&] {
    for (size_t r = 0; r < rounds; ++r)
      write_ok &= writer->put(keys.data(), n, values.data(), vb).ok;
  });
  bool read_ok = true, values_ok = true;
  std::vector<uint8_t> got(n * vb), found(n);
  for (size_t r = 0; r < rounds; ++r) {
    read_ok &= reader->get(keys.data(), n, got.data(), vb, found.data(), 0).ok;
    for (size_t i = 0; i < n; ++i)
      if (found[i]) values_ok &= std::memcmp(&got[i * vb], &values[i * vb], vb) == 0;
  }
  t.join();
  CHECK(write_ok && read_ok && values_ok);
}

// Every page of a listing: each key with its size (a key listed twice must agree).
std::map<std::string, uint64_t> list_all(pkv::Store &s, size_t count, int *pages = nullptr) {
  std::map<std::string, uint64_t> all;
  uint64_t cursor = 0;
  int n = 0;
  do {
    std::vector<pkv::StoreEntry> page;
    if (!CHECK(s.list(&cursor, count, &page).ok) || !CHECK(++n < 10000)) break;
    for (const auto &e : page) {
      auto [it, fresh] = all.emplace(e.key.hex(), e.value_bytes);
      CHECK(fresh || it->second == e.value_bytes);
    }
  } while (cursor != 0);
  if (pages) *pages = n;
  return all;
}

// The administrator's calls: SCAN in pages finds every block under the prefix (glob characters
// in it match only themselves), with its STRLEN, and nothing else (other prefixes, names that are
// not 64 hex digits, keys that are not strings); UNLINK removes, a second time is no error.
void test_list_and_remove(unsigned port) {
  const size_t n = 300, vb = 100;
  auto store = pkv::make_redis_store(Params(port, "ls*[x]:").p);
  auto other = pkv::make_redis_store(Params(port, "ls").p);  // "ls*" unescaped would match it
  CHECK(list_all(*store, 10).empty());
  auto keys = keys_of(3000, n);
  auto values = values_of(15, n, vb);
  CHECK_OK(store->put(keys.data(), n, values.data(), vb));
  CHECK_OK(store->put(&keys[0], 1, values.data(), 57));  // another size
  CHECK_OK(other->put(keys.data(), 5, values.data(), vb));
  redisContext *c = redisConnect("127.0.0.1", int(port));
  if (!CHECK(c && !c->err)) return;
  const std::string hash_key = "ls*[x]:" + key_of(9999).hex();
  freeReplyObject(redisCommand(c, "HSET %s f v", hash_key.c_str()));
  freeReplyObject(redisCommand(c, "SET ls*[x]:meta 1"));
  freeReplyObject(
      redisCommand(c, "SET %s 1", ("ls*[x]:" + key_of(1).hex().substr(0, 63) + "G").c_str()));
  redisFree(c);

  int pages = 0;
  auto all = list_all(*store, 10, &pages);
  CHECK(all.size() == n);
  CHECK(pages > 5);
  size_t right = 0;
  for (size_t i = 0; i < n; ++i)
    right += all.count(keys[i].hex()) && all[keys[i].hex()] == (i ? vb : 57);
  CHECK(right == n);
  CHECK(list_all(*other, 1000).size() == 5);

  std::vector<StoreKey> gone = {keys[0], keys[1], key_of(4242)};
  uint8_t removed[3] = {7, 7, 7};
  CHECK_OK(store->remove(gone.data(), 3, removed));
  CHECK(removed[0] == 1 && removed[1] == 1 && removed[2] == 0);
  CHECK_OK(store->remove(gone.data(), 3, removed));
  CHECK(removed[0] == 0 && removed[1] == 0);
  CHECK_OK(store->remove(gone.data(), 0, nullptr));
  std::vector<uint8_t> held(3, 9);
  CHECK_OK(store->exists(gone.data(), 3, held.data()));
  CHECK(held == std::vector<uint8_t>(3, 0));
  CHECK(list_all(*store, 100).size() == n - 2);
  CHECK(list_all(*other, 1000).size() == 5);  // another prefix is left alone
}

void test_auth(const std::string &bin) {
  pkv_test::RedisServer server(bin, "s3cret pass");
  if (!CHECK(server.start())) return;
  Params p(server.port(), "auth:");
  p.p.password = "s3cret pass";
  {
    auto store = pkv::make_redis_store(p.p);
    StoreKey k = key_of(600);
    auto v = values_of(12, 1, 16);
    CHECK_OK(store->put(&k, 1, v.data(), 16));
    std::vector<uint8_t> got(16), found(1);
    CHECK_OK(store->get(&k, 1, got.data(), 16, found.data(), 0));
    CHECK(found[0] == 1 && got == v);
  }
  p.p.username = "default";  // AUTH user pass (ACL)
  CHECK(create_error(p.p).first == PKV_OK);

  p.p.username = "nobody";
  auto [s1, m1] = create_error(p.p);
  CHECK(s1 == PKV_ERR_STORE && contains(m1, "WRONGPASS"));
  p.p.username = nullptr;
  p.p.password = "wrong";
  auto [s2, m2] = create_error(p.p);
  CHECK(s2 == PKV_ERR_STORE && contains(m2, "WRONGPASS"));
  CHECK(contains(m2, ("redis 127.0.0.1:" + std::to_string(server.port())).c_str()));
  fprintf(stderr, "  (wrong password: %s)\n", m2.c_str());
  p.p.password = nullptr;
  auto [s3, m3] = create_error(p.p);
  CHECK(s3 == PKV_ERR_STORE && contains(m3, "NOAUTH"));
  fprintf(stderr, "  (no password: %s)\n", m3.c_str());
  p.p.username = "default";
  CHECK(create_error(p.p).first == PKV_ERR_INVALID_ARGUMENT);  // a user needs a password
}

void test_refused() {
  unsigned port = pkv_test::free_port();
  Params p(port);
  auto t0 = Clock::now();
  auto [status, message] = create_error(p.p);
  CHECK(status == PKV_ERR_STORE);
  CHECK(contains(message, ("127.0.0.1:" + std::to_string(port)).c_str()));
  CHECK(ms_since(t0) < 1500);
  fprintf(stderr, "  (refused: %s)\n", message.c_str());
  p.p.port = 70000;
  CHECK(create_error(p.p).first == PKV_ERR_INVALID_ARGUMENT);
}

// Killed, down for a while, back on the same port: calls fail within their bounds and work again.
void test_server_gone(const std::string &bin) {
  const size_t n = 4, vb = 256;
  pkv_test::RedisServer server(bin, "");
  if (!CHECK(server.start())) return;
  Params p(server.port(), "gone:");
  p.p.connect_timeout_ms = 300;
  p.p.io_timeout_ms = 300;
  auto store = pkv::make_redis_store(p.p);
  auto keys = keys_of(700, n);
  auto values = values_of(13, n, vb);
  std::vector<uint8_t> got(n * vb), found(n, 9), held(n, 9);
  CHECK_OK(store->put(keys.data(), n, values.data(), vb));

  server.kill();
  auto t0 = Clock::now();
  pkv::StoreStatus s = store->get(keys.data(), n, got.data(), vb, found.data(), 200);
  CHECK(!s.ok && !s.error.empty());
  CHECK(found == std::vector<uint8_t>(n, 0));
  fprintf(stderr, "  (killed: %s)\n", s.error.c_str());
  CHECK(!store->put(keys.data(), n, values.data(), vb).ok);
  std::memset(held.data(), 9, n);
  CHECK(!store->exists(keys.data(), n, held.data()).ok);
  CHECK(held == std::vector<uint8_t>(n, 0));
  CHECK(ms_since(t0) < 1000);

  // Within the back-off a call fails at once.
  t0 = Clock::now();
  s = store->get(keys.data(), n, got.data(), vb, found.data(), 200);
  CHECK(!s.ok && contains(s.error, "not connected"));
  CHECK(ms_since(t0) < 100);

  // Still down after the back-off: a refused connect, quickly.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  t0 = Clock::now();
  CHECK(!store->get(keys.data(), n, got.data(), vb, found.data(), 200).ok);
  CHECK(ms_since(t0) < 500);

  // Back (empty: no persistence); the first call after the back-off reconnects.
  if (!CHECK(server.start())) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  std::memset(found.data(), 9, n);
  CHECK_OK(store->get(keys.data(), n, got.data(), vb, found.data(), 0));
  CHECK(found == std::vector<uint8_t>(n, 0));
  CHECK_OK(store->put(keys.data(), n, values.data(), vb));
  CHECK_OK(store->get(keys.data(), n, got.data(), vb, found.data(), 0));
  CHECK(found == std::vector<uint8_t>(n, 1) && got == values);

  // Restarted while the store was idle: the closed connection is remade within the call.
  if (!CHECK(server.restart())) return;
  CHECK_OK(store->put(keys.data(), n, values.data(), vb));
  if (!CHECK(server.restart())) return;
  CHECK_OK(store->exists(keys.data(), n, held.data()));
  CHECK(held == std::vector<uint8_t>(n, 0));
}

// A server that takes the connection but never answers (SIGSTOP): bounded by the timeouts.
void test_server_stopped(const std::string &bin) {
  pkv_test::RedisServer server(bin, "");
  if (!CHECK(server.start())) return;
  Params p(server.port(), "stop:");
  auto store = pkv::make_redis_store(p.p);  // io_timeout_ms 1000: get's 200 ms must bound it
  p.p.io_timeout_ms = 300;
  auto writer = pkv::make_redis_store(p.p);  // connected before the server stops
  const size_t vb = size_t(4) << 20;
  auto keys = keys_of(800, 4);
  auto values = values_of(14, 4, vb);
  CHECK_OK(store->put(keys.data(), 1, values.data(), vb));

  server.pause();
  std::vector<uint8_t> got(4 * vb), found(4, 9);
  auto t0 = Clock::now();
  pkv::StoreStatus s = store->get(keys.data(), 4, got.data(), vb, found.data(), 200);
  double get_ms = ms_since(t0);
  CHECK(!s.ok && contains(s.error, "timed out"));
  CHECK(found == std::vector<uint8_t>(4, 0));
  CHECK(get_ms >= 190 && get_ms < 700);  // margins for a loaded machine
  fprintf(stderr, "  (stopped: %s, after %.0f ms)\n", s.error.c_str(), get_ms);

  // 16 MiB to a server that reads nothing: the socket buffers fill, then io_timeout_ms.
  t0 = Clock::now();
  s = writer->put(keys.data(), 4, values.data(), vb);
  double put_ms = ms_since(t0);
  CHECK(!s.ok);
  CHECK(put_ms >= 290 && put_ms < 900);
  fprintf(stderr, "  (stopped put: %s, after %.0f ms)\n", s.error.c_str(), put_ms);

  // A new connection to it: the kernel accepts, the handshake times out.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the back-off
  t0 = Clock::now();
  s = store->get(keys.data(), 1, got.data(), vb, found.data(), 200);
  CHECK(!s.ok && ms_since(t0) < 700);
  fprintf(stderr, "  (stopped, reconnecting: %s)\n", s.error.c_str());

  server.resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  CHECK_OK(store->get(keys.data(), 1, got.data(), vb, found.data(), 2000));
  CHECK(found[0] == 1 && std::memcmp(got.data(), values.data(), vb) == 0);
}

}  // namespace

int main() {
  std::string bin = pkv_test::redis_server_or_skip();
  {
    pkv_test::RedisServer server(bin, "");
    if (!server.start()) {
      fprintf(stderr, "FAIL: could not start redis-server\n");
      return 1;
    }
    unsigned port = server.port();
    try {
      test_round_trip(port);
      test_wrong_size(port);
      test_isolation(port);
      test_ttl(port);
      test_large_value(port);
      test_batch_256(port);
      test_two_threads(port);
      test_list_and_remove(port);
    } catch (const pkv::Error &e) {
      check(false, e.what(), __LINE__);
    }
  }
  try {
    test_auth(bin);
    test_refused();
    test_server_gone(bin);
    test_server_stopped(bin);
  } catch (const pkv::Error &e) {
    check(false, e.what(), __LINE__);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
