// The file store (file_store.h). Layout, temp-file names, the LRU index and SIGXFSZ are described
// there; this file keeps to how. Every error a call meets is reported with the path and strerror;
// a file that vanishes under us (another engine evicted it) is a miss, never an error.
// (~480 lines: the store's administration, list and remove, lives with the layout it walks.)
#include "tiers/file_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "status.h"
#include "tiers/file_store_usage.h"

namespace pkv {
namespace {

constexpr char kBlockSuffix[] = ".blk";
constexpr char kTempMark[] = ".tmp.";            // <final name>.tmp.<host>.<pid>.<n>
constexpr int64_t kStaleTempNs = 60'000'000'000;  // a temp file this old is a dead writer's

std::atomic<uint64_t> g_temp_counter{0};  // per process: the two stores of an engine never collide

int64_t ns_of(const timespec &t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }
// When a block was last written or read, as the file says (reads set atime explicitly).
int64_t used_ns(const struct stat &st) { return std::max(ns_of(st.st_atim), ns_of(st.st_mtim)); }
int64_t mono_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return ns_of(t);
}
int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

std::string why(const std::string &what, const std::string &path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

// This machine's name as it appears in temp names: [A-Za-z0-9-] only, so names parse back.
std::string host_tag() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) return "unknown";
  std::string tag(name);
  for (char &c : tag)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  return tag.substr(0, 64);
}

std::string temp_name(const std::string &final_path, const std::string &host) {
  return final_path + kTempMark + host + "." + std::to_string(getpid()) + "." +
         std::to_string(g_temp_counter.fetch_add(1));
}

bool parse_hex_key(const char *s, StoreKey *key) {
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  for (int i = 0; i < 32; ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    key->bytes[i] = uint8_t(hi << 4 | lo);
  }
  return true;
}

// Whether name is a block's file in shard (<shard hex><62 hex>.blk), and its key.
bool block_file_name(const char *name, const char *shard, StoreKey *key) {
  return std::strlen(name) == 64 + 4 && std::strcmp(name + 64, kBlockSuffix) == 0 &&
         std::strncmp(name, shard, 2) == 0 && parse_hex_key(name, key);
}

// 0, an errno, or -1 when the file ended first (truncated under us: a miss).
int read_full(int fd, uint8_t *out, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = pread(fd, out + done, n - done, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return -1;
    done += size_t(r);
  }
  return 0;
}

int write_full(int fd, const uint8_t *in, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = write(fd, in + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    done += size_t(r);  // a short write (a size limit reached) fails on the next call with why
  }
  return 0;
}

