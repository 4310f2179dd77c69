// Engines sharing prefix KV through a store (DESIGN.md §11, tier 2), through pkv.h only:
//  - Redis: an engine in a child process computes a prompt and exits; an engine in this process
//    on the same server gets its blocks as cached tokens, and pkv_attention over them matches an
//    fp64 reference computed from the K/V the child wrote. The server killed: the engine keeps
//    serving, misses are counted as errors; back on the same port: hits again. A wrong password
//    is PKV_ERR_STORE at create.
//  - File: an engine restarted on the same directory gets its prefixes back; two salts never
//    share a block; an MLA engine's latents come back to an MLA engine only; two engines capped
//    on one directory keep the directory under the cap.
#include <math.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../unit/test_util.h"
#include "redis_server.h"

namespace {

constexpr uint32_t BS = 4, BLOCKS = 16, HOST = 8, LAYERS = 2, QH = 4, KVH = 2, D = 8, N = 13;

// mla: a latent cache of 16 (kv_lora_rank 8 + rope 8) instead of K/V heads.
pkv_engine *engine(pkv_store_params *sp, bool mla = false) {
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);  // f32, 2 layers, 4 q heads, 2 kv heads of 8
  p.host_num_blocks = HOST;
  p.store = sp;
  if (mla) {
    p.kv_layout = PKV_KV_LAYOUT_MLA;
    p.num_kv_heads = 1, p.head_dim = 16, p.kv_lora_rank = 8, p.qk_rope_head_dim = 8;
    p.softmax_scale = 0.25f;
  }
  pkv_engine *e = nullptr;
  return pkv_engine_create(&p, &e) == PKV_OK ? e : nullptr;
}

// The K (kind 0) or V (kind 1) value the "model" gives position pos.
float kv(int kind, uint32_t layer, uint32_t pos, uint32_t head, uint32_t i) {
  return float(sin(0.37 * pos + 1.3 * layer + 0.7 * head + 0.11 * i + 2.1 * kind));
}

struct pkv_pool_info pool_of(pkv_engine *e) {
  struct pkv_pool_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  CHECK_OK(pkv_pool_info(e, &in));
  return in;
}

// Writes (check 0) or counts mismatches of (check 1) seq's K/V (an MLA pool: its latents) of
// positions [0, n).
uint32_t pattern(pkv_engine *e, uint64_t seq, uint32_t n, int check) {
  const struct pkv_pool_info in = pool_of(e);
  int32_t table[16];
  tu_table(e, seq, table, 16);
  uint32_t bad = 0;
  for (uint32_t pos = 0; pos < n; pos++)
    for (int k = 0; k < (in.v_base ? 2 : 1); k++)
      for (uint32_t l = 0; l < LAYERS; l++)
        for (uint32_t h = 0; h < in.kv_heads; h++) {
          float *row = static_cast<float *>(k ? in.v_base : in.k_base) + l * in.layer_stride +
                       uint64_t(table[pos / BS]) * in.block_stride + (pos % BS) * in.token_stride +
                       h * in.head_stride;
          for (uint32_t i = 0; i < in.head_dim; i++) {
            if (check)
              bad += row[i] != kv(k, l, pos, h, i);
            else
              row[i] = kv(k, l, pos, h, i);
          }
        }
  return bad;
}

// A prompt computed as a host's kernels would: its K/V written into the pool by the batch.
void compute_prompt(pkv_engine *e, const int32_t *t, const char *salt) {
  const uint64_t s = tu_alloc_salt(e, t, N, salt, nullptr);
  pkv_batch *b = nullptr;
  if (!CHECK_OK(pkv_batch_begin(e, &s, nullptr, 1, &b))) return;
  CHECK_OK(pkv_batch_copy(b));
  pattern(e, s, N, 0);
  CHECK_OK(pkv_batch_end(b));
  CHECK_OK(pkv_release(e, s));
}

