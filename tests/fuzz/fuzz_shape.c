/*
 * fuzz_shape.c - libFuzzer harness for extreme shapes: every shape field drawn from
 * {0, 1, 2, small, 2^31-1, 2^31, 2^32-1, 2^k, 2^k-1, raw}, or powers of two whose product is
 * near 2^64 (so an unchecked block_bytes or pool_bytes would wrap), with budgets from 0 to
 * 2^64-1. pkv_profile must never crash, and:
 *   - PKV_OK / PKV_ERR_OUT_OF_MEMORY: every term is the header's formula, computed here in
 *     128-bit arithmetic, and the pool fits in 2^63-1 bytes (K and V);
 *   - any other failure is PKV_ERR_INVALID_ARGUMENT with a message and *out untouched, and
 *     never for a shape that the header's rules allow and whose pool can be represented.
 * A small profiled pool (CPU, kv_cache_bytes or num_blocks) is created: pkv_pool_info is the
 * formula, and the first and last byte of K and V can be written. A quarter of the shapes are
 * MLA latents (kv_layout MLA: one tensor, no V), some breaking its rules (kv heads, widths).
 */
#include "fuzz_util.h"

typedef unsigned __int128 u128;

#define I64_MAX 0x7fffffffffffffffull
#define FZ_MAX_CREATE_BYTES (64ull << 20)

static uint32_t pick_u32(fz_input *in) {
  switch (fz_pick(in, 11)) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return 2;
    case 3:
      return 1 + fz_pick(in, 64);
    case 4:
      return INT32_MAX;
    case 5:
      return 1u << 31;
    case 6:
      return UINT32_MAX;
    case 7:
      return 1u << fz_pick(in, 32);
    case 8:
      return (1u << fz_pick(in, 32)) - 1;
    case 9:
      return 1 + fz_pick(in, 4);
    default:
      return fz_u32(in);
  }
}

static uint64_t pick_u64(fz_input *in) {
  switch (fz_pick(in, 9)) {
    case 0:
      return 0;
    case 1:
      return (uint64_t)(1 + fz_pick(in, 64)) << 20;
    case 2:
      return I64_MAX;
    case 3:
      return I64_MAX + 1;
    case 4:
      return UINT64_MAX;
    case 5:
      return 1ull << fz_pick(in, 64);
    case 6:
      return (1ull << fz_pick(in, 64)) - 1;
    case 7:
      return fz_u32(in);
    default:
      return fz_u64(in);
  }
}

/* Powers of two whose product 2 x layers x block_size x kv_heads x head_dim x dtype bytes is
 * 2^62 .. 2^66: right at the int64 and uint64 edges. */
static void wrap_shape(fz_input *in, pkv_engine_params *p) {
  int left = 61 + (int)fz_pick(in, 5) - (p->dtype == PKV_DTYPE_F32 ? 2 : 1);
  const int cap_bs = 20, cap_hd = 10;
  int bs = (int)fz_pick(in, cap_bs + 1), hd = (int)fz_pick(in, cap_hd + 1);
  bs = bs < left ? bs : left, left -= bs;
  hd = hd < left ? hd : left, left -= hd;
  int kv = left > 31 ? (int)fz_pick(in, 32) : (int)fz_pick(in, (uint32_t)left + 1);
  kv = kv < left ? kv : left, left -= kv;
  int layers = left > 31 ? 31 : left;
  p->block_size = 1u << bs;
  p->head_dim = 1u << hd;
  p->num_kv_heads = p->num_q_heads = 1u << kv;
  p->num_layers = 1u << layers;
  if (fz_pick(in, 4) == 0 && p->num_layers > 1) p->num_layers -= 1; /* just under a power */
}

