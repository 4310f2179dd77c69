/*
 * simulate.c - `pkv simulate`: a realistic serving workload through the block manager.
 *
 * Builds the workload (workload.c), creates a CPU engine with a small model shape (no attention
 * runs, so only the pool's size matters, and the CPU pool is touched lazily), runs the serving
 * loop (sim_loop.c) and reports what paging bought: prefix-cache hits, KV utilization,
 * concurrency against contiguous preallocation at max_model_len, evictions, copy-on-write copies,
 * preemptions, and the block manager's speed.
 */
#include <stdio.h>
#include <string.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"
#include "sim.h"
#include "workload.h"

typedef struct sim_opts {
  sim_workload_params w;
  sim_config c;
  uint32_t block_size, num_blocks;
  int no_prefix_caching, json;
  uint64_t pool_bytes; /* from pkv_engine_budget */
} sim_opts;

/* Flag values that pkv would refuse, or that make no workload, get a clear message here. */
static int validate(const sim_opts *o) {
  const char *bad = NULL;
  if (o->w.num_requests == 0)
    bad = "--requests must be at least 1";
  else if (o->w.num_requests > 1000000)
    bad = "--requests must be at most 1000000";
  else if (o->block_size == 0)
    bad = "--block-size must be at least 1";
  else if (o->num_blocks == 0)
    bad = "--num-blocks must be at least 1";
  else if (o->w.max_model_len < 16)
    bad = "--max-model-len must be at least 16";
  else if ((uint64_t)o->num_blocks * o->block_size < o->w.max_model_len)
    bad = "the pool (--num-blocks x --block-size tokens) must hold one --max-model-len sequence";
  else if (o->w.num_system_prompts > 1000)
    bad = "--system-prompts must be at most 1000";
  else if (!(o->w.shared_fraction >= 0.0 && o->w.shared_fraction <= 1.0))
    bad = "--shared-fraction must be in [0, 1]";
  else if (!(o->w.fork_fraction >= 0.0 && o->w.fork_fraction <= 1.0))
    bad = "--fork-fraction must be in [0, 1]";
  else if (!(o->w.mean_prompt_tokens >= 1.0 && o->w.mean_prompt_tokens <= 1e7))
    bad = "--mean-prompt must be in [1, 1e7]";
  else if (!(o->w.mean_output_tokens >= 1.0 && o->w.mean_output_tokens <= 1e7))
    bad = "--mean-output must be in [1, 1e7]";
  else if (o->c.step_tokens == 0)
    bad = "--step-tokens must be at least 1";
  else if (o->c.max_seqs == 0)
    bad = "--max-seqs must be at least 1";
  else if (o->c.watermark_blocks >= o->num_blocks)
    bad = "--watermark must be below --num-blocks";
  if (bad == NULL) return 0;
  fprintf(stderr, "pkv simulate: %s\n", bad);
  return -1;
}

static pkv_status create_engine(const sim_opts *o, pkv_engine **e) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  p.num_layers = 2; /* a small shape: 2 KiB per block of 16 tokens */
  p.num_q_heads = 4;
  p.num_kv_heads = 1;
  p.head_dim = 16;
  p.dtype = PKV_DTYPE_BF16;
  p.max_model_len = o->w.max_model_len;
  p.block_size = o->block_size;
  p.num_blocks = o->num_blocks;
  p.enable_prefix_caching = o->no_prefix_caching ? 0 : 1;
  p.device = PKV_DEVICE_CPU;
  p.num_threads = 1;
  return pkv_engine_create(&p, e);
}

static double ratio(double a, double b) { return b > 0.0 ? a / b : 0.0; }

