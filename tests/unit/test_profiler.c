/* The KV profiler: block bytes, every budget term, byte cap, fixed blocks, too small a budget. */
#include "test_util.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

/* A Llama-3-8B-like shape on a planned 80 GiB device (no measuring). */
static void llama_params(pkv_engine_params *p)
{
  tu_params(p, 16, 0);
  p->num_layers = 32;
  p->num_q_heads = 32;
  p->num_kv_heads = 8;
  p->head_dim = 128;
  p->dtype = PKV_DTYPE_BF16;
  p->max_model_len = 4096;
  p->memory_total_bytes = 80 * GIB;
  p->memory_used_bytes = 16 * GIB;
  p->reserve_bytes = 2 * GIB;
  p->memory_utilization = 0.5;
}

static pkv_kv_budget profile(const pkv_engine_params *p, pkv_status want)
{
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(p, &b), want);
  return b;
}

static void test_budget_terms(void)
{
  pkv_engine_params p;
  llama_params(&p);
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.device, PKV_DEVICE_CPU);
  CHECK_EQ_INT(b.source, PKV_BUDGET_FROM_UTILIZATION);
  CHECK_EQ_INT(b.kv_heads_per_rank, 8);
  CHECK_EQ_INT(b.block_bytes, 2ull * 32 * 16 * 8 * 128 * 2); /* 2 MiB */
  CHECK_EQ_INT(b.bytes_per_token, 2ull * 32 * 8 * 128 * 2);
  CHECK_EQ_INT(b.total_bytes, 80 * GIB);
  CHECK_EQ_INT(b.used_bytes, 16 * GIB);
  CHECK_EQ_INT(b.reserve_bytes, 2 * GIB);
  CHECK(b.memory_utilization == 0.5);
  CHECK_EQ_INT(b.budget_bytes, 40 * GIB - 16 * GIB - 2 * GIB);
  CHECK_EQ_INT(b.num_blocks, 22 * GIB / (2 * MIB));
  CHECK_EQ_INT(b.pool_bytes, b.num_blocks * b.block_bytes);
  CHECK_EQ_INT(b.max_tokens, b.num_blocks * 16);
  CHECK_EQ_INT(b.blocks_per_max_seq, 256);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks / 256);
  CHECK_EQ_INT(b.shortfall_bytes, 0);

  /* utilization 0.9, not exact in binary: the budget is within a byte, the blocks exact */
  p.memory_utilization = 0.9;
  p.reserve_bytes = 2 * GIB - MIB; /* budget 54 GiB + 1 MiB: far from a block boundary */
  p.max_model_len = 4100;          /* 257 blocks */
  b = profile(&p, PKV_OK);
  CHECK(b.budget_bytes + 1 >= 54 * GIB + MIB && b.budget_bytes <= 54 * GIB + MIB + 1);
  CHECK_EQ_INT(b.num_blocks, 27648);
  CHECK_EQ_INT(b.blocks_per_max_seq, 257);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 27648 / 257);

  p.max_model_len = 0; /* no limit: one block */
  b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.blocks_per_max_seq, 1);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks);
}

static void test_block_bytes(void)
{
  pkv_engine_params p;
  llama_params(&p);
  const struct {
    int32_t dtype;
    uint32_t tp, kv_heads, block_size, per_rank, dtype_bytes;
  } cases[] = {
      {PKV_DTYPE_F32, 1, 8, 16, 8, 4}, {PKV_DTYPE_F16, 2, 8, 16, 4, 2},
      {PKV_DTYPE_BF16, 8, 8, 32, 1, 2}, {PKV_DTYPE_BF16, 16, 8, 16, 1, 2},
      {PKV_DTYPE_F16, 4, 2, 7, 1, 2},   {PKV_DTYPE_F32, 1, 32, 1, 32, 4},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    p.dtype = cases[i].dtype;
    p.tp_size = cases[i].tp;
    p.tp_rank = cases[i].tp - 1;
    p.num_kv_heads = cases[i].kv_heads;
    p.block_size = cases[i].block_size;
    pkv_kv_budget b = profile(&p, PKV_OK);
    CHECK_EQ_INT(b.kv_heads_per_rank, cases[i].per_rank);
    CHECK_EQ_INT(b.block_bytes,
                 2ull * 32 * cases[i].block_size * cases[i].per_rank * 128 * cases[i].dtype_bytes);
    CHECK_EQ_INT(b.bytes_per_token, b.block_bytes / cases[i].block_size);
  }
}