static void fuzz_params(fz_input *in, pkv_engine_params *p) {
  FZ_CHECK(pkv_engine_params_init(p, sizeof *p) == PKV_OK, "params_init");
  p->device = PKV_DEVICE_CPU;
  p->num_threads = 1;
  p->dtype = (int32_t)fz_pick(in, 4); /* 3: not a dtype */
  if (fz_pick(in, 3) == 0) {
    wrap_shape(in, p);
  } else {
    static const uint32_t dims[] = {1, 2, 8, 64, 128, 1023, 1024, 1025};
    p->num_layers = pick_u32(in);
    p->num_kv_heads = pick_u32(in);
    uint32_t mult = 1 + fz_pick(in, 4);
    p->num_q_heads = fz_pick(in, 4) == 0                              ? pick_u32(in)
                     : (uint64_t)p->num_kv_heads * mult <= UINT32_MAX ? p->num_kv_heads * mult
                                                                      : p->num_kv_heads;
    p->head_dim = fz_pick(in, 2) ? dims[fz_pick(in, 8)] : pick_u32(in);
    p->block_size = fz_pick(in, 2) ? 1u << fz_pick(in, 21) : pick_u32(in);
  }
  if (fz_pick(in, 4) == 0) {
    p->tp_size = pick_u32(in);
    p->tp_rank = fz_pick(in, 2) ? 0 : p->tp_size - 1;
  }
  p->max_model_len = fz_pick(in, 2) ? 0 : pick_u32(in);
  p->num_blocks = fz_pick(in, 3) ? 0 : pick_u32(in);
  p->kv_cache_bytes = fz_pick(in, 2) ? 0 : pick_u64(in);
  p->memory_total_bytes = fz_pick(in, 16) ? pick_u64(in) : 0; /* 0: measure the host */
  p->memory_used_bytes = fz_pick(in, 2) ? 0 : pick_u64(in);
  p->reserve_bytes = fz_pick(in, 2) ? 0 : pick_u64(in);
  static const double utils[] = {1.0, 0.9, 0.5, 1e-9};
  p->memory_utilization = utils[fz_pick(in, 4)];
  if (fz_pick(in, 4) == 0) { /* an MLA latent: the rules hold for most of them */
    p->kv_layout = fz_pick(in, 16) ? PKV_KV_LAYOUT_MLA : 2 + fz_pick(in, 4);
    p->qk_rope_head_dim = fz_pick(in, 2) ? 64 : pick_u32(in);
    p->kv_lora_rank = p->head_dim > p->qk_rope_head_dim && fz_pick(in, 8)
                          ? p->head_dim - p->qk_rope_head_dim
                          : pick_u32(in);
    if (fz_pick(in, 8)) p->num_kv_heads = 1;
    if (p->num_kv_heads && p->num_q_heads % p->num_kv_heads) p->num_q_heads = p->num_kv_heads;
    p->softmax_scale = 0.1f; /* an engine over the latent needs MLA's scale */
  } else if (fz_pick(in, 32) == 0) {
    p->kv_lora_rank = pick_u32(in); /* latent fields without the layout: refused */
  }
}

/* The header's rules for the fields fuzzed here (pkv_engine_params). */
static int rules_hold(const pkv_engine_params *p) {
  return p->num_layers > 0 && p->num_q_heads > 0 && p->num_kv_heads > 0 &&
         p->num_q_heads % p->num_kv_heads == 0 && p->head_dim >= 1 && p->head_dim <= 1024 &&
         p->dtype >= PKV_DTYPE_F32 && p->dtype <= PKV_DTYPE_BF16 && p->tp_size > 0 &&
         p->tp_rank < p->tp_size && p->num_q_heads % p->tp_size == 0 &&
         (p->num_kv_heads % p->tp_size == 0 || p->tp_size % p->num_kv_heads == 0) &&
         p->block_size >= 1 && p->block_size <= (1u << 20) && p->num_blocks <= INT32_MAX &&
         (p->kv_layout == PKV_KV_LAYOUT_MLA
              ? p->num_kv_heads == 1 && p->kv_lora_rank >= 1 &&
                    (uint64_t)p->kv_lora_rank + p->qk_rope_head_dim == p->head_dim
              : p->kv_layout == PKV_KV_LAYOUT_HEADS && p->kv_lora_rank == 0 &&
                    p->qk_rope_head_dim == 0);
}

