// A FILE store under hostile or faulty conditions (issue 26 item 12), through pkv.h only:
//  - a crafted value whose header sizes wrap 64 bits: pkv_store_verify / pkv_store_list call it
//    bad (they read 4 GiB past it and crashed);
//  - a 2 GiB sparse file under a block's name (zeros, or a header declaring the 2 GiB): verify's
//    peak memory grows by less than 64 MiB (it read the file whole);
//  - a FIFO in a block file's place: pkv_allocate answers in bounded time, a miss with a reason
//    (it blocked in open() forever);
//  - block files truncated, padded, empty: rejected and counted, the reason (with the size) in
//    pkv_engine_store_error (they were plain misses);
//  - model ids: engines of one KV shape share blocks only under one model id (fine-tunes of one
//    base never hit each other's KV); no id: a warning; pkv_hf_config_digest.
// Each engine test runs in a child process under alarm(), so a hang fails it instead of stalling.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/sha.h>
#include <xxhash.h>

#include <string>
#include <vector>

#include "../unit/test_util.h"

namespace {

constexpr uint32_t BS = 4, N = 13;

std::string new_dir() {
  char dir[] = "/tmp/pkv-faults-XXXXXX";
  if (!mkdtemp(dir)) perror("mkdtemp"), exit(2);
  return dir;
}

void remove_dir(const std::string &dir) { CHECK(system(("rm -rf " + dir).c_str()) == 0); }

pkv_store_params file_params(const std::string &dir, const char *model_id = "test-model@1") {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir.c_str();
  sp.lookup_timeout_ms = 500;
  sp.model_id = model_id;
  return sp;
}

pkv_engine *engine(pkv_store_params *sp) {
  pkv_engine_params p;
  tu_params(&p, BS, 16);  // f32, 2 layers, 4 q heads, 2 kv heads of 8
  p.host_num_blocks = 8;
  p.store = sp;
  return tu_engine_p(&p);
}

// An engine on sp computes a prompt of N tokens (3 full blocks written through) and goes.
void write_prompt(pkv_store_params *sp, int32_t first) {
  pkv_engine *e = engine(sp);
  if (!CHECK(e != nullptr)) return;
  int32_t t[N];
  tu_fill(t, N, first);
  const uint64_t s = tu_alloc(e, t, N, nullptr);
  tu_compute1(e, s);
  pkv_engine_destroy(e);  // the writer finishes its queue
}

// Every block file of the store: <dir>/<hh>/<64 hex>.blk.
std::vector<std::string> block_files(const std::string &dir) {
  std::vector<std::string> out;
  DIR *d = opendir(dir.c_str());
  while (const dirent *e = d ? readdir(d) : nullptr) {
    if (strlen(e->d_name) != 2 || e->d_name[0] == '.') continue;
    const std::string shard = dir + "/" + e->d_name;
    DIR *s = opendir(shard.c_str());
    while (const dirent *f = s ? readdir(s) : nullptr)
      if (strlen(f->d_name) == 68) out.push_back(shard + "/" + f->d_name);
    if (s) closedir(s);
  }
  if (d) closedir(d);
  return out;
}

std::string store_error(pkv_engine *e) {
  char why[512] = "";
  uint32_t len = 0;
  CHECK_OK(pkv_engine_store_error(e, why, sizeof why, &len));
  return why;
}

double now_s() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Runs fn in a child process that must finish within `seconds` with no failed check.
template <class Fn> void in_child(unsigned seconds, Fn fn) {
  const int failed_before = tu_failed_;
  const pid_t child = fork();
  if (child == 0) {
    alarm(seconds);  // a hang is SIGALRM: the parent sees it
    fn();
    _exit(tu_failed_ != failed_before ? 1 : 0);
  }
  int status = -1;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (WIFSIGNALED(status))
    fprintf(stderr, "  child killed by signal %d (SIGALRM: it hung)\n", WTERMSIG(status));
}

// A fresh engine looks the prompt up: a miss (nothing cached), one value rejected, and why.
void expect_rejected(pkv_store_params *sp, int32_t first, const char *reason) {
  pkv_engine *e = engine(sp);
  if (!CHECK(e != nullptr)) return;
  int32_t t[N];
  tu_fill(t, N, first);
  uint32_t cached = 99;
  const double t0 = now_s();
  const uint64_t s = tu_alloc(e, t, N, &cached);
  CHECK(now_s() - t0 < 2.0);  // lookup_timeout_ms is 500
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(tu_stats(e).num_store_rejected, 1);
  const std::string why = store_error(e);
  CHECK(why.find(reason) != std::string::npos);
  if (why.find(reason) == std::string::npos)
    fprintf(stderr, "  store error \"%s\", wanted \"%s\"\n", why.c_str(), reason);
  CHECK_OK(pkv_release(e, s));
  pkv_engine_destroy(e);
}

void test_fifo_in_place() {
  const std::string dir = new_dir();
  pkv_store_params sp = file_params(dir);
  write_prompt(&sp, 10);
  const std::vector<std::string> files = block_files(dir);
  CHECK_EQ_INT(files.size(), 3);
  for (const std::string &f : files) CHECK(unlink(f.c_str()) == 0 && mkfifo(f.c_str(), 0644) == 0);
  in_child(20, [&] {
    expect_rejected(&sp, 10, "not a value");
    // The administration lists regular files only: the FIFOs are not blocks, and nothing hangs.
    pkv_store *s = nullptr;
    if (!CHECK_OK(pkv_store_open(&sp, &s))) return;
    pkv_store_verify_result r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    CHECK_OK(pkv_store_verify(s, 0, &r));
    CHECK_EQ_INT(r.num_blocks, 0);
    pkv_store_close(s);
  });
  remove_dir(dir);
}

void test_wrong_sizes() {
  const std::string dir = new_dir();
  pkv_store_params sp = file_params(dir);
  write_prompt(&sp, 20);
  const std::vector<std::string> files = block_files(dir);
  CHECK_EQ_INT(files.size(), 3);
  struct stat st;
  if (files.empty() || stat(files[0].c_str(), &st) != 0) return;
  const off_t size = st.st_size;
  const std::string sz = std::to_string(size);
  const struct {
    off_t to;
    std::string reason;
  } cases[] = {
      {100, "100 bytes, a block is " + sz + " bytes (truncated)"},
      {size + 1, std::to_string(size + 1) + " bytes, a block is " + sz + " bytes (padded)"},
      {0, "an empty value, a block is " + sz + " bytes"}};
  for (const auto &c : cases) {
    for (const std::string &f : files) CHECK(truncate(f.c_str(), c.to) == 0);
    in_child(20, [&] { expect_rejected(&sp, 20, c.reason.c_str()); });
  }
  remove_dir(dir);
}

// The 16,600-byte value of the issue: 2^30 tokens, a payload_bytes wrapping the sizes' sum.
std::vector<uint8_t> wrapping_value() {
  std::vector<uint8_t> v(16600, 0);
  memcpy(v.data(), "PKVSTORE", 8);
  const uint32_t version = 1, header = 152, tokens = 1u << 30;
  const uint64_t payload = 16600 - 152 - (uint64_t(4) << 30);
  memcpy(v.data() + 8, &version, 4);
  memcpy(v.data() + 12, &header, 4);
  memcpy(v.data() + 112, &tokens, 4);
  memcpy(v.data() + 120, &payload, 8);
  return v;
}

void write_file(const std::string &path, const std::vector<uint8_t> &bytes, off_t size) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0 && write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
  CHECK(ftruncate(fd, size) == 0);
  close(fd);
}