static void print_text(const sim_opts *o, const sim_workload *w, const sim_result *r) {
  const pkv_stats *st = &r->stats;
  double steps = (double)(r->steps ? r->steps : 1);
  uint64_t tokens = r->prompt_tokens_computed + r->decode_tokens_computed + r->recomputed_tokens;
  uint64_t contiguous = (uint64_t)o->num_blocks * o->block_size / o->w.max_model_len;
  char pool[32];
  cli_format_size(o->pool_bytes, pool, sizeof pool);
  printf("pkv simulate: %u requests (seed %llu), %u system prompts of %u-%u tokens "
         "(%.0f%% of requests), %.0f%% with 2 samples\n",
         w->num_requests, (unsigned long long)o->w.seed, o->w.num_system_prompts,
         o->w.system_min_tokens, o->w.system_max_tokens, 100.0 * o->w.shared_fraction,
         100.0 * o->w.fork_fraction);
  printf("  engine                %u blocks x %u tokens = %llu tokens (cpu pool %s), "
         "max_model_len %u, prefix caching %s\n",
         o->num_blocks, o->block_size, (unsigned long long)o->num_blocks * o->block_size, pool,
         o->w.max_model_len, o->no_prefix_caching ? "off" : "on");
  printf(
      "  workload              prompts %llu tokens (mean %.0f), outputs %llu tokens (mean %.0f), "
      "%u forked\n",
      (unsigned long long)w->prompt_tokens, ratio((double)w->prompt_tokens, w->num_requests),
      (unsigned long long)w->output_tokens,
      ratio((double)w->output_tokens, w->num_requests + (double)w->num_forked), w->num_forked);
  printf(
      "  scheduler             %u tokens per step, at most %u sequences, watermark %u blocks\n\n",
      o->c.step_tokens, o->c.max_seqs, o->c.watermark_blocks);
  printf("  requests completed    %u of %u\n", r->completed_requests, w->num_requests);
  printf("  steps                 %llu\n", (unsigned long long)r->steps);
  printf(
      "  tokens computed       %llu (prompt %llu, decode %llu, recomputed after preemption %llu)\n",
      (unsigned long long)tokens, (unsigned long long)r->prompt_tokens_computed,
      (unsigned long long)r->decode_tokens_computed, (unsigned long long)r->recomputed_tokens);
  printf("  tokens sampled        %llu\n", (unsigned long long)r->sampled_tokens);
  printf("  prefix cache hits     %.1f%% (%llu of %llu tokens looked up at admission and resume)\n",
         100.0 * ratio((double)st->prefix_hit_tokens, (double)st->prefix_query_tokens),
         (unsigned long long)st->prefix_hit_tokens, (unsigned long long)st->prefix_query_tokens);
  double busy = (double)(r->busy_steps ? r->busy_steps : 1);
  printf("  KV utilization        peak %.1f%%; mean %.1f%% while requests waited (%llu steps), "
         "%.1f%% over all steps\n",
         100.0 * r->util_peak, 100.0 * r->busy_util_sum / busy, (unsigned long long)r->busy_steps,
         100.0 * r->util_sum / steps);
  printf("  concurrent sequences  peak %u; mean %.1f while requests waited, %.1f over all steps\n",
         r->running_peak, r->busy_running_sum / busy, r->running_sum / steps);
  printf(
      "  vs contiguous         %llu sequences fit if each reserves max_model_len (%llu tokens / "
      "%u):\n                        pkv ran %.2fx as many while requests waited, %.2fx over all "
      "steps\n",
      (unsigned long long)contiguous, (unsigned long long)o->num_blocks * o->block_size,
      o->w.max_model_len, ratio(r->busy_running_sum / busy, (double)contiguous),
      ratio(r->running_sum / steps, (double)contiguous));
  printf("  evictions             %llu\n", (unsigned long long)st->num_evictions);
  printf("  copy-on-write copies  %llu\n", (unsigned long long)st->num_cow_copies);
  printf("  preemptions           %llu\n", (unsigned long long)st->num_preemptions);
  printf("  wall time             %.3f s, %.1f%% of it in %llu block-manager calls: %.0f ops/s, "
         "%.2f us/op\n",
         r->wall_seconds, 100.0 * ratio(r->pkv_seconds, r->wall_seconds),
         (unsigned long long)r->pkv_calls, ratio((double)r->pkv_calls, r->pkv_seconds),
         1e6 * ratio(r->pkv_seconds, (double)r->pkv_calls));
}

