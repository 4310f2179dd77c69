// Loading libpkv at run time: load.go finds the library, load.c opens it, load_gen.c (generated)
// resolves every pkv_* function of pkv.h and defines it to call the library's.
#ifndef PKVGO_LOAD_H
#define PKVGO_LOAD_H

// Why the library is not loaded, returned by pkv_last_error, pkv_engine_last_error and
// pkv_status_string while it is not (every other call returns PKV_ERR_UNSUPPORTED).
extern const char *pkvgo_load_error;

// dlopen(path); NULL with *error set to dlerror()'s text (a static string) when it fails.
void *pkvgo_open(const char *path, const char **error);

// The file the library was loaded from (its link map's name), or "".
const char *pkvgo_path(void *lib);

// Resolves every function of pkv.h in lib: 0, or -1 with *missing the first it lacks (load_gen.c).
int pkvgo_resolve(void *lib, const char **missing);

#endif
