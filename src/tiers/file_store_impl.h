// The file store's class (file_store.h), for its two source files: file_store.cpp (the index,
// lookups, writes and the cap) and file_store_admin.cpp (listing, removal, ranged reads).
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tiers/file_store_usage.h"
#include "tiers/file_store_util.h"
#include "tiers/store.h"

namespace pkv::filestore {

struct KeyHash {
  size_t operator()(const StoreKey &k) const {
    size_t h;
    std::memcpy(&h, k.bytes, sizeof h);  // SHA-256: any 8 bytes are uniform
    return h;
  }
};

class FileStore final : public Store {
 public:
  // A writable store keeps the directory's usage record (file_store_usage.h).
  FileStore(std::string dir, uint64_t max_bytes, bool writable);
  const char *kind() const override { return "file"; }
  StoreStatus exists(const StoreKey *keys, size_t n, uint8_t *out) override;
  StoreStatus get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                  uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes) override;
  StoreStatus read_range(const StoreKey &key, uint64_t offset, size_t n, uint8_t *out,
                         size_t *got) override;
  StoreStatus put(const StoreKey *keys, size_t n, const uint8_t *values,
                  size_t value_bytes) override;
  StoreStatus list(uint64_t *cursor, size_t count, std::vector<StoreEntry> *out) override;
  StoreStatus remove(const StoreKey *keys, size_t n, uint8_t *removed) override;

 private:
  struct Entry {
    uint64_t bytes;
    uint64_t tick;    // its place in lru_
    int64_t seen_ns;  // used_ns() of the file when this store last looked at it
  };

  std::string shard_of(const std::string &hex) const { return dir_ + "/" + hex.substr(0, 2); }
  std::string path_of(const StoreKey &k) const {
    const std::string hex = k.hex();
    return shard_of(hex) + "/" + hex + kBlockSuffix;
  }
  std::string scan();  // "" or why the directory cannot be read
  std::string rescan();
  std::string lock_usage();
  struct Found {
    int64_t used_ns;
    StoreKey key;
    uint64_t bytes;
  };
  void scan_shard(const std::string &shard, std::vector<Found> *found);
  void remove_if_stale_temp(int dirfd, const char *name);
  void remember(const StoreKey &key, uint64_t bytes, int64_t seen_ns);
  void forget(const StoreKey &key);
  std::string make_room(const StoreKey *batch, size_t n, int64_t growth);
  int64_t batch_growth(const StoreKey *keys, size_t n, size_t value_bytes,
                       std::vector<uint64_t> *replaced, size_t *fit);
  std::string start_block(const StoreKey &key, const uint8_t *value, size_t value_bytes,
                          int *out_fd, std::string *out_temp);
  std::string finish_block(const StoreKey &key, int fd, const std::string &temp, int64_t *seen_ns);

  std::string dir_, host_;
  uint64_t max_bytes_;
  std::unordered_map<StoreKey, Entry, KeyHash> index_;
  std::map<uint64_t, StoreKey> lru_;          // tick -> key, least recently used first
  uint64_t total_bytes_ = 0, next_tick_ = 0;  // total_bytes_: of the blocks in index_
  std::unique_ptr<FileStoreUsage> usage_;     // nullptr: a read-only store
  uint64_t dir_bytes_ = 0;                    // the directory's count, while holding its lock
};

}  // namespace pkv::filestore