pkv_store_verify_result verify(const std::string &dir) {
  pkv_store_params sp = file_params(dir, nullptr);
  pkv_store_verify_result r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  pkv_store *s = nullptr;
  if (CHECK_OK(pkv_store_open(&sp, &s))) CHECK_OK(pkv_store_verify(s, 0, &r));
  pkv_store_close(s);
  return r;
}

void test_wrapping_sizes() {
  const std::string dir = new_dir();
  CHECK(mkdir((dir + "/ab").c_str(), 0755) == 0);
  const std::string name = dir + "/ab/ab" + std::string(62, '0') + ".blk";
  write_file(name, wrapping_value(), 16600);
  in_child(60, [&] {
    const pkv_store_verify_result r = verify(dir);
    CHECK_EQ_INT(r.num_blocks, 1);
    CHECK_EQ_INT(r.num_bad, 1);
    CHECK(strstr(r.first_bad_problem, "1073741824 tokens") != nullptr);
    pkv_store_params sp = file_params(dir, nullptr);
    pkv_store *s = nullptr;
    if (!CHECK_OK(pkv_store_open(&sp, &s))) return;
    pkv_store_entry e[4];
    uint64_t cursor = 0;
    uint32_t len = 0;
    CHECK_OK(pkv_store_list(s, &cursor, 0, e, sizeof e[0], 4, &len));
    CHECK(len == 1 && e[0].state == PKV_STORE_VALUE_BAD && cursor == 0);
    pkv_store_close(s);
  });
  remove_dir(dir);
}

