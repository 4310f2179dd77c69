/* Layers of unequal shape in one pool (DESIGN.md §12), through pkv.h: pkv_attention writes each
 * layer's K and V where pkv_layer_info says (read back through the group's block table), a
 * k_eq_v layer stores K alone, a SHARED layer writes nothing and attends over its source's cache;
 * attention sinks (pkv_set_attention_sinks) are required where a spec has them. */
#include <math.h>

#include "test_util.h"

#define LAYERS 4
#define Q_HEADS 4
#define TOKENS 10
#define MAX_ROW 64 /* kv heads x head_dim of the widest layer */

static pkv_layer_spec specs_[LAYERS];

/* f32, blocks of 4 tokens. Layer 0: full, 2 kv heads x 8 (the flat fields); 1: sliding 6, one kv
 * head of 16, K = V; 2: chunked 8, 4 kv heads x 8, sinks; 3: SHARED, reading layer 0. */
static void params(pkv_engine_params *p) {
  tu_params(p, 4, 64);
  p->num_layers = LAYERS;
  p->num_q_heads = Q_HEADS;
  memset(specs_, 0, sizeof specs_);
  specs_[1].attention = PKV_ATTENTION_SLIDING, specs_[1].window = 6;
  specs_[1].num_kv_heads = 1, specs_[1].head_dim = 16, specs_[1].k_eq_v = 1;
  specs_[2].attention = PKV_ATTENTION_CHUNKED, specs_[2].window = 8;
  specs_[2].num_kv_heads = 4, specs_[2].sinks = 1;
  specs_[3].kind = PKV_LAYER_SHARED, specs_[3].source_layer = 0;
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

static struct pkv_layer_info info_of(pkv_engine *e, uint32_t layer) {
  struct pkv_layer_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK_OK(pkv_layer_info(e, layer, &info));
  return info;
}

/* Element i of token t's K (v 0) or V (v 1) row of layer l: distinct everywhere. */
static float value(uint32_t l, int v, uint32_t t, uint32_t i) {
  return (float)(l * 100000 + v * 50000 + t * 100 + i);
}

static void fill(float *rows, uint32_t l, int v, uint32_t width) {
  for (uint32_t t = 0; t < TOKENS; t++)
    for (uint32_t i = 0; i < width; i++) rows[t * width + i] = value(l, v, t, i);
}

/* Floats of layer l's K (v 0) or V in the pool that differ from what was written, over the
 * tokens whose block its group still holds; *seen counts those tokens. */
static uint32_t mismatches(pkv_engine *e, uint64_t seq, uint32_t l, int v, uint32_t *seen) {
  const struct pkv_layer_info in = info_of(e, l);
  int32_t table[16];
  uint32_t len = 0;
  CHECK_OK(pkv_seq_group_block_table(e, seq, in.group, table, 16, &len));
  const uint32_t width = v ? in.v_head_dim : in.head_dim;
  const uint64_t token_stride = v ? in.v_token_stride : in.token_stride;
  const float *base = (const float *)(v ? in.v_base : in.k_base);
  uint32_t bad = 0;
  *seen = 0;
  for (uint32_t t = 0; t < TOKENS; t++) {
    const int32_t block = table[t / 4];
    if (block < 0) continue; /* given back: outside every future window */
    ++*seen;
    for (uint32_t h = 0; h < in.kv_heads; h++)
      for (uint32_t d = 0; d < width; d++) {
        const float got = base[block * in.block_stride + (t % 4) * token_stride +
                               h * (v ? width : in.head_stride) + d];
        /* K = V: V's values are K's */
        bad += got != value(l, v && !in.k_eq_v, t, h * width + d);
      }
  }
  return bad;
}

static void test_layer_info(void) {
  pkv_engine_params p;
  params(&p);
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  const struct pkv_layer_info l0 = info_of(e, 0), l1 = info_of(e, 1), l2 = info_of(e, 2),
                              l3 = info_of(e, 3);
  CHECK(l0.group != l1.group && l1.group != l2.group && l0.group != l2.group);
  CHECK_EQ_INT(l1.attention, PKV_ATTENTION_SLIDING);
  CHECK_EQ_INT(l2.window, 8);
  CHECK(l1.k_eq_v && l1.v_base == l1.k_base);
  CHECK_EQ_INT(l1.v_head_dim, 16);
  CHECK(l2.sinks && !l0.sinks);
  CHECK_EQ_INT(l3.kind, PKV_LAYER_SHARED);
  CHECK_EQ_INT(l3.source_layer, 0);
  CHECK(l3.k_base == l0.k_base && l3.v_base == l0.v_base && l3.group == l0.group);
  CHECK(l0.softmax_scale > 0.35355f && l0.softmax_scale < 0.35356f); /* 1/sqrt(8) */
  CHECK(l1.softmax_scale == 0.25f); /* 1/sqrt(16): its own head_dim */
  /* Pages: every layer's block 0 lies in block 0's page, the same stride apart. */
  CHECK_EQ_INT(l0.block_stride, l2.block_stride);
  struct pkv_layer_info past;
  memset(&past, 0, sizeof past);
  past.struct_size = sizeof past;
  CHECK_ERR(e, pkv_layer_info(e, LAYERS, &past), PKV_ERR_INVALID_ARGUMENT);
  past.struct_size = 8;
  CHECK_ERR(e, pkv_layer_info(e, 0, &past), PKV_ERR_INVALID_ARGUMENT);
  pkv_engine_destroy(e);
}

static void test_sinks_calls(void) {
  pkv_engine_params p;
  params(&p);
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  const float sinks[Q_HEADS] = {0.5f, -1.0f, 0.0f, 2.0f};
  const float nan[Q_HEADS] = {0.0f, 0.0f / 0.0f, 0.0f, 0.0f};
  CHECK_ERR(e, pkv_set_attention_sinks(e, 0, sinks, Q_HEADS), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "no sinks") != NULL);
  CHECK_ERR(e, pkv_set_attention_sinks(e, LAYERS, sinks, Q_HEADS), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_attention_sinks(e, 2, NULL, Q_HEADS), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_attention_sinks(e, 2, sinks, 2), PKV_ERR_INVALID_ARGUMENT);
  CHECK_ERR(e, pkv_set_attention_sinks(e, 2, nan, Q_HEADS), PKV_ERR_INVALID_ARGUMENT);
  /* Not set: attention on layer 2 is refused rather than wrong. */
  int32_t tokens[TOKENS];
  tu_fill(tokens, TOKENS, 1);
  const uint64_t seq = tu_alloc(e, tokens, TOKENS, NULL);
  static float q[TOKENS * Q_HEADS * 16], k[TOKENS * MAX_ROW], v[TOKENS * MAX_ROW],
      out[TOKENS * Q_HEADS * 16];
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) {
    CHECK_STATUS(pkv_attention(b, 2, q, k, v, out), PKV_ERR_STATE);
    CHECK(strstr(pkv_last_error(), "pkv_set_attention_sinks") != NULL);
    pkv_batch_abort(b);
  }
  /* After the first sequence: too late. */
  CHECK_ERR(e, pkv_set_attention_sinks(e, 2, sinks, Q_HEADS), PKV_ERR_STATE);
  pkv_engine_destroy(e);
}

