/*
 * profile_json.c - `pkv profile --json`: every term of the budget as JSON, enums as words (the
 * device, the budget's source, dtypes, the layout; the KV groups' kinds are variants_print.c's).
 */
#include <stdio.h>

#include <pkv/pkv.h>

#include "cli.h"
#include "profile.h"
#include "variants.h"

/* pkv_kv_budget.source as a word, for --json. */
static const char *source_name(uint32_t source) {
  switch (source) {
    case PKV_BUDGET_FROM_BYTE_CAP:
      return "kv_cache";
    case PKV_BUDGET_FIXED_BLOCKS:
      return "num_blocks";
    default:
      return "utilization";
  }
}

static void json_u64(const char *name, uint64_t v, int last) {
  printf("    \"%s\": %llu%s\n", name, (unsigned long long)v, last ? "" : ",");
}

void profile_print_json(const char *config, const pkv_engine_params *p, const pkv_kv_budget *b,
                        pkv_status s, const char *error) {
  printf("{\n  \"config\": ");
  cli_json_string(stdout, config);
  printf(",\n  \"status\": ");
  cli_json_string(stdout, s == PKV_OK ? "ok" : pkv_status_string(s));
  printf(",\n  \"error\": ");
  cli_json_string(stdout, error);
  printf(",\n  \"model\": {\"num_layers\": %u, \"num_q_heads\": %u, \"num_kv_heads\": %u, "
         "\"head_dim\": %u, \"dtype\": \"%s\", \"max_model_len\": %u, \"block_size\": %u, "
         "\"tp_size\": %u, \"tp_rank\": %u, \"sliding_window\": %u, \"layer_windows\": %s},\n",
         p->num_layers, p->num_q_heads, p->num_kv_heads, p->head_dim, variants_dtype_name(p->dtype),
         p->max_model_len, p->block_size, p->tp_size, p->tp_rank, p->sliding_window,
         p->layer_windows ? "true" : "false");
  printf("  \"budget\": {\n    \"device\": \"%s\",\n    \"source\": \"%s\",\n",
         profile_device_name(b->device), source_name(b->source));
  printf("    \"weights_subtracted\": %s,\n", p->memory_used_bytes ? "true" : "false");
  json_u64("bytes_per_token_all_groups", b->bytes_per_token * b->num_kv_groups, 0);
  json_u64("max_tokens_all_groups", b->max_tokens / (b->num_kv_groups ? b->num_kv_groups : 1), 0);
  json_u64("kv_heads_per_rank", b->kv_heads_per_rank, 0);
  printf("    \"kv_layout\": \"%s\",\n", p->kv_layout == PKV_KV_LAYOUT_MLA ? "mla" : "heads");
  json_u64("kv_lora_rank", p->kv_lora_rank, 0);
  json_u64("qk_rope_head_dim", p->qk_rope_head_dim, 0);
  json_u64("block_bytes", b->block_bytes, 0);
  json_u64("bytes_per_token", b->bytes_per_token, 0);
  json_u64("total_bytes", b->total_bytes, 0);
  json_u64("used_bytes", b->used_bytes, 0);
  json_u64("reserve_bytes", b->reserve_bytes, 0);
  printf("    \"memory_utilization\": %.6g,\n", b->memory_utilization);
  json_u64("budget_bytes", b->budget_bytes, 0);
  json_u64("num_blocks", b->num_blocks, 0);
  json_u64("pool_bytes", b->pool_bytes, 0);
  json_u64("max_tokens", b->max_tokens, 0);
  json_u64("blocks_per_max_seq", b->blocks_per_max_seq, 0);
  json_u64("max_seqs_at_max_model_len", b->max_seqs_at_max_model_len, 0);
  json_u64("shortfall_bytes", b->shortfall_bytes, 0);
  json_u64("host_num_blocks", b->host_num_blocks, 0);
  json_u64("host_pool_bytes", b->host_pool_bytes, 0);
  json_u64("host_total_bytes", b->host_total_bytes, 0);
  json_u64("host_available_bytes", b->host_available_bytes, 0);
  printf("    \"kv_dtype\": \"%s\",\n", variants_dtype_name(b->kv_dtype));
  json_u64("kv_dtype_bytes", variants_dtype_bytes(b->kv_dtype), 0);
  json_u64("kv_scale_bytes", b->kv_scale_bytes, 0);
  json_u64("num_kv_groups", b->num_kv_groups, 0);
  json_u64("group_layers", b->group_layers, 0);
  json_u64("padded_layers", b->padded_layers, 0);
  /* recurrent state (DESIGN.md §13): taken from the budget before the blocks */
  printf("    \"state_checkpoint_policy\": \"%s\",\n",
         p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_NONE    ? "none"
         : p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY ? "every"
                                                                    : "prompt_end");
  json_u64("state_checkpoint_interval", p->state_checkpoint_interval, 0);
  json_u64("num_state_layers", b->num_state_layers, 0);
  json_u64("num_state_slots", b->num_state_slots, 0);
  json_u64("num_state_checkpoints", b->num_state_checkpoints, 0);
  json_u64("state_bytes_per_seq", b->state_bytes_per_seq, 0);
  json_u64("state_pool_bytes", b->state_pool_bytes, 0);
  json_u64("num_host_state_slots", b->num_host_state_slots, 0);
  json_u64("host_state_bytes", b->host_state_bytes, 1);
  printf("  }");
  profile_indexer_json(p, b);
  variants_print_json(p, b);
  printf("\n}\n");
}
