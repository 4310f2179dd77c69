/* Every bad pkv_engine_params.layer_specs is refused by each call that reads params (create,
 * pkv_profile, pkv_kv_groups, pkv_kv_group_info) with the status pkv.h names and a message that
 * names the layer and field; a refused call writes nothing. */
#include "test_util.h"

#define LAYERS 4

static pkv_layer_spec specs_[LAYERS];

/* 4 f32 layers, 8 q heads, 4 kv heads of 16; layer 3 SHARED reading layer 1 (same spec). */
static void good(pkv_engine_params *p) {
  tu_params(p, 16, 64);
  p->num_layers = LAYERS;
  p->num_q_heads = 8;
  p->num_kv_heads = 4;
  p->head_dim = 16;
  memset(specs_, 0, sizeof specs_);
  specs_[1].attention = PKV_ATTENTION_SLIDING, specs_[1].window = 32;
  specs_[3] = specs_[1];
  specs_[3].kind = PKV_LAYER_SHARED, specs_[3].source_layer = 1;
  p->layer_specs = specs_;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* p refused with want by every call that reads params, the message holding `says`; nothing
 * written to their outputs. */
static void refused(const pkv_engine_params *p, pkv_status want, const char *says, int line) {
  pkv_engine *e = (pkv_engine *)0x1;
  pkv_status got = pkv_engine_create(p, &e);
  if (!CHECK_STATUS(got, want) || !CHECK(strstr(pkv_last_error(), says) != NULL))
    fprintf(stderr, "  (line %d) wanted \"%s\" in \"%s\"\n", line, says, pkv_last_error());
  CHECK(e == (pkv_engine *)0x1);
  tu_params_calls_refuse(p, want, NULL);
}

#define REFUSED(p, want, says) refused((p), (want), (says), __LINE__)

static void test_good_is_good(void) {
  pkv_engine_params p;
  good(&p);
  pkv_engine *e = tu_engine_p(&p);
  pkv_engine_destroy(e);
}

static void test_each_field(void) {
  pkv_engine_params p;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  good(&p), specs_[2].kind = 4; /* 3 is STATE (0.6), 4 is kept for indexer caches */
  REFUSED(&p, bad, "layer_specs[2].kind");
  good(&p), specs_[2].attention = 3;
  REFUSED(&p, bad, "layer_specs[2].attention");
  good(&p), specs_[2].window = 8; /* FULL with a window */
  REFUSED(&p, bad, "layer_specs[2].window");
  good(&p), specs_[2].attention = PKV_ATTENTION_CHUNKED; /* chunk 0 */
  REFUSED(&p, bad, "layer_specs[2].window");
  good(&p), specs_[2].attention = PKV_ATTENTION_SLIDING, specs_[2].window = 0x80000000u;
  REFUSED(&p, bad, "layer_specs[2].window");
  good(&p), specs_[2].num_kv_heads = 3; /* does not divide 8 */
  REFUSED(&p, bad, "layer_specs[2].num_kv_heads");
  good(&p), p.tp_size = 4, specs_[2].num_kv_heads = 8, p.num_q_heads = 24;
  specs_[2].num_kv_heads = 6; /* 6 and 4: neither divides the other */
  REFUSED(&p, bad, "layer_specs[2].num_kv_heads");
  good(&p), specs_[2].head_dim = PKV_MAX_HEAD_DIM + 1;
  REFUSED(&p, bad, "layer_specs[2].head_dim");
  good(&p), specs_[2].v_head_dim = PKV_MAX_HEAD_DIM + 1;
  REFUSED(&p, bad, "layer_specs[2].v_head_dim");
  good(&p), specs_[2].k_eq_v = 2;
  REFUSED(&p, bad, "layer_specs[2].k_eq_v");
  good(&p), specs_[2].k_eq_v = 1, specs_[2].v_head_dim = 8;
  REFUSED(&p, bad, "layer_specs[2].v_head_dim");
  good(&p), specs_[2].sinks = 2;
  REFUSED(&p, bad, "layer_specs[2].sinks");
  good(&p), specs_[2].logit_softcap = -1.0f;
  REFUSED(&p, bad, "layer_specs[2].logit_softcap");
  good(&p), specs_[2].logit_softcap = 1.0f / 0.0f;
  REFUSED(&p, bad, "layer_specs[2].logit_softcap");
  good(&p), specs_[2].softmax_scale = -0.5f;
  REFUSED(&p, bad, "layer_specs[2].softmax_scale");
  good(&p), specs_[2].reserved0 = 1;
  REFUSED(&p, bad, "layer_specs[2].reserved0");
  good(&p), specs_[2].source_layer = 1; /* not SHARED */
  REFUSED(&p, bad, "layer_specs[2].source_layer");
  good(&p), specs_[2].kind = PKV_LAYER_MLA; /* kv_layout HEADS */
  REFUSED(&p, bad, "layer_specs[2].kind");
}

static void test_shared(void) {
  pkv_engine_params p;
  const pkv_status bad = PKV_ERR_INVALID_ARGUMENT;
  good(&p), specs_[3].source_layer = 3; /* itself */
  REFUSED(&p, bad, "layer_specs[3].source_layer");
  good(&p), specs_[0].kind = PKV_LAYER_SHARED; /* nothing before layer 0 */
  REFUSED(&p, bad, "layer_specs[0].source_layer");
  good(&p), specs_[2] = specs_[3], specs_[3].source_layer = 2; /* a SHARED source */
  REFUSED(&p, bad, "layer_specs[3].source_layer");
  good(&p), specs_[3].window = 64;
  REFUSED(&p, bad, "layer_specs[3].window");
  good(&p), specs_[3].num_kv_heads = 2;
  REFUSED(&p, bad, "layer_specs[3].num_kv_heads");
  good(&p), specs_[3].head_dim = 32;
  REFUSED(&p, bad, "layer_specs[3].head_dim");
  good(&p), specs_[3].attention = PKV_ATTENTION_CHUNKED;
  REFUSED(&p, bad, "layer_specs[3].attention");
}

static void test_with_other_fields(void) {
  pkv_engine_params p;
  good(&p), p.sliding_window = 64;
  REFUSED(&p, PKV_ERR_INVALID_ARGUMENT, "sliding_window");
  static const uint32_t windows[LAYERS] = {0, 0, 0, 0};
  good(&p), p.layer_windows = windows;
  REFUSED(&p, PKV_ERR_INVALID_ARGUMENT, "layer_windows");
  good(&p), p.layer_spec_size = 40; /* below 0.5's 48 */
  REFUSED(&p, PKV_ERR_INVALID_ARGUMENT, "layer_spec_size");
  good(&p), p.reserved3 = 1;
  REFUSED(&p, PKV_ERR_INVALID_ARGUMENT, "reserved3");
  /* A host tier holds every layout (since 0.8): layers the flat fields cannot say, windows and
   * SHARED layers, and specs equal to the flat fields. */
  good(&p), p.host_num_blocks = 8;
  pkv_engine_destroy(tu_engine_p(&p));
  good(&p), p.host_num_blocks = 8;
  memset(specs_, 0, sizeof specs_);
  pkv_engine_destroy(tu_engine_p(&p));
  /* MLA: every layer MLA, no windows. */
  good(&p), memset(specs_, 0, sizeof specs_);
  p.kv_layout = PKV_KV_LAYOUT_MLA, p.num_kv_heads = 1, p.kv_lora_rank = 8;
  p.qk_rope_head_dim = 8, p.softmax_scale = 0.25f;
  REFUSED(&p, PKV_ERR_INVALID_ARGUMENT, "every layer of an MLA cache is MLA");
  for (int l = 0; l < LAYERS; l++) specs_[l].kind = PKV_LAYER_MLA;
  pkv_engine_destroy(tu_engine_p(&p));
  specs_[1].attention = PKV_ATTENTION_SLIDING, specs_[1].window = 32;
  REFUSED(&p, PKV_ERR_UNSUPPORTED, "MLA layers with SLIDING or CHUNKED");
}

/* A larger caller's struct is read at its size: its extra bytes are not ours. */
static void test_spec_size(void) {
  pkv_engine_params p;
  good(&p);
  struct wide {
    pkv_layer_spec s;
    uint32_t more[2];
  } wide[LAYERS];
  memset(wide, 0xee, sizeof wide);
  for (int l = 0; l < LAYERS; l++) wide[l].s = specs_[l];
  p.layer_specs = &wide[0].s;
  p.layer_spec_size = sizeof wide[0];
  pkv_engine_destroy(tu_engine_p(&p));
}

int main(void) {
  TU_RUN(test_good_is_good);
  TU_RUN(test_each_field);
  TU_RUN(test_shared);
  TU_RUN(test_with_other_fields);
  TU_RUN(test_spec_size);
  return tu_summary();
}
