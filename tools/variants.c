/*
 * variants.c - `pkv profile`'s attention variants, the params: --kv-dtype, --window,
 * --layer-windows and the config's per-layer windows (see variants.h; variants_print.c prints
 * the KV groups and what they gain).
 */
#include "variants.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

static const struct {
  const char *name;
  int32_t dtype;
  int kv_only;
} dtype_names[] = {
    {"bf16", PKV_DTYPE_BF16, 0},    {"bfloat16", PKV_DTYPE_BF16, 0},
    {"f16", PKV_DTYPE_F16, 0},      {"fp16", PKV_DTYPE_F16, 0},
    {"float16", PKV_DTYPE_F16, 0},  {"half", PKV_DTYPE_F16, 0},
    {"f32", PKV_DTYPE_F32, 0},      {"fp32", PKV_DTYPE_F32, 0},
    {"float32", PKV_DTYPE_F32, 0},  {"fp8_e4m3", PKV_DTYPE_FP8_E4M3, 1},
    {"fp8", PKV_DTYPE_FP8_E4M3, 1}, {"fp8_e5m2", PKV_DTYPE_FP8_E5M2, 1},
};

const char *variants_dtype_name(int32_t d) {
  switch (d) {
    case PKV_DTYPE_F32:
      return "f32";
    case PKV_DTYPE_F16:
      return "f16";
    case PKV_DTYPE_BF16:
      return "bf16";
    case PKV_DTYPE_FP8_E4M3:
      return "fp8_e4m3";
    case PKV_DTYPE_FP8_E5M2:
      return "fp8_e5m2";
    default:
      return "?";
  }
}

uint32_t variants_dtype_bytes(int32_t d) {
  return d == PKV_DTYPE_F32 ? 4 : d == PKV_DTYPE_FP8_E4M3 || d == PKV_DTYPE_FP8_E5M2 ? 1 : 2;
}

static int is_fp8(int32_t d) { return d == PKV_DTYPE_FP8_E4M3 || d == PKV_DTYPE_FP8_E5M2; }

int variants_parse_dtype(const char *s, int kv_ok, int32_t *out) {
  for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
    if ((kv_ok || !dtype_names[i].kv_only) && strcasecmp(s, dtype_names[i].name) == 0)
      return *out = dtype_names[i].dtype, 0;
  return -1;
}

/* ---------------------------------------------------------------- --layer-windows */

/* One item of LIST: "W" or "WxK". 0, or -1 when malformed. */
static int parse_item(const char *item, size_t len, uint32_t *window, uint32_t *count) {
  char buf[48];
  if (len == 0 || len >= sizeof buf) return -1;
  memcpy(buf, item, len);
  buf[len] = '\0';
  char *x = strchr(buf, 'x');
  if (x == NULL) x = strchr(buf, 'X');
  *count = 1;
  if (x != NULL) {
    *x = '\0';
    if (cli_parse_u32(x + 1, count) != 0 || *count == 0) return -1;
  }
  return cli_parse_u32(buf, window);
}

int variants_parse_layer_windows(const char *list, uint32_t num_layers, uint32_t *out, char *err,
                                 size_t cap) {
  size_t n = strlen(list);
  const int repeat = n >= 3 && strcmp(list + n - 3, "...") == 0;
  if (repeat) {
    if (n < 5 || list[n - 4] != ',') {
      snprintf(err, cap, "'...' must follow windows and a comma (1024x5,0,...)");
      return -1;
    }
    n -= 4; /* ",..." */
  }
  size_t num_items = 1;
  for (size_t i = 0; i < n; i++) num_items += list[i] == ',';
  uint32_t *windows = malloc(num_items * sizeof *windows),
           *counts = malloc(num_items * sizeof *counts);
  if (windows == NULL || counts == NULL) {
    free(windows);
    free(counts);
    snprintf(err, cap, "out of memory");
    return -1;
  }
  uint64_t total = 0; /* layers the list names once through */
  int rc = 0;
  for (size_t i = 0, at = 0; i < num_items; i++) {
    const char *comma = memchr(list + at, ',', n - at);
    const size_t end = comma != NULL ? (size_t)(comma - list) : n;
    if (parse_item(list + at, end - at, &windows[i], &counts[i]) != 0) {
      snprintf(err, cap, "'%.*s' is not a window W or WxK (W keys, 0 = full attention; K >= 1)",
               (int)(end - at > 40 ? 40 : end - at), list + at);
      rc = -1;
      break;
    }
    total += counts[i];
    at = end + 1;
  }
  if (rc == 0 && !repeat && total != num_layers) {
    snprintf(err, cap, "the list names %llu layers, the model has %u%s", (unsigned long long)total,
             num_layers, total < num_layers ? " (end it with ,... to repeat it)" : "");
    rc = -1;
  }
  /* once (explicit), or round and round until every layer has its window (repeat) */
  for (uint32_t l = 0, i = 0, k = 0; rc == 0 && l < num_layers; l++) {
    out[l] = windows[i];
    if (++k == counts[i]) k = 0, i = (i + 1) % (uint32_t)num_items;
  }
  free(windows);
  free(counts);
  return rc;
}

/* ---------------------------------------------------------------- the params */

/* --window or --layer-windows into the specs of a model described per layer (the tool's own
 * array, p->layer_specs): each layer sliding with its window, or full. Chunked and shared layers
 * keep the config's (a shared layer's window is its source's). Returns an exit code. */