// Allocates the prompt (expecting `want_cached` cached tokens), then computes its last token with
// pkv_attention on every layer and compares with the fp64 attention over all N positions.
void attend_last(pkv_engine *e, const int32_t *t, uint32_t want_cached) {
  uint32_t cached = 99;
  const uint64_t s = tu_alloc(e, t, N, &cached);
  CHECK_EQ_INT(cached, want_cached);
  if (cached != N - 1) {
    if (s) pkv_release(e, s);
    return;
  }
  pkv_batch *b = nullptr;
  if (!CHECK_OK(pkv_batch_begin(e, &s, nullptr, 1, &b))) return;
  const uint32_t pos = N - 1;
  std::vector<float> q(QH * D), k(KVH * D), v(KVH * D), out(QH * D);
  double worst = 0;
  for (uint32_t l = 0; l < LAYERS; l++) {
    for (uint32_t h = 0; h < QH; h++)
      for (uint32_t i = 0; i < D; i++) q[h * D + i] = float(cos(0.5 * h + 0.3 * i + l));
    for (uint32_t h = 0; h < KVH; h++)
      for (uint32_t i = 0; i < D; i++)
        k[h * D + i] = kv(0, l, pos, h, i), v[h * D + i] = kv(1, l, pos, h, i);
    if (!CHECK_OK(pkv_attention(b, l, q.data(), k.data(), v.data(), out.data()))) break;
    for (uint32_t h = 0; h < QH; h++) {
      const uint32_t g = h / (QH / KVH);
      std::vector<double> score(N);
      double top = -1e300, sum = 0;
      for (uint32_t p = 0; p < N; p++) {
        double dot = 0;
        for (uint32_t i = 0; i < D; i++) dot += double(q[h * D + i]) * double(kv(0, l, p, g, i));
        score[p] = dot / sqrt(double(D));
        top = score[p] > top ? score[p] : top;
      }
      for (uint32_t p = 0; p < N; p++) sum += (score[p] = exp(score[p] - top));
      for (uint32_t i = 0; i < D; i++) {
        double ref = 0;
        for (uint32_t p = 0; p < N; p++) ref += score[p] / sum * double(kv(1, l, p, g, i));
        worst = fmax(worst, fabs(ref - double(out[h * D + i])));
      }
    }
  }
  CHECK(worst < 1e-5);
  if (worst >= 1e-5) fprintf(stderr, "  attention differs from the fp64 reference by %g\n", worst);
  CHECK_OK(pkv_batch_end(b));
  CHECK_OK(pkv_release(e, s));
}

// A fresh engine b on a store that holds the prompt under salt: all but its last token hit, the
// fetched K/V (latents) are the pattern; then b is destroyed.
void expect_restored(pkv_engine *b, const int32_t *t, const char *salt) {
  uint32_t cached = 99;
  const uint64_t s = tu_alloc_salt(b, t, N, salt, &cached);
  CHECK_EQ_INT(cached, N - 1);
  pkv_batch *bt = nullptr;
  if (CHECK_OK(pkv_batch_begin(b, &s, nullptr, 1, &bt))) {
    CHECK_OK(pkv_batch_copy(bt));
    CHECK_EQ_INT(pattern(b, s, N - 1, 1), 0);
    CHECK_OK(pkv_batch_end(bt));
  }
  CHECK_OK(pkv_release(b, s));
  CHECK_EQ_INT(tu_stats(b).store_hit_tokens, N - 1);
  CHECK_ENGINE(b);
  pkv_engine_destroy(b);
}

pkv_store_params redis_params(unsigned port, const char *password) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_REDIS;
  sp.port = port;
  sp.password = password;
  sp.io_timeout_ms = 500;
  sp.lookup_timeout_ms = 500;
  return sp;
}

