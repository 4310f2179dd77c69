/*
 * profile_indexer.c - `pkv profile` of a model with sparse attention's indexer (DeepSeek V3.2,
 * GLM-5; DESIGN.md §14): each MLA layer keeps, per token, its latent and an indexer key in the
 * same page, so a token of a layer costs
 *   latent  = (kv_lora_rank + qk_rope_head_dim) x kv dtype bytes
 *   indexer = index_head_dim x (1 for fp8 + a 4-byte fp32 scale, or 2 for bf16)
 * and the model's bytes per token are their sum over its layers. Every term is printed, in the
 * table and in --json, so a person can check the bytes by hand.
 */
#include <stdio.h>

#include "cli.h"
#include "profile.h"
#include "variants.h"

static const pkv_layer_spec *spec_at(const pkv_engine_params *p, uint32_t l) {
  return (const pkv_layer_spec *)((const char *)p->layer_specs + (size_t)l * p->layer_spec_size);
}

/* One token's indexer bytes in a layer: its key's values, and fp8's scale. */
static uint64_t key_bytes(const pkv_layer_spec *s) {
  return (uint64_t)s->index_head_dim * (s->index_dtype == PKV_DTYPE_BF16 ? 2 : 1);
}
static uint64_t scale_bytes(const pkv_layer_spec *s) {
  return s->index_dtype == PKV_DTYPE_BF16 ? 0 : 4;
}

/* The indexer's numbers: the first layer with one, how many have one, and the model's bytes per
 * token, latent and indexer summed over every cached MLA layer. */
typedef struct indexer_terms {
  const pkv_layer_spec *first;                  /* NULL: no layer has an indexer */
  uint32_t num_layers, num_latent_layers, same; /* same: every indexer is first's */
  uint64_t latent_bytes, latent_total, indexer_total;
} indexer_terms;

static indexer_terms terms_of(const pkv_engine_params *p, const pkv_kv_budget *b) {
  indexer_terms t = {NULL, 0, 0, 1, 0, 0, 0};
  for (uint32_t l = 0; p->layer_specs != NULL && l < p->num_layers; l++) {
    const pkv_layer_spec *s = spec_at(p, l);
    if (s->kind != PKV_LAYER_MLA) continue;
    t.latent_bytes = (uint64_t)s->head_dim * variants_dtype_bytes(b->kv_dtype);
    t.num_latent_layers++;
    t.latent_total += t.latent_bytes;
    if (!s->index_head_dim) continue;
    if (t.first == NULL) t.first = s;
    t.same &= s->index_head_dim == t.first->index_head_dim &&
              s->index_dtype == t.first->index_dtype &&
              s->index_n_heads == t.first->index_n_heads && s->index_topk == t.first->index_topk;
    t.num_layers++;
    t.indexer_total += key_bytes(s) + scale_bytes(s);
  }
  return t;
}

static const char *index_dtype_name(const pkv_layer_spec *s) {
  return s->index_dtype == PKV_DTYPE_BF16 ? "bf16" : "fp8_e4m3";
}

void profile_print_indexer_model(const pkv_engine_params *p, const pkv_kv_budget *b) {
  const indexer_terms t = terms_of(p, b);
  if (t.first == NULL) return;
  const pkv_layer_spec *s = t.first;
  printf(
      "  indexer    index_head_dim %u: %s values%s = %llu B a token a layer,\n"
      "             beside the latent in its page, in %u layers%s; %u query heads (every rank's);\n"
      "             each token attends to its top %u keys\n",
      s->index_head_dim, index_dtype_name(s), scale_bytes(s) ? " + a 4 B fp32 scale" : "",
      (unsigned long long)(key_bytes(s) + scale_bytes(s)), t.num_layers,
      t.same ? "" : " (not all alike: see the layers)", s->index_n_heads, s->index_topk);
}

void profile_print_indexer_rows(const pkv_engine_params *p, const pkv_kv_budget *b) {
  const indexer_terms t = terms_of(p, b);
  if (t.first == NULL) return;
  const pkv_layer_spec *s = t.first;
  char h[32], note[160];
  const uint64_t index_bytes = key_bytes(s) + scale_bytes(s);
  snprintf(note, sizeof note, "%u values x %u B (%s)", s->head_dim,
           variants_dtype_bytes(b->kv_dtype), variants_dtype_name(b->kv_dtype));
  printf("  %-26s %12s %16llu   %s\n", "  latent, a layer",
         cli_format_size(t.latent_bytes, h, sizeof h), (unsigned long long)t.latent_bytes, note);
  snprintf(note, sizeof note, "%u values x %u B (%s)%s", s->index_head_dim,
           s->index_dtype == PKV_DTYPE_BF16 ? 2 : 1, index_dtype_name(s),
           scale_bytes(s) ? " + 4 B (its fp32 scale)" : "");
  printf("  %-26s %12s %16llu   %s\n", "  + indexer, a layer",
         cli_format_size(index_bytes, h, sizeof h), (unsigned long long)index_bytes, note);
  const uint64_t total = t.latent_total + t.indexer_total;
  if (t.same && t.num_layers == t.num_latent_layers)
    snprintf(note, sizeof note, "x %u layers = %llu", t.num_layers, (unsigned long long)total);
  else
    snprintf(note, sizeof note, "%u latents + %u indexers: %llu + %llu = %llu", t.num_latent_layers,
             t.num_layers, (unsigned long long)t.latent_total, (unsigned long long)t.indexer_total,
             (unsigned long long)total);
  printf("  %-26s %12s %16llu   %s\n", "  = a layer",
         cli_format_size(t.latent_bytes + index_bytes, h, sizeof h),
         (unsigned long long)(t.latent_bytes + index_bytes), note);
}

void profile_indexer_json(const pkv_engine_params *p, const pkv_kv_budget *b) {
  const indexer_terms t = terms_of(p, b);
  if (t.first == NULL) {
    printf(",\n  \"indexer\": null");
    return;
  }
  const pkv_layer_spec *s = t.first;
  printf(
      ",\n  \"indexer\": {\"num_layers\": %u, \"all_alike\": %s, \"index_head_dim\": %u, "
      "\"index_dtype\": \"%s\", \"index_n_heads\": %u, \"index_topk\": %u,\n"
      "    \"key_bytes_per_token\": %llu, \"scale_bytes_per_token\": %llu, "
      "\"indexer_bytes_per_token_per_layer\": %llu, \"latent_bytes_per_token_per_layer\": %llu,\n"
      "    \"bytes_per_token_per_layer\": %llu, \"latent_bytes_per_token\": %llu, "
      "\"indexer_bytes_per_token\": %llu, \"model_bytes_per_token\": %llu}",
      t.num_layers, t.same ? "true" : "false", s->index_head_dim, index_dtype_name(s),
      s->index_n_heads, s->index_topk, (unsigned long long)key_bytes(s),
      (unsigned long long)scale_bytes(s), (unsigned long long)(key_bytes(s) + scale_bytes(s)),
      (unsigned long long)t.latent_bytes,
      (unsigned long long)(t.latent_bytes + key_bytes(s) + scale_bytes(s)),
      (unsigned long long)t.latent_total, (unsigned long long)t.indexer_total,
      (unsigned long long)(t.latent_total + t.indexer_total));
}
