/*
 * profile_layers.c - `pkv profile` of a model described per layer (pkv_engine_params.layer_specs,
 * from pkv_engine_params_from_hf_config_layers): its kinds of layers, then every KV group with its
 * layers, kind, window or chunk, bytes per token and padding (pkv_kv_group_info), and the totals.
 * Groups of unequal layers share one page (block bytes, DESIGN.md §12): a group's block holds as
 * many of its layers as fill the page, so a group's own bytes per token may be less than the
 * page's, and what is left of the page is its padding.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "profile.h"

static const char *attention_name(uint32_t a) {
  return a == PKV_ATTENTION_SLIDING ? "sliding" : a == PKV_ATTENTION_CHUNKED ? "chunked" : "full";
}

/* --json's words, as variants_print_json's for windows */
static const char *attention_json(uint32_t a) {
  return a == PKV_ATTENTION_SLIDING   ? "sliding_window"
         : a == PKV_ATTENTION_CHUNKED ? "chunked_local"
                                      : "full_attention";
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

/* Layer numbers m[n] (ascending) as runs: "20-34", "0,2,..,34" (3 or more at a stride), "5". */
static const char *list_layers(const uint32_t *m, uint32_t n, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < n;) {
    uint32_t j = i + 1;
    if (i + 1 < n)
      while (j + 1 < n && m[j + 1] - m[j] == m[i + 1] - m[i]) j++;
    const char *sep = at ? "," : "";
    if (i + 1 < n && j - i >= 2 && m[i + 1] - m[i] == 1) {
      append(buf, cap, &at, "%s%u-%u", sep, m[i], m[j]);
      i = j + 1;
    } else if (i + 1 < n && j - i >= 2) {
      append(buf, cap, &at, "%s%u,%u,..,%u", sep, m[i], m[i + 1], m[j]);
      i = j + 1;
    } else {
      append(buf, cap, &at, "%s%u", sep, m[i]);
      i++;
    }
  }
  return buf;
}

/* Two layers print alike: the same spec, source included. */
static int same_kind(const pkv_layer_spec *a, const pkv_layer_spec *b) {
  if (a->kind == PKV_LAYER_STATE || b->kind == PKV_LAYER_STATE)
    return a->kind == b->kind &&
           memcmp(a->state_dtype, b->state_dtype, sizeof a->state_dtype) == 0 &&
           memcmp(a->state_shape, b->state_shape, sizeof a->state_shape) == 0;
  return a->kind == b->kind && a->attention == b->attention && a->window == b->window &&
         a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim &&
         a->v_head_dim == b->v_head_dim && a->k_eq_v == b->k_eq_v && a->sinks == b->sinks &&
         a->logit_softcap == b->logit_softcap && a->softmax_scale == b->softmax_scale &&
         (a->kind != PKV_LAYER_SHARED || a->source_layer == b->source_layer) &&
         a->index_head_dim == b->index_head_dim && a->index_dtype == b->index_dtype &&
         a->index_n_heads == b->index_n_heads && a->index_topk == b->index_topk;
}

static const pkv_layer_spec *spec_of(const pkv_engine_params *p, uint32_t l) {
  return (const pkv_layer_spec *)((const char *)p->layer_specs + (size_t)l * p->layer_spec_size);
}

/* Whether every cached layer stores the same bytes per token (the flat fields' widths where a
 * spec leaves 0): such layers keep 0.4's layout, not a page chosen against waste. */
static int equal_widths(const pkv_engine_params *p) {
  uint64_t first = 0;
  for (uint32_t l = 0; p->layer_specs && l < p->num_layers; ++l) {
    const pkv_layer_spec *s = spec_of(p, l);
    if (s->kind == PKV_LAYER_SHARED || s->kind == PKV_LAYER_STATE) continue;
    const uint64_t heads = s->num_kv_heads ? s->num_kv_heads : p->num_kv_heads;
    const uint64_t k = s->head_dim ? s->head_dim : p->head_dim;
    const uint64_t v = s->k_eq_v ? 0 : s->v_head_dim ? s->v_head_dim : k;
    const uint64_t bytes = heads * (k + v);
    if (!first) first = bytes;
    if (bytes != first) return 0;
  }
  return 1;
}

