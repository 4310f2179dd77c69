// The file store's file helpers (file_store.h): names, times, whole reads and writes, SIGXFSZ.
// Shared by file_store.cpp (the index, lookups and writes) and file_store_admin.cpp (listing,
// removal, ranged reads).
#pragma once

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
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>

#include "tiers/store.h"

namespace pkv::filestore {

inline constexpr char kBlockSuffix[] = ".blk";
inline constexpr char kTempMark[] = ".tmp.";             // <final name>.tmp.<host>.<pid>.<n>
inline constexpr int64_t kStaleTempNs = 60'000'000'000;  // a temp file this old is a dead writer's

inline std::atomic<uint64_t> g_temp_counter{
    0};  // per process: the two stores of an engine never collide

inline int64_t ns_of(const timespec &t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_nsec; }
// When a block was last written or read, as the file says (reads set atime explicitly).
inline int64_t used_ns(const struct stat &st) {
  return std::max(ns_of(st.st_atim), ns_of(st.st_mtim));
}
inline int64_t mono_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return ns_of(t);
}
inline int64_t now_ns() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

inline std::string why(const std::string &what, const std::string &path, int err) {
  return what + " " + path + ": " + std::strerror(err);
}

// This machine's name as it appears in temp names: [A-Za-z0-9-] only, so names parse back.
inline std::string host_tag() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || !name[0]) return "unknown";
  std::string tag(name);
  for (char &c : tag)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  return tag.substr(0, 64);
}

inline std::string temp_name(const std::string &final_path, const std::string &host) {
  return final_path + kTempMark + host + "." + std::to_string(getpid()) + "." +
         std::to_string(g_temp_counter.fetch_add(1));
}

inline bool parse_hex_key(const char *s, StoreKey *key) {
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
inline bool block_file_name(const char *name, const char *shard, StoreKey *key) {
  return std::strlen(name) == 64 + 4 && std::strcmp(name + 64, kBlockSuffix) == 0 &&
         std::strncmp(name, shard, 2) == 0 && parse_hex_key(name, key);
}

// 0, an errno, or -1 when the file ended first (truncated under us: a miss).
inline int read_full(int fd, uint8_t *out, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = pread(fd, out + done, n - done, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    if (r == 0) return -1;
    done += size_t(r);
  }
  return 0;
}

inline int write_full(int fd, const uint8_t *in, size_t n) {
  for (size_t done = 0; done < n;) {
    const ssize_t r = write(fd, in + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno;
    done += size_t(r);  // a short write (a size limit reached) fails on the next call with why
  }
  return 0;
}

inline int fsync_dir(const std::string &dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  const int err = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return err;
}

// mkdir -p with mode 0755: 0 or an errno.
inline int make_dirs(const std::string &dir) {
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
    if (sigaction(SIGXFSZ, nullptr, &sa) != 0 || (sa.sa_flags & SA_SIGINFO) ||
        sa.sa_handler != SIG_DFL)
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

}  // namespace pkv::filestore
