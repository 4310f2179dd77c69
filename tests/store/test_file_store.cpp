// src/tiers/file_store.cpp directly (C++): the file store of DESIGN.md §11. Round trips; misses
// (missing; truncated or padded: held with another size); a restart; the size cap's LRU, also across the engine's two stores
// (reads on one, writes and evictions on the other) and across a restart; a value over the cap;
// a full disk (RLIMIT_FSIZE: EFBIG, not SIGXFSZ); an I/O error on one key of a batch; kill -9
// during writes (no torn block under a final name, temp files cleaned on open); a reader and a
// writer thread on their own stores at once; which temp files an open removes; a read-only
// directory (as a non-root user: root ignores modes); bad parameters; listing (pages of shards,
// only block files) and removing, as `pkv store` does.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "status.h"
#include "tiers/file_store.h"

namespace {

int passed, failed;

bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_file_store.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

using pkv::Store;
using pkv::StoreKey;

std::vector<std::string> made_dirs;  // removed at the end

std::string new_dir() {
  const char *base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/pkv-file-store-XXXXXX";
  if (!mkdtemp(&tmpl[0])) perror("mkdtemp"), exit(2);
  chmod(tmpl.c_str(), 0755);  // the read-only test's user must reach it
  made_dirs.push_back(tmpl);
  return tmpl;
}

StoreKey key_of(uint64_t i) {
  StoreKey k;
  uint64_t x = i * 0x9E3779B97F4A7C15ull + 12345;
  for (int b = 0; b < 32; ++b) {
    x ^= x >> 29, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 32;
    k.bytes[b] = uint8_t(x);
  }
  return k;
}

// A value's bytes derive from its key, so any file can be checked on its own.
std::vector<uint8_t> value_of(const StoreKey &k, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t j = 0; j < n; ++j) v[j] = uint8_t(k.bytes[j % 32] + j * 7 + (j >> 8));
  return v;
}

pkv_store_params params(const std::string &dir, uint64_t max_bytes = 0) {
  pkv_store_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  p.kind = PKV_STORE_FILE;
  p.path = dir.c_str();
  p.max_bytes = max_bytes;
  return p;
}

std::unique_ptr<Store> open_store(const std::string &dir, uint64_t max_bytes = 0) {
  return pkv::make_file_store(params(dir, max_bytes));
}

// The layout of file_store.h: <dir>/<first byte's hex>/<key hex>.blk
std::string block_path(const std::string &dir, const StoreKey &k) {
  return dir + "/" + k.hex().substr(0, 2) + "/" + k.hex() + ".blk";
}

pkv::StoreStatus put(Store &s, const std::vector<uint64_t> &ids, size_t n) {
  std::vector<StoreKey> keys;
  std::vector<uint8_t> values;
  for (uint64_t id : ids) {
    keys.push_back(key_of(id));
    const auto v = value_of(keys.back(), n);
    values.insert(values.end(), v.begin(), v.end());
  }
  return s.put(keys.data(), keys.size(), values.data(), n);
}

// 1 per key found with its right value, 0 per miss; -1 for a wrong value.
std::vector<int> get(Store &s, const std::vector<uint64_t> &ids, size_t n,
                     pkv::StoreStatus *status = nullptr) {
  std::vector<StoreKey> keys;
  for (uint64_t id : ids) keys.push_back(key_of(id));
  std::vector<uint8_t> values(ids.size() * n), found(ids.size(), 7);
  const pkv::StoreStatus st = s.get(keys.data(), keys.size(), values.data(), n, found.data(), 0);
  if (status) *status = st;
  std::vector<int> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<uint8_t> got(values.begin() + i * n, values.begin() + (i + 1) * n);
    out.push_back(found[i] == 1   ? (got == value_of(keys[i], n) ? 1 : -1)
                  : found[i] <= 3 ? -10 * found[i]
                                  : -2);
  }
  return out;
}

bool held(Store &s, uint64_t id) {
  const StoreKey k = key_of(id);
  uint8_t out = 7;
  return s.exists(&k, 1, &out).ok && out == 1;
}

