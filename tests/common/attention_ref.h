/* fp64 references for the KV-side ops: attention over contiguous K/V, write_kv, copy_blocks.
 * Naive on purpose (llm.c's habit): every kernel and the CPU backend are checked against these.
 * Plain C, usable from C and C++ tests. */
#ifndef PKV_TESTS_ATTENTION_REF_H
#define PKV_TESTS_ATTENTION_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Causal attention of one sequence's new tokens over its whole context.
 * q:   [num_q][q_heads][head_dim]       the new tokens' queries
 * k,v: [context_len][kv_heads][head_dim] the whole context, new tokens last
 * out: [num_q][q_heads][head_dim]
 * New token i sits at position context_len - num_q + i and attends to positions 0..that.
 * q head h reads kv head h / (q_heads / kv_heads). scale <= 0 means 1/sqrt(head_dim). */
void pkv_ref_attention(const double *q, const double *k, const double *v, double *out,
                       uint32_t num_q, uint32_t context_len, uint32_t q_heads, uint32_t kv_heads,
                       uint32_t head_dim, double scale);

/* As pkv_ref_attention with a sliding window: new token at position p attends to positions
 * max(0, p - window + 1) .. p; window 0 = all of them. */
void pkv_ref_attention_window(const double *q, const double *k, const double *v, double *out,
                              uint32_t num_q, uint32_t context_len, uint32_t q_heads,
                              uint32_t kv_heads, uint32_t head_dim, double scale, uint32_t window);

/* One layer as pkv 0.5 describes it (pkv_layer_spec); the functions above are its shorthands.
 * q:   [num_q][q_heads][head_dim]              the new tokens' queries
 * k:   [context_len][kv_heads][head_dim]       the whole context, new tokens last
 * v:   [context_len][kv_heads][v_dim], or NULL: V is K (K = V, and MLA's view), each key's
 *      first v_dim values (v_dim <= head_dim)
 * out: [num_q][q_heads][v_dim]
 * New token i sits at p = context_len - num_q + i and attends to keys first .. p: first is
 * p - window + 1 with a window, floor(p / chunk) * chunk with a chunk (never both), else 0.
 * Each score is q . k times scale, then c tanh(s / c) with softcap c > 0; a sink logit of the
 * q head (sinks non-NULL) joins the softmax denominator, exp(sink - max) added to its sum, and
 * adds nothing to the output. */
typedef struct pkv_ref_layer {
  uint32_t q_heads, kv_heads, head_dim, v_dim;
  double scale;        /* <= 0: 1/sqrt(head_dim) */
  uint32_t window;     /* 0 = none */
  uint32_t chunk;      /* 0 = none */
  double softcap;      /* 0 = none */
  const double *sinks; /* [q_heads] logits, or NULL */
} pkv_ref_layer;
void pkv_ref_attention_layer(const pkv_ref_layer *layer, const double *q, const double *k,
                             const double *v, double *out, uint32_t num_q, uint32_t context_len);
/* The first key a token at pos sees in layer (its window's or chunk's). */
uint32_t pkv_ref_first_key(const pkv_ref_layer *layer, uint32_t pos);

/* The rows of positions 0 .. num_rows - 1 of a paged cache, in order, into dst ([num_rows]
 * [row_bytes]): position p's row is row p % block_size of block block_table[p / block_size],
 * blocks block_stride bytes apart from cache (a strided page layout; dense: block_size *
 * row_bytes). Blocks -1 (given back) leave their rows in dst as they were. */
void pkv_ref_gather_rows(const void *cache, const int32_t *block_table, uint32_t block_size,
                         size_t block_stride, size_t row_bytes, uint32_t num_rows, void *dst);

/* Multi-head latent attention in the absorbed form (PKV_KV_LAYOUT_MLA): one latent per token,
 * K is the whole latent and V a view of its first kv_lora_rank values.
 * q:      [num_q][q_heads][kv_lora_rank + rope_dim]   queries projected into latent space
 * latent: [context_len][kv_lora_rank + rope_dim]     the whole context, new tokens last
 * out:    [num_q][q_heads][kv_lora_rank]
 * Causal as pkv_ref_attention (every q head reads the one latent); scale is the host's (> 0). */
void pkv_ref_mla_attention(const double *q, const double *latent, double *out, uint32_t num_q,
                           uint32_t context_len, uint32_t q_heads, uint32_t kv_lora_rank,
                           uint32_t rope_dim, double scale);

/* fp8 KV (OCP e4m3fn, or e5m2 when e5m2 is 1): the code of x / scale (the quotient in fp32),
 * the nearest representable value with ties to the even code, saturating to +-448 (+-57344);
 * NaN -> 0x7F. Found by comparing against every code, not by bit tricks. */
uint8_t pkv_ref_fp8_encode(float x, float scale, int e5m2);
/* The value of an fp8 code (not yet times its scale). */
double pkv_ref_fp8_decode(uint8_t code, int e5m2);

/* write_kv on one layer, row_bytes = kv_heads * head_dim * dtype bytes: row t of k and v goes to
 * slot slot_mapping[t] of k_cache and v_cache ([slots][row_bytes]); slot -1 is skipped. */
void pkv_ref_write_kv(const void *k, const void *v, void *k_cache, void *v_cache,
                      const int64_t *slot_mapping, uint32_t num_tokens, size_t row_bytes);

/* copy_blocks: for each pair and each layer, block pairs[2i] -> pairs[2i + 1], K and V.
 * Pools: [num_layers][num_blocks][block_bytes]. */
void pkv_ref_copy_blocks(void *k_pool, void *v_pool, uint32_t num_layers, uint32_t num_blocks,
                         size_t block_bytes, const int32_t *pairs, uint32_t num_pairs);

/* Per element |got - ref| <= atol + rtol * |ref|, NaN never passes. Prints the first 10
 * mismatches (with their index) and the max error under `label`; returns the mismatch count. */
size_t pkv_ref_compare(const char *label, const double *got, const double *ref, size_t n,
                       double atol, double rtol);

#ifdef __cplusplus
}
#endif

#endif
