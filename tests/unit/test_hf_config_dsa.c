/* Sparse attention's indexer through the config reader (issue 29 item 5): DeepSeek-V3.2 and GLM-5
 * (tools/configs) give every MLA layer index_head_dim 128, fp8 keys, their heads and top-k, with
 * layer_specs set; an engine takes those specs; the flat call refuses them naming the per-layer
 * call; the text_config form reads alike; some of the three fields, bad values, an indexer
 * without MLA, GLM's shared top-k and a 0.6 spec_size are refused by name, changing nothing.
 * The softmax scales: DeepSeek V3.2's yarn mscale^2 / sqrt(192), GLM-5's 1/sqrt(192 + 64). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "config_files.h"
#include "test_util.h"

#define MAX_SPECS 128

static int check_scale(float got, double want) {
  return CHECK(fabs((double)got - want) <= 1e-7 * want);
}

/* json (len bytes) through the per-layer call into specs[MAX_SPECS]. */
static pkv_status read_layers(const char *json, size_t len, pkv_engine_params *p,
                              pkv_layer_spec *specs, uint32_t *n) {
  tu_params(p, 16, 0);
  *n = 0;
  return pkv_engine_params_from_hf_config_layers(p, json, len, specs, sizeof *specs, MAX_SPECS, n);
}

/* Every layer MLA with the latent 512 + 64 and the indexer: 128 fp8 values, heads, top-k 2048. */
static void check_dsa_layers(const pkv_engine_params *p, const pkv_layer_spec *s, uint32_t n,
                             uint32_t want_layers, uint32_t index_heads, double scale) {
  CHECK_EQ_INT(n, want_layers);
  CHECK_EQ_INT(p->num_layers, want_layers);
  CHECK_EQ_INT(p->kv_layout, PKV_KV_LAYOUT_MLA);
  CHECK_EQ_INT(p->kv_lora_rank, 512);
  CHECK_EQ_INT(p->qk_rope_head_dim, 64);
  CHECK_EQ_INT(p->head_dim, 576);
  CHECK(p->layer_specs == s); /* the flat fields have no indexer */
  CHECK_EQ_INT(p->layer_spec_size, sizeof *s);
  check_scale(p->softmax_scale, scale);
  for (uint32_t l = 0; l < n; l++) {
    const int failed = tu_failed_;
    CHECK_EQ_INT(s[l].kind, PKV_LAYER_MLA);
    CHECK_EQ_INT(s[l].attention, PKV_ATTENTION_FULL);
    CHECK_EQ_INT(s[l].num_kv_heads, 1);
    CHECK_EQ_INT(s[l].head_dim, 576);
    CHECK_EQ_INT(s[l].v_head_dim, 512);
    check_scale(s[l].softmax_scale, scale);
    CHECK_EQ_INT(s[l].index_head_dim, 128);
    CHECK_EQ_INT(s[l].index_dtype, PKV_DTYPE_FP8_E4M3);
    CHECK_EQ_INT(s[l].index_n_heads, index_heads);
    CHECK_EQ_INT(s[l].index_topk, 2048);
    if (tu_failed_ != failed) printf("  in layer %u\n", l);
  }
}

/* DeepSeek-V3.2: 61 layers, 64 indexer heads; yarn factor 40, mscale_all_dim 1 as V3. */
static void test_deepseek_v32(void) {
  size_t len = 0;
  char *json = read_config("deepseek-v3.2.json", &len);
  if (!json) return;
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  const double mscale = 0.1 * log(40.0) + 1.0;
  if (CHECK_OK(read_layers(json, len, &p, s, &n)))
    check_dsa_layers(&p, s, n, 61, 64, mscale * mscale / sqrt(192.0));
  CHECK_EQ_INT(p.max_model_len, 163840);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  /* The specs are an engine's: its layer_info gives the indexer, fp8 with a scale per token. */
  p.num_blocks = 4;
  p.max_model_len = 64;
  pkv_engine *e = tu_engine_p(&p);
  if (e) {
    struct pkv_layer_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (CHECK_OK(pkv_layer_info(e, 60, &info))) {
      CHECK_EQ_INT(info.index_head_dim, 128);
      CHECK_EQ_INT(info.index_dtype, PKV_DTYPE_FP8_E4M3);
      CHECK_EQ_INT(info.index_n_heads, 64);
      CHECK_EQ_INT(info.index_topk, 2048);
      CHECK(info.index_base != NULL && info.index_scale_base != NULL);
      CHECK_EQ_INT(info.index_block_bytes, 61ull * 1284 * 16); /* the page of every layer */
    }
    pkv_engine_destroy(e);
  }
  /* The flat call would describe it as dense MLA: refused, naming the field and the call. */
  free(check_flat_call_refuses("deepseek-v3.2.json", "index_topk", &len));
  /* A digest names a config pkv reads; the windows of its layers are all full. */
  char digest[PKV_HF_CONFIG_DIGEST_BYTES];
  CHECK_OK(pkv_hf_config_digest(json, len, digest, sizeof digest));
  uint32_t windows[MAX_SPECS], num = 0;
  if (CHECK_OK(pkv_hf_config_layer_windows(json, len, windows, MAX_SPECS, &num))) {
    CHECK_EQ_INT(num, 61);
    CHECK_EQ_INT(windows[0], 0);
    CHECK_EQ_INT(windows[60], 0);
  }
  free(json);
}

