/*
 * test_ranks.c - one engine deciding for every tensor-parallel rank (pkv_engine_params.ranks ALL,
 * DESIGN.md §10), CPU pools standing in for GPUs, against a one-rank engine (tp_size 1) making
 * the same calls:
 *   - every batch's view (slots, block tables, copies) equal to the one-rank engine's;
 *   - every KV byte of every rank's shard, in the pool and in the host tier, equal to the
 *     one-rank pool's heads of that rank, after every batch;
 *   - each rank's pkv_attention output (its q heads) equal to the fp64 reference and, within
 *     rounding, to the one-rank output of those heads;
 * through prefix hits, a fork's copy-on-write, swap out and in, preemption (recompute) and
 * offload to the host tier with a load back; and the calls a rank's handle refuses.
 * Usage: test_ranks CONFIG (tp2, tp4, tp8kv: 8 ranks over 4 kv heads, fp8: tp 2 with e4m3 KV).
 */
#define _XOPEN_SOURCE 700
#include <pkv/pkv.h>

#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../common/attention_ref.h"
#include "../unit/test_util.h"
#include "ranks_procs.h"

enum { LAYERS = 3, Q_HEADS = 8, KV_HEADS = 4, DIM = 32, BS = 4, BLOCKS = 48, HOST_BLOCKS = 24 };
enum { MAX_TOKENS = 512, MAX_SEQS = 8, MAX_LEN = 128 };

static uint32_t tp, pp;   /* tensor-parallel ranks and pipeline stages of the engine under test */
static int32_t kv_dtype;  /* 0 or PKV_DTYPE_FP8_E4M3 */
static int procs;         /* the ranks in processes of their own (ranks_procs.h) */
static pkv_engine *one;   /* tp_size 1 */
static pkv_engine *all;   /* tp_size tp, ranks ALL; with procs rank 0's engine (ranks ONE), the
                            decider whose plans the other ranks' children import */
static uint8_t *plans[2]; /* with procs: the first two plans exported, for the refusals */
static uint64_t plan_len[2];
static uint32_t extra_blocks;         /* a foreign engine's pool: BLOCKS + this */
static const pkv_store_params *store; /* the store of the engines make_rank makes, or NULL */

