/* pkv_engine_params_from_hf_config_layers: every layer's spec of the committed configs
 * (tools/configs: gpt-oss, Gemma 2, 3, 3n, 4, Llama 4), the softmax scale both config calls read
 * (Gemma 2/3's query_pre_attn_scalar), the 0.1 call's refusal of configs that need specs, and
 * bad input (short buffers, bad layer_types, shared layers without a source) changing nothing. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "config_files.h"
#include "test_util.h"

/* scale == want to float precision (the reader rounds a double once). */
static int check_scale(float got, double want) {
  return CHECK(fabs((double)got - want) <= 1e-7 * want);
}

/* Gemma 3 scales by query_pre_attn_scalar^-0.5, not head_dim^-0.5: 27B has head_dim 128 and
 * query_pre_attn_scalar 168 (= hidden_size 5376 / 32 heads). The reader used to ignore it. */
static void test_gemma3_scale(void) {
  size_t len = 0;
  char *json = read_config("gemma-3-27b.json", &len);
  if (!json) return;
  pkv_engine_params p;
  tu_params(&p, 16, 64);
  if (CHECK_OK(pkv_engine_params_from_hf_config(&p, json, len))) {
    CHECK_EQ_INT(p.head_dim, 128);
    check_scale(p.softmax_scale, 1.0 / sqrt(168.0));
  }
  free(json);
}

/* The specs of a config through the per-layer call; n = its layers. */
#define MAX_SPECS 128
static int read_specs(const char *name, pkv_engine_params *p, pkv_layer_spec *specs, uint32_t *n) {
  size_t len = 0;
  char *json = read_config(name, &len);
  if (!json) return 0;
  tu_params(p, 16, 64);
  p->num_blocks = 0; /* from the memory: the profiles below */
  p->sliding_window = 5;
  *n = 0;
  int ok = CHECK_OK(
      pkv_engine_params_from_hf_config_layers(p, json, len, specs, sizeof *specs, MAX_SPECS, n));
  free(json);
  return ok;
}

/* Every field of one spec. */
static void check_spec(const pkv_layer_spec *s, uint32_t kind, uint32_t attention, uint32_t window,
                       uint32_t kv_heads, uint32_t head_dim, uint32_t k_eq_v, uint32_t source,
                       uint32_t sinks, float softcap, double scale) {
  CHECK_EQ_INT(s->kind, kind);
  CHECK_EQ_INT(s->attention, attention);
  CHECK_EQ_INT(s->window, window);
  CHECK_EQ_INT(s->num_kv_heads, kv_heads);
  CHECK_EQ_INT(s->head_dim, head_dim);
  CHECK_EQ_INT(s->v_head_dim, head_dim);
  CHECK_EQ_INT(s->k_eq_v, k_eq_v);
  CHECK_EQ_INT(s->source_layer, source);
  CHECK_EQ_INT(s->sinks, sinks);
  CHECK(s->logit_softcap == softcap);
  check_scale(s->softmax_scale, scale);
  CHECK_EQ_INT(s->reserved0, 0);
}

enum {
  ATT = PKV_LAYER_ATTENTION,
  SHARED = PKV_LAYER_SHARED,
  FULL = PKV_ATTENTION_FULL,
  SLIDING = PKV_ATTENTION_SLIDING,
  CHUNKED = PKV_ATTENTION_CHUNKED
};

/* The per-layer fields in p: layer_specs set, the flat window cleared. */
static void check_uses_specs(const pkv_engine_params *p, const pkv_layer_spec *specs) {
  CHECK(p->layer_specs == specs);
  CHECK_EQ_INT(p->layer_spec_size, sizeof *specs);
  CHECK_EQ_INT(p->sliding_window, 0);
  CHECK(p->layer_windows == NULL);
}

/* gpt-oss (transformers' GptOssAttention): sinks in every layer, layer_types alternating a
 * window of 128 and full attention; scale 1/sqrt(64). */
static void test_gpt_oss(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("gpt-oss-120b.json", &p, s, &n) || !CHECK_EQ_INT(n, 36)) return;
  check_uses_specs(&p, s);
  for (uint32_t l = 0; l < n; l++)
    check_spec(&s[l], ATT, l % 2 ? FULL : SLIDING, l % 2 ? 0 : 128, 8, 64, 0, 0, 1, 0, 0.125);
}

/* Gemma 2 27B: attn_logit_softcapping 50 in every layer, query_pre_attn_scalar 144 (scale 1/12),
 * windowed and full layers alternating, the first windowed; float32 weights. */