static void print_json(const sim_opts *o, const sim_workload *w, const sim_result *r) {
  const pkv_stats *st = &r->stats;
  double steps = (double)(r->steps ? r->steps : 1);
  uint64_t contiguous = (uint64_t)o->num_blocks * o->block_size / o->w.max_model_len;
  printf("{\n  \"requests\": %u,\n  \"completed_requests\": %u,\n  \"seed\": %llu,\n",
         w->num_requests, r->completed_requests, (unsigned long long)o->w.seed);
  printf("  \"num_blocks\": %u,\n  \"block_size\": %u,\n  \"max_model_len\": %u,\n"
         "  \"prefix_caching\": %s,\n",
         o->num_blocks, o->block_size, o->w.max_model_len, o->no_prefix_caching ? "false" : "true");
  printf("  \"workload_prompt_tokens\": %llu,\n  \"workload_output_tokens\": %llu,\n"
         "  \"forked_requests\": %u,\n",
         (unsigned long long)w->prompt_tokens, (unsigned long long)w->output_tokens, w->num_forked);
  printf("  \"steps\": %llu,\n  \"prompt_tokens_computed\": %llu,\n  \"decode_tokens_computed\": "
         "%llu,\n  \"recomputed_tokens\": %llu,\n  \"sampled_tokens\": %llu,\n",
         (unsigned long long)r->steps, (unsigned long long)r->prompt_tokens_computed,
         (unsigned long long)r->decode_tokens_computed, (unsigned long long)r->recomputed_tokens,
         (unsigned long long)r->sampled_tokens);
  printf("  \"prefix_query_tokens\": %llu,\n  \"prefix_hit_tokens\": %llu,\n"
         "  \"prefix_hit_rate\": %.6f,\n",
         (unsigned long long)st->prefix_query_tokens, (unsigned long long)st->prefix_hit_tokens,
         ratio((double)st->prefix_hit_tokens, (double)st->prefix_query_tokens));
  double busy = (double)(r->busy_steps ? r->busy_steps : 1);
  printf("  \"busy_steps\": %llu,\n  \"kv_utilization_peak\": %.6f,\n"
         "  \"kv_utilization_mean\": %.6f,\n  \"kv_utilization_mean_busy\": %.6f,\n",
         (unsigned long long)r->busy_steps, r->util_peak, r->util_sum / steps,
         r->busy_util_sum / busy);
  printf("  \"concurrency_peak\": %u,\n  \"concurrency_mean\": %.3f,\n"
         "  \"concurrency_mean_busy\": %.3f,\n  \"contiguous_concurrency\": %llu,\n"
         "  \"concurrency_ratio\": %.3f,\n  \"concurrency_ratio_busy\": %.3f,\n",
         r->running_peak, r->running_sum / steps, r->busy_running_sum / busy,
         (unsigned long long)contiguous, ratio(r->running_sum / steps, (double)contiguous),
         ratio(r->busy_running_sum / busy, (double)contiguous));
  printf("  \"evictions\": %llu,\n  \"cow_copies\": %llu,\n  \"preemptions\": %llu,\n",
         (unsigned long long)st->num_evictions, (unsigned long long)st->num_cow_copies,
         (unsigned long long)st->num_preemptions);
  printf("  \"wall_seconds\": %.6f,\n  \"pkv_calls\": %llu,\n  \"pkv_seconds\": %.6f,\n"
         "  \"ops_per_second\": %.1f\n}\n",
         r->wall_seconds, (unsigned long long)r->pkv_calls, r->pkv_seconds,
         ratio((double)r->pkv_calls, r->pkv_seconds));
}

