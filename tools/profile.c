/*
 * profile.c - `pkv profile`: how many KV blocks, tokens and sequences fit, and why.
 *
 * Reads a Hugging Face config.json (pkv_engine_params_from_hf_config_layers: the flat fields, or
 * per-layer specs where the layers differ; pkv_hf_config_layer_windows for --layer-windows'
 * models), applies the flags, calls pkv_profile and prints every term of the budget (DESIGN.md
 * §5) so a person can check it:
 *   block_bytes = 2 (K,V; 1 for MLA's latent) * group_layers * block_size * kv_heads_per_rank *
 *                 head_dim * kv dtype bytes
 *   budget      = total * utilization - used - reserve   (or --kv-cache, or --num-blocks)
 * group_layers is num_layers without sliding windows; the attention variants (the kv dtype, the
 * windows' KV groups and what they gain) are variants.c's; a model described per layer prints its
 * layers and groups from profile_layers.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "commands.h"
#include "profile.h"
#include "variants.h"

typedef struct profile_opts {
  const char *config;
  uint64_t memory, reserve, used, kv_cache, host_cache;
  double utilization;
  uint32_t tp, tp_rank, block_size, max_model_len, num_blocks, host_blocks;
  uint32_t max_num_seqs, num_checkpoints;
  const char *dtype, *device, *checkpoints;
  int json;
  variant_flags variants;
  const struct cli_command *seen; /* the parsed command: which flags were given */
} profile_opts;

const char *profile_device_name(int32_t d) {
  return d == PKV_DEVICE_CPU ? "cpu" : d == PKV_DEVICE_CUDA ? "cuda" : "auto";
}

static int parse_device(const char *s, int32_t *out) {
  if (strcasecmp(s, "auto") == 0) return *out = PKV_DEVICE_AUTO, 0;
  if (strcasecmp(s, "cpu") == 0) return *out = PKV_DEVICE_CPU, 0;
  if (strcasecmp(s, "cuda") == 0 || strcasecmp(s, "gpu") == 0) return *out = PKV_DEVICE_CUDA, 0;
  return -1;
}

/* --state-checkpoints: prompt-end, none or every:K (K blocks between checkpoints). */
static int parse_checkpoints(const char *s, pkv_engine_params *p) {
  char *end = NULL;
  if (strcasecmp(s, "prompt-end") == 0) {
    p->state_checkpoint_policy = PKV_STATE_CHECKPOINT_PROMPT_END;
  } else if (strcasecmp(s, "none") == 0) {
    p->state_checkpoint_policy = PKV_STATE_CHECKPOINT_NONE;
  } else if (strncasecmp(s, "every:", 6) == 0) {
    const unsigned long k = strtoul(s + 6, &end, 10);
    if (end == s + 6 || *end != '\0' || k == 0 || k > (1ul << 20)) return -1;
    p->state_checkpoint_policy = PKV_STATE_CHECKPOINT_EVERY;
    p->state_checkpoint_interval = (uint32_t)k;
  } else {
    return -1;
  }
  return 0;
}

static int flag_seen(const cli_command *cmd, const char *name) {
  for (size_t i = 0; i < cmd->num_flags; i++)
    if (strcmp(cmd->flags[i].name, name) == 0) return cmd->flags[i].seen;
  return 0;
}

/* p and its layer specs (*specs, malloc'd; NULL and freed when the flat fields describe the
 * model) from config.json. Returns 0, or -1 with the reason printed. */
static int read_config(const char *path, pkv_engine_params *p, const char *text, size_t len,
                       pkv_layer_spec **specs) {
  uint32_t n = 0;
  *specs = NULL;
  pkv_status s = pkv_engine_params_from_hf_config_layers(p, text, len, NULL, 0, 0, &n);
  if (s == PKV_OK && (*specs = calloc(n, sizeof **specs)) == NULL) {
    fprintf(stderr, "pkv profile: %s: out of memory for the specs of %u layers\n", path, n);
    return -1;
  }
  if (s == PKV_OK)
    s = pkv_engine_params_from_hf_config_layers(p, text, len, *specs, sizeof **specs, n, &n);
  if (s != PKV_OK || p->layer_specs == NULL) free(*specs), *specs = NULL;
  if (s != PKV_OK)
    fprintf(stderr, "pkv profile: %s: %s (%s)\n", path, pkv_last_error(), pkv_status_string(s));
  return s == PKV_OK ? 0 : -1;
}