/* A value of the model: a hash of (the token at p, p, layer, tensor, head, dim) in [-1, 1]. */
static float value(int32_t token, uint32_t pos, uint32_t layer, uint32_t tensor, uint32_t head,
                   uint32_t d) {
  uint64_t x = (uint64_t)(uint32_t)token * 0x9E3779B97F4A7C15ull ^ (uint64_t)pos << 20 ^
               (uint64_t)layer << 40 ^ (uint64_t)tensor << 48 ^ (uint64_t)head << 52 ^ d;
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return (float)((double)(x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static void set_rank_scales(pkv_engine *e, uint32_t tp_rank);

/* An engine of the model over tp_size x pp_stages ranks as `ranks` (ONE and POOL: the rank
 * tp_rank, pp_rank). */
static pkv_engine *make_engine(uint32_t tp_size, uint32_t pp_stages, uint32_t ranks,
                               uint32_t tp_rank, uint32_t pp_rank) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = DIM;
  p.dtype = PKV_DTYPE_F32, p.kv_dtype = kv_dtype, p.device = PKV_DEVICE_CPU;
  p.block_size = BS, p.num_blocks = BLOCKS + extra_blocks, p.host_num_blocks = HOST_BLOCKS,
  p.host_offload = 1;
  p.max_model_len = MAX_LEN, p.num_threads = 2, p.tp_size = tp_size, p.ranks = ranks;
  p.pp_size = pp_stages, p.tp_rank = tp_rank, p.pp_rank = pp_rank, p.store = store;
  pkv_engine *e = NULL;
  if (!CHECK_OK(pkv_engine_create(&p, &e))) {
    fprintf(stderr, "create: %s\n", pkv_last_error());
    exit(1);
  }
  return e;
}

/* An engine of the model's ranks (tp x pp). */
static pkv_engine *make_rank(uint32_t tp_size, uint32_t ranks, uint32_t tp_rank, uint32_t pp_rank) {
  return make_engine(tp_size, pp, ranks, tp_rank, pp_rank);
}

/* The one-rank reference (tp_size 1, no stages), or the engine of every rank. */
static pkv_engine *make(uint32_t tp_size, uint32_t ranks) {
  return ranks == PKV_RANKS_ONE ? make_engine(1, 1, ranks, 0, 0)
                                : make_engine(tp_size, pp, ranks, 0, 0);
}

/* A child's engine: rank r's pool, with its own rank's fp8 scales. */
static pkv_engine *make_pool(uint32_t r) {
  pkv_engine *e = make_rank(tp, PKV_RANKS_POOL, r % tp, r / tp);
  if (kv_dtype) set_rank_scales(e, r % tp);
  return e;
}

/* fp8: a scale per (layer, kv head, K or V) of the whole model, not 1. */
static float scale_of(uint32_t layer, uint32_t head, int v) {
  return 0.004f + 0.001f * (float)(layer * 7 + head * 3 + (v ? 2 : 0));
}

static void set_scales(void) {
  const uint32_t kvpr = KV_HEADS / tp ? KV_HEADS / tp : 1;
  for (uint32_t l = 0; l < LAYERS; ++l) {
    float k1[KV_HEADS], v1[KV_HEADS], kr[64], vr[64];
    for (uint32_t h = 0; h < KV_HEADS; ++h) k1[h] = scale_of(l, h, 0), v1[h] = scale_of(l, h, 1);
    /* every rank's heads in rank order: rank r holds kv heads r * kvpr .. (or, replicated,
     * head r / (tp / KV_HEADS)) */
    for (uint32_t r = 0; r < tp; ++r)
      for (uint32_t i = 0; i < kvpr; ++i) {
        const uint32_t h = tp <= KV_HEADS ? r * kvpr + i : r / (tp / KV_HEADS);
        kr[r * kvpr + i] = k1[h], vr[r * kvpr + i] = v1[h];
      }
    CHECK_OK(pkv_set_kv_scales(one, l, k1, v1));
    if (!procs) CHECK_OK(pkv_set_kv_scales(all, l, kr, vr));
  }
  if (procs) set_rank_scales(all, 0);
}

/* An engine of one rank (ranks ONE or POOL): tensor-parallel rank t's heads' scales. */
static void set_rank_scales(pkv_engine *e, uint32_t t) {
  const uint32_t kvpr = KV_HEADS / tp ? KV_HEADS / tp : 1;
  for (uint32_t l = 0; l < LAYERS; ++l) {
    float k[KV_HEADS], v[KV_HEADS];
    for (uint32_t i = 0; i < kvpr; ++i) {
      const uint32_t h = tp <= KV_HEADS ? t * kvpr + i : t / (tp / KV_HEADS);
      k[i] = scale_of(l, h, 0), v[i] = scale_of(l, h, 1);
    }
    CHECK_OK(pkv_set_kv_scales(e, l, k, v));
  }
}

/* The pipeline stage holding layer l: vLLM's split, the extra layers in the stages before the
 * last. */
static uint32_t stage_of(uint32_t l) {
  uint32_t first = 0;
  for (uint32_t s = 0; s < pp; ++s) {
    const uint32_t n = LAYERS / pp + (s + 1 < pp && s + 1 + LAYERS % pp >= pp ? 1 : 0);
    if (l < first + n) return s;
    first += n;
  }
  return pp;
}

/* Tensor-parallel rank r's kv heads: kvpr of them, the first being this whole-model head. */
static uint32_t first_kv_head(uint32_t r) {
  return tp <= KV_HEADS ? r * (KV_HEADS / tp) : r / (tp / KV_HEADS);
}

/* Every byte of every rank's shard of the pool and the host tier equals the one-rank engine's
 * bytes of that rank's heads. */
static void check_pools(const char *when) {
  struct pkv_pool_info a, b;
  a.struct_size = b.struct_size = sizeof a;
  CHECK_OK(pkv_pool_info(one, &a));
  const size_t elem = kv_dtype ? 1 : 4;
  const uint32_t kvpr = KV_HEADS / tp ? KV_HEADS / tp : 1;
  size_t bad = 0;
  static char *copies[4];
  for (uint32_t r = 0; r < tp * pp; ++r) {
    const char *pools[4];
    if (procs && r > 0) {
      /* The child's pool comes over its pipe. */
      struct pkv_pool_info first;
      first.struct_size = sizeof first;
      CHECK_OK(pkv_pool_info(all, &first));
      for (int i = 0; i < 4; ++i)
        if (!copies[i])
          copies[i] =
              malloc(i < 2 ? first.bytes_per_pool * LAYERS : first.host_bytes_per_pool * LAYERS);
      CHECK_OK(rp_dump(r, &b, copies[0], copies[1], copies[2], copies[3]));
      for (int i = 0; i < 4; ++i) pools[i] = copies[i];
      CHECK(b.rank == 0 && b.num_ranks == 1); /* an engine of one rank: its own */
    } else {
      if (procs)
        CHECK_OK(pkv_pool_info(all, &b));
      else
        CHECK_OK(pkv_rank_pool_info(all, r, &b));
      pools[0] = b.k_base, pools[1] = b.v_base, pools[2] = b.host_k_base, pools[3] = b.host_v_base;
      if (!procs) CHECK(b.rank == r && b.num_ranks == tp * pp);
    }
    CHECK(b.kv_heads == kvpr && b.device_id == -1);
    CHECK(b.tp_rank == r % tp && b.pp_rank == r / tp &&
          b.num_layers == b.end_layer - b.first_layer);
    for (int host = 0; host < 2; ++host)
      for (int t = 0; t < 2; ++t) {
        const char *src = host ? (t ? a.host_v_base : a.host_k_base) : (t ? a.v_base : a.k_base);
        const char *dst = pools[host * 2 + t];
        const uint32_t blocks = host ? HOST_BLOCKS : BLOCKS;
        /* A stage's pool holds its layers only, from its first. */
        for (uint32_t l = b.first_layer; l < b.end_layer; ++l)
          for (uint32_t blk = 0; blk < blocks; ++blk)
            for (uint32_t tok = 0; tok < BS; ++tok) {
              const uint32_t at = l - b.first_layer;
              const size_t row1 = ((size_t)(l * blocks + blk) * BS + tok) * KV_HEADS * DIM;
              const size_t rowr = ((size_t)(at * blocks + blk) * BS + tok) * kvpr * DIM;
              const char *x = src + (row1 + (size_t)first_kv_head(r % tp) * DIM) * elem;
              const char *y = dst + rowr * elem;
              if (memcmp(x, y, (size_t)kvpr * DIM * elem) != 0 && bad++ < 5)
                fprintf(stderr, "%s: rank %u %s %s layer %u block %u token %u differs\n", when, r,
                        host ? "host" : "pool", t ? "V" : "K", l, blk, tok);
            }
      }
  }
  CHECK(bad == 0);
}

/* The two batches plan the same step: the decider is one, whatever the ranks. */
static void check_views(const pkv_batch *b1, const pkv_batch *bt) {
  pkv_batch_view x, y;
  x.struct_size = y.struct_size = sizeof x;
  CHECK_OK(pkv_batch_info(b1, &x));
  CHECK_OK(pkv_batch_info(bt, &y));
  int same = x.num_seqs == y.num_seqs && x.num_tokens == y.num_tokens &&
             x.max_blocks_per_seq == y.max_blocks_per_seq && x.num_copies == y.num_copies;
  if (same)
    same = !memcmp(x.slot_mapping, y.slot_mapping, x.num_tokens * sizeof(int64_t)) &&
           !memcmp(x.block_tables, y.block_tables,
                   (size_t)x.num_seqs * x.max_blocks_per_seq * sizeof(int32_t)) &&
           !memcmp(x.copy_src, y.copy_src, x.num_copies * sizeof(int32_t)) &&
           !memcmp(x.copy_dst, y.copy_dst, x.num_copies * sizeof(int32_t)) &&
           !memcmp(x.copy_kind, y.copy_kind, x.num_copies * sizeof(int32_t));
  CHECK(same);
}

static float q1[MAX_TOKENS * Q_HEADS * DIM], k1[MAX_TOKENS * KV_HEADS * DIM],
    v1[MAX_TOKENS * KV_HEADS * DIM], o1[MAX_TOKENS * Q_HEADS * DIM], ot[MAX_TOKENS * Q_HEADS * DIM];
static float qr[MAX_TOKENS * Q_HEADS * DIM], kr[MAX_TOKENS * KV_HEADS * DIM],
    vr[MAX_TOKENS * KV_HEADS * DIM], orr[MAX_TOKENS * Q_HEADS * DIM];

/* The value the cache gives back for one element: fp8 rounds it to its code times its scale. */
static double cached(float x, uint32_t layer, uint32_t head, int v) {
  if (!kv_dtype) return x;
  const float s = scale_of(layer, head, v);
  return pkv_ref_fp8_decode(pkv_ref_fp8_encode(x, s, 0), 0) * s;
}

/* Sequence seq's outputs of its n new tokens (ending at position end) against fp64. */
static void check_reference(uint64_t seq, uint32_t row0, uint32_t n, uint32_t layer,
                            const float *out) {
  int32_t tokens[MAX_LEN];
  uint32_t len = 0;
  CHECK_OK(pkv_seq_tokens(one, seq, tokens, MAX_LEN, &len));
  struct pkv_seq_info info;
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(one, seq, &info));
  const uint32_t ctx = info.num_computed_tokens + n;
  double *k = malloc(sizeof(double) * ctx * KV_HEADS * DIM);
  double *v = malloc(sizeof(double) * ctx * KV_HEADS * DIM);
  double *q = malloc(sizeof(double) * n * Q_HEADS * DIM);
  double *ref = malloc(sizeof(double) * n * Q_HEADS * DIM);
  double *got = malloc(sizeof(double) * n * Q_HEADS * DIM);
  for (uint32_t p = 0; p < ctx; ++p)
    for (uint32_t h = 0; h < KV_HEADS; ++h)
      for (uint32_t d = 0; d < DIM; ++d) {
        const size_t i = ((size_t)p * KV_HEADS + h) * DIM + d;
        k[i] = cached(value(tokens[p], p, layer, 1, h, d), layer, h, 0);
        v[i] = cached(value(tokens[p], p, layer, 2, h, d), layer, h, 1);
      }
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t j = 0; j < Q_HEADS * DIM; ++j) {
      q[(size_t)t * Q_HEADS * DIM + j] = qr[(size_t)(row0 + t) * Q_HEADS * DIM + j];
      got[(size_t)t * Q_HEADS * DIM + j] = out[(size_t)(row0 + t) * Q_HEADS * DIM + j];
    }
  pkv_ref_attention(q, k, v, ref, n, ctx, Q_HEADS, KV_HEADS, DIM, 1.0 / sqrt((double)DIM));
  CHECK(pkv_ref_compare("ranks vs fp64", got, ref, (size_t)n * Q_HEADS * DIM, 2e-5, 1e-4) == 0);
  free(k), free(v), free(q), free(ref), free(got);
}