long max_rss_kib() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// A header declaring a value of value_bytes: 4 tokens, the payload the rest, its header checksum
// right and its key SHA-256 of its (zero) parent and tokens, so only the payload can be wrong.
// Returns the key's hex (the block's file name).
std::string valid_head(uint64_t value_bytes, std::vector<uint8_t> *head) {
  head->assign(152 + 16, 0);
  uint8_t *h = head->data();
  memcpy(h, "PKVSTORE", 8);
  const uint32_t version = 1, header = 152, tokens = 4;
  const uint64_t payload = value_bytes - 152 - 16;
  const int32_t ids[4] = {1, 2, 3, 4};
  memcpy(h + 8, &version, 4);
  memcpy(h + 12, &header, 4);
  memcpy(h + 112, &tokens, 4);
  memcpy(h + 120, &payload, 8);
  memcpy(h + 152, ids, 16);
  uint8_t chain[32 + 16] = {0}, key[32];
  memcpy(chain + 32, ids, 16);
  SHA256(chain, sizeof chain, key);
  memcpy(h + 48, key, 32);  // Header::key (Header::parent, at 80, stays zero)
  XXH3_state_t *st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, h, 136);  // the header up to header_checksum
  XXH3_64bits_update(st, h + 152, 16);
  const uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  memcpy(h + 136, &sum, 8);
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
  return hex;
}

// 2 GiB sparse block files: verify's peak memory stays bounded (it read them whole). One is
// zeros (refused by its header); one has a valid header and key, so its 2 GiB payload is read
// through, a chunk at a time, and fails its checksum.
void test_huge_values() {
  const std::string dir = new_dir();
  const uint64_t huge = uint64_t(2) << 30;
  std::vector<uint8_t> head;
  const std::string key = valid_head(huge, &head);
  CHECK(mkdir((dir + "/" + key.substr(0, 2)).c_str(), 0755) == 0);
  write_file(dir + "/" + key.substr(0, 2) + "/" + key + ".blk", head, off_t(huge));
  const std::string zeros = key.substr(0, 2) + std::string(62, '1');
  write_file(dir + "/" + key.substr(0, 2) + "/" + zeros + ".blk", {}, off_t(huge));
  const long before = max_rss_kib();
  const double t0 = now_s();
  pkv_store_params sp = file_params(dir, nullptr);
  pkv_store *s = nullptr;
  pkv_store_entry e[4];
  uint64_t cursor = 0;
  uint32_t len = 0;
  if (CHECK_OK(pkv_store_open(&sp, &s)))
    CHECK_OK(pkv_store_list(s, &cursor, 0, e, sizeof e[0], 4, &len));
  pkv_store_close(s);
  const long grown_mib = (max_rss_kib() - before) / 1024;
  CHECK_EQ_INT(len, 2);
  for (uint32_t i = 0; i < len && i < 4; i++) {
    CHECK(e[i].state == PKV_STORE_VALUE_BAD);
    const bool streamed = memcmp(e[i].key.bytes, head.data() + 48, 32) == 0;
    CHECK(strstr(e[i].problem, streamed ? "payload checksum mismatch" : "magic") != nullptr);
  }
  CHECK(grown_mib < 64);
  printf("  (two 2 GiB values judged in %.1f s: peak RSS grew %ld MiB)\n", now_s() - t0, grown_mib);
  remove_dir(dir);
}

