/* pkv_engine_params_from_hf_config: Llama-like configs, GQA, head_dim explicit or derived,
 * torch_dtype, a nested text_config, and bad input (NUL bytes, bytes after the value) leaving
 * the params untouched. pkv_hf_config_layer_windows and the sliding_window the former sets:
 * layer_types, sliding_window_pattern, Gemma 2's alternation, Qwen's use_sliding_window with
 * max_window_layers, Mistral's one window, a null window, text_config, short buffers. */
#include <math.h>

#include "test_util.h"

static const char llama[] = "{\n"
                            "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                            "  \"attention_bias\": false,\n"
                            "  \"bos_token_id\": 128000,\n"
                            "  \"hidden_act\": \"silu\",\n"
                            "  \"hidden_size\": 4096,\n"
                            "  \"intermediate_size\": 14336,\n"
                            "  \"max_position_embeddings\": 8192,\n"
                            "  \"model_type\": \"llama\",\n"
                            "  \"num_attention_heads\": 32,\n"
                            "  \"num_hidden_layers\": 32,\n"
                            "  \"num_key_value_heads\": 8,\n"
                            "  \"rms_norm_eps\": 1e-05,\n"
                            "  \"rope_scaling\": null,\n"
                            "  \"rope_theta\": 500000.0,\n"
                            "  \"tie_word_embeddings\": false,\n"
                            "  \"torch_dtype\": \"bfloat16\",\n"
                            "  \"vocab_size\": 128256\n"
                            "}\n";

/* Params with sentinels in every field the config must not touch. */
static void sentinel_params(pkv_engine_params *p) {
  tu_params(p, 7, 123);
  p->tp_size = 2;
  p->tp_rank = 1;
  p->hash_seed = 99;
  p->dtype = PKV_DTYPE_F32;
}

static pkv_status parse(pkv_engine_params *p, const char *json) {
  return pkv_engine_params_from_hf_config(p, json, strlen(json));
}

static void test_llama(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  /* not NUL-terminated: garbage follows the given length */
  char buf[sizeof llama + 8];
  memcpy(buf, llama, sizeof llama - 1);
  memcpy(buf + sizeof llama - 1, "garbage!", 8);
  if (!CHECK_OK(pkv_engine_params_from_hf_config(&p, buf, sizeof llama - 1))) return;
  CHECK_EQ_INT(p.num_layers, 32);
  CHECK_EQ_INT(p.num_q_heads, 32);
  CHECK_EQ_INT(p.num_kv_heads, 8);
  CHECK_EQ_INT(p.head_dim, 128); /* 4096 / 32 */
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  CHECK_EQ_INT(p.max_model_len, 8192);
  CHECK_EQ_INT(p.block_size, 7);
  CHECK_EQ_INT(p.num_blocks, 123);
  CHECK_EQ_INT(p.tp_size, 2);
  CHECK_EQ_INT(p.tp_rank, 1);
  CHECK_EQ_INT(p.hash_seed, 99);
  CHECK_EQ_INT(p.device, PKV_DEVICE_CPU);
  CHECK_EQ_INT(p.struct_size, sizeof p);
}

static void test_explicit_head_dim_and_mha(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_OK(parse(&p, "{\"num_hidden_layers\": 26, \"num_attention_heads\": 8, "
                     "\"num_key_value_heads\": 4, \"hidden_size\": 2304, \"head_dim\": 256, "
                     "\"torch_dtype\": \"float32\", \"max_position_embeddings\": 8192}"));
  CHECK_EQ_INT(p.head_dim, 256); /* not 2304 / 8 = 288 */
  CHECK_EQ_INT(p.num_layers, 26);
  CHECK_EQ_INT(p.num_kv_heads, 4);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_F32);

  /* no num_key_value_heads: multi-head attention */
  CHECK_OK(parse(&p, "{\"num_hidden_layers\": 12, \"num_attention_heads\": 12, "
                     "\"hidden_size\": 768, \"torch_dtype\": \"float16\", "
                     "\"max_position_embeddings\": 1024}"));
  CHECK_EQ_INT(p.num_q_heads, 12);
  CHECK_EQ_INT(p.num_kv_heads, 12);
  CHECK_EQ_INT(p.head_dim, 64);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_F16);
  CHECK_EQ_INT(p.max_model_len, 1024);
}

