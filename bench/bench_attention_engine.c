/*
 * bench_attention_engine.c - the CPU attention bench's engines (see bench_attention_engine.h).
 */
#include "bench_attention_engine.h"

#include <stdlib.h>
#include <string.h>

#include "bench_util.h"

static int make_engine(bench_run *r, const kv_kind *kind, bench_shape sh, uint32_t layers,
                       uint32_t threads, uint64_t num_blocks) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = layers, p.num_q_heads = sh.q_heads, p.num_kv_heads = sh.kv_heads;
  p.head_dim = sh.head_dim, p.sliding_window = sh.window;
  p.dtype = kind->dtype, p.kv_dtype = kind->kv_dtype;
  p.device = PKV_DEVICE_CPU, p.block_size = BENCH_BLOCK_SIZE;
  p.num_blocks = (uint32_t)num_blocks, p.num_threads = threads, p.enable_prefix_caching = 0;
  if (sh.kv_lora_rank) { /* DeepSeek's scale without yarn: 1/sqrt(qk_nope 128 + qk_rope 64) */
    p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = sh.kv_lora_rank;
    p.qk_rope_head_dim = sh.head_dim - sh.kv_lora_rank, p.softmax_scale = 0.0722f;
  }
  r->layers = layers;
  r->elt = kind->dtype == PKV_DTYPE_F32 ? 4 : 2;
  r->kv_elt = kind->kv_dtype ? 1 : r->elt;
  const pkv_status s = pkv_engine_create(&p, &r->e);
  return s == PKV_OK ? 0 : bench_fail(NULL, "pkv_engine_create", s);
}

/* Small random values of the dtype (bf16 or f16 bits), so no lane is a NaN or a denormal. */
static void fill_values(uint16_t *dst, size_t n, int32_t dtype, uint64_t *state) {
  for (size_t i = 0; i < n; i++) {
    const uint16_t mant = (uint16_t)(bench_next(state) & (dtype == PKV_DTYPE_BF16 ? 0x7f : 0x3ff));
    const uint16_t sign = (uint16_t)((i & 1) << 15);
    dst[i] = (uint16_t)(sign | (dtype == PKV_DTYPE_BF16 ? 0x3e00 : 0x3000) | mant); /* ~0.1..0.25 */
  }
}

/* Random fp8 codes of moderate values (e4m3: 2^-4 .. 2^3; no NaN). */
static void fill_codes(uint8_t *dst, size_t n, uint64_t *state) {
  for (size_t i = 0; i < n; i++)
    dst[i] = (uint8_t)(((i & 1) << 7) | (0x18 + bench_next(state) % 0x38));
}

/* Every block of every layer the same random contents: cheap to write, and the reads stay real
 * (the pool is far larger than the caches). Also reads the kernel variant. */
static int fill_pool(bench_run *r, int32_t dtype, int write, uint64_t *state) {
  struct pkv_pool_info pool;
  memset(&pool, 0, sizeof pool);
  pool.struct_size = sizeof pool;
  const pkv_status ps = pkv_pool_info(r->e, &pool);
  if (ps != PKV_OK) return bench_fail(r->e, "pkv_pool_info", ps);
  r->kernels = pool.kernels ? pool.kernels : "?";
  const size_t block_bytes = pool.block_stride * r->kv_elt;
  uint16_t *block = write ? malloc(block_bytes) : NULL;
  if (!block) return write ? -1 : 0;
  if (r->kv_elt == 1)
    fill_codes((uint8_t *)block, block_bytes, state);
  else
    fill_values(block, pool.block_stride, dtype, state);
  const uint64_t blocks = (uint64_t)pool.num_layers * pool.num_blocks;
  for (uint64_t blk = 0; blk < blocks; blk++) {
    memcpy((char *)pool.k_base + blk * block_bytes, block, block_bytes);
    if (pool.v_base) /* MLA: the latents alone */
      memcpy((char *)pool.v_base + blk * block_bytes, block, block_bytes);
  }
  free(block);
  return 0;
}

int bench_run_open(bench_run *r, const kv_kind *kind, bench_shape sh, uint32_t layers,
                   uint32_t threads, uint64_t num_blocks, uint32_t num_seqs, uint32_t ctx,
                   int decode) {
  uint64_t ids[BENCH_MAX_SEQS], state = 7;
  memset(r, 0, sizeof *r);
  int32_t *tokens = malloc(sizeof(int32_t) * ((size_t)ctx + 1));
  if (!tokens || num_seqs > BENCH_MAX_SEQS || make_engine(r, kind, sh, layers, threads, num_blocks))
    return free(tokens), -1;
  for (uint32_t i = 0; i <= ctx; i++) tokens[i] = bench_token(&state);
  pkv_status st = PKV_OK;
  for (uint32_t s = 0; st == PKV_OK && s < num_seqs; s++)
    st = pkv_allocate(r->e, tokens, ctx, NULL, &ids[s], NULL);
  if (st != PKV_OK || fill_pool(r, kind->dtype, decode, &state) != 0)
    return free(tokens), st != PKV_OK ? bench_fail(r->e, "pkv_allocate", st) : -1;
  st = bench_open_batch(r->e, ids, num_seqs, tokens + ctx, decode, &r->b);
  free(tokens);
  if (st != PKV_OK) return bench_fail(r->e, "building the batch", st);
  const size_t rows = decode ? num_seqs : (size_t)num_seqs * ctx;
  const size_t q_elts = rows * sh.q_heads * sh.head_dim, kv_elts = rows * sh.kv_heads * sh.head_dim;
  r->q = malloc(q_elts * r->elt), r->out = malloc(q_elts * r->elt);
  r->k = malloc(kv_elts * r->elt), r->v = sh.kv_lora_rank ? NULL : malloc(kv_elts * r->elt);
  if (!r->q || !r->out || !r->k || (!r->v && !sh.kv_lora_rank)) return -1;
  fill_values(r->q, q_elts, kind->dtype, &state);
  fill_values(r->k, kv_elts, kind->dtype, &state);
  if (r->v) fill_values(r->v, kv_elts, kind->dtype, &state);
  return 0;
}

void bench_run_close(bench_run *r) {
  pkv_batch_abort(r->b);
  pkv_engine_destroy(r->e);
  free(r->q), free(r->k), free(r->v), free(r->out);
  memset(r, 0, sizeof *r);
}

const char *bench_kernels(void) {
  static const kv_kind bf16 = {"bf16", PKV_DTYPE_BF16, 0};
  bench_run r;
  uint64_t state = 1;
  memset(&r, 0, sizeof r);
  const int ok = make_engine(&r, &bf16, (bench_shape){1, 1, 64, 0, 0}, 1, 1, 1) == 0 &&
                 fill_pool(&r, bf16.dtype, 0, &state) == 0;
  const char *kernels = r.kernels;
  bench_run_close(&r);
  return ok ? kernels : NULL;
}

int bench_run_step(void *arg) {
  bench_run *r = arg;
  for (uint32_t l = 0; l < r->layers; l++) {
    const pkv_status s = pkv_attention(r->b, l, r->q, r->k, r->v, r->out);
    if (s != PKV_OK) return bench_fail(r->e, "pkv_attention", s);
  }
  return 0;
}
