/*
 * fuzz_api.c - libFuzzer harness over the whole engine API: the input bytes create a small CPU
 * engine (fuzzed shape, paging, scheduler and event fields, a host tier or none; the pool and
 * the host tier bounded through pkv_profile before anything is allocated) and then drive it with
 * a program of calls (fuzz_ops.h) on valid and invalid sequence ids, tokens, salts, buffers and
 * batch handles.
 *
 * After every call: pkv_engine_check(e) == PKV_OK; a failed call left a message and changed
 * nothing observable (stats and every live sequence's info, table and tokens); a successful one
 * left a consistent state (fz_consistent).
 */
#include <pthread.h>
#include <stdlib.h>

#include "fuzz_ops.h"

/* A store of the harness's own (PKV_STORE_CALLBACK), called from pkv's writer and fetcher
 * threads: a bounded map that also misbehaves on purpose - every 5th value it returns has a
 * flipped byte and every 7th get fails - so the checks of every fetched value and the error
 * paths run; whatever it does, pkv_engine_check must hold and no call may fail for it. */
enum { FZ_STORE_CAP = 64 };
static struct {
  pthread_mutex_t mutex;
  pkv_store_key keys[FZ_STORE_CAP];
  unsigned char *values[FZ_STORE_CAP];
  uint64_t value_bytes;
  uint32_t n, gets, served;
} fz_store = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static int fz_store_get(void *user, const pkv_store_key *keys, uint32_t n, void *values,
                        uint64_t value_bytes, uint8_t *found, uint32_t timeout_ms, char *message,
                        uint32_t cap) {
  (void)user, (void)timeout_ms;
  pthread_mutex_lock(&fz_store.mutex);
  int rc = 0;
  if (++fz_store.gets % 7 == 0) {
    snprintf(message, cap, "the fuzzer's store fails this get");
    rc = 1;
  }
  for (uint32_t i = 0; i < n && rc == 0; i++) {
    found[i] = 0;
    for (uint32_t k = 0; k < fz_store.n; k++) {
      if (memcmp(fz_store.keys[k].bytes, keys[i].bytes, 32) != 0 ||
          fz_store.value_bytes != value_bytes)
        continue;
      unsigned char *out = (unsigned char *)values + i * value_bytes;
      memcpy(out, fz_store.values[k], value_bytes);
      if (++fz_store.served % 5 == 0) out[(fz_store.served * 131) % value_bytes] ^= 0x40;
      found[i] = 1;
    }
  }
  pthread_mutex_unlock(&fz_store.mutex);
  return rc;
}

static int fz_store_put(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
                        uint64_t value_bytes, char *message, uint32_t cap) {
  (void)user, (void)message, (void)cap;
  pthread_mutex_lock(&fz_store.mutex);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = 0;
    while (k < fz_store.n && memcmp(fz_store.keys[k].bytes, keys[i].bytes, 32) != 0) k++;
    if (k == fz_store.n) {
      if (fz_store.n == FZ_STORE_CAP)
        k = (uint32_t)(keys[i].bytes[0] % FZ_STORE_CAP); /* full: replace one */
      else
        fz_store.n++;
    }
    free(fz_store.values[k]);
    fz_store.keys[k] = keys[i];
    fz_store.values[k] = malloc(value_bytes);
    memcpy(fz_store.values[k], (const char *)values + i * value_bytes, value_bytes);
    fz_store.value_bytes = value_bytes;
  }
  pthread_mutex_unlock(&fz_store.mutex);
  return 0;
}

static void fz_store_clear(void) {
  for (uint32_t k = 0; k < FZ_STORE_CAP; k++) {
    free(fz_store.values[k]);
    fz_store.values[k] = NULL;
  }
  fz_store.n = fz_store.gets = fz_store.served = 0;
}

static pkv_store_callbacks fz_store_cb = {
    sizeof(pkv_store_callbacks), 0, NULL, NULL, fz_store_get, fz_store_put};
static pkv_store_params fz_store_params;

/* The largest pool a fuzzed engine may allocate. */
#define FZ_MAX_POOL_BYTES (4u << 20)

