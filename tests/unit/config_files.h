/* The committed configs (tools/configs) for the tests that read them: main() sets
 * tu_configs_dir from its argument. */
#ifndef PKV_TEST_CONFIG_FILES_H
#define PKV_TEST_CONFIG_FILES_H

#include <stdio.h>
#include <stdlib.h>

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

#endif /* PKV_TEST_CONFIG_FILES_H */
