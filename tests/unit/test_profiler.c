/* The KV profiler: block bytes, every budget term, byte cap, fixed blocks, too small a budget;
 * the attention variants: fp8 (one byte per element, the scales from the budget) and sliding
 * windows (a windowed group holds one window's blocks per sequence; KV groups of group_layers). */
#include "test_util.h"

#define GIB (1024ull * 1024 * 1024)
#define MIB (1024ull * 1024)

/* A Llama-3-8B-like shape on a planned 80 GiB device (no measuring). */
static void llama_params(pkv_engine_params *p) {
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

static pkv_kv_budget profile(const pkv_engine_params *p, pkv_status want) {
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(p, &b), want);
  return b;
}

static void test_budget_terms(void) {
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

static void test_block_bytes(void) {
  pkv_engine_params p;
  llama_params(&p);
  const struct {
    int32_t dtype;
    uint32_t tp, kv_heads, block_size, per_rank, dtype_bytes;
  } cases[] = {
      {PKV_DTYPE_F32, 1, 8, 16, 8, 4},  {PKV_DTYPE_F16, 2, 8, 16, 4, 2},
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

static void test_byte_cap_and_fixed_blocks(void) {
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

static void test_too_small(void) {
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
static void test_engine_budget(void) {
  pkv_engine_params p;
  tu_params(&p, 4, 0);
  uint64_t block_bytes = 2ull * 2 * 4 * 2 * 8 * 4;
  p.kv_cache_bytes = 10 * block_bytes + 5;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
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
static void test_measured_host(void) {
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

/* fp8: one byte per element, half of bf16's block; its scales (K and V, per layer and kv head
 * of this rank) come out of the budget before the blocks. */
static void test_fp8(void) {
  pkv_engine_params p;
  llama_params(&p); /* bf16, budget 22 GiB, max_model_len 4096 */
  pkv_kv_budget b16 = profile(&p, PKV_OK);
  CHECK_EQ_INT(b16.kv_dtype, PKV_DTYPE_BF16); /* 0 resolved to the model's */
  CHECK_EQ_INT(b16.kv_scale_bytes, 0);
  CHECK_EQ_INT(b16.num_kv_groups, 1);
  CHECK_EQ_INT(b16.group_layers, 32);
  CHECK_EQ_INT(b16.padded_layers, 0);
  const int32_t fp8[2] = {PKV_DTYPE_FP8_E4M3, PKV_DTYPE_FP8_E5M2};
  for (int i = 0; i < 2; i++) {
    p.kv_dtype = fp8[i];
    pkv_kv_budget b = profile(&p, PKV_OK);
    CHECK_EQ_INT(b.kv_dtype, fp8[i]);
    CHECK_EQ_INT(b.block_bytes, b16.block_bytes / 2); /* 1 MiB */
    CHECK_EQ_INT(b.bytes_per_token, b16.bytes_per_token / 2);
    CHECK_EQ_INT(b.kv_scale_bytes, 2ull * 32 * 8 * 4);
    CHECK_EQ_INT(b.budget_bytes, b16.budget_bytes);
    CHECK_EQ_INT(b.num_blocks, (22 * GIB - 2048) / MIB); /* 22527: the scales cost one block here */
    CHECK_EQ_INT(b.pool_bytes, b.num_blocks * MIB);
    CHECK_EQ_INT(b.blocks_per_max_seq, 256);
    CHECK_EQ_INT(b.max_seqs_at_max_model_len, 22527 / 256);
    CHECK_EQ_INT(b.group_layers, 32);
  }
  /* this rank's heads only: tp 2 keeps 4 of 8 */
  p.tp_size = 2;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.kv_heads_per_rank, 4);
  CHECK_EQ_INT(b.kv_scale_bytes, 2ull * 32 * 4 * 4);
  CHECK_EQ_INT(b.block_bytes, 2ull * 32 * 16 * 4 * 128);
  /* kv_dtype equal to dtype is the model's dtype */
  p.tp_size = 1;
  p.kv_dtype = PKV_DTYPE_BF16;
  b = profile(&p, PKV_OK);
  CHECK(b.kv_dtype == PKV_DTYPE_BF16 && b.block_bytes == b16.block_bytes && b.kv_scale_bytes == 0);

  /* a byte cap: one 4096-token sequence needs 256 blocks of 1 MiB plus the 2 KiB of scales */
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  p.kv_cache_bytes = 256 * MIB;
  b = profile(&p, PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.num_blocks, 255);
  CHECK_EQ_INT(b.shortfall_bytes, 2048);
  p.kv_cache_bytes = 256 * MIB + 2048;
  b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.num_blocks, 256);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 1);
  p.kv_cache_bytes = 100 * MIB;
  b = profile(&p, PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.shortfall_bytes, 156 * MIB + 2048);

  /* a shape whose blocks fit in 2^63-1 bytes but whose scales do not: refused, not wrapped
   * (2^30 layers x 2^31 kv heads x 8 bytes is 2^64, which wrapped to 0 scale bytes) */
  tu_params(&p, 1, 0);
  p.num_layers = 1u << 30;
  p.num_q_heads = p.num_kv_heads = 0x80000000u;
  p.head_dim = 1;
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  p.kv_cache_bytes = 1ull << 62; /* one block of 2 x 2^61 bytes */
  pkv_kv_budget big;
  memset(&big, 0, sizeof big);
  big.struct_size = sizeof big;
  CHECK_STATUS(pkv_profile(&p, &big), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "kv_scale_bytes") != NULL);
  p.kv_dtype = 0; /* in f32 (4 bytes, no scales) its blocks are what overflows */
  CHECK_STATUS(pkv_profile(&p, &big), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "block_bytes") != NULL);
}

/* One window for every layer: one group; a sequence of max_model_len holds what one token's
 * window spans, ceil(w / block_size) + 1 blocks, never more than its own. */
static void test_one_window(void) {
  pkv_engine_params p;
  llama_params(&p); /* max_model_len 4096, block_size 16: 256 blocks under full attention */
  const struct {
    uint32_t window, max_model_len, blocks;
  } cases[] = {
      {1024, 4096, 65},
      {1000, 4096, 64},
      {1008, 4096, 64},
      {1009, 4096, 65},
      /* max_model_len on a block boundary: the sequence one token shorter holds 9, not 8 */
      {128, 4096, 9},
      {128, 4095, 9},
      {16, 4096, 2},
      {1, 4096, 2},
      {4096, 4096, 256},
      {5000, 4096, 256},
      {4080, 4096, 256},
      {4064, 4096, 255},
      {4048, 4096, 254},
      {8, 20, 2},
      {8, 10, 1},
      {64, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    p.sliding_window = cases[i].window;
    p.max_model_len = cases[i].max_model_len;
    pkv_kv_budget b = profile(&p, PKV_OK);
    if (!CHECK_EQ_INT(b.blocks_per_max_seq, cases[i].blocks))
      fprintf(stderr, "  window %u, max_model_len %u\n", cases[i].window, cases[i].max_model_len);
    CHECK_EQ_INT(b.num_kv_groups, 1);
    CHECK_EQ_INT(b.group_layers, 32);
    CHECK_EQ_INT(b.block_bytes, 2 * MIB); /* windows change no block */
    CHECK_EQ_INT(b.num_blocks, 22 * GIB / (2 * MIB));
    CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks / cases[i].blocks);
  }
  /* the same through layer_windows all alike */
  uint32_t w[32];
  for (int l = 0; l < 32; l++) w[l] = 1024;
  p.sliding_window = 0;
  p.max_model_len = 4096;
  p.layer_windows = w;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK(b.num_kv_groups == 1 && b.blocks_per_max_seq == 65 && b.block_bytes == 2 * MIB);
}

/* Windows on some layers: KV groups of group_layers layers, blocks of that many layers, and a
 * sequence's blocks summed over the groups. */
static void test_groups(void) {
  pkv_engine_params p;
  llama_params(&p);
  uint32_t w[32];
  for (uint32_t l = 0; l < 32; l++)
    w[l] = (l + 1) % 4 ? 1024 : 0; /* 8 full, 24 windowed: 4 groups of 8 */
  p.layer_windows = w;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.num_kv_groups, 4);
  CHECK_EQ_INT(b.group_layers, 8);
  CHECK_EQ_INT(b.padded_layers, 0);
  CHECK_EQ_INT(b.block_bytes, 2ull * 8 * 16 * 8 * 128 * 2); /* 512 KiB */
  CHECK_EQ_INT(b.bytes_per_token, b.block_bytes / 16);
  CHECK_EQ_INT(b.num_blocks, 22 * GIB / (512 * 1024));
  CHECK_EQ_INT(b.blocks_per_max_seq, 256 + 3 * 65);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, 45056 / 451); /* 99; 44 with full attention */
  CHECK_EQ_INT(b.max_tokens, b.num_blocks * 16);

  /* Gemma 3's 5:1 over 62 layers: 10 full set group_layers, 52 windowed in 6 groups, 8 padded */
  uint32_t g3[62];
  for (uint32_t l = 0; l < 62; l++) g3[l] = (l + 1) % 6 ? 1024 : 0;
  p.num_layers = 62;
  p.num_kv_heads = 16;
  p.layer_windows = g3;
  p.max_model_len = 131072;
  p.kv_cache_bytes = 64 * GIB;
  b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.num_kv_groups, 7);
  CHECK_EQ_INT(b.group_layers, 10);
  CHECK_EQ_INT(b.padded_layers, 8);
  CHECK_EQ_INT(b.block_bytes, 2ull * 10 * 16 * 16 * 128 * 2);
  CHECK_EQ_INT(b.blocks_per_max_seq, 8192 + 6 * 65);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks / (8192 + 6 * 65));
  /* with fp8 too: half the block, the scales of all 62 layers */
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  pkv_kv_budget b8 = profile(&p, PKV_OK);
  CHECK_EQ_INT(b8.block_bytes, b.block_bytes / 2);
  CHECK_EQ_INT(b8.kv_scale_bytes, 2ull * 62 * 16 * 4);
  CHECK_EQ_INT(b8.num_blocks, (64 * GIB - b8.kv_scale_bytes) / b8.block_bytes);
  /* no max_model_len: one block per group */
  p.max_model_len = 0;
  b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.blocks_per_max_seq, 7);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks / 7);
  /* too small: the shortfall counts every group's blocks */
  p.max_model_len = 131072;
  p.kv_dtype = 0;
  p.kv_cache_bytes = 1 * GIB;
  b = profile(&p, PKV_ERR_OUT_OF_MEMORY);
  CHECK_EQ_INT(b.shortfall_bytes, (8192 + 6 * 65) * b.block_bytes - GIB);
}

