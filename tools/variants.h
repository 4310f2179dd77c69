/*
 * variants.h - `pkv profile`'s attention variants (DESIGN.md §12): the KV cache's dtype (fp8 and
 * its scales) and sliding windows (KV groups), read from flags and the config, printed with what
 * they gain against the same model with full attention and model-dtype KV in the same memory.
 */
#ifndef PKV_TOOLS_VARIANTS_H
#define PKV_TOOLS_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include <pkv/pkv.h>

/* The flags, as given (NULL / not seen when absent). */
typedef struct variant_flags {
  const char *kv_dtype; /* --kv-dtype NAME */
  uint32_t window;      /* --window N */
  int window_seen;
  const char *layer_windows; /* --layer-windows LIST */
} variant_flags;

/* "bf16", "fp8_e4m3", ...: pkv's names of PKV_DTYPE_*. */
const char *variants_dtype_name(int32_t dtype);
uint32_t variants_dtype_bytes(int32_t dtype);
/* Parses a dtype name (bf16, bfloat16, f16, fp16, float16, half, f32, fp32, float32, and with
 * kv_ok fp8_e4m3, fp8 (= fp8_e4m3), fp8_e5m2); 0, or -1 when unknown. */
int variants_parse_dtype(const char *s, int kv_ok, int32_t *out);

/* Parses LIST into out[num_layers]: comma-separated windows (0 = full attention), each W or WxK
 * (W for K layers in a row), naming every layer, or ending in ",..." to repeat over the layers
 * (cut at the last one). 0, or -1 with the reason in
 * err[cap] ("..." and counts named). */
int variants_parse_layer_windows(const char *list, uint32_t num_layers, uint32_t *out, char *err,
                                 size_t cap);

/* Applies the config's per-layer windows and the flags to p (its shape already read from
 * config_text). Windows come from --window (every layer), --layer-windows, or else the config
 * (pkv_hf_config_layer_windows, when its layers differ). *windows is the array p->layer_windows
 * points at (NULL when none), for the caller to free after the last use of p. Returns an exit
 * code (cli.h), having printed the reason. */
int variants_apply(const variant_flags *f, const char *config_path, const char *config_text,
                   size_t config_len, pkv_engine_params *p, uint32_t **windows);

/* How many of p's KV groups have full attention (pkv_kv_groups; 0 when they cannot be had). */
uint32_t variants_full_groups(const pkv_engine_params *p);

/* The model line's follow-up ("kv cache", "windows") of the table. */
void variants_print_model(const pkv_engine_params *p, const pkv_kv_budget *b);
/* The KV groups and the gains, after the budget's table (nothing for a model with neither fp8
 * nor windows). */
void variants_print_table(const pkv_engine_params *p, const pkv_kv_budget *b);
/* The "groups" and "compare" members of the JSON object (each line starts with a comma). */
void variants_print_json(const pkv_engine_params *p, const pkv_kv_budget *b);

#endif /* PKV_TOOLS_VARIANTS_H */
