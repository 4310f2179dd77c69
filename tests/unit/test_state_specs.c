/* STATE layers (pkv.h PKV_LAYER_STATE, DESIGN.md §13) in the specs and the profiler: the budgets
 * of a Qwen3.5-like and a Jamba-like model computed by hand, each part's place in a slot, every
 * bad field refused by name with nothing written, and the profile's terms summing to the budget. */
#include <stddef.h>

#include "test_util.h"

#define MIB (1024ull * 1024)
#define GIB (1024ull * MIB)
#define MAX_LAYERS 40

static pkv_layer_spec specs_[MAX_LAYERS];

/* A STATE spec: part 0 conv (rows x cols of conv_dtype), part 1 (a x b x c of f32). */
static pkv_layer_spec state_spec(uint32_t rows, uint32_t cols, uint32_t conv_dtype, uint32_t a,
                                 uint32_t b, uint32_t c) {
  pkv_layer_spec s;
  memset(&s, 0, sizeof s);
  s.kind = PKV_LAYER_STATE;
  s.state_dtype[0] = conv_dtype, s.state_shape[0] = rows, s.state_shape[1] = cols;
  s.state_dtype[1] = PKV_DTYPE_F32;
  s.state_shape[4] = a, s.state_shape[5] = b, s.state_shape[6] = c;
  return s;
}

/* Qwen3.5-35B-A3B-like, one rank: 40 layers, every 4th full attention (2 kv heads of 256, bf16),
 * the rest Gated DeltaNet (16 k heads, 32 v heads, k_dim = v_dim = 128, conv kernel 4). */
static void qwen35(pkv_engine_params *p) {
  pkv_engine_params_init(p, sizeof *p);
  p->num_layers = 40, p->num_q_heads = 16, p->num_kv_heads = 2, p->head_dim = 256;
  p->dtype = PKV_DTYPE_BF16, p->device = PKV_DEVICE_CPU, p->block_size = 16;
  p->max_num_seqs = 64, p->max_model_len = 262144;
  p->memory_total_bytes = 80 * GIB, p->kv_cache_bytes = 64 * GIB;
  memset(specs_, 0, sizeof specs_);
  /* conv_dim = 2 * 16 * 128 + 32 * 128 = 8192 rows of conv_kernel - 1 = 3 */
  for (uint32_t l = 0; l < 40; ++l)
    if (l % 4 != 3) specs_[l] = state_spec(8192, 3, PKV_DTYPE_BF16, 32, 128, 128);
  p->layer_specs = specs_, p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* Jamba-v0.1-like: 32 layers, attention at l % 8 == 4 (8 kv heads of 128, bf16), Mamba elsewhere
 * (d_inner = 2 * 4096 = 8192, d_state 16, d_conv 4: conv 8192 x 3 bf16, ssm 8192 x 16 f32). */
static void jamba(pkv_engine_params *p) {
  pkv_engine_params_init(p, sizeof *p);
  p->num_layers = 32, p->num_q_heads = 32, p->num_kv_heads = 8, p->head_dim = 128;
  p->dtype = PKV_DTYPE_BF16, p->device = PKV_DEVICE_CPU, p->block_size = 16;
  p->max_num_seqs = 32, p->max_model_len = 65536;
  p->memory_total_bytes = 80 * GIB, p->memory_used_bytes = 52 * GIB;
  p->memory_utilization = 0.9, p->reserve_bytes = 1 * GIB;
  p->state_checkpoint_policy = PKV_STATE_CHECKPOINT_EVERY, p->state_checkpoint_interval = 4;
  p->num_state_checkpoints = 100;
  memset(specs_, 0, sizeof specs_);
  for (uint32_t l = 0; l < 32; ++l)
    if (l % 8 != 4) specs_[l] = state_spec(8192, 3, PKV_DTYPE_BF16, 8192, 16, 0);
  p->layer_specs = specs_, p->layer_spec_size = sizeof(pkv_layer_spec);
}

static pkv_kv_budget profile_ok(const pkv_engine_params *p) {
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_OK(pkv_profile(p, &b));
  return b;
}

/* What the budget's terms add up to: nothing left that would hold another block. */
static void check_terms_sum(const pkv_kv_budget *b) {
  const uint64_t taken = b->kv_scale_bytes + b->state_pool_bytes + b->pool_bytes;
  CHECK(taken <= b->budget_bytes);
  CHECK(b->budget_bytes - taken < b->block_bytes);
  CHECK_EQ_INT(b->state_pool_bytes,
               (uint64_t)(b->num_state_slots + b->num_state_checkpoints) * b->state_bytes_per_seq);
}

static void test_qwen35_budget(void) {
  pkv_engine_params p;
  qwen35(&p);
  const pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.num_state_layers, 30);
  CHECK_EQ_INT(b.num_cached_layers, 10); /* STATE layers hold no KV */
  CHECK_EQ_INT(b.num_kv_groups, 1);
  /* a slot: 30 x (8192 x 3 x 2 = 49152 conv + 32 x 128 x 128 x 4 = 2097152 delta) = 64389120
     bytes (61.4 MiB: the "about 62 MiB"); every part already a multiple of 256 */
  CHECK_EQ_INT(b.state_bytes_per_seq, 64389120ull);
  CHECK_EQ_INT(b.num_state_slots, 64);                    /* max_num_seqs */
  CHECK_EQ_INT(b.num_state_checkpoints, 64);              /* PROMPT_END, 0 given: max_num_seqs */
  CHECK_EQ_INT(b.state_pool_bytes, 128ull * 64389120ull); /* 8241807360 */
  /* KV: 10 layers x 2 (K, V) x 2 heads x 256 x 2 bytes = 20480 per token (20 KiB), 327680 per
     block of 16; (64 GiB - 8241807360) / 327680 = 184563 blocks, 65536 bytes left */
  CHECK_EQ_INT(b.model_bytes_per_token, 20480);
  CHECK_EQ_INT(b.block_bytes, 327680);
  CHECK_EQ_INT(b.num_blocks, 184563);
  CHECK_EQ_INT(b.max_tokens, 184563ull * 16);
  CHECK_EQ_INT(b.budget_bytes, 64 * GIB);
  check_terms_sum(&b);
  /* NONE: no checkpoint slots, so 64 more states' bytes go to blocks */
  p.state_checkpoint_policy = PKV_STATE_CHECKPOINT_NONE;
  const pkv_kv_budget n = profile_ok(&p);
  CHECK_EQ_INT(n.num_state_checkpoints, 0);
  CHECK_EQ_INT(n.state_pool_bytes, 64ull * 64389120ull);
  CHECK_EQ_INT(n.num_blocks, (64 * GIB - 64ull * 64389120ull) / 327680);
  check_terms_sum(&n);
}