typedef struct {
  u128 block_bytes; /* the header's formula, in 128 bits */
  uint64_t kv_heads, max_blocks, blocks_per_max_seq;
} expect_t;

static expect_t expected(const pkv_engine_params *p) {
  expect_t x;
  x.kv_heads = p->num_kv_heads / p->tp_size ? p->num_kv_heads / p->tp_size : 1;
  const uint64_t db = p->dtype == PKV_DTYPE_F32 ? 4 : 2;
  const uint64_t tensors =
      p->kv_layout == PKV_KV_LAYOUT_MLA ? 1 : 2; /* the latent alone, or K and V */
  x.block_bytes = (u128)tensors * p->num_layers * p->block_size * x.kv_heads * p->head_dim * db;
  x.max_blocks = 0;
  if (x.block_bytes <= I64_MAX) {
    uint64_t by_bytes = I64_MAX / (uint64_t)x.block_bytes;
    x.max_blocks = by_bytes < INT32_MAX ? by_bytes : INT32_MAX;
  }
  x.blocks_per_max_seq =
      p->max_model_len ? ((uint64_t)p->max_model_len + p->block_size - 1) / p->block_size : 1;
  return x;
}

/* A shape the rules allow whose pool can be represented must not be refused as invalid (a fixed
 * num_blocks too small for max_model_len is; refusals of budget terms past 2^62 are left out:
 * the harness does not model them). */
static int must_not_refuse(const pkv_engine_params *p, const expect_t *x) {
  return rules_hold(p) && x->block_bytes <= I64_MAX &&
         (p->num_blocks == 0 || ((u128)p->num_blocks * x->block_bytes <= I64_MAX &&
                                 p->num_blocks >= x->blocks_per_max_seq)) &&
         x->blocks_per_max_seq <= x->max_blocks && p->memory_total_bytes != 0 &&
         p->memory_used_bytes <= (1ull << 62) && p->reserve_bytes <= (1ull << 62);
}

static void check_budget(const pkv_engine_params *p, const expect_t *x, const pkv_kv_budget *b,
                         pkv_status s) {
  FZ_CHECK(b->block_bytes == x->block_bytes && x->block_bytes <= I64_MAX, "block_bytes %llu",
           (unsigned long long)b->block_bytes);
  FZ_CHECK(b->kv_heads_per_rank == x->kv_heads, "kv_heads_per_rank");
  FZ_CHECK(b->bytes_per_token * p->block_size == b->block_bytes, "bytes_per_token");
  FZ_CHECK(b->num_blocks <= x->max_blocks, "num_blocks %llu past the largest pool %llu",
           (unsigned long long)b->num_blocks, (unsigned long long)x->max_blocks);
  FZ_CHECK((u128)b->pool_bytes == (u128)b->num_blocks * x->block_bytes && b->pool_bytes <= I64_MAX,
           "pool_bytes");
  FZ_CHECK((u128)b->max_tokens == (u128)b->num_blocks * p->block_size, "max_tokens");
  FZ_CHECK(b->blocks_per_max_seq == x->blocks_per_max_seq, "blocks_per_max_seq");
  FZ_CHECK(b->max_seqs_at_max_model_len == b->num_blocks / x->blocks_per_max_seq, "max_seqs");
  if (p->num_blocks)
    FZ_CHECK(b->num_blocks == p->num_blocks && b->source == PKV_BUDGET_FIXED_BLOCKS, "fixed");
  else if (p->kv_cache_bytes) {
    uint64_t fit = p->kv_cache_bytes / (uint64_t)x->block_bytes;
    FZ_CHECK(b->num_blocks == (fit < x->max_blocks ? fit : x->max_blocks), "blocks of a byte cap");
  }
  FZ_CHECK((s == PKV_OK) == (b->num_blocks >= x->blocks_per_max_seq), "status %d for %llu blocks",
           s, (unsigned long long)b->num_blocks);
  FZ_CHECK((s == PKV_OK) == (b->shortfall_bytes == 0), "shortfall %llu with status %d",
           (unsigned long long)b->shortfall_bytes, s);
}

