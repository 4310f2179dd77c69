/*
 * demo_windows.c - `pkv demo --windows`: per-layer sliding windows (the list repeated over the
 * layers), the windowed run's pool in the same bytes as the others', and the same model with full
 * attention in every layer in that memory, to compare against.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "demo.h"

/* --windows: W[,W...] repeated over the layers. */
int demo_parse_windows(demo_options *o) {
  uint32_t list[16], n = 0;
  const char *s = o->windows;
  while (*s) {
    char *end = NULL;
    if (*s < '0' || *s > '9' || n == 16) return -1;
    const unsigned long long v = strtoull(s, &end, 10);
    if (end == s || v > 1u << 30) return -1;
    list[n++] = (uint32_t)v;
    s = end;
    if (*s == ',' && s[1])
      s++;
    else if (*s)
      return -1;
  }
  if (n == 0) return -1;
  for (uint32_t l = 0; l < 16; l++) o->layer_windows[l] = list[l % n];
  return 0;
}

/* --windows: the pool of the windowed run holds blocks of group_layers layers, so it gets
 * num_blocks * num_layers / group_layers of them - the same bytes as the other runs. 0, or -1. */
int demo_windowed_pool(demo_options *o, const model *m) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = m->c.num_layers, p.num_q_heads = m->c.num_q_heads,
  p.num_kv_heads = m->c.num_kv_heads;
  p.head_dim = m->c.head_dim, p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU;
  p.layer_windows = o->layer_windows;
  uint32_t windows[16], groups = 0, group_layers = 0;
  char said[512];
  if (pkv_kv_groups(&p, NULL, NULL, windows, 16, &groups, &group_layers) != PKV_OK) {
    fprintf(stderr, "pkv demo: --windows: %s\n",
            demo_in_flag_terms(o, pkv_last_error(), said, sizeof said));
    return -1;
  }
  /* checked here: cast to 32 bits, a larger pool would silently become another size */
  const uint64_t blocks = (uint64_t)o->num_blocks * m->c.num_layers / group_layers;
  if (blocks > INT32_MAX) {
    fprintf(
        stderr,
        "pkv demo: --num-blocks %u makes the windowed run's pool %llu blocks of %u layer%s (the same "
        "bytes), more than pkv's 2^31-1 blocks: give a smaller --num-blocks\n",
        o->num_blocks, (unsigned long long)blocks, group_layers, group_layers == 1 ? "" : "s");
    return -1;
  }
  o->paged_blocks = (uint32_t)blocks;
  printf("  windows    ");
  for (uint32_t l = 0; l < m->c.num_layers; l++) printf("%s%u", l ? "," : "", o->layer_windows[l]);
  printf(" (per layer): %u KV groups of %u layers; pkv's pool: %u blocks of %u layers\n\n", groups,
         group_layers, o->paged_blocks, group_layers);
  return 0;
}

/* --windows: the same model with full attention, in the same memory (its tokens differ: another
 * model). */
int demo_print_full_attention(const demo_options *o, const demo_workload *w, const model *m,
                              const demo_result *p) {
  demo_options of = *o;
  of.full_attention = 1, of.paged_blocks = 0;
  demo_result f;
  memset(&f, 0, sizeof f);
  if (demo_result_init(&f, "pkv, full attention", w) != 0 || demo_run_paged(&of, w, m, &f) != 0) {
    fprintf(stderr, "pkv demo: the full-attention run failed: %s\n", f.error);
    demo_result_free(&f, w);
    return -1;
  }
  printf("\n  the same model with full attention in every layer, in the same memory:\n");
  printf("  %-34s %20s %20s\n", "", "windows", "full attention");
  char a[48], b[48];
  snprintf(a, sizeof a, "%u / %.1f", p->max_running, (double)p->sum_running / (double)p->steps);
  snprintf(b, sizeof b, "%u / %.1f", f.max_running, (double)f.sum_running / (double)f.steps);
  DEMO_ROW("running sequences, max / mean", "%s", a, "%s", b);
  DEMO_ROW("generated tokens/s", "%.0f", demo_per_s((double)p->generated_tokens, p->wall_s), "%.0f",
           demo_per_s((double)f.generated_tokens, f.wall_s));
  DEMO_ROW("steps", "%llu", (unsigned long long)p->steps, "%llu", (unsigned long long)f.steps);
  DEMO_ROW("preemptions", "%llu", (unsigned long long)p->preemptions, "%llu",
           (unsigned long long)f.preemptions);
  printf("\n  windows ran %.2fx the sequences at once (mean) and %.2fx the generated tokens/s.\n",
         demo_per_s((double)p->sum_running / (double)p->steps,
                    (double)f.sum_running / (double)f.steps),
         demo_per_s(demo_per_s((double)p->generated_tokens, p->wall_s),
                    demo_per_s((double)f.generated_tokens, f.wall_s)));
  demo_result_free(&f, w);
  return 0;
}

