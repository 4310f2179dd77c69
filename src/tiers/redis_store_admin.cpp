// The Redis store's administration (redis_store.h): SCAN listing with STRLEN sizes, UNLINK
// removal, GETRANGE reads of large values; never on an engine's path.
#include <algorithm>
#include <cstring>

#include "tiers/redis_store_impl.h"

namespace pkv::redis {

// GETRANGE: administration reads a large value a piece at a time.
StoreStatus RedisStore::read_range(const StoreKey &k, uint64_t offset, size_t n, uint8_t *out,
                                   size_t *got) {
  *got = 0;
  if (n == 0) return {};
  Pipeline p;
  p.command(4), p.arg("GETRANGE", 8), p.arg(key(k)), p.arg(std::to_string(offset));
  p.arg(std::to_string(offset + n - 1));
  return call("getrange", p, Deadline(io_timeout_ms_),
              [&](size_t, const redisReply *r) -> std::string {
                if (r->type == REDIS_REPLY_STRING) {
                  *got = std::min(r->len, n);
                  std::memcpy(out, r->str, *got);
                  return "";
                }
                if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "WRONGTYPE", 9) == 0)
                  return "";
                if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
                return "unexpected reply to GETRANGE (type " + std::to_string(r->type) + ")";
              });
}

// A SCAN pattern matching the keys under prefix_: its glob characters escaped, then "*".
static std::string scan_pattern(const std::string &prefix) {
  std::string p;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') p += '\\';
    p += c;
  }
  return p + "*";
}

// The key whose Redis name is prefix + 64 lowercase hex digits; false for any other name.
static bool parse_key_name(const char *name, size_t len, const std::string &prefix, StoreKey *key) {
  if (len != prefix.size() + 64 || std::memcmp(name, prefix.data(), prefix.size()) != 0)
    return false;
  const char *hex = name + prefix.size();
  for (int i = 0; i < 64; ++i)
    if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f'))) return false;
  for (int i = 0; i < 32; ++i) {
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    key->bytes[i] = uint8_t(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return true;
}

// One SCAN (cursor MATCH prefix* COUNT count; never KEYS, which blocks the server), then one
// pipeline of STRLEN for the keys it named. Keys under the prefix that are not block names, not
// strings (WRONGTYPE) or gone by the STRLEN (0) are not listed.
StoreStatus RedisStore::list(uint64_t *cursor, size_t count, std::vector<StoreEntry> *out) {
  Pipeline scan;
  scan.command(6);
  scan.arg("SCAN", 4);
  scan.arg(std::to_string(*cursor));
  scan.arg("MATCH", 5);
  scan.arg(scan_pattern(prefix_));
  scan.arg("COUNT", 5);
  scan.arg(std::to_string(std::max<size_t>(count, 1)));
  uint64_t next = 0;
  std::vector<StoreEntry> page;
  StoreStatus s =
      call("scan", scan, Deadline(io_timeout_ms_), [&](size_t, const redisReply *r) -> std::string {
        if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_ARRAY)
          return "unexpected reply to SCAN (type " + std::to_string(r->type) + ")";
        next = std::strtoull(r->element[0]->str, nullptr, 10);
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; ++i) {
          StoreKey k;
          const redisReply *e = keys->element[i];
          if (e->type == REDIS_REPLY_STRING && parse_key_name(e->str, e->len, prefix_, &k))
            page.push_back({k, 0});
        }
        return "";
      });
  if (!s.ok) return s;
  if (!page.empty()) {
    Pipeline sizes;
    for (const StoreEntry &e : page) {
      sizes.command(2);
      sizes.arg("STRLEN", 6);
      sizes.arg(key(e.key));
    }
    s = call("strlen", sizes, Deadline(io_timeout_ms_),
             [&](size_t i, const redisReply *r) -> std::string {
               if (r->type == REDIS_REPLY_INTEGER) {
                 page[i].value_bytes = uint64_t(std::max<long long>(r->integer, 0));
                 return "";
               }
               if (r->type == REDIS_REPLY_ERROR && std::strncmp(r->str, "WRONGTYPE", 9) == 0)
                 return "";
               if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
               return "unexpected reply to STRLEN (type " + std::to_string(r->type) + ")";
             });
    if (!s.ok) return s;
  }
  for (const StoreEntry &e : page)
    if (e.value_bytes) out->push_back(e);
  *cursor = next;
  return {};
}

// UNLINK (the memory is freed off the server's main thread), one per key, pipelined.
StoreStatus RedisStore::remove(const StoreKey *keys, size_t n, uint8_t *removed) {
  if (removed) std::memset(removed, 0, n);
  if (n == 0) return {};
  Pipeline p;
  for (size_t i = 0; i < n; ++i) {
    p.command(2);
    p.arg("UNLINK", 6);
    p.arg(key(keys[i]));
  }
  return call("remove", p, Deadline(io_timeout_ms_),
              [&](size_t i, const redisReply *r) -> std::string {
                if (r->type == REDIS_REPLY_INTEGER) {
                  if (removed) removed[i] = r->integer > 0;
                  return "";
                }
                if (r->type == REDIS_REPLY_ERROR) return std::string(r->str, r->len);
                return "unexpected reply to UNLINK (type " + std::to_string(r->type) + ")";
              });
}

}  // namespace pkv::redis
