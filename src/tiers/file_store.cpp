// The file store (file_store.h): its index, lookups, writes and the directory's cap. Layout,
// temp-file names, the LRU index and SIGXFSZ are described there; this file keeps to how. Every
// error a call meets is reported with the path and strerror; a file that vanishes under us
// (another engine evicted it) is a miss, never an error. Listing, removal and ranged reads (the
// store's administration) are in file_store_admin.cpp.
#include "tiers/file_store.h"

#include <set>

#include "status.h"
#include "tiers/file_store_impl.h"

namespace pkv {
namespace filestore {

// A writable store keeps the directory's usage record (file_store_usage.h): it counts the
// directory under its lock now, and every put and removal changes files and count together.
FileStore::FileStore(std::string dir, uint64_t max_bytes, bool writable)
    : dir_(std::move(dir)), host_(host_tag()), max_bytes_(max_bytes) {
  if (!writable) {
    if (const std::string e = scan(); !e.empty()) fail(PKV_ERR_STORE, "file store: %s", e.c_str());
    return;
  }
  usage_ = std::make_unique<FileStoreUsage>(dir_);
  std::string e = usage_->lock();
  if (e.empty()) e = scan();
  if (!e.empty()) fail(PKV_ERR_STORE, "file store: %s", e.c_str());  // usage_ goes, and its lock
  dir_bytes_ = total_bytes_;
  const std::string w = usage_->write(dir_bytes_);
  usage_->unlock();
  if (!w.empty()) fail(PKV_ERR_STORE, "file store: %s", w.c_str());
}

void FileStore::remember(const StoreKey &key, uint64_t bytes, int64_t seen_ns) {
  auto [it, fresh] = index_.try_emplace(key, Entry{0, 0, 0});
  if (!fresh) lru_.erase(it->second.tick);
  total_bytes_ += bytes - it->second.bytes;
  it->second = Entry{bytes, next_tick_, seen_ns};
  lru_.emplace(next_tick_++, key);
}

void FileStore::forget(const StoreKey &key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return;
  total_bytes_ -= it->second.bytes;
  lru_.erase(it->second.tick);
  index_.erase(it);
}

// A temp file is a crashed writer's when it is over a minute old, or when its writer was on this
// machine and is gone. Another live writer's (this process's other store included) is kept.
void FileStore::remove_if_stale_temp(int dirfd, const char *name) {
  const char *mark = std::strstr(name, kTempMark);
  struct stat st;
  if (!mark || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return;
  const std::string tail(mark + std::strlen(kTempMark));  // <host>.<pid>.<n>, or not ours
  const size_t dot1 = tail.find('.'), dot2 = tail.rfind('.');
  if (dot1 == std::string::npos || dot2 <= dot1 + 1 || dot2 + 1 == tail.size() ||
      tail.find_first_not_of("0123456789.", dot1) != std::string::npos ||
      tail.find('.', dot1 + 1) != dot2)
    return;
  bool stale = now_ns() - ns_of(st.st_mtim) > kStaleTempNs;
  if (!stale && tail.compare(0, dot1, host_) == 0 && dot1 == host_.size()) {
    const long pid = std::strtol(tail.c_str() + dot1 + 1, nullptr, 10);
    stale = pid > 0 && pid != getpid() && kill(pid_t(pid), 0) != 0 && errno == ESRCH;
  }
  if (stale) unlinkat(dirfd, name, 0);  // ENOENT: another store cleaned it first
}

void FileStore::scan_shard(const std::string &shard, std::vector<Found> *found) {
  DIR *d = opendir((dir_ + "/" + shard).c_str());
  if (!d) return;  // a stray file named like a shard, or unreadable: its keys will read as errors
  while (const dirent *e = readdir(d)) {
    StoreKey key;
    struct stat st;
    if (block_file_name(e->d_name, shard.c_str(), &key)) {
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        found->push_back({used_ns(st), key, uint64_t(st.st_size)});
    } else {
      remove_if_stale_temp(dirfd(d), e->d_name);
    }
  }
  closedir(d);
}

// The index of the blocks present, least recently used (by file times) first; stale temp files go.
std::string FileStore::scan() {
  DIR *d = opendir(dir_.c_str());
  if (!d) return why("open", dir_, errno);
  std::vector<Found> found;
  while (const dirent *e = readdir(d)) {
    const char *n = e->d_name;
    if (std::strlen(n) == 2 && std::isxdigit(uint8_t(n[0])) && std::isxdigit(uint8_t(n[1])) &&
        !std::isupper(uint8_t(n[0])) && !std::isupper(uint8_t(n[1])))
      scan_shard(n, &found);
    else
      remove_if_stale_temp(dirfd(d), n);
  }
  closedir(d);
  std::sort(found.begin(), found.end(),
            [](const Found &a, const Found &b) { return a.used_ns < b.used_ns; });
  for (const Found &f : found) remember(f.key, f.bytes, f.used_ns);
  return "";
}

StoreStatus FileStore::exists(const StoreKey *keys, size_t n, uint8_t *out) {
  std::string error;
  for (size_t i = 0; i < n; ++i) {
    const std::string path = path_of(keys[i]);
    struct stat st;
    const int r = stat(path.c_str(), &st);
    out[i] = r == 0 && S_ISREG(st.st_mode);
    if (r != 0 && errno != ENOENT) error = why("stat", path, errno);
  }
  return error.empty() ? StoreStatus{} : StoreStatus::failure("file store: " + error);
}

// A block file is opened without blocking (O_NONBLOCK: a FIFO or device put in a block's place
// would block open() or read() forever) and used only when fstat says it is a regular file of
// exactly value_bytes; nothing of any other is read. timeout_ms bounds the call between keys
// (a read of a local file is not abandoned half way).
StoreStatus FileStore::get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes,
                           uint8_t *found, uint32_t timeout_ms, uint64_t *held_bytes) {
  std::string error;
  size_t failed = 0, reached = 0;
  const int64_t deadline = timeout_ms ? mono_ns() + int64_t(timeout_ms) * 1'000'000 : INT64_MAX;
  for (size_t i = 0; i < n; ++i) found[i] = kStoreAbsent;
  if (held_bytes) std::fill(held_bytes, held_bytes + n, 0);
  for (; reached < n && mono_ns() < deadline; ++reached) {
    const size_t i = reached;
    const std::string path = path_of(keys[i]);
    const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT)
        forget(keys[i]);  // never written, or removed by another store
      else
        error = why("open", path, errno), ++failed;
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      error = why("stat", path, errno), ++failed;
    } else if (!S_ISREG(st.st_mode)) {
      found[i] = kStoreNotAValue;
    } else if (uint64_t(st.st_size) != value_bytes) {
      found[i] = kStoreWrongSize;
      if (held_bytes) held_bytes[i] = uint64_t(st.st_size);
    } else {
      // Mark the block used, so other stores on this directory (the engine's writer) see the use
      // in its atime. Best effort: a read-only file system or foreign file refuses.
      const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
      futimens(fd, times);
      const int err = read_full(fd, values + i * value_bytes, value_bytes);
      if (err > 0) error = why("read", path, err), ++failed;
      found[i] = err == 0 ? kStoreFound : kStoreAbsent;  // -1: truncated under us
      remember(keys[i], uint64_t(st.st_size), used_ns(st));
    }
    close(fd);
  }
  if (reached < n) {
    error = "timed out after " + std::to_string(timeout_ms) + " ms (" + std::to_string(reached) +
            " of " + std::to_string(n) + " keys read)";
    failed += n - reached;
  }
  if (!failed) return {};
  return StoreStatus::failure("file store: " + std::to_string(failed) + " of " + std::to_string(n) +
                              " reads failed; the last: " + error);
}