/* A STATE layer's parts: "part 0 8192 x 3 bf16 (48.00 KiB), part 1 32 x 128 x 128 f32 (2.00
 * MiB)", each the dense array pkv_layer_info places in a slot. */
static const char *state_parts(const pkv_layer_spec *s, char *buf, size_t cap) {
  static const char *const dtypes[] = {"f32", "f16", "bf16"};
  size_t at = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < PKV_MAX_STATE_PARTS; i++) {
    const uint32_t *dims = s->state_shape + i * PKV_MAX_STATE_DIMS;
    if (dims[0] == 0) continue;
    const uint32_t dtype = s->state_dtype[i] < 3 ? s->state_dtype[i] : 0;
    uint64_t bytes = dtype == PKV_DTYPE_F32 ? 4 : 2;
    append(buf, cap, &at, "%spart %u ", at ? ", " : "", i);
    for (uint32_t d = 0; d < PKV_MAX_STATE_DIMS && dims[d]; d++) {
      append(buf, cap, &at, "%s%u", d ? " x " : "", dims[d]);
      bytes *= dims[d];
    }
    char h[32];
    append(buf, cap, &at, " %s (%s)", dtypes[dtype], cli_format_size(bytes, h, sizeof h));
  }
  return buf;
}

/* One line per kind of layer: which layers, attention, heads, and what else the softmax has. */
void profile_print_layers(const pkv_engine_params *p) {
  uint32_t *members = malloc((size_t)p->num_layers * sizeof *members);
  unsigned char *done = calloc(p->num_layers, 1);
  if (members == NULL || done == NULL) {
    fprintf(stderr, "pkv profile: out of memory for the layers\n");
    free(members);
    free(done);
    return;
  }
  printf("  layers     per layer, as config.json describes them:\n");
  for (uint32_t l = 0; l < p->num_layers; l++) {
    if (done[l]) continue;
    const pkv_layer_spec *s = spec_of(p, l);
    uint32_t n = 0;
    for (uint32_t k = l; k < p->num_layers; k++)
      if (!done[k] && same_kind(s, spec_of(p, k))) members[n++] = k, done[k] = 1;
    char list[160], win[24], extra[160];
    if (s->kind == PKV_LAYER_STATE) {
      printf("    %-13s %s: layers %s\n", "state", state_parts(s, extra, sizeof extra),
             list_layers(members, n, list, sizeof list));
      continue;
    }
    size_t at = 0;
    extra[0] = '\0';
    snprintf(win, sizeof win, s->window ? "%s %u" : "%s", attention_name(s->attention), s->window);
    if (s->kind == PKV_LAYER_SHARED)
      append(extra, sizeof extra, &at, ", shared: reads layer %u's K and V", s->source_layer);
    if (s->k_eq_v) append(extra, sizeof extra, &at, ", K = V (stored once)");
    if (s->sinks) append(extra, sizeof extra, &at, ", sinks");
    if (s->logit_softcap > 0)
      append(extra, sizeof extra, &at, ", soft-cap %g", (double)s->logit_softcap);
    if (s->index_head_dim) /* sparse attention (profile_indexer.c) */
      append(extra, sizeof extra, &at, ", indexer %u %s x %u heads, top-k %u", s->index_head_dim,
             s->index_dtype == PKV_DTYPE_BF16 ? "bf16" : "fp8", s->index_n_heads, s->index_topk);
    printf("    %-13s %3u kv heads x %-4u scale %.6g%s: layers %s\n", win, s->num_kv_heads,
           s->head_dim, (double)s->softmax_scale, extra,
           list_layers(members, n, list, sizeof list));
  }
  free(members);
  free(done);
}

/* The blocks a sequence of max_model_len holds in a group (pkv_kv_budget.blocks_per_max_seq's
 * terms): all its blocks under full attention, else a window's or chunk's ceil(w / block size) +
 * 1, at most all (1 without a length). */
static uint64_t group_blocks(uint32_t window, uint32_t len, uint32_t block_size) {
  if (len == 0) return 1;
  const uint64_t all = ((uint64_t)len + block_size - 1) / block_size;
  const uint64_t span = ((uint64_t)window + block_size - 1) / block_size + 1;
  return window == 0 || all < span ? all : span;
}

