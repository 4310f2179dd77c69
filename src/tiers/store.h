// Tier 2 of DESIGN.md §11: a store of whole blocks (K and V of every layer) by store key, below
// the host tier: a directory (file_store), a Redis or Valkey server (redis_store), or the host's
// callbacks (callback_store); store_factory.h makes the one pkv_store_params name, and this
// interface knows none of them. A store holds opaque values of one size per engine
// (store_format.h); everything it returns is verified by the caller before it can hit, so a store
// only has to be a byte map: it may lose, truncate or corrupt values, and that is a miss.
//
// Each engine makes two stores from the same parameters: one for lookups (the engine's thread),
// one for writes (its writer thread), so an implementation needs no locking of its own beyond
// what two instances sharing a backend need (e.g. two connections, or one directory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pkv/pkv.h"

namespace pkv {

// SHA-256 (store_format.h): the chained key of one block under one salt and model.
struct StoreKey {
  uint8_t bytes[32];
  bool operator==(const StoreKey &o) const;
  std::string hex() const;  // 64 lowercase hex digits: the name of a file, the tail of a Redis key
};

// A key held, as a listing finds it: value_bytes is the value's size as the store reports it (the
// value may change or go before it is read).
struct StoreEntry {
  StoreKey key;
  uint64_t value_bytes;
};

// What a call did: ok, or not and why (a message the host can read through the engine). A failed
// call's outputs are misses; nothing it left half done may be mistaken for a value.
struct StoreStatus {
  bool ok = true;
  std::string error;
  static StoreStatus failure(std::string why) { return StoreStatus{false, std::move(why)}; }
};

// What Store::get found for a key.
enum : uint8_t {
  kStoreAbsent = 0,     // not held (or not reached in time)
  kStoreFound = 1,      // a value of the size asked for, read
  kStoreWrongSize = 2,  // held with another size (truncated, padded, empty): not read
  kStoreNotAValue = 3,  // a name that is not a value (a FIFO, a device, a directory): not read
};

class Store {
 public:
  virtual ~Store() = default;
  // "file", "redis" or "callback", for messages.
  virtual const char *kind() const = 0;
  // Whether each key is held: out[i] 1 or 0 (a hint: a later get may still miss).
  virtual StoreStatus exists(const StoreKey *keys, size_t n, uint8_t *out) = 0;
  // For each key held with a value of exactly value_bytes bytes: the value into
  // values + i * value_bytes and found[i] = kStoreFound; a key held with another size (truncated,
  // padded, empty) or not as a value (a FIFO, a directory) is kStoreWrongSize or kStoreNotAValue,
  // its size in held_bytes[i] (held_bytes may be NULL), and nothing is read past value_bytes of
  // it; else kStoreAbsent. timeout_ms bounds the whole call (0: the store's own timeout); keys
  // not reached in time are kStoreAbsent and the call fails saying so.
  virtual StoreStatus get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                          uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes = nullptr) = 0;
  // Administration: bytes [offset, offset + n) of key's value into out; *got = how many were
  // there (fewer at its end; 0 when the key is not held). Bounded by the store's own timeout.
  virtual StoreStatus read_range(const StoreKey & /*key*/, uint64_t /*offset*/, size_t /*n*/,
                                 uint8_t * /*out*/, size_t *got) {
    *got = 0;
    return StoreStatus::failure(std::string("the ") + kind() +
                                " store cannot read part of a value");
  }
  // Stores value i (value_bytes each) under keys[i], replacing any. A value is either stored
  // whole or not at all (readers never see part of one).
  virtual StoreStatus put(const StoreKey *keys, size_t n, const uint8_t *values,
                          size_t value_bytes) = 0;

  // Administration (store_admin.h), never on an engine's path. The file and Redis stores have
  // them; the default (the callback store) fails saying the store cannot.
  //
  // One page of the keys held: from *cursor (0: the start) about `count` entries (a hint: a page
  // may hold fewer or more) are appended to out, and *cursor is set to where the next page
  // starts, 0 after the last. A key held from the first page to the last is listed at least
  // once (Redis may list one twice); keys written or removed meanwhile may or may not be. A
  // failed call changes neither *cursor nor out.
  virtual StoreStatus list(uint64_t * /*cursor*/, size_t /*count*/,
                           std::vector<StoreEntry> * /*out*/) {
    return StoreStatus::failure(std::string("the ") + kind() + " store cannot list its keys");
  }
  // Removes each key held: removed[i] = 1 when this call removed keys[i], else 0 (removed may
  // be NULL). A failed call may have removed some keys (removed says which).
  virtual StoreStatus remove(const StoreKey * /*keys*/, size_t n, uint8_t *removed) {
    for (size_t i = 0; removed && i < n; ++i) removed[i] = 0;
    return StoreStatus::failure(std::string("the ") + kind() + " store cannot remove keys");
  }
};

}  // namespace pkv
