#include "tiers/file_store_usage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "status.h"

namespace pkv {
namespace {
constexpr char kMagic[8] = {'P', 'K', 'V', 'U', 'S', 'E', '0', '1'};
}

FileStoreUsage::FileStoreUsage(const std::string &dir)
    : path_(dir + "/.pkv-usage"), fd_(open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
  if (fd_ < 0)
    fail(PKV_ERR_STORE, "file store: cannot open %s: %s", path_.c_str(), std::strerror(errno));
}

FileStoreUsage::~FileStoreUsage() { close(fd_); }

std::string FileStoreUsage::lock() const {
  int r;
  while ((r = flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {
  }
  return r == 0 ? "" : "lock " + path_ + ": " + std::strerror(errno);
}

void FileStoreUsage::unlock() const { flock(fd_, LOCK_UN); }

bool FileStoreUsage::read(uint64_t *bytes) const {
  uint8_t rec[16];
  if (pread(fd_, rec, sizeof rec, 0) != ssize_t(sizeof rec) || std::memcmp(rec, kMagic, 8) != 0)
    return false;
  std::memcpy(bytes, rec + 8, 8);
  return true;
}

std::string FileStoreUsage::write(uint64_t bytes) const {
  uint8_t rec[16];
  std::memcpy(rec, kMagic, 8);
  std::memcpy(rec + 8, &bytes, 8);
  // 16 bytes at offset 0 of a file of 16: one write, never torn by a reader's view of the size.
  if (pwrite(fd_, rec, sizeof rec, 0) != ssize_t(sizeof rec))
    return "write " + path_ + ": " + std::strerror(errno ? errno : EIO);
  return "";
}

}  // namespace pkv
