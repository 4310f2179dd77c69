/*
 * demo.c - `pkv demo`: a tiny transformer (model.c) serves a synthetic multi-tenant workload
 * (demo_workload.c) end to end through pkv's scheduler and paged attention (demo_paged.c), then
 * the same workload through a contiguous-KV baseline in the same memory (demo_contig.c). Prints
 * throughput, time to first token, prefix-cache hits, KV utilization and preemptions of both, and
 * checks that both generated the same tokens. No arguments needed. With --store, pkv alone instead,
 * cold and then warm from a store (demo_store.c). With --hybrid, a model with recurrent layers,
 * once per checkpoint policy of their state (demo_hybrid.c). With --retention, tenants' system
 * prompts through a burst of unique prompts, under plain LRU and under retention
 * (demo_retention.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"
#include "demo.h"

static void defaults(demo_options *o) {
  memset(o, 0, sizeof *o);
  o->num_requests = 64, o->num_tenants = 4, o->num_layers = 2, o->seed = 1;
  o->block_size = 16, o->num_blocks = 192, o->max_num_seqs = 32, o->step_tokens = 512;
  o->max_model_len = 1024, o->stop_token = 2;
}

static int flag_seen(const cli_command *cmd, const char *name) {
  for (size_t i = 0; i < cmd->num_flags; i++)
    if (strcmp(cmd->flags[i].name, name) == 0) return cmd->flags[i].seen;
  return 0;
}

static int parse(demo_options *o, int argc, char **argv) {
  cli_flag flags[] = {
      {"requests", CLI_U32, &o->num_requests, "N", "requests in the workload (default 64)", 0},
      {"tenants", CLI_U32, &o->num_tenants, "N",
       "tenants, each with a cache salt and a system prompt (default 4, at most 16)", 0},
      {"seed", CLI_U64, &o->seed, "N", "seed of the weights and the workload (default 1)", 0},
      {"layers", CLI_U32, &o->num_layers, "N", "transformer layers (default 2)", 0},
      {"block-size", CLI_U32, &o->block_size, "TOKENS", "tokens per KV block (default 16)", 0},
      {"num-blocks", CLI_U32, &o->num_blocks, "N",
       "KV blocks in the pool: the KV budget of both runs (default 192)", 0},
      {"max-num-seqs", CLI_U32, &o->max_num_seqs, "N", "sequences per step, at most (default 32)",
       0},
      {"step-tokens", CLI_U32, &o->step_tokens, "N",
       "new tokens per step, at most; prompts are chunked (default 512)", 0},
      {"max-model-len", CLI_U32, &o->max_model_len, "TOKENS",
       "longest sequence; each contiguous slot reserves this much (default 1024)", 0},
      {"device", CLI_STRING, &o->device, "cpu|cuda",
       "cuda: run pkv with a CUDA engine (pkv's kernels, the model's GEMMs on cuBLAS) against the "
       "CPU engine, and check that they generate the same tokens; needs a GPU, CUDA 13's "
       "libcudart and libcublas, and a libpkv built with CUDA (default cpu)",
       0},
      {"no-prefix-caching", CLI_FLAG, &o->no_prefix_caching, NULL,
       "run pkv with prefix caching off (tokens must not change)", 0},
      {"host-cache", CLI_SIZE, &o->host_cache, "SIZE",
       "also run pkv with a host tier of this size: preemption by swapping, evicted prefix blocks offloaded (default: no)",
       0},
      {"preemption", CLI_STRING, &o->preemption, "MODE",
       "that run's preemption: swap or auto (default swap)", 0},
      {"store", CLI_STRING, &o->store, "DIR|redis://HOST:PORT",
       "instead: pkv cold, filling this store, then warm from it in a second process (DIR is made if missing; a Redis server is yours to start)",
       0},
      {"plot", CLI_STRING, &o->plot, "FILE",
       "write an SVG, a panel per run: KV reserved and used, running sequences per step", 0},
      {"windows", CLI_STRING, &o->windows, "W,W,...",
       "sliding windows per layer, the list repeated over --layers (0 = full attention; e.g. --layers 6 --windows 64,64,64,64,64,0 is Gemma-like); also runs the same model with full attention in the same memory; with --host-cache or --store too",
       0},
      {"long-prompt", CLI_U32, &o->long_prompt, "TOKENS",
       "--windows: also one request of this many prompt tokens; prints each KV group's peak of blocks during its prefill, per chunk against the whole prompt (default: none)",
       0},
      {"hybrid", CLI_FLAG, &o->hybrid, NULL,
       "instead: recurrent layers (3 of every 4, default --layers 4), pkv keeping their states; runs pkv once per --state-checkpoints policy and compares with contiguous",
       0},
      {"state-checkpoints", CLI_STRING, &o->state_checkpoints, "POLICY",
       "--hybrid: prompt-end, every or none, each run against none (default: all three)", 0},
      {"checkpoint-interval", CLI_U32, &o->checkpoint_interval, "BLOCKS",
       "--hybrid: policy every's blocks between checkpoints (default 4)", 0},
      {"checkpoint-slots", CLI_U32, &o->checkpoint_slots, "N",
       "--hybrid: checkpoint slots (default --max-num-seqs)", 0},
      {"retention", CLI_FLAG, &o->retention, NULL,
       "instead: tenants' requests (--requests a round, default 8), a burst of unique prompts, the "
       "tenants again; pkv under plain LRU, then keeping the system prompts (priority, pins)",
       0},
      {"disaggregated", CLI_FLAG, &o->disaggregated, NULL,
       "instead: after the one-engine run, a prefill process and a decode process on 127.0.0.1, "
       "the prompts' KV pulled by pkv's UCX agent; tokens must be the same; reports time to "
       "first token, the KV moved and its rate against ucx_perftest's reads of the same bytes",
       0},
      {"burst", CLI_U32, &o->burst, "N",
       "--retention: unique prompts in the burst (default: twice the pool's tokens)", 0},
      {"retention-ms", CLI_U32, &o->retention_ms, "MS",
       "--retention: the priority runs' cache_retention_ms, after which a kept block's priority "
       "decays to normal (default 0: never)",
       0},
  };
  const cli_command cmd = {
      "demo", "demo [options]",
      "Serves a synthetic multi-tenant workload with a tiny built-in transformer (random weights,\n"
      "f32, greedy) end to end through pkv_submit / pkv_step / pkv_attention / pkv_commit, then\n"
      "through a contiguous-KV baseline in the same memory, and compares them.\n"
      "With --store, the workload runs through pkv twice instead, each time in a new process: cold\n"
      "(the store filled as blocks are sealed), then warm from the store, with an empty pool and\n"
      "host tier. The store's runs have a host tier: --host-cache, else the pool's size.\n"
      "With --hybrid, a model whose layers are 3 of 4 recurrent runs through pkv once per\n"
      "checkpoint policy of their state (--state-checkpoints), against contiguous, in the same KV\n"
      "budget; pkv's checkpoint slots come on top of it, and the report says how much they take.\n"
      "With --retention (default --num-blocks 96, --max-num-seqs 4), tenants' requests, a burst\n"
      "of unique prompts that cycles the pool, then the tenants' requests again, through pkv under\n"
      "plain LRU and with the system prompts kept (cache_priority, pkv_cache_set_priority,\n"
      "pkv_cache_pin): the tenants' second-round hit rate of each, tokens identical across runs.\n"
      "With --device cuda, pkv runs the workload on a CPU engine, then on a CUDA engine with the\n"
      "model's GEMMs on cuBLAS, and checks that the GPU generated the CPU's tokens.\n"
      "With --disaggregated, the workload through one engine, then through a prefill process and\n"
      "a decode process on 127.0.0.1: the prefill engine holds each prompt's blocks, the decode\n"
      "engine receives them by pkv's UCX agent and decodes; the tokens must be the same.",
      flags, sizeof flags / sizeof flags[0]};
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_PARSED) return rc;
  const char *bad = NULL;
  if (o->num_requests == 0 || o->num_requests > 100000)
    bad = "--requests must be in 1 .. 100000";
  else if (o->num_tenants == 0 || o->num_tenants > DEMO_MAX_TENANTS)
    bad = "--tenants must be in 1 .. 16";
  else if (o->num_layers == 0 || o->num_layers > 16)
    bad = "--layers must be in 1 .. 16";
  else if (o->block_size == 0 || o->num_blocks == 0)
    bad = "--block-size and --num-blocks must be at least 1";
  else if (o->max_num_seqs == 0 || o->step_tokens == 0)
    bad = "--max-num-seqs and --step-tokens must be at least 1";
  else if (o->max_model_len < 64 || o->max_model_len > 65536)
    bad = "--max-model-len must be in 64 .. 65536";
  else if ((uint64_t)o->num_blocks * o->block_size < o->max_model_len)
    bad = "the pool (--num-blocks x --block-size) must hold one --max-model-len sequence";
  else if (o->preemption && strcmp(o->preemption, "swap") != 0 &&
           strcmp(o->preemption, "auto") != 0)
    bad = "--preemption must be swap or auto";
  else if (o->preemption && !o->host_cache && !o->store)
    bad = "--preemption needs --host-cache or --store";
  else if (o->store && demo_store_check(o->store))
    bad = demo_store_check(o->store);
  else if (o->store && o->no_prefix_caching)
    bad = "--store needs prefix caching (the store holds prefix blocks): drop --no-prefix-caching";
  else if (o->long_prompt && !o->windows)
    bad = "--long-prompt shows windowed KV groups' prefill peak: give --windows too";
  else if (o->long_prompt > 65536)
    bad = "--long-prompt must be at most 65536 tokens";
  else if (o->long_prompt && (o->store || o->hybrid))
    bad = "--long-prompt runs beside pkv demo --windows' runs: drop --store and --hybrid";
  else if (o->windows && demo_parse_windows(o) != 0)
    bad =
        "--windows must be a list of 1 .. 16 window sizes (tokens, 0 = full attention), e.g. 64,64,0";
  else if ((bad = demo_cuda_check(o)) || (bad = demo_disagg_check(o)))
    ;
  else if (!(bad = demo_hybrid_check(o, flag_seen(&cmd, "layers"),
                                     flag_seen(&cmd, "checkpoint-interval"))))
    bad = demo_retention_check(o, flag_seen(&cmd, "requests"), flag_seen(&cmd, "num-blocks"),
                               flag_seen(&cmd, "max-num-seqs"));
  if (!bad) return CLI_PARSED;
  fprintf(stderr, "pkv demo: %s\n", bad);
  return CLI_BAD_USAGE;
}

static void model_config_of(const demo_options *o, model_config *c) {
  memset(c, 0, sizeof *c);
  c->num_layers = o->num_layers, c->hidden = 256, c->num_q_heads = 8, c->num_kv_heads = 2;
  c->head_dim = 32, c->intermediate = 688, c->vocab = 4096, c->max_positions = o->max_model_len;
  /* --long-prompt's request runs past max_model_len: its positions need their RoPE rows too */
  if (o->long_prompt + DEMO_LONG_PROMPT_OUT > c->max_positions)
    c->max_positions = o->long_prompt + DEMO_LONG_PROMPT_OUT;
  c->seed = o->seed;
  c->bias_token = o->stop_token, c->bias = 0.9f; /* so that some requests stop on their own */
}

