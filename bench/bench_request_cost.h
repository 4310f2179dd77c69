/*
 * bench_request_cost.h - one request's admission cost by pool size, in this build and, in the
 * same run, in another libpkv loaded by path (bench_request_cost.c says how).
 */
#ifndef PKV_BENCH_REQUEST_COST_H
#define PKV_BENCH_REQUEST_COST_H

#include <stdint.h>

#include <pkv/pkv.h>

enum { REQ_NUM_POOLS = 3, REQ_MAX_APIS = 2 };

/* The entry points a request calls, from the linked libpkv or from one loaded by path. */
typedef struct req_api {
  const char *name;
  void *handle; /* dlopen's, or NULL for the linked library */
  pkv_status (*params_init)(pkv_engine_params *, uint32_t);
  pkv_status (*create)(const pkv_engine_params *, pkv_engine **);
  void (*destroy)(pkv_engine *);
  pkv_status (*allocate)(pkv_engine *, const int32_t *, uint32_t, const pkv_seq_params *,
                         uint64_t *, uint32_t *);
  pkv_status (*batch_begin)(pkv_engine *, const uint64_t *, const uint32_t *, uint32_t,
                            pkv_batch **);
  pkv_status (*batch_end)(pkv_batch *);
  pkv_status (*release)(pkv_engine *, uint64_t);
} req_api;

int req_api_linked(req_api *api);
/* Loads the libpkv at path (RTLD_LOCAL); -1 with a message when it cannot. */
int req_api_open(req_api *api, const char *path);
void req_api_close(req_api *api);

/* Times and prints the requests on apis[0] (this build) and apis[1] if num_apis is 2; 0 or -1. */
int bench_request_cost(const req_api *apis, uint32_t num_apis, int quick);

/* The same requests on a one-group and a Gemma-4-like engine of this build: cost per KV group. */
int bench_request_groups(int quick);

#endif /* PKV_BENCH_REQUEST_COST_H */