/* One step on both engines: the same sequences and counts; every layer on every rank. */
static void run_batch(const uint64_t *seqs, const uint32_t *counts, uint32_t n) {
  pkv_batch *b1 = NULL, *bt = NULL;
  if (!CHECK_OK(pkv_batch_begin(one, seqs, counts, n, &b1))) {
    for (uint32_t i = 0; i < n; ++i)
      fprintf(stderr, "seq %llu count %u\n", (unsigned long long)seqs[i], counts[i]);
    exit(1);
  }
  if (!CHECK_OK(pkv_batch_begin(all, seqs, counts, n, &bt))) exit(1);
  check_views(b1, bt);
  if (procs) {
    /* The decider's plan goes to every other rank's child, which imports it. */
    uint64_t len = 0, again = 0;
    CHECK_OK(pkv_batch_export_plan(bt, NULL, 0, &len));
    uint8_t *plan = malloc(len), *same = malloc(len);
    CHECK_OK(pkv_batch_export_plan(bt, plan, len, &len));
    CHECK_OK(pkv_batch_export_plan(bt, same, len, &again));
    CHECK(again == len && !memcmp(plan, same, len)); /* one plan per batch */
    for (uint32_t r = 1; r < tp * pp; ++r) CHECK_OK(rp_import(r, plan, len));
    for (int i = 0; i < 2; ++i)
      if (!plans[i]) {
        plans[i] = plan, plan_len[i] = len, plan = NULL;
        break;
      }
    free(plan), free(same);
  }
  pkv_batch_view view;
  view.struct_size = sizeof view;
  CHECK_OK(pkv_batch_info(b1, &view));
  /* The batch's own handle names no rank: refused, nothing run. */
  if (tp > 1 && !procs)
    CHECK_ERR(all, pkv_attention(bt, 0, q1, k1, v1, o1), PKV_ERR_INVALID_ARGUMENT);
  const uint32_t qpr = Q_HEADS / tp, kvpr = KV_HEADS / tp ? KV_HEADS / tp : 1;
  for (uint32_t l = 0; l < LAYERS; ++l) {
    /* The whole model's q, k, v of every new token (q kept as written, for the reference). */
    for (uint32_t s = 0; s < n; ++s) {
      int32_t tokens[MAX_LEN];
      uint32_t len = 0;
      CHECK_OK(pkv_seq_tokens(one, seqs[s], tokens, MAX_LEN, &len));
      for (uint32_t t = 0; t < counts[s]; ++t) {
        const uint32_t row = (uint32_t)view.query_start[s] + t;
        const uint32_t pos = (uint32_t)view.positions[row];
        for (uint32_t h = 0; h < Q_HEADS; ++h)
          for (uint32_t d = 0; d < DIM; ++d)
            q1[((size_t)row * Q_HEADS + h) * DIM + d] = value(tokens[pos], pos, l, 0, h, d);
        for (uint32_t h = 0; h < KV_HEADS; ++h)
          for (uint32_t d = 0; d < DIM; ++d) {
            k1[((size_t)row * KV_HEADS + h) * DIM + d] = value(tokens[pos], pos, l, 1, h, d);
            v1[((size_t)row * KV_HEADS + h) * DIM + d] = value(tokens[pos], pos, l, 2, h, d);
          }
      }
    }
    memcpy(qr, q1, sizeof(float) * view.num_tokens * Q_HEADS * DIM);
    CHECK_OK(pkv_attention(b1, l, q1, k1, v1, o1));
    /* Each rank of the layer's stage its heads: q heads r * qpr .., kv heads from
     * first_kv_head(r), for tensor-parallel rank r; another stage's rank refuses the layer. */
    const uint32_t stage = stage_of(l);
    for (uint32_t r = 0; r < tp; ++r) {
      pkv_batch *rb = NULL;
      if (pp > 1 && !procs) {
        CHECK_OK(pkv_batch_rank(bt, ((stage + 1) % pp) * tp + r, &rb));
        CHECK_ERR(all, pkv_attention(rb, l, q1, k1, v1, o1), PKV_ERR_INVALID_ARGUMENT);
      }
      if (procs && r == 0 && stage > 0) /* rank 0's engine holds stage 0's layers only */
        CHECK_ERR(all, pkv_attention(bt, l, q1, k1, v1, o1), PKV_ERR_INVALID_ARGUMENT);
      if (!procs) CHECK_OK(pkv_batch_rank(bt, stage * tp + r, &rb));
      for (uint32_t t = 0; t < view.num_tokens; ++t) {
        memcpy(&qr[(size_t)t * qpr * DIM], &q1[((size_t)t * Q_HEADS + r * qpr) * DIM],
               sizeof(float) * qpr * DIM);
        memcpy(&kr[(size_t)t * kvpr * DIM], &k1[((size_t)t * KV_HEADS + first_kv_head(r)) * DIM],
               sizeof(float) * kvpr * DIM);
        memcpy(&vr[(size_t)t * kvpr * DIM], &v1[((size_t)t * KV_HEADS + first_kv_head(r)) * DIM],
               sizeof(float) * kvpr * DIM);
      }
      const uint32_t rank = stage * tp + r;
      if (!procs)
        CHECK_OK(pkv_attention(rb, l, qr, kr, vr, orr));
      else if (rank == 0)
        CHECK_OK(pkv_attention(bt, l, qr, kr, vr, orr));
      else
        CHECK_OK(rp_attention(rank, l, view.num_tokens, qpr * DIM, kvpr * DIM, qr, kr, vr, orr));
      for (uint32_t t = 0; t < view.num_tokens; ++t)
        memcpy(&ot[((size_t)t * Q_HEADS + r * qpr) * DIM], &orr[(size_t)t * qpr * DIM],
               sizeof(float) * qpr * DIM);
    }
    memcpy(qr, q1, sizeof(float) * view.num_tokens * Q_HEADS * DIM);
    size_t far = 0;
    for (size_t i = 0; i < (size_t)view.num_tokens * Q_HEADS * DIM; ++i)
      if (!(fabsf(ot[i] - o1[i]) <= 1e-5f + 1e-4f * fabsf(o1[i]))) ++far;
    CHECK(far == 0);
    for (uint32_t s = 0; s < n; ++s)
      check_reference(seqs[s], (uint32_t)view.query_start[s], counts[s], l, ot);
  }
  CHECK_OK(pkv_batch_end(b1));
  CHECK_OK(pkv_batch_end(bt));
  if (procs)
    for (uint32_t r = 1; r < tp * pp; ++r) CHECK_OK(rp_end(r));
  CHECK_ENGINE(one);
  CHECK_ENGINE(all);
  check_pools("after a batch");
}