/* Sets one field of p to a raw fuzzed value: the validation paths. */
static void raw_field(fz_input *in, pkv_engine_params *p) {
  uint32_t v = fz_u32(in);
  switch (fz_pick(in, 26)) {
    case 0:
      p->num_layers = v;
      break;
    case 1:
      p->num_q_heads = v;
      break;
    case 2:
      p->num_kv_heads = v;
      break;
    case 3:
      p->head_dim = v;
      break;
    case 4:
      p->dtype = (int32_t)v;
      break;
    case 5:
      p->tp_size = v;
      break;
    case 6:
      p->tp_rank = v;
      break;
    case 7:
      p->block_size = v;
      break;
    case 8:
      p->num_blocks = v;
      break;
    case 9:
      p->device = (int32_t)v;
      break;
    case 10:
      p->num_threads = v;
      break;
    case 11:
      p->debug_flags = v;
      break;
    case 12:
      p->reserved0 = v;
      break;
    case 13:
      p->enable_prefix_caching = v;
      break;
    case 14:
      p->max_num_seqs = v;
      break;
    case 15:
      p->enable_kv_events = v;
      break;
    case 16:
      memcpy(&p->softmax_scale, &v, sizeof v);
      break;
    case 17:
      p->memory_utilization = (double)(int32_t)v / 1e9;
      break;
    case 18:
      p->struct_size = v % 512;
      break;
    case 19:
      p->host_num_blocks = v;
      break;
    case 20:
      p->host_cache_bytes = fz_u64(in);
      break;
    case 21:
      p->reserved1 = v;
      break;
    case 22:
      p->host_offload = v;
      break;
    case 23:
      p->kv_dtype = (int32_t)v;
      break;
    case 24:
      p->sliding_window = v;
      break;
    default:
      p->max_num_batched_tokens = v;
      break;
  }
}

static uint32_t fz_layer_windows[2];
static pkv_layer_spec fz_specs[3];

/* With STATE layers (0.6): a checkpoint policy (now and then one no rule allows), its interval
 * (0 or past the limit now and then) and slots; the host tier drawn before mostly kept, so
 * swap-outs move working states to host state slots (STATE_OUT) and back (STATE_IN) and, with
 * host_offload, checkpoints evicted for room go to host state slots and restore from there
 * (pkv_engine_check holds device and host checkpoints to their prefix nodes after every call).
 * The attention layers drawn stay as drawn (0.8: a host tier and the store hold every layout);
 * a store keeps checkpoints too, fetched into host state slots. */
static void fuzz_checkpoints(fz_input *in, pkv_engine_params *p) {
  p->state_checkpoint_policy = fz_pick(in, 8) == 0 ? fz_u32(in) : fz_pick(in, 3);
  const int every = p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY;
  p->state_checkpoint_interval = fz_pick(in, 8) == 0 ? fz_u32(in) : every ? 1 + fz_pick(in, 4) : 0;
  p->num_state_checkpoints = fz_pick(in, 5); /* 0: max_num_seqs; 1 or 2: evictions */
  if (fz_pick(in, 4) == 0) p->host_num_blocks = 0, p->host_cache_bytes = 0;
  if (fz_pick(in, 4) != 0) p->enable_prefix_caching = 1;
}

/* Per-layer specs (0.5): 2 or 3 layers of drawn kinds, heads, widths, K = V, windows or chunks,
 * sinks and caps, a SHARED last layer, STATE layers after the first (0.6: working state slots,
 * forks' state copies, checkpoints of a drawn policy), and now and then a field no rule allows. */
