/* test_sparse_attention's harness: see test_sparse_attention_world.h. */
#include "test_sparse_attention_world.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "indexer_ref.h"
#include "kv_world.h"

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull; /* splitmix64 */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The hash of one value: (sequence seed, position, layer, what, index). */
static uint64_t hash_of(uint64_t seed, uint32_t pos, uint32_t layer, uint32_t what, uint32_t i) {
  return mix(mix(seed * 0x100000001b3ull + pos) ^
             ((uint64_t)layer << 56 | (uint64_t)what << 40 | i));
}

static double unit(uint64_t h) { return (double)(h >> 11) * (1.0 / 9007199254740992.0) * 2 - 1; }

enum { WHAT_KEY = 1, WHAT_QIDX, WHAT_WEIGHT, WHAT_Q, WHAT_LATENT, WHAT_PROTO };

/* An exact key (see the test's top): c_i * 2^m, c_i in -7 .. 7, one of them +-7 (codes c_i *
 * 64); a sixth of the values halfway between two e4m3 codes (y * 2^(m-6): the code of even
 * mantissa is kept). Half the tokens take one of 10 prototypes of their sequence: their scores
 * tie. */
static void exact_key(uint64_t seed, uint32_t pos, uint32_t l, uint32_t dim, double *x) {
  static const double halfway[8] = {272, 304, 336, 432, 8.5, 9.5, 4.25, 0.53125};
  const uint64_t h = hash_of(seed, pos, l, WHAT_KEY, 0);
  const uint64_t src = h & 1 ? hash_of(seed, 0, l, WHAT_PROTO, (uint32_t)(h >> 1) % 10) : h;
  const int m = (int)(src % 5) - 3;
  for (uint32_t i = 0; i < dim; i++) {
    const uint64_t r = mix(src + i);
    x[i] = (r >> 20) % 6 ? ldexp((double)(int)(r % 15) - 7, m)
                         : ldexp(halfway[(r >> 8) % 8] * ((r >> 12) & 1 ? 1 : -1), m - 6);
  }
  x[(src >> 8) % dim] = ldexp((src >> 16) & 1 ? 7.0 : -7.0, m);
}

/* A random key: any scale (2^-4 .. 2^5), every 13th a key of zeros; every 7th value halfway
 * between two bf16 values (an f32 engine keeps it: bf16 keys round it to the even one). */
static void random_key(uint64_t seed, uint32_t pos, uint32_t l, uint32_t dim, double *x) {
  const uint64_t h = hash_of(seed, pos, l, WHAT_KEY, 0);
  const double amp = ldexp(1.5 + unit(h >> 3) / 2, (int)(h % 9) - 4);
  for (uint32_t i = 0; i < dim; i++) {
    float f = pos % 13 == 4 ? 0.0f : (float)(amp * unit(hash_of(seed, pos, l, WHAT_KEY, i + 1)));
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if (i % 7 == 3 && f != 0.0f) bits = (bits & 0xffff0000u) | 0x8000u;
    memcpy(&f, &bits, 4);
    x[i] = f;
  }
}

