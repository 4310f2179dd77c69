/* pkv_layer_spec's indexer (DESIGN.md §14): every rule of its validation (a field on a layer
 * that is not MLA, a bad dtype, heads or top-k out of range, index_head_dim past the max,
 * fields without index_head_dim) refused by each call that reads params, with the message naming
 * the layer and field and nothing written; the limits themselves accepted; a caller of the 0.6
 * layer_spec_size (88) gets no indexer; pkv_layer_info's index fields and the page (the keys
 * after the block's latents, the scales after the keys, the next layer after them); and
 * pkv_kv_budget's bytes with the indexer counted, by hand. */
#include "test_util.h"

#define LAYERS 3

static pkv_layer_spec specs_[LAYERS];

/* DeepSeek V3.2's layer, smaller: 3 MLA layers of latent 32 + 16 (bf16), 8 q heads, an fp8
 * indexer of 64 values, 4 heads, top-k 20 on each. */
static void good(pkv_engine_params *p) {
  tu_params(p, 16, 32);
  p->num_layers = LAYERS, p->num_q_heads = 8, p->num_kv_heads = 1;
  p->head_dim = 48, p->dtype = PKV_DTYPE_BF16;
  p->kv_layout = PKV_KV_LAYOUT_MLA, p->kv_lora_rank = 32, p->qk_rope_head_dim = 16;
  p->softmax_scale = 0.1f;
  memset(specs_, 0, sizeof specs_);
  for (int l = 0; l < LAYERS; l++) {
    specs_[l].kind = PKV_LAYER_MLA;
    specs_[l].index_head_dim = 64, specs_[l].index_dtype = PKV_DTYPE_FP8_E4M3;
    specs_[l].index_n_heads = 4, specs_[l].index_topk = 20;
  }
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* A HEADS model (f32, 4 kv heads of 16): layer 1 SLIDING, layer 2 SHARED reading it. */
static void good_heads(pkv_engine_params *p) {
  tu_params(p, 16, 32);
  p->num_layers = LAYERS, p->num_q_heads = 8, p->num_kv_heads = 4, p->head_dim = 16;
  memset(specs_, 0, sizeof specs_);
  specs_[1].attention = PKV_ATTENTION_SLIDING, specs_[1].window = 32;
  specs_[2] = specs_[1];
  specs_[2].kind = PKV_LAYER_SHARED, specs_[2].source_layer = 1;
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* p refused with want by every call that reads params, the message holding `says` (and
 * `says2`); nothing written to their outputs. */
static void refused(const pkv_engine_params *p, const char *says, const char *says2, int line) {
  const pkv_status want = PKV_ERR_INVALID_ARGUMENT;
  pkv_engine *e = (pkv_engine *)0x1;
  const pkv_status got = pkv_engine_create(p, &e);
  if (!CHECK_STATUS(got, want) || !CHECK(strstr(pkv_last_error(), says) != NULL) ||
      !CHECK(strstr(pkv_last_error(), says2) != NULL))
    fprintf(stderr, "  (line %d) wanted \"%s\", \"%s\" in \"%s\"\n", line, says, says2,
            pkv_last_error());
  CHECK(e == (pkv_engine *)0x1);
  tu_params_calls_refuse(p, want, says);
}

#define REFUSED(p, says, says2) refused((p), (says), (says2), __LINE__)

static void test_good_is_good(void) {
  pkv_engine_params p;
  good(&p);
  pkv_engine_destroy(tu_engine_p(&p));
  good_heads(&p);
  pkv_engine_destroy(tu_engine_p(&p));
}

/* Index fields on an ATTENTION, a SHARED and a STATE layer. */
static void test_not_mla(void) {
  pkv_engine_params p;
  good_heads(&p), specs_[0].index_head_dim = 64;
  REFUSED(&p, "layer_specs[0].index_head_dim", "an ATTENTION layer");
  good_heads(&p), specs_[1].index_dtype = PKV_DTYPE_BF16;
  REFUSED(&p, "layer_specs[1].index_dtype", "only an MLA layer");
  good_heads(&p), specs_[2].index_n_heads = 4;
  REFUSED(&p, "layer_specs[2].index_n_heads", "a SHARED layer");
  good_heads(&p), specs_[0].index_topk = 2048;
  REFUSED(&p, "layer_specs[0].index_topk", "an ATTENTION layer");
  good_heads(&p);
  specs_[1] = (pkv_layer_spec){0};
  specs_[2] = specs_[1];
  specs_[2].kind = PKV_LAYER_STATE;
  specs_[2].state_shape[0] = 4, specs_[2].state_shape[1] = 8;
  specs_[2].index_n_heads = 4;
  REFUSED(&p, "layer_specs[2].index_n_heads", "a STATE layer");
}

/* An MLA layer's indexer: each field's range, and fields without index_head_dim. */
static void test_each_field(void) {
  pkv_engine_params p;
  const uint32_t bad_dtypes[] = {PKV_DTYPE_F16, PKV_DTYPE_FP8_E5M2, 99}; /* F32 is 0: fp8 */
  for (size_t i = 0; i < sizeof bad_dtypes / sizeof bad_dtypes[0]; i++) {
    good(&p), specs_[1].index_dtype = bad_dtypes[i];
    REFUSED(&p, "layer_specs[1].index_dtype", "is not PKV_DTYPE_FP8_E4M3");
  }
  good(&p), specs_[2].index_n_heads = 0;
  REFUSED(&p, "layer_specs[2].index_n_heads", "1 .. 2^16");
  good(&p), specs_[2].index_n_heads = 65537;
  REFUSED(&p, "layer_specs[2].index_n_heads", "1 .. 2^16");
  good(&p), specs_[0].index_topk = 0;
  REFUSED(&p, "layer_specs[0].index_topk", "1 .. 2^20");
  good(&p), specs_[0].index_topk = (1u << 20) + 1;
  REFUSED(&p, "layer_specs[0].index_topk", "1 .. 2^20");
  good(&p), specs_[1].index_head_dim = PKV_MAX_HEAD_DIM + 1;
  REFUSED(&p, "layer_specs[1].index_head_dim", "1 .. 1024");
  good(&p), specs_[1].index_head_dim = 0; /* the others left set */
  REFUSED(&p, "layer_specs[1].index_dtype", "without an indexer");
  good(&p), specs_[1].index_head_dim = 0, specs_[1].index_dtype = 0;
  REFUSED(&p, "layer_specs[1].index_n_heads", "without an indexer");
  good(&p), specs_[1].index_head_dim = 0, specs_[1].index_dtype = 0;
  specs_[1].index_n_heads = 0;
  REFUSED(&p, "layer_specs[1].index_topk", "without an indexer");
}

/* The limits themselves are accepted (the engine, not the calls: their own limits are
 * test_bad_calls'), and index_dtype 0 is fp8. */
static void test_limits_accepted(void) {
  pkv_engine_params p;
  good(&p);
  specs_[0].index_head_dim = PKV_MAX_HEAD_DIM, specs_[0].index_dtype = 0;
  specs_[1].index_head_dim = 1, specs_[1].index_dtype = PKV_DTYPE_BF16;
  specs_[1].index_n_heads = 1, specs_[1].index_topk = 1;
  specs_[2].index_n_heads = 65536, specs_[2].index_topk = 1u << 20;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  struct pkv_layer_info li;
  memset(&li, 0, sizeof li);
  li.struct_size = sizeof li;
  if (CHECK_OK(pkv_layer_info(e, 0, &li))) {
    CHECK_EQ_INT(li.index_head_dim, PKV_MAX_HEAD_DIM);
    CHECK_EQ_INT(li.index_dtype, PKV_DTYPE_FP8_E4M3);
    CHECK(li.index_scale_base != NULL);
  }
  if (CHECK_OK(pkv_layer_info(e, 2, &li))) {
    CHECK_EQ_INT(li.index_n_heads, 65536);
    CHECK_EQ_INT(li.index_topk, 1u << 20);
  }
  pkv_engine_destroy(e);
}

/* A 0.6 caller (layer_spec_size 88) has no indexer fields: none are read, not even the next
 * spec's first bytes (an MLA kind, 1) where they would be. */
static void test_spec_size_88(void) {
  pkv_engine_params p;
  good(&p);
  unsigned char old[LAYERS * 88];
  for (int l = 0; l < LAYERS; l++) memcpy(old + 88 * l, &specs_[l], 88);
  p.layer_specs = (const pkv_layer_spec *)(void *)old, p.layer_spec_size = 88;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return;
  for (uint32_t l = 0; l < LAYERS; l++) {
    struct pkv_layer_info li;
    memset(&li, 0x5a, sizeof li);
    li.struct_size = sizeof li;
    if (!CHECK_OK(pkv_layer_info(e, l, &li))) continue;
    CHECK(li.kind == PKV_LAYER_MLA && li.index_head_dim == 0 && li.index_dtype == 0);
    CHECK(li.index_n_heads == 0 && li.index_topk == 0 && li.index_block_bytes == 0);
    CHECK(li.index_base == NULL && li.index_scale_base == NULL);
  }
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (CHECK_OK(pkv_engine_budget(e, &b))) CHECK_EQ_INT(b.bytes_per_token, LAYERS * 48 * 2);
  pkv_engine_destroy(e);
}

/* The page of good()'s engine (and with bf16 keys): per layer, in layer order, 16 latents of
 * 96 bytes, 16 keys, (fp8) 16 scales; pkv_layer_info says where. */
static void test_layout(void) {
  for (int bf16 = 0; bf16 < 2; bf16++) {
    pkv_engine_params p;
    good(&p);
    for (int l = 0; l < LAYERS && bf16; l++)
      specs_[l].index_dtype = PKV_DTYPE_BF16, specs_[l].index_head_dim = 32;
    const uint64_t latents = 16 * 96, keys = bf16 ? 16 * 32 * 2 : 16 * 64;
    const uint64_t layer_bytes = latents + keys + (bf16 ? 0 : 16 * 4); /* 2624 or 2560 */
    pkv_engine *e = tu_engine_p(&p);
    if (!e) continue;
    const struct pkv_pool_info pool = tu_pool(e);
    for (uint32_t l = 0; l < LAYERS; l++) {
      struct pkv_layer_info li;
      memset(&li, 0, sizeof li);
      li.struct_size = sizeof li;
      if (!CHECK_OK(pkv_layer_info(e, l, &li))) continue;
      const char *k = li.k_base, *idx = li.index_base, *scale = li.index_scale_base;
      CHECK_EQ_INT(li.index_head_dim, bf16 ? 32 : 64);
      CHECK_EQ_INT(li.index_dtype, bf16 ? PKV_DTYPE_BF16 : PKV_DTYPE_FP8_E4M3);
      CHECK_EQ_INT(li.index_n_heads, 4);
      CHECK_EQ_INT(li.index_topk, 20);
      CHECK_EQ_INT(li.index_block_bytes, LAYERS * layer_bytes);
      CHECK_EQ_INT(li.block_stride * 2, LAYERS * layer_bytes); /* bf16 elements */
      CHECK_EQ_INT(k - (const char *)pool.k_base, l * layer_bytes);
      CHECK_EQ_INT(idx - k, latents);
      if (bf16)
        CHECK(scale == NULL);
      else
        CHECK_EQ_INT(scale - idx, keys);
      CHECK(li.host_index_base == NULL && li.host_index_scale_base == NULL);
    }
    pkv_engine_destroy(e);
  }
}

/* pkv_kv_budget with the indexer: DeepSeek V3.2's shape (latent 512 + 64 in bf16, or fp8;
 * keys of 128 fp8 values and a 4-byte scale; 61 layers; block 64; 8 ranks, each holding the
 * whole latent and indexer), by hand. */
static void test_budget(void) {
  static pkv_layer_spec ds[61];
  for (int fp8 = 0; fp8 < 2; fp8++) {
    pkv_engine_params p;
    tu_params(&p, 64, 0);
    p.num_layers = 61, p.num_q_heads = 128, p.num_kv_heads = 1, p.head_dim = 576;
    p.dtype = PKV_DTYPE_BF16, p.kv_dtype = fp8 ? PKV_DTYPE_FP8_E4M3 : 0;
    p.tp_size = 8, p.tp_rank = 3;
    p.kv_layout = PKV_KV_LAYOUT_MLA, p.kv_lora_rank = 512, p.qk_rope_head_dim = 64;
    p.softmax_scale = 0.1f;
    p.memory_total_bytes = 80ull << 30, p.memory_utilization = 0.9;
    memset(ds, 0, sizeof ds);
    for (int l = 0; l < 61; l++) {
      ds[l].kind = PKV_LAYER_MLA, ds[l].index_head_dim = 128;
      ds[l].index_n_heads = 64, ds[l].index_topk = 2048;
    }
    p.layer_specs = ds, p.layer_spec_size = sizeof ds[0];
    pkv_kv_budget b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    if (!CHECK_OK(pkv_profile(&p, &b))) continue;
    /* per token per layer: the latent (576 x 2, or 576 fp8 codes) + 128 codes + a 4-byte scale */
    const uint64_t token = fp8 ? 576 + 132 : 1152 + 132; /* 708 or 1284 */
    CHECK_EQ_INT(b.bytes_per_token, 61 * token);         /* 43188 or 78324 */
    CHECK_EQ_INT(b.block_bytes, 64 * 61 * token);        /* 2764032 or 5012736 */
    CHECK_EQ_INT(b.num_blocks, b.budget_bytes / b.block_bytes);
    /* Without the indexer: the latent alone. */
    for (int l = 0; l < 61; l++) ds[l].index_head_dim = ds[l].index_n_heads = ds[l].index_topk = 0;
    if (CHECK_OK(pkv_profile(&p, &b))) CHECK_EQ_INT(b.bytes_per_token, 61 * (fp8 ? 576 : 1152));
  }
}

int main(void) {
  test_good_is_good();
  test_not_mla();
  test_each_field();
  test_limits_accepted();
  test_spec_size_88();
  test_layout();
  test_budget();
  return tu_summary();
}