void test_redis_two_processes() {
  pkv_test::RedisServer server(pkv_test::redis_server_or_skip(), "");
  if (!CHECK(server.start())) return;
  int32_t t[N];
  tu_fill(t, N, 40);
  pkv_store_params sp = redis_params(server.port(), nullptr);
  // The writer: another OS process, which exits once its writes are done (engine destroyed).
  const int failed_before = tu_failed_;
  const pid_t child = fork();
  if (child == 0) {
    pkv_engine *a = engine(&sp);
    if (!a) _exit(2);
    compute_prompt(a, t, nullptr);
    pkv_engine_destroy(a);
    _exit(tu_failed_ != failed_before ? 1 : 0);
  }
  int status = -1;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  pkv_engine *b = engine(&sp);
  if (!CHECK(b != nullptr)) return;
  attend_last(b, t, N - 1);
  pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.store_hit_tokens, N - 1);
  CHECK_EQ_INT(st.num_store_hits, 3);
  // Another salt shares nothing.
  uint32_t cached = 99;
  const uint64_t other = tu_alloc_salt(b, t, N, "tenant-b", &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_OK(pkv_release(b, other));
  CHECK_OK(pkv_reset_prefix_cache(b));

  // The server goes away: allocations still succeed (misses, counted as errors, explained).
  server.kill();
  const uint64_t errors0 = tu_stats(b).num_store_errors;
  const uint64_t s = tu_alloc(b, t, N, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK(tu_stats(b).num_store_errors > errors0);
  char why[256];
  uint32_t len = 0;
  CHECK_OK(pkv_engine_store_error(b, why, sizeof why, &len));
  CHECK(len > 0 && strstr(why, "redis") != nullptr);
  CHECK_OK(pkv_release(b, s));
  // A submitted request meanwhile: its background lookup cannot even connect - a miss, and
  // pkv_step runs it all the same.
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  uint64_t r = 0;
  CHECK_OK(pkv_submit(b, t, N, &rp, &r));
  pkv_batch *step = nullptr;
  CHECK_OK(pkv_step(b, &step));
  if (CHECK(step != nullptr)) {
    const int32_t sampled = 7;
    CHECK_OK(pkv_commit(step, &sampled));
  }
  CHECK_EQ_INT(tu_stats(b).num_loading_requests, 0);
  CHECK_OK(pkv_release(b, r));
  CHECK_OK(pkv_reset_prefix_cache(b));
  // Back on the same port (empty: no persistence): the engine reconnects; the child's blocks are
  // gone, so it writes them again and a third engine hits them.
  CHECK(server.restart());
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // past the reconnect back-off
  compute_prompt(b, t, nullptr);
  pkv_engine_destroy(b);
  pkv_engine *c = engine(&sp);
  if (CHECK(c != nullptr)) {
    attend_last(c, t, N - 1);
    CHECK_ENGINE(c);
    pkv_engine_destroy(c);
  }
}

void test_redis_wrong_password() {
  pkv_test::RedisServer server(pkv_test::redis_server_or_skip(), "s3cret");
  if (!CHECK(server.start())) return;
  pkv_store_params sp = redis_params(server.port(), "wrong");
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.host_num_blocks = HOST;
  p.store = &sp;
  pkv_engine *e = nullptr;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_STORE);
  CHECK(strstr(pkv_last_error(), "WRONGPASS") != nullptr ||
        strstr(pkv_last_error(), "invalid") != nullptr);
  sp.password = "s3cret";
  CHECK_OK(pkv_engine_create(&p, &e));
  pkv_engine_destroy(e);
}

void test_file_restart() {
  char dir[] = "/tmp/pkv-store-XXXXXX";
  if (!CHECK(mkdtemp(dir) != nullptr)) return;
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir;
  int32_t t[N];
  tu_fill(t, N, 70);
  pkv_engine *a = engine(&sp);
  if (!CHECK(a != nullptr)) return;
  compute_prompt(a, t, "tenant-a");
  pkv_engine_destroy(a);
  // Restarted on the same directory: the prefix is back (under its salt only).
  pkv_engine *b = engine(&sp);
  if (CHECK(b != nullptr)) {
    uint32_t cached = 99;
    const uint64_t none = tu_alloc(b, t, N, &cached);
    CHECK_EQ_INT(cached, 0);  // no salt: another root, other keys
    CHECK_OK(pkv_release(b, none));
    expect_restored(b, t, "tenant-a");
  }
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(system(rm.c_str()) == 0);
}

// An MLA engine's blocks (the latents alone) come back to an MLA engine restarted on the same
// directory; a K/V engine of the same widths (1 kv head of 16) shares none of them.
void test_file_mla() {
  char dir[] = "/tmp/pkv-store-XXXXXX";
  if (!CHECK(mkdtemp(dir) != nullptr)) return;
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir;
  int32_t t[N];
  tu_fill(t, N, 90);
  pkv_engine *a = engine(&sp, true);
  if (!CHECK(a != nullptr)) return;
  CHECK(pool_of(a).v_base == nullptr && pool_of(a).host_v_base == nullptr);
  compute_prompt(a, t, "m");
  pkv_engine_destroy(a);
  pkv_engine_params hp;
  tu_params(&hp, BS, BLOCKS);
  hp.host_num_blocks = HOST, hp.store = &sp, hp.num_kv_heads = 1, hp.head_dim = 16;
  pkv_engine *heads = nullptr;
  if (CHECK_OK(pkv_engine_create(&hp, &heads))) {
    uint32_t cached = 99;
    const uint64_t s = tu_alloc_salt(heads, t, N, "m", &cached);
    CHECK_EQ_INT(cached, 0);  // another fingerprint: another model's cache
    CHECK_OK(pkv_release(heads, s));
    pkv_engine_destroy(heads);
  }
  pkv_engine *b = engine(&sp, true);
  if (CHECK(b != nullptr)) expect_restored(b, t, "m");
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(system(rm.c_str()) == 0);
}