static void print_header(const demo_options *o, const demo_workload *w, const model *m) {
  uint32_t lo = UINT32_MAX, hi = 0, nlo = UINT32_MAX, nhi = 0;
  for (uint32_t i = 0; i < w->num_requests; i++) {
    const demo_request *q = &w->requests[i];
    lo = q->prompt_len < lo ? q->prompt_len : lo, hi = q->prompt_len > hi ? q->prompt_len : hi;
    nlo = q->max_new_tokens < nlo ? q->max_new_tokens : nlo;
    nhi = q->max_new_tokens > nhi ? q->max_new_tokens : nhi;
  }
  const uint64_t pool_tokens = (uint64_t)o->num_blocks * o->block_size;
  char size[32];
  /* --hybrid: only every DEMO_ATTENTION_INTERVAL-th layer holds KV */
  const uint32_t kv_layers =
      o->hybrid ? m->c.num_layers / DEMO_ATTENTION_INTERVAL : m->c.num_layers;
  cli_format_size(pool_tokens * 2 * kv_layers * m->kv_dim * sizeof(float), size, sizeof size);
  const int cuda = o->device && strcmp(o->device, "cuda") == 0;
  printf("pkv demo: a tiny transformer served end to end through pkv (%s)\n\n",
         cuda ? "a CUDA engine against a CPU engine" : "CPU engine");
  printf("  model      %u layers, hidden %u, %u q / %u kv heads of %u, SwiGLU %u, vocab %u, f32,\n"
         "             %.1fM random parameters (seed %llu); GEMM: %s%s\n",
         m->c.num_layers, m->c.hidden, m->c.num_q_heads, m->c.num_kv_heads, m->c.head_dim,
         m->c.intermediate, m->c.vocab, m->num_params / 1e6, (unsigned long long)o->seed,
         model_gemm_name(),
         cuda ? "\n             on the GPU: cuBLAS (cublasSgemm, f32 math, no TF32)" : "");
  printf("  workload   %u requests from %u tenants (a cache salt and a system prompt each), all\n"
         "             at once: prompts %u-%u tokens (%llu in all), max_new_tokens %u-%u (%llu),\n"
         "             greedy sampling, stop token %d\n",
         w->num_requests, w->num_tenants, lo, hi, (unsigned long long)w->prompt_tokens, nlo, nhi,
         (unsigned long long)w->max_new_tokens, o->stop_token);
  printf("  KV budget  %u blocks x %u tokens = %llu tokens (%s), max_model_len %u\n", o->num_blocks,
         o->block_size, (unsigned long long)pool_tokens, size, o->max_model_len);
  printf("             pkv: paged, up to %u sequences and %u tokens per step, prefix caching %s\n",
         o->max_num_seqs, o->step_tokens, o->no_prefix_caching ? "off" : "on");
  if (!o->store && !cuda)
    printf(
        "             contiguous: %llu slots of max_model_len (every sequence reserves %u tokens)\n",
        (unsigned long long)(pool_tokens / o->max_model_len), o->max_model_len);
  printf("\n");
}

