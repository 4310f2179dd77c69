/* Bad input, part 1: versions and statuses, params init, engine creation with bad params (the
 * attention variants' kv_dtype, windows and fp8 scales included), and every engine entry point
 * called with a NULL engine or a NULL output. */
#include "test_util.h"

#include <math.h>

static void test_versions_and_statuses(void) {
  CHECK_EQ_INT(pkv_version(),
               PKV_VERSION_MAJOR * 10000 + PKV_VERSION_MINOR * 100 + PKV_VERSION_PATCH);
  CHECK_EQ_INT(pkv_abi_version(), PKV_ABI_VERSION);
#define CHECK_STATUS_STRING_(name, value, message)                     \
  CHECK_EQ_INT(PKV_##name, value);                                     \
  CHECK(strcmp(pkv_status_string(PKV_##name), "unknown status") != 0); \
  CHECK(pkv_status_string(PKV_##name)[0] != '\0');
  PKV_STATUS_MAP(CHECK_STATUS_STRING_)
#undef CHECK_STATUS_STRING_
  CHECK(strcmp(pkv_status_string(12345), "unknown status") == 0);
  CHECK(strcmp(pkv_status_string(-100), "unknown status") == 0);
  CHECK(pkv_last_error() != NULL);
}

static void test_params_init(void) {
  pkv_engine_params p;
  memset(&p, 0xab, sizeof p);
  if (!CHECK_OK(pkv_engine_params_init(&p, sizeof p))) return;
  CHECK_EQ_INT(p.struct_size, sizeof p);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  CHECK_EQ_INT(p.tp_size, 1);
  CHECK_EQ_INT(p.tp_rank, 0);
  CHECK_EQ_INT(p.max_model_len, 0);
  CHECK_EQ_INT(p.block_size, 16);
  CHECK_EQ_INT(p.num_blocks, 0);
  CHECK_EQ_INT(p.enable_prefix_caching, 1);
  CHECK_EQ_INT(p.hash_seed, 0);
  CHECK_EQ_INT(p.device, PKV_DEVICE_AUTO);
  CHECK_EQ_INT(p.device_id, 0);
  CHECK_EQ_INT(p.num_threads, 0);
  CHECK_EQ_INT(p.debug_flags, 0);
  CHECK(p.memory_utilization == 0.9);
  CHECK_EQ_INT(p.kv_cache_bytes, 0);
  CHECK_STATUS(pkv_engine_params_init(NULL, sizeof p), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_init(&p, 0), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_init(&p, 3), PKV_ERR_INVALID_ARGUMENT);

  pkv_seq_params sp;
  memset(&sp, 0xab, sizeof sp);
  CHECK_OK(pkv_seq_params_init(&sp, sizeof sp));
  CHECK_EQ_INT(sp.struct_size, sizeof sp);
  CHECK_EQ_INT(sp.cache_salt_len, 0);
  CHECK(sp.cache_salt == NULL);
  CHECK_STATUS(pkv_seq_params_init(NULL, sizeof sp), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_seq_params_init(&sp, 3), PKV_ERR_INVALID_ARGUMENT);
}

static int have_nvidia_driver(void) {
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (f) fclose(f);
  return f != NULL;
}

/* create and profile both refuse p with want; *out is untouched. */
static void check_rejected(const pkv_engine_params *p, pkv_status want, const char *what) {
  static int sentinel_storage;
  pkv_engine *const sentinel = (pkv_engine *)(void *)&sentinel_storage;
  pkv_engine *e = sentinel;
  if (!CHECK_STATUS(pkv_engine_create(p, &e), want)) fprintf(stderr, "  params: %s\n", what);
  if (!CHECK(e == sentinel) && e != NULL) pkv_engine_destroy(e);
  if (want != PKV_ERR_INVALID_ARGUMENT) return;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (!CHECK_STATUS(pkv_profile(p, &b), want)) fprintf(stderr, "  profile params: %s\n", what);
}

#define REJECT(stmt, want)           \
  do {                               \
    tu_params(&p, 4, 16);            \
    stmt;                            \
    check_rejected(&p, want, #stmt); \
  } while (0)

static void test_bad_engine_params(void) {
  pkv_engine_params p;
  REJECT(p.struct_size = 4, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.struct_size = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.num_kv_heads = 3, PKV_ERR_INVALID_ARGUMENT); /* does not divide 4 q heads */
  REJECT(p.num_kv_heads = 8, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.num_kv_heads = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.num_q_heads = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.block_size = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.head_dim = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.num_layers = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.tp_size = 0, PKV_ERR_INVALID_ARGUMENT);
  REJECT((p.tp_size = 2, p.tp_rank = 2), PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.tp_rank = 1, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.memory_utilization = 0.0, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.memory_utilization = 1.5, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.memory_utilization = -0.5, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.memory_utilization = NAN, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.dtype = 3, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.dtype = -1, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.device = 3, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.device = -1, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.enable_prefix_caching = 2, PKV_ERR_INVALID_ARGUMENT);
  /* attention variants: fp8 is a kv_dtype only; the cache keeps the model's dtype or is fp8 */
  REJECT(p.dtype = PKV_DTYPE_FP8_E5M2, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.kv_dtype = 5, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.kv_dtype = -1, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.kv_dtype = 1000, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.kv_dtype = PKV_DTYPE_F16, PKV_ERR_INVALID_ARGUMENT); /* under an f32 model */
  REJECT((p.dtype = PKV_DTYPE_BF16, p.kv_dtype = PKV_DTYPE_F16), PKV_ERR_INVALID_ARGUMENT);
  REJECT((p.dtype = PKV_DTYPE_F16, p.kv_dtype = PKV_DTYPE_BF16), PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.sliding_window = 0x80000000u, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.sliding_window = UINT32_MAX, PKV_ERR_INVALID_ARGUMENT);
  static const uint32_t big_window[2] = {0, 0x80000000u}, huge_window[2] = {UINT32_MAX, 8};
  REJECT(p.layer_windows = big_window, PKV_ERR_INVALID_ARGUMENT);
  REJECT(p.layer_windows = huge_window, PKV_ERR_INVALID_ARGUMENT);
  if (!have_nvidia_driver()) {
    REJECT(p.device = PKV_DEVICE_CUDA, PKV_ERR_NO_DEVICE);
  } else { /* a GPU machine: a CUDA build creates it, a CPU-only build says NO_DEVICE */
    pkv_engine *e = NULL;
    tu_params(&p, 4, 16);
    p.device = PKV_DEVICE_CUDA;
    pkv_status st = pkv_engine_create(&p, &e);
    CHECK(st == PKV_OK || st == PKV_ERR_NO_DEVICE);
    pkv_engine_destroy(e);
  }
  check_rejected(NULL, PKV_ERR_INVALID_ARGUMENT, "NULL");
  tu_params(&p, 4, 16);
  CHECK_STATUS(pkv_engine_create(&p, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_profile(&p, NULL), PKV_ERR_INVALID_ARGUMENT);
}

/* The variants' refusals say what was wrong; their edges are accepted. */
static void test_variant_messages(void) {
  pkv_engine_params p;
  pkv_engine *e = NULL;
  const struct {
    int32_t dtype, kv_dtype;
    const char *says;
  } bad[] = {
      {PKV_DTYPE_FP8_E4M3, 0, "fp8 is a kv_dtype only"},
      {PKV_DTYPE_BF16, PKV_DTYPE_F16, "kv_dtype 1 must be 0 (the model's dtype), dtype itself (2)"},
      {PKV_DTYPE_F32, 5, "kv_dtype 5 must be 0"},
      {PKV_DTYPE_F32, -1, "kv_dtype -1 must be 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    tu_params(&p, 4, 16);
    p.dtype = bad[i].dtype;
    p.kv_dtype = bad[i].kv_dtype;
    CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
    if (!CHECK(strstr(pkv_last_error(), bad[i].says) != NULL))
      fprintf(stderr, "  \"%s\" does not say \"%s\"\n", pkv_last_error(), bad[i].says);
  }
  tu_params(&p, 4, 16);
  uint32_t w[2] = {16, 0x80000000u};
  p.layer_windows = w;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "layer_windows[1] = 2147483648 exceeds 2^31-1") != NULL);
  p.layer_windows = NULL;
  p.sliding_window = 0x80000000u;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "sliding_window 2147483648 exceeds 2^31-1") != NULL);
  CHECK(e == NULL);

  /* accepted: kv_dtype the model's own (0 or dtype), fp8 of either kind, windows of 2^31-1 */
  const int32_t good[3] = {PKV_DTYPE_F32, PKV_DTYPE_FP8_E4M3, PKV_DTYPE_FP8_E5M2};
  for (int i = 0; i < 3; i++) {
    tu_params(&p, 4, 16);
    p.kv_dtype = good[i];
    p.sliding_window = 0x7fffffffu;
    e = tu_engine_p(&p);
    if (!e) continue;
    struct pkv_pool_info in;
    memset(&in, 0, sizeof in);
    in.struct_size = sizeof in;
    if (CHECK_OK(pkv_pool_info(e, &in))) {
      CHECK_EQ_INT(in.dtype, good[i]); /* the pool's elements */
      CHECK_EQ_INT(in.model_dtype, PKV_DTYPE_F32);
      CHECK_EQ_INT(in.bytes_per_pool, 2ull * 16 * 4 * 2 * 8 * (good[i] == PKV_DTYPE_F32 ? 4 : 1));
    }
    pkv_engine_destroy(e);
  }
  uint32_t same[2] = {0x7fffffffu, 0x7fffffffu};
  tu_params(&p, 4, 16);
  p.layer_windows = same;
  e = tu_engine_p(&p);
  pkv_engine_destroy(e);
}

/* pkv_set_kv_scales: fp8 engines only, before the first sequence, finite positive scales for
 * this rank's heads of a layer that exists; a refusal changes nothing. */
static void test_kv_scales(void) {
  pkv_engine *e = tu_engine(4, 16, 0); /* f32: no scales */
  const float one[2] = {1.0f, 1.0f}, half[2] = {0.5f, 0.25f};
  if (e) {
    CHECK_ERR(e, pkv_set_kv_scales(e, 0, one, one), PKV_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pkv_engine_last_error(e), "not fp8") != NULL);
    pkv_engine_destroy(e);
  }
  CHECK_STATUS(pkv_set_kv_scales(NULL, 0, one, one), PKV_ERR_INVALID_ARGUMENT);
  pkv_engine_params p;
  tu_params(&p, 4, 16);
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  e = tu_engine_p(&p);
  if (!e) return;
  const float zero[2] = {1.0f, 0.0f}, negative[2] = {-1.0f, 1.0f}, nan_[2] = {1.0f, NAN},
              inf[2] = {INFINITY, 1.0f};
  CHECK_OK(pkv_set_kv_scales(e, 0, half, one));
  CHECK_OK(pkv_set_kv_scales(e, 1, one, half));
  CHECK_ERR(e, pkv_set_kv_scales(e, 2, one, one), PKV_ERR_INVALID_ARGUMENT); /* 2 layers */
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, NULL, one), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, one, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, zero, one), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_engine_last_error(e), "kv head 1") != NULL);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, one, negative), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 1, nan_, one), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_kv_scales(e, 1, one, inf), PKV_ERR_INVALID_ARGUMENT);
  int32_t t[5];
  tu_fill(t, 5, 1);
  uint64_t seq = tu_alloc(e, t, 5, NULL);
  /* KV may be written under the scales now: later changes are refused */
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, one, one), PKV_ERR_STATE);
  CHECK(seq != 0 && tu_info(e, seq).num_tokens == 5);
  CHECK_OK(pkv_release(e, seq));
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, one, one), PKV_ERR_STATE); /* even with none left */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Utilization exactly 1 is allowed; AUTO picks the CPU on a machine without a GPU. */
static void test_edge_params_accepted(void) {
  pkv_engine_params p;
  tu_params(&p, 4, 16);
  p.memory_utilization = 1.0;
  p.device = PKV_DEVICE_AUTO;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  CHECK_OK(pkv_engine_params_get(e, &got));
  if (!have_nvidia_driver()) CHECK_EQ_INT(got.device, PKV_DEVICE_CPU);
  CHECK_EQ_INT(got.num_blocks, 16);
  pkv_engine_destroy(e);
}