static void fuzz_specs(fz_input *in, pkv_engine_params *p) {
  int has_state = 0;
  p->num_layers = 2 + fz_pick(in, 2);
  for (uint32_t l = 0; l < p->num_layers; l++) {
    pkv_layer_spec *s = &fz_specs[l];
    memset(s, 0, sizeof *s);
    s->attention = fz_pick(in, 3);
    s->window = s->attention == PKV_ATTENTION_FULL ? 0 : 1 + fz_pick(in, 12);
    s->num_kv_heads = fz_pick(in, 3); /* 0: the engine's */
    s->head_dim = fz_pick(in, 2) ? 0 : 8 * (1 + fz_pick(in, 2));
    s->k_eq_v = fz_pick(in, 3) == 0;
    s->sinks = fz_pick(in, 8) == 0;
    s->logit_softcap = fz_pick(in, 4) == 0 ? 5.0f : 0.0f;
    if (l > 0 && fz_pick(in, 4) == 0) { /* a recurrent layer (0.6): one or two state parts */
      memset(s, 0, sizeof *s);
      s->kind = PKV_LAYER_STATE;
      s->state_dtype[1] = fz_pick(in, 3);
      s->state_shape[PKV_MAX_STATE_DIMS] = 1 + fz_pick(in, 8);
      s->state_shape[PKV_MAX_STATE_DIMS + 1] = 1 + fz_pick(in, 8);
      if (fz_pick(in, 2))
        s->state_dtype[0] = fz_pick(in, 3), s->state_shape[0] = 1 + fz_pick(in, 16);
      has_state = 1;
      continue;
    }
    if (l == p->num_layers - 1 && fz_pick(in, 3) == 0) { /* reads layer 0's cache */
      *s = fz_specs[0];
      s->kind = PKV_LAYER_SHARED;
      s->source_layer = 0;
    }
  }
  if (has_state) fuzz_checkpoints(in, p);
  if (fz_pick(in, 8) == 0) { /* one field no rule allows, or a rule's edge */
    uint32_t *fields = (uint32_t *)&fz_specs[fz_pick(in, p->num_layers)];
    fields[fz_pick(in, sizeof(pkv_layer_spec) / 4)] = fz_u32(in);
  }
  p->layer_specs = fz_specs;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

/* Sparse attention (0.7): an MLA cache whose every layer has one indexer (fp8 or bf16), a STATE
 * layer now and then (checkpoints of a drawn policy), the host tier drawn before kept (its pages
 * move whole: swap, offload, the store), now and then one layer without the indexer (0.8: its
 * unequal pages too) or a field no rule allows. */
static void fuzz_dsa(fz_input *in, pkv_engine_params *p) {
  p->kv_layout = PKV_KV_LAYOUT_MLA;
  p->num_kv_heads = 1;
  p->num_q_heads = 1 + fz_pick(in, 2);
  p->tp_size = 1, p->tp_rank = 0;
  p->kv_lora_rank = 8;
  p->qk_rope_head_dim = 8 * fz_pick(in, 2);
  p->head_dim = p->kv_lora_rank + p->qk_rope_head_dim;
  p->softmax_scale = 0.25f;
  p->num_layers = 2 + fz_pick(in, 2);
  const uint32_t dim = 8 * (1 + fz_pick(in, 2)), heads = 1 + fz_pick(in, 3);
  const uint32_t topk = 1 + fz_pick(in, 8);
  const uint32_t dtype = fz_pick(in, 2) ? PKV_DTYPE_BF16 : fz_pick(in, 2) ? PKV_DTYPE_FP8_E4M3 : 0;
  int has_state = 0;
  for (uint32_t l = 0; l < p->num_layers; l++) {
    pkv_layer_spec *s = &fz_specs[l];
    memset(s, 0, sizeof *s);
    if (l > 0 && fz_pick(in, 5) == 0) {
      s->kind = PKV_LAYER_STATE;
      s->state_shape[PKV_MAX_STATE_DIMS] = 1 + fz_pick(in, 8);
      has_state = 1;
      continue;
    }
    s->kind = PKV_LAYER_MLA;
    s->index_head_dim = dim, s->index_dtype = dtype, s->index_n_heads = heads;
    s->index_topk = topk;
  }
  if (has_state) {
    p->state_checkpoint_policy = fz_pick(in, 3);
    p->state_checkpoint_interval = p->state_checkpoint_policy == PKV_STATE_CHECKPOINT_EVERY;
    p->num_state_checkpoints = fz_pick(in, 3);
  }
  if (fz_pick(in, 8) == 0) fz_specs[fz_pick(in, p->num_layers)].index_head_dim = 0;
  if (fz_pick(in, 8) == 0) {
    uint32_t *fields = (uint32_t *)&fz_specs[fz_pick(in, p->num_layers)];
    fields[fz_pick(in, sizeof(pkv_layer_spec) / 4)] = fz_u32(in);
  }
  p->layer_specs = fz_specs;
  p->layer_spec_size = sizeof(pkv_layer_spec);
}

static void fuzz_params(fz_input *in, pkv_engine_params *p) {
  FZ_CHECK(pkv_engine_params_init(p, sizeof *p) == PKV_OK, "params_init");
  p->device = PKV_DEVICE_CPU;
  p->num_threads = 1;
  p->num_layers = 1 + fz_pick(in, 2);
  p->num_kv_heads = 1 + fz_pick(in, 2);
  p->num_q_heads = p->num_kv_heads * (1 + fz_pick(in, 2));
  static const uint32_t dims[] = {8, 16, 4, 8};
  p->head_dim = dims[fz_pick(in, 4)];
  p->dtype = (int32_t)fz_pick(in, 3);
  p->block_size = 1 + fz_pick(in, 8);
  p->num_blocks = 1 + fz_pick(in, 32);
  p->enable_prefix_caching = fz_pick(in, 4) != 0;
  p->hash_seed = fz_u8(in);
  p->debug_flags = fz_pick(in, 4) == 0 ? PKV_DEBUG_CONSTANT_HASH : 0;
  p->max_model_len = fz_pick(in, 3) == 0 ? fz_pick(in, 80) : 0;
  p->max_num_seqs = 1 + fz_pick(in, 8);
  p->max_num_batched_tokens = 1 + fz_pick(in, 64);
  p->enable_kv_events = fz_pick(in, 2);
  p->kv_events_capacity = fz_pick(in, 16);
  switch (fz_pick(in, 4)) { /* the host tier: a few blocks (swap NO_SPACE), bytes, or none */
    case 0:
      break;
    case 1:
      p->host_cache_bytes = fz_u32(in) % 65536;
      break;
    default:
      p->host_num_blocks = 1 + fz_pick(in, 12);
      break;
  }
  p->host_offload = fz_pick(in, 4) != 0; /* offload of evicted prefix blocks, mostly on */
  if (p->host_num_blocks && p->enable_prefix_caching && fz_pick(in, 3) == 0) { /* a store below */
    pkv_store_params_init(&fz_store_params, sizeof fz_store_params);
    fz_store_params.kind = PKV_STORE_CALLBACK;
    fz_store_params.callbacks = &fz_store_cb;
    fz_store_params.write_mode = fz_pick(in, 3);
    fz_store_params.write_queue_blocks = 1 + fz_pick(in, 8); /* small: drops happen */
    p->store = &fz_store_params;
  }
  switch (fz_pick(in, 8)) {
    case 0: /* the profiler sizes the pool from a byte cap */
      p->num_blocks = 0;
      p->kv_cache_bytes = fz_u32(in) % 65536;
      break;
    case 1:
      p->tp_size = 1 + fz_pick(in, 2);
      p->tp_rank = fz_pick(in, 3);
      break;
    case 2:
      raw_field(in, p);
      break;
    case 3:
      p->num_threads = 2;
      break; /* worker threads */
    case 4:  /* sliding windows (KV groups), with the host tier and store drawn above (0.8) */
      fz_layer_windows[0] = 1 + fz_pick(in, 12);
      fz_layer_windows[1] = fz_pick(in, 2) ? 0 : 1 + fz_pick(in, 12);
      p->num_layers = 2;
      if (fz_pick(in, 3) == 0)
        p->sliding_window = fz_layer_windows[0]; /* one window everywhere: one windowed group */
      else
        p->layer_windows = fz_layer_windows;
      break;
    case 5: /* fp8 KV */
      p->kv_dtype = PKV_DTYPE_FP8_E4M3 + (int32_t)fz_pick(in, 2);
      break;
    case 6: /* the cache per layer, with the host tier and store drawn above (0.8) */
      fuzz_specs(in, p);
      break;
    default:
      if (fz_pick(in, 2) == 0) fuzz_dsa(in, p); /* sparse attention's indexer (0.7) */
      break;
  }
  /* A raw field may have taken away what a store needs (prefix caching, a host tier, one rank:
   * an engine of one rank of several takes none, 0.10): pkv_profile does not look at the store,
   * pkv_engine_create refuses it, so the store goes too. */
  if (p->enable_prefix_caching != 1 || p->host_num_blocks == 0 || p->tp_size > 1 || p->pp_size > 1)
    p->store = NULL;
}

/* With STATE layers and a host tier the host state slots pkv_profile promised are there, one
 * per sequence at least (each may be swapped out); none without either. */
static void fuzz_host_state_slots(pkv_engine *e, const pkv_engine_params *p,
                                  const pkv_kv_budget *b) {
  struct pkv_pool_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  FZ_CHECK(pkv_pool_info(e, &info) == PKV_OK, "pool_info");
  /* a slot per sequence that may be swapped out, and per checkpoint offloaded or fetched */
  const int want = fz_has_state(p) && b->host_num_blocks > 0;
  const uint32_t ckpt = p->host_offload || p->store ? b->num_state_checkpoints : 0;
  FZ_CHECK(info.num_host_state_slots == b->num_host_state_slots &&
               (info.host_state_base != NULL) == (info.num_host_state_slots > 0) &&
               b->num_host_state_slots == (want ? p->max_num_seqs + ckpt : 0),
           "host state slots: %u in the pool, %u in the budget (%u sequences)",
           info.num_host_state_slots, b->num_host_state_slots, p->max_num_seqs);
}

/* Creates the engine when the fuzzed params describe a small enough one; NULL otherwise. A
 * refusal by pkv_profile must be a refusal by pkv_engine_create too, *out untouched. */
static pkv_engine *fuzz_engine(fz_input *in, pkv_engine_params *p) {
  fuzz_params(in, p);
  pkv_kv_budget b;
  memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  pkv_status ps = pkv_profile(p, &b);
  pkv_engine *e = (pkv_engine *)&b; /* sentinel: must stay as it is on failure */
  if (ps != PKV_OK) {
    pkv_status s = pkv_engine_create(p, &e);
    FZ_CHECK(s != PKV_OK && e == (pkv_engine *)&b, "profile said %d, create said %d", ps, s);
    FZ_CHECK(pkv_last_error()[0] != '\0', "no message");
    return NULL;
  }
  if (b.pool_bytes > FZ_MAX_POOL_BYTES || b.num_blocks > 4096 || p->num_threads > 2 ||
      b.host_pool_bytes > FZ_MAX_POOL_BYTES || b.host_num_blocks > 4096 || p->max_num_seqs > 64 ||
      (uint64_t)p->num_q_heads * p->head_dim > 4096)
    return NULL;
  pkv_status s = pkv_engine_create(p, &e);
  if (s != PKV_OK) {
    FZ_CHECK(e == (pkv_engine *)&b, "*out written on failure");
    FZ_CHECK(p->device != PKV_DEVICE_CPU, "create of a profiled CPU engine failed: %d", s);
    return NULL;
  }
  fuzz_host_state_slots(e, p, &b);
  pkv_engine_params got;
  memset(&got, 0, sizeof got);
  got.struct_size = sizeof got;
  FZ_CHECK(pkv_engine_params_get(e, &got) == PKV_OK, "params_get");
  FZ_CHECK(got.num_blocks == b.num_blocks && got.block_size == p->block_size, "effective params");
  FZ_CHECK(got.host_num_blocks == b.host_num_blocks, "host tier: %u blocks, the budget said %llu",
           got.host_num_blocks, (unsigned long long)b.host_num_blocks);
  return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_input in = {data, size};
  pkv_engine_params p;
  pkv_engine *e = fuzz_engine(&in, &p);
  if (!e) return 0;
  fz_world w;
  fz_world_init(&w, e, &p);
  for (int steps = 0; steps < 400 && in.n > 0; steps++) fz_op(&w, &in);
  fz_world_end(&w, fz_u8(&in) & 1);
  fz_store_clear();
  return 0;
}