static void test_attention_writes_where_layer_info_says(void) {
  pkv_engine_params p;
  params(&p);
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  const float sinks[Q_HEADS] = {0.5f, -1.0f, 0.0f, 2.0f};
  CHECK_OK(pkv_set_attention_sinks(e, 2, sinks, Q_HEADS));
  int32_t tokens[TOKENS];
  tu_fill(tokens, TOKENS, 1);
  const uint64_t seq = tu_alloc(e, tokens, TOKENS, NULL);
  static float q[TOKENS * Q_HEADS * 16], k[3][TOKENS * MAX_ROW], v[3][TOKENS * MAX_ROW],
      out[LAYERS][TOKENS * Q_HEADS * 16];
  for (uint32_t i = 0; i < TOKENS * Q_HEADS * 16; i++) q[i] = (float)(i % 7) * 0.125f - 0.4f;
  const uint32_t widths[3] = {2 * 8, 16, 4 * 8};
  for (uint32_t l = 0; l < 3; l++) fill(k[l], l, 0, widths[l]), fill(v[l], l, 1, widths[l]);
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return;
  /* the argument rules of each kind */
  CHECK_STATUS(pkv_attention(b, 1, q, k[1], v[1], out[1]), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "k_eq_v") != NULL);
  CHECK_STATUS(pkv_attention(b, 3, q, k[0], NULL, out[3]), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "SHARED") != NULL);
  CHECK_STATUS(pkv_attention(b, 0, q, k[0], NULL, out[0]), PKV_ERR_INVALID_ARGUMENT);
  CHECK_OK(pkv_attention(b, 0, q, k[0], v[0], out[0]));
  CHECK_OK(pkv_attention(b, 1, q, k[1], NULL, out[1]));
  CHECK_OK(pkv_attention(b, 2, q, k[2], v[2], out[2]));
  CHECK_OK(pkv_attention(b, 3, q, NULL, NULL, out[3]));
  CHECK_OK(pkv_batch_end(b));
  for (uint32_t l = 0; l < 3; l++)
    for (int kv = 0; kv < 2; kv++) {
      uint32_t seen = 0;
      if (!CHECK_EQ_INT(mismatches(e, seq, l, kv, &seen), 0))
        fprintf(stderr, "  layer %u %s\n", l, kv ? "V" : "K");
      CHECK(seen >= (l == 2 ? 2u : 6u)); /* at least the window's, or the chunk's */
    }
  /* The SHARED layer attended over layer 0's cache with layer 0's spec: the same out. */
  CHECK(memcmp(out[3], out[0], TOKENS * Q_HEADS * 8 * sizeof(float)) == 0);
  pkv_engine_destroy(e);
}