// Names under dir and its shards that hold ".tmp." (temp files left by writers).
int count_temps(const std::string &dir) {
  int n = 0;
  std::vector<std::string> dirs{dir};
  for (size_t i = 0; i < dirs.size(); ++i) {
    DIR *d = opendir(dirs[i].c_str());
    if (!d) continue;
    while (const dirent *e = readdir(d)) {
      if (std::strstr(e->d_name, ".tmp.")) ++n;
      if (i == 0 && std::strlen(e->d_name) == 2 && e->d_name[0] != '.')
        dirs.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
  }
  return n;
}

using Ints = std::vector<int>;

void test_round_trip() {
  const std::string dir = new_dir();
  auto s = open_store(dir);
  CHECK(std::strcmp(s->kind(), "file") == 0);
  CHECK(put(*s, {1, 2, 3, 4, 5}, 4099).ok);
  CHECK(get(*s, {3, 1, 99, 5, 2, 4}, 4099) == Ints({1, 1, 0, 1, 1, 1}));
  CHECK(get(*s, {98}, 4099) == Ints({0}));  // a miss alone is no error
  pkv::StoreStatus st;
  get(*s, {98, 97}, 4099, &st);
  CHECK(st.ok);
  CHECK(held(*s, 4) && !held(*s, 98));
  CHECK(put(*s, {2}, 4099).ok);  // replacing a value
  CHECK(get(*s, {2}, 4099) == Ints({1}));
  CHECK(count_temps(dir) == 0);
}

void test_wrong_sizes() {
  const std::string dir = new_dir();
  auto s = open_store(dir);
  CHECK(put(*s, {1, 2, 3}, 5000).ok);
  CHECK(truncate(block_path(dir, key_of(1)).c_str(), 4999) == 0);  // truncated
  CHECK(truncate(block_path(dir, key_of(2)).c_str(), 5001) == 0);  // padded
  // Held with another size: found kStoreWrongSize (-20 here), never read (test_store_hostile
  // checks the sizes it reports).
  CHECK(get(*s, {1, 2, 3}, 5000) == Ints({-20, -20, 1}));
  CHECK(get(*s, {3}, 4999) == Ints({-20}));  // asked with another size
  CHECK(put(*s, {1}, 5000).ok);              // a put mends it
  CHECK(get(*s, {1}, 5000) == Ints({1}));
}

void test_restart() {
  const std::string dir = new_dir();
  CHECK(put(*open_store(dir), {10, 11, 12}, 777).ok);
  auto s = open_store(dir + "//");
  CHECK(held(*s, 10) && held(*s, 11) && held(*s, 12));
  CHECK(get(*s, {12, 10, 11}, 777) == Ints({1, 1, 1}));
}

void test_cap() {
  const std::string dir = new_dir();
  auto s = open_store(dir, 3500);  // three values of 1000
  CHECK(put(*s, {1, 2, 3}, 1000).ok);
  CHECK(get(*s, {1}, 1000) == Ints({1}));  // 1 is now newer than 2
  CHECK(put(*s, {4}, 1000).ok);
  CHECK(held(*s, 1) && !held(*s, 2) && held(*s, 3) && held(*s, 4));
  CHECK(put(*s, {3}, 1000).ok);  // a replaced value makes its own room
  CHECK(held(*s, 1) && held(*s, 3) && held(*s, 4));
  const pkv::StoreStatus big = put(*s, {5}, 3501);
  CHECK(!big.ok && big.error.find("max_bytes") != std::string::npos);
  CHECK(!held(*s, 5) && held(*s, 1) && held(*s, 3) && held(*s, 4));  // nothing evicted for it
  CHECK(put(*s, {6}, 3500).ok);  // exactly the cap: everything else goes
  CHECK(held(*s, 6) && !held(*s, 1) && !held(*s, 3) && !held(*s, 4));
}

// The engine reads on one store and writes on another; reads must still count as uses. After a
// restart the order comes from the files' times.
void test_cap_two_stores_and_restart() {
  const std::string dir = new_dir();
  auto writer = open_store(dir, 3500), reader = open_store(dir);
  CHECK(put(*writer, {1, 2, 3}, 1000).ok);
  usleep(20000);  // file times tick coarsely (a few ms)
  CHECK(get(*reader, {1}, 1000) == Ints({1}));
  usleep(20000);
  CHECK(put(*writer, {4}, 1000).ok);
  CHECK(held(*reader, 1) && !held(*reader, 2) && held(*reader, 3) && held(*reader, 4));
  CHECK(get(*reader, {2, 1}, 1000) == Ints({0, 1}));  // the evicted block is a plain miss
  writer.reset();
  usleep(20000);
  auto again = open_store(dir, 3500);  // by use: 3, 4, 1
  CHECK(put(*again, {5}, 1000).ok);
  CHECK(!held(*again, 3) && held(*again, 4) && held(*again, 1) && held(*again, 5));
}

void test_full_disk() {
  const std::string dir = new_dir();
  auto s = open_store(dir);
  CHECK(put(*s, {1}, 4099).ok);
  rlimit old;
  getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 2000;
  CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
  const pkv::StoreStatus st = put(*s, {2, 3}, 4099);  // SIGXFSZ would kill us here
  setrlimit(RLIMIT_FSIZE, &old);
  CHECK(!st.ok && st.error.find(strerror(EFBIG)) != std::string::npos);
  fprintf(stderr, "  (full disk: %s)\n", st.error.c_str());
  CHECK(count_temps(dir) == 0);
  CHECK(!held(*s, 2) && !held(*s, 3));
  CHECK(get(*s, {1, 2}, 4099) == Ints({1, 0}));
  struct sigaction sa;
  sigaction(SIGXFSZ, nullptr, &sa);
  CHECK(sa.sa_handler == SIG_DFL);  // nothing process-wide was changed
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  CHECK(!sigismember(&mask, SIGXFSZ));
  CHECK(put(*s, {2}, 4099).ok);
  CHECK(get(*s, {2}, 4099) == Ints({1}));
}

// A shard path that is a file: that key's reads and writes fail (reported), the others go on.
void test_io_error() {
  const std::string dir = new_dir();
  auto s = open_store(dir);
  CHECK(put(*s, {1}, 100).ok);
  const std::string shard = dir + "/" + key_of(2).hex().substr(0, 2);
  if (shard == dir + "/" + key_of(1).hex().substr(0, 2)) return;  // not with these keys
  FILE *f = fopen(shard.c_str(), "w");
  fclose(f);
  pkv::StoreStatus st;
  CHECK(get(*s, {2, 1}, 100, &st) == Ints({0, 1}));
  CHECK(!st.ok && st.error.find(strerror(ENOTDIR)) != std::string::npos);
  const StoreKey k2 = key_of(2);
  uint8_t out = 7;
  CHECK(!s->exists(&k2, 1, &out).ok && out == 0);
  CHECK(!put(*s, {2}, 100).ok);
  CHECK(open_store(dir) != nullptr);  // the stray file does not stop an open
}

// kill -9 at random moments while a child writes (with evictions): every block under a final
// name is whole and right; the temp files it left are removed on the next open.
void test_kill9() {
  const std::string dir = new_dir();
  const size_t n = 3 * 65536 + 17;
  int temps_seen = 0, round = 0;
  srand(7);
  for (; round < 40 && (round < 8 || temps_seen == 0); ++round) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        auto s = open_store(dir, 40 * n);
        for (uint64_t i = round;; i = i * 31 + 7) put(*s, {i % 48}, n);
      } catch (...) {
      }
      _exit(1);
    }
    usleep(2000 + rand() % 40000);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    temps_seen += count_temps(dir);
  }
  fprintf(stderr, "  (kill -9: %d rounds, %d temp files left behind)\n", round, temps_seen);
  CHECK(temps_seen > 0);
  int blocks = 0, whole = 0;
  for (uint64_t id = 0; id < 48; ++id) {
    struct stat st;
    if (stat(block_path(dir, key_of(id)).c_str(), &st) != 0) continue;
    ++blocks;
    FILE *f = fopen(block_path(dir, key_of(id)).c_str(), "rb");
    std::vector<uint8_t> v(n + 1);
    whole += f && fread(v.data(), 1, n + 1, f) == n && (v.pop_back(), v == value_of(key_of(id), n));
    if (f) fclose(f);
  }
  CHECK(blocks > 0 && whole == blocks);
  auto s = open_store(dir);
  CHECK(count_temps(dir) == 0);
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 48; ++id) ids.push_back(id);
  int found = 0, bad = 0;
  for (int r : get(*s, ids, n)) found += r == 1, bad += r < 0;
  CHECK(found == blocks && bad == 0);
}

