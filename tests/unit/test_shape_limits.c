/* Shapes at the edge of what a pool can represent: every byte count and element offset of the
 * pool (K and V together) fits in int64, every budget term in uint64. A shape past the edge is
 * refused by pkv_profile and pkv_engine_create with PKV_ERR_INVALID_ARGUMENT naming the field,
 * nothing written; a shape on the edge is accepted with exact figures. pkv_profile allocates
 * nothing, so the edges are profiled at full size; engines are created only for small shapes. */
#include "test_util.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)
#define I64_MAX 9223372036854775807ull

/* A llama-like shape (block_bytes 2 MiB) planned on a 80 GiB CPU, nothing measured. */
static void base_params(pkv_engine_params *p) {
  tu_params(p, 16, 0);
  p->num_layers = 32;
  p->num_q_heads = 32;
  p->num_kv_heads = 8;
  p->head_dim = 128;
  p->dtype = PKV_DTYPE_BF16;
  p->memory_total_bytes = 80 * GIB;
}

/* block_bytes = 2^(k+21): num_layers 32 << k. */
static void big_block_params(pkv_engine_params *p, unsigned k) {
  base_params(p);
  p->num_layers = 32u << k;
}

/* pkv_profile and pkv_engine_create both refuse p with INVALID_ARGUMENT, a message naming
 * field, and neither writes its output. */
static void check_refused(const pkv_engine_params *p, const char *field, int line) {
  pkv_kv_budget b, before;
  memset(&b, 0xab, sizeof b);
  b.struct_size = sizeof b;
  memcpy(&before, &b, sizeof b);
  pkv_status s = pkv_profile(p, &b);
  if (!CHECK_STATUS(s, PKV_ERR_INVALID_ARGUMENT))
    fprintf(stderr, "  (refusal expected at line %d)\n", line);
  if (!CHECK(strstr(pkv_last_error(), field) != NULL))
    fprintf(stderr, "  line %d: \"%s\" does not name %s\n", line, pkv_last_error(), field);
  CHECK(memcmp(&b, &before, sizeof b) == 0);
  pkv_engine *e = (pkv_engine *)&b;
  s = pkv_engine_create(p, &e);
  if (!CHECK_STATUS(s, PKV_ERR_INVALID_ARGUMENT))
    fprintf(stderr, "  (create: refusal expected at line %d)\n", line);
  CHECK(strstr(pkv_last_error(), field) != NULL);
  CHECK(e == (pkv_engine *)&b);
}
#define REFUSED(p, field) check_refused((p), (field), __LINE__)

static pkv_kv_budget profile_ok(const pkv_engine_params *p) {
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_profile(p, &b));
  return b;
}

/* block_bytes wrapping 64 bits, and just past / just under 2^63. */
static void test_block_bytes_edge(void) {
  pkv_engine_params p;
  base_params(&p);
  p.num_layers = UINT32_MAX; /* 2 x (2^32-1) x 16 x (2^32-1) x 1024 x 2: about 2^80 */
  p.num_q_heads = p.num_kv_heads = UINT32_MAX;
  p.head_dim = 1024;
  REFUSED(&p, "block_bytes");
  p.num_kv_heads = 1; /* 2^33 x 2^4 x 2^10 x 2: 2^48, fits; with f32 and block_size 2^20: 2^65 */
  p.block_size = 1u << 20;
  p.dtype = PKV_DTYPE_F32;
  REFUSED(&p, "block_bytes");

  /* 2 x 2^31 x 2^20 x 1 x 1024 x 2 = 2^63: one past the largest offset */
  base_params(&p);
  p.num_layers = 1u << 31;
  p.block_size = 1u << 20;
  p.num_q_heads = p.num_kv_heads = 1;
  p.head_dim = 1024;
  p.kv_cache_bytes = UINT64_MAX;
  REFUSED(&p, "block_bytes");
  p.num_layers = (1u << 31) - 1; /* 2^63 - 2^32: fits, and one block of it is the whole pool */
  pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.block_bytes, I64_MAX + 1 - (1ull << 32));
  CHECK_EQ_INT(b.bytes_per_token, b.block_bytes >> 20);
  CHECK_EQ_INT(b.num_blocks, 1);
  CHECK_EQ_INT(b.pool_bytes, b.block_bytes);
  CHECK_EQ_INT(b.max_tokens, 1u << 20);
  CHECK_EQ_INT(b.budget_bytes, UINT64_MAX);
  p.kv_cache_bytes = 0;
  p.num_blocks = 2; /* two such blocks: past 2^63 */
  REFUSED(&p, "num_blocks");
}

/* A fixed num_blocks whose pool passes 2^63-1 bytes; the largest that fits. */
static void test_fixed_blocks_edge(void) {
  pkv_engine_params p;
  big_block_params(&p, 15); /* block_bytes 2^36 */
  p.num_blocks = 1u << 27;  /* pool 2^63 */
  REFUSED(&p, "pool_bytes = num_blocks x block_bytes");
  p.num_blocks = (1u << 27) - 1;
  pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.source, PKV_BUDGET_FIXED_BLOCKS);
  CHECK_EQ_INT(b.block_bytes, 1ull << 36);
  CHECK_EQ_INT(b.num_blocks, (1u << 27) - 1);
  CHECK_EQ_INT(b.pool_bytes, (1ull << 63) - (1ull << 36));
  CHECK_EQ_INT(b.max_tokens, ((1ull << 27) - 1) * 16);
  CHECK_EQ_INT(b.shortfall_bytes, 0);
}