/* Multi-head latent attention: one latent of kv_lora_rank + qk_rope_head_dim values per token per
 * layer, no V, whole on every rank; DeepSeek-V3's shape at 80 GiB. Its rules, and engines over it
 * refused for now. */
static void test_mla(void) {
  pkv_engine_params p;
  tu_params(&p, 16, 0);
  p.num_layers = 61;
  p.num_q_heads = 128;
  p.num_kv_heads = 1;
  p.head_dim = 576;
  p.kv_layout = PKV_KV_LAYOUT_MLA;
  p.kv_lora_rank = 512;
  p.qk_rope_head_dim = 64;
  p.dtype = PKV_DTYPE_BF16;
  p.max_model_len = 163840;
  p.memory_total_bytes = 80 * GIB;
  p.memory_utilization = 0.9;
  for (uint32_t tp = 1; tp <= 8; tp *= 2) {
    p.tp_size = tp;
    p.tp_rank = tp - 1;
    pkv_kv_budget b = profile(&p, PKV_OK);
    CHECK_EQ_INT(b.kv_layout, PKV_KV_LAYOUT_MLA);
    CHECK_EQ_INT(b.kv_heads_per_rank, 1);
    CHECK_EQ_INT(b.bytes_per_token,
                 61ull * 576 * 2); /* 70272: the latent, not K and V of 128 heads */
    CHECK_EQ_INT(b.block_bytes, 16ull * 61 * 576 * 2);
    CHECK_EQ_INT(b.num_blocks, (uint64_t)(80 * GIB * 0.9) / b.block_bytes);
    CHECK_EQ_INT(b.max_seqs_at_max_model_len, b.num_blocks / 10240);
    CHECK_EQ_INT(b.pool_bytes, b.num_blocks * b.block_bytes);
  }
  p.tp_size = 1;
  p.tp_rank = 0;
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  pkv_kv_budget b = profile(&p, PKV_OK);
  CHECK_EQ_INT(b.block_bytes, 16ull * 61 * 576);
  CHECK_EQ_INT(b.kv_scale_bytes, 61ull * 4); /* one scale per layer: the latent's */
  p.kv_dtype = 0;

  /* The rules: one latent "head", head_dim its width, the latent fields only with MLA. */
  p.num_kv_heads = 2;
  profile(&p, PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "num_kv_heads") != NULL);
  p.num_kv_heads = 1;
  p.head_dim = 512;
  profile(&p, PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "kv_lora_rank") != NULL);
  p.head_dim = 576;
  p.kv_lora_rank = 0;
  p.qk_rope_head_dim = 576;
  profile(&p, PKV_ERR_INVALID_ARGUMENT);
  p.kv_lora_rank = 512;
  p.qk_rope_head_dim = 64;
  p.kv_layout = 2;
  profile(&p, PKV_ERR_INVALID_ARGUMENT);
  p.kv_layout = PKV_KV_LAYOUT_MLA;
  p.reserved2 = 1;
  profile(&p, PKV_ERR_INVALID_ARGUMENT);
  p.reserved2 = 0;
  pkv_engine_params heads;
  llama_params(&heads);
  heads.kv_lora_rank = 512;
  profile(&heads, PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "MLA") != NULL);

  /* An engine over the latent: MLA's scale must be given; no sliding window. */
  p.memory_total_bytes = 0;
  p.num_blocks = 8;
  p.max_model_len = 64;
  p.device = PKV_DEVICE_CPU;
  pkv_engine *e = NULL;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "softmax_scale") != NULL);
  CHECK(e == NULL);
  p.softmax_scale = 0.1352f;
  p.sliding_window = 16;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_UNSUPPORTED);
  CHECK(strstr(pkv_last_error(), "MLA") != NULL && e == NULL);
  p.sliding_window = 0;
  /* The pool is the latents alone: one tensor, no V, the budget's bytes. */
  b = profile(&p, PKV_OK);
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_OK);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_STATUS(pkv_pool_info(e, &info), PKV_OK);
  CHECK(info.k_base != NULL && info.v_base == NULL && info.kv_heads == 1 && info.head_dim == 576);
  CHECK(info.bytes_per_pool == b.pool_bytes && info.token_stride == 576);
  CHECK(info.bytes_per_pool == (uint64_t)p.num_layers * 8 * p.block_size * 576 * 2);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_budget_terms);
  TU_RUN(test_block_bytes);
  TU_RUN(test_byte_cap_and_fixed_blocks);
  TU_RUN(test_too_small);
  TU_RUN(test_engine_budget);
  TU_RUN(test_measured_host);
  TU_RUN(test_fp8);
  TU_RUN(test_one_window);
  TU_RUN(test_groups);
  TU_RUN(test_mla);
  return tu_summary();
}