static void print_table(const demo_workload *w, const demo_result *p, const demo_result *c) {
  const uint32_t n = w->num_requests;
  double ps[3], pm[3], cs[3], cm[3];
  demo_result_ttft(p, n, 0, ps), demo_result_ttft(p, n, 1, pm);
  demo_result_ttft(c, n, 0, cs), demo_result_ttft(c, n, 1, cm);
  char a[48], b[48];
  printf("  %-34s %20s %20s\n", "", "pkv (paged)", "contiguous");
  DEMO_ROW("wall time", "%.2f s", p->wall_s, "%.2f s", c->wall_s);
  DEMO_ROW("  in the model's forward passes", "%.2f s", p->model_s, "%.2f s", c->model_s);
  DEMO_ROW("  of which attention", "%.2f s", p->attn_s, "%.2f s", c->attn_s);
  DEMO_ROW("steps", "%llu", (unsigned long long)p->steps, "%llu", (unsigned long long)c->steps);
  snprintf(a, sizeof a, "%u / %.1f", p->max_running, (double)p->sum_running / (double)p->steps);
  snprintf(b, sizeof b, "%u / %.1f", c->max_running, (double)c->sum_running / (double)c->steps);
  DEMO_ROW("running sequences, max / mean", "%s", a, "%s", b);
  DEMO_ROW("prompt tokens/s", "%.0f", demo_per_s((double)w->prompt_tokens, p->wall_s), "%.0f",
           demo_per_s((double)w->prompt_tokens, c->wall_s));
  DEMO_ROW("generated tokens/s", "%.0f", demo_per_s((double)p->generated_tokens, p->wall_s), "%.0f",
           demo_per_s((double)c->generated_tokens, c->wall_s));
  DEMO_ROW("forward rows (tokens computed)", "%llu", (unsigned long long)p->rows, "%llu",
           (unsigned long long)c->rows);
  const char *names[3] = {"time to first token, mean", "time to first token, p50",
                          "time to first token, p90"};
  for (int k = 0; k < 3; k++) {
    snprintf(a, sizeof a, "%.0f steps %6.0f ms", ps[k], pm[k]);
    snprintf(b, sizeof b, "%.0f steps %6.0f ms", cs[k], cm[k]);
    printf("  %-34s %20s %20s\n", names[k], a, b);
  }
  snprintf(a, sizeof a, "%.1f%%",
           100.0 * demo_per_s((double)p->hit_tokens, (double)p->query_tokens));
  DEMO_ROW("prefix-cache hit rate (tokens)", "%s", p->query_tokens ? a : "off", "%s", "-");
  snprintf(a, sizeof a, "%.0f%% / %.0f%%", 100.0 * p->util_sum / (double)p->steps,
           100.0 * p->util_peak);
  snprintf(b, sizeof b, "%.0f%% / %.0f%%", 100.0 * c->util_sum / (double)c->steps,
           100.0 * c->util_peak);
  DEMO_ROW("KV utilization, mean / peak", "%s", a, "%s", b);
  DEMO_ROW("KV reserved, mean", "%s", "= utilization", "%.0f%%",
           100.0 * c->reserved_sum / (double)c->steps);
  DEMO_ROW("preemptions", "%llu", (unsigned long long)p->preemptions, "%s", "-");
  uint32_t stops[2] = {0, 0};
  for (uint32_t i = 0; i < n; i++)
    stops[0] += p->finish[i] == PKV_FINISH_STOP_TOKEN,
        stops[1] += c->finish[i] == PKV_FINISH_STOP_TOKEN;
  snprintf(a, sizeof a, "%u / %u", stops[0], n - stops[0]);
  snprintf(b, sizeof b, "%u / %u", stops[1], n - stops[1]);
  DEMO_ROW("finished on stop token / length", "%s", a, "%s", b);
}

