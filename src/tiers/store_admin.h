// The store's administration (pkv_store_* in pkv.h, `pkv store`): what a store holds, whether its
// values are whole, removing bad ones or all. No engine and no model: each value is judged by
// what it says of itself (read_value_header in store_format.h), and a good one must also name
// the key it is stored under, and that key must be SHA-256 of its parent and tokens.
//
// Memory stays bounded whatever the store holds: keys are walked a page at a time (Store::list),
// values read in batches of at most kReadBatchBytes, and a larger value a piece at a time
// (Store::read_range): its header first, judged before the rest is read.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "params.h"
#include "tiers/store.h"
#include "tiers/store_format.h"

namespace pkv {

class StoreAdmin {
 public:
  // Opens the store p describes: FILE (an existing directory) or REDIS. Throws
  // PKV_ERR_INVALID_ARGUMENT, PKV_ERR_UNSUPPORTED (CALLBACK) or PKV_ERR_STORE.
  explicit StoreAdmin(const pkv_store_params *p);

  std::mutex &mutex() { return mutex_; }

  struct pkv_store_info info();
  // One page of pkv_store_list: the cursor rules are pkv.h's. Throws, changing nothing, on
  // failure.
  std::vector<pkv_store_entry> list(uint64_t *cursor, bool read_values, uint32_t cap);
  // pkv_store_verify and pkv_store_clear: *out holds the counts so far also when they throw.
  void verify(bool remove_bad, pkv_store_verify_result *out);
  void clear(uint64_t *out_removed);

 private:
  // A listing in progress: the store's cursor and the entries listed but not yet returned.
  struct Listing {
    uint64_t token = 0;  // the cursor handed out last (0: none open)
    uint64_t store_cursor = 0;
    bool store_done = false;
    std::vector<StoreEntry> pending;
  };

  std::vector<StoreEntry> next_page(uint64_t *cursor);
  // Reads entries' values and judges them: one pkv_store_entry per value still there.
  std::vector<pkv_store_entry> read(const std::vector<StoreEntry> &entries);
  bool judge_large(const StoreEntry &e, pkv_store_entry *out);
  static void good(const StoreValueInfo &info, pkv_store_entry *out);
  void remove(const std::vector<StoreKey> &keys, uint64_t *removed);
  void require_writable(const char *what) const;

  StoreConfig config_;
  std::unique_ptr<Store> store_;
  std::mutex mutex_;
  Listing listing_;
  uint64_t next_token_ = 1;
};

}  // namespace pkv
