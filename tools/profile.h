/*
 * profile.h - what profile.c shares with profile_json.c (`pkv profile --json`).
 */
#ifndef PKV_TOOLS_PROFILE_H
#define PKV_TOOLS_PROFILE_H

#include <pkv/pkv.h>

/* "cpu", "cuda" or "auto" for a PKV_DEVICE_*. */
const char *profile_device_name(int32_t device);

/* The JSON object of a profile: the config's path, pkv_profile's status and message (error, ""
 * when none), the model, every budget term and the groups and comparisons (variants_print_json). */
void profile_print_json(const char *config, const pkv_engine_params *p, const pkv_kv_budget *b,
                        pkv_status s, const char *error);

/* The table of a profile (profile_table.c): config is the path given. */
void profile_print_table(const char *config, const pkv_engine_params *p, const pkv_kv_budget *b);

/* A model described per layer (p->layer_specs set; profile_layers.c): its kinds of layers, its KV
 * groups and totals as a table, and the groups as --json's "groups" (variants_print_json adds
 * "compare"). */
void profile_print_layers(const pkv_engine_params *p);
void profile_print_layer_groups(const pkv_engine_params *p, const pkv_kv_budget *b);
void profile_layer_groups_json(const pkv_engine_params *p, const pkv_kv_budget *b);
/* "sliding windows", "chunks" or "windows and chunks": what a model's windows are called. */
const char *profile_windows_word(const pkv_engine_params *p);
/* p's specs with every layer under full attention (malloc'd; NULL without memory). */
pkv_layer_spec *profile_full_attention_specs(const pkv_engine_params *p);

/* Sparse attention's indexer (profile_indexer.c; nothing, or "indexer": null, for a model without
 * one): its line under the model's, the per-token terms under bytes per token (latent + indexer,
 * a layer), and --json's "indexer" member (starting with a comma). */
void profile_print_indexer_model(const pkv_engine_params *p, const pkv_kv_budget *b);
void profile_print_indexer_rows(const pkv_engine_params *p, const pkv_kv_budget *b);
void profile_indexer_json(const pkv_engine_params *p, const pkv_kv_budget *b);

#endif /* PKV_TOOLS_PROFILE_H */
