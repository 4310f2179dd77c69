/*
 * variants_print.c - `pkv profile`'s attention variants, the output: the kv dtype, the KV groups
 * (pkv_kv_groups) and what fp8 and windows gain against the same model with model-dtype KV and
 * full attention in the same memory (see variants.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "profile.h"
#include "variants.h"

static int is_fp8(int32_t d) { return d == PKV_DTYPE_FP8_E4M3 || d == PKV_DTYPE_FP8_E5M2; }

/* ---------------------------------------------------------------- the groups */

typedef struct groups {
  uint32_t num_groups, group_layers;
  uint32_t *group_window; /* [num_groups] */
  uint32_t *layer_group;  /* [num_layers]; NULL with one group (every layer in group 0) */
} groups;

/* The groups of p (pkv_kv_groups); -1 when they cannot be had (printed). */
static int get_groups(const pkv_engine_params *p, groups *g) {
  memset(g, 0, sizeof *g);
  pkv_status s = pkv_kv_groups(p, NULL, NULL, NULL, 0, &g->num_groups, &g->group_layers);
  if (s == PKV_OK) {
    g->group_window = malloc(g->num_groups * sizeof *g->group_window);
    /* per-layer arrays only with layer_windows: one group needs none (and a shape may claim 2^31 layers) */
    if (g->num_groups > 1) g->layer_group = malloc((size_t)p->num_layers * sizeof *g->layer_group);
    if (g->group_window == NULL || (g->num_groups > 1 && g->layer_group == NULL)) {
      fprintf(stderr, "pkv profile: out of memory for the KV groups\n");
      free(g->group_window);
      free(g->layer_group);
      return -1;
    }
    s = pkv_kv_groups(p, g->layer_group, NULL, g->group_window, g->num_groups, &g->num_groups,
                      NULL);
  }
  if (s != PKV_OK) {
    fprintf(stderr, "pkv profile: pkv_kv_groups: %s (%s)\n", pkv_last_error(),
            pkv_status_string(s));
    free(g->group_window);
    free(g->layer_group);
    return -1;
  }
  return 0;
}

static void free_groups(groups *g) {
  free(g->group_window);
  free(g->layer_group);
}

static int any_window(const groups *g) {
  for (uint32_t i = 0; i < g->num_groups; i++)
    if (g->group_window[i] != 0) return 1;
  return 0;
}

uint32_t variants_full_groups(const pkv_engine_params *p) {
  groups g;
  if (get_groups(p, &g) != 0) return 0;
  uint32_t n = 0;
  for (uint32_t i = 0; i < g.num_groups; i++) n += g.group_window[i] == 0;
  free_groups(&g);
  return n;
}

/* Layers of group i (all of them with one group). */
static uint32_t group_count(const pkv_engine_params *p, const groups *g, uint32_t i) {
  if (g->layer_group == NULL) return p->num_layers;
  uint32_t n = 0;
  for (uint32_t l = 0; l < p->num_layers; l++) n += g->layer_group[l] == i;
  return n;
}

/* The most blocks a sequence of max_model_len holds in a group of this window (DESIGN.md §12,
 * pkv_kv_budget.blocks_per_max_seq): all of them under full attention, else what one token's
 * window spans, ceil(w / block size) + 1, at most all of them (1 without a length). */
static uint64_t group_blocks(uint32_t window, uint32_t len, uint32_t block_size) {
  if (len == 0) return 1;
  const uint64_t all = ((uint64_t)len + block_size - 1) / block_size;
  const uint64_t span = ((uint64_t)window + block_size - 1) / block_size + 1;
  return window == 0 || all < span ? all : span;
}

/* printf at buf + *at, never past cap (a long list is cut). */
static void append(char *buf, size_t cap, size_t *at, const char *fmt, ...) {
  if (*at + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *at, cap - *at, fmt, ap);
  va_end(ap);
  if (n > 0) *at = *at + (size_t)n < cap ? *at + (size_t)n : cap - 1;
}