/* Both engines' calls, which must agree. */
static uint64_t allocate(const int32_t *tokens, uint32_t n, uint32_t *cached) {
  uint64_t a = 0, b = 0;
  uint32_t ca = 0, cb = 0;
  CHECK_OK(pkv_allocate(one, tokens, n, NULL, &a, &ca));
  CHECK_OK(pkv_allocate(all, tokens, n, NULL, &b, &cb));
  CHECK(a == b && ca == cb);
  if (cached) *cached = ca;
  return a;
}

static void append(uint64_t s, int32_t token) {
  CHECK_OK(pkv_append(one, s, &token, 1));
  CHECK_OK(pkv_append(all, s, &token, 1));
}

static uint32_t uncomputed(uint64_t s) {
  struct pkv_seq_info info;
  info.struct_size = sizeof info;
  CHECK_OK(pkv_seq_info(one, s, &info));
  return info.num_tokens - info.num_computed_tokens;
}

#define BOTH(call_one, call_all) (CHECK_OK(call_one), CHECK_OK(call_all))

static void step(const uint64_t *seqs, uint32_t n) {
  uint32_t counts[MAX_SEQS];
  for (uint32_t i = 0; i < n; ++i) counts[i] = uncomputed(seqs[i]);
  run_batch(seqs, counts, n);
}