static int windows_into_specs(const variant_flags *f, const char *config_path,
                              pkv_engine_params *p) {
  char *specs = (char *)(uintptr_t)p->layer_specs; /* the tool's own, malloc'd by profile.c */
  for (uint32_t l = 0; l < p->num_layers; l++) {
    const pkv_layer_spec *s = (const pkv_layer_spec *)(specs + (size_t)l * p->layer_spec_size);
    if (s->kind == PKV_LAYER_SHARED || s->attention == PKV_ATTENTION_CHUNKED) {
      fprintf(
          stderr,
          "pkv profile: %s: --window and --layer-windows set sliding windows; layer %u is %s, "
          "its window the config's: leave the flags out for this model\n",
          config_path, l,
          s->kind == PKV_LAYER_SHARED ? "shared (it reads another layer's K and V)" : "chunked");
      return CLI_EXIT_USAGE;
    }
  }
  uint32_t *w = calloc(p->num_layers, sizeof *w);
  if (w == NULL) {
    fprintf(stderr, "pkv profile: out of memory for the windows of %u layers\n", p->num_layers);
    return CLI_EXIT_FAIL;
  }
  char err[160];
  if (f->window_seen) {
    for (uint32_t l = 0; l < p->num_layers; l++) w[l] = f->window;
  } else if (variants_parse_layer_windows(f->layer_windows, p->num_layers, w, err, sizeof err)) {
    fprintf(stderr, "pkv profile: bad --layer-windows '%s': %s\n", f->layer_windows, err);
    free(w);
    return CLI_EXIT_USAGE;
  }
  for (uint32_t l = 0; l < p->num_layers; l++) {
    pkv_layer_spec *s = (pkv_layer_spec *)(specs + (size_t)l * p->layer_spec_size);
    s->attention = w[l] ? PKV_ATTENTION_SLIDING : PKV_ATTENTION_FULL;
    s->window = w[l];
  }
  free(w);
  return CLI_EXIT_OK;
}

int variants_apply(const variant_flags *f, const char *config_path, const char *text, size_t len,
                   pkv_engine_params *p, uint32_t **windows) {
  *windows = NULL;
  if (f->window_seen && f->layer_windows != NULL) {
    fprintf(stderr, "pkv profile: --window sets every layer's window, --layer-windows each one's: "
                    "give one of them\n");
    return CLI_EXIT_USAGE;
  }
  if (f->kv_dtype != NULL) {
    int32_t kv = 0;
    if (variants_parse_dtype(f->kv_dtype, 1, &kv) != 0) {
      fprintf(stderr,
              "pkv profile: bad --kv-dtype '%s': expected f32, f16, bf16, fp8_e4m3 or fp8_e5m2\n",
              f->kv_dtype);
      return CLI_EXIT_USAGE;
    }
    if (!is_fp8(kv) && kv != p->dtype) {
      fprintf(stderr,
              "pkv profile: --kv-dtype %s under a %s model: the KV cache keeps the model's "
              "dtype or is fp8 (fp8_e4m3, fp8_e5m2)\n",
              variants_dtype_name(kv), variants_dtype_name(p->dtype));
      return CLI_EXIT_USAGE;
    }
    p->kv_dtype = kv == p->dtype ? 0 : kv; /* 0: the model's (PKV_DTYPE_F32 is 0 too) */
  }
  if (p->layer_specs != NULL) /* each layer's window or chunk is in its spec */
    return f->window_seen || f->layer_windows != NULL ? windows_into_specs(f, config_path, p)
                                                      : CLI_EXIT_OK;
  if (f->window_seen) { /* every layer, whatever the config says */
    p->sliding_window = f->window;
    p->layer_windows = NULL;
    return CLI_EXIT_OK;
  }
  if (f->layer_windows == NULL && p->sliding_window != 0) return CLI_EXIT_OK; /* one for all */
  uint32_t *w = calloc(p->num_layers, sizeof *w);
  if (w == NULL) {
    fprintf(stderr, "pkv profile: out of memory for the windows of %u layers\n", p->num_layers);
    return CLI_EXIT_FAIL;
  }
  if (f->layer_windows != NULL) {
    char err[160];
    if (variants_parse_layer_windows(f->layer_windows, p->num_layers, w, err, sizeof err) != 0) {
      fprintf(stderr, "pkv profile: bad --layer-windows '%s': %s\n", f->layer_windows, err);
      free(w);
      return CLI_EXIT_USAGE;
    }
  } else {
    uint32_t n = 0;
    pkv_status s = pkv_hf_config_layer_windows(text, len, w, p->num_layers, &n);
    if (s != PKV_OK) {
      fprintf(stderr, "pkv profile: %s: %s (%s)\n", config_path, pkv_last_error(),
              pkv_status_string(s));
      free(w);
      return CLI_EXIT_FAIL;
    }
  }
  uint32_t l = 1;
  while (l < p->num_layers && w[l] == w[0]) l++;
  if (l == p->num_layers) { /* every layer alike: sliding_window says it */
    p->sliding_window = w[0];
    p->layer_windows = NULL;
    free(w);
    return CLI_EXIT_OK;
  }
  p->layer_windows = w;
  *windows = w;
  return CLI_EXIT_OK;
}