static void test_jamba_budget(void) {
  pkv_engine_params p;
  jamba(&p);
  const pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.num_state_layers, 28);
  CHECK_EQ_INT(b.num_cached_layers, 4);
  /* 28 x (49152 conv + 8192 x 16 x 4 = 524288 ssm) = 16056320 bytes (15.3 MiB) */
  CHECK_EQ_INT(b.state_bytes_per_seq, 16056320ull);
  CHECK_EQ_INT(b.num_state_slots, 32);
  CHECK_EQ_INT(b.num_state_checkpoints, 100);
  CHECK_EQ_INT(b.state_pool_bytes, 132ull * 16056320ull); /* 2119434240 */
  /* budget: 80 GiB x 0.9 - 52 GiB used - 1 GiB reserve = 85899345920 x 0.9 - 56908316672 =
     77309411328 - 56908316672 = 20401094656 (19 GiB) */
  CHECK_EQ_INT(b.budget_bytes, 20401094656ull);
  /* KV: 4 layers x 2 x 8 x 128 x 2 = 16384 per token, 262144 per block;
     (20401094656 - 2119434240) / 262144 = 69739 blocks exactly */
  CHECK_EQ_INT(b.model_bytes_per_token, 16384);
  CHECK_EQ_INT(b.block_bytes, 262144);
  CHECK_EQ_INT(b.num_blocks, (20401094656ull - 2119434240ull) / 262144);
  CHECK_EQ_INT(b.num_blocks, 69739);
  check_terms_sum(&b);
}