/* GLM-5: 78 layers, 32 indexer heads, rope_parameters without yarn: 1/sqrt(192 + 64) = 1/16
 * (its config's head_dim 64 is the rope's, not the cache's: the latent stays 576). */
static void test_glm5(void) {
  size_t len = 0;
  char *json = read_config("glm-5.json", &len);
  if (!json) return;
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (CHECK_OK(read_layers(json, len, &p, s, &n))) check_dsa_layers(&p, s, n, 78, 32, 1.0 / 16);
  CHECK_EQ_INT(p.max_model_len, 202752);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16); /* "dtype", transformers 5's name */
  free(check_flat_call_refuses("glm-5.json", "index_topk", &len));
  free(json);
}

/* The text_config form (a multimodal wrapper's) reads the same indexer; a 0.6 caller's spec
 * (88 bytes, no indexer fields) is refused rather than given dense MLA layers. */
static void test_text_config_and_old_spec(void) {
  size_t len = 0;
  char *json = read_config("deepseek-v3.2.json", &len);
  if (!json) return;
  char *wrapped = malloc(len + 64);
  const int w =
      snprintf(wrapped, len + 64, "{\"model_type\": \"x_vl\", \"text_config\": %s}", json);
  pkv_engine_params p, before;
  pkv_layer_spec s[MAX_SPECS], kept[MAX_SPECS];
  uint32_t n = 0;
  const double mscale = 0.1 * log(40.0) + 1.0;
  if (CHECK_OK(read_layers(wrapped, (size_t)w, &p, s, &n)))
    check_dsa_layers(&p, s, n, 61, 64, mscale * mscale / sqrt(192.0));
  tu_params(&p, 16, 0);
  before = p;
  memset(s, 0x5a, sizeof s);
  memcpy(kept, s, sizeof s);
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, len, s, 88, MAX_SPECS, &n),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "spec_size 88") != NULL);
  CHECK(strstr(pkv_last_error(), "0.7") != NULL);
  CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(s, kept, sizeof s) == 0);
  free(wrapped);
  free(json);
}

/* A config the per-layer call refuses with `want`, the message saying `what`; nothing changed. */
static void check_refused(const char *json, pkv_status want, const char *what) {
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  before = p;
  pkv_layer_spec s[4], kept[4];
  memset(s, 0x5a, sizeof s);
  memcpy(kept, s, sizeof s);
  uint32_t n = 0;
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, strlen(json), s, sizeof *s, 4, &n),
               want);
  if (!CHECK(strstr(pkv_last_error(), what) != NULL))
    printf("  message: %s\n  wanted: %s\n", pkv_last_error(), what);
  CHECK(memcmp(&p, &before, sizeof p) == 0 && memcmp(s, kept, sizeof s) == 0);
  /* the length query and the digest, which build no specs, refuse it alike (they used to pass) */
  CHECK_STATUS(pkv_engine_params_from_hf_config_layers(&p, json, strlen(json), NULL, 0, 0, &n),
               want);
  char digest[PKV_HF_CONFIG_DIGEST_BYTES];
  CHECK_STATUS(pkv_hf_config_digest(json, strlen(json), digest, sizeof digest), want);
  CHECK(strstr(pkv_last_error(), what) != NULL);
}

#define MLA4                                                                      \
  "\"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"kv_lora_rank\": 512, " \
  "\"qk_rope_head_dim\": 64, \"qk_nope_head_dim\": 128"
#define INDEXER "\"index_head_dim\": 128, \"index_n_heads\": 64, \"index_topk\": 2048"

