/* The committed configs (tools/configs) for the tests that read them: main() sets
 * tu_configs_dir from its argument. */
#ifndef PKV_TEST_CONFIG_FILES_H
#define PKV_TEST_CONFIG_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const char *tu_configs_dir;

/* The text of tools/configs/NAME (malloc'd, NUL-terminated); NULL and a failed check if absent. */
static inline char *read_config(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", tu_configs_dir, name);
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

/* tools/configs/NAME through the 0.1 call, which would describe it wrong: refused by field,
 * naming the per-layer call, params unchanged. Returns the config's text (the caller frees it)
 * for further checks, NULL when it is absent. */
static inline char *check_flat_call_refuses(const char *name, const char *field, size_t *len) {
  char *json = read_config(name, len);
  if (!json) return NULL;
  pkv_engine_params p, before;
  tu_params(&p, 16, 64);
  before = p;
  CHECK_STATUS(pkv_engine_params_from_hf_config(&p, json, *len), PKV_ERR_UNSUPPORTED);
  CHECK(strstr(pkv_last_error(), field) != NULL);
  CHECK(strstr(pkv_last_error(), "pkv_engine_params_from_hf_config_layers") != NULL);
  CHECK(memcmp(&p, &before, sizeof p) == 0);
  return json;
}

#endif /* PKV_TEST_CONFIG_FILES_H */
