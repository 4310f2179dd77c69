/* pkv_profile of every committed config (tools/configs) read with
 * pkv_engine_params_from_hf_config_layers, at a fixed memory on the CPU: 80 GiB, utilization 0.9,
 * block_size 16, so the KV budget is 0.9 x 85899345920 = 77309411328 bytes. Every number below is
 * computed by hand in its comment; per layer and token a layer costs 2 (K, V; 1 with K = V) x
 * kv_heads x head_dim x dtype bytes, a SHARED layer nothing, an MLA layer its latent and its
 * indexer's key (DESIGN.md §14). Groups of unequal layers share one
 * page (block bytes): the page that wastes nothing, else the one that wastes least
 * (DESIGN.md §12), and padding_bytes_per_block is what the worst group's block leaves unused. */
#include <string.h>

#include "config_files.h"
#include "test_util.h"

typedef struct profile_case {
  const char *config;
  pkv_status status;
  uint64_t block_bytes, num_blocks;
  uint32_t groups, cached_layers;
  uint64_t model_bytes_per_token, padding_bytes_per_block, blocks_per_max_seq, max_seqs,
      shortfall_bytes;
} profile_case;

static const profile_case cases[] = {
    /* gpt-oss-120b: 36 layers, 8 kv heads x 64, bf16: 2048 B a layer; 18 windowed (128) + 18
     * full: 2 groups of 18, block 18 x 2048 x 16 = 589824; 77309411328 / 589824 = 131072 blocks;
     * model 36 x 2048 = 73728. A sequence of 131072: 8192 + ceil(128 / 16) + 1 = 8201 blocks;
     * 131072 / 8201 = 15 sequences. */
    {"gpt-oss-120b.json", PKV_OK, 589824, 131072, 2, 36, 73728, 0, 8201, 15, 0},
    /* gpt-oss-20b: 24 layers: groups of 12, block 393216, 196608 blocks; model 49152; 8201
     * blocks a sequence, 196608 / 8201 = 23. */
    {"gpt-oss-20b.json", PKV_OK, 393216, 196608, 2, 24, 49152, 0, 8201, 23, 0},
    /* Gemma 2 27B: 46 layers, 16 x 128, float32: 16384 B a layer; 2 groups of 23, block
     * 23 x 16384 x 16 = 6029312; 77309411328 / 6029312 = 12822.3: 12822; model 753664. A
     * sequence of 8192: 512 + ceil(4096 / 16) + 1 = 769 blocks; 12822 / 769 = 16. */
    {"gemma-2-27b.json", PKV_OK, 6029312, 12822, 2, 46, 753664, 0, 769, 16, 0},
    /* Gemma 3 27B: 62 layers, 16 x 128, bf16: 8192 B a layer; 10 full, 52 windowed (1024): groups
     * of 10 (the fewest), 1 + 6, the last holding 2 (8 slots x 8192 x 16 = 1048576 padded);
     * block 10 x 8192 x 16 = 1310720; 58982.4: 58982 blocks; model 62 x 8192 = 507904. A
     * sequence of 131072: 8192 + 6 x (1024 / 16 + 1) = 8582 blocks; 58982 / 8582 = 6. */
    {"gemma-3-27b.json", PKV_OK, 1310720, 58982, 7, 62, 507904, 1048576, 8582, 6, 0},
    /* Gemma 3n E4B: 35 layers, 2 x 256, bf16: 2048 B a layer; 15 shared, 20 cached (16 windowed
     * (512), 4 full): groups of 4, 4 + 1; block 4 x 2048 x 16 = 131072; 589824 blocks; model
     * 20 x 2048 = 40960. A sequence of 32768: 2048 + 4 x (512 / 16 + 1) = 2180 blocks;
     * 589824 / 2180 = 270. */
    {"gemma-3n-E4B.json", PKV_OK, 131072, 589824, 5, 20, 40960, 0, 2180, 270, 0},
    /* Gemma 4 31B: 50 windowed (1024) layers of 16 x 256: 16384 B; 10 full of 4 x 512, K = V:
     * 4 x 512 x 2 = 4096 B; model 50 x 16384 + 10 x 4096 = 860160. No page wastes nothing (a
     * page of k windowed layers holds 4k full ones, and 4k never divides 10); the least waste is
     * one windowed layer a page: 50 groups of 1 and 3 full groups of 4 (4, 4, 2: 2 x 4096 x 16 =
     * 131072 padded), 53 groups, block 16384 x 16 = 262144; 294912 blocks. A sequence of 262144:
     * 3 x 16384 + 50 x (1024 / 16 + 1) = 52402 blocks; 294912 / 52402 = 5. */
    {"gemma-4-31B.json", PKV_OK, 262144, 294912, 53, 60, 860160, 131072, 52402, 5, 0},
    /* Llama 4 Scout: 48 layers, 8 x 128, bf16: 4096 B a layer; 12 full (NoPE), 36 chunked
     * (8192): 4 groups of 12, block 12 x 4096 x 16 = 786432; 98304 blocks; model 196608. Its
     * max_model_len 10485760 needs 655360 + 3 x (8192 / 16 + 1) = 656899 blocks, 656899 x
     * 786432 = 516606394368 bytes: 439296983040 more than the budget. */
    {"llama-4-scout.json", PKV_ERR_OUT_OF_MEMORY, 786432, 98304, 4, 48, 196608, 0, 656899, 0,
     439296983040ull},
    /* Llama 3 8B (flat: no specs): 32 layers, 8 x 128, bf16: block 32 x 4096 x 16 = 2097152;
     * 36864 blocks; a sequence of 8192: 512 blocks; 72 sequences. */
    {"llama-3-8b.json", PKV_OK, 2097152, 36864, 1, 32, 131072, 0, 512, 72, 0},
    /* DeepSeek-V3.2 (sparse attention, issue 29): 61 MLA layers, each token's latent 576 x 2 =
     * 1152 B and its indexer key 128 fp8 values + a 4 B scale = 132 B: 1284 B a layer, model
     * 61 x 1284 = 78324; one group, block 78324 x 16 = 1253184; 77309411328 / 1253184 = 61690.4:
     * 61690 blocks. A sequence of 163840: 10240 blocks; 61690 / 10240 = 6. */
    {"deepseek-v3.2.json", PKV_OK, 1253184, 61690, 1, 61, 78324, 0, 10240, 6, 0},
    /* GLM-5: 78 layers of the same 1284 B: model 100152, block 1602432; 48245.9: 48245 blocks. A
     * sequence of 202752: 12672 blocks; 48245 / 12672 = 3. */
    {"glm-5.json", PKV_OK, 1602432, 48245, 1, 78, 100152, 0, 12672, 3, 0},
};