void test_model_ids() {
  const std::string dir = new_dir();
  pkv_store_params a = file_params(dir, "org/base-ft-a@1");
  write_prompt(&a, 30);
  in_child(30, [&] {
    pkv_store_params b = file_params(dir, "org/base-ft-b@1"), none = file_params(dir, nullptr);
    int32_t t[N];
    tu_fill(t, N, 30);
    uint32_t cached = 99;
    pkv_engine *e = engine(&b);  // another fine-tune, the same shape: none of a's KV
    if (CHECK(e != nullptr)) {
      CHECK_OK(pkv_release(e, tu_alloc(e, t, N, &cached)));
      CHECK_EQ_INT(cached, 0);
      CHECK_EQ_INT(tu_stats(e).num_store_hits, 0);
      CHECK(store_error(e).empty());
      pkv_engine_destroy(e);
    }
    e = engine(&none);  // no id: none of it either, and a warning of what it risks
    if (CHECK(e != nullptr)) {
      CHECK(store_error(e).find("no store model_id") == 0);
      CHECK_OK(pkv_release(e, tu_alloc(e, t, N, &cached)));
      CHECK_EQ_INT(cached, 0);
      pkv_engine_destroy(e);
    }
    e = engine(&a);  // the same id: hits
    if (CHECK(e != nullptr)) {
      CHECK_OK(pkv_release(e, tu_alloc(e, t, N, &cached)));
      CHECK_EQ_INT(cached, N - 1);
      pkv_engine_destroy(e);
    }
    pkv_store_params bad = file_params(dir, "");
    pkv_engine_params p;
    tu_params(&p, BS, 16);
    p.host_num_blocks = 8;
    p.store = &bad;
    pkv_engine *refused = nullptr;
    CHECK_STATUS(pkv_engine_create(&p, &refused), PKV_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pkv_last_error(), "model_id") != nullptr);
    const std::string long_id(PKV_MAX_MODEL_ID_BYTES + 1, 'x');
    bad.model_id = long_id.c_str();
    CHECK_STATUS(pkv_engine_create(&p, &refused), PKV_ERR_INVALID_ARGUMENT);
  });
  remove_dir(dir);
}

void test_config_digest() {
  const char cfg[] =
      "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
      "\"hidden_size\": 32, \"max_position_embeddings\": 64, \"torch_dtype\": \"float32\"}";
  const char other[] =
      "{\"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
      "\"hidden_size\": 32, \"head_dim\": 8, \"max_position_embeddings\": 64, \"torch_dtype\": \"float32\"}";
  char d1[PKV_HF_CONFIG_DIGEST_BYTES], d2[PKV_HF_CONFIG_DIGEST_BYTES],
      d3[PKV_HF_CONFIG_DIGEST_BYTES];
  CHECK_OK(pkv_hf_config_digest(cfg, strlen(cfg), d1, sizeof d1));
  CHECK_OK(pkv_hf_config_digest(cfg, strlen(cfg), d2, sizeof d2));
  CHECK_OK(pkv_hf_config_digest(other, strlen(other), d3, sizeof d3));
  CHECK(strncmp(d1, "config-sha256:", 14) == 0 && strlen(d1) == 14 + 64);
  CHECK(strcmp(d1, d2) == 0 && strcmp(d1, d3) != 0);
  memset(d2, 'z', sizeof d2);
  CHECK_STATUS(pkv_hf_config_digest("{\"x\": 1}", 8, d2, sizeof d2), PKV_ERR_INVALID_ARGUMENT);
  CHECK(d2[0] == 'z');  // out unchanged
  CHECK_STATUS(pkv_hf_config_digest(cfg, strlen(cfg), d2, PKV_HF_CONFIG_DIGEST_BYTES - 1),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "PKV_HF_CONFIG_DIGEST_BYTES") != nullptr);
  CHECK_STATUS(pkv_hf_config_digest(nullptr, 0, d2, sizeof d2), PKV_ERR_INVALID_ARGUMENT);
}

}  // namespace

int main() {
  TU_RUN(test_huge_values);  // first: its peak-memory bound is measured from this process's start
  TU_RUN(test_wrapping_sizes);
  TU_RUN(test_fifo_in_place);
  TU_RUN(test_wrong_sizes);
  TU_RUN(test_model_ids);
  TU_RUN(test_config_digest);
  return tu_summary();
}