/* Whether both runs generated the same tokens; prints the verdict. */
static int compare_tokens(const demo_workload *w, const demo_result *p, const demo_result *c) {
  uint32_t first = 0, at = 0;
  const uint32_t differ = demo_result_differ(w, p, c, &first, &at);
  if (differ == 0) {
    printf("  tokens identical: yes (%u requests, %llu generated tokens, pkv vs contiguous)\n",
           w->num_requests, (unsigned long long)p->generated_tokens);
    return 0;
  }
  printf(
      "  tokens identical: NO - %u of %u requests differ; the first is request %u at generated\n"
      "  token %u. Both use the same weights; the two attention implementations round f32\n"
      "  differently, which flips a greedy choice only on a near tie - a difference that persists\n"
      "  with another --seed points to a bug.\n",
      differ, w->num_requests, first, at);
  return -1;
}

static void print_summary(const demo_options *o, const demo_result *p, const demo_result *c) {
  printf(
      "\n  pkv ran %.1fx the sequences at once (mean %.1f vs %.1f), %.2fx the generated tokens/s,\n"
      "  %s\n",
      (double)p->max_running / (c->max_running ? c->max_running : 1),
      (double)p->sum_running / (double)p->steps, (double)c->sum_running / (double)c->steps,
      demo_per_s(c->wall_s, p->wall_s),
      o->no_prefix_caching ? "with prefix caching off."
                           : "sharing each tenant's system prompt through the prefix cache.");
}