/* A budget larger than any pool: num_blocks stops at the largest representable pool (and at
 * 2^31-1 blocks), never wraps. */
static void test_budget_cap(void) {
  pkv_engine_params p;
  big_block_params(&p, 15);
  p.kv_cache_bytes = UINT64_MAX;
  pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.num_blocks, I64_MAX >> 36); /* 2^27 - 1 */
  CHECK_EQ_INT(b.pool_bytes, (I64_MAX >> 36) << 36);
  p.kv_cache_bytes = 0;
  p.memory_total_bytes = UINT64_MAX;
  p.memory_utilization = 1.0;
  b = profile_ok(&p);
  CHECK_EQ_INT(b.budget_bytes, UINT64_MAX);
  CHECK_EQ_INT(b.num_blocks, I64_MAX >> 36);

  base_params(&p); /* 2 MiB blocks: 2^31-1 of them are far below 2^63 bytes */
  p.kv_cache_bytes = UINT64_MAX;
  b = profile_ok(&p);
  CHECK_EQ_INT(b.num_blocks, 2147483647);
  CHECK_EQ_INT(b.pool_bytes, 2147483647ull * 2 * MIB);
  CHECK_EQ_INT(b.max_tokens, 2147483647ull * 16);
}

/* max_model_len whose one sequence no pool of the shape can hold: no budget would help. */
static void test_max_model_len_edge(void) {
  pkv_engine_params p;
  big_block_params(&p, 15);
  p.kv_cache_bytes = UINT64_MAX;
  p.max_model_len = (1u << 27) * 16; /* 2^27 blocks: one more than the largest pool */
  REFUSED(&p, "max_model_len");
  p.max_model_len = ((1u << 27) - 1) * 16;
  pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.blocks_per_max_seq, (1u << 27) - 1);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 1);

  tu_params(&p, 1, 0); /* 2^32-1 blocks of one token: past 2^31-1 blocks */
  p.max_model_len = UINT32_MAX;
  p.kv_cache_bytes = 64 * MIB;
  REFUSED(&p, "max_model_len");
  p.max_model_len = INT32_MAX; /* representable: too small a budget, with an exact shortfall */
  pkv_kv_budget oom;
  memset(&oom, 0, sizeof oom);
  oom.struct_size = sizeof oom;
  CHECK_STATUS(pkv_profile(&p, &oom), PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(oom.shortfall_bytes, 2147483647ull * oom.block_bytes - 64 * MIB);
}

/* Budget terms: used_bytes (measured + memory_used_bytes) and the shortfall fit in 64 bits. */
static void test_budget_terms_edge(void) {
  pkv_engine_params p;
  base_params(&p);
  p.memory_total_bytes = 0; /* measure the host: something is in use */
  p.memory_used_bytes = UINT64_MAX;
  p.kv_cache_bytes = GIB;
  REFUSED(&p, "memory_used_bytes");

  base_params(&p); /* used + reserve far past total: the budget is short by about 2^65 bytes */
  p.memory_used_bytes = UINT64_MAX;
  p.reserve_bytes = UINT64_MAX;
  REFUSED(&p, "shortfall_bytes");
  p.reserve_bytes = 0; /* short by 2^64-1 - 72 GiB + 2 MiB: representable */
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.budget_bytes, 0);
  CHECK_EQ_INT(b.used_bytes, UINT64_MAX);
  const uint64_t want = UINT64_MAX - 72 * GIB + 2 * MIB; /* total x 0.9 rounds within a byte */
  CHECK(b.shortfall_bytes >= want - 2 && b.shortfall_bytes <= want + 2);
}

/* A small engine's pool_info is the header's formula, and the budget's pool is both pools. */
static void test_pool_info_formula(void) {
  pkv_engine_params p;
  tu_params(&p, 5, 3);
  p.num_layers = 3;
  p.num_q_heads = 6;
  p.num_kv_heads = 3;
  p.dtype = PKV_DTYPE_F16;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_pool_info(e, &info));
  CHECK_EQ_INT(info.head_stride, 8);
  CHECK_EQ_INT(info.token_stride, 3 * 8);
  CHECK_EQ_INT(info.block_stride, 5 * 3 * 8);
  CHECK_EQ_INT(info.layer_stride, 3 * 5 * 3 * 8);
  CHECK_EQ_INT(info.bytes_per_pool, 3ull * 3 * 5 * 3 * 8 * 2);
  CHECK_EQ_INT((char *)info.v_base - (char *)info.k_base, info.bytes_per_pool);
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_engine_budget(e, &b));
  CHECK_EQ_INT(b.block_bytes, 2ull * 3 * 5 * 3 * 8 * 2);
  CHECK_EQ_INT(b.pool_bytes, 2 * info.bytes_per_pool);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_block_bytes_edge);
  TU_RUN(test_fixed_blocks_edge);
  TU_RUN(test_budget_cap);
  TU_RUN(test_max_model_len_edge);
  TU_RUN(test_budget_terms_edge);
  TU_RUN(test_pool_info_formula);
  return tu_summary();
}
