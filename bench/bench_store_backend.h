/*
 * bench_store_backend.h - bench_store's door into the store classes of src/tiers (C++, not
 * exported by libpkv: the bench builds them from their sources, as tests/store does), so that
 * whole-block puts and gets are timed without an engine around them.
 */
#ifndef PKV_BENCH_STORE_BACKEND_H
#define PKV_BENCH_STORE_BACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_store bench_store;

/* The bytes of one stored block of this shape (bf16): header, tokens, K and V of every layer. */
uint64_t bench_store_value_bytes(uint32_t num_layers, uint32_t kv_heads, uint32_t head_dim,
                                 uint32_t block_size);

/* A file store in dir (made if missing), or a Redis store on 127.0.0.1:port (one connection);
 * NULL with the reason in why[cap]. */
bench_store *bench_store_open_file(const char *dir, char *why, uint32_t cap);
bench_store *bench_store_open_redis(uint32_t port, char *why, uint32_t cap);
void bench_store_close(bench_store *s);

/* keys: n keys of 32 bytes; values: n values of value_bytes. 0, or -1 with the reason in why. */
int bench_store_put(bench_store *s, const uint8_t *keys, uint32_t n, const void *values,
                    uint64_t value_bytes, char *why, uint32_t cap);
/* *num_found: how many of the n keys were found whole. */
int bench_store_get(bench_store *s, const uint8_t *keys, uint32_t n, void *values,
                    uint64_t value_bytes, uint32_t *num_found, char *why, uint32_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PKV_BENCH_STORE_BACKEND_H */