/* Reads the config and applies the flags to p. Returns an exit code (CLI_EXIT_OK to go on);
 * *windows is p->layer_windows' array and *specs p->layer_specs' (or NULL), for the caller to
 * free. */
static int build_params(const profile_opts *o, const cli_command *cmd, pkv_engine_params *p,
                        uint32_t **windows, pkv_layer_spec **specs) {
  *windows = NULL;
  pkv_engine_params_init(p, sizeof *p);
  /* A hybrid model's state shapes are read as this rank's share: the reader needs --tp first. */
  if (flag_seen(cmd, "tp")) p->tp_size = o->tp;
  char *text = NULL;
  size_t len = 0;
  if (cli_read_file(o->config, &text, &len) != 0) return CLI_EXIT_FAIL;
  if (read_config(o->config, p, text, len, specs) != 0) {
    free(text);
    return CLI_EXIT_FAIL;
  }
  if (o->dtype != NULL && variants_parse_dtype(o->dtype, 0, &p->dtype) != 0) {
    fprintf(stderr,
            "pkv profile: bad --dtype '%s': expected bf16, f16 or f32 (fp8 is a --kv-dtype)\n",
            o->dtype);
    free(text);
    return CLI_EXIT_USAGE;
  }
  int rc = variants_apply(&o->variants, o->config, text, len, p, windows);
  free(text);
  if (rc != CLI_EXIT_OK) return rc;
  if (o->checkpoints != NULL && parse_checkpoints(o->checkpoints, p) != 0) {
    fprintf(stderr,
            "pkv profile: bad --state-checkpoints '%s': expected prompt-end, none or every:K "
            "(a checkpoint every K blocks, 1 .. 1048576)\n",
            o->checkpoints);
    return CLI_EXIT_USAGE;
  }
  if (o->device != NULL && parse_device(o->device, &p->device) != 0) {
    fprintf(stderr, "pkv profile: bad --device '%s': expected auto, cpu or cuda\n", o->device);
    return CLI_EXIT_USAGE;
  }
  for (size_t i = 0; i < cmd->num_flags; i++) {
    const cli_flag *f = &cmd->flags[i];
    if (!f->seen) continue;
    if (strcmp(f->name, "memory") == 0) p->memory_total_bytes = o->memory;
    if (strcmp(f->name, "utilization") == 0) p->memory_utilization = o->utilization;
    if (strcmp(f->name, "reserve") == 0) p->reserve_bytes = o->reserve;
    if (strcmp(f->name, "used") == 0) p->memory_used_bytes = o->used;
    if (strcmp(f->name, "kv-cache") == 0) p->kv_cache_bytes = o->kv_cache;
    if (strcmp(f->name, "tp") == 0) p->tp_size = o->tp;
    if (strcmp(f->name, "tp-rank") == 0) p->tp_rank = o->tp_rank;
    if (strcmp(f->name, "block-size") == 0) p->block_size = o->block_size;
    if (strcmp(f->name, "max-model-len") == 0) p->max_model_len = o->max_model_len;
    if (strcmp(f->name, "num-blocks") == 0) p->num_blocks = o->num_blocks;
    if (strcmp(f->name, "host-cache") == 0) p->host_cache_bytes = o->host_cache;
    if (strcmp(f->name, "host-blocks") == 0) p->host_num_blocks = o->host_blocks;
    if (strcmp(f->name, "max-num-seqs") == 0) p->max_num_seqs = o->max_num_seqs;
    if (strcmp(f->name, "num-checkpoints") == 0) p->num_state_checkpoints = o->num_checkpoints;
  }
  return CLI_EXIT_OK;
}

/* Why the budget fails, in the flags' terms (pkv's own message names pkv_engine_params' fields).
 * Returns CLI_EXIT_FAIL. */