static void test_gemma2(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("gemma-2-27b.json", &p, s, &n) || !CHECK_EQ_INT(n, 46)) return;
  check_uses_specs(&p, s);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_F32);
  check_scale(p.softmax_scale, 1.0 / 12);
  for (uint32_t l = 0; l < n; l++)
    check_spec(&s[l], ATT, l % 2 ? FULL : SLIDING, l % 2 ? 0 : 4096, 16, 128, 0, 0, 0, 50.0f,
               1.0 / 12);
}

/* Gemma 3 27B: every 6th layer full (sliding_window_pattern 6), window 1024, 1/sqrt(168). */
static void test_gemma3(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("gemma-3-27b.json", &p, s, &n) || !CHECK_EQ_INT(n, 62)) return;
  check_uses_specs(&p, s); /* mixed windows: the flat fields hold one */
  for (uint32_t l = 0; l < n; l++)
    check_spec(&s[l], ATT, l % 6 == 5 ? FULL : SLIDING, l % 6 == 5 ? 0 : 1024, 16, 128, 0, 0, 0, 0,
               1.0 / sqrt(168.0));
}

/* Gemma 3n E4B (Gemma3nTextAttention): layer_types 4 sliding (512) + 1 full, 35 layers; the last
 * num_kv_shared_layers 15 (20..34) read the last layer before 20 of their type: sliding 18,
 * full 19. Scale 1 (q and k normalized), its query_pre_attn_scalar 256 not used. */
static void test_gemma3n(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("gemma-3n-E4B.json", &p, s, &n) || !CHECK_EQ_INT(n, 35)) return;
  check_uses_specs(&p, s);
  check_scale(p.softmax_scale, 1.0);
  for (uint32_t l = 0; l < n; l++) {
    const int full = l % 5 == 4;
    check_spec(&s[l], l >= 20 ? SHARED : ATT, full ? FULL : SLIDING, full ? 0 : 512, 2, 256, 0,
               l >= 20 ? (full ? 19 : 18) : 0, 0, 0, 1.0);
  }
}

/* Gemma 4 31B (Gemma4TextAttention): 5 sliding (1024) + 1 full, 60 layers; full layers head_dim
 * global_head_dim 512, attention_k_eq_v with num_global_key_value_heads 4; sliding 16 x 256. */
static void test_gemma4(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("gemma-4-31B.json", &p, s, &n) || !CHECK_EQ_INT(n, 60)) return;
  check_uses_specs(&p, s);
  CHECK_EQ_INT(p.num_kv_heads, 16);
  CHECK_EQ_INT(p.head_dim, 256);
  for (uint32_t l = 0; l < n; l++) {
    if (l % 6 == 5)
      check_spec(&s[l], ATT, FULL, 0, 4, 512, 1, 0, 0, 0, 1.0);
    else
      check_spec(&s[l], ATT, SLIDING, 1024, 16, 256, 0, 0, 0, 0, 1.0);
  }
}

/* Llama 4 Scout: no_rope_layers empty, so every 4th layer is NoPE (full attention) and the rope
 * layers attend within chunks of attention_chunk_size 8192; scale 1/sqrt(128). */
static void test_llama4(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (!read_specs("llama-4-scout.json", &p, s, &n) || !CHECK_EQ_INT(n, 48)) return;
  check_uses_specs(&p, s);
  for (uint32_t l = 0; l < n; l++) {
    const int nope = (l + 1) % 4 == 0;
    check_spec(&s[l], ATT, nope ? FULL : CHUNKED, nope ? 0 : 8192, 8, 128, 0, 0, 0, 0,
               1.0 / sqrt(128.0));
  }
}

/* Models the flat fields describe: layer_specs stays NULL, the specs are filled all the same. */
static void test_flat_models(void) {
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (read_specs("llama-3-8b.json", &p, s, &n) && CHECK_EQ_INT(n, 32)) {
    CHECK(p.layer_specs == NULL);
    CHECK_EQ_INT(p.layer_spec_size, 0);
    CHECK_EQ_INT(p.sliding_window, 0);
    for (uint32_t l = 0; l < n; l++)
      check_spec(&s[l], ATT, FULL, 0, 8, 128, 0, 0, 0, 0, 1.0 / sqrt(128.0));
  }
  if (read_specs("mistral-7b.json", &p, s, &n) && CHECK_EQ_INT(n, 32)) {
    CHECK(p.layer_specs == NULL); /* one window in every layer: sliding_window says it */
    CHECK_EQ_INT(p.sliding_window, 4096);
    check_spec(&s[31], ATT, SLIDING, 4096, 8, 128, 0, 0, 0, 0, 1.0 / sqrt(128.0));
  }
  if (read_specs("deepseek-v3.json", &p, s, &n) && CHECK_EQ_INT(n, 61)) {
    CHECK(p.layer_specs == NULL);
    CHECK_EQ_INT(s[60].kind, PKV_LAYER_MLA);
    CHECK_EQ_INT(s[60].head_dim, 576); /* kv_lora_rank 512 + qk_rope_head_dim 64 */
    CHECK_EQ_INT(s[60].v_head_dim, 512);
    CHECK(s[60].softmax_scale == p.softmax_scale);
  }
}

