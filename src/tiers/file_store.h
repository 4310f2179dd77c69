// The file store (DESIGN.md §11): one file per block in a directory, named by its key, so any
// number of engines on one machine (or on a shared file system) and every restart see the same
// blocks. A value is written to a temporary name in the directory, fsync'ed, renamed over its
// final name and the directory fsync'ed: a crash (even kill -9 or a power cut) leaves either the
// whole old state or the whole new block, never a torn block under a final name; leftover
// temporary files are removed when the store is opened. With a size cap (max_bytes), the least
// recently used blocks (by access time kept in the store's own index) are removed to make room.
// A write that fails (a full disk, EFBIG under RLIMIT_FSIZE, a read-only directory) leaves
// nothing behind and is reported: the engine counts it and keeps serving.
#pragma once

#include <memory>

#include "tiers/store.h"

namespace pkv {

// Opens (making it if missing) p.path. Throws PKV_ERR_INVALID_ARGUMENT without a path and
// PKV_ERR_STORE when the directory cannot be made, opened or written.
std::unique_ptr<Store> make_file_store(const pkv_store_params &p);

}  // namespace pkv
