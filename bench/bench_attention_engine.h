/*
 * bench_attention_engine.h - the CPU attention bench's engines: a model shape and KV kind, cached
 * contexts written straight into the pool, and a step over every layer.
 */
#ifndef PKV_BENCH_ATTENTION_ENGINE_H
#define PKV_BENCH_ATTENTION_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <pkv/pkv.h>

enum { BENCH_BLOCK_SIZE = 16, BENCH_MAX_SEQS = 64 };

/* A KV kind: the model's dtype and the cache's (0 = the model's). */
typedef struct kv_kind {
  const char *name;
  int32_t dtype, kv_dtype;
} kv_kind;

/* A layer's shape, and its window (0 = full attention). kv_lora_rank not 0: an MLA cache of one
 * latent of head_dim (kv_heads 1), out kv_lora_rank per q head, scale 1/sqrt(192). */
typedef struct bench_shape {
  uint32_t q_heads, kv_heads, head_dim, window, kv_lora_rank;
} bench_shape;

/* An engine of `layers` layers with one open batch, and the batch's q, k, v, out. */
typedef struct bench_run {
  pkv_engine *e;
  pkv_batch *b;
  uint32_t layers;
  size_t elt, kv_elt;    /* bytes of an element of q, k, v, out; of the pool */
  void *q, *k, *v, *out; /* MLA: v NULL */
  const char *kernels;   /* pkv_pool_info.kernels */
} bench_run;

/* A CPU engine of `layers` layers and num_blocks blocks (block size BENCH_BLOCK_SIZE, no prefix
 * caching) holding num_seqs (<= BENCH_MAX_SEQS) sequences of ctx tokens, and an open batch. With
 * decode, the contexts' K/V are written into the pool directly (as a host kernel would: no
 * prefill runs), each sequence gets one more token and the batch computes it; without, the
 * batch computes the whole prompts. 0, or -1 after saying what failed (then bench_run_close
 * still frees what was made). */
int bench_run_open(bench_run *r, const kv_kind *kind, bench_shape sh, uint32_t layers,
                   uint32_t threads, uint64_t num_blocks, uint32_t num_seqs, uint32_t ctx,
                   int decode);
void bench_run_close(bench_run *r);

/* The CPU kernel variant an engine gets (pkv_pool_info.kernels; PKV_CPU_ISA forces one), or
 * NULL after saying why no engine could be made (say, PKV_CPU_ISA names no variant). */
const char *bench_kernels(void);

/* One step: pkv_attention of the batch over every layer. arg: a bench_run; 0 or -1. */
int bench_run_step(void *arg);

#endif /* PKV_BENCH_ATTENTION_ENGINE_H */