static void test_dtype_key(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_OK(parse(&p, "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                     "\"num_key_value_heads\": 2, \"hidden_size\": 64, \"dtype\": \"bfloat16\", "
                     "\"max_position_embeddings\": 512}"));
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  CHECK_EQ_INT(p.head_dim, 16);
}

/* A multimodal config: the language model's shape is under text_config. */
static void test_text_config(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_OK(parse(&p, "{\"model_type\": \"llava\", \"vision_config\": {\"num_hidden_layers\": 24,"
                     " \"num_attention_heads\": 16, \"hidden_size\": 1024},"
                     " \"torch_dtype\": \"float16\","
                     " \"text_config\": {\"num_hidden_layers\": 40, \"num_attention_heads\": 40,"
                     " \"num_key_value_heads\": 8, \"hidden_size\": 5120,"
                     " \"max_position_embeddings\": 131072, \"torch_dtype\": \"bfloat16\"}}"));
  CHECK_EQ_INT(p.num_layers, 40);
  CHECK_EQ_INT(p.num_q_heads, 40);
  CHECK_EQ_INT(p.num_kv_heads, 8);
  CHECK_EQ_INT(p.head_dim, 128);
  CHECK_EQ_INT(p.max_model_len, 131072);
}

/* Fails with INVALID_ARGUMENT, a message (naming field when given), and p untouched. */
static void check_rejected(const char *json, const char *field) {
  pkv_engine_params p, before;
  sentinel_params(&p);
  p.num_layers = 3;
  before = p;
  if (!CHECK_STATUS(parse(&p, json), PKV_ERR_INVALID_ARGUMENT))
    fprintf(stderr, "  accepted: %s\n", json);
  if (field && !CHECK(strstr(pkv_last_error(), field) != NULL))
    fprintf(stderr, "  message \"%s\" does not name %s\n", pkv_last_error(), field);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
}

static void test_malformed(void) {
  check_rejected("", NULL);
  check_rejected("{", NULL);
  check_rejected("not json at all", NULL);
  check_rejected("{\"num_hidden_layers\": 32,}", NULL);
  check_rejected("[1, 2, 3]", NULL);
  char truncated[sizeof llama];
  memcpy(truncated, llama, sizeof llama);
  truncated[200] = '\0';
  check_rejected(truncated, NULL);
}

/* check_rejected over len bytes that may hold NULs. */
static void check_rejected_n(const char *json, size_t len, const char *field) {
  pkv_engine_params p, before;
  sentinel_params(&p);
  before = p;
  if (!CHECK_STATUS(pkv_engine_params_from_hf_config(&p, json, len), PKV_ERR_INVALID_ARGUMENT))
    fprintf(stderr, "  accepted %zu bytes: %s\n", len, json);
  if (field && !CHECK(strstr(pkv_last_error(), field) != NULL))
    fprintf(stderr, "  message \"%s\" does not name %s\n", pkv_last_error(), field);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
}

/* A NUL byte anywhere, or anything but whitespace after the value, is malformed. nlohmann
 * stopped at a NUL as at the end: "{...}\0garbage" was accepted. */
static void test_nul_and_trailing_bytes(void) {
  static const char ok[] =
      "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64}";
  const size_t n = sizeof ok - 1;
  char buf[sizeof ok + 16];
  memcpy(buf, ok, n);
  memcpy(buf + n, "\0garbage", 8);
  check_rejected_n(buf, n + 1, "NUL byte at offset 69"); /* a NUL after the value */
  check_rejected_n(buf, n + 8, "NUL byte");              /* and bytes after it */
  buf[0] = '\0';
  check_rejected_n(buf, n, "NUL byte at offset 0");
  memcpy(buf, ok, n);
  buf[22] = '\0'; /* inside a number */
  check_rejected_n(buf, n, "NUL byte at offset 22");
  static const char in_string[] = "{\"torch_dtype\": \"bf\0\", \"num_hidden_layers\": 2}";
  check_rejected_n(in_string, sizeof in_string - 1, "NUL byte at offset 19");
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64} x",
                 NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64}{}",
                 NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64},",
                 NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64} // c",
                 NULL);
  pkv_engine_params p;
  sentinel_params(&p); /* whitespace after the value is fine */
  memcpy(buf, ok, n);
  memcpy(buf + n, " \r\n\t\n", 5);
  if (CHECK_OK(pkv_engine_params_from_hf_config(&p, buf, n + 5))) CHECK_EQ_INT(p.num_layers, 2);
}