/* Group i's layers as ranges, "0-4,6-10" or "1,3,..,23" for a stride, into buf[cap]. */
static const char *layer_list(const pkv_engine_params *p, const groups *g, uint32_t i, char *buf,
                              size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  if (g->layer_group == NULL) {
    snprintf(buf, cap, "0-%u", p->num_layers - 1);
    return buf;
  }
  uint32_t run[3] = {0, 0, 0}, k = 0; /* first, step, last of the run being built */
  for (uint32_t l = 0; l <= p->num_layers; l++) {
    const int in = l < p->num_layers && g->layer_group[l] == i;
    if (in && k == 0) {
      run[0] = run[2] = l, k = 1;
      continue;
    }
    if (in && k == 1) {
      run[1] = l - run[0], run[2] = l, k = 2;
      continue;
    }
    if (in && l - run[2] == run[1]) {
      run[2] = l;
      continue;
    }
    if (!in && l < p->num_layers) continue;
    if (k == 0) continue;
    if (in && k == 2 && run[2] - run[0] == run[1]) { /* two at a stride l breaks: keep the 2nd */
      append(buf, cap, &at, "%s%u", at ? "," : "", run[0]);
      run[0] = run[2], run[1] = l - run[2], run[2] = l;
      continue;
    }
    /* close the run: "a-b" (step 1), "a,a+s,..,b" (3 or more at a stride), or each one */
    const uint32_t len = k == 1 ? 1 : (run[2] - run[0]) / run[1] + 1;
    const char *sep = at ? "," : "";
    if (len >= 3 && run[1] == 1)
      append(buf, cap, &at, "%s%u-%u", sep, run[0], run[2]);
    else if (len >= 3)
      append(buf, cap, &at, "%s%u,%u,..,%u", sep, run[0], run[0] + run[1], run[2]);
    else
      for (uint32_t x = run[0], j = 0; j<len; j++, x += len> 1 ? run[1] : 0)
        append(buf, cap, &at, "%s%u", at ? "," : "", x);
    k = 0;
    if (in) run[0] = run[2] = l, k = 1;
  }
  return buf;
}

/* ---------------------------------------------------------------- what the variants gain */

/* The same model in the same memory with the cache's dtype set to the model's (model_dtype)
 * and/or every layer under full attention (full): its budget. -1 when pkv_profile refused it
 * (other than for too small a budget, whose terms are filled). */
static int baseline(const pkv_engine_params *p, const pkv_kv_budget *b, int model_dtype, int full,
                    pkv_kv_budget *out) {
  pkv_engine_params q = *p;
  void *specs = NULL; /* a model described per layer: its specs with windows and chunks cleared */
  if (model_dtype) q.kv_dtype = 0;
  if (full) q.sliding_window = 0, q.layer_windows = NULL;
  if (full && p->layer_specs != NULL) {
    if ((specs = profile_full_attention_specs(p)) == NULL) return -1;
    q.layer_specs = specs;
  }
  q.memory_total_bytes = b->total_bytes; /* what was measured, not a second measure */
  q.memory_used_bytes = b->used_bytes;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  pkv_status s = pkv_profile(&q, out);
  free(specs);
  return s == PKV_OK || s == PKV_ERR_OUT_OF_MEMORY ? 0 : -1;
}

typedef struct gains {
  int fp8, windows; /* which variants p has */
  int ok[3];        /* the baselines had: model dtype; full attention; both */
  pkv_kv_budget base[3];
} gains;

static void get_gains(const pkv_engine_params *p, const pkv_kv_budget *b, const groups *g,
                      gains *out) {
  memset(out, 0, sizeof *out);
  out->fp8 = is_fp8(b->kv_dtype);
  out->windows = any_window(g);
  if (b->source == PKV_BUDGET_FIXED_BLOCKS) return; /* not the same memory */
  if (out->fp8) out->ok[0] = baseline(p, b, 1, 0, &out->base[0]) == 0;
  if (out->windows) out->ok[1] = baseline(p, b, 0, 1, &out->base[1]) == 0;
  if (out->fp8 && out->windows) out->ok[2] = baseline(p, b, 1, 1, &out->base[2]) == 0;
}