static void check_profile(const profile_case *c) {
  size_t len = 0;
  char *json = read_config(c->config, &len);
  if (!json) return;
  pkv_engine_params p;
  tu_params(&p, 16, 0);
  p.memory_total_bytes = 80ull << 30;
  pkv_layer_spec specs[128];
  uint32_t n = 0;
  pkv_status s =
      pkv_engine_params_from_hf_config_layers(&p, json, len, specs, sizeof *specs, 128, &n);
  free(json);
  if (!CHECK_OK(s)) return;
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  s = pkv_profile(&p, &b);
  if (!CHECK_EQ_INT(s, c->status)) printf("  %s: %s\n", c->config, pkv_last_error());
  CHECK_EQ_INT(b.budget_bytes, 77309411328ull);
  CHECK_EQ_INT(b.block_bytes, c->block_bytes);
  CHECK_EQ_INT(b.num_blocks, c->num_blocks);
  CHECK_EQ_INT(b.num_kv_groups, c->groups);
  CHECK_EQ_INT(b.num_cached_layers, c->cached_layers);
  CHECK_EQ_INT(b.model_bytes_per_token, c->model_bytes_per_token);
  CHECK_EQ_INT(b.padding_bytes_per_block, c->padding_bytes_per_block);
  CHECK_EQ_INT(b.blocks_per_max_seq, c->blocks_per_max_seq);
  CHECK_EQ_INT(b.max_seqs_at_max_model_len, c->max_seqs);
  CHECK_EQ_INT(b.shortfall_bytes, c->shortfall_bytes);
}

static void test_profiles(void) {
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const int failed = tu_failed_;
    check_profile(&cases[i]);
    if (tu_failed_ != failed) printf("  in %s\n", cases[i].config);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOOLS_CONFIGS_DIR\n", argv[0]);
    return 2;
  }
  tu_configs_dir = argv[1];
  TU_RUN(test_profiles);
  return tu_summary();
}
