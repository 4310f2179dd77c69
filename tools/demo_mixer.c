/*
 * demo_mixer.c - the recurrent layers of `pkv demo --hybrid` (demo.h): the gated linear
 * recurrence of issue 28 behind a short causal conv, as the host of a hybrid model runs it (pkv
 * owns the state's memory, never the kernel).
 *
 * Layer l is recurrent unless l % DEMO_ATTENTION_INTERVAL == DEMO_ATTENTION_INTERVAL - 1
 * (Qwen3.5's 3 : 1). Such a layer takes the q, k and v its projection made (the model's own
 * attention projection and RoPE: the recurrence takes them as they come) and, per sequence:
 *   x_t   = silu(conv(x_{t-3} .. x_t))     depthwise, kernel 4, over the q | k | v channels
 *   g_t   = sigmoid(b_h + w_h . k_t)       per kv head h; b_h sets the head's memory (0.99, 0.9)
 *   S_t   = g_t S_{t-1} + (1 - g_t) k_t v_t^T   k_t L2-normalized: S stays within |v|
 *   out_t = q_t S_t                        q_t L2-normalized, q head i reads kv head i / group
 * State per sequence and layer, two parts: conv [conv_dim][3] (the last three inputs, oldest
 * first) and ssm [kv_heads][head_dim][head_dim], fp32. Each token is one sequential update in a
 * fixed order, so the state after token t is the same bits whatever chunks or batches carried
 * the tokens: the paged runs (state restored from checkpoints) and the contiguous one (always from
 * token 0) must generate the same tokens.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "demo.h"

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static float uniform_pm(uint64_t *s, float scale) {
  return ((float)(splitmix(s) >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
}

int demo_mixer_init(demo_mixer *x, const model *m) {
  memset(x, 0, sizeof *x);
  x->num_layers = m->c.num_layers, x->q_heads = m->c.num_q_heads;
  x->kv_heads = m->c.num_kv_heads, x->head_dim = m->c.head_dim;
  x->conv_dim = m->q_dim + 2 * m->kv_dim;
  for (uint32_t l = 0; l < x->num_layers; l++)
    x->is_state[l] = l % DEMO_ATTENTION_INTERVAL != DEMO_ATTENTION_INTERVAL - 1;
  x->conv_floats = x->conv_dim * (DEMO_CONV_KERNEL - 1);
  x->ssm_floats = x->kv_heads * x->head_dim * x->head_dim;
  const size_t conv_w = (size_t)x->num_layers * x->conv_dim * DEMO_CONV_KERNEL;
  const size_t gate_w = (size_t)x->num_layers * x->kv_heads * x->head_dim;
  x->conv_w = malloc(conv_w * sizeof(float));
  x->gate_w = malloc(gate_w * sizeof(float));
  x->scratch = malloc(x->conv_dim * sizeof(float));
  if (!x->conv_w || !x->gate_w || !x->scratch) {
    demo_mixer_free(x);
    return -1;
  }
  /* the model's seed, another stream: weights the model's layers never see */
  uint64_t rng = m->c.seed ^ 0x5eed0f5ca1e5ull;
  for (size_t i = 0; i < conv_w; i++) x->conv_w[i] = uniform_pm(&rng, 0.6f);
  for (size_t i = 0; i < gate_w; i++) x->gate_w[i] = uniform_pm(&rng, 1.0f);
  return 0;
}

void demo_mixer_free(demo_mixer *x) {
  free(x->conv_w), free(x->gate_w), free(x->scratch);
  memset(x, 0, sizeof *x);
}

uint32_t demo_mixer_num_state_layers(const demo_mixer *x) {
  uint32_t n = 0;
  for (uint32_t l = 0; l < x->num_layers; l++) n += x->is_state[l];
  return n;
}

void demo_mixer_specs(const demo_mixer *x, pkv_layer_spec *specs) {
  memset(specs, 0, x->num_layers * sizeof *specs);
  for (uint32_t l = 0; l < x->num_layers; l++) {
    if (!x->is_state[l]) continue; /* zeros: the engine's flat attention fields */
    pkv_layer_spec *s = &specs[l];
    s->kind = PKV_LAYER_STATE;
    s->state_dtype[0] = s->state_dtype[1] = PKV_DTYPE_F32;
    s->state_shape[0] = x->conv_dim, s->state_shape[1] = DEMO_CONV_KERNEL - 1;
    s->state_shape[PKV_MAX_STATE_DIMS] = x->kv_heads;
    s->state_shape[PKV_MAX_STATE_DIMS + 1] = s->state_shape[PKV_MAX_STATE_DIMS + 2] = x->head_dim;
  }
}

static float l2_inv(const float *a, uint32_t n) {
  double ss = 0;
  for (uint32_t i = 0; i < n; i++) ss += (double)a[i] * a[i];
  return (float)(1.0 / sqrt(ss + 1e-6));
}

/* One token's q | k | v channels through the conv: the conv state shifts by one, xc gets
 * silu(conv). conv: [conv_dim][K - 1] oldest first; w: [conv_dim][K], w[K - 1] on the newest. */
static void conv_token(const demo_mixer *x, const float *w, const float *q, const float *k,
                       const float *v, float *conv, float *xc) {
  const uint32_t qd = x->q_heads * x->head_dim, kvd = x->kv_heads * x->head_dim,
                 H = DEMO_CONV_KERNEL;
  for (uint32_t c = 0; c < x->conv_dim; c++) {
    const float in = c < qd ? q[c] : c < qd + kvd ? k[c - qd] : v[c - qd - kvd];
    float *hist = conv + (size_t)c * (H - 1);
    const float *wc = w + (size_t)c * H;
    float y = wc[H - 1] * in;
    for (uint32_t j = 0; j < H - 1; j++) y += wc[j] * hist[j];
    for (uint32_t j = 0; j + 1 < H - 1; j++) hist[j] = hist[j + 1];
    hist[H - 2] = in;
    xc[c] = y / (1.0f + expf(-y));
  }
}

