// bench_store_backend.cpp - bench_store_backend.h over pkv::Store (src/tiers/store.h).
#include "bench_store_backend.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "tiers/store_factory.h"
#include "tiers/store_format.h"

struct bench_store {
  std::unique_ptr<pkv::Store> store;
  std::vector<uint8_t> found;
};

namespace {

void say(char *why, uint32_t cap, const char *what) {
  if (cap) snprintf(why, cap, "%s", what);
}

bench_store *open(const pkv_store_params &p, char *why, uint32_t cap) {
  try {
    auto s = std::make_unique<bench_store>();
    s->store = pkv::make_store(p);
    return s.release();
  } catch (const std::exception &e) {
    say(why, cap, e.what());
  } catch (...) {
    say(why, cap, "the store could not be opened");
  }
  return nullptr;
}

pkv_store_params params(uint32_t kind) {
  pkv_store_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.kind = kind;
  return p;
}

const pkv::StoreKey *as_keys(const uint8_t *keys) {
  static_assert(sizeof(pkv::StoreKey) == 32, "a key is 32 bytes");
  return reinterpret_cast<const pkv::StoreKey *>(keys);
}

}  // namespace

extern "C" uint64_t bench_store_value_bytes(uint32_t num_layers, uint32_t kv_heads,
                                            uint32_t head_dim, uint32_t block_size) {
  const pkv::StoreShape shape{
      num_layers, kv_heads, head_dim,       block_size,
      0,          1,        PKV_DTYPE_BF16, uint64_t(block_size) * kv_heads * head_dim * 2,
      {}};
  return shape.value_bytes();
}

extern "C" bench_store *bench_store_open_file(const char *dir, char *why, uint32_t cap) {
  pkv_store_params p = params(PKV_STORE_FILE);
  p.path = dir;
  return open(p, why, cap);
}

extern "C" bench_store *bench_store_open_redis(uint32_t port, char *why, uint32_t cap) {
  pkv_store_params p = params(PKV_STORE_REDIS);
  p.host = "127.0.0.1";
  p.port = port;
  p.key_prefix = "bench:";
  p.connect_timeout_ms = 1000;
  p.io_timeout_ms = 30000;  // a batch of 2 MiB values on a busy 2-core machine
  return open(p, why, cap);
}

extern "C" void bench_store_close(bench_store *s) { delete s; }

extern "C" int bench_store_put(bench_store *s, const uint8_t *keys, uint32_t n, const void *values,
                               uint64_t value_bytes, char *why, uint32_t cap) {
  const pkv::StoreStatus st =
      s->store->put(as_keys(keys), n, static_cast<const uint8_t *>(values), value_bytes);
  if (!st.ok) say(why, cap, st.error.c_str());
  return st.ok ? 0 : -1;
}

extern "C" int bench_store_get(bench_store *s, const uint8_t *keys, uint32_t n, void *values,
                               uint64_t value_bytes, uint32_t *num_found, char *why, uint32_t cap) {
  s->found.assign(n, 0);
  const pkv::StoreStatus st = s->store->get(as_keys(keys), n, static_cast<uint8_t *>(values),
                                            value_bytes, s->found.data(), 0);
  *num_found = 0;
  for (uint8_t f : s->found) *num_found += f;
  if (!st.ok) say(why, cap, st.error.c_str());
  return st.ok ? 0 : -1;
}
