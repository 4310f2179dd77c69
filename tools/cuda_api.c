/*
 * cuda_api.c - the table of cuda_api.h: one list of (CUDA symbol, slot), filled by dlsym from the
 * libraries dlopen found, or by a test's resolver.
 */
#include "cuda_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef struct api_symbol {
  const char *name;
  size_t offset; /* of its slot in cuda_api */
  int lib;       /* 0: cudart, 1: cublas */
} api_symbol;

#define API_SYMBOL(name, field, lib) \
  { name, offsetof(cuda_api, field), lib }

static const api_symbol symbols[] = {
    API_SYMBOL("cudaGetDeviceCount", get_device_count, 0),
    API_SYMBOL("cudaSetDevice", set_device, 0),
    API_SYMBOL("cudaMalloc", device_malloc, 0),
    API_SYMBOL("cudaFree", device_free, 0),
    API_SYMBOL("cudaHostAlloc", host_alloc, 0),
    API_SYMBOL("cudaFreeHost", free_host, 0),
    API_SYMBOL("cudaHostGetDevicePointer", host_get_device_pointer, 0),
    API_SYMBOL("cudaMemcpy", copy, 0),
    API_SYMBOL("cudaStreamCreateWithFlags", stream_create_with_flags, 0),
    API_SYMBOL("cudaStreamDestroy", stream_destroy, 0),
    API_SYMBOL("cudaStreamSynchronize", stream_synchronize, 0),
    API_SYMBOL("cudaGetErrorString", get_error_string, 0),
    /* cublas_v2.h's names are macros for these */
    API_SYMBOL("cublasCreate_v2", blas_create, 1),
    API_SYMBOL("cublasDestroy_v2", blas_destroy, 1),
    API_SYMBOL("cublasSetStream_v2", blas_set_stream, 1),
    API_SYMBOL("cublasSetMathMode", blas_set_math_mode, 1),
    API_SYMBOL("cublasSgemm_v2", blas_sgemm, 1),
};

enum { NUM_SYMBOLS = sizeof symbols / sizeof symbols[0] };

int cuda_api_resolve(cuda_api *api, void *(*resolve)(void *ctx, const char *name), void *ctx,
                     char *error, size_t cap) {
  memset(api, 0, sizeof *api);
  for (size_t i = 0; i < NUM_SYMBOLS; i++) {
    void *f = resolve(ctx, symbols[i].name);
    if (!f) {
      snprintf(error, cap, "%s not found", symbols[i].name);
      memset(api, 0, sizeof *api);
      return -1;
    }
    /* a function pointer's bytes from dlsym's void *, as POSIX requires dlsym to allow */
    memcpy((char *)api + symbols[i].offset, &f, sizeof f);
  }
  return 0;
}

/* dlopen of the first of names that loads; NULL with the tried names and the last dlerror.
 * RTLD_NODELETE: the libraries stay mapped after dlclose, since they allocate at load what they
 * free only at exit (each one's static libstdc++ pool): unmapped, LeakSanitizer reports it. */
static void *open_first(const char *const *names, size_t n, char *error, size_t cap) {
  const char *why = "";
  for (size_t i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (h) return h;
    const char *e = dlerror();
    why = e ? e : "";
  }
  snprintf(error, cap, "cannot load %s (nor %s): %s", names[0], names[n - 1], why);
  return NULL;
}

typedef struct loaded {
  void *libs[2];
  const char *missing_lib; /* set by lookup: the library a symbol was missing from */
} loaded;

static void *lookup(void *ctx, const char *name) {
  loaded *l = ctx;
  const int lib = strncmp(name, "cublas", 6) == 0;
  void *f = dlsym(l->libs[lib], name);
  if (!f) l->missing_lib = lib ? "libcublas" : "libcudart";
  return f;
}

int cuda_api_load(cuda_api *api, char *error, size_t cap) {
  static const char *const cudart[] = {"libcudart.so.13", "libcudart.so"};
  static const char *const cublas[] = {"libcublas.so.13", "libcublas.so"};
  memset(api, 0, sizeof *api);
  loaded l = {{NULL, NULL}, NULL};
  l.libs[0] = open_first(cudart, 2, error, cap);
  if (l.libs[0]) l.libs[1] = open_first(cublas, 2, error, cap);
  if (!l.libs[0] || !l.libs[1]) {
    if (l.libs[0]) dlclose(l.libs[0]);
    return -1;
  }
  char why[128];
  if (cuda_api_resolve(api, lookup, &l, why, sizeof why) != 0) {
    snprintf(error, cap, "%s: %s (a CUDA older than 12?)", l.missing_lib, why);
    dlclose(l.libs[1]), dlclose(l.libs[0]);
    return -1;
  }
  api->libs[0] = l.libs[0], api->libs[1] = l.libs[1];
  return 0;
}

void cuda_api_unload(cuda_api *api) {
  /* cuBLAS first: it uses the runtime */
  if (api->libs[1]) dlclose(api->libs[1]);
  if (api->libs[0]) dlclose(api->libs[0]);
  memset(api, 0, sizeof *api);
}

const char *cuda_api_blas_status(int status, char *buf, size_t cap) {
  static const struct {
    int status;
    const char *name;
  } names[] = {
      {0, "CUBLAS_STATUS_SUCCESS"},           {1, "CUBLAS_STATUS_NOT_INITIALIZED"},
      {3, "CUBLAS_STATUS_ALLOC_FAILED"},      {7, "CUBLAS_STATUS_INVALID_VALUE"},
      {8, "CUBLAS_STATUS_ARCH_MISMATCH"},     {11, "CUBLAS_STATUS_MAPPING_ERROR"},
      {13, "CUBLAS_STATUS_EXECUTION_FAILED"}, {14, "CUBLAS_STATUS_INTERNAL_ERROR"},
      {15, "CUBLAS_STATUS_NOT_SUPPORTED"},    {16, "CUBLAS_STATUS_LICENSE_ERROR"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].status == status) return names[i].name;
  snprintf(buf, cap, "cuBLAS status %d", status);
  return buf;
}