int sa_init(sa_world *w, const sa_config *c) {
  memset(w, 0, sizeof *w);
  w->c = *c;
  const int32_t other = c->index_dtype == PKV_DTYPE_BF16 ? PKV_DTYPE_FP8_E4M3 : PKV_DTYPE_BF16;
  w->layers[0] = (sa_layer){64, 4, 64, c->index_dtype};
  w->layers[1] = (sa_layer){16, 3, 40, other};
  w->atol = c->dtype == PKV_DTYPE_F32 ? 2e-5 : c->dtype == PKV_DTYPE_F16 ? 2e-3 : 1.6e-2;
  w->rtol = w->atol;
  pkv_layer_spec specs[SA_LAYERS];
  memset(specs, 0, sizeof specs);
  for (uint32_t l = 0; l < SA_LAYERS; l++) {
    specs[l].kind = PKV_LAYER_MLA;
    specs[l].index_head_dim = w->layers[l].dim;
    specs[l].index_dtype = (uint32_t)w->layers[l].index_dtype;
    specs[l].index_n_heads = w->layers[l].heads;
    specs[l].index_topk = w->layers[l].topk;
  }
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = SA_LAYERS, p.num_q_heads = SA_HEADS, p.num_kv_heads = 1;
  p.head_dim = SA_WIDTH, p.dtype = c->dtype, p.block_size = c->block_size;
  p.num_blocks = 2 * SA_MAX_SEQS * SA_CAP / c->block_size, p.device = PKV_DEVICE_CPU;
  p.num_threads = 2; /* a lone decode splits its keys over them */
  p.softmax_scale = 0.15f, p.kv_layout = PKV_KV_LAYOUT_MLA;
  p.kv_lora_rank = SA_RANK, p.qk_rope_head_dim = SA_ROPE;
  p.layer_specs = specs, p.layer_spec_size = sizeof specs[0];
  p.kv_dtype = c->kv_dtype;
  if (!CHECK_OK(pkv_engine_create(&p, &w->e))) return 0;
  for (uint32_t l = 0; l < SA_LAYERS && c->kv_dtype; l++) {
    w->kv_scale[l] = l ? 0.004f : 0.125f; /* values in [-1, 1]: codes up to 250, or 8 */
    if (!CHECK_OK(pkv_set_kv_scales(w->e, l, &w->kv_scale[l], NULL))) return 0;
  }
  return 1;
}

void sa_free(sa_world *w) {
  for (int i = 0; i < SA_MAX_SEQS; i++)
    for (int l = 0; l < SA_LAYERS; l++) {
      free(w->seqs[i].latent[l]), free(w->seqs[i].key[l]);
      free(w->seqs[i].cached[l]), free(w->seqs[i].scale[l]);
    }
  pkv_engine_destroy(w->e);
  memset(w, 0, sizeof *w);
}

static int32_t token_of(uint64_t seed, uint32_t i) {
  return (int32_t)(1 + mix(seed * 31 + i) % 30000);
}

int sa_alloc(sa_world *w, uint32_t n, int kind, uint64_t seed) {
  int s = 0;
  while (s < SA_MAX_SEQS && w->seqs[s].id) s++;
  if (!CHECK(s < SA_MAX_SEQS && n <= SA_CAP)) return -1;
  int32_t *tokens = malloc(sizeof(int32_t) * n);
  for (uint32_t i = 0; i < n; i++) tokens[i] = token_of(seed, i);
  sa_seq *q = &w->seqs[s];
  const int ok = CHECK_OK(pkv_allocate(w->e, tokens, n, NULL, &q->id, NULL));
  free(tokens);
  if (!ok) return -1;
  q->kind = kind, q->seed = seed, q->num_tokens = n, q->num_computed = 0;
  for (int l = 0; l < SA_LAYERS; l++) {
    const uint32_t dim = w->layers[l].dim;
    q->latent[l] = calloc((size_t)SA_CAP * SA_WIDTH, sizeof(double));
    q->key[l] = calloc((size_t)SA_CAP * dim, sizeof(double));
    q->cached[l] = calloc((size_t)SA_CAP * dim, 2);
    q->scale[l] = calloc(SA_CAP, sizeof(float));
  }
  return s;
}

int sa_append(sa_world *w, int s, uint32_t n) {
  sa_seq *q = &w->seqs[s];
  if (!CHECK(q->num_tokens + n <= SA_CAP)) return 0;
  int32_t tokens[8];
  for (uint32_t i = 0; i < n && i < 8; i++) tokens[i] = token_of(q->seed, q->num_tokens + i);
  if (!CHECK(n <= 8) || !CHECK_OK(pkv_append(w->e, q->id, tokens, n))) return 0;
  q->num_tokens += n;
  return 1;
}

/* One batch's buffers, [num_tokens] rows each. */
typedef struct sa_bufs {
  void *kidx, *qidx, *q, *lat, *out, *dense;
  float *weights;
  int32_t *pos, *slots, *ref;
  double *scores, *qd, *wd, *got, *want;
} sa_bufs;