/* Kimi-Linear-like: STATE (KDA) layers mix with MLA under kv_layout MLA. */
static void test_state_with_mla(void) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 4, p.num_q_heads = 8, p.num_kv_heads = 1, p.head_dim = 576;
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = 512, p.qk_rope_head_dim = 64;
  p.device = PKV_DEVICE_CPU, p.block_size = 16, p.max_num_seqs = 4, p.num_blocks = 64;
  memset(specs_, 0, sizeof specs_);
  for (uint32_t l = 0; l < 4; ++l) specs_[l].kind = PKV_LAYER_MLA;
  specs_[0] = specs_[1] = specs_[2] = state_spec(4096, 3, PKV_DTYPE_BF16, 32, 128, 128);
  p.layer_specs = specs_, p.layer_spec_size = sizeof(pkv_layer_spec);
  const pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.num_state_layers, 3);
  CHECK_EQ_INT(b.num_cached_layers, 1);
  /* 3 x (4096 x 3 x 2 = 24576 + 2097152) */
  CHECK_EQ_INT(b.state_bytes_per_seq, 3ull * (24576 + 2097152));
  CHECK_EQ_INT(b.block_bytes, 16 * 576 * 2); /* one latent of 576 bf16 per token */
}

/* Parts placed in a slot: each 256-byte aligned, in layer order (pkv_layer_info). */
static void test_layer_info_places(void) {
  pkv_engine_params p;
  tu_params(&p, 16, 32);
  p.num_layers = 4, p.max_num_seqs = 4;
  memset(specs_, 0, sizeof specs_);
  specs_[0] = state_spec(5, 3, PKV_DTYPE_F16, 2, 3, 0);    /* 30 bytes -> 256; 24 -> 256 */
  specs_[2] = state_spec(0, 0, 0, 7, 9, 0);                /* conv absent; 252 bytes -> 256 */
  specs_[3] = state_spec(100, 3, PKV_DTYPE_BF16, 0, 0, 0); /* 600 -> 768 */
  specs_[3].state_dtype[1] = 0;
  p.layer_specs = specs_, p.layer_spec_size = sizeof(pkv_layer_spec);
  const pkv_kv_budget b = profile_ok(&p);
  CHECK_EQ_INT(b.state_bytes_per_seq, 256 + 256 + 256 + 768);
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  static const uint64_t offset[4][2] = {{0, 256}, {0, 0}, {0, 512}, {768, 0}};
  static const uint64_t bytes[4][2] = {{30, 24}, {0, 0}, {0, 252}, {600, 0}};
  for (uint32_t l = 0; l < 4; ++l) {
    struct pkv_layer_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (!CHECK_OK(pkv_layer_info(e, l, &info))) continue;
    CHECK_EQ_INT(info.kind, l == 1 ? PKV_LAYER_ATTENTION : PKV_LAYER_STATE);
    for (uint32_t i = 0; i < 2; ++i) {
      CHECK_EQ_INT(info.state_offset[i], offset[l][i]);
      CHECK_EQ_INT(info.state_bytes[i], bytes[l][i]);
    }
  }
  struct pkv_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_layer_info(e, 0, &info));
  CHECK(info.k_base == NULL && info.v_base == NULL && info.block_stride == 0);
  CHECK_EQ_INT(info.state_dtype[0], PKV_DTYPE_F16);
  CHECK(info.state_shape[0] == 5 && info.state_shape[1] == 3 && info.state_shape[2] == 0);
  CHECK(info.state_shape[4] == 2 && info.state_shape[5] == 3 && info.state_shape[6] == 0);
  pkv_engine_destroy(e);
}

/* STATE layers are in no KV group: pkv_kv_groups gives them UINT32_MAX, and the attention
 * layers' groups are as without them. */
static void test_no_kv_group(void) {
  pkv_engine_params p;
  qwen35(&p);
  uint32_t group[40], slot[40], window[4], n = 0, group_layers = 0;
  if (!CHECK_OK(pkv_kv_groups(&p, group, slot, window, 4, &n, &group_layers))) return;
  CHECK_EQ_INT(n, 1);
  CHECK_EQ_INT(group_layers, 10);
  for (uint32_t l = 0; l < 40; ++l) {
    CHECK_EQ_INT(group[l], l % 4 == 3 ? 0 : UINT32_MAX);
    CHECK_EQ_INT(slot[l], l % 4 == 3 ? l / 4 : UINT32_MAX);
  }
}

/* pkv_engine_params_init's state defaults, and a 0.5 caller's params (struct_size ending before
 * the state fields) reading as those defaults. */
