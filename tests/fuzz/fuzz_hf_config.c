/*
 * fuzz_hf_config.c - libFuzzer harness for pkv_engine_params_from_hf_config: the input bytes are
 * the config text (exactly size bytes, not NUL-terminated: ASan sees any read past the end).
 *
 * A refusal is PKV_ERR_INVALID_ARGUMENT (or PKV_ERR_UNSUPPORTED: an attention pkv cannot hold,
 * named) with a message and p unchanged; a success fills only the model-shape fields (the MLA
 * layout consistent: one latent of kv_lora_rank + qk_rope_head_dim values), with values
 * pkv_profile accepts or refuses cleanly, and never comes from a text holding a NUL byte.
 */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pkv_engine_params p, before;
  FZ_CHECK(pkv_engine_params_init(&p, sizeof p) == PKV_OK, "init");
  p.block_size = 8;
  p.num_blocks = 4;
  p.hash_seed = 7;
  p.memory_total_bytes = 1u << 30;
  memcpy(&before, &p, sizeof p);
  char *text = malloc(size ? size : 1);
  memcpy(text, data, size);
  pkv_status s = pkv_engine_params_from_hf_config(&p, text, size);
  free(text);
  if (s != PKV_OK) {
    FZ_CHECK(s == PKV_ERR_INVALID_ARGUMENT || s == PKV_ERR_UNSUPPORTED, "status %d", s);
    FZ_CHECK(pkv_last_error()[0] != '\0', "no message");
    FZ_CHECK(memcmp(&p, &before, sizeof p) == 0, "params changed by a refused config");
    return 0;
  }
  FZ_CHECK(memchr(data, 0, size) == NULL, "a config with a NUL byte accepted");
  FZ_CHECK(p.num_layers > 0 && p.num_q_heads > 0 && p.num_kv_heads > 0 && p.head_dim > 0,
           "a zero in the shape");
  FZ_CHECK(p.num_q_heads % p.num_kv_heads == 0, "kv heads do not divide q heads");
  FZ_CHECK(p.dtype >= PKV_DTYPE_F32 && p.dtype <= PKV_DTYPE_BF16, "dtype %d", p.dtype);
  FZ_CHECK(p.block_size == before.block_size && p.num_blocks == before.num_blocks &&
               p.hash_seed == before.hash_seed &&
               p.memory_total_bytes == before.memory_total_bytes &&
               p.struct_size == before.struct_size,
           "a non-shape field changed");
  if (p.kv_layout == PKV_KV_LAYOUT_MLA)
    FZ_CHECK(p.num_kv_heads == 1 && p.kv_lora_rank >= 1 &&
                 (uint64_t)p.kv_lora_rank + p.qk_rope_head_dim == p.head_dim,
             "an inconsistent MLA layout");
  else
    FZ_CHECK(p.kv_layout == PKV_KV_LAYOUT_HEADS && p.kv_lora_rank == 0 && p.qk_rope_head_dim == 0,
             "latent fields without the MLA layout");
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  s = pkv_profile(&p, &b);
  FZ_CHECK(s == PKV_OK || s == PKV_ERR_INVALID_ARGUMENT || s == PKV_ERR_OUT_OF_MEMORY,
           "profile of a parsed config: %d", s);
  return 0;
}
