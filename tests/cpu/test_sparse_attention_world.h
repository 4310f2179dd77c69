/* test_sparse_attention's harness: a CPU engine of two MLA layers with indexers, the test's own
 * copy of every sequence's latents and cached indexer keys, and one call (sa_step) that runs a
 * batch through pkv_indexer_write, pkv_indexer_topk, pkv_sparse_mla_attention (and
 * pkv_attention where dense equals sparse) on every layer, checking each against
 * tests/common/indexer_ref.h. */
#ifndef PKV_TESTS_SPARSE_WORLD_H
#define PKV_TESTS_SPARSE_WORLD_H

#include <pkv/pkv.h>

#include <stdint.h>

typedef struct sa_config {
  const char *name;
  int32_t dtype;       /* q, k, out and the latent cache */
  int32_t index_dtype; /* layer 0's indexer: PKV_DTYPE_FP8_E4M3 or BF16; layer 1's the other */
  uint32_t ue8m0;      /* pkv_indexer_write's flags */
  uint32_t block_size;
  int32_t kv_dtype; /* the latents': 0 (dtype), or fp8 codes (PKV_DTYPE_FP8_E4M3 / E5M2) of a
                       per-layer scale (pkv_set_kv_scales) */
} sa_config;

/* The model: MLA latents of SA_RANK + SA_ROPE values, SA_HEADS q heads. */
enum { SA_LAYERS = 2, SA_HEADS = 4, SA_RANK = 32, SA_ROPE = 16, SA_WIDTH = SA_RANK + SA_ROPE };
enum { SA_MAX_SEQS = 8, SA_CAP = 1200 }; /* sequences, and tokens per sequence, at most */
enum { SA_EXACT = 0, SA_RANDOM = 1 };    /* a sequence's indexer values: see the test's top */

typedef struct sa_layer {
  uint32_t dim, heads, topk; /* the indexer's */
  int32_t index_dtype;
} sa_layer;

typedef struct sa_seq {
  uint64_t id; /* 0 = unused */
  int kind;    /* SA_EXACT or SA_RANDOM */
  uint64_t seed;
  uint32_t num_tokens, num_computed;
  double *latent[SA_LAYERS];  /* [SA_CAP][SA_WIDTH]: the latents as the cache holds them */
  double *key[SA_LAYERS];     /* [SA_CAP][dim]: the cached keys' values (codes * scale) */
  uint8_t *cached[SA_LAYERS]; /* [SA_CAP][dim * (1 or 2)]: the reference's key bytes */
  float *scale[SA_LAYERS];    /* [SA_CAP]: fp8 layers' scales */
} sa_seq;

typedef struct sa_world {
  sa_config c;
  pkv_engine *e;
  sa_layer layers[SA_LAYERS];
  float kv_scale[SA_LAYERS]; /* fp8 latents' scales */
  double atol, rtol;         /* attention outputs, by the dtype */
  sa_seq seqs[SA_MAX_SEQS];
  uint32_t tie_rows; /* exact top-k rows where the tie rule decided (count_ties) */
  uint32_t nan_rows; /* ... that left a NaN key out */
} sa_world;

/* Creates the engine. Returns 1 on success (failures are counted). */
int sa_init(sa_world *w, const sa_config *c);
void sa_free(sa_world *w);
/* A prompt of n tokens (the seed makes its tokens and values); returns the slot or -1. */
int sa_alloc(sa_world *w, uint32_t n, int kind, uint64_t seed);
/* n more tokens of slot s. Returns 1 on success. */
int sa_append(sa_world *w, int s, uint32_t n);
/* One batch: slot s[i] computes num_new[i] of its uncomputed tokens (NULL = all). */
void sa_step(sa_world *w, const int *s, const uint32_t *num_new, uint32_t n);
/* Every computed token's cached key of every sequence, read back through its block table. */
void sa_check_cache(sa_world *w);

#endif
