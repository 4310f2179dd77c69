/* pkv_engine_params_from_hf_config: Llama-like configs, GQA, head_dim explicit or derived,
 * torch_dtype, a nested text_config, and bad input (NUL bytes, bytes after the value) leaving
 * the params untouched. */
#include "test_util.h"

static const char llama[] =
    "{\n"
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
static void sentinel_params(pkv_engine_params *p)
{
  tu_params(p, 7, 123);
  p->tp_size = 2;
  p->tp_rank = 1;
  p->hash_seed = 99;
  p->dtype = PKV_DTYPE_F32;
}

static pkv_status parse(pkv_engine_params *p, const char *json)
{
  return pkv_engine_params_from_hf_config(p, json, strlen(json));
}

static void test_llama(void)
{
  pkv_engine_params p;
  sentinel_params(&p);
  /* not NUL-terminated: garbage follows the given length */
  char buf[sizeof llama + 8];
  memcpy(buf, llama, sizeof llama - 1);
  memcpy(buf + sizeof llama - 1, "garbage!", 8);
  if (!CHECK_OK(pkv_engine_params_from_hf_config(&p, buf, sizeof llama - 1)))
    return;
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

static void test_explicit_head_dim_and_mha(void)
{
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

static void test_dtype_key(void)
{
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_OK(parse(&p, "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                     "\"num_key_value_heads\": 2, \"hidden_size\": 64, \"dtype\": \"bfloat16\", "
                     "\"max_position_embeddings\": 512}"));
  CHECK_EQ_INT(p.dtype, PKV_DTYPE_BF16);
  CHECK_EQ_INT(p.head_dim, 16);
}

/* A multimodal config: the language model's shape is under text_config. */
static void test_text_config(void)
{
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
static void check_rejected(const char *json, const char *field)
{
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

static void test_malformed(void)
{
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
static void check_rejected_n(const char *json, size_t len, const char *field)
{
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
static void test_nul_and_trailing_bytes(void)
{
  static const char ok[] = "{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64}";
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
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64} x", NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64}{}", NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64},", NULL);
  check_rejected("{\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"hidden_size\": 64} // c", NULL);
  pkv_engine_params p;
  sentinel_params(&p); /* whitespace after the value is fine */
  memcpy(buf, ok, n);
  memcpy(buf + n, " \r\n\t\n", 5);
  if (CHECK_OK(pkv_engine_params_from_hf_config(&p, buf, n + 5)))
    CHECK_EQ_INT(p.num_layers, 2);
}

static void test_missing_or_invalid_fields(void)
{
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

static void test_null_arguments(void)
{
  pkv_engine_params p;
  sentinel_params(&p);
  CHECK_STATUS(pkv_engine_params_from_hf_config(NULL, llama, strlen(llama)),
               PKV_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(pkv_engine_params_from_hf_config(&p, NULL, 10), PKV_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(p.block_size, 7);
}

int main(void)
{
  TU_RUN(test_llama);
  TU_RUN(test_explicit_head_dim_and_mha);
  TU_RUN(test_dtype_key);
  TU_RUN(test_text_config);
  TU_RUN(test_malformed);
  TU_RUN(test_nul_and_trailing_bytes);
  TU_RUN(test_missing_or_invalid_fields);
  TU_RUN(test_null_arguments);
  return tu_summary();
}