/* "    fp8_e4m3 holds 2.00x the tokens of bf16 (1887424 vs 943712)", or, when the baseline holds
 * none, "    fp8_e4m3 holds 12 tokens; bf16 holds none". who_holds ends in its verb. */
static void print_ratio(const char *who_holds, uint64_t got, uint64_t base, const char *unit,
                        const char *against) {
  if (base == 0)
    printf("    %s %llu %s; %s holds none\n", who_holds, (unsigned long long)got, unit, against);
  else
    printf("    %s %.2fx the %s of %s (%llu vs %llu)\n", who_holds, (double)got / (double)base,
           unit, against, (unsigned long long)got, (unsigned long long)base);
}

/* What the windows save: the bytes of a sequence of max_model_len with and without them, and how
 * many such sequences fit in each case. */
static void print_window_saving(const pkv_engine_params *p, const pkv_kv_budget *b,
                                const pkv_kv_budget *full) {
  char a[32], f[32], d[32], n[32];
  const uint64_t with = b->blocks_per_max_seq * b->block_bytes,
                 without = full->blocks_per_max_seq * full->block_bytes;
  const uint64_t saved = without > with ? without - with : 0;
  printf(
      "    %s save %s (%.0f%%) of a sequence of max_model_len %u: it takes %s,\n"
      "    not the %s of full attention in every layer; %llu such sequences fit, against %s with\n"
      "    full attention\n",
      profile_windows_word(p), cli_format_size(saved, d, sizeof d),
      without ? 100.0 * (double)saved / (double)without : 0.0, p->max_model_len,
      cli_format_size(with, a, sizeof a), cli_format_size(without, f, sizeof f),
      (unsigned long long)b->max_seqs_at_max_model_len,
      full->max_seqs_at_max_model_len
          ? (snprintf(n, sizeof n, "%llu", (unsigned long long)full->max_seqs_at_max_model_len), n)
          : "none");
}

static void print_gains(const pkv_engine_params *p, const pkv_kv_budget *b, const gains *G) {
  const char *kv = variants_dtype_name(b->kv_dtype), *model = variants_dtype_name(p->dtype);
  char against[160];
  printf("\n  against the same model in the same memory\n");
  if (b->source == PKV_BUDGET_FIXED_BLOCKS) {
    printf("    (--num-blocks fixes the pool, not the memory: nothing to compare)\n");
    return;
  }
  if (G->fp8 && G->ok[0]) { /* tokens as the table counts them: each in every group's window */
    char who[64];
    snprintf(who, sizeof who, "%s holds", kv);
    print_ratio(who, b->max_tokens / b->num_kv_groups,
                G->base[0].max_tokens / G->base[0].num_kv_groups, "tokens", model);
  }
  if (G->windows && p->max_model_len == 0) {
    printf("    %s: no max_model_len, so no longest sequence to count them by\n",
           profile_windows_word(p));
    return;
  }
  if (G->windows && G->ok[1]) print_window_saving(p, b, &G->base[1]);
  if (G->fp8 && G->windows && G->ok[2]) {
    snprintf(against, sizeof against, "%s with full attention", model);
    char what[64];
    snprintf(what, sizeof what, "%s and windows together hold", kv);
    print_ratio(what, b->max_seqs_at_max_model_len, G->base[2].max_seqs_at_max_model_len,
                "sequences of max_model_len", against);
  }
}

/* ---------------------------------------------------------------- printing */

/* Each KV group (layers, window, bytes per token, blocks and bytes of a sequence of max_model_len)
 * and the whole model. Every group's block holds group_layers layers (padded slots included), so a
 * group's bytes per token are block bytes / block size whatever its layers. */