static void test_defaults(void) {
  pkv_engine_params p;
  memset(&p, 0x5a, sizeof p);
  CHECK_OK(pkv_engine_params_init(&p, sizeof p));
  CHECK_EQ_INT(p.state_checkpoint_policy, PKV_STATE_CHECKPOINT_PROMPT_END);
  CHECK_EQ_INT(p.state_checkpoint_interval, 0);
  CHECK_EQ_INT(p.num_state_checkpoints, 0);
  CHECK_EQ_INT(p.reserved4, 0);
  qwen35(&p);
  const pkv_kv_budget whole = profile_ok(&p);
  p.state_checkpoint_policy = 9, p.reserved4 = 9; /* beyond a 0.5 struct: never read */
  p.struct_size = (uint32_t)offsetof(pkv_engine_params, state_checkpoint_policy);
  const pkv_kv_budget old = profile_ok(&p);
  CHECK_EQ_INT(old.num_state_checkpoints, 64);
  CHECK_EQ_INT(old.state_pool_bytes, whole.state_pool_bytes);
  CHECK_EQ_INT(old.num_blocks, whole.num_blocks);
}

/* p refused by create and pkv_profile with want, the message holding `says`; nothing written. */
static void refused(const pkv_engine_params *p, pkv_status want, const char *says, int line) {
  pkv_engine *e = (pkv_engine *)0x1;
  if (!CHECK_STATUS(pkv_engine_create(p, &e), want) ||
      !CHECK(strstr(pkv_last_error(), says) != NULL))
    fprintf(stderr, "  (line %d) wanted \"%s\" in \"%s\"\n", line, says, pkv_last_error());
  CHECK(e == (pkv_engine *)0x1);
  pkv_kv_budget b;
  memset(&b, 0x5a, sizeof b);
  b.struct_size = sizeof b;
  if (!CHECK_STATUS(pkv_profile(p, &b), want) || !CHECK(strstr(pkv_last_error(), says) != NULL))
    fprintf(stderr, "  (line %d) profile: wanted \"%s\" in \"%s\"\n", line, says, pkv_last_error());
  CHECK_EQ_INT(b.num_state_layers, 0x5a5a5a5a);
}
#define REFUSED(p, want, says) refused((p), (want), (says), __LINE__)

static void test_bad_state_fields(void) {
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  pkv_engine_params p;
  qwen35(&p), specs_[1].kind = 4; /* kept for indexer caches */
  REFUSED(&p, bad, "layer_specs[1].kind");
  /* every attention field of a STATE layer must be 0, each named */
  static const char *const fields[] = {"attention",     "window",        "num_kv_heads", "head_dim",
                                       "v_head_dim",    "k_eq_v",        "source_layer", "sinks",
                                       "logit_softcap", "softmax_scale", "reserved0"};
  for (int f = 0; f < 11; ++f) {
    qwen35(&p);
    pkv_layer_spec *s = &specs_[2];
    uint32_t *u[] = {&s->attention,  &s->window, &s->num_kv_heads, &s->head_dim,
                     &s->v_head_dim, &s->k_eq_v, &s->source_layer, &s->sinks,
                     NULL,           NULL,       &s->reserved0};
    if (f == 8)
      s->logit_softcap = 30.0f;
    else if (f == 9)
      s->softmax_scale = 0.125f;
    else
      *u[f] = 1;
    char says[64];
    snprintf(says, sizeof says, "layer_specs[2].%s", fields[f]);
    REFUSED(&p, bad, says);
  }
  qwen35(&p), specs_[0].state_dtype[0] = PKV_DTYPE_FP8_E4M3;
  REFUSED(&p, bad, "layer_specs[0].state_dtype[0]");
  qwen35(&p), specs_[0].state_shape[5] = (1u << 24) + 1;
  REFUSED(&p, bad, "layer_specs[0].state_shape[5]");
  qwen35(&p), specs_[0].state_shape[4] = 0x1000000, specs_[0].state_shape[5] = 0x1000000;
  REFUSED(&p, bad, "layer_specs[0].state_shape[5]"); /* 2^24 x 2^24 x 4 bytes: past 2^40 */
  qwen35(&p), specs_[0].state_shape[2] = 0, specs_[0].state_shape[1] = 0,
              specs_[0].state_shape[2] = 7; /* 8192, 0, 7: a dimension after the end */
  REFUSED(&p, bad, "layer_specs[0].state_shape[2]");
  qwen35(&p), specs_[0].state_shape[0] = 0; /* part 0 absent but its second dimension 3 */
  specs_[0].state_dtype[0] = 0;
  REFUSED(&p, bad, "layer_specs[0].state_shape[1]");
  qwen35(&p), specs_[0].state_shape[0] = specs_[0].state_shape[1] = 0; /* absent, dtype BF16 */
  REFUSED(&p, bad, "layer_specs[0].state_dtype[0]");
  qwen35(&p), memset(specs_[0].state_shape, 0, sizeof specs_[0].state_shape);
  memset(specs_[0].state_dtype, 0, sizeof specs_[0].state_dtype);
  REFUSED(&p, bad, "layer_specs[0].state_shape: a STATE layer needs one part");
  qwen35(&p), specs_[3].state_dtype[1] = PKV_DTYPE_BF16; /* an ATTENTION layer */
  REFUSED(&p, bad, "layer_specs[3].state_dtype[1]");
  qwen35(&p), specs_[3].state_shape[7] = 4;
  REFUSED(&p, bad, "layer_specs[3].state_shape[7]");
  /* a 0.5 caller's specs (48 bytes) have no state fields: a STATE kind has no part */
  static char old[MAX_LAYERS * 48];
  qwen35(&p);
  for (uint32_t l = 0; l < 40; ++l) memcpy(old + l * 48, &specs_[l], 48);
  p.layer_specs = (const pkv_layer_spec *)old, p.layer_spec_size = 48;
  REFUSED(&p, bad, "layer_specs[0].state_shape");
}