/* --long-prompt: each group's held blocks of the one request, their peak over the run. */
typedef struct {
  uint32_t groups;
  uint32_t peak[16];
} long_peaks;

static int sample_peaks(void *ctx, pkv_engine *e, const uint64_t *seqs, char *error, size_t cap) {
  long_peaks *lp = ctx;
  for (uint32_t g = 0; g < lp->groups; g++) {
    int32_t table[4096];
    uint32_t len = 0, held = 0;
    const pkv_status s = pkv_seq_group_block_table(e, seqs[0], g, table, 4096, &len);
    if (s != PKV_OK) {
      snprintf(error, cap, "pkv_seq_group_block_table: %s", pkv_engine_last_error(e));
      return -1;
    }
    for (uint32_t i = 0; i < len; i++) held += table[i] >= 0;
    if (held > lp->peak[g]) lp->peak[g] = held;
  }
  return 0;
}

int demo_print_long_prompt(const demo_options *o, const model *m) {
  const uint32_t n = o->long_prompt, bs = o->block_size, whole = (n + bs - 1) / bs;
  const uint32_t out = DEMO_LONG_PROMPT_OUT;
  const uint32_t whole_full = (n + out + bs - 1) / bs; /* a full group's, at the end */
  if (m->c.max_positions < n + out) { /* model_config_of sizes its RoPE table for it */
    fprintf(stderr, "pkv demo: --long-prompt %u: the model has RoPE rows for %u positions\n", n,
            m->c.max_positions);
    return -1;
  }
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = m->c.num_layers, p.num_q_heads = m->c.num_q_heads,
  p.num_kv_heads = m->c.num_kv_heads;
  p.head_dim = m->c.head_dim, p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU;
  p.layer_windows = o->layer_windows;
  uint32_t windows[16];
  long_peaks lp;
  memset(&lp, 0, sizeof lp);
  uint32_t group_layers = 0;
  if (pkv_kv_groups(&p, NULL, NULL, windows, 16, &lp.groups, &group_layers) != PKV_OK) return -1;
  /* One request (a tenant of its own), its prompt random text, a few tokens out; a pool that
   * holds the whole prompt in every group (what admission reserved before 0.8), so the peak
   * per chunk is pkv's choice, not the pool's limit. */
  demo_workload w;
  memset(&w, 0, sizeof w);
  demo_request q;
  memset(&q, 0, sizeof q);
  q.prompt_len = n, q.max_new_tokens = out;
  if (!(q.prompt = malloc(n * sizeof(int32_t)))) return -1;
  uint64_t rng = o->seed * 0x9e3779b97f4a7c15ull + 5;
  for (uint32_t i = 0; i < n; i++) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    q.prompt[i] = 1 + (int32_t)((rng >> 33) % (m->c.vocab - 1));
    if (q.prompt[i] == o->stop_token) q.prompt[i] = 1;
  }
  w.requests = &q, w.num_requests = 1, w.num_tenants = 1;
  w.prompt_tokens = n, w.max_new_tokens = q.max_new_tokens;
  snprintf(w.salts[0], sizeof w.salts[0], "long-prompt");
  demo_options ol = *o;
  ol.max_model_len = n + q.max_new_tokens;
  ol.paged_blocks = lp.groups * whole_full;
  ol.on_batch = sample_peaks, ol.on_step = NULL, ol.on_step_ctx = &lp;
  demo_result r;
  memset(&r, 0, sizeof r);
  int rc = demo_result_init(&r, "long prompt", &w) != 0 || demo_run_paged(&ol, &w, m, &r) != 0;
  if (rc) {
    fprintf(stderr, "pkv demo: the long prompt's run failed: %s\n", r.error);
  } else {
    printf(
        "\n  a prompt of %u tokens, prefilled in chunks of %u (pkv_step), %u tokens out: each KV "
        "group's\n  blocks at their peak, against the whole prompt reserved in every group at "
        "admission (before 0.8):\n",
        n, o->step_tokens, out);
    printf("  %-34s %20s %20s\n", "", "per chunk", "whole prompt");
    for (uint32_t g = 0; g < lp.groups; g++) {
      char label[48];
      if (windows[g])
        snprintf(label, sizeof label, "group %u (window %u)", g, windows[g]);
      else
        snprintf(label, sizeof label, "group %u (full attention)", g);
      DEMO_ROW(label, "%u", lp.peak[g], "%u", windows[g] ? whole : whole_full);
    }
    printf("  %u steps, its %u tokens generated\n", (unsigned)r.steps, r.num_generated[0]);
  }
  demo_result_free(&r, &w);
  free(q.prompt);
  return rc ? -1 : 0;
}
