/*
 * demo_hybrid.c - `pkv demo --hybrid`: the tiny model with recurrent layers (demo_mixer.c: three
 * of every four, as Qwen3.5) serves the multi-tenant workload through pkv_step once per
 * checkpoint policy of the recurrent state - PROMPT_END, EVERY k blocks, NONE - and through the
 * contiguous baseline, which computes every sequence from token 0. Per run: the prefix hit rate,
 * forward rows computed and saved against NONE, checkpoints taken / evicted / held, restores,
 * cached KV recomputed for want of a checkpoint, and the memory the checkpoint slots take. Every
 * paged run must generate the contiguous run's tokens: a state restored wrong changes them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "demo.h"

enum { NUM_POLICIES = 3 };
static const char *const policy_names[NUM_POLICIES] = {"prompt-end", "every", "none"};

static int policy_of(const char *name) {
  for (int i = 0; i < NUM_POLICIES; i++)
    if (strcmp(name, policy_names[i]) == 0) return i; /* PKV_STATE_CHECKPOINT_* in that order */
  return -1;
}

const char *demo_hybrid_check(demo_options *o, int layers_seen, int interval_seen) {
  if (!o->hybrid) {
    if (o->state_checkpoints || interval_seen || o->checkpoint_slots)
      return "--state-checkpoints, --checkpoint-interval and --checkpoint-slots go with --hybrid";
    return NULL;
  }
  if (!layers_seen) o->num_layers = DEMO_ATTENTION_INTERVAL;
  if (o->num_layers < DEMO_ATTENTION_INTERVAL)
    return "--hybrid makes every 4th layer attention (Qwen3.5's 3 : 1): give --layers 4 or more";
  if (o->store)
    return "--hybrid runs in one process (the store's cold and warm runs are pkv demo --store's): "
           "drop --store (--host-cache gives its runs a host tier)";
  if (o->windows) return "--hybrid runs full attention layers: drop --windows";
  if (o->plot) return "--plot draws the runs of pkv demo without --hybrid: drop one of them";
  if (o->no_prefix_caching)
    return "--hybrid compares checkpoint policies of the prefix cache: drop --no-prefix-caching "
           "(--state-checkpoints none is the run without checkpoints)";
  if (o->state_checkpoints && policy_of(o->state_checkpoints) < 0)
    return "--state-checkpoints must be prompt-end, every or none";
  if (!interval_seen) o->checkpoint_interval = 4; /* why 4: README, "pkv demo --hybrid" */
  if (o->checkpoint_interval == 0 || o->checkpoint_interval > 1u << 20)
    return "--checkpoint-interval must be in 1 .. 1048576 (blocks)";
  if (o->checkpoint_slots && o->state_checkpoints &&
      policy_of(o->state_checkpoints) == PKV_STATE_CHECKPOINT_NONE)
    return "--checkpoint-slots sizes prompt-end's and every's checkpoints: none keeps none, drop it";
  if (interval_seen && o->state_checkpoints &&
      policy_of(o->state_checkpoints) != PKV_STATE_CHECKPOINT_EVERY)
    return "--checkpoint-interval is policy every's: give --state-checkpoints every, or leave "
           "--state-checkpoints out (every policy runs)";
  return NULL;
}