/* pkv_kv_groups' layer -> group map ([num_layers], malloc'd) and the number of groups; NULL when
 * it cannot be had (printed). */
static uint32_t *layer_groups(const pkv_engine_params *p, uint32_t *num_groups) {
  uint32_t *group = malloc((size_t)p->num_layers * sizeof *group);
  pkv_status s =
      group ? pkv_kv_groups(p, group, NULL, NULL, 0, num_groups, NULL) : PKV_ERR_OUT_OF_MEMORY;
  if (s != PKV_OK) {
    fprintf(stderr, "pkv profile: pkv_kv_groups: %s (%s)\n", group ? pkv_last_error() : "",
            pkv_status_string(s));
    free(group);
    return NULL;
  }
  return group;
}

/* Group g's info and its cached layers (members[], their count returned). */
static uint32_t group_members(const pkv_engine_params *p, const uint32_t *group, uint32_t g,
                              uint32_t *members) {
  uint32_t n = 0;
  for (uint32_t l = 0; l < p->num_layers; l++)
    if (group[l] == g && spec_of(p, l)->kind != PKV_LAYER_SHARED) members[n++] = l;
  /* (a STATE layer's group is UINT32_MAX: it is in none) */
  return n;
}

static int group_info(const pkv_engine_params *p, uint32_t g, struct pkv_kv_group_info *gi) {
  memset(gi, 0, sizeof *gi);
  gi->struct_size = sizeof *gi;
  pkv_status s = pkv_kv_group_info(p, g, gi);
  if (s != PKV_OK)
    fprintf(stderr, "pkv profile: pkv_kv_group_info: %s (%s)\n", pkv_last_error(),
            pkv_status_string(s));
  return s == PKV_OK ? 0 : -1;
}

/* Groups g and h print as one row: the same kind, window, layers and bytes. */
static int same_group(const struct pkv_kv_group_info *g, const struct pkv_kv_group_info *h) {
  return g->attention == h->attention && g->window == h->window && g->num_layers == h->num_layers &&
         g->bytes_per_token == h->bytes_per_token &&
         g->padding_bytes_per_block == h->padding_bytes_per_block;
}

/* One row per run of alike groups (Gemma 4's 50 windowed groups of one layer are one row): each
 * group's numbers, and the layers of them all. */
static void print_group_rows(const pkv_engine_params *p, const pkv_kv_budget *b,
                             const uint32_t *group, uint32_t ng, uint32_t *members) {
  char hs[32], list[256], label[32], win[16];
  for (uint32_t g = 0; g < ng;) {
    struct pkv_kv_group_info gi, next;
    if (group_info(p, g, &gi) != 0) return;
    uint32_t last = g, n = group_members(p, group, g, members);
    while (last + 1 < ng && group_info(p, last + 1, &next) == 0 && same_group(&gi, &next))
      n += group_members(p, group, ++last, members + n);
    /* members of a run, gathered group by group: back in layer order for the list */
    for (uint32_t i = 1; i < n; i++)
      for (uint32_t j = i; j > 0 && members[j - 1] > members[j]; j--) {
        const uint32_t t = members[j];
        members[j] = members[j - 1], members[j - 1] = t;
      }
    const uint64_t blocks = group_blocks(gi.window, p->max_model_len, p->block_size);
    snprintf(label, sizeof label, last > g ? "%u..%u" : "%u", g, last);
    snprintf(win, sizeof win, gi.window ? "%u" : "-", gi.window);
    printf("  %8s %8s %7s %7u %12llu %13llu %11llu %11s   %s\n", label,
           attention_name(gi.attention), win, gi.num_layers, (unsigned long long)gi.bytes_per_token,
           (unsigned long long)gi.padding_bytes_per_block, (unsigned long long)blocks,
           cli_format_size(blocks * b->block_bytes, hs, sizeof hs),
           list_layers(members, n, list, sizeof list));
    g = last + 1;
  }
}

static uint64_t gcd64(uint64_t a, uint64_t b) { return b ? gcd64(b, a % b) : a; }