static void test_missing_or_invalid_fields(void) {
  check_rejected("{\"num_attention_heads\": 32, \"hidden_size\": 4096, "
                 "\"torch_dtype\": \"bfloat16\", \"max_position_embeddings\": 8192}",
                 "num_hidden_layers");
  check_rejected("{\"num_hidden_layers\": 32, \"hidden_size\": 4096, "
                 "\"torch_dtype\": \"bfloat16\", \"max_position_embeddings\": 8192}",
                 "num_attention_heads");
  check_rejected("{\"num_hidden_layers\": 32, \"num_attention_heads\": 32, "
                 "\"torch_dtype\": \"bfloat16\", \"max_position_embeddings\": 8192}",
                 "hidden_size");
  check_rejected("{\"num_hidden_layers\": \"32\", \"num_attention_heads\": 32, "
                 "\"hidden_size\": 4096, \"torch_dtype\": \"bfloat16\", "
                 "\"max_position_embeddings\": 8192}",
                 "num_hidden_layers");
  check_rejected("{\"num_hidden_layers\": -2, \"num_attention_heads\": 32, "
                 "\"hidden_size\": 4096, \"torch_dtype\": \"bfloat16\", "
                 "\"max_position_embeddings\": 8192}",
                 "num_hidden_layers");
  check_rejected("{\"num_hidden_layers\": 32, \"num_attention_heads\": 0, "
                 "\"hidden_size\": 4096, \"torch_dtype\": \"bfloat16\", "
                 "\"max_position_embeddings\": 8192}",
                 "num_attention_heads");
  check_rejected("{\"model_type\": \"llava\", \"text_config\": {\"num_attention_heads\": 8}}",
                 "num_hidden_layers");
}