// A disk that is full (here: a file-size limit below one block, in a child process): the writes
// fail, are counted and explained, and the engine keeps serving.
void test_file_full_disk() {
  char dir[] = "/tmp/pkv-store-XXXXXX";
  if (!CHECK(mkdtemp(dir) != nullptr)) return;
  const int failed_before = tu_failed_;
  const pid_t child = fork();
  if (child == 0) {
    struct rlimit lim = {512, 512};  // below one value (about 1.2 KiB)
    setrlimit(RLIMIT_FSIZE, &lim);
    pkv_store_params sp;
    pkv_store_params_init(&sp, sizeof sp);
    sp.kind = PKV_STORE_FILE;
    sp.path = dir;
    pkv_engine *e = engine(&sp);
    if (!e) _exit(2);
    int32_t t[N];
    tu_fill(t, N, 90);
    compute_prompt(e, t, nullptr);
    pkv_stats st = tu_stats(e);
    for (int i = 0; i < 500 && st.num_store_put_errors + st.num_store_puts < 3; i++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      st = tu_stats(e);
    }
    CHECK_EQ_INT(st.num_store_put_errors, 3);
    CHECK_EQ_INT(st.num_store_puts, 0);
    char why[256];
    uint32_t len = 0;
    CHECK_OK(pkv_engine_store_error(e, why, sizeof why, &len));
    CHECK(strstr(why, "File too large") != nullptr);
    uint32_t cached = 99;
    const uint64_t s = tu_alloc(e, t, N, &cached);  // still serving: from the pool
    CHECK_EQ_INT(cached, N - 1);
    CHECK_OK(pkv_release(e, s));
    pkv_engine_destroy(e);
    _exit(tu_failed_ != failed_before ? 1 : 0);
  }
  int status = -1;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(system(rm.c_str()) == 0);
}

// Two engines on one directory, each with max_bytes of 10 blocks, each writing 15: the directory
// holds at most 10 blocks' bytes (the cap was each engine's own: up to 20).
void test_file_cap_two_engines() {
  char dir[] = "/tmp/pkv-store-XXXXXX";
  if (!CHECK(mkdtemp(dir) != nullptr)) return;
  const uint64_t value_bytes =
      152 + 4 * BS + 2 * LAYERS * BS * KVH * D * sizeof(float);  // header, tokens, K and V
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = dir;
  sp.max_bytes = 10 * value_bytes;
  sp.model_id = "cap-test@1";
  pkv_engine *a = engine(&sp), *b = engine(&sp);
  if (CHECK(a != nullptr && b != nullptr)) {
    for (int i = 0; i < 5; i++) {  // 3 full blocks a prompt
      int32_t t[N];
      tu_fill(t, N, 1000 * (i + 1));
      compute_prompt(a, t, nullptr);
      tu_fill(t, N, 1000 * (i + 1) + 500);
      compute_prompt(b, t, nullptr);
    }
  }
  pkv_engine_destroy(a);  // their writers finish
  pkv_engine_destroy(b);
  pkv_store *s = nullptr;
  struct pkv_store_info in;
  memset(&in, 0, sizeof in);
  in.struct_size = sizeof in;
  if (CHECK_OK(pkv_store_open(&sp, &s))) CHECK_OK(pkv_store_info(s, &in));
  pkv_store_close(s);
  CHECK(in.num_blocks >= 8 && in.total_bytes <= sp.max_bytes);
  CHECK_EQ_INT(in.total_bytes, in.num_blocks * value_bytes);
  printf("  (two engines capped at 10 blocks each wrote 30: the directory holds %llu)\n",
         (unsigned long long)in.num_blocks);
  std::string rm = std::string("rm -rf ") + dir;
  CHECK(system(rm.c_str()) == 0);
}

}  // namespace

int main() {
  TU_RUN(test_file_full_disk);
  TU_RUN(test_file_restart);
  TU_RUN(test_file_mla);
  TU_RUN(test_file_cap_two_engines);
  TU_RUN(test_redis_wrong_password);
  TU_RUN(test_redis_two_processes);
  return tu_summary();
}