/* The most blocks a prompt of len tokens holds in a group while pkv_step computes it in chunks
 * of up to c tokens (admission per chunk, DESIGN.md §7's rule): a window w's w + c - 1 keys from
 * a block's last slot, a chunked group's chunk + c - 1 keys from gcd(chunk, block size) short of
 * a block's end, with prefix caching at least the last sealed block and the chunk, never less
 * than the decode's nor more than all. */
static uint64_t prefill_blocks(const struct pkv_kv_group_info *gi, const pkv_engine_params *p,
                               uint32_t len, uint32_t c) {
  const uint64_t bs = p->block_size, w = gi->window, all = ((uint64_t)len + bs - 1) / bs;
  if (w == 0) return all;
  uint64_t most = gi->attention == PKV_ATTENTION_CHUNKED
                      ? (bs - gcd64(w, bs) + w + c - 1 + bs - 1) / bs
                      : (w + c - 2 + bs - 1) / bs + 1;
  const uint64_t sealed = (bs - 1 + c + bs - 1) / bs + 1;
  if (p->enable_prefix_caching && sealed > most) most = sealed;
  const uint64_t decode = group_blocks(gi->window, len, p->block_size);
  most = most > decode ? most : decode;
  return most < all ? most : all;
}

/* Per run of alike groups: the prefill peak of a max_model_len prompt per chunk (pkv_step with a
 * windowed group) against whole (pkv_allocate, and pkv_step before 0.8). */
static void print_prefill_rows(const pkv_engine_params *p, uint32_t ng) {
  const uint32_t len = p->max_model_len, c = p->max_num_batched_tokens;
  printf("  prefill of a %u-token prompt in chunks of %u (max_num_batched_tokens), blocks at its "
         "peak:\n  %8s %8s %7s %11s %11s\n",
         len, c, "group", "kind", "window", "per chunk", "whole");
  char label[32], win[16];
  for (uint32_t g = 0; g < ng;) {
    struct pkv_kv_group_info gi, next;
    if (group_info(p, g, &gi) != 0) return;
    uint32_t last = g;
    while (last + 1 < ng && group_info(p, last + 1, &next) == 0 && same_group(&gi, &next)) last++;
    snprintf(label, sizeof label, last > g ? "%u..%u" : "%u", g, last);
    snprintf(win, sizeof win, gi.window ? "%u" : "-", gi.window);
    printf("  %8s %8s %7s %11llu %11llu\n", label, attention_name(gi.attention), win,
           (unsigned long long)prefill_blocks(&gi, p, len, c),
           (unsigned long long)(((uint64_t)len + p->block_size - 1) / p->block_size));
    g = last + 1;
  }
}

void profile_print_layer_groups(const pkv_engine_params *p, const pkv_kv_budget *b) {
  uint32_t ng = 0, *group = layer_groups(p, &ng);
  uint32_t *members = group ? malloc((size_t)p->num_layers * sizeof *members) : NULL;
  if (members == NULL) {
    free(group);
    return;
  }
  char hs[32];
  printf(
      "\n  KV groups: %u, each block one page of %llu bytes (%u tokens of its layers' K and V)\n",
      ng, (unsigned long long)b->block_bytes, p->block_size);
  printf("  %8s %8s %7s %7s %12s %13s %11s %11s   %s\n", "group", "kind", "window", "layers",
         "bytes/token", "padding/block", "blocks/seq", "bytes/seq", "which layers");
  print_group_rows(p, b, group, ng, members);
  printf("  %8s %8s %7s %7u %12llu %13llu %11llu %11s   %s\n", "model", "", "",
         b->num_cached_layers, (unsigned long long)b->model_bytes_per_token,
         (unsigned long long)b->padding_bytes_per_block, (unsigned long long)b->blocks_per_max_seq,
         cli_format_size(b->blocks_per_max_seq * b->block_bytes, hs, sizeof hs), "every group");
  printf(
      "  a row of groups a..b gives each one's numbers\n"
      "  bytes/token: one token's K and V in the group's layers (the model's: every cached layer)\n"
      "  padding/block: what the group's page leaves unused (the model's: the most any leaves)\n"
      "%s"
      "  blocks/seq: what a sequence of max_model_len holds in the group: all its blocks, or a\n"
      "  window's or chunk's ceil(w / %u) + 1\n",
      !b->padding_bytes_per_block ? ""
      : equal_widths(p)
          ? "  (layers of equal width keep 0.4's layout: groups of as many layers as the kind\n"
            "  with the fewest, the last of a kind padded)\n"
          : "  (no page of whole layers holds these groups without waste: this one wastes least)\n",
      p->block_size);
  if (p->max_model_len) print_prefill_rows(p, ng);
  const uint32_t shared = p->num_layers - b->num_cached_layers - b->num_state_layers;
  if (shared)
    printf("  %u shared layers keep no cache: each reads the K and V of the layer it names\n",
           shared);
  if (b->num_state_layers)
    printf("  %u STATE layers keep no K and V: each sequence's state is in a state slot\n",
           b->num_state_layers);
  free(group);
  free(members);
}

