/*
 * profile_table.c - `pkv profile`'s table: the model, every term of the budget (DESIGN.md §5) with
 * its formula, the KV groups (variants_print.c, or profile_layers.c for a model described per
 * layer) and the host tier.
 */
#include <stdio.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "profile.h"
#include "variants.h"

static const char *dtype_name(int32_t d) { return variants_dtype_name(d); }

/* One row: name, human size, exact bytes, a note. */
static void row_bytes(const char *name, uint64_t v, const char *note) {
  char h[32];
  printf("  %-26s %12s %16llu   %s\n", name, cli_format_size(v, h, sizeof h), (unsigned long long)v,
         note);
}

static void row_count(const char *name, uint64_t v, const char *note) {
  printf("  %-26s %12llu %16s   %s\n", name, (unsigned long long)v, "", note);
}

static const char *source_note(uint32_t source) {
  switch (source) {
    case PKV_BUDGET_FROM_BYTE_CAP:
      return "--kv-cache: an absolute byte cap";
    case PKV_BUDGET_FIXED_BLOCKS:
      return "--num-blocks: a fixed pool";
    default:
      return "total x utilization - used - reserve";
  }
}

static const char *checkpoint_policy(const pkv_engine_params *p, char *buf, size_t cap) {
  if (p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_NONE)
    snprintf(buf, cap, "--state-checkpoints none");
  else if (p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY)
    snprintf(buf, cap, "--state-checkpoints every:%u (blocks)", p->state_checkpoint_interval);
  else
    snprintf(buf, cap, "--state-checkpoints prompt-end");
  return buf;
}

/* The state slots' rows (DESIGN.md §13): taken from the budget before the blocks. */
static void state_rows(const pkv_engine_params *p, const pkv_kv_budget *b) {
  char note[160], policy[64];
  snprintf(note, sizeof note, "%u STATE layers' parts, each 256-byte aligned (layers above)",
           b->num_state_layers);
  row_bytes("state bytes per sequence", b->state_bytes_per_seq, note);
  snprintf(note, sizeof note, "%u working states (--max-num-seqs) x state bytes",
           b->num_state_slots);
  row_bytes("- states", (uint64_t)b->num_state_slots * b->state_bytes_per_seq, note);
  snprintf(note, sizeof note, "%u checkpoints (%s%s) x state bytes", b->num_state_checkpoints,
           checkpoint_policy(p, policy, sizeof policy),
           p->num_state_checkpoints ? ", --num-checkpoints" : "");
  row_bytes("- checkpoints", (uint64_t)b->num_state_checkpoints * b->state_bytes_per_seq, note);
}

/* "N sequences' states (X) + C checkpoints (Y) + M blocks of KV (Z tokens)": the budget's split. */
static void state_summary(const pkv_kv_budget *b) {
  char s[32], c[32], k[32];
  const uint32_t groups = b->num_kv_groups ? b->num_kv_groups : 1;
  printf("\n  memory     %u sequences' states (%s) + %u checkpoints (%s) + %llu blocks of KV "
         "(%s, %llu tokens)\n",
         b->num_state_slots,
         cli_format_size((uint64_t)b->num_state_slots * b->state_bytes_per_seq, s, sizeof s),
         b->num_state_checkpoints,
         cli_format_size((uint64_t)b->num_state_checkpoints * b->state_bytes_per_seq, c, sizeof c),
         (unsigned long long)b->num_blocks, cli_format_size(b->pool_bytes, k, sizeof k),
         (unsigned long long)(b->max_tokens / groups));
}