static void print_groups(const pkv_engine_params *p, const pkv_kv_budget *b, const groups *g) {
  char h[32], hs[32];
  const uint64_t bpt = b->bytes_per_token;
  printf(
      "\n  KV groups: %u of %u layers each (a block holds K and V of %u layers), %u layer slots padded\n",
      g->num_groups, g->group_layers, g->group_layers, b->padded_layers);
  printf("  %6s %8s %7s %7s %12s %12s %12s   %s\n", "group", "window", "layers", "padded",
         "bytes/token", "blocks/seq", "bytes/seq", "which layers");
  uint64_t all_blocks = 0;
  uint32_t all_layers = 0;
  for (uint32_t i = 0; i < g->num_groups; i++) {
    char win[16], list[256];
    const uint32_t n = group_count(p, g, i);
    const uint64_t blocks = group_blocks(g->group_window[i], p->max_model_len, p->block_size);
    if (g->group_window[i] == 0)
      snprintf(win, sizeof win, "full");
    else
      snprintf(win, sizeof win, "%u", g->group_window[i]);
    printf("  %6u %8s %7u %7u %12llu %12llu %12s   %s\n", i, win, n, g->group_layers - n,
           (unsigned long long)bpt, (unsigned long long)blocks,
           cli_format_size(blocks * b->block_bytes, hs, sizeof hs),
           layer_list(p, g, i, list, sizeof list));
    all_blocks += blocks;
    all_layers += n;
  }
  printf("  %6s %8s %7u %7u %12llu %12llu %12s   %s\n", "model", "", all_layers, b->padded_layers,
         (unsigned long long)(bpt * g->num_groups), (unsigned long long)all_blocks,
         cli_format_size(all_blocks * b->block_bytes, hs, sizeof hs), "every group");
  printf(
      "  bytes/token: a token inside the group's window (%s a group; the model's: every group's);\n"
      "  blocks/seq: the most a sequence of max_model_len holds in the group: all its blocks, or a\n"
      "  window's ceil(w / %u) + 1\n",
      cli_format_size(bpt, h, sizeof h), p->block_size);
}

void variants_print_model(const pkv_engine_params *p, const pkv_kv_budget *b) {
  if (is_fp8(b->kv_dtype))
    printf("  kv cache   %s, 1 B per element (the model's %s: %u B), %s\n",
           variants_dtype_name(b->kv_dtype), variants_dtype_name(p->dtype),
           variants_dtype_bytes(p->dtype),
           p->kv_layout == PKV_KV_LAYOUT_MLA ? "the latent scaled per layer"
                                             : "K and V scaled per layer and kv head");
  else
    printf("  kv cache   %s, %u B per element (the model's dtype)\n",
           variants_dtype_name(b->kv_dtype), variants_dtype_bytes(b->kv_dtype));
  if (p->layer_specs != NULL) return; /* windows and chunks per layer: profile_layers.c */
  groups g;
  if (get_groups(p, &g) != 0) return;
  if (g.num_groups == 1 && g.group_window[0] == 0) {
    printf("  windows    none: full attention in every layer\n");
  } else if (g.num_groups == 1) {
    printf("  windows    %u keys in every layer (sliding_window)\n", g.group_window[0]);
  } else {
    printf("  windows   ");
    /* layers per window, groups being ordered by window */
    for (uint32_t i = 0, n = 0; i < g.num_groups; i++) {
      n += group_count(p, &g, i);
      if (i + 1 < g.num_groups && g.group_window[i + 1] == g.group_window[i]) continue;
      if (g.group_window[i] == 0)
        printf(" %u layers of full attention,", n);
      else
        printf(" %u of %u keys,", n, g.group_window[i]);
      n = 0;
    }
    printf(" in %u KV groups of %u layers\n", g.num_groups, g.group_layers);
  }
  free_groups(&g);
}