/* Builds the workload and the engine, runs, reports. */
static int run(sim_opts *o) {
  if (validate(o) != 0) return CLI_EXIT_USAGE;
  sim_workload w;
  if (sim_workload_make(&o->w, &w) != 0) {
    fprintf(stderr, "pkv simulate: out of memory building the workload\n");
    return CLI_EXIT_FAIL;
  }
  pkv_engine *e = NULL;
  pkv_status s = create_engine(o, &e);
  if (s != PKV_OK) {
    /* every engine field simulate sets comes from a flag (or its default): named as the flag */
    static const char *const names[][2] = {{"block_size", "--block-size"},
                                           {"num_blocks", "--num-blocks"},
                                           {"max_model_len", "--max-model-len"}};
    char said[600];
    fprintf(stderr, "pkv simulate: the engine refused: %s\n",
            cli_in_flag_terms(pkv_last_error(), names, sizeof names / sizeof names[0], said,
                              sizeof said));
    sim_workload_free(&w);
    return CLI_EXIT_FAIL;
  }
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  if (pkv_engine_budget(e, &b) == PKV_OK) o->pool_bytes = b.pool_bytes;
  sim_result r;
  int rc = sim_run(e, &w, &o->c, o->w.seed, &r);
  if (rc == 0 && o->json) print_json(o, &w, &r);
  if (rc == 0 && !o->json) print_text(o, &w, &r);
  if (rc == 0 && o->c.check && r.stats.num_seqs != 0) {
    fprintf(stderr, "pkv simulate: --check: %llu sequences still live after the run\n",
            (unsigned long long)r.stats.num_seqs);
    rc = -1;
  }
  if (rc == 0 && o->c.check && !o->json)
    printf("  check                 pkv_engine_check passed after every step\n");
  pkv_engine_destroy(e);
  sim_workload_free(&w);
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

int cmd_simulate(int argc, char **argv) {
  sim_opts o;
  memset(&o, 0, sizeof o);
  sim_workload_params_default(&o.w);
  o.c.step_tokens = 2048;
  o.c.max_seqs = 256;
  o.block_size = 16;
  o.num_blocks = 8192;
  cli_flag flags[] = {
      {"requests", CLI_U32, &o.w.num_requests, "N", "requests in the workload (400)", 0},
      {"seed", CLI_U64, &o.w.seed, "N", "workload seed (1)", 0},
      {"block-size", CLI_U32, &o.block_size, "N", "tokens per block (16)", 0},
      {"num-blocks", CLI_U32, &o.num_blocks, "N", "blocks in the KV pool (8192)", 0},
      {"max-model-len", CLI_U32, &o.w.max_model_len, "N", "longest sequence in tokens (8192)", 0},
      {"system-prompts", CLI_U32, &o.w.num_system_prompts, "N", "shared system prompts (4)", 0},
      {"shared-fraction", CLI_DOUBLE, &o.w.shared_fraction, "F", "requests starting with one (0.8)",
       0},
      {"mean-prompt", CLI_DOUBLE, &o.w.mean_prompt_tokens, "N", "mean user prompt tokens (600)", 0},
      {"mean-output", CLI_DOUBLE, &o.w.mean_output_tokens, "N", "mean output tokens (250)", 0},
      {"fork-fraction", CLI_DOUBLE, &o.w.fork_fraction, "F",
       "requests with 2 samples, forked (0.1)", 0},
      {"step-tokens", CLI_U32, &o.c.step_tokens, "N", "token budget of one step (2048)", 0},
      {"max-seqs", CLI_U32, &o.c.max_seqs, "N", "most running sequences (256)", 0},
      {"watermark", CLI_U32, &o.c.watermark_blocks, "N",
       "free blocks admission keeps for decodes (0)", 0},
      {"no-prefix-caching", CLI_FLAG, &o.no_prefix_caching, NULL, "turn the prefix cache off", 0},
      {"check", CLI_FLAG, &o.c.check, NULL, "pkv_engine_check + sequence states after each step",
       0},
      {"json", CLI_FLAG, &o.json, NULL, "print JSON instead of text", 0},
  };
  cli_command cmd = {"simulate", "simulate [options]",
                     "Runs a synthetic chat-serving workload (shared system prompts, long-tailed\n"
                     "prompt and output lengths, some two-sample requests) through pkv's block\n"
                     "manager with a FIFO continuous-batching loop. No attention is computed.",
                     flags, sizeof flags / sizeof flags[0]};
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_PARSED) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  return run(&o);
}
