/*
 * fuzz_hf_config.c - libFuzzer harness for pkv_engine_params_from_hf_config: the input bytes are
 * the config text (exactly size bytes, not NUL-terminated: ASan sees any read past the end).
 *
 * A refusal is PKV_ERR_INVALID_ARGUMENT (or PKV_ERR_UNSUPPORTED: an attention pkv cannot hold,
 * named) with a message and p unchanged; a success fills only the model-shape fields (the MLA
 * layout consistent: one latent of kv_lora_rank + qk_rope_head_dim values), with values
 * pkv_profile accepts or refuses cleanly, and never comes from a text holding a NUL byte.
 * The same text through pkv_engine_params_from_hf_config_layers (since 0.5): refused likewise
 * with nothing changed, or read whenever the flat call reads it, each layer's spec consistent (a
 * SHARED layer reads an earlier cached layer of its own window, FULL has no window, heads divide
 * the q heads; since 0.6 a STATE layer sets no attention field and has a state), and pkv_profile
 * of the result accepting or refusing it cleanly.
 */
#include "fuzz_util.h"

enum { FZ_MAX_SPECS = 256 };

/* The per-layer call on text; flat_ok: the flat call read it. */
static void check_layers(const char *text, size_t size, const pkv_engine_params *start,
                         int flat_ok) {
  static pkv_layer_spec specs[FZ_MAX_SPECS], before_specs[FZ_MAX_SPECS];
  pkv_engine_params p = *start;
  memset(specs, 0x5a, sizeof specs);
  memcpy(before_specs, specs, sizeof specs);
  uint32_t n = 0;
  pkv_status s = pkv_engine_params_from_hf_config_layers(&p, text, size, specs, sizeof *specs,
                                                         FZ_MAX_SPECS, &n);
  if (s != PKV_OK) {
    FZ_CHECK(s == PKV_ERR_INVALID_ARGUMENT || s == PKV_ERR_UNSUPPORTED, "layers: status %d", s);
    FZ_CHECK(pkv_last_error()[0] != '\0', "layers: no message");
    FZ_CHECK(memcmp(&p, start, sizeof p) == 0, "layers: params changed by a refused config");
    FZ_CHECK(memcmp(specs, before_specs, sizeof specs) == 0, "layers: specs changed");
    FZ_CHECK(!flat_ok || n > FZ_MAX_SPECS, "layers: refused a config the flat call reads: %s",
             pkv_last_error());
    return;
  }
  FZ_CHECK(n == p.num_layers && n <= FZ_MAX_SPECS, "layers: %u specs of %u layers", n,
           p.num_layers);
  FZ_CHECK(p.layer_specs == NULL || p.layer_specs == specs, "layers: layer_specs elsewhere");
  for (uint32_t l = 0; l < n; l++) {
    const pkv_layer_spec *x = &specs[l];
    FZ_CHECK(x->kind <= PKV_LAYER_STATE && x->attention <= PKV_ATTENTION_CHUNKED,
             "layer %u: kind %u attention %u", l, x->kind, x->attention);
    if (x->kind == PKV_LAYER_STATE) { /* a recurrent layer: no attention field, a state */
      FZ_CHECK(x->attention == 0 && x->window == 0 && x->num_kv_heads == 0 && x->head_dim == 0 &&
                   x->softmax_scale == 0,
               "layer %u: a STATE layer with attention fields", l);
      FZ_CHECK(x->state_shape[PKV_MAX_STATE_DIMS] > 0, "layer %u: no recurrent state", l);
      continue;
    }
    FZ_CHECK((x->attention == PKV_ATTENTION_FULL) == (x->window == 0), "layer %u: window %u", l,
             x->window);
    FZ_CHECK(x->num_kv_heads > 0 && p.num_q_heads % x->num_kv_heads == 0 && x->head_dim > 0,
             "layer %u: %u kv heads x %u", l, x->num_kv_heads, x->head_dim);
    FZ_CHECK(x->softmax_scale > 0 && x->softmax_scale < 1e30f, "layer %u: scale", l);
    if (x->kind == PKV_LAYER_SHARED) {
      const pkv_layer_spec *src = &specs[x->source_layer];
      FZ_CHECK(x->source_layer < l && src->kind != PKV_LAYER_SHARED &&
                   src->attention == x->attention && src->window == x->window,
               "layer %u: reads layer %u", l, x->source_layer);
    }
  }
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  s = pkv_profile(&p, &b);
  FZ_CHECK(s == PKV_OK || s == PKV_ERR_INVALID_ARGUMENT || s == PKV_ERR_OUT_OF_MEMORY ||
               s == PKV_ERR_UNSUPPORTED,
           "profile of a config read per layer: %d", s);
}

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
  check_layers(text, size, &before, s == PKV_OK);
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