static void test_byte_cap_and_fixed_blocks(void)
{
  pkv_engine_params p;
  llama_params(&p);
  p.kv_cache_bytes = GIB + 5;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.source, PKV_BUDGET_FROM_BYTE_CAP);
  CHECK_EQ_INT(b.budget_bytes, GIB + 5);
  CHECK_EQ_INT(b.num_blocks, 512);
  CHECK_EQ_INT(b.pool_bytes, GIB);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 2);

  p.kv_cache_bytes = 0;
  p.num_blocks = 300;
  b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.source, PKV_BUDGET_FIXED_BLOCKS);
  CHECK_EQ_INT(b.num_blocks, 300);
  CHECK_EQ_INT(b.pool_bytes, 300 * 2 * MIB);
  CHECK_EQ_INT(b.max_tokens, 300 * 16);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 1);
}

static void test_too_small(void)
{
  pkv_engine_params p;
  llama_params(&p);
  p.kv_cache_bytes = 100 * MIB; /* one 4096-token sequence needs 512 MiB */
  pkv_kv_budget b = profile(&p, PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.shortfall_bytes, 412 * MIB);
  CHECK_EQ_INT(b.block_bytes, 2 * MIB);
  CHECK_EQ_INT(b.budget_bytes, 100 * MIB);
  CHECK_EQ_INT(b.num_blocks, 50);
  CHECK_EQ_INT(b.blocks_per_max_seq, 256);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 0);

  p.kv_cache_bytes = 0;
  p.memory_used_bytes = 39 * GIB; /* 40 - 39 - 2 < 0: budget 0 */
  b = profile(&p, PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.budget_bytes, 0);
  CHECK(b.shortfall_bytes >= 512 * MIB);
  CHECK_EQ_INT(b.total_bytes, 80 * GIB);
  CHECK_EQ_INT(b.used_bytes, 39 * GIB);
  CHECK_EQ_INT(b.reserve_bytes, 2 * GIB);
  CHECK_EQ_INT(b.block_bytes, 2 * MIB);

  pkv_engine *e = (pkv_engine *)&p;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_OUT_OF_MEMORY);
  CHECK(e == (pkv_engine *)&p); /* *out set only on success */
}

/* An engine sized by a byte cap reports the same budget and that many blocks. */
static void test_engine_budget(void)
{
  pkv_engine_params p;
  tu_params(&p, 4, 0);
  uint64_t block_bytes = 2ull * 2 * 4 * 2 * 8 * 4;
  p.kv_cache_bytes = 10 * block_bytes + 5;
  pkv_engine *e = tu_engine_p(&p);
  if (!e)
    return;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_engine_budget(e, &b));
  CHECK_EQ_INT(b.source, PKV_BUDGET_FROM_BYTE_CAP);
  CHECK_EQ_INT(b.block_bytes, block_bytes);
  CHECK_EQ_INT(b.num_blocks, 10);
  CHECK_EQ_INT(tu_stats(e).num_blocks, 10);
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  CHECK_OK(pkv_engine_params_get(e, &got));
  CHECK_EQ_INT(got.num_blocks, 10);
  CHECK_EQ_INT(got.device, PKV_DEVICE_CPU);
  CHECK_EQ_INT(got.block_size, 4);
  CHECK_EQ_INT(got.head_dim, 8);
  pkv_engine_destroy(e);
}

/* Measuring the host (memory_total_bytes 0) gives a real total and changes nothing. */
static void test_measured_host(void)
{
  pkv_engine_params p;
  llama_params(&p);
  p.memory_total_bytes = 0;
  p.memory_used_bytes = 0;
  p.reserve_bytes = 0;
  p.kv_cache_bytes = GIB;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK(b.total_bytes > 0);
  CHECK_EQ_INT(b.num_blocks, 512);
}

int main(void)
{
  TU_RUN(test_budget_terms);
  TU_RUN(test_block_bytes);
  TU_RUN(test_byte_cap_and_fixed_blocks);
  TU_RUN(test_too_small);
  TU_RUN(test_engine_budget);
  TU_RUN(test_measured_host);
  return tu_summary();
}
