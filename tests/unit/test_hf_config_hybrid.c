/* pkv_engine_params_from_hf_config_layers on hybrid models (tools/configs: Qwen3-Next, Qwen3.5,
 * Kimi Linear, Nemotron-H, Granite 4.0-H, Jamba): which layers are recurrent (PKV_LAYER_STATE),
 * each state part's shape, dtype and bytes computed by hand from the config, the attention
 * layers beside them, shapes per rank under tp_size, the 0.1 call's refusal, and bad fields
 * refused by name, changing nothing. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "config_files.h"
#include "test_util.h"

#define MAX_SPECS 64
enum { STATE = PKV_LAYER_STATE, F32 = PKV_DTYPE_F32, BF16 = PKV_DTYPE_BF16 };

/* The specs of a config read with tp_size tp; n = pkv's layers. */
static int read_specs(const char *name, uint32_t tp, pkv_engine_params *p, pkv_layer_spec *specs,
                      uint32_t *n) {
  size_t len = 0;
  char *json = read_config(name, &len);
  if (!json) return 0;
  tu_params(p, 16, 64);
  p->tp_size = tp;
  *n = 0;
  int ok = CHECK_OK(
      pkv_engine_params_from_hf_config_layers(p, json, len, specs, sizeof *specs, MAX_SPECS, n));
  if (ok) {
    CHECK(p->layer_specs == specs); /* a STATE layer is never what the flat fields describe */
    CHECK_EQ_INT(p->layer_spec_size, sizeof *specs);
  }
  free(json);
  return ok;
}

/* Part i of s: its dims (0-terminated, up to 4), dtype, and its dense bytes, each by hand. */
static uint64_t check_part(const pkv_layer_spec *s, int i, uint32_t dtype, uint32_t d0, uint32_t d1,
                           uint32_t d2) {
  const uint32_t *shape = &s->state_shape[i * PKV_MAX_STATE_DIMS];
  CHECK_EQ_INT(s->state_dtype[i], dtype);
  CHECK_EQ_INT(shape[0], d0);
  CHECK_EQ_INT(shape[1], d1);
  CHECK_EQ_INT(shape[2], d2);
  CHECK_EQ_INT(shape[3], 0);
  uint64_t bytes = shape[0] == 0 ? 0 : dtype == F32 ? 4 : 2; /* absent: no bytes */
  for (int d = 0; d < PKV_MAX_STATE_DIMS && shape[d]; d++) bytes *= shape[d];
  return bytes;
}

/* A STATE layer: no attention field set; its two parts as given (d2 0: a 2-d part). Returns the
 * state's bytes. */
static uint64_t check_state(const pkv_layer_spec *s, uint32_t conv_dtype, uint32_t conv_channels,
                            uint32_t conv_steps, uint32_t ssm_dtype, uint32_t a, uint32_t b,
                            uint32_t c) {
  CHECK_EQ_INT(s->kind, STATE);
  CHECK(s->attention == 0 && s->window == 0 && s->num_kv_heads == 0 && s->head_dim == 0 &&
        s->v_head_dim == 0 && s->k_eq_v == 0 && s->source_layer == 0 && s->sinks == 0 &&
        s->logit_softcap == 0 && s->softmax_scale == 0 && s->reserved0 == 0);
  return check_part(s, 0, conv_dtype, conv_channels, conv_steps, 0) +
         check_part(s, 1, ssm_dtype, a, b, c);
}

/* An attention layer: full attention, no state. */
static void check_attention(const pkv_layer_spec *s, uint32_t kind, uint32_t kv_heads,
                            uint32_t head_dim, uint32_t v_head_dim, double scale) {
  CHECK_EQ_INT(s->kind, kind);
  CHECK_EQ_INT(s->attention, PKV_ATTENTION_FULL);
  CHECK_EQ_INT(s->window, 0);
  CHECK_EQ_INT(s->num_kv_heads, kv_heads);
  CHECK_EQ_INT(s->head_dim, head_dim);
  CHECK_EQ_INT(s->v_head_dim, v_head_dim);
  CHECK(fabs((double)s->softmax_scale - scale) <= 1e-7 * scale);
  for (int i = 0; i < PKV_MAX_STATE_PARTS * PKV_MAX_STATE_DIMS; i++)
    CHECK_EQ_INT(s->state_shape[i], 0);
}

