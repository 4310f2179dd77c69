// Opening libpkv at run time (see load.h).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

#include "load.h"

const char *pkvgo_load_error = "libpkv is not loaded yet";

void *pkvgo_open(const char *path, const char **error) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) *error = dlerror();
  return lib;
}

const char *pkvgo_path(void *lib) {
  struct link_map *map = NULL;
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name) return "";
  return map->l_name;
}