/* The third run: the host tier against recompute (p): preemptions, forward rows, prefix hits by
 * tier (offload), same tokens. */
static int print_host_tier(const demo_options *o, const demo_workload *w, const demo_result *p,
                           const demo_result *h) {
  char size[32];
  printf("\n  with a host tier of %s (%llu blocks), preemption by %s:\n",
         cli_format_size(o->host_cache, size, sizeof size), (unsigned long long)h->host_blocks,
         o->preemption ? o->preemption : "swap");
  printf("  preemptions %llu: %llu swapped out (%llu blocks out, %llu back in), %llu recomputed\n",
         (unsigned long long)h->preemptions, (unsigned long long)h->swap_preemptions,
         (unsigned long long)h->swapped_out_blocks, (unsigned long long)h->swapped_in_blocks,
         (unsigned long long)(h->preemptions - h->swap_preemptions));
  const long long saved = (long long)p->rows - (long long)h->rows;
  printf("  forward rows %llu, against %llu preempting by recompute: %lld saved (%.1f%%); "
         "%.0f generated tokens/s\n",
         (unsigned long long)h->rows, (unsigned long long)p->rows, saved,
         p->rows ? 100.0 * (double)saved / (double)p->rows : 0.0,
         h->wall_s > 0 ? (double)h->generated_tokens / h->wall_s : 0.0);
  uint32_t first = 0, at = 0;
  const uint32_t differ = demo_result_differ(w, h, p, &first, &at);
  printf("  prefix hits by tier: %llu tokens from the pool, %llu from the host tier (%llu evicted\n"
         "  blocks offloaded, %llu loaded back: %llu prompt rows not recomputed)\n",
         (unsigned long long)h->device_hit_tokens, (unsigned long long)h->host_hit_tokens,
         (unsigned long long)h->offloaded_blocks, (unsigned long long)h->loaded_blocks,
         (unsigned long long)h->host_hit_tokens);
  printf("  tokens identical to preempting by recompute: %s\n", differ ? "NO" : "yes");
  return differ ? -1 : 0;
}

