/* e2e_model.h - the end-to-end tests' tiny transformer (test_e2e_transformer.c tells the model
 * and its modes): its weights, its forward pass with the KV side a callback, the naive contiguous
 * KV cache it is checked against, and the layer calls that put the KV side on pkv. Shared by
 * test_e2e_transformer.c (every attention mode's story) and e2e_recurrent.c (the recurrent
 * model's prefix hits from state checkpoints). */
#ifndef PKV_TESTS_E2E_MODEL_H
#define PKV_TESTS_E2E_MODEL_H

#include <pkv/pkv.h>

#include <math.h>
#include <stdint.h>

enum { VOCAB = 200, HID = 64, LAYERS = 3, QH = 4, KVH = 2, HD = 16, FFN = 128, BS = 7 };
enum { GEN = 10, MAX_TOKENS = 64 };
/* The MLA model: per token one latent of RANK + ROPE values (the compressed KV and the shared
 * rotary key); per q head NOPE + ROPE query values and VD output values. */
enum { RANK = 32, ROPE = 16, NOPE = 16, VD = HD, LATENT = RANK + ROPE, QKD = NOPE + ROPE };
/* The DSA model (kv_mode.mla E2E_DSA: DeepSeek V3.2 / GLM-5's sparse attention): the MLA model
 * with a lightning indexer in every layer: per token an indexer key of IDX_DIM values (the cache
 * keeps it in fp8 e4m3 with one scale per token), per query IDX_HEADS indexer heads of IDX_DIM
 * and a weight per head, all projected from the normed hidden state; each query attends over
 * the IDX_TOPK keys of its context that score best only. */
enum { E2E_MLA = 1, E2E_DSA = 2, IDX_DIM = 16, IDX_HEADS = 3, IDX_TOPK = 8 };
#define LOGIT_ATOL 5e-5
#define LOGIT_RTOL 5e-5
#define FP8_LOGIT_TOL 2e-2

/* How K/V are kept (both sides): kv_dtype 0 = f32, PKV_DTYPE_FP8_* with scales, or (naive side
 * only) BF16; window 0 = full attention. */
typedef struct kv_mode {
  const char *name;
  int32_t kv_dtype;
  uint32_t window;
  int hybrid; /* the window on layers 0 and 2 only: a windowed and a full KV group */
  int mla;    /* the model's attention is multi-head latent attention (E2E_MLA), with DSA's
                 indexer (E2E_DSA) */
  float scales[LAYERS][2][KVH]; /* fp8: k, v of each layer's kv heads */
  int specs;                    /* a model described per layer (pkv's layer_specs): SPECS_* */
} kv_mode;

/* The per-layer models (window: kv_mode's). gpt-oss-like: the window on layers 0 and 2, full
 * attention on 1, a learned sink logit per (layer, q head) in every softmax. Gemma-4-like: layer
 * 0 windowed (2 kv heads), layer 1 full with one kv head whose V is its K (k_eq_v: the first
 * head of the model's k, stored once), layer 2 SHARED: no KV of its own, it attends over layer
 * 0's with its own queries. */
enum { SPECS_NONE = 0, SPECS_GPT_OSS = 1, SPECS_GEMMA4 = 2, SPECS_RECURRENT = 3 };
/* The recurrent model's STATE layer and its state: a conv state (the last CONV - 1 rows of v,
 * oldest first) and per kv head an SSM state S [HD (k)][HD (v)]. */
enum { RECURRENT_LAYER = 1, CONV = 3 };
#define CONV_FLOATS ((CONV - 1) * KVH * HD)
#define SSM_FLOATS (KVH * HD * HD)

static inline int layer_recurrent(const kv_mode *mode, uint32_t l) {
  return mode->specs == SPECS_RECURRENT && l == RECURRENT_LAYER;
}

static inline uint32_t layer_window(const kv_mode *mode, uint32_t l) {
  return (mode->hybrid || mode->specs) && l == 1 ? 0 : mode->window;
}
static inline int layer_kv_heads(const kv_mode *mode, uint32_t l) {
  return mode->specs == SPECS_GEMMA4 && l == 1 ? 1 : KVH;
}
static inline int layer_k_eq_v(const kv_mode *mode, uint32_t l) {
  return mode->specs == SPECS_GEMMA4 && l == 1;
}
static inline uint32_t layer_source(const kv_mode *mode, uint32_t l) {
  return mode->specs == SPECS_GEMMA4 && l == 2 ? 0 : l;
}
/* gpt-oss-like's sink of (layer, q head); -INFINITY: none. */
static inline float layer_sink(const kv_mode *mode, uint32_t l, int h) {
  return mode->specs == SPECS_GPT_OSS ? 0.4f * (float)h - 0.7f + 0.3f * (float)l : -INFINITY;
}

typedef struct layer_w {
  float norm1[HID], norm2[HID];
  float wq[QH * HD][HID], wk[KVH * HD][HID], wv[KVH * HD][HID], wo[HID][QH * HD];
  float gate[FFN][HID], up[FFN][HID], down[HID][FFN];
  /* MLA (wo shared: VD == HD): q [QH][NOPE | ROPE], the latent [RANK | ROPE], the up-projections
   * of the latent's RANK part to each head's key (NOPE) and value (VD) */
  float mq[QH * QKD][HID], dkv[LATENT][HID], uk[QH][NOPE][RANK], uv[QH][VD][RANK];
  /* DSA: the indexer's queries [IDX_HEADS][IDX_DIM], key [IDX_DIM] and head weights */
  float iq[IDX_HEADS * IDX_DIM][HID], ik[IDX_DIM][HID], iw[IDX_HEADS][HID];
} layer_w;

