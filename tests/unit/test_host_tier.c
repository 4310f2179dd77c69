/* The host tier's parameters and profile (DESIGN.md §11, tier 1): its blocks from
 * host_num_blocks or host_cache_bytes, its bytes, the host memory it comes from, the refusals,
 * its region in pkv_pool_info, and callers built against the 0.1 structs. */
#include <stddef.h>

#include "test_util.h"

#define MIB (1024ull * 1024)
#define GIB (1024ull * MIB)

/* block_bytes = 2 x 2 layers x 16 tokens x 2 heads x 8 x 4 B = 4 KiB. */
static void params(pkv_engine_params *p) { tu_params(p, 16, 64); }

static void test_planned(void) {
  pkv_engine_params p;
  params(&p);
  p.memory_total_bytes = 8 * GIB; /* planning: nothing measured */
  p.host_num_blocks = 100;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_profile(&p, &b));
  CHECK_EQ_INT(b.block_bytes, 4096);
  CHECK_EQ_INT(b.host_num_blocks, 100);
  CHECK_EQ_INT(b.host_pool_bytes, 100 * 4096);
  CHECK_EQ_INT(b.host_total_bytes, 0);
  CHECK_EQ_INT(b.host_available_bytes, 0);
  /* From bytes: whole blocks only. */
  p.host_num_blocks = 0;
  p.host_cache_bytes = 10 * 4096 + 4095;
  CHECK_OK(pkv_profile(&p, &b));
  CHECK_EQ_INT(b.host_num_blocks, 10);
  CHECK_EQ_INT(b.host_pool_bytes, 10 * 4096);
  /* host_num_blocks wins over host_cache_bytes. */
  p.host_num_blocks = 3;
  CHECK_OK(pkv_profile(&p, &b));
  CHECK_EQ_INT(b.host_num_blocks, 3);
  /* Off by default. */
  params(&p);
  CHECK_OK(pkv_profile(&p, &b));
  CHECK_EQ_INT(b.host_num_blocks, 0);
  CHECK_EQ_INT(b.host_pool_bytes, 0);
  CHECK_EQ_INT(b.host_total_bytes, 0);
}

static void test_refused(void) {
  pkv_engine_params p;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  params(&p);
  p.host_cache_bytes = 4095;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "host_cache_bytes") != NULL);
  params(&p);
  p.host_num_blocks = 0x80000000u;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "host_num_blocks") != NULL);
  params(&p);
  p.reserved1 = 1;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "reserved1") != NULL);
  /* More than the host has: out of memory, every term still written. 2^31-1 blocks of 2 MiB. */
  params(&p);
  p.num_layers = 32, p.num_q_heads = 32, p.num_kv_heads = 8, p.head_dim = 128;
  p.dtype = PKV_DTYPE_BF16;
  p.host_num_blocks = 0x7fffffffu;
  pkv_engine *e = NULL;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  CHECK(strstr(pkv_last_error(), "host tier") != NULL);
  CHECK_EQ_INT(b.host_num_blocks, 0x7fffffffu);
  CHECK(b.host_total_bytes > 0 && b.host_available_bytes <= b.host_total_bytes);
  CHECK(b.host_pool_bytes > b.host_available_bytes);
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_OUT_OF_MEMORY);
  CHECK(e == NULL);
}

/* A CPU engine's host tier: its own region, the pool's layout with its own block count. */
static void test_pool_info(void) {
  pkv_engine_params p;
  params(&p);
  p.host_cache_bytes = 12 * 4096;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  CHECK_OK(pkv_engine_params_get(e, &got));
  CHECK_EQ_INT(got.host_num_blocks, 12);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_pool_info(e, &info));
  CHECK_EQ_INT(info.host_num_blocks, 12);
  CHECK_EQ_INT(info.host_layer_stride, 12 * info.block_stride);
  CHECK_EQ_INT(info.host_bytes_per_pool, 2 * 12 * info.block_stride * 4);
  CHECK(info.host_k_base != NULL && info.host_v_base != NULL);
  CHECK((char *)info.host_v_base == (char *)info.host_k_base + info.host_bytes_per_pool);
  /* Disjoint from the device pool, and every byte writable. */
  char *hk = info.host_k_base, *pk = info.k_base;
  CHECK(hk + 2 * info.host_bytes_per_pool <= pk || pk + 2 * info.bytes_per_pool <= hk);
  hk[0] = 1, hk[2 * info.host_bytes_per_pool - 1] = 2;
  CHECK_EQ_INT(hk[0] + hk[2 * info.host_bytes_per_pool - 1], 3);
  pkv_engine_destroy(e);
  /* No host tier: no region. */
  params(&p);
  e = tu_engine_p(&p);
  if (!e) return;
  CHECK_OK(pkv_pool_info(e, &info));
  CHECK(info.host_k_base == NULL && info.host_v_base == NULL);
  CHECK_EQ_INT(info.host_num_blocks, 0);
  CHECK_EQ_INT(info.host_bytes_per_pool, 0);
  pkv_engine_destroy(e);
}

/* A host built against 0.1 passes the 0.1 sizes: accepted, no host tier, nothing written past
 * its structs. */
static void test_old_callers(void) {
  enum {
    OLD_PARAMS = offsetof(pkv_engine_params, host_num_blocks),
    OLD_BUDGET = offsetof(pkv_kv_budget, host_num_blocks),
    OLD_POOL = offsetof(struct pkv_pool_info, host_k_base)
  };
  unsigned char raw[sizeof(pkv_engine_params) + 16];
  memset(raw, 0xAB, sizeof raw);
  pkv_engine_params *p = (pkv_engine_params *)raw;
  CHECK_OK(pkv_engine_params_init(p, OLD_PARAMS));
  CHECK_EQ_INT(raw[OLD_PARAMS], 0xAB);
  p->num_layers = 2, p->num_q_heads = 4, p->num_kv_heads = 2, p->head_dim = 8;
  p->dtype = PKV_DTYPE_F32, p->device = PKV_DEVICE_CPU, p->num_blocks = 8, p->num_threads = 1;
  unsigned char out[sizeof(pkv_kv_budget) + 16];
  memset(out, 0xCD, sizeof out);
  pkv_kv_budget *b = (pkv_kv_budget *)out;
  b->struct_size = OLD_BUDGET;
  CHECK_OK(pkv_profile(p, b));
  CHECK_EQ_INT(b->num_blocks, 8);
  CHECK_EQ_INT(out[OLD_BUDGET], 0xCD);
  pkv_engine *e = NULL;
  if (!CHECK_OK(pkv_engine_create(p, &e))) return;
  unsigned char info_raw[sizeof(struct pkv_pool_info) + 16];
  memset(info_raw, 0xEF, sizeof info_raw);
  struct pkv_pool_info *info = (struct pkv_pool_info *)info_raw;
  info->struct_size = OLD_POOL;
  CHECK_OK(pkv_pool_info(e, info));
  CHECK_EQ_INT(info->num_blocks, 8);
  CHECK_EQ_INT(info_raw[OLD_POOL], 0xEF);
  pkv_engine_destroy(e);
  /* Below the 0.1 size: refused. */
  CHECK_STATUS(pkv_engine_params_init(p, OLD_PARAMS - 4), PKV_ERR_INVALID_ARGUMENT);
}

int main(void) {
  TU_RUN(test_planned);
  TU_RUN(test_refused);
  TU_RUN(test_pool_info);
  TU_RUN(test_old_callers);
  return tu_summary();
}