void variants_print_table(const pkv_engine_params *p, const pkv_kv_budget *b) {
  groups g;
  if (get_groups(p, &g) != 0) return;
  gains G;
  get_gains(p, b, &g, &G);
  /* a model described per layer has its groups printed by profile_layers.c */
  if (p->layer_specs == NULL && (g.num_groups > 1 || G.windows)) print_groups(p, b, &g);
  if (G.fp8 || G.windows) print_gains(p, b, &G);
  free_groups(&g);
}

/* One baseline as a JSON object, or null. */
static void json_baseline(const char *name, int have, int ok, const pkv_kv_budget *base,
                          const pkv_kv_budget *b, int last) {
  printf("    \"%s\": ", name);
  if (!have || !ok) {
    printf("null%s\n", last ? "" : ",");
    return;
  }
  printf(
      "{\"kv_dtype\": \"%s\", \"num_kv_groups\": %u, \"block_bytes\": %llu, \"num_blocks\": %llu, "
      "\"max_tokens\": %llu, \"blocks_per_max_seq\": %llu, \"max_seqs_at_max_model_len\": %llu, "
      "\"tokens_ratio\": ",
      variants_dtype_name(base->kv_dtype), base->num_kv_groups,
      (unsigned long long)base->block_bytes, (unsigned long long)base->num_blocks,
      (unsigned long long)base->max_tokens, (unsigned long long)base->blocks_per_max_seq,
      (unsigned long long)base->max_seqs_at_max_model_len);
  if (base->max_tokens)
    printf("%.4f", (double)b->max_tokens / (double)base->max_tokens);
  else
    printf("null");
  printf(", \"seqs_ratio\": ");
  if (base->max_seqs_at_max_model_len)
    printf("%.4f", (double)b->max_seqs_at_max_model_len / (double)base->max_seqs_at_max_model_len);
  else
    printf("null");
  printf("}%s\n", last ? "" : ",");
}

void variants_print_json(const pkv_engine_params *p, const pkv_kv_budget *b) {
  groups g;
  if (get_groups(p, &g) != 0) {
    printf(",\n  \"groups\": null,\n  \"compare\": null");
    return;
  }
  if (p->layer_specs != NULL) profile_layer_groups_json(p, b); /* per layer: profile_layers.c */
  if (p->layer_specs == NULL) printf(",\n  \"groups\": [");
  for (uint32_t i = 0; i < g.num_groups && p->layer_specs == NULL; i++) {
    const uint32_t n = group_count(p, &g, i);
    const uint64_t blocks = group_blocks(g.group_window[i], p->max_model_len, p->block_size);
    printf(
        "%s\n    {\"group\": %u, \"kind\": \"%s\", \"window\": %u, \"num_layers\": %u, \"padded_slots\": %u, "
        "\"bytes_per_token\": %llu, \"blocks_per_max_seq\": %llu, \"bytes_per_max_seq\": %llu, \"layers\": ",
        i ? "," : "", i, g.group_window[i] ? "sliding_window" : "full_attention", g.group_window[i],
        n, g.group_layers - n, (unsigned long long)b->bytes_per_token, (unsigned long long)blocks,
        (unsigned long long)(blocks * b->block_bytes));
    if (g.layer_group == NULL && p->num_layers > 65536) { /* a made-up shape: not 2^31 numbers */
      printf("null}");
      continue;
    }
    printf("[");
    for (uint32_t l = 0, k = 0; l < p->num_layers; l++)
      if (g.layer_group == NULL || g.layer_group[l] == i) printf("%s%u", k++ ? ", " : "", l);
    printf("]}");
  }
  gains G;
  get_gains(p, b, &g, &G);
  printf("%s,\n  \"compare\": {\n", p->layer_specs == NULL ? "\n  ]" : "");
  json_baseline("model_dtype", G.fp8, G.ok[0], &G.base[0], b, 0);
  json_baseline("full_attention", G.windows, G.ok[1], &G.base[1], b, 0);
  json_baseline("model_dtype_full_attention", G.fp8 && G.windows, G.ok[2], &G.base[2], b, 1);
  printf("  }");
  free_groups(&g);
}