/* One paged run under policy; prints its failure. */
static int run_paged(demo_options *o, const demo_workload *w, const model *m, uint32_t policy,
                     demo_result *r) {
  static char names[NUM_POLICIES][32];
  if (policy == PKV_STATE_CHECKPOINT_EVERY)
    snprintf(names[policy], sizeof names[policy], "every %u", o->checkpoint_interval);
  else
    snprintf(names[policy], sizeof names[policy], "%s", policy_names[policy]);
  o->checkpoint_policy = policy;
  if (demo_result_init(r, names[policy], w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  if (demo_run_paged(o, w, m, r) == 0) return 0;
  fprintf(stderr, "pkv demo: the %s run failed: %s\n", r->name, r->error);
  return -1;
}

static void print_model(const demo_options *o, const demo_mixer *x, const demo_result *p) {
  char state[32], blocks[32];
  printf("  recurrent  layers ");
  for (uint32_t l = 0, n = 0; l < x->num_layers; l++)
    if (x->is_state[l]) printf("%s%u", n++ ? "," : "", l);
  printf(" of %u (every %uth is attention): S = g S + (1 - g) k v^T, out = q S,\n"
         "             behind a causal conv of %u; state per layer: conv %u x %u + %u x %u x %u, "
         "fp32\n",
         x->num_layers, DEMO_ATTENTION_INTERVAL, DEMO_CONV_KERNEL, x->conv_dim,
         DEMO_CONV_KERNEL - 1, x->kv_heads, x->head_dim, x->head_dim);
  cli_format_size(p->state_bytes_per_seq, state, sizeof state);
  cli_format_size(p->block_bytes, blocks, sizeof blocks);
  printf("             a sequence's state: %s (pkv_kv_budget.state_bytes_per_seq), the KV of %.0f\n"
         "             tokens (a block of %u tokens: %s)\n",
         state,
         p->block_bytes ? (double)p->state_bytes_per_seq * o->block_size / (double)p->block_bytes
                        : 0.0,
         o->block_size, blocks);
  printf(
      "  policies   prompt-end: the last boundary of each prompt, and where its cached KV\n"
      "             ended (a shared prefix); every %u: also each %u blocks of its tokens; none\n\n",
      o->checkpoint_interval, o->checkpoint_interval);
}

#define CELLS(label, last, fmt, ...)                   \
  do {                                                 \
    printf("  %-30s", label);                          \
    for (uint32_t i_ = 0; i_ < n; i_++) {              \
      const demo_result *r_ = runs[i_];                \
      char cell_[40];                                  \
      snprintf(cell_, sizeof cell_, fmt, __VA_ARGS__); \
      printf(" %16s", cell_);                          \
    }                                                  \
    printf(" %16s\n", last);                           \
  } while (0)

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0.0; }

/* runs[0 .. n): the paged runs, none last; then the contiguous run c's cell. */
static void print_table(const demo_result *const *runs, uint32_t n, const demo_result *c) {
  const demo_result *none = runs[n - 1];
  char a[40], mem[32];
  printf("  %-30s", "checkpoint policy");
  for (uint32_t i = 0; i < n; i++) printf(" %16s", runs[i]->name);
  printf(" %16s\n", "contiguous");
  snprintf(a, sizeof a, "%.2f s", c->wall_s);
  CELLS("wall time", a, "%.2f s", r_->wall_s);
  snprintf(a, sizeof a, "%llu", (unsigned long long)c->rows);
  CELLS("forward rows (tokens computed)", a, "%llu", (unsigned long long)r_->rows);
  snprintf(a, sizeof a, "%.1f%%",
           100.0 * ((double)none->rows - (double)c->rows) / (double)none->rows);
  CELLS("  saved against none", a, "%.1f%%",
        100.0 * ((double)none->rows - (double)r_->rows) / (double)none->rows);
  CELLS("prefix-cache hit rate (tokens)", "-", "%.1f%%", pct(r_->hit_tokens, r_->query_tokens));
  CELLS("restores from a checkpoint", "-", "%llu", (unsigned long long)r_->state_restores);
  CELLS("cached KV recomputed (no ckpt)", "-", "%llu",
        (unsigned long long)r_->state_fallback_tokens);
  CELLS("checkpoints taken", "-", "%llu", (unsigned long long)r_->ckpt_taken);
  CELLS("  evicted / held at the end", "-", "%llu / %llu", (unsigned long long)r_->ckpt_evicted,
        (unsigned long long)r_->ckpt_held);
  CELLS("checkpoint slots", "-", "%llu", (unsigned long long)r_->ckpt_slots);
  CELLS("  their memory", "-", "%s",
        cli_format_size(r_->ckpt_slots * r_->state_bytes_per_seq, mem, sizeof mem));
  CELLS(
      "  = KV blocks", "-", "%.1f",
      r_->block_bytes ? (double)(r_->ckpt_slots * r_->state_bytes_per_seq) / r_->block_bytes : 0.0);
  CELLS("preemptions", "-", "%llu", (unsigned long long)r_->preemptions);
  if (!runs[0]->host_blocks) return;
  CELLS("  of which swapped out", "-", "%llu", (unsigned long long)r_->swap_preemptions);
  CELLS("hit tokens from the host tier", "-", "%llu", (unsigned long long)r_->host_hit_tokens);
}

/* Whether every paged run generated the contiguous run's tokens; prints the verdict. */
static int compare(const demo_workload *w, const demo_result *const *runs, uint32_t n,
                   const demo_result *c) {
  int rc = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t first = 0, at = 0;
    const uint32_t differ = demo_result_differ(w, runs[i], c, &first, &at);
    if (!differ) continue;
    printf("  tokens identical: NO - %s: %u of %u requests differ from the contiguous run; the\n"
           "  first is request %u at generated token %u. A recurrent state restored from a wrong\n"
           "  checkpoint (or a copy done late) changes every token after it.\n",
           runs[i]->name, differ, w->num_requests, first, at);
    rc = -1;
  }
  if (rc == 0)
    printf("  tokens identical: yes (%u requests, %llu generated tokens, each policy vs "
           "contiguous)\n",
           w->num_requests, (unsigned long long)c->generated_tokens);
  return rc;
}

/* NONE promises no hit and no checkpoint: pkv breaking it would pass the token check unseen. */
static int check_none(const demo_result *none) {
  if (none->hit_tokens == 0 && none->ckpt_taken == 0 && none->ckpt_slots == 0 &&
      none->state_restores == 0)
    return 0;
  printf("  policy none served %llu hit tokens and took %llu checkpoints (%llu slots): it must "
         "take none\n",
         (unsigned long long)none->hit_tokens, (unsigned long long)none->ckpt_taken,
         (unsigned long long)none->ckpt_slots);
  return -1;
}

