/* Bad input, part 1: versions and statuses, params init, engine creation with bad params, and
 * every engine entry point called with a NULL engine or a NULL output. */
#include "test_util.h"

#include <math.h>

static void test_versions_and_statuses(void)
{
  CHECK_EQ_INT(pkv_version(),
               PKV_VERSION_MAJOR * 10000 + PKV_VERSION_MINOR * 100 + PKV_VERSION_PATCH);
  CHECK_EQ_INT(pkv_abi_version(), PKV_ABI_VERSION);
#define CHECK_STATUS_STRING_(name, value, message)                                                 \
  CHECK_EQ_INT(PKV_##name, value);                                                                 \
  CHECK(strcmp(pkv_status_string(PKV_##name), "unknown status") != 0);                             \
  CHECK(pkv_status_string(PKV_##name)[0] != '\0');
  PKV_STATUS_MAP(CHECK_STATUS_STRING_)
#undef CHECK_STATUS_STRING_
  CHECK(strcmp(pkv_status_string(12345), "unknown status") == 0);
  CHECK(strcmp(pkv_status_string(-100), "unknown status") == 0);
  CHECK(pkv_last_error() != NULL);
}

static void test_params_init(void)
{
  pkv_engine_params p;
  memset(&p, 0xab, sizeof p);
  if (!CHECK_OK(pkv_engine_params_init(&p, sizeof p)))
    return;
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

static int have_nvidia_driver(void)
{
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (f)
    fclose(f);
  return f != NULL;
}

/* create and profile both refuse p with want; *out is untouched. */
static void check_rejected(const pkv_engine_params *p, pkv_status want, const char *what)
{
  static int sentinel_storage;
  pkv_engine *const sentinel = (pkv_engine *)(void *)&sentinel_storage;
  pkv_engine *e = sentinel;
  if (!CHECK_STATUS(pkv_engine_create(p, &e), want))
    fprintf(stderr, "  params: %s\n", what);
  if (!CHECK(e == sentinel) && e != NULL)
    pkv_engine_destroy(e);
  if (want != PKV_ERR_INVALID_ARGUMENT)
    return;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (!CHECK_STATUS(pkv_profile(p, &b), want))
    fprintf(stderr, "  profile params: %s\n", what);
}

#define REJECT(stmt, want)                                                                         \
  do {                                                                                             \
    tu_params(&p, 4, 16);                                                                          \
    stmt;                                                                                          \
    check_rejected(&p, want, #stmt);                                                               \
  } while (0)

static void test_bad_engine_params(void)
{
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

/* Utilization exactly 1 is allowed; AUTO picks the CPU on a machine without a GPU. */
static void test_edge_params_accepted(void)
{
  pkv_engine_params p;
  tu_params(&p, 4, 16);
  p.memory_utilization = 1.0;
  p.device = PKV_DEVICE_AUTO;
  pkv_engine *e = tu_engine_p(&p);
  if (!e)
    return;
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  CHECK_OK(pkv_engine_params_get(e, &got));
  if (!have_nvidia_driver())
    CHECK_EQ_INT(got.device, PKV_DEVICE_CPU);
  CHECK_EQ_INT(got.num_blocks, 16);
  pkv_engine_destroy(e);
}

/* Every call taking an engine or a batch refuses NULL with INVALID_ARGUMENT and a message. */
static void test_null_engine(void)
{
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
static void test_null_outputs(void)
{
  pkv_engine *e = tu_engine(4, 16, 0);
  if (!e)
    return;
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

int main(void)
{
  TU_RUN(test_versions_and_statuses);
  TU_RUN(test_params_init);
  TU_RUN(test_bad_engine_params);
  TU_RUN(test_edge_params_accepted);
  TU_RUN(test_null_engine);
  TU_RUN(test_null_outputs);
  return tu_summary();
}