static void test_null_arguments(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_STATUS(pkv_engine_params_from_hf_config(NULL, llama, strlen(llama)),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config(&p, NULL, 10), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(p.block_size, 7);
}

/* ---------------------------------------------------------------- windows */

#define MAX_LAYERS 128

/* The windows of json (checked OK); returns how many layers. */
static uint32_t windows_of(const char *json, uint32_t *w) {
  uint32_t n = 0;
  for (uint32_t l = 0; l < MAX_LAYERS; l++) w[l] = 0xdeadbeef;
  if (!CHECK_OK(pkv_hf_config_layer_windows(json, strlen(json), w, MAX_LAYERS, &n))) return 0;
  CHECK(n <= MAX_LAYERS);
  if (n < MAX_LAYERS) CHECK_EQ_INT(w[n], 0xdeadbeef); /* nothing past the layers */
  return n;
}

/* The sliding_window pkv_engine_params_from_hf_config sets for json (from a sentinel). */
static uint32_t sliding_window_of(const char *json) {
  pkv_engine_params p;
  sentinel_params(&p);
  p.sliding_window = 77;
  if (!CHECK_OK(parse(&p, json))) return 0xdeadbeef;
  CHECK(p.layer_windows == NULL); /* never set by the config reader */
  return p.sliding_window;
}

#define SHAPE "\"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"head_dim\": 64"

/* layer_types (gpt-oss, newer Gemma and Qwen configs): each layer's kind with sliding_window. */
static void test_layer_types(void) {
  uint32_t w[MAX_LAYERS];
  char json[2048];
  int at = snprintf(json, sizeof json,
                    "{\"num_hidden_layers\": 24, " SHAPE
                    ", \"sliding_window\": 128, \"model_type\": \"gpt_oss\", \"layer_types\": [");
  for (int l = 0; l < 24; l++)
    at += snprintf(json + at, sizeof json - at, "%s\"%s\"", l ? ", " : "",
                   l % 2 ? "full_attention" : "sliding_attention");
  snprintf(json + at, sizeof json - at, "]}");
  if (!CHECK_EQ_INT(windows_of(json, w), 24)) return;
  for (uint32_t l = 0; l < 24; l++) CHECK_EQ_INT(w[l], l % 2 ? 0 : 128);
  /* gpt-oss has sinks: the flat fields would describe it wrong (issue 27), so the 0.1 call
   * refuses it by name and points to the per-layer call */
  pkv_engine_params p;
  sentinel_params(&p);
  pkv_engine_params before = p;
  CHECK_STATUS(parse(&p, json), PKV_ERR_UNSUPPORTED);
  CHECK(strstr(pkv_last_error(), "gpt_oss") != NULL);
  CHECK(strstr(pkv_last_error(), "pkv_engine_params_from_hf_config_layers") != NULL);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
  memcpy(strstr(json, "gpt_oss"), "qwen_3", 6); /* the same layers without sinks */
  CHECK_EQ_INT(sliding_window_of(json), 0);     /* mixed: the layers' windows are layer_windows' */

  /* layer_types wins over every other rule, and all-sliding is one window for all */
  static const char all_sliding[] =
      "{\"num_hidden_layers\": 3, " SHAPE
      ", \"sliding_window\": 512, \"sliding_window_pattern\": 2,"
      " \"model_type\": \"gemma2\", \"layer_types\": [\"sliding_attention\", \"sliding_attention\","
      " \"sliding_attention\"]}";
  if (CHECK_EQ_INT(windows_of(all_sliding, w), 3)) CHECK(w[0] == 512 && w[1] == 512 && w[2] == 512);
  CHECK_EQ_INT(sliding_window_of(all_sliding), 512);

  /* no window (Qwen3 with use_sliding_window false writes null): every layer full, whatever
   * layer_types says - transformers attends fully when sliding_window is None */
  static const char null_window[] =
      "{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": null,"
      " \"layer_types\": [\"sliding_attention\", \"full_attention\"]}";
  if (CHECK_EQ_INT(windows_of(null_window, w), 2)) CHECK(w[0] == 0 && w[1] == 0);
  CHECK_EQ_INT(sliding_window_of(null_window), 0);
}

/* Both calls refuse json with INVALID_ARGUMENT naming what, changing nothing. */
static void check_windows_rejected(const char *json, const char *what) {
  uint32_t w[4] = {7, 7, 7, 7}, n = 99;
  if (!CHECK_STATUS(pkv_hf_config_layer_windows(json, strlen(json), w, 4, &n),
                    PKV_ERR_INVALID_ARGUMENT))
    fprintf(stderr, "  accepted: %s\n", json);
  if (!CHECK(strstr(pkv_last_error(), what) != NULL))
    fprintf(stderr, "  message \"%s\" does not say %s\n", pkv_last_error(), what);
  CHECK(w[0] == 7 && w[1] == 7 && w[2] == 7 && w[3] == 7);
  CHECK_EQ_INT(n, 99);
  check_rejected(json, what);
}

static void test_bad_window_fields(void) {
  check_windows_rejected(
      "{\"num_hidden_layers\": 4, " SHAPE ", \"sliding_window\": 64, \"layer_types\": "
      "[\"sliding_attention\", \"full_attention\", \"chunked_attention\", \"full_attention\"]}",
      "layer_types[2] must be \"sliding_attention\" or \"full_attention\", not \"chunked_attention\"");
  check_windows_rejected("{\"num_hidden_layers\": 4, " SHAPE
                         ", \"sliding_window\": 64, \"layer_types\": "
                         "[\"sliding_attention\", 1, \"full_attention\", \"full_attention\"]}",
                         "layer_types[1]");
  check_windows_rejected("{\"num_hidden_layers\": 4, " SHAPE
                         ", \"sliding_window\": 64, \"layer_types\": "
                         "[\"sliding_attention\", null, \"full_attention\", \"full_attention\"]}",
                         "layer_types[1]");
  check_windows_rejected("{\"num_hidden_layers\": 4, " SHAPE
                         ", \"sliding_window\": 64, \"layer_types\": "
                         "[\"sliding_attention\", \"full_attention\", \"sliding_attention\"]}",
                         "array of num_hidden_layers (4) strings, got array of 3");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE
                         ", \"sliding_window\": 64, \"layer_types\": "
                         "[\"sliding_attention\", \"full_attention\", \"full_attention\"]}",
                         "array of num_hidden_layers (2) strings, got array of 3");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 64, "
                         "\"layer_types\": \"sliding_attention\"}",
                         "got string");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": \"64\"}",
                         "sliding_window");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": -64}",
                         "sliding_window");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 64.5}",
                         "sliding_window");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 2147483648}",
                         "sliding_window");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 64, "
                         "\"sliding_window_pattern\": 0}",
                         "sliding_window_pattern");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 64, "
                         "\"use_sliding_window\": \"yes\"}",
                         "use_sliding_window");
  check_windows_rejected("{\"num_hidden_layers\": 2, " SHAPE ", \"sliding_window\": 64, "
                         "\"use_sliding_window\": true, \"max_window_layers\": -1}",
                         "max_window_layers");
}