/* Token t's inputs on layer l (seq q at position p), rounded to the engine's dtype, and the
 * cache as the reference has it after this step: q's latent, key values and key bytes. */
static void fill_token(sa_world *w, sa_bufs *u, sa_seq *q, uint32_t l, uint32_t t, uint32_t p) {
  const sa_layer *L = &w->layers[l];
  const int32_t dt = w->c.dtype;
  double x[PKV_INDEXER_MAX_HEAD_DIM];
  float xf[PKV_INDEXER_MAX_HEAD_DIM];
  if (q->kind == SA_EXACT)
    exact_key(q->seed, p, l, L->dim, x);
  else
    random_key(q->seed, p, l, L->dim, x);
  if (q->kind == SA_EXACT && q->seed == 11 && p == 3 && l == 0) x[0] = NAN; /* ranks last */
  for (uint32_t i = 0; i < L->dim; i++)
    xf[i] = (float)kw_store(dt, x[i], u->kidx, (size_t)t * L->dim + i);
  uint8_t *bytes = q->cached[l] + (size_t)p * L->dim * 2;
  double *key = q->key[l] + (size_t)p * L->dim;
  if (L->index_dtype == PKV_DTYPE_BF16) {
    for (uint32_t i = 0; i < L->dim; i++) {
      const uint16_t b = pkv_ref_bf16_bits(xf[i]);
      memcpy(bytes + 2 * i, &b, 2);
    }
    pkv_ref_indexer_key_bf16((const uint16_t *)bytes, L->dim, key);
  } else {
    pkv_ref_indexer_quantize_fp8(xf, L->dim, (int)w->c.ue8m0, bytes, &q->scale[l][p]);
    pkv_ref_indexer_key_fp8(bytes, q->scale[l][p], L->dim, key);
  }
  const size_t qrow = (size_t)L->heads * L->dim;
  for (size_t i = 0; i < qrow; i++) {
    const uint64_t h = hash_of(q->seed, p, l, WHAT_QIDX, (uint32_t)i);
    const double v = q->kind == SA_EXACT ? (double)(int)(h % 7) - 3 : unit(h);
    kw_store(dt, v, u->qidx, (size_t)t * qrow + i);
  }
  static const float exact_w[4] = {-1.0f, 0.5f, 1.0f, 2.0f};
  for (uint32_t h = 0; h < L->heads; h++) {
    const uint64_t r = hash_of(q->seed, p, l, WHAT_WEIGHT, h);
    u->weights[(size_t)t * L->heads + h] = q->kind == SA_EXACT ? exact_w[r % 4] : (float)unit(r);
  }
  for (uint32_t i = 0; i < SA_HEADS * SA_WIDTH; i++)
    kw_store(dt, unit(hash_of(q->seed, p, l, WHAT_Q, i)), u->q,
             (size_t)t * SA_HEADS * SA_WIDTH + i);
  for (uint32_t i = 0; i < SA_WIDTH; i++) { /* the latent as the cache holds it */
    double v = kw_store(dt, unit(hash_of(q->seed, p, l, WHAT_LATENT, i)), u->lat,
                        (size_t)t * SA_WIDTH + i);
    if (w->c.kv_dtype) {
      const int e5m2 = w->c.kv_dtype == PKV_DTYPE_FP8_E5M2;
      const uint8_t code = pkv_ref_fp8_encode((float)v, w->kv_scale[l], e5m2);
      v = pkv_ref_fp8_decode(code, e5m2) * w->kv_scale[l];
    }
    q->latent[l][(size_t)p * SA_WIDTH + i] = v;
  }
}

