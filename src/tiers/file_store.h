// The file store (DESIGN.md §11): one file per block in a directory, named by its key, so any
// number of engines on one machine (or on a shared file system) and every restart see the same
// blocks. A value is written to a temporary name in the directory, fsync'ed, renamed over its
// final name and the directory fsync'ed: a crash (even kill -9 or a power cut) leaves either the
// whole old state or the whole new block, never a torn block under a final name; leftover
// temporary files are removed when the store is opened. With a size cap (max_bytes), the least
// recently used blocks are removed to make room, so the directory's blocks stay under the cap
// whoever wrote them (the usage record of file_store_usage.h).
// A write that fails (a full disk, EFBIG under RLIMIT_FSIZE, a read-only directory) leaves
// nothing behind and is reported: the engine counts it and keeps serving.
//
// Layout: <path>/<hh>/<key hex>.blk, hh the key's first byte in hex (256 shards, made on their
// first write), so no directory grows past 1/256 of the store. A block is found only when its
// file is exactly value_bytes long; one of another size (truncated, padded, empty) or that is no
// regular file (a FIFO, a device: opened O_NONBLOCK, never read) is named with what it is, for the
// engine to reject with a reason. Other names are left alone.
// list() (store administration) pages through whole shards in key order (the cursor is the next
// shard); remove() unlinks (a block already gone is no error).
//
// Temporary files: <final name>.tmp.<host>.<pid>.<n> in the block's shard (the open's write probe:
// <path>/.probe.tmp.<host>.<pid>.<n>). Opening a store removes those over a minute old, and those
// of this host (gethostname, [A-Za-z0-9-] only) whose pid is gone; others may be live writers.
//
// Index and LRU: each store keeps its own index (key, size, last use), built at open from the
// files (last use = the later of atime and mtime) and kept by its own calls. get() sets the
// file's atime (futimens; best effort) so uses made through another store on the directory
// (the engine's reader, another engine) show: before removing a block, put() stats it and moves
// it up instead when it was used since this store last looked. File times tick coarsely (a few
// ms), so a use within that tick of the write may not count.
//
// The cap holds for the directory: every writable store keeps the directory's usage record
// (<path>/.pkv-usage, under flock), a put makes room for its whole batch under that lock by
// evicting from its index, rebuilding the index from the directory when the index runs out
// (blocks other engines wrote), and a removal counts itself out. Stores on one directory write
// one batch at a time. A value over max_bytes is refused (a failed put), as are the values of a
// batch past the first ones that fill max_bytes (parents first: a lookup walks from the root). A block another store
// removed is a miss (ENOENT), never an error; any other error (EACCES, EIO, ENOTDIR) fails that
// key (found 0) and the call's status carries the count and the last message; the other keys go
// on. get() stops at timeout_ms between keys (the rest: misses, the call failed).
//
// SIGXFSZ: a write past RLIMIT_FSIZE raises it, and at SIG_DFL it kills the process. put()
// blocks SIGXFSZ in its own thread for the call (the write fails with EFBIG) and consumes the
// signal its writes raised before restoring the mask: the process's disposition is not changed.
// A host that handles, ignores or blocks SIGXFSZ itself is left as it is.
//
// Threads: one store is used by one thread at a time; two stores on one directory (the engine's
// reader and writer, other processes) need no lock between them.
#pragma once

#include <memory>

#include "tiers/store.h"

namespace pkv {

// Opens (making it if missing) p.path. Throws PKV_ERR_INVALID_ARGUMENT without a path and
// PKV_ERR_STORE when the directory cannot be made, opened or written.
std::unique_ptr<Store> make_file_store(const pkv_store_params &p);

}  // namespace pkv