/* The 0.1 call refuses what it would describe wrong, by field, naming the per-layer call. */
static void test_flat_call_refuses(void) {
  static const struct {
    const char *config, *field;
  } cases[] = {{"gpt-oss-120b.json", "gpt_oss"},
               {"gpt-oss-20b.json", "gpt_oss"},
               {"gemma-2-27b.json", "attn_logit_softcapping"},
               {"gemma-2-9b.json", "attn_logit_softcapping"},
               {"gemma-3n-E4B.json", "num_kv_shared_layers"},
               {"gemma-4-31B.json", "global_head_dim"},
               {"llama-4-scout.json", "attention_chunk_size"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len = 0;
    char *json = check_flat_call_refuses(cases[i].config, cases[i].field, &len);
    if (!json) continue;
    free(json);
  }
}

/* The length query, short buffers, sizes and bad fields: refused by name, nothing changed. */
static void test_bad_input(void) {
  size_t len = 0;
  char *json = read_config("gemma-3n-E4B.json", &len);
  if (!json) return;
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  before = p;
  pkv_layer_spec s[MAX_SPECS], s_before[MAX_SPECS];
  memset(s, 0xab, sizeof s);
  memcpy(s_before, s, sizeof s);
  uint32_t n = 0;
  /* the length: only out_num_layers */
  CHECK_OK(pkv_engine_params_from_hf_config_layers(&p, json, len, NULL, 0, 0, &n));
  CHECK_EQ_INT(n, 35);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
  /* a short buffer: the length still written, nothing else */
  n = 0;
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, s, sizeof *s, 34, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "35 layers") != NULL);
  CHECK_EQ_INT(n, 35);
  CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(s, s_before, sizeof s) == 0);
  /* NULLs and sizes */
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(NULL, json, len, s, sizeof *s, 64, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, NULL, len, s, sizeof *s, 64, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, s, sizeof *s, 64, NULL),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, NULL, sizeof *s, 64, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, s, 44, 64, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "spec_size 44") != NULL);
  p.struct_size = (uint32_t)offsetof(pkv_engine_params, layer_specs); /* a 0.4 header's */
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, s, sizeof *s, 64, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "struct_size") != NULL);
  p.struct_size = sizeof p;
  CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(s, s_before, sizeof s) == 0);
  /* a caller's larger spec (a newer header's): written at its stride, the bytes pkv does not
   * know zeroed. 64 bytes were larger than 0.5's spec, and are smaller than 0.6's: the test read
   * past its rows */
  unsigned char wide[35][128];
  memset(wide, 0xcd, sizeof wide);
  if (CHECK_OK(pkv_engine_params_from_hf_config_layers(&p, json, len, (pkv_layer_spec *)wide, 128,
                                                       35, &n))) {
    CHECK_EQ_INT(p.layer_spec_size, 128);
    const pkv_layer_spec *last = (const pkv_layer_spec *)wide[34];
    CHECK_EQ_INT(last->kind, PKV_LAYER_SHARED);
    CHECK_EQ_INT(last->source_layer, 19); /* layer 34 is full attention */
    CHECK_EQ_INT(wide[34][sizeof(pkv_layer_spec)], 0);
    CHECK_EQ_INT(wide[34][127], 0);
  }
  /* a 0.5 caller's 48-byte spec (no recurrent layer): its fields, nothing past its rows */
  unsigned char old[36][48];
  memset(old, 0xcd, sizeof old);
  if (CHECK_OK(pkv_engine_params_from_hf_config_layers(&p, json, len, (pkv_layer_spec *)old, 48, 35,
                                                       &n))) {
    CHECK_EQ_INT(p.layer_spec_size, 48);
    CHECK_EQ_INT(((const pkv_layer_spec *)old[34])->source_layer, 19);
    CHECK_EQ_INT(old[35][0], 0xcd);
  }
  free(json);
}

/* One config text through the per-layer call: its status, and the message names what. */
static void check_refused(const char *json, pkv_status want, const char *what) {
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  before = p;
  pkv_layer_spec s[8];
  uint32_t n = 0;
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, strlen(json), s, sizeof *s, 8, &n),
               want);
  if (!CHECK(strstr(pkv_last_error(), what) != NULL))
    printf("  message: %s\n  wanted: %s\n", pkv_last_error(), what);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
}