static int budget_refusal(const pkv_engine_params *p, const pkv_kv_budget *b) {
  char need_h[32], have_h[32], miss_h[32];
  if (b->shortfall_bytes == 0) { /* the host tier's memory, its state slots included */
    const uint64_t host = b->host_pool_bytes + b->host_state_bytes;
    fprintf(stderr,
            "pkv profile: the host tier takes %s (%llu blocks%s); the host has %s available: %s "
            "missing. Lower --host-cache or --host-blocks%s\n",
            cli_format_size(host, need_h, sizeof need_h), (unsigned long long)b->host_num_blocks,
            b->host_state_bytes ? " and its state slots" : "",
            cli_format_size(b->host_available_bytes, have_h, sizeof have_h),
            cli_format_size(host - b->host_available_bytes, miss_h, sizeof miss_h),
            b->host_state_bytes ? " (or --max-num-seqs, --num-checkpoints)" : "");
    return CLI_EXIT_FAIL;
  }
  if (b->source == PKV_BUDGET_FIXED_BLOCKS) {
    fprintf(
        stderr,
        "pkv profile: --num-blocks %u cannot hold one sequence of --max-model-len %u: it needs %llu "
        "blocks. Give --num-blocks %llu or more, or a smaller --max-model-len\n",
        p->num_blocks, p->max_model_len, (unsigned long long)b->blocks_per_max_seq,
        (unsigned long long)b->blocks_per_max_seq);
    return CLI_EXIT_FAIL;
  }
  const uint64_t need =
      b->blocks_per_max_seq * b->block_bytes + b->kv_scale_bytes + b->state_pool_bytes;
  char states[96] = "";
  if (b->state_pool_bytes)
    snprintf(states, sizeof states, " and %u state slots of %llu bytes",
             b->num_state_slots + b->num_state_checkpoints,
             (unsigned long long)b->state_bytes_per_seq);
  fprintf(
      stderr,
      "pkv profile: one sequence of max_model_len %u needs %s (%llu blocks of %llu bytes%s%s); the KV budget is "
      "%s: %s (%llu bytes) missing.\n",
      p->max_model_len, cli_format_size(need, need_h, sizeof need_h),
      (unsigned long long)b->blocks_per_max_seq, (unsigned long long)b->block_bytes,
      b->kv_scale_bytes ? " and the fp8 scales" : "", states,
      cli_format_size(b->budget_bytes, have_h, sizeof have_h),
      cli_format_size(b->shortfall_bytes, miss_h, sizeof miss_h),
      (unsigned long long)b->shortfall_bytes);
  if (b->source == PKV_BUDGET_FROM_BYTE_CAP)
    fprintf(stderr, "  Give --kv-cache %llu or more", (unsigned long long)need);
  else
    fprintf(stderr, "  Raise --memory or --utilization, or lower --used or --reserve");
  fprintf(
      stderr, ", or a smaller --max-model-len%s%s\n",
      b->state_pool_bytes ? ", --max-num-seqs or --num-checkpoints" : "",
      variants_dtype_bytes(b->kv_dtype) > 1 ? ", or --kv-dtype fp8 (one byte per element)" : "");
  return CLI_EXIT_FAIL;
}

/* pkv's message with its fields named as the flags that set them. A field only a flag (or its
 * default) sets is always a flag's name: "Raise --utilization (now 0.9)" holds even when the
 * default was used. A field the config may set too keeps its name unless the flag was given. */
static const char *in_flag_terms(const profile_opts *o, const char *msg, char *buf, size_t cap) {
  static const struct {
    const char *field, *flag;
    int from_config;
  } all[] = {
      {"memory_total_bytes", "--memory", 0},
      {"memory_utilization", "--utilization", 0},
      {"reserve_bytes", "--reserve", 0},
      {"memory_used_bytes", "--used", 0},
      {"kv_cache_bytes", "--kv-cache", 0},
      {"num_blocks", "--num-blocks", 0},
      {"host_cache_bytes", "--host-cache", 0},
      {"host_num_blocks", "--host-blocks", 0},
      {"tp_size", "--tp", 0},
      {"tp_rank", "--tp-rank", 0},
      {"block_size", "--block-size", 0},
      {"kv_dtype", "--kv-dtype", 0},
      {"max_model_len", "--max-model-len", 1},
      {"sliding_window", "--window", 1},
      {"layer_windows", "--layer-windows", 1},
      {"max_num_seqs", "--max-num-seqs", 0},
      {"num_state_checkpoints", "--num-checkpoints", 0},
      {"state_checkpoint_policy", "--state-checkpoints", 0},
      {"state_checkpoint_interval", "--state-checkpoints every:K", 0},
  };
  const char *names[sizeof all / sizeof all[0]][2];
  size_t n = 0;
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!all[i].from_config || (o->seen != NULL && flag_seen(o->seen, all[i].flag + 2)))
      names[n][0] = all[i].field, names[n][1] = all[i].flag, n++;
  return cli_in_flag_terms(msg, (const char *const(*)[2])names, n, buf, cap);
}

