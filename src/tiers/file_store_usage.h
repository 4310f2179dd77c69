// The file store's usage record (DESIGN.md §11): how many bytes of block files a directory holds,
// shared by every store on it - the stores of one engine, other engines, other processes, other
// machines on a shared file system - so max_bytes caps the directory, not each writer.
//
// <path>/.pkv-usage holds "PKVUSE01" and the byte count (uint64, little-endian). Every change of
// a block file by pkv (a put, an eviction, a removal) happens under an exclusive flock() of that
// file, and the count changes with it; opening a writable store rescans the directory under the
// lock and writes the count it found, so a count left wrong by a crash (between a rename and its
// record), or by files removed by hand, is mended at the next open. Reads take no lock.
#pragma once

#include <cstdint>
#include <string>

namespace pkv {

class FileStoreUsage {
 public:
  // Opens (making it) <dir>/.pkv-usage. Throws PKV_ERR_STORE when it cannot.
  explicit FileStoreUsage(const std::string &dir);
  ~FileStoreUsage();
  FileStoreUsage(const FileStoreUsage &) = delete;
  FileStoreUsage &operator=(const FileStoreUsage &) = delete;

  // Takes the directory's lock (flock, exclusive: other processes and other stores of this one
  // wait): "" or why not. unlock() gives it back.
  std::string lock() const;
  void unlock() const;

  // The count recorded; false when there is none or it is not this format's (then rescan).
  bool read(uint64_t *bytes) const;
  // Records bytes: "" or why not.
  std::string write(uint64_t bytes) const;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
  int fd_;
};

}  // namespace pkv