void profile_layer_groups_json(const pkv_engine_params *p, const pkv_kv_budget *b) {
  uint32_t ng = 0, *group = layer_groups(p, &ng);
  uint32_t *members = group ? malloc((size_t)p->num_layers * sizeof *members) : NULL;
  if (members == NULL) {
    free(group);
    printf(",\n  \"groups\": null");
    return;
  }
  printf(",\n  \"num_cached_layers\": %u, \"model_bytes_per_token\": %llu, "
         "\"padding_bytes_per_block\": %llu,\n  \"groups\": [",
         b->num_cached_layers, (unsigned long long)b->model_bytes_per_token,
         (unsigned long long)b->padding_bytes_per_block);
  for (uint32_t g = 0; g < ng; g++) {
    struct pkv_kv_group_info gi;
    if (group_info(p, g, &gi) != 0) break;
    const uint32_t n = group_members(p, group, g, members);
    const uint64_t blocks = group_blocks(gi.window, p->max_model_len, p->block_size);
    printf("%s\n    {\"group\": %u, \"kind\": \"%s\", \"window\": %u, \"num_layers\": %u, "
           "\"bytes_per_token\": %llu, \"padding_bytes_per_block\": %llu, "
           "\"blocks_per_max_seq\": %llu, \"bytes_per_max_seq\": %llu, \"layers\": [",
           g ? "," : "", g, attention_json(gi.attention), gi.window, gi.num_layers,
           (unsigned long long)gi.bytes_per_token, (unsigned long long)gi.padding_bytes_per_block,
           (unsigned long long)blocks, (unsigned long long)(blocks * b->block_bytes));
    for (uint32_t k = 0; k < n; k++) printf("%s%u", k ? ", " : "", members[k]);
    printf("]}");
  }
  printf("\n  ]");
  free(group);
  free(members);
}

/* "sliding windows", or "chunks" / "windows and chunks" for a model with chunked layers. */
const char *profile_windows_word(const pkv_engine_params *p) {
  int sliding = 0, chunked = 0;
  for (uint32_t l = 0; p->layer_specs != NULL && l < p->num_layers; l++) {
    const pkv_layer_spec *s =
        (const pkv_layer_spec *)((const char *)p->layer_specs + (size_t)l * p->layer_spec_size);
    sliding |= s->attention == PKV_ATTENTION_SLIDING,
        chunked |= s->attention == PKV_ATTENTION_CHUNKED;
  }
  return !chunked ? "sliding windows" : sliding ? "windows and chunks" : "chunks";
}

/* p's specs with every layer under full attention (malloc'd, at p's spec size), for the
 * comparison with full attention; NULL without memory. */
pkv_layer_spec *profile_full_attention_specs(const pkv_engine_params *p) {
  const size_t size = p->layer_spec_size;
  char *specs = malloc((size_t)p->num_layers * size);
  if (specs == NULL) return NULL;
  memcpy(specs, p->layer_specs, (size_t)p->num_layers * size);
  for (uint32_t l = 0; l < p->num_layers; l++) {
    pkv_layer_spec *s = (pkv_layer_spec *)(specs + (size_t)l * size);
    s->attention = PKV_ATTENTION_FULL, s->window = 0;
  }
  return (pkv_layer_spec *)specs;
}