/* Gemma 3: every sliding_window_pattern-th layer full, the rest windowed; 62 layers of a 5:1
 * pattern under text_config (the multimodal config), as tools/configs/gemma-3-27b.json. */
static void test_sliding_window_pattern(void) {
  static const char gemma3[] =
      "{\"model_type\": \"gemma3\", \"torch_dtype\": \"bfloat16\", \"vision_config\": "
      "{\"num_hidden_layers\": 27, \"num_attention_heads\": 16, \"hidden_size\": 1152},"
      " \"text_config\": {\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 62,"
      " \"num_attention_heads\": 32, \"num_key_value_heads\": 16, \"head_dim\": 128,"
      " \"hidden_size\": 5376, \"max_position_embeddings\": 131072, \"sliding_window\": 1024,"
      " \"sliding_window_pattern\": 6}}";
  uint32_t w[MAX_LAYERS];
  if (CHECK_EQ_INT(windows_of(gemma3, w), 62)) {
    uint32_t full = 0;
    for (uint32_t l = 0; l < 62; l++) {
      CHECK_EQ_INT(w[l], (l + 1) % 6 ? 1024 : 0);
      full += w[l] == 0;
    }
    CHECK_EQ_INT(full, 10); /* layers 5, 11, ..., 59 */
  }
  pkv_engine_params p;
  sentinel_params(&p);
  if (CHECK_OK(parse(&p, gemma3))) {
    CHECK_EQ_INT(p.num_layers, 62);
    CHECK_EQ_INT(p.num_kv_heads, 16);
    CHECK_EQ_INT(p.max_model_len, 131072);
    CHECK_EQ_INT(p.sliding_window, 0);
  }
  /* a gemma3 config without the pattern: transformers' default, 6 */
  static const char gemma3_default[] =
      "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 12, " SHAPE
      ", \"sliding_window\": 512}";
  if (CHECK_EQ_INT(windows_of(gemma3_default, w), 12))
    for (uint32_t l = 0; l < 12; l++) CHECK_EQ_INT(w[l], l == 5 || l == 11 ? 0 : 512);
  /* pattern 1: every layer full; a pattern longer than the model: every layer windowed */
  static const char every[] = "{\"num_hidden_layers\": 4, " SHAPE ", \"sliding_window\": 64, "
                              "\"sliding_window_pattern\": 1}";
  static const char none[] = "{\"num_hidden_layers\": 4, " SHAPE ", \"sliding_window\": 64, "
                             "\"sliding_window_pattern\": 5}";
  if (CHECK_EQ_INT(windows_of(every, w), 4))
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 0);
  CHECK_EQ_INT(sliding_window_of(every), 0);
  if (CHECK_EQ_INT(windows_of(none, w), 4))
    CHECK(w[0] == 64 && w[1] == 64 && w[2] == 64 && w[3] == 64);
  CHECK_EQ_INT(sliding_window_of(none), 64);
}

/* Gemma 2: windowed and full layers alternate, the first windowed (by model_type). */
static void test_gemma2(void) {
  static const char gemma2[] =
      "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 42, \"num_attention_heads\": 16,"
      " \"num_key_value_heads\": 8, \"head_dim\": 256, \"hidden_size\": 3584,"
      " \"sliding_window\": 4096, \"cache_implementation\": \"hybrid\"}";
  uint32_t w[MAX_LAYERS];
  if (CHECK_EQ_INT(windows_of(gemma2, w), 42))
    for (uint32_t l = 0; l < 42; l++) CHECK_EQ_INT(w[l], l % 2 ? 0 : 4096);
  CHECK_EQ_INT(sliding_window_of(gemma2), 0);
  /* one layer: windowed, hence one window for all */
  static const char one[] =
      "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 1, " SHAPE ", \"sliding_window\": 4096}";
  CHECK_EQ_INT(sliding_window_of(one), 4096);
}

