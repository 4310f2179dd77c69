// The Redis store (DESIGN.md §11): blocks as Redis strings under key_prefix + the key's hex, read
// and written in pipelined batches through hiredis (Debian libhiredis-dev), so any number of
// engines on any number of machines share one Redis or Valkey server. Optional TTL (SET EX),
// AUTH (user and password) and SELECT; every call is bounded by the I/O timeout; a lost
// connection is a failed call (a miss or a dropped write) and is remade on a later call.
// Administration: list() is SCAN cursor MATCH <prefix, glob characters escaped>* COUNT n (never
// KEYS) and pipelined STRLEN; remove() is pipelined UNLINK.
#pragma once

#include <memory>

#include "tiers/store.h"

namespace pkv {

// Connects to p.host:p.port (AUTH, SELECT). Throws PKV_ERR_STORE naming the reason when the
// server cannot be reached or refuses the credentials or the database.
std::unique_ptr<Store> make_redis_store(const pkv_store_params &p);

}  // namespace pkv