static void test_refusals(void) {
  /* some of the three: the first missing one named */
  check_refused("{" MLA4 ", \"index_topk\": 2048}", PKV_ERR_INVALID_ARGUMENT,
                "\"index_topk\" says sparse attention (DeepSeek V3.2, GLM-5), but "
                "\"index_head_dim\" is missing");
  check_refused("{" MLA4 ", \"index_head_dim\": 128, \"index_topk\": 2048}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_n_heads\" is missing");
  check_refused("{" MLA4 ", \"index_head_dim\": 128, \"index_n_heads\": 64, \"index_topk\": null}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_topk\" is missing");
  /* bad values, each named */
  check_refused("{" MLA4 ", \"index_head_dim\": 0, \"index_n_heads\": 64, \"index_topk\": 2048}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_head_dim\" must be a positive integer, got 0");
  check_refused("{" MLA4 ", \"index_head_dim\": \"128\", \"index_n_heads\": 64, \"index_topk\": 1}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_head_dim\" must be a positive integer");
  check_refused("{" MLA4 ", \"index_head_dim\": 2048, \"index_n_heads\": 64, \"index_topk\": 1}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_head_dim\" 2048 exceeds 1024");
  check_refused("{" MLA4 ", \"index_head_dim\": 128, \"index_n_heads\": 65537, \"index_topk\": 1}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_n_heads\" 65537 exceeds 65536");
  check_refused("{" MLA4 ", \"index_head_dim\": 128, \"index_n_heads\": 8, \"index_topk\": -4}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_topk\" must be a positive integer, got -4");
  check_refused("{" MLA4
                ", \"index_head_dim\": 128, \"index_n_heads\": 8, \"index_topk\": 1048577}",
                PKV_ERR_INVALID_ARGUMENT, "\"index_topk\" 1048577 exceeds 1048576");
  /* an indexer needs an MLA latent to sit beside */
  check_refused("{\"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"head_dim\": 64, " INDEXER
                "}",
                PKV_ERR_UNSUPPORTED, "\"index_topk\" without multi-head latent attention");
  /* GLM's IndexShare: a layer that reuses another's top-k keeps no keys */
  check_refused("{" MLA4 ", " INDEXER
                ", \"indexer_types\": [\"full\", \"shared\", \"full\", \"shared\"]}",
                PKV_ERR_UNSUPPORTED, "indexer_types[1] is \"shared\", not \"full\"");
  check_refused("{" MLA4 ", " INDEXER ", \"indexer_types\": \"full\"}", PKV_ERR_INVALID_ARGUMENT,
                "\"indexer_types\" must be an array");
  check_refused("{" MLA4 ", " INDEXER ", \"index_topk_freq\": 4}", PKV_ERR_UNSUPPORTED,
                "\"index_topk_freq\" 4: layers that reuse another layer's top-k");
  /* every layer "full", or a frequency of 1: each layer its own indexer, read as usual */
  static const char full[] =
      "{" MLA4 ", " INDEXER ", \"index_topk_freq\": 1, \"indexer_types\": [\"full\", \"full\","
      " \"full\", \"full\"]}";
  pkv_engine_params p;
  pkv_layer_spec s[MAX_SPECS];
  uint32_t n = 0;
  if (CHECK_OK(read_layers(full, strlen(full), &p, s, &n)))
    check_dsa_layers(&p, s, n, 4, 64, 1.0 / sqrt(192.0));
  /* the flat call refuses the bad fields alike (not as a model it cannot describe) */
  static const char partial[] = "{" MLA4 ", \"index_n_heads\": 64}";
  tu_params(&p, 16, 64);
  CHECK_STATUS(pkv_engine_params_from_hf_config(&p, partial, strlen(partial)),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "\"index_head_dim\" is missing") != NULL);
}

/* transformers 5 writes a config's rope_scaling as rope_parameters: DeepSeek V3's yarn scale is
 * read from either (it used to be read from rope_scaling only: 1/sqrt(192), 1.8x too small). */
static void test_rope_parameters(void) {
  static const char v3[] =
      "{" MLA4 ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 40, \"rope_theta\":"
      " 10000, \"mscale\": 1.0, \"mscale_all_dim\": 1.0}}";
  pkv_engine_params p;
  tu_params(&p, 16, 64);
  const double mscale = 0.1 * log(40.0) + 1.0;
  if (CHECK_OK(pkv_engine_params_from_hf_config(&p, v3, strlen(v3))))
    check_scale(p.softmax_scale, mscale * mscale / sqrt(192.0));
  static const char bad[] = "{" MLA4 ", \"rope_parameters\": {\"factor\": \"40\"}}";
  pkv_engine_params before = p;
  CHECK_STATUS(pkv_engine_params_from_hf_config(&p, bad, strlen(bad)), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "rope_parameters.factor") != NULL);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOOLS_CONFIGS_DIR\n", argv[0]);
    return 2;
  }
  tu_configs_dir = argv[1];
  TU_RUN(test_deepseek_v32);
  TU_RUN(test_glm5);
  TU_RUN(test_text_config_and_old_spec);
  TU_RUN(test_refusals);
  TU_RUN(test_rope_parameters);
  return tu_summary();
}