/* Qwen2: windows only with use_sliding_window, on the layers from max_window_layers on. */
static void test_use_sliding_window(void) {
  uint32_t w[MAX_LAYERS];
  static const char on[] =
      "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 36, " SHAPE
      ", \"sliding_window\": 32768, \"use_sliding_window\": true, \"max_window_layers\": 28}";
  if (CHECK_EQ_INT(windows_of(on, w), 36))
    for (uint32_t l = 0; l < 36; l++) CHECK_EQ_INT(w[l], l >= 28 ? 32768 : 0);
  CHECK_EQ_INT(sliding_window_of(on), 0);
  /* max_window_layers absent: transformers' default for these models, 28 */
  static const char absent[] = "{\"num_hidden_layers\": 30, " SHAPE
                               ", \"sliding_window\": 4096, \"use_sliding_window\": true}";
  if (CHECK_EQ_INT(windows_of(absent, w), 30))
    for (uint32_t l = 0; l < 30; l++) CHECK_EQ_INT(w[l], l >= 28 ? 4096 : 0);
  /* 0: every layer windowed (one window for all); past the layers: none */
  static const char zero[] =
      "{\"num_hidden_layers\": 8, " SHAPE
      ", \"sliding_window\": 4096, \"use_sliding_window\": true, \"max_window_layers\": 0}";
  static const char past[] =
      "{\"num_hidden_layers\": 8, " SHAPE
      ", \"sliding_window\": 4096, \"use_sliding_window\": true, \"max_window_layers\": 8}";
  CHECK_EQ_INT(sliding_window_of(zero), 4096);
  if (CHECK_EQ_INT(windows_of(past, w), 8))
    for (uint32_t l = 0; l < 8; l++) CHECK_EQ_INT(w[l], 0);
  CHECK_EQ_INT(sliding_window_of(past), 0);
  /* use_sliding_window false (Qwen2.5's configs, window 131072): no window anywhere */
  static const char off[] =
      "{\"model_type\": \"qwen2\", \"num_hidden_layers\": 28, " SHAPE
      ", \"sliding_window\": 131072, \"use_sliding_window\": false, \"max_window_layers\": 28}";
  if (CHECK_EQ_INT(windows_of(off, w), 28))
    for (uint32_t l = 0; l < 28; l++) CHECK_EQ_INT(w[l], 0);
  CHECK_EQ_INT(sliding_window_of(off), 0);
}

/* Mistral: one window for every layer; null or absent: none. */
static void test_mistral_and_none(void) {
  uint32_t w[MAX_LAYERS];
  static const char mistral[] =
      "{\"model_type\": \"mistral\", \"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
      " \"num_key_value_heads\": 8, \"hidden_size\": 4096, \"max_position_embeddings\": 32768,"
      " \"sliding_window\": 4096, \"torch_dtype\": \"bfloat16\"}";
  if (CHECK_EQ_INT(windows_of(mistral, w), 32))
    for (uint32_t l = 0; l < 32; l++) CHECK_EQ_INT(w[l], 4096);
  CHECK_EQ_INT(sliding_window_of(mistral), 4096);
  static const char null_window[] = "{\"model_type\": \"mistral\", \"num_hidden_layers\": 4, " SHAPE
                                    ", \"sliding_window\": null}";
  if (CHECK_EQ_INT(windows_of(null_window, w), 4))
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0 && w[3] == 0);
  CHECK_EQ_INT(sliding_window_of(null_window), 0);
  /* no sliding_window at all (Llama): the sentinel 77 becomes 0 */
  CHECK_EQ_INT(sliding_window_of(llama), 0);
  if (CHECK_EQ_INT(windows_of(llama, w), 32)) CHECK(w[0] == 0 && w[31] == 0);
  /* a window under text_config */
  static const char nested[] =
      "{\"model_type\": \"llava\", \"text_config\": {\"num_hidden_layers\": 3, " SHAPE
      ", \"sliding_window\": 256}}";
  if (CHECK_EQ_INT(windows_of(nested, w), 3)) CHECK(w[0] == 256 && w[1] == 256 && w[2] == 256);
  CHECK_EQ_INT(sliding_window_of(nested), 256);
}