static void prompt(int32_t *t, uint32_t n, int32_t base) {
  for (uint32_t i = 0; i < n; ++i) t[i] = base + (int32_t)(i * 7 % 23);
}

static void scenario(void) {
  int32_t pa[40], pb[40], big[MAX_LEN];
  prompt(pa, 22, 100);
  memcpy(pb, pa, 12 * sizeof(int32_t)); /* 3 blocks shared */
  prompt(pb + 12, 10, 300);
  uint32_t cached = 0;
  uint64_t a = allocate(pa, 22, NULL), b = allocate(pb, 22, &cached);
  uint64_t ab[2] = {a, b};
  step(ab, 2);
  /* Decodes. */
  for (int i = 0; i < 3; ++i) {
    append(a, 500 + i), append(b, 600 + i);
    step(ab, 2);
  }
  /* A prefix hit: a's prompt again, and more. */
  BOTH(pkv_release(one, a), pkv_release(all, a));
  int32_t pc[40];
  memcpy(pc, pa, 22 * sizeof(int32_t));
  prompt(pc + 22, 6, 700);
  uint64_t c = allocate(pc, 28, &cached);
  CHECK(cached == 20);
  append(b, 650);
  uint64_t bc[2] = {b, c};
  step(bc, 2);
  /* A fork: its first append copies the shared partial block (copy-on-write). */
  uint64_t d1 = 0, d2 = 0;
  CHECK_OK(pkv_fork(one, b, &d1));
  CHECK_OK(pkv_fork(all, b, &d2));
  CHECK(d1 == d2);
  append(b, 800), append(d1, 801);
  uint64_t bd[2] = {b, d1};
  step(bd, 2);
  /* Swap d out and back: the copies to the host tier and back run on every rank's pool. */
  BOTH(pkv_swap_out(one, d1), pkv_swap_out(all, d1));
  append(b, 802);
  step(&b, 1);
  BOTH(pkv_swap_in(one, d1), pkv_swap_in(all, d1));
  append(d1, 803);
  step(&d1, 1);
  /* Preemption (recompute): b gives its blocks back and computes its tokens again. */
  BOTH(pkv_preempt(one, b), pkv_preempt(all, b));
  uint32_t r1 = 0, r2 = 0;
  CHECK_OK(pkv_resume(one, b, &r1));
  CHECK_OK(pkv_resume(all, b, &r2));
  CHECK(r1 == r2);
  step(&b, 1);
  /* Offload: fill the pool so that c's cached blocks are evicted to the host tier, then load
   * them back through a hit. */
  BOTH(pkv_release(one, c), pkv_release(all, c));
  BOTH(pkv_release(one, b), pkv_release(all, b));
  BOTH(pkv_release(one, d1), pkv_release(all, d1));
  prompt(big, 100, 2000);
  for (uint32_t i = 0; i < 100; ++i) big[i] += (int32_t)i;
  uint64_t e = allocate(big, 100, NULL);
  step(&e, 1);
  BOTH(pkv_release(one, e), pkv_release(all, e));
  for (uint32_t i = 0; i < 100; ++i) big[i] += 5000;
  uint64_t f = allocate(big, 100, NULL);
  step(&f, 1);
  pkv_stats s1, s2;
  s1.struct_size = s2.struct_size = sizeof s1;
  CHECK_OK(pkv_engine_stats(one, &s1));
  CHECK_OK(pkv_engine_stats(all, &s2));
  CHECK(s1.num_offloaded_blocks > 0 && s1.num_offloaded_blocks == s2.num_offloaded_blocks);
  uint64_t g = allocate(pc, 28, &cached);
  step(&g, 1);
  CHECK_OK(pkv_engine_stats(one, &s1));
  CHECK_OK(pkv_engine_stats(all, &s2));
  CHECK(s1.num_loaded_blocks > 0 && s1.num_loaded_blocks == s2.num_loaded_blocks &&
        s1.host_hit_tokens == s2.host_hit_tokens);
  BOTH(pkv_release(one, f), pkv_release(all, f));
  BOTH(pkv_release(one, g), pkv_release(all, g));
}