/* A CPU engine attends layers up to PKV_ATTENTION_MAX_HEAD_DIM_CPU wide (Gemma 4's 512): with q 0
 * every key weighs the same, so token t's output is the mean of the V rows 0 .. t (K = V here:
 * token i's row is all i + 1, the mean (t + 2) / 2). A wider layer is held in the pool but refused
 * by pkv_attention, naming the layer. */
static void attend_wide(uint32_t head_dim, pkv_status want) {
  pkv_engine_params p;
  params(&p);
  specs_[1].head_dim = head_dim;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  CHECK_EQ_INT(info_of(e, 1).head_dim, head_dim);
  int32_t tokens[4] = {1, 2, 3, 4};
  const uint64_t seq = tu_alloc(e, tokens, 4, NULL);
  enum { W = PKV_ATTENTION_MAX_HEAD_DIM_CPU + 8 };
  static float q[4 * Q_HEADS * W], k[4 * W], out[4 * Q_HEADS * W];
  memset(q, 0, sizeof q);
  for (uint32_t t = 0; t < 4; t++)
    for (uint32_t i = 0; i < head_dim; i++) k[t * head_dim + i] = (float)(t + 1);
  pkv_batch *b = NULL;
  if (CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) {
    CHECK_STATUS(pkv_attention(b, 1, q, k, NULL, out), want);
    if (want != PKV_OK) {
      CHECK(strstr(pkv_last_error(), "layer 1") != NULL);
    } else {
      int bad = 0;
      for (uint32_t t = 0; t < 4; t++)
        for (uint32_t i = 0; i < Q_HEADS * head_dim; i++)
          bad += fabsf(out[(size_t)t * Q_HEADS * head_dim + i] - (float)(t + 2) / 2) > 1e-5f;
      CHECK_EQ_INT(bad, 0);
    }
    pkv_batch_abort(b);
  }
  pkv_engine_destroy(e);
}

static void test_head_dim_beyond_kernels(void) {
  attend_wide(PKV_ATTENTION_MAX_HEAD_DIM_CPU, PKV_OK);
  attend_wide(PKV_ATTENTION_MAX_HEAD_DIM_CPU + 8, PKV_ERR_UNSUPPORTED);
}

/* fp8 KV: scales per layer of its own kv heads; V = K takes K's; a SHARED layer has its
 * source's. Every layer then attends. */
static void test_fp8_scales_per_layer(void) {
  pkv_engine_params p;
  params(&p);
  p.kv_dtype = PKV_DTYPE_FP8_E4M3;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  const float sinks[Q_HEADS] = {0.5f, -1.0f, 0.0f, 2.0f};
  const float ones[4] = {0.5f, 0.25f, 0.125f, 1.0f}, bad[4] = {1.0f, 0.0f, 1.0f, 1.0f};
  CHECK_OK(pkv_set_attention_sinks(e, 2, sinks, Q_HEADS));
  CHECK_OK(pkv_set_kv_scales(e, 0, ones, ones));                               /* 2 kv heads */
  CHECK_OK(pkv_set_kv_scales(e, 1, ones, NULL));                               /* 1 head, V = K */
  CHECK_OK(pkv_set_kv_scales(e, 2, ones, ones));                               /* 4 heads */
  CHECK_ERR(e, pkv_set_kv_scales(e, 2, ones, bad), PKV_ERR_INVALID_ARGUMENT);  /* a scale of 0 */
  CHECK_ERR(e, pkv_set_kv_scales(e, 3, ones, ones), PKV_ERR_INVALID_ARGUMENT); /* SHARED */
  CHECK(strstr(pkv_last_error(), "SHARED") != NULL);
  CHECK_ERR(e, pkv_set_kv_scales(e, 0, ones, NULL), PKV_ERR_INVALID_ARGUMENT);
  int32_t tokens[TOKENS];
  tu_fill(tokens, TOKENS, 1);
  const uint64_t seq = tu_alloc(e, tokens, TOKENS, NULL);
  static float q[TOKENS * Q_HEADS * 16], k[TOKENS * MAX_ROW], v[TOKENS * MAX_ROW],
      out[TOKENS * Q_HEADS * 16];
  for (uint32_t i = 0; i < TOKENS * MAX_ROW; i++) k[i] = v[i] = (float)(i % 5) * 0.1f;
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &seq, NULL, 1, &b))) return;
  CHECK_OK(pkv_attention(b, 0, q, k, v, out));
  CHECK_OK(pkv_attention(b, 1, q, k, NULL, out));
  CHECK_OK(pkv_attention(b, 2, q, k, v, out));
  CHECK_OK(pkv_attention(b, 3, q, NULL, NULL, out));
  CHECK_OK(pkv_batch_end(b));
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_layer_info);
  TU_RUN(test_sinks_calls);
  TU_RUN(test_attention_writes_where_layer_info_says);
  TU_RUN(test_head_dim_beyond_kernels);
  TU_RUN(test_fp8_scales_per_layer);
  return tu_summary();
}