#define SHAPE4 "\"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"head_dim\": 64"

/* A config may claim 2^31-1 layers: a short buffer is refused with the length, never allocated
 * for (the reader built every spec before it compared the buffer: out of memory, no length). */
static void test_huge_layer_count(void) {
  static const char huge[] =
      "{\"num_hidden_layers\": 2147483647, \"num_attention_heads\": 8,"
      " \"head_dim\": 64, \"sliding_window\": 16, \"model_type\": \"gemma2\"}";
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  before = p;
  pkv_layer_spec s[8];
  uint32_t n = 0;
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, huge, strlen(huge), s, sizeof *s, 8, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 2147483647);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
}

static void test_bad_fields(void) {
  check_refused("{" SHAPE4 ", \"num_kv_shared_layers\": 4, \"sliding_window\": 8}",
                PKV_ERR_INVALID_ARGUMENT, "num_kv_shared_layers 4 must be below");
  check_refused("{" SHAPE4 ", \"num_kv_shared_layers\": 1, \"sliding_window\": 8, \"layer_types\":"
                " [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
                " \"full_attention\"]}",
                PKV_ERR_INVALID_ARGUMENT, "shared layer 3 has no layer of its type");
  check_refused("{" SHAPE4
                ", \"attention_chunk_size\": 16, \"layer_types\": [\"chunked_attention\","
                " \"full_attention\", \"sliding_attention\", \"full_attention\"]}",
                PKV_ERR_INVALID_ARGUMENT, "layer_types[2]");
  check_refused("{" SHAPE4 ", \"attention_chunk_size\": 16, \"no_rope_layers\": [1, 0]}",
                PKV_ERR_INVALID_ARGUMENT, "no_rope_layers");
  check_refused("{" SHAPE4 ", \"attention_chunk_size\": 16, \"no_rope_layers\": [1, 0, 2, 1]}",
                PKV_ERR_INVALID_ARGUMENT, "no_rope_layers[2]");
  check_refused("{" SHAPE4 ", \"attention_k_eq_v\": true, \"num_global_key_value_heads\": 3}",
                PKV_ERR_INVALID_ARGUMENT, "num_global_key_value_heads 3 does not divide");
  check_refused("{" SHAPE4 ", \"model_type\": \"gemma2\", \"query_pre_attn_scalar\": -1}",
                PKV_ERR_INVALID_ARGUMENT, "query_pre_attn_scalar");
  check_refused("{" SHAPE4 ", \"attn_logit_softcapping\": \"50\"}", PKV_ERR_INVALID_ARGUMENT,
                "attn_logit_softcapping");
  /* caches pkv cannot hold stay refused by name */
  check_refused("{" SHAPE4 ", \"linear_num_key_heads\": 16}", PKV_ERR_UNSUPPORTED,
                "linear_num_key_heads");
  check_refused("{" SHAPE4
                ", \"index_topk\": 2048, \"index_n_heads\": 64, \"index_head_dim\": 128}",
                PKV_ERR_UNSUPPORTED, "\"index_topk\" without multi-head latent attention");
  check_refused("{" SHAPE4 ", \"mamba_d_state\": 16}", PKV_ERR_UNSUPPORTED, "mamba_d_state");
  /* no_rope_layers given: exactly its rope layers are chunked */
  static const char rope[] =
      "{" SHAPE4 ", \"attention_chunk_size\": 16, \"no_rope_layers\": [0, 1, 1, 0]}";
  pkv_engine_params p;
  tu_params(&p, 16, 64);
  pkv_layer_spec s[4];
  uint32_t n = 0;
  if (CHECK_OK(
          pkv_engine_params_from_hf_config_layers(&p, rope, strlen(rope), s, sizeof *s, 4, &n)))
    for (uint32_t l = 0; l < 4; l++)
      CHECK_EQ_INT(s[l].attention, l == 1 || l == 2 ? CHUNKED : FULL);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOOLS_CONFIGS_DIR\n", argv[0]);
    return 2;
  }
  tu_configs_dir = argv[1];
  TU_RUN(test_gemma3_scale);
  TU_RUN(test_gpt_oss);
  TU_RUN(test_gemma2);
  TU_RUN(test_gemma3);
  TU_RUN(test_gemma3n);
  TU_RUN(test_gemma4);
  TU_RUN(test_llama4);
  TU_RUN(test_flat_models);
  TU_RUN(test_flat_call_refuses);
  TU_RUN(test_bad_input);
  TU_RUN(test_bad_fields);
  TU_RUN(test_huge_layer_count);
  return tu_summary();
}