/* The key bytes (and fp8 scale) of q's position p in the page of `slot`, as the reference's. */
static int check_key(const sa_world *w, const struct pkv_layer_info *li, const sa_seq *q,
                     uint32_t l, uint32_t p, int64_t slot) {
  const sa_layer *L = &w->layers[l];
  const uint64_t block = (uint64_t)slot / w->c.block_size, off = (uint64_t)slot % w->c.block_size;
  const size_t key_bytes = (size_t)L->dim * (L->index_dtype == PKV_DTYPE_BF16 ? 2 : 1);
  const char *page_key = (const char *)li->index_base + block * li->index_block_bytes;
  int ok =
      memcmp(page_key + off * key_bytes, q->cached[l] + (size_t)p * L->dim * 2, key_bytes) == 0;
  if (L->index_dtype != PKV_DTYPE_BF16) {
    const char *scale = (const char *)li->index_scale_base + block * li->index_block_bytes;
    ok = ok && memcmp(scale + 4 * off, &q->scale[l][p], 4) == 0;
  }
  if (!ok)
    fprintf(stderr, "  layer %u seq seed %llu position %u slot %lld: cached key differs\n", l,
            (unsigned long long)q->seed, p, (long long)slot);
  return CHECK(ok);
}

/* Counts the top-k rows the tie rule decided (a key left out scoring as the lowest kept one)
 * and those that left a NaN key out: the data must keep exercising both. */
static void count_ties(sa_world *w, const double *scores, const int32_t *kept_pos, uint32_t kept,
                       uint32_t n) {
  if (kept == n) return;
  double low = INFINITY;
  for (uint32_t i = 0; i < kept; i++)
    if (scores[kept_pos[i]] < low) low = scores[kept_pos[i]];
  int tie = 0, nan = 0;
  for (uint32_t s = 0, i = 0; s < n; s++) {
    if (i < kept && kept_pos[i] == (int32_t)s) {
      i++;
      continue;
    }
    tie |= scores[s] == low;
    nan |= isnan(scores[s]);
  }
  w->tie_rows += (uint32_t)tie;
  w->nan_rows += (uint32_t)nan;
}

/* Token t's top-k rows (positions and slots) against the reference's: equal for an exact
 * sequence; for a random one, a top-k of the fp64 scores up to fp32's rounding of them. */
static int check_topk(sa_world *w, sa_bufs *u, const sa_seq *q, uint32_t l, uint32_t t, uint32_t p,
                      const int32_t *table) {
  const sa_layer *L = &w->layers[l];
  const size_t qrow = (size_t)L->heads * L->dim;
  for (size_t i = 0; i < qrow; i++) u->qd[i] = kw_load(w->c.dtype, u->qidx, (size_t)t * qrow + i);
  for (uint32_t h = 0; h < L->heads; h++) u->wd[h] = u->weights[(size_t)t * L->heads + h];
  double top = 0.0;
  for (uint32_t s = 0; s <= p; s++) {
    u->scores[s] =
        pkv_ref_indexer_score(u->qd, u->wd, q->key[l] + (size_t)s * L->dim, L->heads, L->dim);
    if (fabs(u->scores[s]) > top) top = fabs(u->scores[s]);
  }
  const uint32_t kept = pkv_ref_topk(u->scores, p + 1, L->topk, u->ref);
  const int32_t *got = u->pos + (size_t)t * L->topk;
  int ok = 1;
  if (q->kind == SA_EXACT) {
    ok = memcmp(got, u->ref, sizeof(int32_t) * L->topk) == 0;
    count_ties(w, u->scores, u->ref, kept, p + 1);
  } else { /* the same count, ascending, then -1; no key left out scores above a kept one */
    double low = INFINITY, high = -INFINITY;
    uint32_t i = 0;
    for (uint32_t s = 0; s <= p; s++) {
      const int in = i < kept && got[i] == (int32_t)s;
      i += (uint32_t)in;
      const double v = isnan(u->scores[s]) ? -INFINITY : u->scores[s];
      if (in && v < low) low = v;
      if (!in && v > high) high = v;
    }
    ok = i == kept && (kept == L->topk || got[kept] == -1) && high <= low + 1e-5 * top;
    for (uint32_t j = kept; j < L->topk; j++) ok = ok && got[j] == -1;
  }
  pkv_ref_positions_to_slots(got, L->topk, table, w->c.block_size, u->ref);
  const int slots_ok = memcmp(u->slots + (size_t)t * L->topk, u->ref, 4 * L->topk) == 0;
  if (!ok || !slots_ok)
    fprintf(stderr, "  layer %u seq seed %llu position %u: top-k %s differ\n", l,
            (unsigned long long)q->seed, p, ok ? "slots" : "positions");
  return CHECK(ok && slots_ok);
}