/* pkv_profile and the printing; an exit code. */
static int run_profile(const profile_opts *o, const pkv_engine_params *p) {
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  pkv_status s = pkv_profile(p, &b);
  char error[512];
  snprintf(error, sizeof error, "%s", s == PKV_OK ? "" : pkv_last_error());
  if (s == PKV_ERR_NO_DEVICE) {
    fprintf(
        stderr,
        "pkv profile: --device %s: no usable CUDA GPU was found (no GPU or driver on this machine, or a pkv "
        "built without CUDA). --device cpu profiles host memory; --device auto takes a GPU when there is "
        "one; --memory SIZE with --device auto plans for a GPU this machine does not have\n",
        o->device ? o->device : "cuda");
    return CLI_EXIT_FAIL;
  }
  const int fixed_short =
      s == PKV_ERR_INVALID_ARGUMENT && b.shortfall_bytes && b.source == PKV_BUDGET_FIXED_BLOCKS;
  char said[600];
  in_flag_terms(o, error, said, sizeof said);
  if (s != PKV_OK && s != PKV_ERR_OUT_OF_MEMORY && !fixed_short) {
    fprintf(stderr, "pkv profile: %s\n", said);
    return CLI_EXIT_FAIL;
  }
  if (o->json)
    profile_print_json(o->config, p, &b, s, said);
  else
    profile_print_table(o->config, p, &b);
  return s == PKV_OK ? CLI_EXIT_OK : budget_refusal(p, &b);
}