/* Runs one design; prints its failure. */
static int run(int paged, const demo_options *o, const demo_workload *w, const model *m,
               demo_result *r) {
  if (demo_result_init(r,
                       !paged               ? "contiguous"
                       : o->preemption_mode ? "pkv + host tier"
                                            : "pkv (paged)",
                       w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    return -1;
  }
  if ((paged ? demo_run_paged : demo_run_contig)(o, w, m, r) == 0) return 0;
  fprintf(stderr, "pkv demo: %s run failed: %s\n", r->name, r->error);
  return -1;
}

int cmd_demo(int argc, char **argv) {
  demo_options o;
  defaults(&o);
  int rc = parse(&o, argc, argv);
  if (rc != CLI_PARSED) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  model_config mc;
  model_config_of(&o, &mc);
  if (o.retention) return demo_retention_runs(&o, &mc) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
  struct demo_cuda *dc = NULL;
  char why[512];
  if (demo_cuda_open(&o, &mc, &dc, why, sizeof why) != 0) {
    fprintf(stderr, "pkv demo: %s\n", why);
    return CLI_EXIT_USAGE;
  }
  model m;
  demo_workload w;
  if (model_init(&m, &mc) != 0 || demo_workload_make(&o, mc.vocab, &w) != 0) {
    fprintf(stderr, "pkv demo: out of memory\n");
    model_free(&m);
    demo_cuda_close(dc);
    return CLI_EXIT_FAIL;
  }
  print_header(&o, &w, &m);
  if (o.windows && demo_windowed_pool(&o, &m) != 0) {
    demo_workload_free(&w);
    model_free(&m);
    return CLI_EXIT_FAIL;
  }
  fflush(stdout);
  if (dc) {
    rc = demo_cuda_runs(dc, &o, &w, &m);
    demo_cuda_close(dc);
    demo_workload_free(&w);
    model_free(&m);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
  }
  if (o.store || o.hybrid || o.disaggregated) {
    rc = o.store    ? demo_store_runs(&o, &w, &m)
         : o.hybrid ? demo_hybrid_runs(&o, &w, &m)
                    : demo_disagg_runs(&o, &w, &m);
    demo_workload_free(&w);
    model_free(&m);
    return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
  }
  demo_result p, c, h;
  memset(&p, 0, sizeof p), memset(&c, 0, sizeof c), memset(&h, 0, sizeof h);
  rc = run(1, &o, &w, &m, &p) == 0 && run(0, &o, &w, &m, &c) == 0 ? 0 : -1;
  if (rc == 0) {
    print_table(&w, &p, &c);
    print_summary(&o, &p, &c);
    rc = compare_tokens(&w, &p, &c);
  }
  if (rc == 0 && o.windows) rc = demo_print_full_attention(&o, &w, &m, &p);
  if (rc == 0 && o.long_prompt) rc = demo_print_long_prompt(&o, &m);
  if (rc == 0 && o.host_cache) {
    demo_options oh = o;
    oh.preemption_mode =
        o.preemption && strcmp(o.preemption, "auto") == 0 ? PKV_PREEMPT_AUTO : PKV_PREEMPT_SWAP;
    rc = run(1, &oh, &w, &m, &h);
    if (rc == 0) rc = print_host_tier(&o, &w, &p, &h);
  }
  if (rc == 0 && o.plot) {
    const demo_result *runs[3] = {&p, &c, &h};
    rc = demo_plot(o.plot, runs, o.host_cache ? 3 : 2, &o);
    if (rc == 0) printf("  plot: %s\n", o.plot);
  }
  demo_result_free(&p, &w), demo_result_free(&c, &w), demo_result_free(&h, &w);
  demo_workload_free(&w);
  model_free(&m);
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