// The index rebuilt from the directory (under the usage lock: then the count is exact).
std::string FileStore::rescan() {
  index_.clear();
  lru_.clear();
  total_bytes_ = 0;
  std::string e = scan();
  dir_bytes_ = total_bytes_;
  return e;
}

// Takes the usage lock and reads the directory's count (a missing or foreign record: rescan):
// "" with the lock held, or why not without it.
std::string FileStore::lock_usage() {
  std::string e = usage_->lock();
  if (e.empty() && !usage_->read(&dir_bytes_)) e = rescan();
  if (!e.empty()) usage_->unlock();  // the caller fails without it
  return e;
}

// Under the usage lock: removes least recently used blocks (none of the batch's keys) until the
// directory's count plus growth fits under max_bytes. A block another store used since this one
// last looked (its atime moved) is moved up instead; one already gone was counted out by whoever
// removed it. When this store's index runs out before the count fits, the directory holds blocks
// other stores wrote: the index is rebuilt from it once, and eviction goes on.
std::string FileStore::make_room(const StoreKey *batch, size_t n, int64_t growth) {
  if (!max_bytes_) return "";
  auto in_batch = [&](const StoreKey &k) { return std::find(batch, batch + n, k) != batch + n; };
  bool rescanned = false;
  while (int64_t(dir_bytes_) + growth > int64_t(max_bytes_)) {
    auto it = lru_.begin();
    while (it != lru_.end() && in_batch(it->second)) ++it;
    if (it == lru_.end()) {
      if (rescanned) break;  // only the batch's own keys: their old values are replaced
      if (std::string e = rescan(); !e.empty()) return "cannot make room: " + e;
      rescanned = true;
      continue;
    }
    const StoreKey victim = it->second;
    const std::string path = path_of(victim);
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      forget(victim);
      continue;
    }
    if (used_ns(st) > index_.at(victim).seen_ns) {
      remember(victim, uint64_t(st.st_size), used_ns(st));
      continue;
    }
    const bool gone = unlink(path.c_str()) == 0;
    if (!gone && errno != ENOENT) return "cannot make room: " + why("unlink", path, errno);
    if (gone) dir_bytes_ -= std::min<uint64_t>(dir_bytes_, uint64_t(st.st_size));
    forget(victim);
  }
  return "";
}