static void print_summary(const demo_result *const *runs, uint32_t n) {
  const demo_result *none = runs[n - 1];
  char mem[32];
  printf("\n");
  for (uint32_t i = 0; i + 1 < n; i++) {
    const demo_result *r = runs[i];
    printf("  %s: %.1f%% of prompt tokens hit, %lld forward rows saved (%.1f%%) against none, "
           "with\n  %llu checkpoint slots of %s in all\n",
           r->name, pct(r->hit_tokens, r->query_tokens), (long long)none->rows - (long long)r->rows,
           100.0 * ((double)none->rows - (double)r->rows) / (double)none->rows,
           (unsigned long long)r->ckpt_slots,
           cli_format_size(r->ckpt_slots * r->state_bytes_per_seq, mem, sizeof mem));
  }
}

/* The checkpoints are memory the run without them could spend on KV: none again, with the most
 * any policy's checkpoint slots took as more blocks, so that "saved" is in the same memory. */
static int print_same_memory(demo_options *o, const demo_workload *w, const model *m,
                             const demo_result *const *runs, uint32_t n, const demo_result *c) {
  uint64_t most = 0;
  for (uint32_t i = 0; i + 1 < n; i++)
    if (runs[i]->ckpt_slots * runs[i]->state_bytes_per_seq > most)
      most = runs[i]->ckpt_slots * runs[i]->state_bytes_per_seq;
  const uint64_t block_bytes = runs[n - 1]->block_bytes;
  if (most == 0 || block_bytes == 0) return 0;
  const uint64_t extra = most / block_bytes;
  if ((uint64_t)o->num_blocks + extra > INT32_MAX) return 0; /* pkv's limit: no such run */
  demo_result r;
  memset(&r, 0, sizeof r);
  o->paged_blocks = (uint32_t)(o->num_blocks + extra);
  int rc = run_paged(o, w, m, PKV_STATE_CHECKPOINT_NONE, &r);
  o->paged_blocks = 0;
  if (rc == 0) {
    char mem[32];
    printf("\n  none in the same memory (the checkpoints' %s as %llu more KV blocks): %llu\n"
           "  forward rows, %llu preemptions; against it",
           cli_format_size(most, mem, sizeof mem), (unsigned long long)extra,
           (unsigned long long)r.rows, (unsigned long long)r.preemptions);
    for (uint32_t i = 0; i + 1 < n; i++)
      printf("%s %s saves %.1f%%", i ? "," : "", runs[i]->name,
             100.0 * ((double)r.rows - (double)runs[i]->rows) / (double)r.rows);
    printf("\n");
    uint32_t first = 0, at = 0;
    if (demo_result_differ(w, &r, c, &first, &at) != 0) {
      printf("  tokens identical: NO - none with more blocks differs from the contiguous run at "
             "request %u, generated token %u\n",
             first, at);
      rc = -1;
    }
  }
  demo_result_free(&r, w);
  return rc;
}

int demo_hybrid_runs(demo_options *o, const demo_workload *w, const model *m) {
  demo_mixer x;
  if (demo_mixer_init(&x, m) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  o->mixer = &x;
  if (o->host_cache) /* the host tier's runs: swapped states and KV, offloaded prefix blocks */
    o->preemption_mode =
        o->preemption && strcmp(o->preemption, "auto") == 0 ? PKV_PREEMPT_AUTO : PKV_PREEMPT_SWAP;
  uint32_t policies[NUM_POLICIES], n = 0;
  if (o->state_checkpoints && policy_of(o->state_checkpoints) != PKV_STATE_CHECKPOINT_NONE)
    policies[n++] = (uint32_t)policy_of(o->state_checkpoints);
  else if (!o->state_checkpoints)
    policies[n++] = PKV_STATE_CHECKPOINT_PROMPT_END, policies[n++] = PKV_STATE_CHECKPOINT_EVERY;
  policies[n++] = PKV_STATE_CHECKPOINT_NONE; /* the run without checkpoints, always */
  demo_result results[NUM_POLICIES], c;
  const demo_result *runs[NUM_POLICIES];
  memset(results, 0, sizeof results), memset(&c, 0, sizeof c);
  int rc = 0;
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    runs[i] = &results[i];
    rc = run_paged(o, w, m, policies[i], &results[i]);
    fflush(stdout);
  }
  if (rc == 0 && demo_result_init(&c, "contiguous", w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    rc = -1;
  } else if (rc == 0 && demo_run_contig(o, w, m, &c) != 0) {
    fprintf(stderr, "pkv demo: the contiguous run failed: %s\n", c.error);
    rc = -1;
  }
  if (rc == 0) {
    print_model(o, &x, runs[0]);
    print_table(runs, n, &c);
    print_summary(runs, n);
    rc = print_same_memory(o, w, m, runs, n, &c);
    printf("\n");
    if (compare(w, runs, n, &c) != 0) rc = -1;
    if (check_none(runs[n - 1]) != 0) rc = -1;
  }
  for (uint32_t i = 0; i < n; i++) demo_result_free(&results[i], w);
  demo_result_free(&c, w);
  o->mixer = NULL;
  demo_mixer_free(&x);
  return rc;
}