/* Token t's sparse output against the reference over its kept positions; dense's equal to it
 * when the context is at most index_topk (dense NULL: not run). */
static int check_sparse(const sa_world *w, sa_bufs *u, const sa_seq *q, uint32_t l, uint32_t t,
                        uint32_t p, float scale, int dense) {
  const sa_layer *L = &w->layers[l];
  const size_t row = (size_t)SA_HEADS * SA_RANK, qrow = (size_t)SA_HEADS * SA_WIDTH;
  double qd[SA_HEADS * SA_WIDTH];
  for (size_t i = 0; i < qrow; i++) qd[i] = kw_load(w->c.dtype, u->q, (size_t)t * qrow + i);
  pkv_ref_sparse_mla(qd, q->latent[l], u->pos + (size_t)t * L->topk, L->topk, p, SA_HEADS, SA_RANK,
                     SA_ROPE, scale, u->want);
  for (size_t i = 0; i < row; i++) u->got[i] = kw_load(w->c.dtype, u->out, (size_t)t * row + i);
  char label[96];
  snprintf(label, sizeof label, "sparse layer %u seed %llu pos %u", l, (unsigned long long)q->seed,
           p);
  int ok = CHECK(pkv_ref_compare(label, u->got, u->want, row, w->atol, w->rtol) == 0);
  if (dense && p + 1 <= L->topk) {
    for (size_t i = 0; i < row; i++)
      u->want[i] = kw_load(w->c.dtype, u->dense, (size_t)t * row + i);
    snprintf(label, sizeof label, "dense = sparse layer %u seed %llu pos %u", l,
             (unsigned long long)q->seed, p);
    ok = CHECK(pkv_ref_compare(label, u->got, u->want, row, w->atol, w->rtol) == 0) && ok;
  }
  return ok;
}

static sa_seq *seq_of(sa_world *w, uint64_t id) {
  for (int s = 0; s < SA_MAX_SEQS; s++)
    if (w->seqs[s].id == id) return &w->seqs[s];
  return NULL;
}

/* The three calls (and pkv_attention) on layer l of the open batch b, each checked. */
static void step_layer(sa_world *w, pkv_batch *b, const pkv_batch_view *v, uint32_t l, sa_bufs *u) {
  const sa_layer *L = &w->layers[l];
  struct pkv_layer_info li;
  memset(&li, 0, sizeof li);
  li.struct_size = sizeof li;
  if (!CHECK_OK(pkv_layer_info(w->e, l, &li))) return;
  const int64_t *slots = v->group_slot_mapping + (size_t)li.group * v->num_tokens;
  const int32_t *tables =
      v->group_block_tables + (size_t)li.group * v->num_seqs * v->max_blocks_per_seq;
  int dense = 0; /* some token's context is at most index_topk */
  for (uint32_t i = 0; i < v->num_seqs; i++)
    for (int32_t t = v->query_start[i]; t < v->query_start[i + 1]; t++) {
      fill_token(w, u, seq_of(w, v->seq_ids[i]), l, (uint32_t)t, (uint32_t)v->positions[t]);
      dense |= (uint32_t)v->positions[t] + 1 <= L->topk;
    }
  const uint32_t flags = w->c.ue8m0 ? PKV_INDEXER_SCALE_UE8M0 : 0;
  if (!CHECK_OK(pkv_indexer_write(b, l, u->kidx, flags)) ||
      !CHECK_OK(pkv_indexer_topk(b, l, u->qidx, u->weights, PKV_TOPK_POSITIONS, u->pos)) ||
      !CHECK_OK(pkv_indexer_topk(b, l, u->qidx, u->weights, PKV_TOPK_SLOTS, u->slots)) ||
      !CHECK_OK(pkv_sparse_mla_attention(b, l, u->q, u->lat, u->pos, u->out)))
    return;
  if (dense && !CHECK_OK(pkv_attention(b, l, u->q, u->lat, NULL, u->dense))) return;
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    const sa_seq *q = seq_of(w, v->seq_ids[i]);
    int failures = 0; /* a few messages per sequence, not thousands */
    for (int32_t t = v->query_start[i]; t < v->query_start[i + 1] && failures < 3; t++) {
      const uint32_t p = (uint32_t)v->positions[t];
      const int32_t *table = tables + (size_t)i * v->max_blocks_per_seq;
      failures += !check_key(w, &li, q, l, p, slots[t]);
      failures += !check_topk(w, u, q, l, (uint32_t)t, p, table);
      failures += !check_sparse(w, u, q, l, (uint32_t)t, p, li.softmax_scale, dense);
    }
  }
}

