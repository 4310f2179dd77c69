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