/* The buffer: its length asked with NULL/0, a short one refused with the length needed. */
static void test_layer_windows_buffer(void) {
  static const char gemma2[] =
      "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 6, " SHAPE ", \"sliding_window\": 64}";
  const size_t len = strlen(gemma2);
  uint32_t n = 0, w[8] = {9, 9, 9, 9, 9, 9, 9, 9};
  CHECK_OK(pkv_hf_config_layer_windows(gemma2, len, NULL, 0, &n));
  CHECK_EQ_INT(n, 6);
  n = 0;
  CHECK_STATUS(pkv_hf_config_layer_windows(gemma2, len, w, 5, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(n, 6); /* the length it needs */
  CHECK(strstr(pkv_last_error(), "6 layers, the buffer holds 5") != NULL);
  CHECK(w[0] == 9 && w[4] == 9); /* untouched */
  n = 0;
  CHECK_OK(pkv_hf_config_layer_windows(gemma2, len, w, 6, &n));
  CHECK(n == 6 && w[0] == 64 && w[1] == 0 && w[5] == 0 && w[6] == 9);
  CHECK_STATUS(pkv_hf_config_layer_windows(NULL, 10, w, 8, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_hf_config_layer_windows(gemma2, len, w, 8, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_hf_config_layer_windows(gemma2, len, NULL, 8, &n), PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_hf_config_layer_windows("{\"num_hidden_layers\": 2", 22, w, 8, &n),
               PKV_ERR_INVALID_ARGUMENT);
  /* the length only: a shape of 2^31-1 layers costs nothing to describe (the reader keeps the
   * rule, not 2^31 entries; it used to take 8 GiB here and in from_hf_config) */
  static const char huge[] =
      "{\"model_type\": \"gemma2\", \"num_hidden_layers\": 2147483647, " SHAPE
      ", \"sliding_window\": 64}";
  n = 0;
  CHECK_OK(pkv_hf_config_layer_windows(huge, strlen(huge), NULL, 0, &n));
  CHECK_EQ_INT(n, 2147483647u);
  CHECK_EQ_INT(sliding_window_of(huge), 0);
  static const char huge_one[] =
      "{\"num_hidden_layers\": 2147483647, " SHAPE ", \"sliding_window\": 64}";
  CHECK_EQ_INT(sliding_window_of(huge_one), 64);
}

/* Multi-head latent attention configs (DeepSeek V2/V3, Kimi K2; their text_config forms): the
 * latent layout; incomplete MLA fields, attention kinds pkv cannot hold (named), an old caller. */
static const char deepseek_v3[] =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"hidden_size\": 7168,"
    " \"num_hidden_layers\": 61, \"num_attention_heads\": 128, \"num_key_value_heads\": 128,"
    " \"q_lora_rank\": 1536, \"kv_lora_rank\": 512, \"qk_nope_head_dim\": 128, \"qk_rope_head_dim\": 64,"
    " \"v_head_dim\": 128, \"max_position_embeddings\": 163840, \"torch_dtype\": \"bfloat16\"}";

static void test_mla(void) {
  pkv_engine_params p;
  sentinel_params(&p);
  if (!CHECK_OK(parse(&p, deepseek_v3))) return;
  CHECK_EQ_INT(p.kv_layout, PKV_KV_LAYOUT_MLA);
  CHECK_EQ_INT(p.kv_lora_rank, 512);
  CHECK_EQ_INT(p.qk_rope_head_dim, 64);
  CHECK_EQ_INT(p.num_layers, 61);
  CHECK_EQ_INT(p.num_q_heads, 128);
  CHECK_EQ_INT(p.num_kv_heads, 1);
  CHECK_EQ_INT(p.head_dim, 576);
  CHECK_EQ_INT(p.max_model_len, 163840);
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  CHECK_EQ_INT(p.tp_size, 2); /* untouched */
  CHECK_EQ_INT(p.block_size, 7);
  /* MLA's scale: 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), not 1/sqrt(head_dim) of the latent. */
  CHECK(fabs(p.softmax_scale - 1.0 / sqrt(192.0)) < 1e-7);
  /* Under DeepSeek V3's yarn rope_scaling: times mscale^2, mscale = 0.1 * ln(40) + 1. */
  char scaled[1024];
  snprintf(scaled, sizeof scaled,
           "%.*s, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40, "
           "\"mscale\": 1.0, \"mscale_all_dim\": 1.0}}",
           (int)strlen(deepseek_v3) - 1, deepseek_v3);
  CHECK_OK(parse(&p, scaled));
  const double mscale = 0.1 * log(40.0) + 1.0;
  CHECK(fabs(p.softmax_scale - mscale * mscale / sqrt(192.0)) < 1e-6); /* 0.13524 */
  snprintf(scaled, sizeof scaled, "%.*s, \"rope_scaling\": {\"factor\": \"40\"}}",
           (int)strlen(deepseek_v3) - 1, deepseek_v3);
  pkv_engine_params kept = p;
  CHECK_STATUS(parse(&p, scaled), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "rope_scaling.factor") != NULL &&
        memcmp(&p, &kept, sizeof p) == 0);
  /* A Llama config read next resets the layout. */
  CHECK_OK(parse(&p, llama));
  CHECK_EQ_INT(p.kv_layout, PKV_KV_LAYOUT_HEADS);
  CHECK_EQ_INT(p.kv_lora_rank, 0);
  CHECK_EQ_INT(p.num_kv_heads, 8);

  /* Under text_config (a multimodal wrapper). */
  char wrapped[1024];
  snprintf(wrapped, sizeof wrapped, "{\"model_type\": \"kimi_vl\", \"text_config\": %s}",
           deepseek_v3);
  sentinel_params(&p);
  CHECK_OK(parse(&p, wrapped));
  CHECK_EQ_INT(p.kv_layout, PKV_KV_LAYOUT_MLA);
  CHECK_EQ_INT(p.head_dim, 576);

  /* Incomplete or bad MLA fields, and attention pkv cannot hold: refused by name, p unchanged. */
  const struct {
    const char *json, *named;
    pkv_status status;
  } bad[] = {
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"qk_rope_head_dim\": 64}",
       "kv_lora_rank", PKV_ERR_INVALID_ARGUMENT},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_lora_rank\": 512}",
       "qk_rope_head_dim", PKV_ERR_INVALID_ARGUMENT},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_lora_rank\": -1, \"qk_rope_head_dim\": 64}",
       "kv_lora_rank", PKV_ERR_INVALID_ARGUMENT},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_lora_rank\": 1000, \"qk_rope_head_dim\": 64}",
       "1024", PKV_ERR_INVALID_ARGUMENT},
      /* DeepSeek V3.2's indexer: the flat fields cannot hold it (test_hf_config_dsa), and a
       * part of it is named as missing */
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64,"
       " \"index_topk\": 2048, \"index_n_heads\": 64, \"index_head_dim\": 128}",
       "pkv_engine_params_from_hf_config_layers", PKV_ERR_UNSUPPORTED},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64,"
       " \"index_topk\": 2048, \"index_n_heads\": 64}",
       "\"index_head_dim\" is missing", PKV_ERR_INVALID_ARGUMENT},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"linear_num_key_heads\": 16}",
       "linear_num_key_heads", PKV_ERR_UNSUPPORTED},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"head_dim\": 64,"
       " \"attention_chunk_size\": 8192}",
       "attention_chunk_size", PKV_ERR_UNSUPPORTED},
      {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"mamba_d_state\": 16}",
       "mamba_d_state", PKV_ERR_UNSUPPORTED},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    sentinel_params(&p);
    pkv_engine_params before = p;
    CHECK_STATUS(parse(&p, bad[i].json), bad[i].status);
    CHECK(strstr(pkv_last_error(), bad[i].named) != NULL);
    CHECK(memcmp(&p, &before, sizeof p) == 0);
  }

  /* A caller built against 0.2's header (its struct ends before kv_layout): an MLA config is
   * refused rather than read back as heads; a Llama config still works. */
  sentinel_params(&p);
  p.struct_size = (uint32_t)offsetof(pkv_engine_params, kv_layout);
  CHECK_STATUS(parse(&p, deepseek_v3), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "kv_layout") != NULL);
  CHECK_OK(parse(&p, llama));
}

int main(void) {
  TU_RUN(test_llama);
  TU_RUN(test_explicit_head_dim_and_mha);
  TU_RUN(test_dtype_key);
  TU_RUN(test_text_config);
  TU_RUN(test_malformed);
  TU_RUN(test_nul_and_trailing_bytes);
  TU_RUN(test_missing_or_invalid_fields);
  TU_RUN(test_null_arguments);
  TU_RUN(test_layer_types);
  TU_RUN(test_bad_window_fields);
  TU_RUN(test_sliding_window_pattern);
  TU_RUN(test_gemma2);
  TU_RUN(test_use_sliding_window);
  TU_RUN(test_mistral_and_none);
  TU_RUN(test_layer_windows_buffer);
  TU_RUN(test_mla);
  return tu_summary();
}