// The engine's pair at once: a writer thread (evicting under a small cap) and a reader thread on
// their own stores. A read sees a whole value or a miss, never part of one.
void test_reader_and_writer_threads() {
  const std::string dir = new_dir();
  const size_t n = 65536 + 3;
  auto writer = open_store(dir, 8 * n), reader = open_store(dir);
  std::atomic<bool> done{false};
  std::thread w([&] {
    for (uint64_t i = 0; i < 400; ++i) put(*writer, {i * 7 % 24, i * 11 % 24}, n);
    done = true;
  });
  int hits = 0, bad = 0;
  for (uint64_t i = 0; !done; ++i)
    for (int r : get(*reader, {i % 24, i * 5 % 24}, n)) hits += r == 1, bad += r < 0;
  w.join();
  fprintf(stderr, "  (threads: %d hits)\n", hits);
  CHECK(bad == 0 && hits > 0);
  CHECK(count_temps(dir) == 0);
}

std::string host_tag() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string tag(name[0] ? name : "unknown");
  for (char &c : tag)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  return tag.substr(0, 64);
}

// Which temp files an open removes: a dead writer's of this machine, or any over a minute old.
void test_temp_cleanup() {
  const std::string dir = new_dir();
  CHECK(put(*open_store(dir), {1}, 100).ok);
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string base = block_path(dir, key_of(1)) + ".tmp.", host = host_tag();
  const std::string dead_tmp = base + host + "." + std::to_string(dead) + ".0";
  const std::string live_tmp = base + host + "." + std::to_string(getpid()) + ".1";
  const std::string old_tmp = base + host + "." + std::to_string(getpid()) + ".2";
  const std::string foreign_tmp = base + "other-host." + std::to_string(dead) + ".3";
  const std::string probe_tmp = dir + "/.probe.tmp." + host + "." + std::to_string(dead) + ".4";
  const std::string not_ours = dir + "/notes.tmp.keep";  // not a temp name of the store's
  for (const std::string &p : {dead_tmp, live_tmp, old_tmp, foreign_tmp, probe_tmp, not_ours})
    fclose(fopen(p.c_str(), "w"));
  const timespec two_minutes_ago[2] = {{time(nullptr) - 120, 0}, {time(nullptr) - 120, 0}};
  CHECK(utimensat(AT_FDCWD, old_tmp.c_str(), two_minutes_ago, 0) == 0);
  CHECK(utimensat(AT_FDCWD, not_ours.c_str(), two_minutes_ago, 0) == 0);
  auto s = open_store(dir);
  CHECK(access(dead_tmp.c_str(), F_OK) != 0 && access(old_tmp.c_str(), F_OK) != 0);
  CHECK(access(probe_tmp.c_str(), F_OK) != 0);
  CHECK(access(live_tmp.c_str(), F_OK) == 0 && access(foreign_tmp.c_str(), F_OK) == 0);
  CHECK(access(not_ours.c_str(), F_OK) == 0);
  CHECK(get(*s, {1}, 100) == Ints({1}));
}