/* Qwen3-Next-80B-A3B: 48 layers, every 4th full attention (full_attention_interval 4, no
 * layer_types): 36 Gated DeltaNet layers. conv_dim = 2 x 16 x 128 + 32 x 128 = 8192 channels x
 * (4 - 1), bf16: 49152 B; state 32 x 128 x 128 fp32: 2097152 B. Attention: 2 kv heads x 256,
 * scale 1/16. tp_size 2 halves the heads: conv 4096 x 3, state 16 x 128 x 128. */
static void test_qwen3_next(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0, states = 0;
  if (!read_specs("qwen3-next-80b-a3b.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 48)) return;
  CHECK_EQ_INT(p.num_layers, 48);
  CHECK_EQ_INT(p.dtype, BF16);
  for (uint32_t l = 0; l < n; l++) {
    if ((l + 1) % 4 == 0) {
      check_attention(&s[l], PKV_LAYER_ATTENTION, 2, 256, 256, 1.0 / 16);
      continue;
    }
    CHECK_EQ_INT(check_state(&s[l], BF16, 8192, 3, F32, 32, 128, 128), 49152 + 2097152);
    states++;
  }
  CHECK_EQ_INT(states, 36);
  if (read_specs("qwen3-next-80b-a3b.json", 2, &p, s, &n))
    CHECK_EQ_INT(check_state(&s[0], BF16, 4096, 3, F32, 16, 128, 128), 24576 + 1048576);
}

/* Qwen3.5-35B-A3B (text_config; layer_types: 3 linear_attention, then full_attention, x 10):
 * 30 GDN layers of the Qwen3-Next shape, mamba_ssm_dtype float32. One sequence's state:
 * 30 x (49152 + 2097152) = 64389120 B (61.4 MiB, the "about 62 MiB"); its attention KV
 * is 10 layers x 2 (K, V) x 2 heads x 256 x 2 B = 20480 B (20 KiB) a token. */
static void test_qwen3_5(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("qwen3.5-35b-a3b.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 40)) return;
  uint64_t state_bytes = 0, kv_bytes = 0;
  for (uint32_t l = 0; l < n; l++)
    if (l % 4 == 3) {
      check_attention(&s[l], PKV_LAYER_ATTENTION, 2, 256, 256, 1.0 / 16);
      kv_bytes += 2ull * s[l].num_kv_heads * s[l].head_dim * 2;
    } else {
      state_bytes += check_state(&s[l], BF16, 8192, 3, F32, 32, 128, 128);
    }
  CHECK_EQ_INT(state_bytes, 64389120);
  CHECK_EQ_INT(kv_bytes, 20480);
}

/* Kimi Linear 48B-A3B: 27 layers, kda_layers numbered from 1, the 7 others MLA (kv_lora_rank
 * 512 + qk_rope_head_dim 64 = 576, scale 1/sqrt(128 + 64)). KDA: q, k and v convs of 32 x 128
 * channels each = 12288 x 3 bf16 (73728 B); state 32 x 128 x 128 fp32. */
static void test_kimi_linear(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("kimi-linear-48b-a3b.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 27)) return;
  CHECK_EQ_INT(p.kv_layout, PKV_KV_LAYOUT_MLA);
  for (uint32_t l = 0; l < n; l++)
    if ((l + 1) % 4 == 0 || l == 26)
      check_attention(&s[l], PKV_LAYER_MLA, 1, 576, 512, 1.0 / sqrt(192.0));
    else
      CHECK_EQ_INT(check_state(&s[l], BF16, 12288, 3, F32, 32, 128, 128), 73728 + 2097152);
}

/* Nemotron-H 8B: hybrid_override_pattern of 52 blocks: 24 M, 4 *, 24 - (MLPs keep nothing and
 * are no pkv layer): 28 layers, attention at 4, 10, 16, 22 (8 kv heads x 128). Mamba2: 128 heads
 * x 64, d_state 128, 8 groups, conv 4: conv 128 x 64 + 2 x 8 x 128 = 10240 x 3 bf16 (61440 B),
 * state 128 x 64 x 128 bf16 (2097152 B). tp_size 2: 64 heads, 4 groups: 4096 + 1024 = 5120. */
static void test_nemotron_h(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("nemotron-h-8b.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 28)) return;
  CHECK_EQ_INT(p.num_layers, 28);
  for (uint32_t l = 0; l < n; l++)
    if (l == 4 || l == 10 || l == 16 || l == 22)
      check_attention(&s[l], PKV_LAYER_ATTENTION, 8, 128, 128, 1.0 / sqrt(128.0));
    else
      CHECK_EQ_INT(check_state(&s[l], BF16, 10240, 3, BF16, 128, 64, 128), 61440 + 2097152);
  if (read_specs("nemotron-h-8b.json", 2, &p, s, &n))
    check_state(&s[0], BF16, 5120, 3, BF16, 64, 64, 128);
}

/* Granite 4.0-H Small: 40 layers, layer_types attention at 5, 15, 25, 35 (8 kv heads x 128,
 * scale attention_multiplier 1/128). Mamba2: 128 heads x 64, d_state 128, 1 group: conv 8192 +
 * 256 = 8448 x 3 bf16 (50688 B); state 128 x 64 x 128 bf16. tp_size 4: the one group is kept
 * whole on each rank: 2048 + 256 = 2304 channels, 32 heads. */
static void test_granite(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("granite-4.0-h-small.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 40)) return;
  for (uint32_t l = 0; l < n; l++)
    if (l % 10 == 5)
      check_attention(&s[l], PKV_LAYER_ATTENTION, 8, 128, 128, 0.0078125);
    else
      CHECK_EQ_INT(check_state(&s[l], BF16, 8448, 3, BF16, 128, 64, 128), 50688 + 2097152);
  if (read_specs("granite-4.0-h-small.json", 4, &p, s, &n))
    check_state(&s[0], BF16, 2304, 3, BF16, 32, 64, 128);
}

/* Jamba Mini 1.5: 32 layers, attention where l % 8 == 4 (4, 12, 20, 28; 8 kv heads x 128).
 * Mamba1: d_inner 2 x 4096 = 8192: conv 8192 x 3 bf16 (49152 B), state 8192 x 16 bf16 (262144
 * B), a 2-d part. */
static void test_jamba(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("jamba-mini-1.5.json", 1, &p, s, &n) || !CHECK_EQ_INT(n, 32)) return;
  for (uint32_t l = 0; l < n; l++)
    if (l % 8 == 4)
      check_attention(&s[l], PKV_LAYER_ATTENTION, 8, 128, 128, 1.0 / sqrt(128.0));
    else
      CHECK_EQ_INT(check_state(&s[l], BF16, 8192, 3, BF16, 8192, 16, 0), 49152 + 262144);
}

/* The 0.1 call would describe a hybrid model wrong: refused by its field, naming the per-layer
 * call, and so is its companion pkv_hf_config_layer_windows (Nemotron-H's 52 blocks are 28 cached
 * layers: 52 windows would not be the per-layer call's layers); the digest reads it. */
static void test_flat_call_refuses(void) {
  static const struct {
    const char *config, *field;
  } cases[] = {{"qwen3-next-80b-a3b.json", "linear_num_value_heads"},
               {"qwen3.5-35b-a3b.json", "linear_num_value_heads"},
               {"kimi-linear-48b-a3b.json", "linear_attn_config"},
               {"nemotron-h-8b.json", "hybrid_override_pattern"},
               {"granite-4.0-h-small.json", "mamba_n_heads"},
               {"jamba-mini-1.5.json", "mamba_d_state"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len = 0;
    char *json = check_flat_call_refuses(cases[i].config, cases[i].field, &len);
    if (!json) continue;
    uint32_t windows[64], n = 0;
    CHECK_STATUS(pkv_hf_config_layer_windows(json, len, windows, 64, &n), PKV_ERR_UNSUPPORTED);
    CHECK(strstr(pkv_last_error(), cases[i].field) != NULL);
    CHECK(strstr(pkv_last_error(), "pkv_engine_params_from_hf_config_layers") != NULL);
    char id[PKV_HF_CONFIG_DIGEST_BYTES];
    CHECK_OK(pkv_hf_config_digest(json, len, id, sizeof id));
    free(json);
  }
}

/* One config text through the per-layer call (tp_size tp): its status, the message names what,
 * nothing changed. */
static void check_refused(const char *json, uint32_t tp, pkv_status want, const char *what) {
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  p.tp_size = tp;
  before = p;
  pkv_layer_spec s[8], s_before[8];
  memset(s, 0xab, sizeof s);
  memcpy(s_before, s, sizeof s);
  uint32_t n = 0;
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, strlen(json), s, sizeof *s, 8, &n),
               want);
  if (!CHECK(strstr(pkv_last_error(), what) != NULL))
    printf("  message: %s\n  wanted: %s\n", pkv_last_error(), what);
  CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(s, s_before, sizeof s) == 0);
}

#define QWEN                                                                               \
  "\"model_type\": \"qwen3_next\", \"num_hidden_layers\": 4, \"num_attention_heads\": 8, " \
  "\"num_key_value_heads\": 2, \"head_dim\": 64, \"linear_num_key_heads\": 4, "            \
  "\"linear_key_head_dim\": 32, \"linear_value_head_dim\": 32, \"linear_conv_kernel_dim\": 4"
#define MAMBA2                                                                                \
  "\"num_hidden_layers\": 3, \"num_attention_heads\": 8, \"head_dim\": 64, "                  \
  "\"mamba_num_heads\": 8, \"mamba_head_dim\": 16, \"ssm_state_size\": 16, \"n_groups\": 2, " \
  "\"conv_kernel\": 4, \"model_type\": \"nemotron_h\""

static void test_bad_fields(void) {
  check_refused("{" QWEN ", \"linear_num_value_heads\": 8, \"linear_conv_kernel_dim\": null}", 1,
                PKV_ERR_INVALID_ARGUMENT, "\"linear_conv_kernel_dim\" is missing");
  check_refused("{" QWEN ", \"linear_num_value_heads\": 6}", 1, PKV_ERR_INVALID_ARGUMENT,
                "linear_num_value_heads 6 is not a multiple of linear_num_key_heads 4");
  check_refused("{" QWEN ", \"linear_num_value_heads\": 8}", 3, PKV_ERR_INVALID_ARGUMENT,
                "\"linear_num_key_heads\" (4) is not a multiple of tp_size 3");
  check_refused("{" QWEN ", \"linear_num_value_heads\": 8, \"layer_types\": [\"linear_attention\","
                " \"sliding_attention\", \"linear_attention\", \"full_attention\"]}",
                1, PKV_ERR_INVALID_ARGUMENT, "layer_types[1] must be \"linear_attention\" or");
  check_refused("{" QWEN ", \"linear_num_value_heads\": 8, \"mamba_ssm_dtype\": \"float64\"}", 1,
                PKV_ERR_INVALID_ARGUMENT, "mamba_ssm_dtype");
  check_refused("{" QWEN ", \"linear_num_value_heads\": 8, \"sliding_window\": 128}", 1,
                PKV_ERR_UNSUPPORTED, "\"sliding_window\" (128) in a model with recurrent layers");
  /* 2^21 value heads x 32: a conv of 2^26 channels, past 2^24 */
  check_refused("{" QWEN ", \"linear_num_value_heads\": 2097152}", 1, PKV_ERR_INVALID_ARGUMENT,
                "the conv state (2 * linear_num_key_heads");
  check_refused("{" MAMBA2 ", \"hybrid_override_pattern\": \"M*\"}", 1, PKV_ERR_INVALID_ARGUMENT,
                "\"hybrid_override_pattern\" must be a string of num_hidden_layers (3)");
  check_refused("{" MAMBA2 ", \"hybrid_override_pattern\": \"M*X\"}", 1, PKV_ERR_INVALID_ARGUMENT,
                "hybrid_override_pattern[2] must be");
  check_refused("{" MAMBA2 ", \"hybrid_override_pattern\": \"M*-\", \"n_groups\": 0}", 1,
                PKV_ERR_INVALID_ARGUMENT, "\"n_groups\" must be a positive integer");
  check_refused("{" MAMBA2 ", \"hybrid_override_pattern\": \"M*-\"}", 4, PKV_ERR_INVALID_ARGUMENT,
                "\"n_groups\" (2) is not a multiple of tp_size 4");
  static const char kimi[] =
      "{\"model_type\": \"kimi_linear\", \"num_hidden_layers\": 3, \"num_attention_heads\": 8, "
      "\"kv_lora_rank\": 64, \"qk_rope_head_dim\": 16, \"linear_attn_config\": {\"num_heads\": 4, "
      "\"head_dim\": 16, \"short_conv_kernel_size\": 4, ";
  char text[512];
  snprintf(text, sizeof text, "%s\"kda_layers\": [0, 1]}}", kimi);
  check_refused(text, 1, PKV_ERR_INVALID_ARGUMENT, "kda_layers must list distinct layers 1 ..");
  snprintf(text, sizeof text, "%s\"kda_layers\": [1, 2], \"full_attn_layers\": [2, 3]}}", kimi);
  check_refused(text, 1, PKV_ERR_INVALID_ARGUMENT, "layer 2 (numbered from 1) is in both");
  snprintf(text, sizeof text, "%s\"full_attn_layers\": [3]}}", kimi);
  check_refused(text, 1, PKV_ERR_INVALID_ARGUMENT, "linear_attn_config.kda_layers is missing");
  check_refused("{\"model_type\": \"granitemoehybrid\", \"num_hidden_layers\": 2, "
                "\"num_attention_heads\": 8, \"hidden_size\": 512, \"layer_types\": [\"mamba\", "
                "\"attention\"], \"mamba_n_heads\": 8, \"mamba_d_head\": 32, \"mamba_d_state\": "
                "16, \"mamba_n_groups\": 1, \"mamba_d_conv\": 4, \"mamba_expand\": 2}",
                1, PKV_ERR_INVALID_ARGUMENT,
                "mamba_n_heads * mamba_d_head must be mamba_expand * hidden_size (1024)");
  check_refused("{\"model_type\": \"jamba\", \"num_hidden_layers\": 8, \"num_attention_heads\": 8,"
                " \"hidden_size\": 512, \"mamba_d_state\": 16, \"mamba_d_conv\": 4, "
                "\"mamba_expand\": 2, \"attn_layer_period\": 4, \"attn_layer_offset\": 4}",
                1, PKV_ERR_INVALID_ARGUMENT,
                "attn_layer_offset 4 must be below attn_layer_period 4");
  /* a model_type pkv does not know with a recurrent field stays refused by the field */
  check_refused("{\"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"head_dim\": 64, "
                "\"model_type\": \"falcon_h1\", \"mamba_d_state\": 16}",
                1, PKV_ERR_UNSUPPORTED, "mamba_d_state");
}

/* A 0.5 caller's spec (48 bytes) ends before the state fields: refused, nothing written; a
 * Granite config of attention layers only (Granite 4.0 Micro) reads through the flat call, with
 * attention_multiplier as its scale. */
static void test_old_spec_and_attention_only(void) {
  size_t len = 0;
  char *json = read_config("jamba-mini-1.5.json", &len);
  if (json) {
    pkv_engine_params p, before;
    tu_params(&p, 16, 64);
    before = p;
    unsigned char old[32][48], old_before[32][48];
    memset(old, 0xab, sizeof old);
    memcpy(old_before, old, sizeof old);
    uint32_t n = 0;
    CHECK_STATUS(
        pkv_engine_params_from_hf_config_layers(&p, json, len, (pkv_layer_spec *)old, 48, 32, &n),
        PKV_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pkv_last_error(), "layer 0 is recurrent") != NULL);
    CHECK(strstr(pkv_last_error(), "spec_size 48") != NULL);
    CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(old, old_before, sizeof old) == 0);
    /* A 0.6 caller's spec (88 bytes) holds every state field: read, the 0.7 fields not written
     * (pkv 0.7 once refused it: the check compared with the 0.7 size). */
    static unsigned char six[32 * 88 + 16];
    memset(six, 0xab, sizeof six);
    if (CHECK_OK(pkv_engine_params_from_hf_config_layers(&p, json, len, (pkv_layer_spec *)six, 88,
                                                         32, &n))) {
      pkv_layer_spec first;
      memset(&first, 0, sizeof first);
      memcpy(&first, six, 88);
      CHECK_EQ_INT(first.kind, PKV_LAYER_STATE);
      CHECK(first.state_shape[0] > 0);
      CHECK_EQ_INT(p.layer_spec_size, 88);
      CHECK(six[(size_t)n * 88] == 0xab); /* past the last 88-byte spec: untouched */
    }
    free(json);
  }
  static const char micro[] =
      "{\"model_type\": \"granitemoehybrid\", \"num_hidden_layers\": 2, \"num_attention_heads\": "
      "8, \"num_key_value_heads\": 2, \"hidden_size\": 1024, \"attention_multiplier\": 0.015625, "
      "\"layer_types\": [\"attention\", \"attention\"], \"mamba_d_state\": 128}";
  pkv_engine_params p;
  tu_params(&p, 16, 64);
  if (CHECK_OK(pkv_engine_params_from_hf_config(&p, micro, strlen(micro)))) {
    CHECK_EQ_INT(p.num_layers, 2);
    CHECK_EQ_INT(p.head_dim, 128);
    CHECK(p.softmax_scale == 0.015625f);
  }
}

/* A conv of kernel 1 keeps no past inputs: part 0 absent (every dim and its dtype 0), the state
 * alone, in the model's dtype (p's F32: the config gives none). */
static void test_conv_kernel_one(void) {
  static const char jamba[] =
      "{\"model_type\": \"jamba\", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
      "\"hidden_size\": 128, \"attn_layer_period\": 2, \"attn_layer_offset\": 1, "
      "\"mamba_d_state\": 16, \"mamba_d_conv\": 1, \"mamba_expand\": 2}";
  pkv_engine_params p;
  tu_params(&p, 16, 64);
  pkv_layer_spec s[2];
  uint32_t n = 0;
  if (CHECK_OK(
          pkv_engine_params_from_hf_config_layers(&p, jamba, strlen(jamba), s, sizeof *s, 2, &n)))
    CHECK_EQ_INT(check_state(&s[0], F32, 0, 0, F32, 256, 16, 0), 256 * 16 * 4);
}

/* Each config's specs through pkv_profile (80 GiB, utilization 0.9): the recurrent layers are in
 * no KV group, and one sequence's state is every STATE layer's parts (each a multiple of 256
 * bytes here, so no padding): layers x (conv + state) bytes, by hand from the tests above. */
static void test_profiles(void) {
  static const struct {
    const char *config;
    uint32_t state_layers, cached_layers;
    uint64_t state_bytes;
  } cases[] = {{"qwen3-next-80b-a3b.json", 36, 12, 36ull * (49152 + 2097152)},
               {"qwen3.5-35b-a3b.json", 30, 10, 64389120},
               {"kimi-linear-48b-a3b.json", 20, 7, 20ull * (73728 + 2097152)},
               {"nemotron-h-8b.json", 24, 4, 24ull * (61440 + 2097152)},
               {"granite-4.0-h-small.json", 36, 4, 36ull * (50688 + 2097152)},
               {"jamba-mini-1.5.json", 28, 4, 28ull * (49152 + 262144)}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pkv_engine_params p;
    pkv_layer_spec s[MAX_SPECS];
    uint32_t n = 0;
    if (!read_specs(cases[i].config, 1, &p, s, &n)) continue;
    p.num_blocks = 0;
    p.memory_total_bytes = 80ull << 30;
    p.max_model_len = 32768;
    pkv_kv_budget b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    if (!CHECK_OK(pkv_profile(&p, &b))) {
      printf("  %s: %s\n", cases[i].config, pkv_last_error());
      continue;
    }
    CHECK_EQ_INT(b.num_state_layers, cases[i].state_layers);
    CHECK_EQ_INT(b.num_cached_layers, cases[i].cached_layers);
    CHECK_EQ_INT(b.state_bytes_per_seq, cases[i].state_bytes);
    CHECK_EQ_INT(b.num_state_slots, p.max_num_seqs);
    CHECK_EQ_INT(b.state_pool_bytes,
                 (uint64_t)(b.num_state_slots + b.num_state_checkpoints) * cases[i].state_bytes);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOOLS_CONFIGS_DIR\n", argv[0]);
    return 2;
  }
  tu_configs_dir = argv[1];
  TU_RUN(test_qwen3_next);
  TU_RUN(test_qwen3_5);
  TU_RUN(test_kimi_linear);
  TU_RUN(test_nemotron_h);
  TU_RUN(test_granite);
  TU_RUN(test_jamba);
  TU_RUN(test_flat_call_refuses);
  TU_RUN(test_bad_fields);
  TU_RUN(test_old_spec_and_attention_only);
  TU_RUN(test_conv_kernel_one);
  TU_RUN(test_profiles);
  return tu_summary();
}