void sa_step(sa_world *w, const int *s, const uint32_t *num_new, uint32_t n) {
  uint64_t ids[SA_MAX_SEQS];
  for (uint32_t i = 0; i < n; i++) ids[i] = w->seqs[s[i]].id;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(w->e, ids, num_new, n, &b))) return;
  pkv_batch_view v;
  memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  if (!CHECK_OK(pkv_batch_info(b, &v))) {
    pkv_batch_abort(b);
    return;
  }
  const size_t T = v.num_tokens, elt = w->c.dtype == PKV_DTYPE_F32 ? 4 : 2;
  const size_t dim = PKV_INDEXER_MAX_HEAD_DIM, heads = 8, topk = 64;
  sa_bufs u = {calloc(T * dim, elt),
               calloc(T * heads * dim, elt),
               calloc(T * SA_HEADS * SA_WIDTH, elt),
               calloc(T * SA_WIDTH, elt),
               calloc(T * SA_HEADS * SA_RANK, elt),
               calloc(T * SA_HEADS * SA_RANK, elt),
               calloc(T * heads, sizeof(float)),
               calloc(T * topk, 4),
               calloc(T * topk, 4),
               calloc(topk, 4),
               calloc(SA_CAP, sizeof(double)),
               calloc(heads * dim, sizeof(double)),
               calloc(heads, sizeof(double)),
               calloc(SA_HEADS * SA_RANK, sizeof(double)),
               calloc(SA_HEADS * SA_RANK, sizeof(double))};
  for (uint32_t l = 0; l < SA_LAYERS; l++) step_layer(w, b, &v, l, &u);
  for (uint32_t i = 0; i < v.num_seqs; i++) /* the view is the batch's: read before it ends */
    seq_of(w, v.seq_ids[i])->num_computed += (uint32_t)(v.query_start[i + 1] - v.query_start[i]);
  CHECK_OK(pkv_batch_end(b));
  void *all[] = {u.kidx,  u.qidx, u.q,      u.lat, u.out, u.dense, u.weights, u.pos,
                 u.slots, u.ref,  u.scores, u.qd,  u.wd,  u.got,   u.want};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

void sa_check_cache(sa_world *w) {
  for (int s = 0; s < SA_MAX_SEQS; s++) {
    const sa_seq *q = &w->seqs[s];
    if (!q->id) continue;
    for (uint32_t l = 0; l < SA_LAYERS; l++) {
      struct pkv_layer_info li;
      memset(&li, 0, sizeof li);
      li.struct_size = sizeof li;
      int32_t table[SA_CAP];
      uint32_t n = 0;
      if (!CHECK_OK(pkv_layer_info(w->e, l, &li)) ||
          !CHECK_OK(pkv_seq_group_block_table(w->e, q->id, li.group, table, SA_CAP, &n)))
        continue;
      for (uint32_t p = 0; p < q->num_computed; p++) {
        const uint32_t bs = w->c.block_size;
        if (!check_key(w, &li, q, l, p, (int64_t)table[p / bs] * bs + p % bs)) break;
      }
    }
  }
}