static void test_bad_models_and_params(void) {
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  pkv_engine_params p;
  qwen35(&p);
  for (uint32_t l = 3; l < 40; l += 4) specs_[l] = specs_[0];
  REFUSED(&p, PKV_ERR_UNSUPPORTED, "every layer is STATE");
  /* A host tier and a store are fine with STATE layers: test_state_offload, test_state_store. */
  qwen35(&p), p.state_checkpoint_policy = 3;
  REFUSED(&p, bad, "state_checkpoint_policy 3");
  qwen35(&p), p.state_checkpoint_policy = PKV_STATE_CHECKPOINT_EVERY;
  REFUSED(&p, bad, "state_checkpoint_interval 0 with policy EVERY");
  qwen35(&p), p.state_checkpoint_policy = PKV_STATE_CHECKPOINT_EVERY;
  p.state_checkpoint_interval = (1u << 20) + 1;
  REFUSED(&p, bad, "state_checkpoint_interval 1048577");
  qwen35(&p), p.state_checkpoint_interval = 4; /* PROMPT_END takes none */
  REFUSED(&p, bad, "only policy EVERY (1) takes an interval");
  qwen35(&p), p.state_checkpoint_policy = PKV_STATE_CHECKPOINT_NONE, p.num_state_checkpoints = 8;
  REFUSED(&p, bad, "num_state_checkpoints 8 with state_checkpoint_policy NONE");
  qwen35(&p), p.reserved4 = 1;
  REFUSED(&p, bad, "reserved4");
  qwen35(&p), p.max_num_seqs = 0x40000000, p.num_state_checkpoints = 0x40000000;
  REFUSED(&p, bad, "2147483648 state slots");
  /* the params' fields are checked without STATE layers too */
  tu_params(&p, 16, 32), p.state_checkpoint_policy = 7;
  REFUSED(&p, bad, "state_checkpoint_policy 7");
}

/* A budget that cannot hold the states and one longest sequence: the shortfall counts both. */
static void test_shortfall_counts_states(void) {
  pkv_engine_params p;
  qwen35(&p);
  p.kv_cache_bytes = 4 * GIB; /* 128 slots take 7.7 GiB */
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  CHECK_STATUS(pkv_profile(&p, &b), PKV_ERR_OUT_OF_MEMORY);
  CHECK(strstr(pkv_last_error(), "128 state slots of 61.4 MiB") != NULL);
  CHECK(strstr(pkv_last_error(), "lower max_num_seqs or num_state_checkpoints") != NULL);
  CHECK_EQ_INT(b.num_blocks, 0);
  /* 262144 / 16 blocks x 327680 + 8241807360 - 4 GiB */
  CHECK_EQ_INT(b.blocks_per_max_seq, 16384);
  CHECK_EQ_INT(b.shortfall_bytes, 16384ull * 327680 + 8241807360ull - 4 * GIB);
  CHECK_EQ_INT(b.state_pool_bytes, 8241807360ull);
}

int main(void) {
  TU_RUN(test_qwen35_budget);
  TU_RUN(test_jamba_budget);
  TU_RUN(test_state_with_mla);
  TU_RUN(test_layer_info_places);
  TU_RUN(test_no_kv_group);
  TU_RUN(test_defaults);
  TU_RUN(test_bad_state_fields);
  TU_RUN(test_bad_models_and_params);
  TU_RUN(test_shortfall_counts_states);
  return tu_summary();
}
