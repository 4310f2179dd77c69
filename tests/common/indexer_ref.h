/* fp64 references for sparse attention (DeepSeek V3.2 / GLM-5's indexer, DESIGN.md §14):
 * quantizing an indexer key, its score, the top-k selection and MLA over the selected latents,
 * each as pkv.h's pkv_indexer_write / pkv_indexer_topk / pkv_sparse_mla_attention describe it.
 * Naive on purpose, like attention_ref.h (link attention_ref.c too: the fp8 codes are its).
 * Plain C, usable from C and C++ tests, and thread-safe. */
#ifndef PKV_TESTS_INDEXER_REF_H
#define PKV_TESTS_INDEXER_REF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The fp32 scale of an fp8 indexer key x [dim]: max|x| / 448 (in fp32, as the kernels compute
 * it), 1 for a key of zeros; with ue8m0 (PKV_INDEXER_SCALE_UE8M0) rounded up to a power of
 * two, 2^ceil(log2(s)) exactly. */
float pkv_ref_indexer_scale(const float *x, uint32_t dim, int ue8m0);

/* One key as pkv_indexer_write stores it in fp8: codes [dim] (OCP e4m3fn of x / scale, fp32
 * quotient, round to nearest even, saturating; pkv_ref_fp8_encode) and *scale. */
void pkv_ref_indexer_quantize_fp8(const float *x, uint32_t dim, int ue8m0, uint8_t *codes,
                                  float *scale);

/* bf16: the bits of x rounded to nearest even (NaN stays a NaN). */
uint16_t pkv_ref_bf16_bits(float x);
/* The value of bf16 bits. */
double pkv_ref_bf16_value(uint16_t bits);

/* A cached key's values, key [dim] in fp64: fp8 codes times scale, or bf16 bits' values. */
void pkv_ref_indexer_key_fp8(const uint8_t *codes, float scale, uint32_t dim, double *key);
void pkv_ref_indexer_key_bf16(const uint16_t *bits, uint32_t dim, double *key);

/* score = sum over h of w[h] * relu(q[h] . key), q [heads][dim], w [heads], key [dim]; relu
 * keeps a NaN (a NaN key scores NaN, which the top-k ranks last). */
double pkv_ref_indexer_score(const double *q, const double *w, const double *key, uint32_t heads,
                             uint32_t dim);

/* The top-k of scores [n] (key s at position s): the topk keys of highest score, of equal
 * scores the lower position, a NaN below every number; out [topk] gets them ascending by
 * position, then -1 when n < topk (all n kept). Returns how many were kept, min(n, topk). */
uint32_t pkv_ref_topk(const double *scores, uint32_t n, uint32_t topk, int32_t *out);

/* Positions [count] (-1 kept as -1) to slots of a block table: block_table[p / block_size] *
 * block_size + p % block_size (PKV_TOPK_SLOTS). */
void pkv_ref_positions_to_slots(const int32_t *positions, uint32_t count,
                                const int32_t *block_table, uint32_t block_size, int32_t *slots);

/* Sparse MLA (absorbed form) of one new token at position pos.
 * q:       [q_heads][kv_lora_rank + rope_dim]    the token's queries in latent space
 * latent:  [pos + 1][kv_lora_rank + rope_dim]    its context, as the cache holds it (fp64)
 * indices: [topk] positions; those outside 0 .. pos (-1: padding) are skipped, a position given
 *          twice counts twice
 * out:     [q_heads][kv_lora_rank] softmax over the kept keys of q . latent * scale, weighting
 *          the latents' first kv_lora_rank values; 0 when no key is kept. */
void pkv_ref_sparse_mla(const double *q, const double *latent, const int32_t *indices,
                        uint32_t topk, uint32_t pos, uint32_t q_heads, uint32_t kv_lora_rank,
                        uint32_t rope_dim, double scale, double *out);

#ifdef __cplusplus
}
#endif

#endif