// A read-only directory: run as "nobody" when we are root (root writes anywhere). Opening fails
// with PKV_ERR_STORE; a store opened before fails its puts cleanly and still reads.
void test_read_only() {
  const std::string dir = new_dir();
  const uid_t nobody = 65534;
  if (getuid() == 0 && chown(dir.c_str(), nobody, nobody) != 0) return perror("chown");
  const pid_t pid = fork();
  if (pid == 0) {
    if (getuid() == 0 && (setgid(nobody) != 0 || setuid(nobody) != 0)) _exit(100);
    int bad = 0;
#define BAD(x) (!check(!(x), #x, __LINE__))
    auto s = open_store(dir);
    bad += BAD(!put(*s, {1, 2}, 100).ok);
    for (uint64_t id : {1, 2}) chmod((dir + "/" + key_of(id).hex().substr(0, 2)).c_str(), 0555);
    chmod(dir.c_str(), 0555);
    const pkv::StoreStatus st = put(*s, {1, 3}, 100);
    bad += BAD(st.ok || st.error.find(strerror(EACCES)) == std::string::npos);
    bad += BAD(count_temps(dir) != 0);
    bad += BAD(get(*s, {1, 2, 3}, 100) != Ints({1, 1, 0}));
    for (const std::string &path : {dir, dir + "/sub"}) {
      try {
        open_store(path);
        bad += BAD(true);
      } catch (const pkv::Error &e) {
        bad += BAD(e.status() != PKV_ERR_STORE);
        if (path == dir) fprintf(stderr, "  (read-only: %s)\n", e.what());
      }
    }
    _exit(bad);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 100);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

void test_bad_params() {
  pkv_store_params p = params("");
  for (const char *path : {static_cast<const char *>(nullptr), ""}) {
    p.path = path;
    try {
      pkv::make_file_store(p);
      CHECK(false);
    } catch (const pkv::Error &e) {
      CHECK(e.status() == PKV_ERR_INVALID_ARGUMENT);
    }
  }
  const std::string dir = new_dir();
  fclose(fopen((dir + "/file").c_str(), "w"));
  try {
    open_store(dir + "/file/sub");
    CHECK(false);
  } catch (const pkv::Error &e) {
    CHECK(e.status() == PKV_ERR_STORE && std::strstr(e.what(), strerror(ENOTDIR)));
  }
  CHECK(open_store(dir + "/made/on/demand") != nullptr);
}

// Every page of a listing from the start, count entries asked each; pages counted.
std::vector<pkv::StoreEntry> list_all(Store &s, size_t count, int *pages = nullptr) {
  std::vector<pkv::StoreEntry> all;
  uint64_t cursor = 0;
  int n = 0;
  do {
    if (!CHECK(s.list(&cursor, count, &all).ok) || !CHECK(++n < 1000)) break;
  } while (cursor != 0);
  if (pages) *pages = n;
  return all;
}

// The administrator's calls: a listing finds every block once, in pages of whole shards, with
// its size, and nothing else (temp files, strays); remove() removes, a second time is no error.
void test_list_and_remove() {
  const std::string dir = new_dir();
  auto s = open_store(dir);
  CHECK(list_all(*s, 10).empty());  // an empty directory: one page, nothing in it
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; id < 300; ++id) ids.push_back(id);
  CHECK(put(*s, ids, 100).ok);
  CHECK(put(*s, {1000, 1001}, 57).ok);
  const std::string shard = dir + "/" + key_of(5).hex().substr(0, 2);
  fclose(fopen((shard + "/notes.txt").c_str(), "w"));                       // not a block name
  fclose(fopen((block_path(dir, key_of(5)) + ".tmp.h.1.2").c_str(), "w"));  // a writer's temp
  fclose(fopen((dir + "/" + key_of(6).hex() + ".blk").c_str(), "w"));       // not in its shard
  mkdir((dir + "/" + key_of(5000).hex().substr(0, 2)).c_str(), 0755);
  CHECK(mkdir(block_path(dir, key_of(5000)).c_str(), 0755) == 0);  // a directory
  int pages = 0;
  std::vector<pkv::StoreEntry> all = list_all(*s, 10, &pages);
  CHECK(all.size() == 302);
  CHECK(pages > 10 && pages <= 256);
  std::map<std::string, uint64_t> sizes;
  for (const auto &e : all) sizes[e.key.hex()] = e.value_bytes;
  CHECK(sizes.size() == 302);
  size_t right = 0;
  for (uint64_t id : ids) right += sizes.count(key_of(id).hex()) && sizes[key_of(id).hex()] == 100;
  CHECK(right == 300);
  CHECK(sizes[key_of(1000).hex()] == 57 && sizes[key_of(1001).hex()] == 57);
  CHECK(list_all(*s, 1000, &pages).size() == 302 && pages == 1);  // one page: every shard

  std::vector<StoreKey> gone = {key_of(0), key_of(1), key_of(1000), key_of(4242)};
  uint8_t removed[4] = {7, 7, 7, 7};
  CHECK(s->remove(gone.data(), 4, removed).ok);
  CHECK(removed[0] == 1 && removed[1] == 1 && removed[2] == 1 && removed[3] == 0);
  CHECK(s->remove(gone.data(), 4, removed).ok && removed[0] == 0 && removed[2] == 0);
  CHECK(s->remove(gone.data(), 4, nullptr).ok);
  CHECK(get(*s, {0, 1, 2}, 100) == Ints({0, 0, 1}));
  CHECK(list_all(*open_store(dir), 64).size() == 299);  // another store on the directory sees it

  uint64_t bad = 256;
  std::vector<pkv::StoreEntry> none;
  CHECK(!s->list(&bad, 10, &none).ok && bad == 256 && none.empty());
}