// Temp file and write, its writeback started (sync_file_range) so the blocks of a batch reach
// the disk together: "" or why not (then the temp file is gone). *fd and *temp are kept for
// finish_block().
std::string FileStore::start_block(const StoreKey &key, const uint8_t *value, size_t value_bytes,
                                   int *out_fd, std::string *out_temp) {
  const std::string final_path = path_of(key);
  std::string temp = temp_name(final_path, host_);
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {  // the shard's first block (or the directory was removed)
    const std::string shard = shard_of(key.hex());
    if (mkdir(shard.c_str(), 0755) == 0)
      fsync_dir(dir_);
    else if (errno != EEXIST)
      return why("mkdir", shard, errno);
    fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  }
  if (fd < 0) return why("create", temp, errno);
  if (const int err = write_full(fd, value, value_bytes)) {
    close(fd);
    unlink(temp.c_str());
    return why("write", temp, err);
  }
  sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);  // a hint: fsync below is what counts
  *out_fd = fd;
  *out_temp = std::move(temp);
  return "";
}

// fsync, rename onto the block's name: "" or why not (the temp file is gone either way).
std::string FileStore::finish_block(const StoreKey &key, int fd, const std::string &temp,
                                    int64_t *seen_ns) {
  int err = 0;
  const char *step = "fsync";
  struct stat st;
  if (fsync(fd) != 0) err = errno;
  if (!err && fstat(fd, &st) != 0) err = errno, step = "stat";
  if (close(fd) != 0 && !err) err = errno, step = "close";
  if (!err && rename(temp.c_str(), path_of(key).c_str()) != 0) err = errno, step = "rename";
  if (err) {
    unlink(temp.c_str());
    return why(step, temp, err);
  }
  *seen_ns = used_ns(st);
  return "";
}

// What the first *fit values of a batch add to the directory (each value less the one it
// replaces; a key twice in the batch replaces its own first value). *fit is as many as max_bytes
// holds: a batch larger than the cap writes its first blocks (the parents a lookup reaches
// first; later ones are of no use without them) and refuses the rest.
int64_t FileStore::batch_growth(const StoreKey *keys, size_t n, size_t value_bytes,
                                std::vector<uint64_t> *replaced, size_t *fit) {
  replaced->assign(n, 0);
  int64_t growth = 0;
  for (*fit = 0; *fit < n; ++*fit) {
    const size_t i = *fit;
    struct stat st;
    if (std::find(keys, keys + i, keys[i]) != keys + i)
      (*replaced)[i] = value_bytes;
    else if (stat(path_of(keys[i]).c_str(), &st) == 0 && S_ISREG(st.st_mode))
      (*replaced)[i] = uint64_t(st.st_size);
    const int64_t add = int64_t(value_bytes) - int64_t((*replaced)[i]);
    if (max_bytes_ && growth + add > int64_t(max_bytes_)) break;
    growth += add;
  }
  return growth;
}