int fsync_dir(const std::string &dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int err = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// mkdir -p with mode 0755: 0 or an errno.
int make_dirs(const std::string &dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    if (mkdir(dir.substr(0, i).c_str(), 0755) != 0 && errno != EEXIST) return errno;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// SIGXFSZ kills the process when a write passes RLIMIT_FSIZE and the signal is at SIG_DFL. A put
// blocks it in its own thread for the call instead (the write then fails with EFBIG) and takes
// the signal its writes raised before unblocking: nothing process-wide changes. A host that
// handles or ignores SIGXFSZ, or blocks it itself, is left alone.
class XfszBlock {
 public:
  XfszBlock() {
    struct sigaction sa;
    sigemptyset(&xfsz_);
    sigaddset(&xfsz_, SIGXFSZ);
    if (sigaction(SIGXFSZ, nullptr, &sa) != 0 || (sa.sa_flags & SA_SIGINFO) || sa.sa_handler != SIG_DFL)
      return;
    if (pthread_sigmask(SIG_BLOCK, &xfsz_, &old_) == 0) active_ = !sigismember(&old_, SIGXFSZ);
  }
  ~XfszBlock() {
    if (!active_) return;
    sigset_t pending;
    const timespec zero{};
    while (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) &&
           sigtimedwait(&xfsz_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  XfszBlock(const XfszBlock &) = delete;
  XfszBlock &operator=(const XfszBlock &) = delete;

 private:
  sigset_t xfsz_, old_;
  bool active_ = false;
};

struct KeyHash {
  size_t operator()(const StoreKey &k) const {
    size_t h;
    std::memcpy(&h, k.bytes, sizeof h);  // SHA-256: any 8 bytes are uniform
    return h;
  }
};

class FileStore final : public Store {
 public:
  // A writable store keeps the directory's usage record (file_store_usage.h): it counts the
  // directory under its lock now, and every put and removal changes files and count together.
  FileStore(std::string dir, uint64_t max_bytes, bool writable)
      : dir_(std::move(dir)), host_(host_tag()), max_bytes_(max_bytes) {
    if (!writable) {
      scan();
      return;
    }
    usage_ = std::make_unique<FileStoreUsage>(dir_);
    const std::string e = usage_->lock();
    if (!e.empty()) fail(PKV_ERR_STORE, "file store: %s", e.c_str());
    scan();
    dir_bytes_ = total_bytes_;
    const std::string w = usage_->write(dir_bytes_);
    usage_->unlock();
    if (!w.empty()) fail(PKV_ERR_STORE, "file store: %s", w.c_str());
  }
  const char *kind() const override { return "file"; }
  StoreStatus exists(const StoreKey *keys, size_t n, uint8_t *out) override;
  StoreStatus get(const StoreKey *keys, size_t n, uint8_t *values, size_t value_bytes, uint8_t *found,
                  uint32_t timeout_ms, uint64_t *held_bytes) override;
  StoreStatus read_range(const StoreKey &key, uint64_t offset, size_t n, uint8_t *out, size_t *got) override;
  StoreStatus put(const StoreKey *keys, size_t n, const uint8_t *values, size_t value_bytes) override;
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
  void scan();
  void rescan();
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
  std::string start_block(const StoreKey &key, const uint8_t *value, size_t value_bytes, int *out_fd,
                          std::string *out_temp);
  std::string finish_block(const StoreKey &key, int fd, const std::string &temp, int64_t *seen_ns);

  std::string dir_, host_;
  uint64_t max_bytes_;
  std::unordered_map<StoreKey, Entry, KeyHash> index_;
  std::map<uint64_t, StoreKey> lru_;  // tick -> key, least recently used first
  uint64_t total_bytes_ = 0, next_tick_ = 0;  // total_bytes_: of the blocks in index_
  std::unique_ptr<FileStoreUsage> usage_;      // nullptr: a read-only store
  uint64_t dir_bytes_ = 0;                     // the directory's count, while holding its lock
};

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
      tail.find_first_not_of("0123456789.", dot1) != std::string::npos || tail.find('.', dot1 + 1) != dot2)
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
void FileStore::scan() {
  DIR *d = opendir(dir_.c_str());
  if (!d) fail(PKV_ERR_STORE, "file store: cannot open %s: %s", dir_.c_str(), std::strerror(errno));
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
  std::sort(found.begin(), found.end(), [](const Found &a, const Found &b) { return a.used_ns < b.used_ns; });
  for (const Found &f : found) remember(f.key, f.bytes, f.used_ns);
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
      if (errno == ENOENT) forget(keys[i]);  // never written, or removed by another store
      else error = why("open", path, errno), ++failed;
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
    error = "timed out after " + std::to_string(timeout_ms) + " ms (" + std::to_string(reached) + " of " +
            std::to_string(n) + " keys read)";
    failed += n - reached;
  }
  if (!failed) return {};
  return StoreStatus::failure("file store: " + std::to_string(failed) + " of " + std::to_string(n) +
                              " reads failed; the last: " + error);
}

// Administration's reads of large values, a piece at a time (same rules as get: no blocking
// open, regular files only).
StoreStatus FileStore::read_range(const StoreKey &key, uint64_t offset, size_t n, uint8_t *out, size_t *got) {
  *got = 0;
  const std::string path = path_of(key);
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? StoreStatus{} : StoreStatus::failure("file store: " + why("open", path, errno));
  struct stat st;
  std::string error;
  if (fstat(fd, &st) != 0) error = why("stat", path, errno);
  else if (S_ISREG(st.st_mode) && offset < uint64_t(st.st_size)) {
    const size_t want = size_t(std::min<uint64_t>(n, uint64_t(st.st_size) - offset));
    while (*got < want) {
      const ssize_t r = pread(fd, out + *got, want - *got, off_t(offset + *got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        if (r < 0) error = why("read", path, errno);
        break;
      }
      *got += size_t(r);
    }
  }
  close(fd);
  return error.empty() ? StoreStatus{} : StoreStatus::failure("file store: " + error);
}

// The index rebuilt from the directory (under the usage lock: then the count is exact).
void FileStore::rescan() {
  index_.clear();
  lru_.clear();
  total_bytes_ = 0;
  scan();
  dir_bytes_ = total_bytes_;
}

// Takes the usage lock and reads the directory's count (a missing or foreign record: rescan).
std::string FileStore::lock_usage() {
  std::string e = usage_->lock();
  if (e.empty() && !usage_->read(&dir_bytes_)) rescan();
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
      rescan(), rescanned = true;
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
std::string FileStore::start_block(const StoreKey &key, const uint8_t *value, size_t value_bytes, int *out_fd,
                                   std::string *out_temp) {
  const std::string final_path = path_of(key);
  std::string temp = temp_name(final_path, host_);
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {  // the shard's first block (or the directory was removed)
    const std::string shard = shard_of(key.hex());
    if (mkdir(shard.c_str(), 0755) == 0) fsync_dir(dir_);
    else if (errno != EEXIST) return why("mkdir", shard, errno);
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
std::string FileStore::finish_block(const StoreKey &key, int fd, const std::string &temp, int64_t *seen_ns) {
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

StoreStatus FileStore::put(const StoreKey *keys, size_t n, const uint8_t *values, size_t value_bytes) {
  if (max_bytes_ && value_bytes > max_bytes_)
    return StoreStatus::failure("file store: a value of " + std::to_string(value_bytes) +
                                " bytes is over max_bytes (" + std::to_string(max_bytes_) + ")");
  if (!usage_) return StoreStatus::failure("file store: opened read-only");
  const XfszBlock xfsz;
  std::string error = lock_usage();
  if (!error.empty()) return StoreStatus::failure("file store: " + error);
  // What the batch adds to the directory: each value, less the one it replaces (a key twice in
  // the batch replaces its own first value).
  std::vector<uint64_t> replaced(n, 0);
  int64_t growth = 0;
  for (size_t i = 0; i < n; ++i) {
    struct stat st;
    if (std::find(keys, keys + i, keys[i]) != keys + i) replaced[i] = value_bytes;
    else if (stat(path_of(keys[i]).c_str(), &st) == 0 && S_ISREG(st.st_mode)) replaced[i] = uint64_t(st.st_size);
    growth += int64_t(value_bytes) - int64_t(replaced[i]);
  }
  error = make_room(keys, n, growth);
  if (!error.empty()) {
    usage_->unlock();
    return StoreStatus::failure("file store: " + error);
  }
  size_t failed = 0;
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
  pending.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    Pending p{i, -1, {}};
    const std::string e = start_block(keys[i], values + i * value_bytes, value_bytes, &p.fd, &p.temp);
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

// The cursor is the next shard to read (0 .. 255); a page is whole shards, in key order, until
// it holds count entries. A shard that is not there (never written) is empty.
StoreStatus FileStore::list(uint64_t *cursor, size_t count, std::vector<StoreEntry> *out) {
  if (*cursor > 255) return StoreStatus::failure("file store: cursor " + std::to_string(*cursor) + " is not a shard");
  std::vector<StoreEntry> page;
  unsigned shard = unsigned(*cursor);
  for (; shard < 256 && (page.empty() || page.size() < count); ++shard) {
    char name[3];
    std::snprintf(name, sizeof name, "%02x", shard);
    const std::string path = dir_ + "/" + name;
    DIR *d = opendir(path.c_str());
    if (!d) {
      if (errno == ENOENT || errno == ENOTDIR) continue;  // a stray file there holds no blocks
      return StoreStatus::failure("file store: " + why("open", path, errno));
    }
    const size_t first = page.size();
    errno = 0;
    while (const dirent *e = readdir(d)) {
      StoreKey key;
      struct stat st;
      if (block_file_name(e->d_name, name, &key) &&
          fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        page.push_back({key, uint64_t(st.st_size)});
      errno = 0;
    }
    const int err = errno;
    closedir(d);
    if (err) return StoreStatus::failure("file store: " + why("read", path, err));
    std::sort(page.begin() + std::ptrdiff_t(first), page.end(), [](const StoreEntry &a, const StoreEntry &b) {
      return std::memcmp(a.key.bytes, b.key.bytes, 32) < 0;
    });
  }
  out->insert(out->end(), page.begin(), page.end());
  *cursor = shard < 256 ? shard : 0;
  return {};
}

// A block another store removed first is not an error (removed 0). A writable store counts the
// removals out of the directory's usage record under its lock.
StoreStatus FileStore::remove(const StoreKey *keys, size_t n, uint8_t *removed) {
  std::string error = usage_ ? lock_usage() : "";
  if (!error.empty()) {
    for (size_t i = 0; removed && i < n; ++i) removed[i] = 0;
    return StoreStatus::failure("file store: " + error);
  }
  size_t failed = 0;
  for (size_t i = 0; i < n; ++i) {
    const std::string path = path_of(keys[i]);
    struct stat st;
    const bool sized = lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    const bool gone = unlink(path.c_str()) == 0;
    if (removed) removed[i] = gone;
    if (!gone && errno != ENOENT) {
      error = why("unlink", path, errno), ++failed;
      continue;
    }
    if (gone && sized) dir_bytes_ -= std::min<uint64_t>(dir_bytes_, uint64_t(st.st_size));
    forget(keys[i]);
  }
  if (usage_) {
    if (const std::string e = usage_->write(dir_bytes_); !e.empty()) error = e, ++failed;
    usage_->unlock();
  }
  if (!failed) return {};
  return StoreStatus::failure("file store: " + std::to_string(failed) + " of " + std::to_string(n) +
                              " removals failed; the last: " + error);
}

}  // namespace

std::unique_ptr<Store> make_file_store(const pkv_store_params &p) {
  PKV_REQUIRE(p.path && p.path[0], "pkv_store_params.path is required for a file store");
  std::string dir = p.path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (const int err = make_dirs(dir))
    fail(PKV_ERR_STORE, "file store: cannot make directory %s: %s", dir.c_str(), std::strerror(err));
  if (p.write_mode != PKV_STORE_READ_ONLY) {  // a read-only engine may read a directory it cannot write
    const std::string probe = temp_name(dir + "/.probe", host_tag());
    const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) fail(PKV_ERR_STORE, "file store: cannot write in %s: %s", dir.c_str(), std::strerror(errno));
    close(fd);
    unlink(probe.c_str());
  } else if (access(dir.c_str(), R_OK | X_OK) != 0) {
    fail(PKV_ERR_STORE, "file store: cannot read %s: %s", dir.c_str(), std::strerror(errno));
  }
  return std::make_unique<FileStore>(std::move(dir), p.max_bytes, p.write_mode != PKV_STORE_READ_ONLY);
}

}  // namespace pkv