/* A small pool is created: pkv_pool_info is the formula, and all of K and V is there. */
static void check_engine(const pkv_engine_params *p, const expect_t *x, const pkv_kv_budget *b) {
  pkv_engine *e = NULL;
  pkv_status s = pkv_engine_create(p, &e);
  FZ_CHECK(s == PKV_OK, "create of a profiled %llu-byte CPU pool: %d",
           (unsigned long long)b->pool_bytes, s);
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  FZ_CHECK(pkv_pool_info(e, &info) == PKV_OK, "pool_info");
  const uint64_t db = p->dtype == PKV_DTYPE_F32 ? 4 : 2;
  FZ_CHECK(info.num_blocks == b->num_blocks && info.kv_heads == x->kv_heads, "pool counts");
  FZ_CHECK(info.head_stride == p->head_dim && info.token_stride == x->kv_heads * p->head_dim &&
               info.block_stride == p->block_size * info.token_stride &&
               info.layer_stride == info.num_blocks * info.block_stride &&
               info.bytes_per_pool == p->num_layers * info.layer_stride * db,
           "pool_info strides");
  const int mla = p->kv_layout == PKV_KV_LAYOUT_MLA;
  FZ_CHECK((mla ? 1 : 2) * info.bytes_per_pool == b->pool_bytes,
           "bytes_per_pool %llu, pool_bytes %llu", (unsigned long long)info.bytes_per_pool,
           (unsigned long long)b->pool_bytes);
  FZ_CHECK(b->kv_layout == p->kv_layout && (info.v_base == NULL) == mla, "an MLA pool has no V");
  char *k = info.k_base, *v = info.v_base;
  k[0] = k[info.bytes_per_pool - 1] = 1;
  if (v) v[0] = v[info.bytes_per_pool - 1] = 1;
  pkv_engine_destroy(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_input in = {data, size};
  pkv_engine_params p;
  fuzz_params(&in, &p);
  pkv_kv_budget b, before;
  memset(&b, 0x5a, sizeof b);
  b.struct_size = sizeof b;
  memcpy(&before, &b, sizeof b);
  pkv_status s = pkv_profile(&p, &b);
  if (s != PKV_OK && s != PKV_ERR_OUT_OF_MEMORY) {
    FZ_CHECK(s == PKV_ERR_INVALID_ARGUMENT, "status %d", s);
    FZ_CHECK(pkv_last_error()[0] != '\0', "no message");
    if (memcmp(&b, &before, sizeof b) != 0) {
      /* Only a fixed num_blocks too small for max_model_len fills *out (every term, as for
       * PKV_ERR_OUT_OF_MEMORY), and then every term must be right. */
      FZ_CHECK(rules_hold(&p) && p.num_blocks != 0, "*out written by a refusal");
      const expect_t x = expected(&p);
      FZ_CHECK(p.num_blocks < x.blocks_per_max_seq, "*out written by a refusal");
      check_budget(&p, &x, &b, s);
      return 0;
    }
    if (rules_hold(&p)) {
      const expect_t x = expected(&p);
      FZ_CHECK(!must_not_refuse(&p, &x), "a representable shape refused");
    }
    return 0;
  }
  FZ_CHECK(rules_hold(&p), "a shape against the header's rules accepted (status %d)", s);
  const expect_t x = expected(&p);
  check_budget(&p, &x, &b, s);
  if (s == PKV_OK && b.pool_bytes <= FZ_MAX_CREATE_BYTES && b.num_blocks <= 65536 &&
      (p.kv_cache_bytes || p.num_blocks))
    check_engine(&p, &x, &b);
  return 0;
}