void remove_tree(const std::string &dir) {
  nftw(
      dir.c_str(),
      [](const char *p, const struct stat *, int type, FTW *) {
        if (type == FTW_D || type == FTW_DNR) chmod(p, 0755);  // the read-only test's
        return 0;
      },
      16, FTW_PHYS);
  nftw(
      dir.c_str(), [](const char *p, const struct stat *, int, FTW *) { return remove(p); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace

int main() {
  const struct {
    const char *name;
    void (*run)();
  } tests[] = {{"round_trip", test_round_trip},
               {"wrong_sizes", test_wrong_sizes},
               {"restart", test_restart},
               {"cap", test_cap},
               {"cap_two_stores_and_restart", test_cap_two_stores_and_restart},
               {"full_disk", test_full_disk},
               {"io_error", test_io_error},
               {"kill9", test_kill9},
               {"reader_and_writer_threads", test_reader_and_writer_threads},
               {"temp_cleanup", test_temp_cleanup},
               {"read_only", test_read_only},
               {"bad_params", test_bad_params},
               {"list_and_remove", test_list_and_remove}};
  for (const auto &t : tests) {
    fprintf(stderr, "%s\n", t.name);
    try {
      t.run();
    } catch (const std::exception &e) {
      check(false, e.what(), 0);
    }
  }
  for (const std::string &dir : made_dirs) remove_tree(dir);
  printf("test_file_store: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