StoreStatus FileStore::put(const StoreKey *keys, size_t n, const uint8_t *values,
                           size_t value_bytes) {
  if (max_bytes_ && value_bytes > max_bytes_)
    return StoreStatus::failure("file store: a value of " + std::to_string(value_bytes) +
                                " bytes is over max_bytes (" + std::to_string(max_bytes_) + ")");
  if (!usage_) return StoreStatus::failure("file store: opened read-only");
  const XfszBlock xfsz;
  std::string error = lock_usage();
  if (!error.empty()) return StoreStatus::failure("file store: " + error);
  std::vector<uint64_t> replaced;
  size_t fit = 0;
  error = make_room(keys, n, batch_growth(keys, n, value_bytes, &replaced, &fit));
  if (!error.empty()) {
    usage_->unlock();
    return StoreStatus::failure("file store: " + error);
  }
  size_t failed = n - fit;
  if (failed)
    error = "the batch's first " + std::to_string(fit) + " values fill max_bytes (" +
            std::to_string(max_bytes_) + ")";
  std::set<std::string> shards;
  // Every block written first (their writeback started), then each fsync'ed and renamed: the
  // disk gets the batch at once instead of one block per flush. Each block is still durable
  // before its name appears.
  struct Pending {
    size_t i;
    int fd;
    std::string temp;
  };
  std::vector<Pending> pending;
  pending.reserve(fit);
  for (size_t i = 0; i < fit; ++i) {
    Pending p{i, -1, {}};
    const std::string e =
        start_block(keys[i], values + i * value_bytes, value_bytes, &p.fd, &p.temp);
    if (!e.empty()) {
      error = e, ++failed;
      continue;
    }
    pending.push_back(std::move(p));
  }
  for (const Pending &p : pending) {
    int64_t seen = 0;
    const std::string e = finish_block(keys[p.i], p.fd, p.temp, &seen);
    if (!e.empty()) {
      forget(keys[p.i]);
      error = e, ++failed;
      continue;
    }
    remember(keys[p.i], value_bytes, seen);
    dir_bytes_ = dir_bytes_ + value_bytes - std::min(dir_bytes_ + value_bytes, replaced[p.i]);
    shards.insert(shard_of(keys[p.i].hex()));
  }
  if (const std::string e = usage_->write(dir_bytes_); !e.empty()) error = e;
  usage_->unlock();
  // The renames, made durable once per directory. A failure here leaves whole blocks (or none).
  for (const std::string &shard : shards)
    if (const int err = fsync_dir(shard)) error = why("fsync", shard, err);
  if (error.empty()) return {};
  return StoreStatus::failure("file store: " + std::to_string(failed) + " of " + std::to_string(n) +
                              " writes failed; the last error: " + error);
}

}  // namespace filestore

std::unique_ptr<Store> make_file_store(const pkv_store_params &p) {
  using namespace filestore;
  PKV_REQUIRE(p.path && p.path[0], "pkv_store_params.path is required for a file store");
  std::string dir = p.path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (const int err = make_dirs(dir))
    fail(PKV_ERR_STORE, "file store: cannot make directory %s: %s", dir.c_str(),
         std::strerror(err));
  if (p.write_mode !=
      PKV_STORE_READ_ONLY) {  // a read-only engine may read a directory it cannot write
    const std::string probe = temp_name(dir + "/.probe", host_tag());
    const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
      fail(PKV_ERR_STORE, "file store: cannot write in %s: %s", dir.c_str(), std::strerror(errno));
    close(fd);
    unlink(probe.c_str());
  } else if (access(dir.c_str(), R_OK | X_OK) != 0) {
    fail(PKV_ERR_STORE, "file store: cannot read %s: %s", dir.c_str(), std::strerror(errno));
  }
  return std::make_unique<FileStore>(std::move(dir), p.max_bytes,
                                     p.write_mode != PKV_STORE_READ_ONLY);
}

}  // namespace pkv