/* Every call taking an engine or a batch refuses NULL with INVALID_ARGUMENT and a message. */
static void test_null_engine(void) {
  int32_t t[4] = {1, 2, 3, 4}, table[4];
  uint64_t seq = 1;
  uint32_t n = 0;
  pkv_engine_params p;
  pkv_kv_budget b;
  pkv_stats s;
  struct pkv_seq_info info;
  pkv_batch *batch = NULL;
  pkv_batch_view v;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  tu_params(&p, 4, 16);
  CHECK_STATUS(pkv_engine_params_get(NULL, &p), bad);
  CHECK_STATUS(pkv_engine_budget(NULL, &b), bad);
  CHECK_STATUS(pkv_engine_stats(NULL, &s), bad);
  CHECK_STATUS(pkv_allocate(NULL, t, 4, NULL, &seq, &n), bad);
  CHECK_STATUS(pkv_allocate_query(NULL, t, 4, NULL, &n, &n), bad);
  CHECK_STATUS(pkv_append(NULL, 1, t, 1), bad);
  CHECK_STATUS(pkv_fork(NULL, 1, &seq), bad);
  CHECK_STATUS(pkv_release(NULL, 1), bad);
  CHECK_STATUS(pkv_preempt(NULL, 1), bad);
  CHECK_STATUS(pkv_resume(NULL, 1, &n), bad);
  CHECK_STATUS(pkv_seq_info(NULL, 1, &info), bad);
  CHECK_STATUS(pkv_seq_block_table(NULL, 1, table, 4, &n), bad);
  CHECK_STATUS(pkv_seq_tokens(NULL, 1, table, 4, &n), bad);
  CHECK_STATUS(pkv_batch_begin(NULL, &seq, NULL, 1, &batch), bad);
  CHECK(batch == NULL);
  CHECK_STATUS(pkv_batch_info(NULL, &v), bad);
  CHECK_STATUS(pkv_batch_end(NULL), bad);
  CHECK_STATUS(pkv_engine_check(NULL), bad);
  CHECK(strcmp(pkv_engine_last_error(NULL), pkv_last_error()) == 0);
  pkv_batch_abort(NULL);
  pkv_engine_destroy(NULL);
  CHECK(1); /* survived the no-ops */
}

/* NULL outputs on a live engine; a successful call clears the engine's message. */
static void test_null_outputs(void) {
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e) return;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  CHECK_ERR(e, pkv_engine_params_get(e, NULL), bad);
  CHECK_ERR(e, pkv_engine_budget(e, NULL), bad);
  CHECK_ERR(e, pkv_engine_stats(e, NULL), bad);
  CHECK_EQ_INT(tu_stats(e).num_blocks, 16);
  CHECK(pkv_engine_last_error(e)[0] == '\0');
  CHECK(pkv_engine_last_error(e) != NULL);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_versions_and_statuses);
  TU_RUN(test_params_init);
  TU_RUN(test_bad_engine_params);
  TU_RUN(test_variant_messages);
  TU_RUN(test_kv_scales);
  TU_RUN(test_edge_params_accepted);
  TU_RUN(test_null_engine);
  TU_RUN(test_null_outputs);
  return tu_summary();
}