typedef struct model {
  float embed[VOCAB][HID];
  layer_w layer[LAYERS];
  float norm_f[HID];
  float head[VOCAB][HID];
} model;

/* The KV side of one layer: rows' q [n][QH][HD], k/v [n][KVH][HD] -> out [n][QH][HD]. MLA, on
 * pkv: q [n][QH][LATENT] (absorbed), k the latents [n][LATENT], v NULL -> out [n][QH][RANK]; on the
 * naive side: q [n][QH][QKD], k [n][QH][QKD], v [n][QH][VD] (decompressed) -> out [n][QH][VD]. */
typedef int (*attention_fn)(void *ctx, uint32_t layer, const float *q, const float *k,
                            const float *v, float *out);

/* Deterministic random weights (the same on every call). */
void init_model(model *m);
/* Runs n rows (token, position) through the model, the KV side by attn; logits [n][VOCAB].
 * mla: the model's MLA attention, absorbed (pkv's form) or not (the naive side's). */
int forward(const model *m, const int32_t *tokens, const int32_t *positions, uint32_t n, int mla,
            int absorbed, attention_fn attn, void *ctx, float *logits);
/* The best (rank 0) or second best (rank 1) token. */
int32_t pick(const float *logits, int rank);
/* Greedy generation of GEN tokens after prompt (token `second_at` takes the second best), K/V
 * kept as mode says in a contiguous cache per sequence; amax (may be NULL) grows to the largest
 * |k| and |v| seen. With forced, the tokens fed back are forced[g], not the picks. */
void naive_generate(const model *m, const int32_t *prompt, uint32_t len, int second_at,
                    const kv_mode *mode, float (*amax)[2][KVH], const int32_t *forced,
                    int32_t *out_tokens, float (*out_logits)[VOCAB]);
/* How close an fp8 run came to a value on the other side of a rounding edge (relative). */
extern double closest_edge;

/* The pkv side's attention_fn (ctx: the open pkv_batch): pkv_attention on the layers of
 * e2e_mode, the recurrence on the state in the batch's working slots of e2e_engine. With e2e_tp
 * > 1 (default 1) the engine holds that many tensor-parallel ranks (ranks ALL): each layer's
 * attention is split over them, rank r attending with its q and kv heads on its own pool (its
 * handle, pkv_batch_rank), the ranks' outputs put back in head order (what the all-gather after
 * the o-projection gives); plain attention layers only (no MLA, no layer specs). */
extern const kv_mode *e2e_mode;
extern pkv_engine *e2e_engine;
extern uint32_t e2e_tp;
int attention_on_pkv(void *ctx, uint32_t l, const float *q, const float *k, const float *v,
                     float *out);

/* ---------------------------------------------------------------- DSA (e2e_dsa_model.c)
 * An indexer key as the naive side caches it: pkv.h's fp8 e4m3 codes (their values) and the
 * token's fp32 scale. */
typedef struct dsa_key {
  float code[IDX_DIM];
  float scale;
} dsa_key;
/* The indexer rows of the layer call in flight (forward sets them before attn on a DSA layer):
 * q [n][IDX_HEADS][IDX_DIM], k [n][IDX_DIM], w [n][IDX_HEADS]. */
typedef struct dsa_rows {
  const float *q, *k, *w;
} dsa_rows;
extern dsa_rows dsa_current;
/* Projects n normed hidden states h [n][HID] through w's indexer into dsa_current (no rotary
 * part: a token repeated gives equal keys in layer 0, so some top-k cuts fall between equal
 * scores and pkv.h's tie rule decides them); dsa_release frees them. */
void dsa_project(const layer_w *w, const float *h, uint32_t n);
void dsa_release(void);
/* x quantized as pkv_indexer_write specifies (scale = max|x| / 448, 1 for zeros; codes
 * round-to-nearest-even of x / scale, saturating). */
void dsa_quantize(const float *x, dsa_key *out);
/* The naive side's top-k of a query at position pos over keys[0 .. pos]: scores
 * sum_h w[h] * relu(q[h] . key) in fp64, the IDX_TOPK best (NaN last, ties to the lower
 * position), written ascending into sel; returns how many (min(pos + 1, IDX_TOPK)). */
uint32_t dsa_select(const dsa_key *keys, int32_t pos, const float *q, const float *w, int32_t *sel);
/* A DSA layer on pkv: pkv_indexer_write, pkv_indexer_topk (positions, and slots checked
 * against the batch's block tables), pkv_sparse_mla_attention (qa, lat: MLA's absorbed form). */
int dsa_on_pkv(pkv_batch *b, uint32_t l, const float *qa, const float *lat, float *out);
/* How far the DSA runs were from a choice f32 noise could flip: the closest indexer value to an
 * fp8 rounding edge (relative, as closest_edge), the smallest relative score gap across a top-k
 * cut, and how many cuts (of how many) fell between equal scores (the tie rule decided). */
extern double dsa_closest_edge, dsa_min_cut_gap;
extern unsigned dsa_cut_ties, dsa_cuts;

#endif