/* What a rank's handle, and an engine of several ranks, refuse. */
static void refusals(void) {
  int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t s = allocate(t, 8, NULL);
  uint32_t n = 8;
  pkv_batch *b = NULL, *rb = NULL, *rr = NULL;
  CHECK_OK(pkv_batch_begin(all, &s, &n, 1, &b));
  CHECK_ERR(all, pkv_batch_rank(b, tp * pp, &rb), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(all, pkv_batch_rank(b, 0, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_batch_rank(b, tp * pp - 1, &rb));
  CHECK(tp * pp == 1 ? rb == b : rb != b);
  if (tp * pp > 1) CHECK_ERR(all, pkv_batch_rank(rb, 0, &rr), PKV_ERR_INVALID_ARGUMENT);
  pkv_batch_view v;
  v.struct_size = sizeof v;
  CHECK_OK(pkv_batch_info(rb, &v)); /* a rank's handle is the batch's */
  CHECK(v.num_tokens == 8);
  CHECK_ERR(all, pkv_batch_plan_graph(rb, 1), PKV_ERR_UNSUPPORTED); /* CPU */
  CHECK_OK(pkv_batch_end(rb));                                      /* ends every rank's */
  CHECK_ERR(all, pkv_batch_info(b, &v), PKV_ERR_STATE);
  CHECK_ERR(all, pkv_batch_rank(b, 0, &rr), PKV_ERR_STATE);
  CHECK_ERR(all, pkv_attention(rb, 0, q1, k1, v1, o1), PKV_ERR_STATE);
  CHECK_OK(pkv_release(all, s));
  CHECK_OK(pkv_release(one, s));
  struct pkv_pool_info info;
  info.struct_size = sizeof info;
  CHECK_ERR(all, pkv_rank_pool_info(all, tp * pp, &info), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(all, pkv_engine_set_rank_stream(all, tp * pp, NULL), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(all, pkv_engine_set_rank_stream(all, 0, (void *)16), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_engine_set_rank_stream(all, 0, NULL));
  CHECK_OK(pkv_engine_set_stream(all, NULL));
  if (tp * pp > 1) CHECK_ERR(all, pkv_engine_set_stream(all, (void *)16), PKV_ERR_INVALID_ARGUMENT);
  float sinks[Q_HEADS] = {0};
  CHECK_ERR(all, pkv_set_attention_sinks(all, 0, sinks, Q_HEADS), PKV_ERR_INVALID_ARGUMENT);
}

/* What an engine of ranks POOL refuses: plans out of order, damaged, cut, of another shape;
 * deciding calls; an export of an imported batch. */
static void plan_refusals(void) {
  pkv_engine *pool = make_rank(tp, PKV_RANKS_POOL, 1 % tp, 1 / tp);
  pkv_batch *b = NULL, *b2 = NULL;
  uint64_t len = 0, id = 0, seq = 1;
  uint32_t one_token = 1;
  int32_t tok = 1;
  CHECK_ERR(pool, pkv_plan_import(pool, plans[1], plan_len[1], &b), PKV_ERR_STATE); /* skipped */
  CHECK(strstr(pkv_engine_last_error(pool), "step 1, step 0 expected") != NULL);
  uint8_t *bad = malloc(plan_len[0]);
  memcpy(bad, plans[0], plan_len[0]);
  bad[plan_len[0] - 1] ^= 1;
  CHECK_ERR(pool, pkv_plan_import(pool, bad, plan_len[0], &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_engine_last_error(pool), "checksum") != NULL);
  CHECK_ERR(pool, pkv_plan_import(pool, plans[0], plan_len[0] - 8, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(pool, pkv_plan_import(pool, "not a plan", 10, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(pool, pkv_plan_import(pool, NULL, 0, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(pool, pkv_plan_import(pool, plans[0], plan_len[0], NULL), PKV_ERR_INVALID_ARGUMENT);
  free(bad);
  CHECK_OK(pkv_plan_import(pool, plans[0], plan_len[0], &b));
  CHECK_ERR(pool, pkv_plan_import(pool, plans[1], plan_len[1], &b2), PKV_ERR_STATE); /* open */
  CHECK_ERR(pool, pkv_batch_export_plan(b, NULL, 0, &len), PKV_ERR_STATE);
  CHECK_ERR(pool, pkv_commit(b, NULL), PKV_ERR_STATE);
  CHECK_OK(pkv_batch_copy(b));
  CHECK_OK(pkv_batch_end(b));
  CHECK_ERR(pool, pkv_plan_import(pool, plans[0], plan_len[0], &b), PKV_ERR_STATE); /* stale */
  CHECK(strstr(pkv_engine_last_error(pool), "stale") != NULL);
  CHECK_ERR(pool, pkv_allocate(pool, &tok, 1, NULL, &id, NULL), PKV_ERR_STATE);
  CHECK_ERR(pool, pkv_submit(pool, &tok, 1, NULL, &id), PKV_ERR_STATE);
  CHECK_ERR(pool, pkv_batch_begin(pool, &seq, &one_token, 1, &b), PKV_ERR_STATE);
  CHECK_ERR(pool, pkv_step(pool, &b), PKV_ERR_STATE);
  if (kv_dtype) {
    float sc[KV_HEADS] = {1, 1, 1, 1}; /* KV was written under the scales it had */
    CHECK_ERR(pool, pkv_set_kv_scales(pool, 0, sc, sc), PKV_ERR_STATE);
  }
  CHECK_OK(pkv_plan_import(pool, plans[1], plan_len[1], &b)); /* the next one, in order */
  pkv_batch_abort(b);
  /* An engine that decides imports nothing. */
  CHECK_ERR(all, pkv_plan_import(all, plans[0], plan_len[0], &b), PKV_ERR_STATE);
  pkv_engine_destroy(pool);
  /* A plan of another engine shape is refused naming the field. */
  extra_blocks = 4;
  pkv_engine *foreign = make_rank(tp, PKV_RANKS_ONE, 0, 0);
  pool = make_rank(tp, PKV_RANKS_POOL, 1 % tp, 1 / tp);
  extra_blocks = 0;
  CHECK_OK(pkv_allocate(foreign, &tok, 1, NULL, &id, NULL));
  CHECK_OK(pkv_batch_begin(foreign, &id, &one_token, 1, &b));
  uint8_t plan[4096];
  CHECK_OK(pkv_batch_export_plan(b, plan, sizeof plan, &len));
  CHECK(len <= sizeof plan);
  pkv_batch_abort(b);
  pkv_engine_destroy(pool);
  pool = make_rank(tp, PKV_RANKS_POOL, 1 % tp, 1 / tp);
  CHECK_ERR(pool, pkv_plan_import(pool, plan, len, &b), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_engine_last_error(pool), "num_blocks is 52, this engine's 48") != NULL);
  pkv_engine_destroy(pool);
  pkv_engine_destroy(foreign);
}

/* The profile of an engine of every rank: each rank's pool from its share of the host. */
static void profile(void) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = LAYERS, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = DIM;
  p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.block_size = BS, p.tp_size = tp;
  p.memory_total_bytes = 64u << 20, p.memory_utilization = 0.5;
  pkv_kv_budget one_rank, every;
  one_rank.struct_size = every.struct_size = sizeof one_rank;
  CHECK_OK(pkv_profile(&p, &one_rank));
  p.ranks = PKV_RANKS_ALL, p.pp_size = pp;
  CHECK_OK(pkv_profile(&p, &every));
  /* tp x pp ranks share the host's 32 MiB: each pool gets 1 / (tp x pp) of it. A stage's
   * block holds its layers only: stage 0 has the most (vLLM's split), so it bounds. */
  const uint32_t n = tp * pp, stage0 = stage_of(0) == stage_of(1) ? 2 : 1;
  CHECK(one_rank.num_ranks == 1 && one_rank.ranks_on_device == 1);
  CHECK(every.num_ranks == n && every.ranks_on_device == n && every.bounding_rank == 0);
  CHECK(every.block_bytes ==
        (pp == 1 ? one_rank.block_bytes : one_rank.block_bytes / LAYERS * stage0));
  CHECK(every.budget_bytes == (32u << 20) / n);
  CHECK(every.num_blocks == every.budget_bytes / every.block_bytes);
  /* Refusals, by name. */
  p.tp_rank = 1;
  CHECK_ERR(NULL, pkv_profile(&p, &every), PKV_ERR_INVALID_ARGUMENT);
  p.tp_rank = 0;
  int32_t devices[8] = {0};
  p.rank_device_ids = devices;
  CHECK_ERR(NULL, pkv_profile(&p, &every), PKV_ERR_INVALID_ARGUMENT);
  p.ranks = 7;
  CHECK_ERR(NULL, pkv_profile(&p, &every), PKV_ERR_INVALID_ARGUMENT);
  p.ranks = PKV_RANKS_ONE;
  CHECK_ERR(NULL, pkv_profile(&p, &every), PKV_ERR_INVALID_ARGUMENT);
  p.rank_device_ids = NULL;
  p.reserved5 = 1;
  CHECK_ERR(NULL, pkv_profile(&p, &every), PKV_ERR_INVALID_ARGUMENT);
}

/* A store with several ranks is refused in either mode: ranks deciding apart diverge through
 * it, and an engine of every rank does not take one yet. */
static void store_refused(void) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_FILE;
  sp.path = "/nonexistent/pkv-test-ranks";
  const uint32_t refused[2] = {PKV_RANKS_ONE, PKV_RANKS_POOL};
  for (uint32_t i = 0; i < 2 && tp * pp > 1; ++i) {
    const uint32_t ranks = refused[i];
    pkv_engine_params p;
    pkv_engine_params_init(&p, sizeof p);
    p.num_layers = LAYERS, p.num_q_heads = Q_HEADS, p.num_kv_heads = KV_HEADS, p.head_dim = DIM;
    p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.block_size = BS, p.num_blocks = 16;
    p.host_num_blocks = 8, p.tp_size = tp, p.pp_size = pp, p.ranks = ranks, p.store = &sp;
    pkv_engine *e = NULL;
    CHECK_ERR(NULL, pkv_engine_create(&p, &e),
              ranks == PKV_RANKS_ONE ? PKV_ERR_UNSUPPORTED : PKV_ERR_INVALID_ARGUMENT);
    CHECK(e == NULL && strstr(pkv_last_error(), "store") != NULL);
  }
}

/* The last byte of every value of a FILE store's directory: the last rank's slice of each
 * block (a value holds every rank's slice in rank order). */
static int damage_last_byte(const char *path, const struct stat *st, int kind, struct FTW *f) {
  (void)f;
  const size_t n = strlen(path);
  if (kind != FTW_F || n < 4 || strcmp(path + n - 4, ".blk") != 0 || st->st_size < 1) return 0;
  FILE *file = fopen(path, "r+b");
  if (!file) return 1;
  fseek(file, -1, SEEK_END);
  const int c = fgetc(file);
  fseek(file, -1, SEEK_END);
  fputc(c ^ 0x5a, file);
  fclose(file);
  return 0;
}

static int remove_blocks(const char *path, const struct stat *st, int kind, struct FTW *f) {
  (void)st, (void)f;
  const size_t n = strlen(path);
  return kind == FTW_F && n > 4 && strcmp(path + n - 4, ".blk") == 0 ? remove(path) : 0;
}

static int remove_entry(const char *path, const struct stat *st, int kind, struct FTW *f) {
  (void)st, (void)kind, (void)f;
  return remove(path);
}

/* The replicated mode (one engine of ranks ONE per rank, each making the same calls) is kept
 * where nothing can make its ranks differ: a store is refused (store_refused), and so is a
 * retention deadline, which each rank's engine would measure on its own clock. */
static void replicated(void) {
  pkv_engine *e = make_rank(tp, PKV_RANKS_ONE, tp - 1, pp - 1);
  int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.cache_priority = 2, sp.cache_retention_ms = 500;
  uint64_t s = 0;
  CHECK_ERR(e, pkv_allocate(e, t, 8, &sp, &s, NULL), PKV_ERR_UNSUPPORTED);
  CHECK(strstr(pkv_engine_last_error(e), "own clock") != NULL);
  CHECK_ERR(e, pkv_cache_set_priority(e, t, 8, NULL, 2, 500, NULL), PKV_ERR_UNSUPPORTED);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 4, rp.cache_retention_ms = 500;
  CHECK_ERR(e, pkv_submit(e, t, 8, &rp, &s), PKV_ERR_UNSUPPORTED);
  pkv_stats st;
  st.struct_size = sizeof st;
  CHECK_OK(pkv_engine_stats(e, &st));
  CHECK(st.num_seqs == 0);   /* nothing was made */
  sp.cache_retention_ms = 0; /* a priority without a deadline is the same on every rank */
  CHECK_OK(pkv_allocate(e, t, 8, &sp, &s, NULL));
  CHECK_OK(pkv_cache_set_priority(e, t, 8, NULL, 2, 0, NULL));
  /* An engine of every rank reads one clock for all: a deadline is fine there. */
  sp.cache_retention_ms = 500;
  uint64_t s2 = 0;
  CHECK_OK(pkv_allocate(all, t, 8, &sp, &s2, NULL));
  CHECK_OK(pkv_release(all, s2));
  pkv_engine_destroy(e);
}

/* A store below the host tier of an engine of every rank: its values hold every rank's slice.
 * A prompt written through by one pair of engines hits in the next pair (every shard's bytes as
 * the one-rank engine's); with the last rank's slice of every value damaged, every rank misses
 * together and computes the prompt again. */
static void store_scenario(void) {
  char d1[] = "/tmp/pkv-ranks-1-XXXXXX", dt[] = "/tmp/pkv-ranks-t-XXXXXX";
  if (!CHECK(mkdtemp(d1) && mkdtemp(dt))) return;
  pkv_engine *saved_one = one, *saved_all = all;
  pkv_store_params s1, st;
  pkv_store_params_init(&s1, sizeof s1);
  s1.kind = PKV_STORE_FILE, s1.path = d1;
  st = s1, st.path = dt;
  int32_t prompt_tokens[24];
  prompt(prompt_tokens, 24, 900);
  for (int round = 0; round < 4; ++round) {
    if (round == 2) { /* the last rank's slices damaged, and the one-rank engine's values */
      CHECK(nftw(dt, damage_last_byte, 8, FTW_PHYS) == 0);
      CHECK(nftw(d1, damage_last_byte, 8, FTW_PHYS) == 0);
    }
    if (round == 3) { /* round 2's values, written again, deleted */
      CHECK(nftw(dt, remove_blocks, 8, FTW_PHYS) == 0);
      CHECK(nftw(d1, remove_blocks, 8, FTW_PHYS) == 0);
    }
    store = &s1;
    one = make(1, PKV_RANKS_ONE);
    store = &st;
    all = make(tp, PKV_RANKS_ALL);
    store = NULL;
    if (kv_dtype) set_scales();
    uint32_t cached = 0;
    const uint64_t s = allocate(prompt_tokens, 24, &cached);
    CHECK(cached == (round == 1 ? 20u : 0u));
    step(&s, 1);
    pkv_stats a, b;
    a.struct_size = b.struct_size = sizeof a;
    CHECK_OK(pkv_engine_stats(one, &a));
    CHECK_OK(pkv_engine_stats(all, &b));
    CHECK(a.store_hit_tokens == b.store_hit_tokens && b.store_hit_tokens == cached);
    if (round == 2) CHECK(b.num_store_rejected > 0);
    if (round == 3) CHECK(b.num_store_misses > 0 && b.num_store_rejected == 0);
    BOTH(pkv_release(one, s), pkv_release(all, s));
    pkv_engine_destroy(one); /* the writers finish their queued writes */
    pkv_engine_destroy(all);
  }
  one = saved_one, all = saved_all;
  nftw(d1, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  nftw(dt, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int main(int argc, char **argv) {
  const char *config = argc > 1 ? argv[1] : "tp2";
  if (!strncmp(config, "procs_", 6)) procs = 1, config += 6;
  pp = 1;
  if (!strcmp(config, "tp2"))
    tp = 2;
  else if (!strcmp(config, "tp4"))
    tp = 4;
  else if (!strcmp(config, "tp8kv"))
    tp = 8;
  else if (!strcmp(config, "fp8"))
    tp = 2, kv_dtype = PKV_DTYPE_FP8_E4M3;
  else if (!strcmp(config, "pp2"))
    tp = 1, pp = 2;
  else if (!strcmp(config, "pp3"))
    tp = 1, pp = 3;
  else if (!strcmp(config, "tp2pp2"))
    tp = 2, pp = 2;
  else if (!strcmp(config, "fp8pp2"))
    tp = 2, pp = 2, kv_dtype = PKV_DTYPE_FP8_E4M3;
  else {
    fprintf(stderr,
            "test_ranks: unknown config %s (tp2, tp4, tp8kv, fp8, pp2, pp3, tp2pp2, fp8pp2)\n",
            config);
    return 2;
  }
  /* The children first: a process with no engine's threads yet forks cleanly. */
  if (procs) rp_start(tp * pp, make_pool);
  one = make(1, PKV_RANKS_ONE);
  all = procs ? make_rank(tp, PKV_RANKS_ONE, 0, 0) : make(tp, PKV_RANKS_ALL);
  if (kv_dtype) set_scales();
  TU_RUN(scenario);
  if (procs) {
    CHECK(rp_stop());
    TU_RUN(plan_refusals);
  } else {
    TU_RUN(refusals);
  }
  TU_RUN(profile);
  TU_RUN(store_refused);
  if (!procs) TU_RUN(store_scenario);
  if (!procs && tp * pp > 1) TU_RUN(replicated);
  pkv_engine_destroy(one);
  pkv_engine_destroy(all);
  free(plans[0]), free(plans[1]);
  return tu_summary();
}