void profile_print_table(const char *config, const pkv_engine_params *p, const pkv_kv_budget *b) {
  char note[160];
  printf("pkv profile: %s\n", config);
  const int mla = p->kv_layout == PKV_KV_LAYOUT_MLA;
  if (mla)
    printf(
        "  model      %u layers, %u q heads, multi-head latent attention, %s, max_model_len %u%s\n"
        "  latent     kv_lora_rank %u + qk_rope_head_dim %u = %u values a token a layer, for every head\n"
        "             (V is a view of the latent: no V is cached); softmax scale %.4g%s\n",
        p->num_layers, p->num_q_heads, dtype_name(p->dtype), p->max_model_len,
        p->max_model_len == 0 ? " (no limit)" : "", p->kv_lora_rank, p->qk_rope_head_dim,
        p->head_dim, (double)p->softmax_scale,
        p->softmax_scale > 0 ? " (the model's)"
                             : " (not in config.json: give it to pkv_engine_create)");
  if (mla)
    profile_print_indexer_model(p, b);
  else if (p->layer_specs != NULL)
    printf("  model      %u layers, %u q heads, %s, max_model_len %u%s; its layers differ:\n",
           p->num_layers, p->num_q_heads, dtype_name(p->dtype), p->max_model_len,
           p->max_model_len == 0 ? " (no limit)" : "");
  else
    printf("  model      %u layers, %u q heads, %u kv heads, head_dim %u, %s, max_model_len %u%s\n",
           p->num_layers, p->num_q_heads, p->num_kv_heads, p->head_dim, dtype_name(p->dtype),
           p->max_model_len, p->max_model_len == 0 ? " (no limit)" : "");
  if (p->layer_specs != NULL) profile_print_layers(p);
  variants_print_model(p, b);
  if (mla)
    printf("  parallel   tp %u, rank %u: every rank holds the whole latent\n", p->tp_size,
           p->tp_rank);
  else
    printf("  parallel   tp %u, rank %u: %u kv heads per rank\n", p->tp_size, p->tp_rank,
           b->kv_heads_per_rank);
  printf("  device     %s%s, %s\n", profile_device_name(b->device),
         p->device == PKV_DEVICE_AUTO ? " (auto)" : "",
         p->memory_total_bytes != 0 ? "total memory as given (--memory)" : "total memory measured");
  if (p->memory_used_bytes == 0)
    printf(
        "  weights    not subtracted: give --used SIZE (the weights' bytes and whatever else the device holds)%s\n",
        p->memory_total_bytes != 0 ? "" : "; what is loaded now is measured as used");
  else
    printf(
        "  weights    --used: %llu bytes subtracted (the weights and whatever else the device holds)\n",
        (unsigned long long)p->memory_used_bytes);
  printf("\n");
  printf("  %-26s %12s %16s\n", "term", "size", "bytes");
  if (p->layer_specs != NULL)
    snprintf(note, sizeof note, "one page: every group's block, %u tokens (KV groups below)",
             p->block_size);
  else if (mla)
    snprintf(note, sizeof note, "1 (the latent) x %u layers x %u tokens x %u x %u B",
             b->group_layers, p->block_size, p->head_dim, variants_dtype_bytes(b->kv_dtype));
  else
    snprintf(note, sizeof note, "2 (K,V) x %u layers%s x %u tokens x %u heads x %u x %u B",
             b->group_layers, b->num_kv_groups > 1 ? " (a group's)" : "", p->block_size,
             b->kv_heads_per_rank, p->head_dim, variants_dtype_bytes(b->kv_dtype));
  row_bytes("block bytes", b->block_bytes, note);
  const uint32_t groups = b->num_kv_groups, full = variants_full_groups(p);
  if (groups > 1) {
    /* A token inside every window is held by every group, each in blocks of group_layers layers. */
    snprintf(note, sizeof note, "%u KV groups x %llu (a group's: block bytes / block size)", groups,
             (unsigned long long)b->bytes_per_token);
    row_bytes("bytes per token", b->bytes_per_token * groups, note);
    snprintf(note, sizeof note, "%u full-attention group%s x %llu: a token every window has passed",
             full, full == 1 ? "" : "s", (unsigned long long)b->bytes_per_token);
    row_bytes("  past the windows", b->bytes_per_token * full, note);
  } else {
    row_bytes("bytes per token", b->bytes_per_token, "block bytes / block size");
  }
  profile_print_indexer_rows(p, b);
  row_bytes("total memory", b->total_bytes, p->memory_total_bytes != 0 ? "--memory" : "measured");
  printf("  %-26s %12.3f %16s   %s\n", "x memory utilization", b->memory_utilization, "",
         "--utilization");
  row_bytes("- used", b->used_bytes, "measured in use + --used");
  row_bytes("- reserve", b->reserve_bytes, "--reserve: activations, workspaces");
  row_bytes("= KV budget", b->budget_bytes, source_note(b->source));
  if (b->kv_scale_bytes != 0) {
    snprintf(note, sizeof note, "fp8 scales: %s x %u layers x %u heads x 4 B",
             mla ? "1 (the latent)" : "2 (K,V)",
             p->layer_specs ? b->num_cached_layers : p->num_layers, b->kv_heads_per_rank);
    row_bytes("- kv scales", b->kv_scale_bytes, note);
  }
  if (b->state_pool_bytes) state_rows(p, b);
  snprintf(note, sizeof note, "%s / block bytes%s",
           b->state_pool_bytes ? "(budget - the above)"
           : b->kv_scale_bytes ? "(budget - kv scales)"
                               : "budget",
           b->source == PKV_BUDGET_FIXED_BLOCKS ? " (here: fixed)" : "");
  row_count("blocks", b->num_blocks, note);
  row_bytes("pool bytes", b->pool_bytes, "blocks x block bytes");
  if (groups > 1) {
    snprintf(note, sizeof note, "blocks x %u tokens / %u KV groups: each token in every window",
             p->block_size, groups);
    row_count("max tokens", b->max_tokens / groups, note);
  } else {
    snprintf(note, sizeof note, "blocks x %u tokens per block", p->block_size);
    row_count("max tokens", b->max_tokens, note);
  }
  if (b->num_kv_groups > 1)
    snprintf(note, sizeof note, "summed over the %u KV groups below", b->num_kv_groups);
  else if (p->sliding_window != 0)
    snprintf(note, sizeof note, "window %u: min(ceil(w / %u) + 1, ceil(max_model_len %u / %u))",
             p->sliding_window, p->block_size, p->max_model_len, p->block_size);
  else
    snprintf(note, sizeof note, "ceil(max_model_len %u / block size %u)", p->max_model_len,
             p->block_size);
  row_count("blocks per max sequence", b->blocks_per_max_seq,
            p->max_model_len       ? note
            : b->num_kv_groups > 1 ? "no max_model_len: 1 per KV group"
                                   : "no max_model_len");
  if (p->max_model_len)
    row_bytes("bytes per max sequence", b->blocks_per_max_seq * b->block_bytes,
              "blocks per max sequence x block bytes");
  row_count("max seqs at max_model_len", b->max_seqs_at_max_model_len,
            "blocks / blocks per max sequence");
  if (b->shortfall_bytes != 0) row_bytes("shortfall", b->shortfall_bytes, "more KV memory needed");
  if (b->state_pool_bytes) state_summary(b);
  if (p->layer_specs != NULL) profile_print_layer_groups(p, b);
  variants_print_table(p, b);
  if (b->host_num_blocks == 0) return;
  printf("\n  host tier (swapped-out sequences, evicted prefix blocks)\n");
  row_bytes("host block bytes", b->block_bytes, "as block bytes");
  row_count("host blocks", b->host_num_blocks,
            p->host_num_blocks ? "--host-blocks" : "--host-cache / block bytes");
  row_bytes("host pool bytes", b->host_pool_bytes,
            b->device == PKV_DEVICE_CUDA ? "host blocks x block bytes, pinned"
                                         : "host blocks x block bytes");
  if (b->num_host_state_slots) { /* DESIGN.md §13: swapped-out states, offloaded checkpoints */
    row_count("host state slots", b->num_host_state_slots,
              b->num_host_state_slots > b->num_state_slots
                  ? "max_num_seqs (swap) + checkpoints (offload)"
                  : "max_num_seqs (swap)");
    row_bytes("host state bytes", b->host_state_bytes,
              b->device == PKV_DEVICE_CUDA ? "host state slots x state bytes, pinned"
                                           : "host state slots x state bytes");
  }
  if (b->host_total_bytes == 0) {
    printf("  %-26s %12s %16s   %s\n", "host memory", "-", "", "not measured (--memory plans)");
    return;
  }
  row_bytes("host memory", b->host_total_bytes, "measured (MemTotal)");
  row_bytes("host memory available", b->host_available_bytes,
            b->host_state_bytes ? "measured (MemAvailable): >= host pool + state bytes"
                                : "measured (MemAvailable): >= host pool bytes");
}
