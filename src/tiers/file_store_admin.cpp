// The file store's administration (file_store.h): listing by shard, removal (counted out of the
// directory's usage record), and ranged reads of large values; never on an engine's path.
#include <algorithm>

#include "tiers/file_store_impl.h"

namespace pkv::filestore {

// Administration's reads of large values, a piece at a time (same rules as get: no blocking
// open, regular files only).
StoreStatus FileStore::read_range(const StoreKey &key, uint64_t offset, size_t n, uint8_t *out,
                                  size_t *got) {
  *got = 0;
  const std::string path = path_of(key);
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? StoreStatus{}
                           : StoreStatus::failure("file store: " + why("open", path, errno));
  struct stat st;
  std::string error;
  if (fstat(fd, &st) != 0)
    error = why("stat", path, errno);
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

// The cursor is the next shard to read (0 .. 255); a page is whole shards, in key order, until
// it holds count entries. A shard that is not there (never written) is empty.
StoreStatus FileStore::list(uint64_t *cursor, size_t count, std::vector<StoreEntry> *out) {
  if (*cursor > 255)
    return StoreStatus::failure("file store: cursor " + std::to_string(*cursor) +
                                " is not a shard");
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
    std::sort(page.begin() + std::ptrdiff_t(first), page.end(),
              [](const StoreEntry &a, const StoreEntry &b) {
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

}  // namespace pkv::filestore