int cmd_profile(int argc, char **argv) {
  profile_opts o = {0};
  cli_flag flags[] = {
      {"config", CLI_STRING, &o.config, "PATH", "Hugging Face config.json of the model (required)",
       0},
      {"memory", CLI_SIZE, &o.memory, "SIZE", "total device memory to plan for (default: measure)",
       0},
      {"utilization", CLI_DOUBLE, &o.utilization, "F",
       "fraction of total memory pkv may plan with (0.9)", 0},
      {"reserve", CLI_SIZE, &o.reserve, "SIZE", "activation peak and workspaces to keep free (0)",
       0},
      {"used", CLI_SIZE, &o.used, "SIZE",
       "memory used besides pkv: the weights and the rest (0: not subtracted)", 0},
      {"kv-cache", CLI_SIZE, &o.kv_cache, "SIZE", "absolute KV budget, overrides the formula", 0},
      {"num-blocks", CLI_U32, &o.num_blocks, "N", "fixed pool size in blocks, overrides the budget",
       0},
      {"host-cache", CLI_SIZE, &o.host_cache, "SIZE", "host tier in host memory (default: none)",
       0},
      {"host-blocks", CLI_U32, &o.host_blocks, "N", "host tier in blocks, overrides --host-cache",
       0},
      {"tp", CLI_U32, &o.tp, "N", "tensor-parallel ranks (1)", 0},
      {"tp-rank", CLI_U32, &o.tp_rank, "N", "this rank (0)", 0},
      {"block-size", CLI_U32, &o.block_size, "N", "tokens per block (16)", 0},
      {"dtype", CLI_STRING, &o.dtype, "T", "model dtype: bf16, f16 or f32 (default: the config's)",
       0},
      {"kv-dtype", CLI_STRING, &o.variants.kv_dtype, "T",
       "KV cache dtype: the model's (default), fp8_e4m3 (or fp8) or fp8_e5m2", 0},
      {"window", CLI_U32, &o.variants.window, "N",
       "sliding window of N keys in every layer; 0 = full attention", 0},
      {"layer-windows", CLI_STRING, &o.variants.layer_windows, "LIST",
       "each layer's window: 1024x5,0,... (see above)", 0},
      {"max-model-len", CLI_U32, &o.max_model_len, "N", "longest sequence (default: the config's)",
       0},
      {"max-num-seqs", CLI_U32, &o.max_num_seqs, "N",
       "sequences a step runs (256): a model with STATE layers keeps a state for each", 0},
      {"state-checkpoints", CLI_STRING, &o.checkpoints, "P",
       "prompt-end (default), every:K (blocks) or none: where sequences leave state checkpoints",
       0},
      {"num-checkpoints", CLI_U32, &o.num_checkpoints, "N",
       "state checkpoint slots (default: --max-num-seqs; none with --state-checkpoints none)", 0},
      {"device", CLI_STRING, &o.device, "D", "auto, cpu or cuda (auto)", 0},
      {"json", CLI_FLAG, &o.json, NULL, "print JSON instead of a table", 0},
  };
  cli_command cmd = {
      "profile", "profile --config config.json [--memory 80GiB] [options]",
      "Prints how many KV blocks fit in a memory budget, and every term of it. The model's weights\n"
      "are not subtracted unless --used gives them. SIZEs are binary: 80G = 80GiB = 80 x 2^30\n"
      "bytes (K, M, G, T or KiB, MiB, GiB, TiB); KB, MB, GB and TB are refused as ambiguous.\n"
      "A windowed model (Gemma 2/3, gpt-oss, Mistral) is printed per KV group and as a whole.\n"
      "\n"
      "Attention variants: --kv-dtype fp8_e4m3 (or fp8_e5m2) keeps K and V in one byte per\n"
      "element, scaled per layer and kv head. Sliding windows come from the config (layer_types,\n"
      "sliding_window_pattern, model_type gemma2, use_sliding_window, sliding_window) unless\n"
      "--window N (every layer; 0 = full attention everywhere) or --layer-windows LIST sets\n"
      "them. LIST is comma-separated windows (0 = full attention), each W or WxK (W for K layers\n"
      "in a row); it names every layer, or ends in ,... to repeat over the layers:\n"
      "  --layer-windows 1024x5,0,...   Gemma 3: 5 layers of 1024 keys, 1 full, and again\n"
      "  --layer-windows 128,0,...      gpt-oss: windowed and full layers alternate\n"
      "  --layer-windows 0x31,4096      31 full layers, then one of 4096 keys\n"
      "With fp8 or windows it also prints the KV groups and what they gain against the same\n"
      "model with model-dtype KV and full attention in the same memory.\n"
      "\n"
      "Hybrid models (Qwen3-Next / 3.5, Kimi Linear, Nemotron-H, Granite 4.0-H, Jamba): each\n"
      "recurrent layer keeps a fixed-size state per sequence, not K and V. The budget holds\n"
      "--max-num-seqs working states and --num-checkpoints checkpoints first, then KV blocks:\n"
      "  N sequences' states (X) + C checkpoints (Y) + M blocks of KV (Z tokens)\n"
      "\n"
      "examples:\n"
      "  pkv profile --config tools/configs/llama-3-8b.json --memory 80GiB --tp 1\n"
      "  pkv profile --config tools/configs/gemma-3-27b.json --memory 80GiB --kv-dtype fp8_e4m3",
      flags, sizeof flags / sizeof flags[0]};
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_PARSED) return rc == CLI_HELP_SHOWN ? CLI_EXIT_OK : CLI_EXIT_USAGE;
  if (o.config == NULL) {
    fprintf(stderr,
            "pkv profile: --config is required\nrun 'pkv profile --help' for the options\n");
    return CLI_EXIT_USAGE;
  }
  /* In pkv_engine_params 0 means "measure" and "use the formula": as a flag it is a mistake. */
  if (flag_seen(&cmd, "memory") && o.memory == 0) {
    fprintf(stderr,
            "pkv profile: --memory 0: the total memory must be > 0 bytes (leave --memory out "
            "to measure the device)\n");
    return CLI_EXIT_USAGE;
  }
  if ((flag_seen(&cmd, "host-cache") && o.host_cache == 0) ||
      (flag_seen(&cmd, "host-blocks") && o.host_blocks == 0)) {
    fprintf(stderr,
            "pkv profile: a host tier of 0: leave --host-cache and --host-blocks out for none\n");
    return CLI_EXIT_USAGE;
  }
  if (flag_seen(&cmd, "kv-cache") && o.kv_cache == 0) {
    fprintf(stderr,
            "pkv profile: --kv-cache 0: the KV budget must be > 0 bytes (leave --kv-cache out "
            "to use total x utilization - used - reserve)\n");
    return CLI_EXIT_USAGE;
  }
  o.variants.window_seen = flag_seen(&cmd, "window");
  o.seen = &cmd;
  pkv_engine_params p;
  uint32_t *windows = NULL;     /* p.layer_windows' array and */
  pkv_layer_spec *specs = NULL; /* p.layer_specs': freed at every return below */
  rc = build_params(&o, &cmd, &p, &windows, &specs);
  if (rc == CLI_EXIT_OK) rc = run_profile(&o, &p);
  free(windows);
  free(specs);
  return rc;
}