/* b_h: the memory of kv head h, from long (g ~ 0.99) to short (g ~ 0.9) */
static float gate_bias(const demo_mixer *x, uint32_t h) {
  return x->kv_heads > 1 ? 4.6f - 2.4f * (float)h / (float)(x->kv_heads - 1) : 3.0f;
}

void demo_mixer_rows(demo_mixer *x, uint32_t layer, const float *q, const float *k, const float *v,
                     uint32_t rows, int fresh, float *conv, float *ssm, float *out) {
  const uint32_t D = x->head_dim, qd = x->q_heads * D, kvd = x->kv_heads * D;
  const uint32_t group = x->q_heads / x->kv_heads;
  const float *cw = x->conv_w + (size_t)layer * x->conv_dim * DEMO_CONV_KERNEL;
  const float *gw = x->gate_w + (size_t)layer * kvd;
  if (fresh) { /* a slot's stale bytes are a previous owner's: position 0 starts from zeros */
    memset(conv, 0, x->conv_floats * sizeof(float));
    memset(ssm, 0, x->ssm_floats * sizeof(float));
  }
  float *xc = x->scratch;
  for (uint32_t r = 0; r < rows; r++) {
    conv_token(x, cw, q + (size_t)r * qd, k + (size_t)r * kvd, v + (size_t)r * kvd, conv, xc);
    for (uint32_t h = 0; h < x->kv_heads; h++) {
      float *kh = xc + qd + h * D;
      const float *vh = xc + qd + kvd + h * D;
      const float kn = l2_inv(kh, D);
      float dot = gate_bias(x, h);
      for (uint32_t i = 0; i < D; i++) kh[i] *= kn, dot += gw[h * D + i] * kh[i];
      const float g = 1.0f / (1.0f + expf(-dot)), a = 1.0f - g;
      float *S = ssm + (size_t)h * D * D; /* S: [k_dim][v_dim] */
      for (uint32_t i = 0; i < D; i++)
        for (uint32_t j = 0; j < D; j++) S[i * D + j] = g * S[i * D + j] + a * kh[i] * vh[j];
    }
    for (uint32_t hq = 0; hq < x->q_heads; hq++) {
      const float *qh = xc + hq * D, *S = ssm + (size_t)(hq / group) * D * D;
      const float qn = l2_inv(qh, D);
      float *o = out + (size_t)r * qd + hq * D;
      memset(o, 0, D * sizeof *o);
      for (uint32_t i = 0; i < D; i++) {
        const float qi = qh[i] * qn;
        for (uint32_t j = 0; j < D; j++) o[j] += qi * S[i * D + j];
      }
    }
  }
}

int demo_state_region_get(pkv_engine *e, const demo_mixer *x, demo_state_region *sr) {
  memset(sr, 0, sizeof *sr);
  struct pkv_pool_info pi;
  memset(&pi, 0, sizeof pi);
  pi.struct_size = sizeof pi;
  if (pkv_pool_info(e, &pi) != PKV_OK || !pi.state_base) return -1;
  sr->base = pi.state_base, sr->slot_bytes = pi.state_slot_bytes,
  sr->num_slots = pi.num_state_slots;
  for (uint32_t l = 0; l < x->num_layers; l++) {
    if (!x->is_state[l]) continue;
    struct pkv_layer_info li;
    memset(&li, 0, sizeof li);
    li.struct_size = sizeof li;
    if (pkv_layer_info(e, l, &li) != PKV_OK || li.kind != PKV_LAYER_STATE) return -1;
    /* the layout is pkv's to choose; the demo checks it is the one its specs asked for */
    if (li.state_bytes[0] != x->conv_floats * sizeof(float) ||
        li.state_bytes[1] != x->ssm_floats * sizeof(float))
      return -1;
    sr->offset[l][0] = li.state_offset[0], sr->offset[l][1] = li.state_offset[1];
  }
  return 0;
}

int demo_mixer_batch(demo_mixer *x, uint32_t layer, const pkv_batch_view *v,
                     const demo_state_region *sr, const float *q, const float *k, const float *vv,
                     float *out, char *error, size_t cap) {
  const uint32_t qd = x->q_heads * x->head_dim, kvd = x->kv_heads * x->head_dim;
  if (!v->state_slots) {
    snprintf(error, cap, "the batch lists no state slots on an engine with STATE layers");
    return -1;
  }
  for (uint32_t i = 0; i < v->num_seqs; i++) {
    const int32_t slot = v->state_slots[i], r0 = v->query_start[i];
    const uint32_t rows = (uint32_t)(v->query_start[i + 1] - r0);
    if (slot < 0 || (uint32_t)slot >= sr->num_slots) {
      snprintf(error, cap, "sequence %llu's state slot %d is outside the %u slots",
               (unsigned long long)v->seq_ids[i], slot, sr->num_slots);
      return -1;
    }
    unsigned char *s = (unsigned char *)sr->base + (uint64_t)slot * sr->slot_bytes;
    demo_mixer_rows(x, layer, q + (size_t)r0 * qd, k + (size_t)r0 * kvd, vv + (size_t)r0 * kvd,
                    rows, v->positions[r0] == 0, (float *)(s + sr->offset[layer][0]),
                    (float *)(s + sr->offset[layer][1]), out + (size_t)r0 * qd);
  }
  return 0;
}
