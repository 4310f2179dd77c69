/*
 * pkv.h - the whole public ABI of libpkv, a paged KV-cache runtime for LLM inference.
 *
 * If it is not in this header, it is not API.
 *
 * Order: this quick start and the general rules; export macros, versions, statuses, constants;
 * the core API - engine parameters, the engine, sequences, step planning, compute, the scheduler;
 * then the advanced API - the config reader and KV groups, the KV profiler, stats and pool info,
 * preemption, swapping and rollback, KV events and their wire publisher, fp8 scales and the CUDA
 * stream, the canonical block hash, the store tier, store administration, diagnostics.
 *
 * Quick start: one step of a 2-layer model on the CPU. The host's model computes each layer's
 * q, k and v (zeros here); pkv keeps K and V in its paged cache and computes the attention.
 *
 *   #include <pkv/pkv.h>
 *   #include <stdio.h>
 *
 *   #define FAILED(call) ((call) != PKV_OK && fprintf(stderr, "%s: %s\n", #call, pkv_last_error()))
 *
 *   int main(void) {
 *     pkv_engine_params p;  // the defaults, then the model's shape and where the KV lives
 *     if (FAILED(pkv_engine_params_init(&p, sizeof p))) return 1;
 *     p.num_layers = 2, p.num_q_heads = 4, p.num_kv_heads = 2, p.head_dim = 64;
 *     p.dtype = PKV_DTYPE_F32, p.device = PKV_DEVICE_CPU, p.kv_cache_bytes = 64u << 20;
 *     pkv_engine *e;
 *     if (FAILED(pkv_engine_create(&p, &e))) return 1;
 *     const int32_t prompt[5] = {1, 2, 3, 4, 5};
 *     uint64_t seq;  // admitted: its KV blocks reserved (and any cached prefix reused)
 *     if (FAILED(pkv_allocate(e, prompt, 5, NULL, &seq, NULL))) return 1;
 *     pkv_batch *b;  // one forward step over the sequence's 5 new tokens
 *     if (FAILED(pkv_batch_begin(e, &seq, NULL, 1, &b))) return 1;
 *     static float q[5][4][64], k[5][2][64], v[5][2][64], out[5][4][64];
 *     for (uint32_t layer = 0; layer < p.num_layers; layer++)  // k, v stored; out written
 *       if (FAILED(pkv_attention(b, layer, q, k, v, out))) return 1;
 *     if (FAILED(pkv_batch_end(b))) return 1;  // computed: its full blocks are now cached
 *     if (FAILED(pkv_release(e, seq))) return 1;
 *     pkv_engine_destroy(e);
 *     puts("ok");
 *     return 0;
 *   }
 *
 * (A real host also destroys e on its error paths. The abi test quickstart compiles and runs
 * this program.)
 *
 * General rules (they hold for every function below unless its comment says otherwise):
 *  - Every function returns a pkv_status: PKV_OK (0) or a negative error. A failed call changes
 *    nothing (all-or-nothing) and leaves a message in pkv_last_error() (this thread) and, for
 *    calls on an engine or on one of its batches, in pkv_engine_last_error(e).
 *  - Every function may be called from any thread. Calls on one engine (and on its batches) are
 *    serialized inside pkv; different engines run in parallel.
 *  - Structs with a struct_size field are versioned: set struct_size = sizeof(the struct) (the
 *    *_init functions do), pkv reads and writes only the first struct_size bytes. New fields are
 *    only ever appended. A struct_size below the struct's size in 0.1.0 is refused
 *    (PKV_ERR_INVALID_ARGUMENT).
 *  - Sequence ids are never 0 and never reused within an engine. Token ids are any int32_t.
 *  - Arrays are pointer + count. Variable-size outputs go into caller buffers with a capacity; the
 *    size needed is always reported, and PKV_ERR_NO_SPACE is not used for a short buffer:
 *    PKV_ERR_INVALID_ARGUMENT is, with the needed size written to *out_len.
 *  - pkv never calls exit/abort and never lets a C++ exception out.
 *  - Each call's comment ends with its errors, "Errors: PKV_ERR_X (when), PKV_ERR_Y (when).": the
 *    statuses it returns besides PKV_OK. Besides those, a NULL engine, batch or store handle is
 *    PKV_ERR_INVALID_ARGUMENT, and any call may return PKV_ERR_OUT_OF_MEMORY (host memory ran out;
 *    nothing changed) and PKV_ERR_INTERNAL (a bug in pkv: report it with its message). A call that
 *    returns no pkv_status says instead what it does with NULL.
 *  - Versions: everything here is in 0.1.0 unless its comment says otherwise. A call added later
 *    ends its comment with its version, as "Since 0.2.0."; a field, constant or struct added
 *    later carries "(since 0.2.0)".
 */
#ifndef PKV_PKV_H
#define PKV_PKV_H

#include <stddef.h>
#include <stdint.h>

/* Not reformatted (.clang-format says why): the comments of enum values and struct fields are
 * aligned by hand, over several lines each. */
/* clang-format off */

/* ---------------------------------------------------------------- export macros */
#if defined(_WIN32)
#  if defined(PKV_BUILDING_LIBRARY)
#    define PKV_API __declspec(dllexport)
#  else
#    define PKV_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#  define PKV_API __attribute__((visibility("default")))
#else
#  define PKV_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- versions */
#define PKV_VERSION_MAJOR 0
#define PKV_VERSION_MINOR 12
#define PKV_VERSION_PATCH 0
/* The ABI major: the SONAME is libpkv.so.<PKV_ABI_VERSION>. It changes only when a binary built
 * against an older header could break. Bindings compare pkv_abi_version() with this. */
#define PKV_ABI_VERSION 1

/* The library's version as MAJOR*10000 + MINOR*100 + PATCH. Takes nothing; never fails. */
PKV_API uint32_t pkv_version(void);
/* The ABI major of the loaded library; equal to PKV_ABI_VERSION of the header it was built with.
 * Takes nothing; never fails. */
PKV_API uint32_t pkv_abi_version(void);

/* ---------------------------------------------------------------- statuses */
typedef int32_t pkv_status;

/* The one list of statuses: X(name, value, message). Values are never renumbered; new ones are
 * appended with the next free negative value. */
#define PKV_STATUS_MAP(X)                                                                        \
  X(OK, 0, "ok")                                                                                 \
  X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                               \
  X(ERR_NO_SPACE, -2, "not enough free KV blocks; nothing changed, retry after releasing")       \
  X(ERR_NOT_FOUND, -3, "no such sequence")                                                       \
  X(ERR_STATE, -4, "call not allowed in the object's current state")                            \
  X(ERR_UNSUPPORTED, -5, "not supported by this build or configuration")                        \
  X(ERR_NO_DEVICE, -6, "no usable CUDA device")                                                  \
  X(ERR_OUT_OF_MEMORY, -7, "out of memory")                                                      \
  X(ERR_DEVICE, -8, "CUDA device error")                                                         \
  X(ERR_INTERNAL, -9, "internal error (a bug in pkv)")                                          \
  X(ERR_STORE, -10, "the KV store cannot be used (pkv_store_params)")                            \
  X(ERR_EVENTS, -11, "the KV event publisher cannot be used (pkv_event_publisher_params)")

#define PKV_STATUS_ENUM_ENTRY_(name, value, message) PKV_##name = value,
enum { PKV_STATUS_MAP(PKV_STATUS_ENUM_ENTRY_) }; /* C99: a trailing comma is allowed */
#undef PKV_STATUS_ENUM_ENTRY_

/* A static string describing s ("unknown status" for values not in the list). Never NULL. */
PKV_API const char *pkv_status_string(pkv_status s);

/* The message of this thread's last failed pkv call ("" if none). Valid until this thread's next
 * failed call. Never NULL. */
PKV_API const char *pkv_last_error(void);

/* ---------------------------------------------------------------- constants */
/* Limits (each is also written beside the field or call it bounds). */
enum {
  PKV_MAX_HEAD_DIM = 1024,              /* pkv_engine_params.head_dim: 1 .. this */
  PKV_ATTENTION_MAX_HEAD_DIM = 256,     /* pkv_attention: head_dim at most this (0.1-0.4) ... */
  PKV_ATTENTION_MAX_HEAD_DIM_CPU = 512, /* (since 0.5.0) ... or this on a CPU engine (Gemma 4's
                                           512-wide full layers) ... */
  PKV_ATTENTION_MAX_HEAD_DIM_CUDA = 512, /* (since 0.5.0) ... or this on a CUDA engine ... */
  PKV_ATTENTION_HEAD_DIM_ALIGN = 8,     /* ... and a multiple of this */
  PKV_ATTENTION_MAX_KV_LORA_RANK = 512, /* (since 0.3.0) pkv_attention on an MLA cache: kv_lora_rank
                                           and qk_rope_head_dim multiples of the align above, ... */
  PKV_ATTENTION_MAX_ROPE_DIM = 128,     /* ... at most these (DeepSeek V2/V3, Kimi K2: 512, 64) */
  PKV_INDEXER_MAX_HEAD_DIM = 256,       /* (since 0.7.0) pkv_indexer_*: index_head_dim at most
                                           this, a multiple of PKV_ATTENTION_HEAD_DIM_ALIGN */
  PKV_CUDA_MAX_GRID = 65535,            /* CUDA: layers, kv heads per rank, sequences per batch */
  PKV_MAX_BLOCK_SIZE = 1048576,         /* pkv_engine_params.block_size: 1 .. this (2^20) */
  PKV_MAX_MODEL_ID_BYTES = 256,         /* pkv_store_params.model_id, the NUL not counted */
  PKV_HF_CONFIG_DIGEST_BYTES = 80,      /* pkv_hf_config_digest's text, the NUL counted */
  PKV_MAX_THREADS = 4096,               /* pkv_engine_params.num_threads: 0 .. this */
  PKV_MAX_CACHE_SALT_BYTES = 65536,     /* cache_salt_len: 0 .. this */
  PKV_MAX_EXTRA_KEY_BYTES = 64,         /* (since 0.5.0) pkv_extra_key.key_len: 1 .. this */
  PKV_MAX_EXTRA_KEYS = 65536,           /* (since 0.5.0) num_extra_keys: 0 .. this */
  PKV_DEFAULT_KV_EVENTS_CAPACITY = 65536, /* kv_events_capacity 0 means this */
  /* pkv_event_publisher_params (since 0.3.0): the defaults its 0 fields mean, and the limits */
  PKV_DEFAULT_EVENT_REPLAY_BATCHES = 10000,   /* replay_buffer_batches: 0 means this; 1 .. 2^24 */
  PKV_DEFAULT_EVENT_SEND_HWM = 100000,        /* send_hwm: 0 means this; 1 .. 2^24 */
  PKV_DEFAULT_EVENT_QUEUE_EVENTS = 1048576,   /* max_queue_events: 0 means this; 1 .. 2^26 */
  PKV_DEFAULT_EVENT_BATCH_EVENTS = 1024,      /* max_batch_events: 0 means this; 1 .. 2^20 */
  PKV_MAX_EVENT_ENDPOINT_BYTES = 1024,        /* endpoint, replay_endpoint: 1 .. this bytes */
  PKV_MAX_EVENT_TOPIC_BYTES = 1024            /* topic: 0 .. this bytes */
};
/* Retention of cached blocks (since 0.8.0): cache_priority (pkv_seq_params, pkv_request_params,
 * pkv_cache_set_priority) orders eviction, the lowest first, least recently released first within
 * one; 0 is normal (plain LRU). The host tier keeps plain LRU. */
enum {
  PKV_CACHE_PRIORITY_MIN = -1,  /* (since 0.8.0) evicted before normal blocks */
  PKV_CACHE_PRIORITY_MAX = 2,   /* (since 0.8.0) cache_priority: MIN .. this */
  PKV_MAX_PINNED_PERCENT = 50,  /* (since 0.8.0) pkv_cache_pin: all pins together hold at most
                                   this share of the pool's blocks */
  PKV_MAX_CACHE_RETENTIONS = 4  /* (since 0.8.0) distinct cache_retention_ms values per non-zero
                                   priority among cached blocks at once; a block released with
                                   another one while all are in use joins the one nearest to it
                                   (ties: the shorter) and decays with it */
};
enum { PKV_DEVICE_AUTO = 0, PKV_DEVICE_CPU = 1, PKV_DEVICE_CUDA = 2 };
enum { PKV_DTYPE_F32 = 0, PKV_DTYPE_F16 = 1, PKV_DTYPE_BF16 = 2,
       /* (since 0.2.0) KV cache dtypes only (pkv_engine_params.kv_dtype), one byte per element,
          scaled per (layer, kv head): stored = saturate(round_to_nearest_even(x / scale)) */
       PKV_DTYPE_FP8_E4M3 = 3,  /* OCP e4m3fn: finite range +-448, no infinities */
       PKV_DTYPE_FP8_E5M2 = 4 }; /* OCP e5m2: range +-57344; saturates to the largest finite */
/* pkv_engine_params.kv_layout (since 0.3.0): what the cache holds per token per layer. */
enum { PKV_KV_LAYOUT_HEADS = 0, /* K and V of each kv head (multi-head, GQA, MQA attention) */
       PKV_KV_LAYOUT_MLA = 1 }; /* one latent vector of kv_lora_rank + qk_rope_head_dim values,
                                   no V (multi-head latent attention: DeepSeek V2/V3/R1, Kimi K2;
                                   V is a view of the latent's first kv_lora_rank values) */
/* pkv_layer_spec.kind (since 0.5.0): what a layer keeps in the cache. */
enum { PKV_LAYER_ATTENTION = 0, /* K and V of its own kv heads (V may be K: k_eq_v) */
       PKV_LAYER_MLA = 1,       /* one latent per token (kv_layout MLA's; no mix with the others) */
       PKV_LAYER_SHARED = 2,    /* no cache of its own: it reads the K and V of an earlier layer,
                                   source_layer (Gemma 3n / 4: num_kv_shared_layers) */
       PKV_LAYER_STATE = 3 };   /* (since 0.6.0) a recurrent layer (Gated DeltaNet, KDA, Mamba):
                                   a fixed-size state per sequence instead of K and V, in the
                                   parts state_shape and state_dtype give (DESIGN.md §13). An
                                   indexer cache is part of an MLA layer (index_head_dim) */
/* pkv_layer_spec's state parts (since 0.6.0) */
enum { PKV_MAX_STATE_PARTS = 2, /* parts of a STATE layer's state: a conv state, an SSM state */
       PKV_MAX_STATE_DIMS = 4 }; /* dimensions of a part's shape */
/* pkv_engine_params.state_checkpoint_policy (since 0.6.0): where a sequence leaves checkpoints
 * of its recurrent state for prefix caching; only at block boundaries (a later prompt that
 * shares the tokens up to a checkpoint starts from it; one without any starts from token 0). */
enum { PKV_STATE_CHECKPOINT_PROMPT_END = 0, /* the last block boundary its prompt reaches,
                                               and the boundary where the cached KV of its
                                               prompt ends when no checkpoint is there (a
                                               prefix another prompt shares: the next one
                                               sharing it hits) */
       PKV_STATE_CHECKPOINT_EVERY = 1,      /* every state_checkpoint_interval blocks of its
                                               computed tokens, and PROMPT_END's boundaries */
       PKV_STATE_CHECKPOINT_NONE = 2 };     /* none: no prefix hits on a model with STATE
                                               layers */
/* pkv_layer_spec.attention (since 0.5.0): which keys a token at position p attends to. */
enum { PKV_ATTENTION_FULL = 0,    /* keys 0 .. p */
       PKV_ATTENTION_SLIDING = 1, /* keys p - window + 1 .. p */
       PKV_ATTENTION_CHUNKED = 2 }; /* keys of its own chunk: floor(p / window) * window .. p
                                       (Llama 4's attention_chunk_size) */
/* How pkv_kv_budget.num_blocks was decided. */
enum { PKV_BUDGET_FROM_UTILIZATION = 0, PKV_BUDGET_FROM_BYTE_CAP = 1, PKV_BUDGET_FIXED_BLOCKS = 2 };
/* Bits of pkv_engine_params.debug_flags: for tests of pkv itself, never for production. */
enum { PKV_DEBUG_CONSTANT_HASH = 1, /* every prefix-lookup hash is 0: exactness by
                                         token compare */
       PKV_DEBUG_TEST_CLOCK = 2 };   /* (since 0.8.0) the engine's clock (cache_retention_ms) is
                                        the decimal milliseconds of the environment variable
                                        PKV_TEST_CLOCK_MS (unset or bad: 0), read once per call,
                                        instead of the steady clock: tests advance it */
/* Why a request finished. */
enum { PKV_FINISH_NONE = 0, PKV_FINISH_STOP_TOKEN = 1, PKV_FINISH_LENGTH = 2,
       PKV_FINISH_TRANSFER_FAILED = 3 }; /* (since 0.12.0) its remote KV did not arrive and the
                                            host chose to end it (pkv_receive_end) */
/* pkv_batch_view.copy_kind: what a listed block copy moves (ids are in the tiers it names). */
enum { PKV_COPY_COW = 1,          /* device block -> device block: copy-on-write */
       PKV_COPY_SWAP_OUT = 2,     /* device block -> host-tier block: pkv_swap_out */
       PKV_COPY_SWAP_IN = 3,      /* host-tier block -> device block: pkv_swap_in */
       PKV_COPY_OFFLOAD = 4,      /* device block -> host-tier block: a sealed block evicted from
                                     the pool keeps its KV in the host tier */
       PKV_COPY_STATE = 6,        /* (since 0.6.0) state slot -> state slot (ids are slots,
                                     pkv_pool_info.state_base): a fork's copy of the working state,
                                     a checkpoint restored into a working slot, a checkpoint taken
                                     (the working state at the boundary: the copies run before the
                                     step writes anything) */
       PKV_COPY_LOAD = 5,         /* host-tier block -> device block: a prefix hit on a block held
                                     only in the host tier */
       PKV_COPY_STATE_OUT = 7,    /* (since 0.6.0) state slot -> host state slot
                                     (pkv_pool_info.host_state_base): pkv_swap_out of a sequence
                                     with STATE layers (its working slot), or a checkpoint evicted
                                     from the device and offloaded (its checkpoint slot) */
       PKV_COPY_STATE_IN = 8 };   /* (since 0.6.0) host state slot -> working state slot:
                                     pkv_swap_in, or a prefix hit restoring an offloaded
                                     checkpoint */
/* pkv_engine_params.preemption_mode: what pkv_step does to the request it preempts. */
enum { PKV_PREEMPT_RECOMPUTE = 0, /* give its blocks back; recompute its KV when re-admitted */
       PKV_PREEMPT_SWAP = 1,      /* swap it out to the host tier (recompute when the tier
                                     is full) */
       PKV_PREEMPT_AUTO = 2 };    /* swap when the host tier has room and its computed tokens are
                                     more than one step's prefill (max_num_batched_tokens): copying
                                     is then cheaper than recomputing; else recompute */
/* struct pkv_seq_info.kv_tier: where a sequence's KV is; pkv_kv_event.medium: where a block is. */
/* pkv_engine_params.ranks (since 0.10.0), DESIGN.md §10 */
enum { PKV_RANKS_ONE = 0,  /* the engine is one rank (tp_rank, pp_rank) and decides for itself:
                              alone, or as every rank's decider whose plans it exports
                              (pkv_batch_export_plan) */
       PKV_RANKS_ALL = 1,  /* the engine decides for every rank and holds every rank's pool in
                              this process: tp_size x pp_size pools */
       PKV_RANKS_POOL = 2  /* the engine is rank (tp_rank, pp_rank)'s pool only: it executes the
                              plans a decider exported (pkv_plan_import) and decides nothing */
};
enum { PKV_MAX_RANKS = 255 }; /* pools one engine holds at most */
/* pkv_engine_params.block_layout (since 0.11.0) */
enum { PKV_BLOCK_LAYOUT_LAYERS = 0, /* K and V each [layers][blocks][...]: a block is 2 x layers
                                       segments, a layer's blocks contiguous */
       PKV_BLOCK_LAYOUT_PAGE = 1    /* [blocks][layers][K, V]: a block is one segment */
};
/* KV transfers between engines (since 0.12.0), DESIGN.md §10: pkv_seq_info.transfer */
enum { PKV_TRANSFER_NONE = 0,      /* neither below */
       PKV_TRANSFER_HOLDING = 1,   /* its blocks are held for a transfer out (pkv_hold) */
       PKV_TRANSFER_RECEIVING = 2  /* a request waiting for its first num_remote_tokens' KV */
};
/* How a transfer ended (pkv_hold_end, pkv_receive_end) */
enum { PKV_TRANSFER_DONE = 0,          /* every byte arrived */
       PKV_TRANSFER_FAILED = 1,        /* it did not: a receiving request computes them itself */
       PKV_TRANSFER_FAILED_FINISH = 2  /* it did not: the receiving request finishes
                                          (PKV_FINISH_TRANSFER_FAILED) */
};
enum { PKV_TRANSFER_TIMEOUT_DEFAULT_MS = 480000 }; /* a hold's timeout_ms 0 (vLLM's 480 s) */
enum { PKV_TIER_NONE = 0, PKV_TIER_DEVICE = 1, PKV_TIER_HOST = 2, PKV_TIER_STORE = 3 };
/* pkv_store_params.kind */
enum { PKV_STORE_NONE = 0, PKV_STORE_FILE = 1, PKV_STORE_REDIS = 2, PKV_STORE_CALLBACK = 3 };
/* pkv_store_params.write_mode: when blocks are written to the store. */
enum { PKV_STORE_WRITE_THROUGH = 0, /* when a block is sealed into the prefix cache */
       PKV_STORE_WRITE_BACK = 1,    /* when an offloaded block leaves the host tier, and what the
                                       host tier holds at pkv_engine_destroy */
       PKV_STORE_READ_ONLY = 2 };   /* never: the store is only read */
/* pkv_kv_event.type */
enum { PKV_EVENT_BLOCK_STORED = 1, PKV_EVENT_BLOCK_REMOVED = 2, PKV_EVENT_ALL_CLEARED = 3,
       PKV_EVENT_OVERFLOW = 4 };
/* pkv_event_publisher_params.format (since 0.4.0): how KV events are encoded on the wire. */
enum { PKV_EVENT_FORMAT_MAP = 0,   /* msgpack maps with named fields (vLLM 0.26 and later) */
       PKV_EVENT_FORMAT_ARRAY = 1 }; /* msgpack arrays, fields by position (vLLM before 0.26) */

/* One layer of the cache (since 0.5.0), an element of pkv_engine_params.layer_specs: the
 * model's layers may differ in kind, heads, widths, window and softmax (DESIGN.md §12). Fields
 * left 0 take the engine's flat fields, so a spec of zeros is the layer pkv_engine_params
 * describes. Cached layers of equal attention, window and K + V bytes per token are one kind;
 * a kind's layers fill KV groups of as many as one block (a page of equal bytes for every
 * group) holds. Each group has one block table per sequence (pkv_kv_groups, pkv_kv_group_info);
 * a group's block holds its layers' K and V; a SHARED layer is in its source's group. */
typedef struct pkv_layer_spec {
  uint32_t kind;                  /* PKV_LAYER_*. default ATTENTION */
  uint32_t attention;             /* PKV_ATTENTION_*. A SHARED layer's must be its source's */
  uint32_t window;                /* SLIDING: keys per token, itself included; CHUNKED: the
                                     chunk size; each 1 .. 2^31-1. FULL: must be 0 */
  uint32_t num_kv_heads;          /* 0 = pkv_engine_params.num_kv_heads; divides num_q_heads */
  uint32_t head_dim;              /* K's values per head, 0 = pkv_engine_params.head_dim;
                                     1 .. PKV_MAX_HEAD_DIM */
  uint32_t v_head_dim;            /* V's values per head (and out's); 0 = head_dim */
  uint32_t k_eq_v;                /* 0 or 1: V is K (Gemma 4's attention_k_eq_v), stored once,
                                     and pkv_attention takes v NULL; v_head_dim must be 0 or
                                     head_dim */
  uint32_t source_layer;          /* SHARED: the layer whose K and V it reads, an ATTENTION
                                     layer before it with the same heads, widths and window;
                                     else 0 */
  uint32_t sinks;                 /* 0 or 1: a learned logit per q head joins every softmax
                                     denominator and adds nothing to the output (gpt-oss); set
                                     them with pkv_set_attention_sinks */
  float logit_softcap;            /* c > 0: each scaled score s becomes c * tanh(s / c) before
                                     the softmax (Gemma 2: 50); 0 = none */
  float softmax_scale;            /* this layer's scale; 0 = pkv_engine_params.softmax_scale, or
                                     1/sqrt(this layer's head_dim) when that is 0 */
  uint32_t reserved0;             /* must be 0 */
  /* (since 0.6.0) a STATE layer's state per sequence, this rank's; 0 in every other layer */
  uint32_t state_dtype[PKV_MAX_STATE_PARTS]; /* each part's PKV_DTYPE_F32 / F16 / BF16 (fp32 SSM
                                     states in bf16 models are common); 0 is F32 */
  uint32_t state_shape[PKV_MAX_STATE_PARTS * PKV_MAX_STATE_DIMS]; /* part i's dimensions at
                                     [i * PKV_MAX_STATE_DIMS ...], outermost first, ending at the
                                     first 0 (or the fourth): part 0 the conv state (Qwen3-Next:
                                     conv_dim x (conv_kernel - 1)), part 1 the SSM / delta-rule
                                     state (v_heads x k_dim x v_dim); a part whose first dimension
                                     is 0 is absent, one at least is present; each dimension
                                     1 .. 2^24, a part at most 2^40 bytes, every STATE layer's
                                     parts (256-byte aligned) below 2^62. PKV_ERR_UNSUPPORTED
                                     for now: a model whose every layer is STATE */
  /* (since 0.7.0) sparse attention's indexer (DeepSeek V3.2, GLM-5; DESIGN.md §14), on an MLA
     layer only (0 in every other layer): per token, a key of index_head_dim values beside the
     latent, in the same block (pkv_layer_info gives the layout). Every tier moves it with the
     latent: one block, one unit. pkv_indexer_write fills it, pkv_indexer_topk scores it,
     pkv_sparse_mla_attention attends over the keys it selects */
  uint32_t index_head_dim;        /* the indexer key's values, 0 = no indexer, 1 .. PKV_MAX_HEAD_DIM
                                     (DeepSeek V3.2, GLM-5: 128); the calls above take multiples
                                     of PKV_ATTENTION_HEAD_DIM_ALIGN up to
                                     PKV_INDEXER_MAX_HEAD_DIM */
  uint32_t index_dtype;           /* the indexer cache's dtype: PKV_DTYPE_FP8_E4M3 (or 0), one
                                     fp32 scale per token (vLLM's and FlashInfer's layout: 132
                                     bytes per token for 128 values), or PKV_DTYPE_BF16 */
  uint32_t index_n_heads;         /* indexer query heads (pkv_indexer_topk's q), every rank's
                                     (the indexer is replicated, not split by tp_size), 1 .. 2^16
                                     (DeepSeek V3.2: 64, GLM-5: 32); 0 without an indexer */
  uint32_t index_topk;            /* keys each query token keeps, 1 .. 2^20 (both: 2048); 0
                                     without an indexer */
} pkv_layer_spec;

/* ---------------------------------------------------------------- engine parameters */
typedef struct pkv_engine_params {
  uint32_t struct_size;
  /* model shape (the whole model; pkv derives this rank's share from tp_size / tp_rank). Its
   * pkv_kv_budget.block_bytes must be <= 2^63-1, else PKV_ERR_INVALID_ARGUMENT naming it. */
  uint32_t num_layers;            /* >= 1 */
  uint32_t num_q_heads;           /* >= 1 */
  uint32_t num_kv_heads;          /* >= 1, divides num_q_heads */
  uint32_t head_dim;              /* 1 .. PKV_MAX_HEAD_DIM (pkv_attention: see there) */
  int32_t dtype;                  /* PKV_DTYPE_*, the KV (and activation) dtype. default BF16 */
  uint32_t tp_size;               /* tensor-parallel ranks, >= 1, divides num_q_heads; it divides
                                     num_kv_heads or num_kv_heads divides it. default 1 */
  uint32_t tp_rank;               /* this engine's rank, < tp_size */
  uint32_t max_model_len;         /* longest sequence in tokens; 0 = no limit (sequences are at
                                     most 2^31-1 tokens either way). default 0. Its blocks,
                                     ceil(max_model_len / block_size), must fit in the largest pool
                                     (see num_blocks), else PKV_ERR_INVALID_ARGUMENT */
  /* paging */
  uint32_t block_size;            /* tokens per block, 1 .. PKV_MAX_BLOCK_SIZE (any value).
                                     default 16 */
  uint32_t num_blocks;            /* 0 = as many as the memory budget allows, at most 2^31-1 and
                                     (2^63-1) / block_bytes. A fixed value must be <= 2^31-1 with
                                     num_blocks * block_bytes <= 2^63-1, else
                                     PKV_ERR_INVALID_ARGUMENT. default 0 */
  uint32_t enable_prefix_caching; /* 0 or 1. default 1 */
  uint64_t hash_seed;             /* seed of the canonical block hash. default 0 */
  /* where the pool lives */
  int32_t device;                 /* PKV_DEVICE_*. default AUTO: CUDA when a GPU is usable,
                                     else CPU */
  int32_t device_id;              /* CUDA device ordinal, >= 0. default 0 */
  uint32_t num_threads;           /* CPU worker threads, 0 .. PKV_MAX_THREADS; 0 = one per core.
                                     default 0 */
  uint32_t debug_flags;           /* PKV_DEBUG_* bits (others refused). default 0 */
  /* memory budget (see pkv_profile): budget = total * utilization - used - reserve,
   * or kv_cache_bytes when that is not 0. */
  double memory_utilization;      /* finite, in (0, 1]. default 0.9 */
  uint64_t kv_cache_bytes;        /* absolute KV budget in bytes; 0 = use the formula. default 0 */
  uint64_t memory_total_bytes;    /* 0 = measure the device (or host); else plan for this total */
  uint64_t memory_used_bytes;     /* bytes in use besides the measured ones (e.g. weights not yet
                                     loaded; all of them when memory_total_bytes is given); the
                                     measured ones + this must fit in 64 bits */
  uint64_t reserve_bytes;         /* the host's activation peak and workspaces */
  /* compute */
  float softmax_scale;            /* pkv_attention's scale, finite and >= 0; 0 = 1/sqrt(head_dim).
                                     default 0 */
  uint32_t reserved0;             /* must be 0 */
  /* scheduler (pkv_submit / pkv_step) */
  uint32_t max_num_seqs;          /* sequences in one step, at most; >= 1. default 256 */
  uint32_t max_num_batched_tokens; /* new tokens in one step, at most (prompts are chunked); >= 1.
                                     default 2048 */
  /* observability */
  uint32_t enable_kv_events;      /* 0 or 1: queue KV events for pkv_drain_kv_events. default 0 */
  uint32_t kv_events_capacity;    /* events kept until drained; 0 = PKV_DEFAULT_KV_EVENTS_CAPACITY.
                                     An overflow drops them all and queues one
                                     PKV_EVENT_OVERFLOW. */
  /* host tier (since 0.2.0): a second pool of blocks in host memory (pinned on CUDA), below the
   * device pool. Off when both sizes are 0 (the default). Its blocks have the pool's block_bytes;
   * when the host memory is measured (memory_total_bytes 0), they must fit in the available host
   * memory (PKV_ERR_OUT_OF_MEMORY otherwise). (since 0.8.0) With every layout: windows, chunks,
   * unequal and SHARED layers, MLA, indexers (before 0.8 those were refused UNSUPPORTED). */
  uint32_t host_num_blocks;       /* blocks of the host tier, at most 2^31-1 and (2^63-1) /
                                     block_bytes; 0 = from host_cache_bytes. default 0 */
  uint32_t reserved1;             /* must be 0 */
  uint64_t host_cache_bytes;      /* when host_num_blocks is 0: the host tier's budget in bytes
                                     (blocks = bytes / block_bytes, at least 1 when not 0);
                                     0 = no host tier. default 0 */
  uint32_t preemption_mode;       /* PKV_PREEMPT_*; SWAP needs the host tier, AUTO without one
                                     recomputes. default RECOMPUTE */
  uint32_t host_offload;          /* 0 or 1: with a host tier and prefix caching, a sealed block
                                     evicted from the pool is copied to the host tier, and a later
                                     prefix hit on it loads it back (PKV_COPY_OFFLOAD / LOAD).
                                     0: the host tier holds swapped-out sequences only. default 1 */
  /* the store tier (since 0.2.0): prefix blocks kept in a directory, a Redis/Valkey server or the
   * host's callbacks, across restarts and engines. Needs prefix caching and a host tier (store
   * blocks are fetched into host-tier blocks, then loaded like offloaded ones). (since 0.6.0)
   * With STATE layers, each checkpoint of the state is written to it when taken (in every write
   * mode but READ_ONLY) and fetched with the blocks it ends, into a host state slot. (since 0.8.0)
   * With KV groups each group's blocks are values of their own (a key chain per group), a windowed
   * group's only those of its window before the hit; the fingerprint names the layout, so another
   * grouping of equal block bytes never hits. (since 0.10.0) With several ranks (ranks ALL) a
   * value holds every rank's slice of its block, every rank's pool layers in rank order: a hit
   * or a miss is one for every rank. An engine of one rank of several (ranks ONE with tp_size x
   * pp_size > 1) is refused with a store (PKV_ERR_UNSUPPORTED), as is a store with STATE layers
   * and several ranks; ranks POOL takes none (PKV_ERR_INVALID_ARGUMENT). */
  const struct pkv_store_params *store; /* NULL = no store (the default); read at create only */
  /* attention variants (since 0.2.0), DESIGN.md §12 */
  int32_t kv_dtype;               /* the KV cache's dtype: 0 (or dtype itself) = dtype; or
                                     PKV_DTYPE_FP8_E4M3 / PKV_DTYPE_FP8_E5M2 (pkv_set_kv_scales).
                                     Other values: PKV_ERR_INVALID_ARGUMENT. default 0 */
  uint32_t sliding_window;        /* keys each token attends to, itself included, in every layer
                                     that layer_windows does not set: a token at position p sees
                                     keys p - w + 1 .. p. 0 = full attention. default 0 */
  const uint32_t *layer_windows;  /* NULL, or [num_layers]: each layer's window (0 = full
                                     attention), in place of sliding_window; read at create only.
                                     Layers are grouped by window (pkv_kv_groups). Windows (each
                                     at most 2^31-1) and a host tier together: PKV_ERR_UNSUPPORTED
                                     (pkv_profile and pkv_engine_create alike), for now. A prompt
                                     is reserved whole in every group, windowed ones too: a
                                     window saves blocks only as the sequence's computed tokens
                                     pass it (pkv_allocate) */
  /* (since 0.3.0) */
  const struct pkv_event_publisher_params *event_publisher; /* KV events on the wire; NULL = none
                                     (the default); read at create only. A build without libzmq:
                                     PKV_ERR_UNSUPPORTED. An endpoint that cannot be bound (bad,
                                     in use): PKV_ERR_EVENTS naming it */
  /* the cache's layout (since 0.3.0), DESIGN.md §12 */
  uint32_t kv_layout;             /* PKV_KV_LAYOUT_*. MLA needs num_kv_heads 1 (the one latent,
                                     every rank holds it whole) and head_dim = kv_lora_rank +
                                     qk_rope_head_dim, softmax_scale > 0 at create (MLA's scale is
                                     the model's, not 1/sqrt(head_dim)), and no sliding window
                                     (PKV_ERR_UNSUPPORTED). default HEADS */
  uint32_t kv_lora_rank;          /* MLA: the latent's compressed part, >= 1 (DeepSeek V3: 512);
                                     pkv_attention: a multiple of PKV_ATTENTION_HEAD_DIM_ALIGN, at
                                     most PKV_ATTENTION_MAX_KV_LORA_RANK. 0 for HEADS */
  uint32_t qk_rope_head_dim;      /* MLA: the latent's rotary part (DeepSeek V3: 64), >= 0: no
                                     minimum, 0 is a latent without one; pkv_attention: a
                                     multiple of PKV_ATTENTION_HEAD_DIM_ALIGN (0, 8, 16, ...), at
                                     most PKV_ATTENTION_MAX_ROPE_DIM. 0 for HEADS */
  uint32_t reserved2;             /* must be 0 */
  /* the cache described per layer (since 0.5.0), DESIGN.md §12 */
  const pkv_layer_spec *layer_specs; /* NULL (every layer as the fields above say), or
                                     [num_layers] specs; read at create only. With it,
                                     sliding_window must be 0 and layer_windows NULL (each
                                     layer's window is in its spec) */
  uint32_t layer_spec_size;       /* sizeof(pkv_layer_spec) as the caller compiled it, when
                                     layer_specs is not NULL: at least its 0.5 size (48; 88 with
                                     0.6's state fields, 104 with 0.7's indexer) */
  uint32_t reserved3;             /* must be 0 */
  /* recurrent state (since 0.6.0), DESIGN.md §13: with STATE layers, every running sequence
     holds one working state slot (max_num_seqs of them), and checkpoint slots keep states at
     block boundaries for prefix caching */
  uint32_t state_checkpoint_policy; /* PKV_STATE_CHECKPOINT_*. default PROMPT_END */
  uint32_t state_checkpoint_interval; /* EVERY: blocks between checkpoints, 1 .. 2^20; else 0 */
  uint32_t num_state_checkpoints; /* checkpoint slots, each a whole state (every STATE layer's
                                     parts); 0 = max_num_seqs (NONE, or prefix caching off: 0
                                     always). Taken from the budget before the KV blocks;
                                     max_num_seqs + these at most 2^31-1 with STATE layers. With
                                     a host tier and host_offload (or a store), as many host
                                     state slots take the ones evicted (or fetched) */
  uint32_t reserved4;             /* must be 0 */
  /* many ranks, one engine (since 0.10.0), DESIGN.md §10. A rank is a tensor-parallel head
     shard (tp_rank: its share of the heads), a pipeline stage (pp_rank: its layers), or both:
     rank = pp_rank * tp_size + tp_rank. Stage s holds layers [first, end): num_layers / pp_size
     each, the rest one more each in the stages before the last (vLLM's split); pkv_pool_info
     says which. */
  uint32_t ranks;                 /* PKV_RANKS_*. ALL: one engine owns the block manager, the
                                     scheduler, the host tier and the events, and holds a pool
                                     per rank (tp_rank and pp_rank must be 0). Every rank runs
                                     the same copies and plan; pkv_attention takes a rank's
                                     handle (pkv_batch_rank). Each rank's pool is sized from its
                                     own device's memory (ranks sharing a device, or the host,
                                     split it evenly), num_blocks is the fewest any rank holds
                                     (pkv_kv_budget.bounding_rank); kv_cache_bytes and
                                     host_cache_bytes are per rank. POOL: see pkv_plan_import;
                                     num_blocks must be given (the decider's, and its
                                     host_num_blocks). ONE with tp_size x pp_size > 1 (one rank
                                     of several, each engine deciding for itself): a store, or a
                                     cache_retention_ms deadline, is PKV_ERR_UNSUPPORTED: they
                                     could make the ranks' decisions differ. default ONE */
  uint32_t pp_size;               /* pipeline stages, 1 .. num_layers; 0 = 1. default 1 */
  const int32_t *rank_device_ids; /* ALL on CUDA: NULL (every rank on device_id) or
                                     [tp_size * pp_size], rank r's CUDA device; several ranks may
                                     share one. Must be NULL on the CPU and with ranks ONE or
                                     POOL. Read at create only */
  uint32_t pp_rank;               /* this engine's stage (ONE, POOL), < pp_size; 0 with ALL */
  uint32_t reserved5;             /* must be 0 */
  /* the block layout (since 0.11.0), DESIGN.md §6 */
  uint32_t block_layout;          /* PKV_BLOCK_LAYOUT_*. PAGE: each block is one page of all its KV
                                     group's layers (a layer's K, then its V, layer after layer),
                                     so a transport moves a block as one segment
                                     (pkv_block_segments) rather than 2 x layers; pkv_pool_info
                                     describes pages (num_layers 1) and pkv_layer_info each
                                     layer's place, as for layers of unequal bytes. Not with
                                     pipeline stages; at most 2^20 layers
                                     (PKV_ERR_INVALID_ARGUMENT). default LAYERS */
  uint32_t max_held_blocks;       /* (since 0.12.0) the most block references held for transfers
                                     at once (pkv_hold, hold_on_finish), <= num_blocks; 0 = half
                                     the pool's blocks (a 0.11 caller's reserved6). default 0 */
} pkv_engine_params;

/* Fills p with the defaults above (params.cpp holds every *_init default). size must be sizeof *p
 * as the caller sees it, at least the struct's 0.1 size; bytes pkv does not know are zeroed. The
 * same holds for every *_init call.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's 0.1 size). */
PKV_API pkv_status pkv_engine_params_init(pkv_engine_params *p, uint32_t size);

/* ---------------------------------------------------------------- engine */
typedef struct pkv_engine pkv_engine;
/* The KV budget an engine was sized by; defined in the KV profiler section. */
typedef struct pkv_kv_budget pkv_kv_budget;

/* Creates an engine: validates p, sizes the pool with the profiler when p->num_blocks is 0,
 * allocates the KV pool on the chosen device. A CUDA engine takes at most PKV_CUDA_MAX_GRID
 * layers and kv heads per rank (they are grid dimensions of its kernels). *out is set only on
 * success; destroy it with pkv_engine_destroy.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or out NULL; a field out of the range its comment gives, or
 * fields that do not fit together, named; on CUDA more than PKV_CUDA_MAX_GRID layers or kv heads
 * per rank), PKV_ERR_UNSUPPORTED (windows with kv_layout MLA; an event
 * publisher in a build without libzmq; /proc/meminfo unreadable; (since 0.10.0) pp_size > 1 with
 * layers of unequal bytes, STATE layers or a SHARED layer reading another stage's cache; a store
 * on one rank of several, or with STATE layers and several ranks), PKV_ERR_NO_DEVICE (device CUDA
 * asked for and no usable GPU, or a build without CUDA), PKV_ERR_DEVICE (the CUDA runtime
 * failed), PKV_ERR_OUT_OF_MEMORY (the pool or the host tier could not be allocated, or the budget
 * holds no sequence of max_model_len), PKV_ERR_STORE (the store cannot be opened or reached),
 * PKV_ERR_EVENTS (the event publisher cannot start: an endpoint that cannot be bound, named). */
PKV_API pkv_status pkv_engine_create(const pkv_engine_params *p, pkv_engine **out);

/* Frees the engine, its pool, its sequences and any batch still open (their handles become
 * invalid). Accepts NULL (does nothing). Must not race with other calls on e. */
PKV_API void pkv_engine_destroy(pkv_engine *e);

/* The message of the last failed call on e ("" after a call that succeeded). Valid until the next
 * call on e; a host sharing e between threads reads it under its own lock. Never NULL; for NULL e
 * it returns pkv_last_error(). Calls on e's batches count as calls on e, also with a handle whose
 * batch has ended (its PKV_ERR_STATE message is here too (since 0.4.0)), except pkv_batch_abort of
 * such a handle, which is ignored; once e is destroyed, its handles' refusals are only in
 * pkv_last_error(). */
PKV_API const char *pkv_engine_last_error(const pkv_engine *e);

/* The engine's effective parameters (num_blocks and device resolved). The pointers in them
 * (layer_windows, store, event_publisher) point into the engine: valid until it is destroyed.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small). */
PKV_API pkv_status pkv_engine_params_get(pkv_engine *e, pkv_engine_params *out);
/* The budget the engine's pool was sized by, as pkv_profile computed it at create.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small). */
PKV_API pkv_status pkv_engine_budget(pkv_engine *e, pkv_kv_budget *out);

/* ---------------------------------------------------------------- sequences */
/* (since 0.5.0) An extra key of a prompt: bytes that tell apart prompts whose tokens are equal,
 * over the tokens [start_token, end_token) they concern - a multimodal item's content hash over
 * its placeholder tokens (vLLM's mm_hash). It joins the identity of every block it overlaps:
 * a cached block hits only under equal tokens, equal extra keys (the same ranges, overlaps and
 * bytes, compared exactly) and an equal lora_id; blocks before the first key keep their text
 * prefix shared. The bytes are copied: the caller's may go once the call returns. The canonical
 * hash mixes them in as pkv_block_hash_extra says. */
typedef struct pkv_extra_key {
  uint32_t start_token;           /* the first token it covers, counted from the prompt's start */
  uint32_t end_token;             /* one past its last: start_token < end_token <= the prompt's
                                     tokens */
  const void *key;                /* key_len bytes (e.g. an image's content hash) */
  uint32_t key_len;               /* 1 .. PKV_MAX_EXTRA_KEY_BYTES */
  uint32_t reserved0;             /* must be 0 */
} pkv_extra_key;

typedef struct pkv_seq_params {
  uint32_t struct_size;
  uint32_t cache_salt_len;        /* bytes of cache_salt, 0 ..
                                     PKV_MAX_CACHE_SALT_BYTES; 0 = no salt */
  const void *cache_salt;         /* tenant / adapter key: different salts never share blocks */
  /* (since 0.5.0) a 0.4 caller's struct_size ends here: no extra keys, no adapter */
  const pkv_extra_key *extra_keys; /* [num_extra_keys], sorted by start_token, not overlapping
                                     (each starts at or after the previous one's end_token),
                                     inside the prompt; NULL when num_extra_keys is 0. A bad one
                                     is refused naming its index and the rule. default NULL */
  uint32_t num_extra_keys;        /* 0 .. PKV_MAX_EXTRA_KEYS. default 0 */
  uint32_t extra_key_size;        /* sizeof(pkv_extra_key) as the caller compiled it: at least
                                     its 0.5 size (24) and a multiple of 8; extra_keys[i] starts
                                     at byte i * extra_key_size. default sizeof(pkv_extra_key) */
  uint64_t lora_id;               /* the LoRA adapter the KV is computed with, 0 = none: blocks of
                                     other adapters never hit (the id joins the root). default 0 */
  /* (since 0.8.0) a 0.7 caller's struct_size ends here: priority 0, plain LRU */
  int32_t cache_priority;         /* (since 0.8.0) the eviction priority its sealed blocks get when
                                     it releases them (pkv_release, pkv_truncate, pkv_preempt, a
                                     window's give-back, a swap-out): PKV_CACHE_PRIORITY_MIN ..
                                     PKV_CACHE_PRIORITY_MAX, lower evicted first; a block released
                                     by several holders keeps the highest (then the longest
                                     retention). default 0 */
  uint32_t cache_retention_ms;    /* (since 0.8.0) 0 = the priority never decays; else it holds for
                                     this many ms after the block's last release, then the block
                                     is evicted as a normal one. default 0 */
} pkv_seq_params;

/* Fills p with the defaults above (no salt); as pkv_engine_params_init.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's 0.1 size). */
PKV_API pkv_status pkv_seq_params_init(pkv_seq_params *p, uint32_t size);

/* Admits a prompt: looks its full blocks up in the prefix cache (capped so that at least the last
 * token is computed: a prompt of whole blocks recomputes its last block), then reserves every
 * block the prompt needs. On success *out_seq is a new sequence id (never 0, never reused) and
 * *out_num_cached_tokens (nullable) the tokens whose KV is already there: they count as
 * computed. sp may be NULL. With sliding windows every KV group reserves the whole prompt,
 * windowed groups too (every token given has its slot): a windowed group gives back the blocks
 * behind its window only once a batch has computed the tokens past them, so a long prompt needs
 * about num_kv_groups * ceil(num_tokens / block_size) free blocks, less its cached ones
 * (pkv_allocate_query says how many). A host that wants less appends its prompt chunk by chunk;
 * pkv_submit's requests are admitted per chunk (since 0.8.0).
 * With STATE layers (since 0.6.0) the sequence also takes a working state slot (one per running
 * sequence, max_num_seqs in all; pkv_batch_view.state_slots), and a prefix hit of h blocks needs,
 * besides their KV, a checkpoint of the recurrent state at boundary h (state_checkpoint_policy,
 * DESIGN.md §13): the longest such h is served (pkv_allocate_query's answer too), and the working
 * slot starts from a copy of that checkpoint, a PKV_COPY_STATE the next batch lists first; with
 * none the prompt is computed from token 0 (pkv_stats.state_fallback_tokens counts what that
 * recomputes). A batch that ends exactly on a boundary the policy wants leaves a checkpoint there;
 * pkv_step's chunks end on them.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens or out_seq NULL; num_tokens 0, above max_model_len or
 * above 2^31-1; a bad sp: struct_size, cache_salt, extra_keys (since 0.5.0)), PKV_ERR_NO_SPACE
 * (not enough free blocks, or (since 0.6.0) no free working state slot; nothing changed),
 * PKV_ERR_STATE ((since 0.10.0) an engine of ranks POOL), PKV_ERR_UNSUPPORTED ((since 0.10.0)
 * sp's cache_retention_ms not 0 on an engine of one rank of several: pkv_engine_params.ranks). */
PKV_API pkv_status pkv_allocate(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                                const pkv_seq_params *sp, uint64_t *out_seq,
                                uint32_t *out_num_cached_tokens);

/* How many free blocks pkv_allocate of this prompt would take now (new blocks plus cached blocks
 * it would revive), and how many of its tokens would be cached. Changes nothing (the query is not
 * counted in the stats). Either out pointer may be NULL. With a store, the store is not asked:
 * blocks pkv_allocate would fetch from it are counted as new ones (they take a free block each
 * just the same), not as cached tokens.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens NULL; num_tokens 0, above max_model_len or above
 * 2^31-1; a bad sp: struct_size, cache_salt, extra_keys (since 0.5.0)). */
PKV_API pkv_status pkv_allocate_query(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                                      const pkv_seq_params *sp, uint32_t *out_num_blocks,
                                      uint32_t *out_num_cached_tokens);

/* Reserves slots for num_tokens more tokens of seq (decode: 1; speculative or chunked: more):
 * new blocks when the last one is full; if the last block is shared (after a fork) and partly
 * filled, it is first copied (copy-on-write; the copy is queued and listed by the next batch).
 * The tokens become computed when a batch computes them.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens NULL; num_tokens 0; the sequence would exceed
 * max_model_len or 2^31-1 tokens), PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is
 * preempted or swapped out, in the open batch, or a request of pkv_submit), PKV_ERR_NO_SPACE (not
 * enough free blocks; nothing changed). */
PKV_API pkv_status pkv_append(pkv_engine *e, uint64_t seq, const int32_t *tokens,
                              uint32_t num_tokens);

/* A new sequence sharing every block of parent (ref counts + 1), with the same tokens, salt,
 * extra keys, lora_id (since 0.5.0) and computed count. parent must have all its tokens computed.
 * With STATE layers (since 0.6.0) the child takes a working state slot and a PKV_COPY_STATE copy
 * of parent's slot into it is queued: the next batch lists it and does it before anything else.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_child NULL), PKV_ERR_NOT_FOUND (no sequence parent),
 * PKV_ERR_STATE (parent has uncomputed tokens, is preempted or swapped out, is in the open batch,
 * or is a request of pkv_submit), PKV_ERR_NO_SPACE (no free working state slot (since 0.6.0);
 * nothing changed). */
PKV_API pkv_status pkv_fork(pkv_engine *e, uint64_t parent, uint64_t *out_child);

/* Ends a sequence: drops its block references; a block whose count reaches 0 becomes cached when
 * it holds sealed KV (reusable by later prompts), else free. The id is never valid again.
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq: never given, or released), PKV_ERR_STATE (seq is in
 * the open batch; (since 0.12.0) it is held for a transfer or receiving one: pkv_hold_end,
 * pkv_receive_end). */
PKV_API pkv_status pkv_release(pkv_engine *e, uint64_t seq);

/* Like POSIX's struct stat and stat(), the struct and the call share a name: write
 * `struct pkv_seq_info` (there is no typedef, which C would not allow next to the function). */
struct pkv_seq_info {
  uint32_t struct_size;
  uint32_t num_tokens;            /* prompt + appended (and sampled) tokens */
  uint32_t num_computed_tokens;   /* tokens whose KV is in the pool (cached ones included) */
  uint32_t num_cached_tokens;     /* tokens served by the prefix cache at the last admission */
  uint32_t num_blocks;            /* length of the block table (of each KV group's: entries a
                                     windowed group gave back count, as -1) */
  uint32_t is_preempted;          /* 1 from a preemption (pkv_preempt, or the scheduler's) until
                                     the sequence is re-admitted */
  uint32_t in_batch;              /* 1 while an open batch includes it */
  uint32_t cache_salt_len;
  /* requests of the scheduler (pkv_submit); 0 for pkv_allocate's sequences */
  uint32_t is_request;
  uint32_t num_prompt_tokens;     /* the prompt as submitted */
  uint32_t num_generated_tokens;  /* tokens sampled so far (pkv_commit) */
  uint32_t finish_reason;         /* PKV_FINISH_*: NONE while it runs */
  /* (since 0.2.0) */
  uint32_t kv_tier;               /* PKV_TIER_*: DEVICE while it holds pool blocks, HOST while
                                     swapped out, NONE when it holds no KV (waiting, preempted,
                                     finished) */
  uint32_t num_host_blocks;       /* host-tier blocks it holds while swapped out */
  /* (since 0.12.0) */
  uint32_t transfer;              /* PKV_TRANSFER_NONE, HOLDING or RECEIVING */
  uint32_t remote_first_block;    /* RECEIVING: its blocks remote_first_block ..
                                     + remote_num_blocks - 1 wait for the remote KV (the local
                                     prefix hit before them); else 0 */
  uint32_t remote_num_blocks;
  uint32_t num_remote_tokens;     /* RECEIVING: the tokens whose KV arrives; else 0 */
};

/* What seq is now.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small), PKV_ERR_NOT_FOUND
 * (no sequence seq). */
PKV_API pkv_status pkv_seq_info(pkv_engine *e, uint64_t seq, struct pkv_seq_info *out);

/* Copies the block table of seq (physical block ids, in order) into out[cap]; *out_len = its
 * length. out may be NULL when cap is 0 (to ask the length).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0; cap below the length,
 * with *out_len still written), PKV_ERR_NOT_FOUND (no sequence seq). */
PKV_API pkv_status pkv_seq_block_table(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap,
                                       uint32_t *out_len);

/* The block table of seq in KV group `group` (< pkv_kv_budget.num_kv_groups; group 0's is
 * pkv_seq_block_table's): physical block ids in token order, -1 where a windowed group gave back
 * a block no future token's window reaches. As pkv_seq_block_table otherwise.
 * Errors: PKV_ERR_INVALID_ARGUMENT (group not below the number of KV groups; out_len NULL; out
 * NULL with cap > 0; cap below the length, with *out_len still written), PKV_ERR_NOT_FOUND (no
 * sequence seq).
 * Since 0.2.0. */
PKV_API pkv_status pkv_seq_group_block_table(pkv_engine *e, uint64_t seq, uint32_t group,
                                             int32_t *out, uint32_t cap, uint32_t *out_len);

/* Copies the token ids of seq into out[cap]; *out_len = its length. As pkv_seq_block_table.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0; cap below the length,
 * with *out_len still written), PKV_ERR_NOT_FOUND (no sequence seq). */
PKV_API pkv_status pkv_seq_tokens(pkv_engine *e, uint64_t seq, int32_t *out, uint32_t cap,
                                  uint32_t *out_len);

/* ---------------------------------------------------------------- step planning */
typedef struct pkv_batch pkv_batch;

/* One forward step's plan. Memory layout (all host memory, owned by the batch, valid until
 * pkv_batch_end / pkv_batch_abort):
 *   seq_ids        [num_seqs]           the batch's sequences, in batch order
 *   query_start    [num_seqs + 1]       new tokens of seq i are rows query_start[i] .. [i+1]-1
 *   positions      [num_tokens]         position of each new token in its sequence
 *   slot_mapping   [num_tokens]         block * block_size + offset where its K/V goes; -1 = skip
 *   context_lens   [num_seqs]           tokens of context after this step (computed + new)
 *   block_indptr   [num_seqs + 1]       FlashInfer's paged form: seq i's blocks are
 *   block_indices  [block_indptr[num_seqs]]   block_indices[block_indptr[i] .. block_indptr[i+1]-1]
 *   last_block_len [num_seqs]           tokens in seq i's last listed block (1 .. block_size)
 *   block_tables   [num_seqs][max_blocks_per_seq]  the same tables padded with -1
 *   copy_src, copy_dst [num_copies]     block copies to do, in this order, before any write of
 *                                       the step: copy-on-write, and with a host tier swap-outs,
 *                                       swap-ins, offloads and loads, copy_kind (since 0.2.0)
 *   copy_kind      [num_copies]         PKV_COPY_*: COW device->device, SWAP_OUT and OFFLOAD
 *                                       device->host tier, SWAP_IN and LOAD host tier->device
 *                                       (whole blocks: every layer, K and V; pkv_pool_info gives
 *                                       both tiers' layout).
 * A copy's source block may have been given up and handed out again (a swap-out or an offload
 * frees the pool block it leaves at once, as vLLM's swap does): the copies come first, in order,
 * so each reads its source before the step writes anything; a host running its own kernels must
 * keep that order too (copies of one direction with no block in common may run together). */
typedef struct pkv_batch_view {
  uint32_t struct_size;
  uint32_t num_seqs;
  uint32_t num_tokens;
  uint32_t max_blocks_per_seq;
  uint32_t max_query_len;
  uint32_t max_context_len;
  uint32_t num_copies;
  uint32_t block_size;
  const uint64_t *seq_ids;
  const int32_t *query_start;
  const int32_t *positions;
  const int64_t *slot_mapping;
  const int32_t *context_lens;
  const int32_t *block_indptr;
  const int32_t *block_indices;
  const int32_t *last_block_len;
  const int32_t *block_tables;
  const int32_t *copy_src;
  const int32_t *copy_dst;
  const int32_t *sample_rows;     /* [num_seqs]: the row whose output is sampled (the last new
                                     token) when this step completes the sequence's tokens; -1
                                     for a chunk in the middle of a prompt */
  const int32_t *copy_kind;       /* [num_copies] PKV_COPY_* (since 0.2.0) */
  /* KV groups (since 0.2.0), DESIGN.md §12: the slot_mapping and tables above are group 0's.
   * Each group's tables have the same lengths; a windowed group's hold -1 for blocks it gave back
   * (never read: no new token's window reaches them), in group 0's block_indices too when every
   * layer is windowed. Layer l uses group layer_group[l]'s (pkv_kv_groups). */
  uint32_t num_kv_groups;
  uint32_t reserved0;
  const int64_t *group_slot_mapping;  /* [num_kv_groups][num_tokens] */
  const int32_t *group_block_tables;  /* [num_kv_groups][num_seqs][max_blocks_per_seq], -1 padded */
  /* recurrent state (since 0.6.0), DESIGN.md §13 */
  const int32_t *state_slots;     /* [num_seqs]: the slot holding sequence i's state after its
                                     computed tokens, which the step reads and updates in place
                                     (pkv_pool_info.state_base); NULL without STATE layers. A
                                     sequence whose rows start at position 0 has no state yet:
                                     its slot holds stale bytes, start from zeros */
} pkv_batch_view;

/* Plans one step: for each seqs[i], compute the next num_new_tokens[i] of its reserved, not yet
 * computed tokens (NULL num_new_tokens = all of them; each count must be 1 .. uncomputed). num_seqs
 * >= 1; the new tokens of a batch add up to at most 2^31-1. The sequences must be distinct,
 * running and not requests of pkv_submit. One batch may be open per engine at a time. While it is
 * open its sequences cannot be appended to, forked, released or preempted (those calls refuse
 * them). The batch lists every block copy queued so far (copy-on-write, swaps); they count as
 * done when it ends having run (pkv_batch_end, pkv_commit). *out is a handle, not an address: it
 * is never given twice, and once the batch ends (pkv_batch_end, pkv_commit, pkv_batch_abort,
 * pkv_engine_destroy) every call with it is refused as a batch that has ended. A process tells
 * apart the handles of at most 65536 live engines that have begun batches (pkv_step's too), and
 * gives at most 2^39 handles in all.
 * Errors: PKV_ERR_INVALID_ARGUMENT (seqs or out NULL; num_seqs 0; a sequence twice; a count not
 * in 1 .. its uncomputed tokens; more than 2^31-1 new tokens), PKV_ERR_NOT_FOUND (a sequence that
 * does not exist), PKV_ERR_STATE (a batch is open on e; a sequence is preempted or swapped out,
 * or is a request of pkv_submit; (since 0.10.0) an engine of ranks POOL),
 * PKV_ERR_OUT_OF_MEMORY (65536 other live engines have begun batches: destroy one). */
PKV_API pkv_status pkv_batch_begin(pkv_engine *e, const uint64_t *seqs,
                                   const uint32_t *num_new_tokens, uint32_t num_seqs,
                                   pkv_batch **out);

/* Points out's fields at the batch's arrays (see pkv_batch_view).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small), PKV_ERR_STATE (b
 * has ended). */
PKV_API pkv_status pkv_batch_info(const pkv_batch *b, pkv_batch_view *out);

/* Does the batch's listed copies (pkv_batch_view copy_*) now, on the engine's device, unless they
 * are done already: for hosts that run no pkv_attention but let pkv move the blocks (the first
 * pkv_attention of a batch calls it). On CUDA it returns once they are queued on the engine's
 * stream.
 * Errors: PKV_ERR_STATE (b has ended), PKV_ERR_DEVICE (CUDA: the copies could not be queued).
 * Since 0.2.0. */
PKV_API pkv_status pkv_batch_copy(pkv_batch *b);

/* The step ran: its new tokens become computed, blocks that are now full and computed are sealed
 * into the prefix cache (shareable from now on), the copies are done. Frees b on success; on
 * failure b stays open.
 * Errors: PKV_ERR_STATE (b has ended; or b came from pkv_step, which ends with pkv_commit or
 * pkv_batch_abort: b stays open). */
PKV_API pkv_status pkv_batch_end(pkv_batch *b);

/* The step did not run: nothing becomes computed; the copies go back to the queue. Frees b,
 * whichever call began it (pkv_batch_begin or pkv_step). Accepts NULL and a handle whose batch
 * has ended: it does nothing then. */
PKV_API void pkv_batch_abort(pkv_batch *b);

/* ---------------------------------------------------------------- compute */
/* One forward step's KV side for one layer, on the engine's device (CPU: host pointers; CUDA:
 * device pointers, on the engine's stream):
 *   q   [num_tokens][num_q_heads / tp_size][head_dim]     the batch's new tokens, in batch order
 *   k,v [num_tokens][kv_heads_per_rank][head_dim]        their keys and values
 *   out [num_tokens][num_q_heads / tp_size][head_dim]    written
 * all in the engine's dtype. Writes k and v into the tokens' slots of `layer` (in the cache's
 * kv_dtype: fp8 divides by the layer's scales, rounds to nearest even and saturates), then
 * computes causal attention of every new token over its sequence's whole context (cached prefix,
 * earlier chunks and the new tokens up to itself; with a sliding window w, only the keys
 * p - w + 1 .. p), GQA aware, scale softmax_scale or 1/sqrt(head_dim), reading fp8 K/V times
 * their scales and accumulating in fp32.
 * The first call of a batch (any layer) first does its listed block copies (pkv_batch_copy), all
 * layers.
 * Call it for every layer, in any order, between pkv_batch_begin and pkv_batch_end; the step's
 * plan (on CUDA: its arrays uploaded to the device) is made once, at the batch's first call.
 * layer < num_layers; q, k, v (MLA: q, k), out not NULL, and out aliases none of them. head_dim
 * is a multiple of PKV_ATTENTION_HEAD_DIM_ALIGN, at most PKV_ATTENTION_MAX_HEAD_DIM (since
 * 0.5.0: a CPU engine's PKV_ATTENTION_MAX_HEAD_DIM_CPU, a CUDA engine's
 * PKV_ATTENTION_MAX_HEAD_DIM_CUDA).
 * kv_layout MLA (since 0.3.0), the absorbed form, with W = kv_lora_rank + qk_rope_head_dim:
 *   q   [num_tokens][num_q_heads / tp_size][W]             queries projected into latent space
 *   k   [num_tokens][W]                                    the new tokens' latents (cached)
 *   v   NULL                                               (V is the latents' first kv_lora_rank)
 *   out [num_tokens][num_q_heads / tp_size][kv_lora_rank] the softmax-weighted sum of the
 *                                                          context's latents' first kv_lora_rank
 * scale softmax_scale (MLA needs it given: an engine with 0 is refused at create); every latent is
 * read once for all q heads. kv_lora_rank and qk_rope_head_dim are multiples of
 * PKV_ATTENTION_HEAD_DIM_ALIGN (qk_rope_head_dim may be 0), at most
 * PKV_ATTENTION_MAX_KV_LORA_RANK and PKV_ATTENTION_MAX_ROPE_DIM.
 * Layers described by pkv_engine_params.layer_specs (since 0.5.0) each use their own spec
 * (pkv_layer_info): q [num_tokens][q_heads][head_dim], k [num_tokens][kv_heads][head_dim], v
 * [num_tokens][kv_heads][v_head_dim] of the layer, out [num_tokens][q_heads][v_head_dim]; a k_eq_v
 * layer takes v NULL (V is K); a SHARED layer takes k and v NULL, writes nothing and attends over
 * its source layer's cache (call it after its source in the step); SLIDING masks keys older than
 * the window, CHUNKED keys before the token's chunk; a sink joins each softmax denominator once
 * (split work included), and a soft-cap c turns each scaled score s into c * tanh(s / c) before
 * the softmax. Without sinks or caps the output is what it was before 0.5.0, bit for bit.
 * (since 0.10.0) On an engine with ranks ALL, b is a rank's handle (pkv_batch_rank): the call
 * runs on that rank's pool, device and stream, with that rank's heads.
 * CUDA: q, k, v and out are device pointers aligned to 16 bytes, and the batch has at most
 * PKV_CUDA_MAX_GRID sequences. The call returns once its kernels are queued on the engine's
 * stream: the host synchronizes that stream before it reads out on the host. (since 0.9.0) pkv
 * itself neither waits on the stream nor allocates in a step within the engine's bounds
 * (max_num_seqs, max_num_batched_tokens, max_model_len): the plan goes up from pinned staging
 * memory and the copies stay queued in order before the kernels (pkv_stats.num_host_waits and
 * num_device_allocs count what it did); pkv_batch_plan_graph makes a decode step capturable in a
 * CUDA graph.
 * Errors: PKV_ERR_INVALID_ARGUMENT (layer not below num_layers; q, k, out or - except for MLA,
 * k_eq_v and SHARED layers - v NULL; v not NULL on an MLA cache or a k_eq_v layer; k or v not
 * NULL on a SHARED layer; out aliasing an input; on CUDA a pointer not 16-byte aligned, or more
 * than PKV_CUDA_MAX_GRID sequences; (since 0.10.0) the batch's own handle on an engine of
 * several ranks; (since 0.6.0) a STATE layer: the host runs its recurrence on
 * pkv_batch_view.state_slots), PKV_ERR_STATE (b has ended; a layer with sinks whose sinks
 * were not set), PKV_ERR_UNSUPPORTED (head_dim, or MLA's kv_lora_rank or qk_rope_head_dim,
 * outside the limits above), PKV_ERR_DEVICE (CUDA: a kernel or copy could not be queued). */
PKV_API pkv_status pkv_attention(pkv_batch *b, uint32_t layer, const void *q, const void *k,
                                 const void *v, void *out);

/* ------------------------------------------------------------------ ranks (since 0.10.0) */

/* The handle of rank `rank`'s share of batch b, on an engine with pkv_engine_params.ranks ALL
 * (DESIGN.md §10). The engine decided the batch once (its sequences, slots, block tables and
 * copies are the same for every rank); each rank computes its shard of every layer on its own
 * pool: pkv_attention, pkv_sparse_mla_attention, pkv_indexer_write, pkv_indexer_topk and
 * pkv_batch_plan_graph take a rank's handle, with q, k, v and out of that rank's heads (as under
 * tp_rank = rank) on its device. The first such call of a batch queues its copies on every
 * rank's pool. pkv_batch_info, pkv_batch_copy, pkv_batch_end, pkv_commit and pkv_batch_abort
 * accept a rank's handle as the batch's own: ending it ends every rank's. A rank's handle is
 * valid while b is open; calls on it are serialized with the engine's others. On an engine of one
 * rank, rank 0 gives b itself.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL; rank not below num_ranks; b a rank's handle
 * already), PKV_ERR_STATE (b has ended).
 * Since 0.10.0. */
PKV_API pkv_status pkv_batch_rank(pkv_batch *b, uint32_t rank, pkv_batch **out);

/* A step's plan as bytes (DESIGN.md §10), for the pools of other processes: the batch's view
 * (sequences, positions, query starts, context lengths, each KV group's slot mapping and block
 * tables, state slots) and its ordered copy list. fp8 scales and sinks are fixed before the
 * first sequence, so no plan carries them: each pool engine is given its own rank's
 * (pkv_set_kv_scales, pkv_set_attention_sinks) before its first import. pkv writes no
 * transport: the host carries the bytes
 * (its NCCL broadcast, shared memory, a pipe) to each rank's ranks POOL engine, which executes
 * them (pkv_plan_import). The bytes carry a version, the engine's shape (model, pool, ranks;
 * num_blocks and host_num_blocks included), a step number counting the engine's exported plans
 * from 0, and a checksum. Writes min(cap, size) bytes to out and *out_len = the plan's size: a
 * host whose cap was short calls again with a larger one (the plan is the same until the batch
 * ends). out may be NULL when cap is 0. The first export of a batch gives it its step number;
 * the batch's copies then count as queued for the pools: an aborted batch's copies are listed
 * again by the next.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0), PKV_ERR_STATE (b has
 * ended; an engine of ranks POOL, whose batches are imported).
 * Since 0.10.0. */
PKV_API pkv_status pkv_batch_export_plan(pkv_batch *b, void *out, uint64_t cap,
                                         uint64_t *out_len);

/* Opens the batch a decider exported (pkv_batch_export_plan) on e, an engine of ranks POOL
 * created with the decider's parameters and this process's tp_rank and pp_rank (num_blocks and
 * host_num_blocks given: the decider's; sequences cannot be made on it, so its fp8 scales and
 * sinks may be set until its first import). The batch runs as one of pkv_batch_begin: its copies
 * at the first compute call (or pkv_batch_copy), then pkv_attention (and the indexer's and
 * sparse MLA's calls) of the stage's layers, with this rank's heads; pkv_batch_end or
 * pkv_batch_abort ends it (the decider's batch is the one that commits). Plans are imported in
 * the order they were exported, each once: the first plan is step 0, each next one step + 1 (a
 * plan the decider aborted is followed by the next one all the same). *out is set only on
 * success; a refused plan changes nothing.
 * Errors: PKV_ERR_INVALID_ARGUMENT (plan or out NULL; bytes that are not a pkv plan, of another
 * version, damaged (the checksum), or of another engine shape: the field that differs named),
 * PKV_ERR_STATE (e is not of ranks POOL; a batch is open on e; a plan out of order: its step
 * and the one expected named).
 * Since 0.10.0. */
PKV_API pkv_status pkv_plan_import(pkv_engine *e, const void *plan, uint64_t len,
                                   pkv_batch **out);

/* ------------------------------------------------------------------ CUDA graphs (since 0.9.0) */

/* Plans a decode step for CUDA graphs (FlashInfer's plan/run split). b: a batch of
 * pkv_batch_begin or pkv_step on a CUDA engine, every sequence computing one token, not planned
 * yet (no pkv_attention of it ran); num_seqs <= bucket <= max_num_seqs. It queues on the
 * engine's stream the batch's block copies (pkv_batch_copy), then its arrays padded to bucket
 * sequences into device buffers whose addresses stay the same for the engine's life: no wait,
 * no allocation. Each pkv_attention of b then launches kernels whose arguments and grids depend
 * only on the bucket, the layer and the engine (decodes are split for max_model_len, not for the
 * batch's lengths), never on the batch: they may be captured in a CUDA graph
 * (cudaStreamBeginCapture on the engine's stream, which must not be the legacy NULL stream) and
 * the graph replayed for any later batch planned with the same bucket.
 * Between replays may change: the sequences, how many (up to bucket), their lengths (up to
 * max_model_len) and block tables, and the contents of q, k and v. May not: the bucket, the
 * layers called and their order, the q, k, v and out pointers, the stream, fp8 scales and sinks
 * (refused while sequences exist anyway). q, k, v and out hold bucket rows; rows past the
 * batch's tokens are neither read nor written. Eager batches (pkv_attention without this call)
 * may run between replays. Set max_model_len to what is served: a short context still runs the
 * grid sized for it (its idle CTAs return at once). A refused call queues nothing.
 * Errors: PKV_ERR_INVALID_ARGUMENT (bucket 0, below the batch's sequences or above
 * max_num_seqs; a sequence computing more than one token), PKV_ERR_STATE (b has ended, or is
 * planned already), PKV_ERR_UNSUPPORTED (a CPU engine; an engine with indexer layers, whose
 * top-k runs in waves sized by the batch; a bucket whose block tables pass the device memory
 * made for them at create, 64 MiB a KV group; a sequence with more blocks than max_model_len
 * allows, which only windowed layers without max_model_len make possible), PKV_ERR_DEVICE (the
 * uploads could not be queued).
 * Since 0.9.0. */
PKV_API pkv_status pkv_batch_plan_graph(pkv_batch *b, uint32_t bucket);

/* ------------------------------------------------------------- sparse attention (since 0.7.0) */
/* DeepSeek V3.2 / GLM-5's sparse attention (DESIGN.md §14) on an MLA layer with an indexer
 * (pkv_layer_spec.index_head_dim > 0), per layer per step, in pkv_attention's batch order:
 * 1. pkv_indexer_write: the new tokens' indexer keys into their slots;
 * 2. pkv_indexer_topk: each new token's index_topk best keys of its context;
 * 3. pkv_sparse_mla_attention: MLA over those keys only. pkv_attention (dense MLA) is the same
 *    attention while every context is at most index_topk tokens (the top-k is then the whole
 *    context), and it writes the latents as this call does.
 * Like pkv_attention, each call may be a batch's first (it then does the listed block copies);
 * on CUDA, pointers are device pointers aligned to 16 bytes and the calls queue their kernels on
 * the engine's stream. */
enum { PKV_INDEXER_SCALE_UE8M0 = 1 }; /* pkv_indexer_write flags: each fp8 key's scale rounded
                                         up to a power of two, 2^ceil(log2(max|x| / 448))
                                         (DeepSeek's "ue8m0" scale format) */
/* pkv_indexer_topk's out_kind: what its indices are. */
enum { PKV_TOPK_POSITIONS = 0, /* positions in the token's sequence, 0 .. p */
       PKV_TOPK_SLOTS = 1 };   /* slots of the layer's group: block id * block_size + offset
                                  (for a host's own kernels over pkv_layer_info's layout) */

/* Writes the new tokens' indexer keys k [num_tokens][index_head_dim] (the engine's dtype) into
 * their slots of `layer`. FP8_E4M3: a key x becomes the codes saturate(round_to_nearest_even(x /
 * s)) and its fp32 scale s = max|x| / 448 (vLLM's indexer_k_quant_and_cache; with flags
 * PKV_INDEXER_SCALE_UE8M0 rounded up to a power of two; 1 for a key of zeros). BF16: each value
 * rounded to nearest even. Call it for every new token before pkv_indexer_topk reads them.
 * Errors: PKV_ERR_INVALID_ARGUMENT (layer not below num_layers, or without an indexer; k NULL;
 * a flag other than PKV_INDEXER_SCALE_UE8M0; CUDA: k not 16-byte aligned), PKV_ERR_STATE (b has
 * ended), PKV_ERR_UNSUPPORTED (index_head_dim not a multiple of PKV_ATTENTION_HEAD_DIM_ALIGN or
 * past PKV_INDEXER_MAX_HEAD_DIM; CUDA: the layer's keys not 16-byte aligned in the page, as a
 * block_size that is not a multiple of 4 may leave them), PKV_ERR_DEVICE (CUDA: a kernel could
 * not be queued).
 * Since 0.7.0. */
PKV_API pkv_status pkv_indexer_write(pkv_batch *b, uint32_t layer, const void *k, uint32_t flags);

/* Each new token's top keys. For token t at position p of its sequence, with its indexer
 * queries q [num_tokens][index_n_heads][index_head_dim] (the engine's dtype) and head weights
 * [num_tokens][index_n_heads] (fp32), every key s in 0 .. p scores
 *   score(t, s) = sum over h of weights[t][h] * relu(q[t][h] . key(s))
 * with key(s) the cached key (fp8: its codes times its scale), in fp32. out [num_tokens]
 * [index_topk] gets the index_topk keys of highest score, ascending by position, then -1 in
 * the entries past p + 1 when the context is shorter (all of its keys are then kept). Ties: of
 * equal scores the lower position is kept (a NaN score ranks below every number). The keys of
 * the new tokens are read, so pkv_indexer_write comes first. out_kind PKV_TOPK_POSITIONS gives
 * positions (pkv_sparse_mla_attention takes them), PKV_TOPK_SLOTS the slots of those keys.
 * Errors: PKV_ERR_INVALID_ARGUMENT (layer not below num_layers, or without an indexer; q, weights
 * or out NULL; out_kind not PKV_TOPK_*; CUDA: a pointer not 16-byte aligned), PKV_ERR_STATE (b
 * has ended), PKV_ERR_UNSUPPORTED (index_head_dim outside pkv_indexer_write's limits, or its
 * CUDA alignment), PKV_ERR_DEVICE (CUDA: a kernel could not be queued).
 * Since 0.7.0. */
PKV_API pkv_status pkv_indexer_topk(pkv_batch *b, uint32_t layer, const void *q,
                                    const float *weights, uint32_t out_kind, int32_t *out);

/* pkv_attention's MLA form restricted to the given keys: writes the new tokens' latents k
 * [num_tokens][W] into their slots, then each new token t attends over the latents at the
 * positions indices[t][0 .. index_topk) of its sequence (pkv_indexer_topk's PKV_TOPK_POSITIONS
 * output), with q, out, scale and the fp32 softmax of pkv_attention's MLA form. Entries outside
 * 0 .. p (the token's own position; -1 is the padding) are skipped, and a position given twice
 * counts twice. A token with no key left gets out 0.
 * Errors: PKV_ERR_INVALID_ARGUMENT (as pkv_attention's MLA form; a layer without an indexer;
 * indices NULL), PKV_ERR_STATE (b has ended), PKV_ERR_UNSUPPORTED (as pkv_attention's MLA
 * form; CUDA: the layer's latents not 16-byte aligned in the page, as a block_size that is not a
 * multiple of 4 may leave them, which dense pkv_attention refuses too), PKV_ERR_DEVICE (CUDA: a
 * kernel could not be queued).
 * Since 0.7.0. */
PKV_API pkv_status pkv_sparse_mla_attention(pkv_batch *b, uint32_t layer, const void *q,
                                            const void *k, const int32_t *indices, void *out);

/* ---------------------------------------------------------------- scheduler */
/* Continuous batching on top of the calls above: pkv_submit queues a request, pkv_step picks the
 * next batch, pkv_commit appends the sampled tokens and ends it. Policy: running requests decode
 * (or continue their prompt, in chunks); waiting requests are admitted, highest priority then
 * oldest first, while max_num_seqs, max_num_batched_tokens and free blocks allow; prompt chunks
 * and decodes share a step. When a running request's next token finds no free block, the newest
 * running request is preempted (its blocks given back, its tokens kept) and re-queued first; it
 * recomputes later, its own prefix likely still cached. A finished request gives back its blocks
 * at once and keeps its tokens (pkv_seq_tokens) until pkv_release. */
typedef struct pkv_request_params {
  uint32_t struct_size;
  uint32_t max_new_tokens;        /* >= 1. default 16 */
  int32_t stop_token;             /* finishing token (it is kept); -1 = none. default -1 */
  int32_t priority;               /* larger runs first; ties run oldest first. default 0 */
  uint32_t cache_salt_len;        /* 0 .. PKV_MAX_CACHE_SALT_BYTES */
  uint32_t reserved0;             /* must be 0 */
  const void *cache_salt;         /* as pkv_seq_params.cache_salt */
  /* (since 0.5.0) a 0.4 caller's struct_size ends here: no extra keys, no adapter */
  const pkv_extra_key *extra_keys; /* as pkv_seq_params.extra_keys, inside the prompt */
  uint32_t num_extra_keys;        /* as pkv_seq_params.num_extra_keys. default 0 */
  uint32_t extra_key_size;        /* as pkv_seq_params.extra_key_size */
  uint64_t lora_id;               /* as pkv_seq_params.lora_id. default 0 */
  /* (since 0.8.0) a 0.7 caller's struct_size ends here: priority 0, plain LRU */
  int32_t cache_priority;         /* (since 0.8.0) as pkv_seq_params.cache_priority (priority
                                     above orders the queue; this orders eviction). default 0 */
  uint32_t cache_retention_ms;    /* (since 0.8.0) as pkv_seq_params.cache_retention_ms. default 0 */
  /* (since 0.12.0) a 0.11 caller's struct_size ends here: no transfers. Disaggregated prefill
     and decode, DESIGN.md §10 */
  uint32_t hold_on_finish;        /* 1: when it finishes, its blocks (and STATE working slot)
                                     stay held for a transfer out, as pkv_hold's (when the hold
                                     fits max_held_blocks; else it finishes without one:
                                     pkv_stats.num_holds_refused). default 0 */
  uint32_t hold_timeout_ms;       /* that hold's timeout: 0 = PKV_TRANSFER_TIMEOUT_DEFAULT_MS,
                                     UINT32_MAX = none. default 0 */
  uint32_t num_remote_tokens;     /* its first this many prompt tokens' KV comes from another
                                     engine (below the prompt's length: the last prompt token is
                                     computed here, for the first sample). 0 = none. default 0 */
  uint32_t reserved1;             /* must be 0 */
} pkv_request_params;

/* Fills p with the defaults above; as pkv_engine_params_init.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's 0.1 size). */
PKV_API pkv_status pkv_request_params_init(pkv_request_params *p, uint32_t size);

/* Queues a request; *out_seq is its sequence id (pkv_seq_info, pkv_seq_tokens, pkv_release).
 * rp may be NULL (defaults). A request is driven by pkv_step / pkv_commit only: pkv_append,
 * pkv_fork, pkv_preempt, pkv_resume and pkv_batch_begin refuse it. Without a sliding or chunked
 * KV group its prompt is reserved whole when it is admitted, in every KV group (as
 * pkv_allocate's). With one (since 0.8.0) it is admitted per chunk: once its prefix hit and its
 * first chunk (at most max_num_batched_tokens tokens) fit in every group, each later chunk
 * reserving its slots when pkv_step schedules it (a chunk that does not fit preempts as a decode
 * token does), so a windowed group holds at most its window plus one chunk during the prefill
 * (DESIGN.md §7). A request with num_remote_tokens (since 0.12.0) is admitted with its whole
 * prompt, and receives (pkv_drain_receiving) before it runs.
 * Errors: PKV_ERR_INVALID_ARGUMENT (prompt or out_seq NULL; num_tokens 0; a bad rp: struct_size,
 * max_new_tokens 0, reserved0, cache_salt, extra_keys (since 0.5.0), (since 0.12.0)
 * hold_on_finish not 0 or 1, num_remote_tokens not below num_tokens, reserved1; a request that
 * can never run - prompt + max_new_tokens above max_model_len or 2^31-1, or more blocks at its
 * peak than the pool has: per chunk, each group's own peak over the prefill and the decode,
 * summed (its whole prompt at once when it receives); the message says how many), PKV_ERR_STATE
 * ((since 0.10.0) an engine of ranks POOL), PKV_ERR_UNSUPPORTED ((since 0.10.0) rp's
 * cache_retention_ms not 0, or (since 0.12.0) a hold with a timeout (hold_timeout_ms not
 * UINT32_MAX), on an engine of one rank of several). */
PKV_API pkv_status pkv_submit(pkv_engine *e, const int32_t *prompt, uint32_t num_tokens,
                              const pkv_request_params *rp, uint64_t *out_seq);

/* Plans the next step over the submitted requests; *out = NULL when there is nothing to run:
 * no requests, or waiting ones that do not fit while pkv_allocate's sequences hold the blocks
 * (pkv_stats.num_waiting_requests tells them apart).
 * The batch is an ordinary one (pkv_batch_info, pkv_attention, pkv_batch_abort) that ends with
 * pkv_commit or pkv_batch_abort (pkv_batch_end refuses it).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL), PKV_ERR_STATE (a batch is open on e; (since
 * 0.10.0) an engine of ranks POOL). */
PKV_API pkv_status pkv_step(pkv_engine *e, pkv_batch **out);

/* Ends a batch of pkv_step: its tokens become computed (as pkv_batch_end), and every sequence
 * whose view.sample_rows entry is not -1 takes sampled_tokens[i] (i = its index in the batch;
 * other entries are ignored) and finishes on its stop token or its max_new_tokens. On success b
 * is freed; on failure it stays open. sampled_tokens may be NULL only when no sequence samples.
 * Errors: PKV_ERR_INVALID_ARGUMENT (sampled_tokens NULL while a sequence samples), PKV_ERR_STATE
 * (b has ended, or came from pkv_batch_begin: end it with pkv_batch_end). */
PKV_API pkv_status pkv_commit(pkv_batch *b, const int32_t *sampled_tokens);

/* Moves the ids of requests finished since the last call into out[cap]; *out_len = how many
 * were moved (at most cap; call again while it equals cap). They stay readable until released.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0). */
PKV_API pkv_status pkv_drain_finished(pkv_engine *e, uint64_t *out, uint32_t cap,
                                      uint32_t *out_len);

/* ================================================================ advanced API */
/* What a host needs once its engine runs: the config reader, the profiler, counters,
 * preemption, KV events, fp8 and streams, hashing, the store tier and diagnostics. */

/* ---------------------------------------------------------------- config reader and KV groups */
/* Fills the model-shape fields of p (num_layers, num_q_heads, num_kv_heads, head_dim, dtype,
 * max_model_len) from the text of a Hugging Face config.json (num_hidden_layers,
 * num_attention_heads, num_key_value_heads or else num_attention_heads, head_dim or else
 * hidden_size / num_attention_heads, torch_dtype or dtype, max_position_embeddings; a nested
 * "text_config" is used when the top level has no num_hidden_layers). Other fields are left as
 * they are; a failure changes nothing and names the field. json need not be NUL-terminated.
 * It also sets sliding_window (since 0.2.0): the config's window when every layer uses it
 * (Mistral), else 0 - a model that mixes windowed and full layers (Gemma 2/3, gpt-oss, Qwen with
 * max_window_layers) gets its per-layer windows from pkv_hf_config_layer_windows.
 * It also sets kv_layout, kv_lora_rank and qk_rope_head_dim (since 0.3.0): a config with
 * kv_lora_rank and qk_rope_head_dim (DeepSeek V2/V3/R1, Kimi K2) gets kv_layout MLA, num_kv_heads
 * 1 and head_dim kv_lora_rank + qk_rope_head_dim, and, when it gives qk_nope_head_dim,
 * softmax_scale: MLA's 1/sqrt(qk_nope_head_dim + qk_rope_head_dim), times mscale^2 under yarn
 * rope_scaling (mscale = 0.1 * mscale_all_dim * ln(factor) + 1 for factor > 1; (since 0.7.0)
 * read from rope_parameters, transformers 5's name, when rope_scaling is absent), as DeepSeek's
 * code scales it; any other config gets HEADS.
 * It also sets softmax_scale (since 0.5.0) where the model's is not 1/sqrt(head_dim): Gemma 2 and
 * Gemma 3 (model_type gemma2, gemma3, gemma3_text) scale by query_pre_attn_scalar^-0.5 (Gemma 3
 * 27B: 1/sqrt(168), its head_dim being 128), and (since 0.6.0) Granite (model_type granite*) by
 * attention_multiplier (Granite 4.0-H: 1/128); a config whose cache is described only per layer
 * (pkv_engine_params_from_hf_config_layers says which) is refused, never profiled as another.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or json NULL; malformed JSON; a missing or invalid field;
 * one of the MLA fields without the others; (since 0.7.0) some of index_head_dim, index_n_heads
 * and index_topk without the others, or one past pkv_layer_spec's limit; an MLA config into a p
 * whose struct_size ends before kv_layout, an older header's), PKV_ERR_UNSUPPORTED (an attention
 * pkv cannot hold, its field named: (since 0.7.0) index_topk without MLA, linear_num_key_heads /
 * linear_num_value_heads (linear attention), mamba_d_state / ssm_state_size (state-space
 * layers), each in a model_type pkv_engine_params_from_hf_config_layers does not read as
 * recurrent layers; sliding windows with MLA; (since 0.5.0) a cache that needs per-layer specs, the
 * field and pkv_engine_params_from_hf_config_layers named: sinks (model_type gpt_oss),
 * attn_logit_softcapping, global_head_dim / num_global_key_value_heads (heads per layer),
 * attention_k_eq_v, num_kv_shared_layers, attention_chunk_size (chunked local attention); (since
 * 0.6.0) recurrent layers: linear_num_value_heads (Qwen3-Next, Qwen3.5), linear_attn_config (Kimi
 * Linear), hybrid_override_pattern (Nemotron-H), mamba_n_heads (Granite 4.0-H), mamba_d_state
 * (Jamba); (since 0.7.0) sparse attention's indexer: index_topk (DeepSeek V3.2, GLM-5)). */
PKV_API pkv_status pkv_engine_params_from_hf_config(pkv_engine_params *p, const char *json,
                                                    size_t json_len);

/* Each layer's sliding window (0 = full attention) from a Hugging Face config.json, into
 * out[cap]; *out_len = num_hidden_layers. With "sliding_window" null, absent or 0 every layer is
 * full. Else, read from "layer_types" ("sliding_attention" / "full_attention"); else
 * "sliding_window_pattern" N (every Nth layer full, Gemma 3; model_type "gemma3" or
 * "gemma3_text" without it: N = 6, transformers' default); else model_type "gemma2" (windowed
 * and full layers alternate, the first windowed); else "use_sliding_window" with
 * "max_window_layers" (Qwen2: false = none; true = layers from max_window_layers, default 28,
 * on are windowed); else "sliding_window" for every layer (Mistral). out may be NULL when cap is
 * 0 (to ask the length). As pkv_engine_params_from_hf_config otherwise.
 * Errors: PKV_ERR_INVALID_ARGUMENT (json or out_len NULL; out NULL with cap > 0; malformed JSON
 * or a field as pkv_engine_params_from_hf_config refuses it; a "layer_types" entry other than
 * those two, or of a length other than num_hidden_layers; cap below num_hidden_layers, with
 * *out_len still written), PKV_ERR_UNSUPPORTED ((since 0.6.0) a model with recurrent layers,
 * as pkv_engine_params_from_hf_config refuses it: its layers are per-layer specs).
 * Since 0.2.0. */
PKV_API pkv_status pkv_hf_config_layer_windows(const char *json, size_t json_len, uint32_t *out,
                                               uint32_t cap, uint32_t *out_len);

/* Fills p as pkv_engine_params_from_hf_config does and specs[cap] with each layer of the model
 * (pkv_layer_spec, every field given, none left 0 to mean the flat field); *out_num_layers =
 * num_hidden_layers (Nemotron-H: its blocks that keep a cache, below). When the layers are not all what the flat fields say (mixed windows, sinks,
 * soft-caps, heads or widths per layer, K = V, shared layers, chunks, (since 0.7.0) an indexer),
 * p->layer_specs = specs,
 * p->layer_spec_size = spec_size, p->sliding_window 0 and p->layer_windows NULL; else
 * p->layer_specs NULL and p->layer_spec_size 0 (the flat fields describe every layer; specs are
 * filled all the same). p then points into specs: keep them while p is used. The rules, each from
 * the model's own code (transformers' modeling_*.py; src/hf_config_layers.cpp cites them):
 * - windows as pkv_hf_config_layer_windows reads them ("sliding_attention" layers);
 * - gpt-oss (model_type gpt_oss): sinks in every layer (pkv_set_attention_sinks gives them);
 * - Gemma 2 (gemma2): attn_logit_softcapping is every layer's logit_softcap
 *   (final_logit_softcapping is the host's, on the logits: not read); Gemma 2 and 3 (gemma3,
 *   gemma3_text): softmax_scale query_pre_attn_scalar^-0.5;
 * - Gemma 3n (gemma3n_text) and Gemma 4 (gemma4_text): softmax_scale 1 (their q and k are
 *   normalized); the last num_kv_shared_layers layers are SHARED, each reading the last layer
 *   before them of its own layer type; Gemma 4's "full_attention" layers have head_dim
 *   global_head_dim, and with attention_k_eq_v they keep K = V with num_global_key_value_heads
 *   kv heads;
 * - Llama 4 (llama4_text): attention_chunk_size chunks the layers that use rope
 *   (no_rope_layers[l] 1, or, with no_rope_layers empty or absent, each layer but every
 *   no_rope_layer_interval-th, default 4); or "chunked_attention" in layer_types;
 * - (since 0.6.0) hybrid models: their recurrent layers are PKV_LAYER_STATE (no attention field
 *   set), each with part 0 the conv state (channels x (kernel - 1), the model's dtype) and part 1
 *   the recurrent state, shapes this rank's under p->tp_size as given (heads and conv channels
 *   split; refused when they do not divide). The state's dtype is fp32 for Gated DeltaNet and KDA
 *   and the model's for Mamba, unless "mamba_ssm_dtype" says (Qwen3.5: float32); a host that keeps
 *   it otherwise sets state_dtype[1] itself. Qwen3-Next / Qwen3.5 (qwen3_next, qwen3_5,
 *   qwen3_5_moe): layer_types "linear_attention" / "full_attention", else every
 *   full_attention_interval-th layer (default 4) full; conv 2 * linear_num_key_heads *
 *   linear_key_head_dim + linear_num_value_heads * linear_value_head_dim channels, state
 *   linear_num_value_heads x linear_key_head_dim x linear_value_head_dim. Kimi Linear
 *   (kimi_linear): linear_attn_config.kda_layers (numbered from 1) are KDA, the others MLA; conv
 *   3 * num_heads * head_dim channels (its q, k and v convs side by side), state num_heads x
 *   head_dim x head_dim. Nemotron-H / Nemotron 3 (nemotron_h): hybrid_override_pattern's 'M'
 *   blocks are Mamba2 and '*' attention; its '-' (MLP) and 'E' (experts) blocks keep no cache and
 *   are no layer of pkv: *out_num_layers counts the M and * blocks, in order. Granite 4.0-H
 *   (granitemoehybrid): layer_types "mamba" / "attention". Mamba2: conv mamba heads * head_dim +
 *   2 * groups * d_state channels (a single group is whole on every rank), state heads x head_dim
 *   x d_state. Jamba (jamba): layer l is attention when l % attn_layer_period (8) ==
 *   attn_layer_offset (4), else Mamba1: conv mamba_expand * hidden_size channels, state that x
 *   mamba_d_state;
 * - (since 0.7.0) sparse attention, DeepSeek V3.2 (deepseek_v32) and GLM-5 (glm_moe_dsa):
 *   index_head_dim, index_n_heads and index_topk (all three) give every MLA layer those indexer
 *   fields, index_n_heads whole on every rank, and index_dtype PKV_DTYPE_FP8_E4M3 (vLLM's cache:
 *   132 bytes a token for 128 values; a host that keeps bf16 keys sets index_dtype itself).
 * spec_size is sizeof(pkv_layer_spec) as the caller compiled it (at least 48): each spec is
 * written whole, bytes pkv does not know zeroed. specs NULL with cap 0 asks the length: only
 * *out_num_layers is written. A failure changes neither p nor specs.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p, json or out_num_layers NULL; specs NULL with cap > 0;
 * spec_size below 48, or (since 0.6.0) below 88 (0.6's pkv_layer_spec) for a model with
 * recurrent layers; cap below the model's layers, with *out_num_layers still written; p's
 * struct_size ending before reserved3 (a header older than 0.5); a config
 * pkv_engine_params_from_hf_config refuses so; a layer_types entry other than
 * "sliding_attention", "full_attention" or (Llama 4) "chunked_attention"; num_kv_shared_layers
 * not below num_hidden_layers or with no earlier layer of a shared layer's type; (since 0.6.0) a
 * hybrid model's field missing or bad, named: a layer list or pattern of another length or with
 * another entry, heads not a multiple of tp_size, a state dimension past 2^24 or a part past
 * 2^40 bytes; (since 0.7.0) spec_size below 104 for a model with an indexer),
 * PKV_ERR_UNSUPPORTED (as pkv_engine_params_from_hf_config, but for the fields it reads; (since
 * 0.6.0) a sliding window in a hybrid model; (since 0.7.0) layers that reuse another's top-k:
 * indexer_types other than "full", index_topk_freq above 1, index_topk_pattern (GLM's IndexShare)).
 * Since 0.5.0. */
PKV_API pkv_status pkv_engine_params_from_hf_config_layers(pkv_engine_params *p, const char *json,
                                                           size_t json_len, pkv_layer_spec *specs,
                                                           uint32_t spec_size, uint32_t cap,
                                                           uint32_t *out_num_layers);

/* A model id for pkv_store_params.model_id from the text of a config.json: "config-sha256:"
 * and the 64 lowercase hex digits of SHA-256 of the json_len bytes as they are, into out (at
 * least PKV_HF_CONFIG_DIGEST_BYTES bytes, NUL-terminated). The text must be a config
 * pkv_engine_params_from_hf_config_layers reads (since 0.5.0), or before 0.5 one
 * pkv_engine_params_from_hf_config reads; a failure leaves out unchanged. It tells models of
 * other configs apart (other attention, vocabularies, rope) where their KV shapes are equal;
 * reformatting the file changes it (blocks are then not shared, never wrongly shared). Two
 * fine-tunes of one base model have one config: give them a weights digest or name@revision
 * instead.
 * Errors: PKV_ERR_INVALID_ARGUMENT (json or out NULL; cap below PKV_HF_CONFIG_DIGEST_BYTES; a
 * config pkv_engine_params_from_hf_config_layers refuses so), PKV_ERR_UNSUPPORTED (a config it
 * refuses so).
 * Since 0.4.0. */
PKV_API pkv_status pkv_hf_config_digest(const char *json, size_t json_len, char *out, uint32_t cap);

/* How the layers of p are grouped for the pool (DESIGN.md §12): layers with equal windows form
 * KV groups of group_layers layers each (the fewest layers any window has; a window with more is
 * split, the last of its groups padded), full-attention groups first, then by window. Each group
 * has its own block table per sequence; a block of the pool holds K and V of group_layers layers.
 * layer_group[l] and layer_slot[l] ([num_layers] each; either may be NULL): layer l's group and
 * its place in that group's blocks (its index in the pool's layer dimension, pkv_pool_info); a
 * STATE layer is in no group: UINT32_MAX for both (since 0.6.0). (since 0.10.0) With pp_size > 1
 * the slots are stage pp_rank's pool's, and a layer of another stage is in no group either;
 * group_layers is the most layers one of its blocks holds.
 * group_window[g] ([cap]; NULL when cap is 0): group g's window (0 = full). *out_num_groups =
 * how many groups; *out_group_layers (nullable) = group_layers. p is validated as by
 * pkv_engine_create.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or out_num_groups NULL; group_window NULL with cap > 0; cap
 * below the number of groups, with *out_num_groups still written; params pkv_engine_create
 * refuses so), PKV_ERR_UNSUPPORTED (windows with kv_layout MLA).
 * Since 0.2.0. */
PKV_API pkv_status pkv_kv_groups(const pkv_engine_params *p, uint32_t *layer_group,
                                 uint32_t *layer_slot, uint32_t *group_window, uint32_t cap,
                                 uint32_t *out_num_groups, uint32_t *out_group_layers);

/* One KV group of pkv_kv_groups (since 0.5.0). */
struct pkv_kv_group_info {
  uint32_t struct_size;
  uint32_t attention;             /* PKV_ATTENTION_* of its layers */
  uint32_t window;                /* their window or chunk size; 0 for FULL */
  uint32_t num_layers;            /* layers whose K and V its blocks hold */
  uint64_t bytes_per_token;       /* those layers' K and V of one token, this rank */
  uint64_t padding_bytes_per_block; /* pkv_kv_budget.block_bytes - bytes_per_token * block_size:
                                     what its blocks leave unused */
};

/* Group `group` (< the number pkv_kv_groups reports) of the layers of p, and its bytes. p is
 * validated as by pkv_engine_create.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or out NULL, or out's struct_size too small; group not
 * below the number of groups; params pkv_engine_create refuses so), PKV_ERR_UNSUPPORTED (as
 * pkv_kv_groups).
 * Since 0.5.0. */
PKV_API pkv_status pkv_kv_group_info(const pkv_engine_params *p, uint32_t group,
                                     struct pkv_kv_group_info *out);

/* ---------------------------------------------------------------- KV profiler */
struct pkv_kv_budget {
  uint32_t struct_size;
  int32_t device;                 /* the device the budget is for (AUTO resolved) */
  uint32_t source;                /* PKV_BUDGET_*: which rule decided num_blocks */
  uint32_t kv_heads_per_rank;     /* num_kv_heads / tp_size, at least 1 */
  uint64_t block_bytes;           /* 2 (K,V; 1 for the MLA latent) * group_layers * block_size *
                                     kv_heads_per_rank * head_dim * kv dtype bytes; <= 2^63-1
                                     (group_layers: below; num_layers without windows) */
  uint64_t bytes_per_token;       /* block_bytes / block_size */
  uint64_t total_bytes;           /* device (or host) memory in all */
  uint64_t used_bytes;            /* in use before pkv: measured + memory_used_bytes */
  uint64_t reserve_bytes;         /* the host's reserve, as given */
  double memory_utilization;      /* as given */
  uint64_t budget_bytes;          /* total*utilization - used - reserve, or
                                     kv_cache_bytes; 0 if negative */
  uint64_t num_blocks;            /* blocks in the pool: budget_bytes / block_bytes, or num_blocks;
                                     at most 2^31-1 and (2^63-1) / block_bytes */
  uint64_t pool_bytes;            /* num_blocks * block_bytes (K and V): <= 2^63-1 */
  uint64_t max_tokens;            /* num_blocks * block_size */
  uint64_t blocks_per_max_seq;    /* blocks one sequence of max_model_len needs (1 per KV group
                                     if no limit): with KV groups, each full group's
                                     ceil(max_model_len / block_size) plus each windowed group's
                                     min(ceil(window / block_size) + 1, ceil(max_model_len /
                                     block_size)), once the sequence has grown past its windows
                                     (a prompt is reserved whole in every group: pkv_allocate) */
  uint64_t max_seqs_at_max_model_len; /* num_blocks / blocks_per_max_seq */
  uint64_t shortfall_bytes;       /* when the budget is too small: how many more bytes are needed
                                     (past 2^64-1: PKV_ERR_INVALID_ARGUMENT instead) */
  /* the host tier (since 0.2.0), all 0 when it is off */
  uint64_t host_num_blocks;       /* host_num_blocks, or host_cache_bytes / block_bytes */
  uint64_t host_pool_bytes;       /* host_num_blocks * block_bytes: pinned (CUDA) or mapped (CPU) */
  uint64_t host_total_bytes;      /* the host memory it is taken from
                                     (MemTotal); 0 = not measured */
  uint64_t host_available_bytes;  /* of which available before pkv
                                     (MemAvailable); 0 = not measured */
  /* attention variants (since 0.2.0) */
  int32_t kv_dtype;               /* the cache's dtype (kv_dtype resolved) */
  uint32_t num_kv_groups;         /* pkv_kv_groups; 1 without windows */
  uint32_t group_layers;          /* layers one block holds (K and V): num_layers with one group */
  uint32_t padded_layers;         /* layer slots of the groups no layer fills (unequal groups):
                                     group_layers * num_kv_groups - num_layers */
  uint64_t kv_scale_bytes;        /* fp8: the K and V scales, 2 (1 for MLA) * num_layers *
                                     kv_heads_per_rank * 4 bytes, taken from the budget before the
                                     blocks; else 0 */
  /* (since 0.3.0) */
  uint32_t kv_layout;             /* PKV_KV_LAYOUT_* of the params */
  uint32_t reserved0;
  /* per-layer specs (since 0.5.0); with unequal groups block_bytes is the page every group's
     block fills, group_layers the most layers one block holds (pkv_kv_group_info has each) */
  uint32_t num_cached_layers;     /* layers with a KV cache of their own: num_layers less
                                     SHARED, and STATE (since 0.6.0) */
  uint32_t reserved1;
  uint64_t model_bytes_per_token; /* K and V of one token in every cached layer, this rank: what
                                     a token costs where every group holds it */
  uint64_t padding_bytes_per_block; /* bytes of a block that no layer of its group fills, in the
                                     group that leaves the most; 0 = no waste */
  /* recurrent state (since 0.6.0), DESIGN.md §13; 0 without STATE layers */
  uint32_t num_state_layers;
  uint32_t num_state_slots;       /* working states: max_num_seqs */
  uint32_t num_state_checkpoints; /* checkpoint slots */
  uint32_t num_host_state_slots;  /* with a host tier: max_num_seqs (swapped-out states) plus,
                                     with host_offload or a store, num_state_checkpoints
                                     (checkpoints evicted from the device, or fetched from the
                                     store); else 0 */
  uint64_t state_bytes_per_seq;   /* one slot: every STATE layer's parts, this rank */
  uint64_t state_pool_bytes;      /* (num_state_slots + num_state_checkpoints) *
                                     state_bytes_per_seq, taken from the budget before the blocks */
  uint64_t host_state_bytes;      /* num_host_state_slots * state_bytes_per_seq: host memory
                                     (pinned on CUDA) beside host_pool_bytes */
  /* ranks (since 0.10.0): with ranks ALL, every term above is the bounding rank's (one pool's
     bytes; its device's memory), num_blocks the fewest any rank holds */
  uint32_t num_ranks;             /* pools: tp_size * pp_size with ranks ALL, else 1 */
  uint32_t bounding_rank;         /* the rank whose pool holds the fewest blocks (the first of
                                     equals): the one these terms describe */
  uint32_t ranks_on_device;       /* ranks sharing the bounding rank's device (or the host):
                                     budget_bytes is 1 / ranks_on_device of what it allows */
  uint32_t reserved2;
};

/* Computes how many KV blocks fit, and why. p is validated as by pkv_engine_create. The budget
 * needs room for one sequence of max_model_len (one block when max_model_len is 0); when it has
 * not, the call fails saying how much is missing - and still fills every term of *out,
 * shortfall_bytes included. Queries the device (cudaMemGetInfo) or /proc/meminfo unless
 * memory_total_bytes is set. Allocates nothing.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or out NULL, or out's struct_size too small; params
 * pkv_engine_create refuses so; a fixed num_blocks that holds no sequence of max_model_len),
 * PKV_ERR_UNSUPPORTED (windows with kv_layout MLA; /proc/meminfo unreadable),
 * PKV_ERR_NO_DEVICE (device CUDA and no usable GPU, or a build without CUDA), PKV_ERR_DEVICE (the
 * CUDA runtime failed), PKV_ERR_OUT_OF_MEMORY (the budget holds no sequence of max_model_len, or
 * the host tier does not fit in the available host memory). */
PKV_API pkv_status pkv_profile(const pkv_engine_params *p, pkv_kv_budget *out);

/* -------------------------------------------------------- stats, pool info and the prefix cache */
typedef struct pkv_stats {
  uint32_t struct_size;
  uint32_t reserved0;
  uint64_t num_blocks;            /* blocks in the pool */
  uint64_t num_free_blocks;       /* ref count 0, cached or not: what allocation can use */
  uint64_t num_cached_blocks;     /* ref count 0 and holding sealed, reusable KV */
  uint64_t num_used_blocks;       /* ref count >= 1 */
  uint64_t num_seqs;              /* live sequences (running or preempted) */
  uint64_t num_preempted_seqs;    /* sequences holding tokens but no blocks */
  uint64_t num_prefix_nodes;      /* nodes of the prefix tree (one full block under one prefix) */
  uint64_t prefix_query_tokens;   /* prompt tokens looked up at admission (cumulative) */
  uint64_t prefix_hit_tokens;     /* of which served from the cache (cumulative) */
  uint64_t num_evictions;         /* cached blocks reused for other contents (cumulative) */
  uint64_t num_cow_copies;        /* copy-on-write copies queued (cumulative) */
  uint64_t num_preemptions;       /* sequences preempted (cumulative) */
  uint64_t num_waiting_requests;  /* submitted, not running (new, preempted or swapped out) */
  uint64_t num_running_requests;  /* submitted and holding blocks */
  uint64_t num_finished_requests; /* finished, not yet released */
  uint64_t num_scheduled_tokens;  /* new tokens planned by pkv_step (cumulative) */
  uint64_t num_steps;             /* batches returned by pkv_step (cumulative) */
  /* the host tier (since 0.2.0) */
  uint64_t num_host_blocks;       /* blocks of the host tier (0: off) */
  uint64_t num_host_free_blocks;  /* of which ref count 0, cached or not: what swap-outs and
                                     offloads can use */
  uint64_t num_swapped_seqs;      /* sequences whose KV is in the host tier (pkv_swap_out) */
  uint64_t num_swapped_out_blocks; /* device -> host block copies queued by
                                      swap-outs (cumulative) */
  uint64_t num_swapped_in_blocks; /* host -> device block copies queued by swap-ins (cumulative) */
  uint64_t num_swap_preemptions;  /* of num_preemptions, by swapping (preemption_mode) */
  uint64_t num_host_cached_blocks; /* of num_host_free_blocks, holding an offloaded prefix block */
  uint64_t device_hit_tokens;     /* of prefix_hit_tokens, served by pool blocks (cumulative) */
  uint64_t host_hit_tokens;       /* of prefix_hit_tokens, served by host-tier blocks: loaded
                                     back, not recomputed (cumulative) */
  uint64_t num_offloaded_blocks;  /* evicted pool blocks copied to the host tier (cumulative) */
  uint64_t num_loaded_blocks;     /* host-tier blocks copied back into the pool (cumulative): by
                                     prefix hits (with KV groups, one per group that loads a
                                     position) and (since 0.8.0) by pkv_truncate's take-back */
  uint64_t num_host_evictions;    /* offloaded blocks dropped from the host tier (cumulative) */
  /* the store tier (since 0.2.0); blocks unless said otherwise, cumulative. (since 0.6.0) With
     STATE layers, checkpoints of the state are values too: counted in lookups, hits, misses,
     rejected, errors and puts beside the blocks */
  uint64_t store_hit_tokens;      /* of prefix_hit_tokens, fetched from the store */
  uint64_t num_store_lookups;     /* blocks asked of the store after the prefix tree stopped */
  uint64_t num_store_hits;        /* of which fetched, verified and used */
  uint64_t num_store_misses;      /* of which the store did not hold */
  uint64_t num_store_rejected;    /* of which held but failing a check (header, fingerprint, key,
                                     tokens, size or checksum): never used */
  uint64_t num_store_errors;      /* of which lost to a store error or a timeout */
  uint64_t num_store_puts;        /* blocks written to the store */
  uint64_t num_store_put_dropped; /* blocks not written: the write queue was full */
  uint64_t num_store_put_errors;  /* blocks not written: the store failed (full disk,
                                     server gone) */
  uint64_t num_loading_requests;  /* submitted requests whose prefix is being fetched from the store
                                     (counted in num_waiting_requests); pkv_step admits them when
                                     their fetch is back, and waits for it when nothing else runs */
  /* recurrent state (since 0.6.0), DESIGN.md §13; 0 without STATE layers */
  uint64_t num_state_checkpoints_held; /* checkpoint slots holding a state now */
  uint64_t num_state_checkpoints_taken; /* states copied into a checkpoint slot at a block
                                          boundary (cumulative) */
  uint64_t num_state_checkpoint_evictions; /* checkpoints dropped: for room, or with the last
                                              copy of their block (cumulative) */
  uint64_t num_state_restores;    /* admissions that started from a checkpoint (cumulative) */
  uint64_t state_fallback_tokens; /* prompt tokens whose KV was cached but were recomputed: no
                                     checkpoint at that boundary (cumulative; 0 under policy
                                     NONE, which serves no hits at all) */
  uint64_t num_host_state_checkpoints_held; /* host state slots holding an offloaded
                                               checkpoint now */
  uint64_t num_state_checkpoints_offloaded; /* checkpoints evicted from the device and copied to a
                                               host state slot (cumulative) */
  uint64_t num_state_restores_from_host; /* of num_state_restores, from an offloaded checkpoint
                                            (cumulative) */
  /* retention (since 0.8.0): pins now, and num_evictions split by the priority a block had when
     evicted (after its retention decayed): the four sum to num_evictions */
  uint64_t num_pinned_blocks;     /* (since 0.8.0) pool blocks held by pins (counted once each) */
  uint64_t num_pins;              /* (since 0.8.0) pins of pkv_cache_pin not yet unpinned */
  uint64_t num_evictions_low;     /* (since 0.8.0) priority PKV_CACHE_PRIORITY_MIN (cumulative) */
  uint64_t num_evictions_normal;  /* (since 0.8.0) priority 0 (cumulative) */
  uint64_t num_evictions_high;    /* (since 0.8.0) priority 1 (cumulative) */
  uint64_t num_evictions_highest; /* (since 0.8.0) priority PKV_CACHE_PRIORITY_MAX (cumulative) */
  /* the CUDA step path (since 0.9.0), DESIGN.md §6; 0 on a CPU engine */
  uint64_t num_host_waits;        /* (since 0.9.0) times pkv waited for the device (cumulative):
                                     pkv_engine_set_stream, blocks read back for the store, the
                                     host tier touched behind queued copies, a staging slot still
                                     in use (the device three steps behind); none in a step
                                     without a store */
  uint64_t num_device_allocs;     /* (since 0.9.0) device and pinned allocations after create
                                     (cumulative): only a step past the bounds the engine was
                                     made for (max_num_seqs, max_num_batched_tokens,
                                     max_model_len) grows a buffer */
  /* KV transfers (since 0.12.0), DESIGN.md §10 */
  uint64_t num_held_seqs;         /* sequences holding their blocks for a transfer out, now */
  uint64_t num_held_blocks;       /* their block references, now (<= max_held_blocks) */
  uint64_t num_holds_done;        /* holds ended by pkv_hold_end DONE (cumulative) */
  uint64_t num_holds_failed;      /* ... by pkv_hold_end FAILED (cumulative) */
  uint64_t num_holds_timed_out;   /* ... by their timeout (cumulative) */
  uint64_t num_holds_refused;     /* hold_on_finish requests that finished without a hold:
                                     max_held_blocks was reached (cumulative) */
  uint64_t num_receiving_requests; /* requests waiting for their remote KV, now */
  uint64_t num_receiving_blocks;  /* the blocks they wait for, now */
  uint64_t num_receives_done;     /* remote fills ended DONE (cumulative) */
  uint64_t num_receives_failed;   /* ... ended FAILED or FAILED_FINISH (cumulative) */
  uint64_t received_tokens;       /* tokens whose KV arrived by remote fills (cumulative) */
} pkv_stats;

/* The engine's counters now.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small). */
PKV_API pkv_status pkv_engine_stats(pkv_engine *e, pkv_stats *out);

/* Where the pool is, so a host can run its own kernels on it. Each of K and V is
 * [num_layers][num_blocks][block_size][kv_heads][head_dim] (NHD), contiguous; strides are in
 * elements. With KV groups (windows), num_layers is the pool's layer dimension, group_layers
 * (pkv_kv_budget): layer l's K of block b (a block of its group's tables) starts
 * layer_slot[l] * layer_stride + b * block_stride elements into k_base (pkv_kv_groups). dtype is
 * the pool's element type: the kv dtype. Like struct pkv_seq_info, the struct shares its name
 * with the call. kv_layout MLA: k_base holds the latents (kv_heads 1, head_dim the latent's
 * width) and there is no V: v_base and host_v_base are NULL, pool_bytes = bytes_per_pool. */
struct pkv_pool_info {
  uint32_t struct_size;
  int32_t device;                 /* PKV_DEVICE_CPU or PKV_DEVICE_CUDA */
  int32_t dtype;
  uint32_t num_layers;
  uint32_t num_blocks;
  uint32_t block_size;
  uint32_t kv_heads;              /* per rank */
  uint32_t head_dim;
  void *k_base;
  void *v_base;
  uint64_t layer_stride;          /* num_blocks * block_stride */
  uint64_t block_stride;          /* block_size * token_stride */
  uint64_t token_stride;          /* kv_heads * head_dim */
  uint64_t head_stride;           /* head_dim */
  uint64_t bytes_per_pool;        /* bytes of K (and of V): num_layers * layer_stride * dtype bytes;
                                     2 * bytes_per_pool = pkv_kv_budget.pool_bytes <= 2^63-1, so
                                     every offset fits in int64 */
  /* the host tier (since 0.2.0): the same layout with host_num_blocks blocks, in host memory
     (pinned on CUDA); NULL bases and 0 when it is off. (since 0.9.0) On CUDA the copies to and
     from it run on the engine's stream without a wait: a host that reads or writes it itself
     synchronizes that stream first */
  void *host_k_base;
  void *host_v_base;
  uint64_t host_num_blocks;
  uint64_t host_layer_stride;     /* host_num_blocks * block_stride */
  uint64_t host_bytes_per_pool;   /* bytes of K (and of V) of the host tier */
  /* (since 0.2.0) */
  int32_t model_dtype;            /* the model's dtype: pkv_attention's q, k, v and out */
  uint32_t num_kv_groups;         /* pkv_kv_groups; 1 without windows */
  /* (since 0.2.0) the attention kernels this engine runs, a static string: on the CPU the
     instruction-set variant picked by CPUID at run time ("avx512-bf16", "avx512", "avx2",
     "baseline"; the environment variable PKV_CPU_ISA forces one the CPU has); "cuda" */
  const char *kernels;
  /* recurrent state (since 0.6.0), DESIGN.md §13: num_state_slots slots of state_slot_bytes in
     the engine's device memory, slot s at state_base + s * state_slot_bytes (working states and
     checkpoints alike: pkv_batch_view.state_slots); each STATE layer's parts where
     pkv_layer_info says. NULL and 0 without STATE layers */
  void *state_base;
  uint64_t state_slot_bytes;
  uint32_t num_state_slots;       /* pkv_kv_budget's num_state_slots + num_state_checkpoints */
  uint32_t reserved1;
  /* (since 0.6.0) with STATE layers and a host tier: num_host_state_slots (pkv_kv_budget's)
     slots of state_slot_bytes at host_state_base, in host memory (pinned on CUDA). Host slots
     0 .. max_num_seqs-1 hold swapped-out sequences' states, the rest checkpoints offloaded from
     the device or fetched from the store; PKV_COPY_STATE_OUT / _IN move states between the two.
     NULL and 0 otherwise */
  void *host_state_base;
  uint32_t num_host_state_slots;
  uint32_t reserved2;
  /* (since 0.10.0) */
  uint32_t rank;                  /* the rank whose pool this is (pkv_rank_pool_info):
                                     pp_rank * tp_size + tp_rank */
  uint32_t num_ranks;             /* pools the engine holds (ranks ALL: tp_size * pp_size; else
                                     1) */
  int32_t device_id;              /* CUDA: the rank's device; CPU: -1 */
  uint32_t tp_rank;               /* its head shard */
  uint32_t pp_rank;               /* its pipeline stage */
  uint32_t first_layer;           /* the stage's layers: first_layer .. end_layer - 1 (every
                                     layer without pipeline stages); the pool holds theirs only */
  uint32_t end_layer;
  uint32_t reserved3;
};

/* Where e's pool is, and its layout. Layers of equal bytes (every engine without layer_specs,
 * and specs whose cached layers store the same K and V shape) keep this layout. Layers that
 * differ (pkv_layer_info) share one pool (since 0.5.0) of num_blocks pages of
 * pkv_kv_budget.block_bytes: then num_layers is 1, k_base the first page, v_base NULL,
 * block_stride the page in elements, layer_stride, token_stride and head_stride 0,
 * bytes_per_pool the whole pool; each layer's K and V are where pkv_layer_info says.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small). */
PKV_API pkv_status pkv_pool_info(pkv_engine *e, struct pkv_pool_info *out);

/* ------------------------------------------------------ block descriptors (since 0.11.0) */
/* One contiguous piece of KV: base (device memory on a CUDA pool, host memory for the host tier
 * and a CPU pool) and its bytes. A transport registers the pools once (pkv_pool_info's bases
 * and bytes_per_pool, host_* for the host tier) and moves blocks by their segments. */
typedef struct pkv_segment {
  void *base;
  uint64_t bytes;
} pkv_segment;

/* The segments holding the KV of blocks[num_blocks], ids of `tier` (PKV_TIER_DEVICE: the pool;
 * PKV_TIER_HOST: the host tier), on rank `rank` (0 on an engine of one rank): for each block in
 * order, each of its pool's layers (pkv_pool_info.num_layers: a KV group's layer slots; 1 for a
 * paged pool, whose block is one page), K then V (MLA: the latent alone): num_layers x 2 (or 1)
 * segments a block, the same count for every block of an engine (block_layout PAGE: one).
 * Writes them to out[cap] and *out_len = their count (out NULL and cap 0: the count alone). Two
 * engines of equal layout fingerprints (pkv_layout_fingerprint) give segments of equal bytes in
 * the same order, so a block is moved by copying segment i to
 * segment i. pkv's own copies to and from the host tier may be queued on the engine's stream:
 * wait for it before moving host-tier bytes.
 * Errors: PKV_ERR_INVALID_ARGUMENT (blocks NULL with num_blocks > 0; out_len NULL; out NULL with
 * cap > 0; cap below the count, with *out_len still written; tier not DEVICE or HOST, or HOST on
 * an engine without a host tier; a block id outside the tier; rank not below the engine's
 * ranks).
 * Since 0.11.0. */
PKV_API pkv_status pkv_block_segments(pkv_engine *e, uint32_t rank, uint32_t tier,
                                      const int32_t *blocks, uint32_t num_blocks,
                                      pkv_segment *out, uint32_t cap, uint32_t *out_len);

/* The segments of sequence seq's blocks first_block .. first_block + num_blocks - 1 (a running
 * sequence's; (since 0.12.0) a held or receiving one's too)
 * (block i holds its tokens i * block_size ..), on rank `rank`: for each block index in order,
 * each KV group in order, that group's block's segments as pkv_block_segments gives them. A
 * block a windowed group gave back (-1 in its table) gives as many segments of base NULL and
 * bytes 0, so two engines of one layout list each token range at the same positions. The range
 * must lie within the sequence's blocks (pkv_seq_info.num_blocks).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0; cap below the count,
 * with *out_len still written; a range past the sequence's blocks; rank not below the engine's
 * ranks), PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq holds no blocks of the pool:
 * waiting, preempted, swapped out or finished).
 * Since 0.11.0. */
PKV_API pkv_status pkv_seq_segments(pkv_engine *e, uint32_t rank, uint64_t seq,
                                    uint32_t first_block, uint32_t num_blocks, pkv_segment *out,
                                    uint32_t cap, uint32_t *out_len);

/* Rank `rank`'s layout fingerprint: 32 bytes of SHA-256 over everything that decides what a
 * block's segments hold and where - the model's shape and dtypes, fp8 scales, the block size,
 * every layer's spec, window, KV group and slot, the pool's layers and bytes per block, the
 * ranks (tp and pp size, this rank's tp_rank and pp_rank) - and not over how many blocks either
 * tier has. Engines of equal fingerprints can move blocks segment by segment; a transport
 * compares them at its handshake and refuses a mismatch.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL; rank not below the engine's ranks).
 * Since 0.11.0. */
PKV_API pkv_status pkv_layout_fingerprint(pkv_engine *e, uint32_t rank, uint8_t *out);

/* -------------------------------------------- KV transfers between engines (since 0.12.0) */
/* Disaggregated prefill and decode (DESIGN.md §10): a producer engine holds a finished
 * sequence's blocks while a transport reads them (pkv_seq_segments), and a consumer engine admits
 * a request whose first tokens' KV arrives from it into blocks it reserved, then runs it. pkv
 * moves no bytes itself: the host's transport does, between engines of equal
 * pkv_layout_fingerprint. */

/* Holds pkv_allocate sequence seq for a transfer out: it stops running and keeps its blocks (and
 * its STATE working slot) untouched until pkv_hold_end, its timeout (timeout_ms after this call;
 * 0 = PKV_TRANSFER_TIMEOUT_DEFAULT_MS, UINT32_MAX = none; read from the engine's clock once per
 * call) or pkv_engine_destroy. Then it is finished: it holds nothing, and pkv_release ends it.
 * Meanwhile pkv_seq_segments and pkv_seq_state_segment give its bytes, its sealed blocks stay in
 * the prefix cache (other sequences may share them), and pkv_release refuses it. A request of
 * pkv_submit holds when it finishes instead (pkv_request_params.hold_on_finish).
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is not running, is in the open
 * batch, has uncomputed tokens, or is a request), PKV_ERR_NO_SPACE (its blocks would pass
 * max_held_blocks; nothing changed), PKV_ERR_UNSUPPORTED (a timeout other than UINT32_MAX on an
 * engine of one rank of several: its ranks' clocks could disagree).
 * Since 0.12.0. */
PKV_API pkv_status pkv_hold(pkv_engine *e, uint64_t seq, uint32_t timeout_ms);

/* Ends seq's hold (the transport is done with its bytes): outcome PKV_TRANSFER_DONE or
 * PKV_TRANSFER_FAILED (counted apart: pkv_stats.num_holds_done, num_holds_failed). Its blocks go
 * back (sealed ones stay cached, its retention applies) and it is finished.
 * Errors: PKV_ERR_INVALID_ARGUMENT (outcome not DONE or FAILED), PKV_ERR_NOT_FOUND (no sequence
 * seq), PKV_ERR_STATE (seq holds nothing for a transfer: never held, or the hold ended or timed
 * out).
 * Since 0.12.0. */
PKV_API pkv_status pkv_hold_end(pkv_engine *e, uint64_t seq, uint32_t outcome);

/* Moves the ids of requests that began receiving since the last call into out[cap]; *out_len =
 * how many (call again while it equals cap). A request of num_remote_tokens N is admitted by
 * pkv_step as any other, its whole prompt reserved; when its local prefix hit covers fewer than
 * N tokens it waits, RECEIVING, instead of running: pkv_seq_info gives the blocks whose KV must
 * arrive (remote_first_block, remote_num_blocks), pkv_seq_segments their segments and, with
 * STATE layers, pkv_seq_state_segment where the recurrent state after N tokens goes. The copies
 * queued before it (on CUDA: on the engine's stream) were done by that pkv_step: once the stream
 * reached them, the transport may write. A hit that covers N admits it as an ordinary request:
 * it is never listed. The scheduler runs other requests meanwhile; a receiving request is never
 * preempted, and pkv_release refuses it until pkv_receive_end.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0).
 * Since 0.12.0. */
PKV_API pkv_status pkv_drain_receiving(pkv_engine *e, uint64_t *out, uint32_t cap,
                                       uint32_t *out_len);

/* Ends receiving request seq's remote fill. PKV_TRANSFER_DONE: its first num_remote_tokens tokens
 * are computed, their full blocks sealed into the prefix cache as a step's would be (KV events,
 * the store's write-through, STATE checkpoints alike), and it runs on from there at the next
 * pkv_step. PKV_TRANSFER_FAILED: nothing the transfer wrote is used - its blocks go back (those
 * past its prefix hit unsealed, the hit's still cached) and it waits to be admitted again,
 * computing its prompt itself.
 * PKV_TRANSFER_FAILED_FINISH: it gives everything back and finishes
 * (PKV_FINISH_TRANSFER_FAILED; pkv_drain_finished lists it).
 * Errors: PKV_ERR_INVALID_ARGUMENT (outcome not a PKV_TRANSFER_*), PKV_ERR_NOT_FOUND (no
 * sequence seq), PKV_ERR_STATE (seq is not receiving).
 * Since 0.12.0. */
PKV_API pkv_status pkv_receive_end(pkv_engine *e, uint64_t seq, uint32_t outcome);

/* Where sequence seq's recurrent state is on rank `rank`: its STATE working slot
 * (pkv_pool_info.state_slot_bytes at state_base + slot * state_slot_bytes), while it is running,
 * held or receiving. An engine without STATE layers gives {NULL, 0}: it has no state to move.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL; rank not below the engine's ranks),
 * PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq holds no working slot: waiting,
 * preempted, swapped out or finished).
 * Since 0.12.0. */
PKV_API pkv_status pkv_seq_state_segment(pkv_engine *e, uint32_t rank, uint64_t seq,
                                         pkv_segment *out);

/* ------------------------------------------------ the UCX transfer agent (since 0.12.0) */
/* An agent moves KV between engines in different processes over UCX (libucx: a meson feature,
 * `-Ducx=enabled`; a build without it refuses pkv_agent_create with PKV_ERR_UNSUPPORTED). Each
 * engine (rank) that takes part has one agent; agents connect by address ("host:port", TCP for
 * the connection; UCX picks shared memory or the network for the bytes) and check each other's
 * pkv_layout_fingerprint at the handshake. A consumer's agent pulls a producer's held sequence
 * (pkv_hold, hold_on_finish) into one of its receiving requests (num_remote_tokens) with
 * one-sided reads, then ends both: pkv_receive_end DONE here and pkv_hold_end DONE there. A pull
 * that cannot finish - the peer gone or unreachable, its sequence not held (any more), its
 * blocks not the ones needed, the timeout - ends the receiving request with params.on_failure
 * and the hold FAILED, once no read is in flight: nothing half-written is used, nothing is held
 * forever. Pools in host memory (CPU engines) are read in place; CUDA engines are refused for
 * now (Debian's UCX has no CUDA support; their pools would go through host memory). Calls on an
 * agent are serialized by it; the engine must outlive its agent. The agent's thread (or, without
 * it, pkv_agent_connect and pkv_agent_progress) moves things along; pkv_agent_progress reports
 * the pulls that ended. */
typedef struct pkv_agent pkv_agent;

typedef struct pkv_agent_params {
  uint32_t struct_size;
  uint32_t rank;                  /* the engine's rank whose pool it moves. default 0 */
  const char *listen_address;     /* "ipv4:port" it accepts peers on (port 0: a free one,
                                     pkv_agent_address says which); NULL: none, it only
                                     connects. default "127.0.0.1:0" */
  uint32_t timeout_ms;            /* a handshake or a pull taking longer fails. default 30000 */
  uint32_t on_failure;            /* a failed pull's receiving request: PKV_TRANSFER_FAILED (it
                                     computes its prompt) or PKV_TRANSFER_FAILED_FINISH.
                                     default FAILED */
  uint64_t max_inflight_bytes;    /* reads in flight at once, over all pulls (at least one
                                     segment's). default 64 MiB */
  uint32_t progress_thread;       /* 1: a thread of the agent's own moves things along (answers
                                     peers, completes reads) between the host's calls, so a
                                     producer busy computing answers at once; 0: only
                                     pkv_agent_connect and pkv_agent_progress do. default 1 */
  uint32_t reserved0;             /* must be 0 */
} pkv_agent_params;

/* Fills p with the defaults above; as pkv_engine_params_init.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's 0.12 size).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_params_init(pkv_agent_params *p, uint32_t size);

/* An agent for rank p->rank of e (p NULL: the defaults), listening when p->listen_address is
 * given. It registers the rank's pool (and host tier and state slots) with UCX once.
 * Errors: PKV_ERR_INVALID_ARGUMENT (e or out NULL; a bad p: struct_size, rank, an address that
 * is not ipv4:port, on_failure, max_inflight_bytes 0, progress_thread not 0 or 1, reserved0),
 * PKV_ERR_UNSUPPORTED (a build without UCX;
 * a CUDA engine), PKV_ERR_DEVICE (UCX failed: the address cannot be listened on, memory cannot
 * be registered; the message has UCX's).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_create(pkv_engine *e, const pkv_agent_params *p, pkv_agent **out);

/* Ends the agent and frees it: every pull in flight fails first (as above, after its reads are
 * cancelled), then its peers are disconnected (after what was sent to them went out, a second
 * at most). Frees a; NULL is ignored.
 * Since 0.12.0. */
PKV_API void pkv_agent_destroy(pkv_agent *a);

/* The address it listens on, "ipv4:port" (a NUL-terminated string in out[cap]).
 * Errors: PKV_ERR_INVALID_ARGUMENT (a or out NULL; cap too small), PKV_ERR_STATE (it does not
 * listen).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_address(pkv_agent *a, char *out, uint32_t cap);

/* Connects to the agent listening at address and waits for the handshake (up to timeout_ms):
 * *out_peer names the peer in pkv_agent_pull. A peer whose layout fingerprint differs is
 * refused on both sides.
 * Errors: PKV_ERR_INVALID_ARGUMENT (a, address or out_peer NULL; an address not ipv4:port; the
 * fingerprints differ: the message says where), PKV_ERR_DEVICE (no connection: nobody listens
 * there, the handshake timed out, UCX failed).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_connect(pkv_agent *a, const char *address, uint32_t *out_peer);

/* Starts pulling peer's held sequence remote_seq into local_seq, a receiving request of this
 * agent's engine (its blocks remote_first_block .. + remote_num_blocks - 1, and with STATE
 * layers its state). It ends in pkv_agent_progress, which reports it.
 * Errors: PKV_ERR_INVALID_ARGUMENT (a NULL; no peer `peer`), PKV_ERR_NOT_FOUND (no sequence
 * local_seq), PKV_ERR_STATE (local_seq is not receiving, or a pull into it is in flight; the
 * peer is gone).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_pull(pkv_agent *a, uint32_t peer, uint64_t remote_seq,
                                  uint64_t local_seq);

/* One pull's end (pkv_agent_progress). */
typedef struct pkv_agent_completion {
  uint64_t seq;      /* this engine's sequence: the receiving request (served 0), or the held
                        sequence a peer pulled (served 1) */
  uint32_t outcome;  /* PKV_TRANSFER_DONE, or how it failed (on_failure here; FAILED served) */
  uint32_t served;
  uint64_t bytes;    /* bytes read */
} pkv_agent_completion;

/* Moves things along: accepts peers, answers their pulls, issues and completes reads, ends
 * pulls (pkv_receive_end / pkv_hold_end on the engine, under its lock), and fails those past
 * their timeout. Waits up to wait_ms for something to happen (0: returns at once). The pulls
 * that ended go to out[cap] (*out_len of them; more wait for the next call).
 * Errors: PKV_ERR_INVALID_ARGUMENT (a or out_len NULL; out NULL with cap > 0).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_progress(pkv_agent *a, uint32_t wait_ms, pkv_agent_completion *out,
                                      uint32_t cap, uint32_t *out_len);

typedef struct pkv_agent_stats {
  uint32_t struct_size;
  uint32_t num_peers;             /* connected now */
  uint64_t pulls_in_flight;       /* this agent's, now */
  uint64_t pulls_done;            /* cumulative, as are the rest */
  uint64_t pulls_failed;
  uint64_t served_done;           /* peers' pulls of this engine's holds */
  uint64_t served_failed;
  uint64_t bytes_pulled;          /* read by this agent's pulls (as each read completes) */
  uint64_t bytes_served;          /* read by peers from this engine (as their pulls end) */
  uint64_t fingerprint_mismatches; /* handshakes refused */
  uint64_t read_ns;               /* wall time with a read of this agent's in flight, as the
                                     agent saw it (cumulative): bytes_pulled / read_ns is the
                                     pulls' read rate */
} pkv_agent_stats;

/* The agent's counters now.
 * Errors: PKV_ERR_INVALID_ARGUMENT (a or out NULL, or out's struct_size too small).
 * Since 0.12.0. */
PKV_API pkv_status pkv_agent_stats_get(pkv_agent *a, pkv_agent_stats *out);

/* Rank `rank`'s pool (pkv_engine_params.ranks ALL): as pkv_pool_info, on that rank's device.
 * pkv_pool_info is rank 0's.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small; rank not below
 * num_ranks).
 * Since 0.10.0. */
PKV_API pkv_status pkv_rank_pool_info(pkv_engine *e, uint32_t rank, struct pkv_pool_info *out);

/* One layer of the pool (since 0.5.0): its spec resolved, and where its K and V are, for hosts
 * that run their own kernels on models whose layers differ. Layer l's K of token t of block b
 * (a block of its group's tables), kv head h, is k_base + b * block_stride + t * token_stride +
 * h * head_stride elements of the pool's dtype; V likewise from v_base (with its own widths). */
struct pkv_layer_info {
  uint32_t struct_size;
  uint32_t kind;                  /* PKV_LAYER_* */
  uint32_t attention;             /* PKV_ATTENTION_* */
  uint32_t window;                /* window or chunk size; 0 for FULL */
  uint32_t group;                 /* its KV group (a SHARED layer: its source's; a STATE
                                     layer: UINT32_MAX, none (since 0.6.0)) */
  uint32_t source_layer;          /* the layer whose cache it reads: itself, or a SHARED
                                     layer's source */
  uint32_t kv_heads;              /* per rank */
  uint32_t head_dim;              /* K's values per head */
  uint32_t v_head_dim;            /* V's values per head (and pkv_attention's out) */
  uint32_t k_eq_v;                /* 1: v_base == k_base (also for MLA: V is the latent's first
                                     v_head_dim values) */
  uint32_t sinks;                 /* 1: the layer has attention sinks */
  float logit_softcap;            /* 0 = none */
  float softmax_scale;            /* resolved: the scale pkv_attention uses */
  uint32_t reserved0;
  void *k_base;                   /* block 0 of its K in the pool */
  void *v_base;                   /* block 0 of its V */
  uint64_t block_stride;          /* elements between blocks */
  uint64_t token_stride;          /* elements between tokens: kv_heads * head_dim (K), and for V
                                     kv_heads * v_head_dim, v_token_stride */
  uint64_t v_token_stride;
  uint64_t head_stride;           /* K's head_dim; V's heads are v_head_dim apart */
  void *host_k_base;              /* the host tier's, with the same strides; NULL when off */
  void *host_v_base;
  /* (since 0.6.0) a STATE layer (k_base, v_base and the strides above NULL and 0): part i of slot
     s's state is state_bytes[i] bytes at pkv_pool_info.state_base + s * state_slot_bytes +
     state_offset[i], a dense array of state_shape[i] of state_dtype[i]; 0 bytes: no such part */
  uint64_t state_offset[PKV_MAX_STATE_PARTS];
  uint64_t state_bytes[PKV_MAX_STATE_PARTS];
  uint32_t state_dtype[PKV_MAX_STATE_PARTS];
  uint32_t state_shape[PKV_MAX_STATE_PARTS * PKV_MAX_STATE_DIMS];
  /* (since 0.7.0) an MLA layer with an indexer (pkv_layer_spec.index_*; else 0 and NULL). Its
     pages (the pool is paged: pkv_pool_info) hold per layer, after the block's block_size
     latents, the block's block_size indexer keys of index_head_dim values of index_dtype, then
     (FP8_E4M3) their block_size fp32 scales. Key of token t of block b: index_base +
     b * index_block_bytes + t * index_head_dim * (1 or 2) bytes; its scale (FP8_E4M3, a key
     means its codes times it): index_scale_base + b * index_block_bytes + 4 * t bytes */
  uint32_t index_head_dim;
  uint32_t index_dtype;           /* PKV_DTYPE_FP8_E4M3 or PKV_DTYPE_BF16 */
  uint32_t index_n_heads;
  uint32_t index_topk;
  uint64_t index_block_bytes;     /* bytes between blocks: the page */
  void *index_base;
  void *index_scale_base;         /* NULL for BF16 */
  void *host_index_base;          /* the host tier's, with the same strides; NULL when off */
  void *host_index_scale_base;
};

/* Layer `layer` (< num_layers) of e's pool.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small; layer not below
 * num_layers).
 * Since 0.5.0. */
PKV_API pkv_status pkv_layer_info(pkv_engine *e, uint32_t layer, struct pkv_layer_info *out);

/* Evicts every cached (ref-0) block from the prefix cache, in the pool and in the host tier: the
 * host tier's offloaded blocks are dropped too (a write-back store is written as on any host-tier
 * eviction; the store itself keeps its blocks). Blocks in use stay, and so do swapped-out
 * sequences' host blocks, and pinned blocks (pkv_cache_pin: a pin holds them as a sequence
 * does). Queues PKV_EVENT_ALL_CLEARED when the cache ends empty, else a REMOVED event per node
 * that went.
 * Errors: PKV_ERR_STATE (a batch is open on e). */
PKV_API pkv_status pkv_reset_prefix_cache(pkv_engine *e);

/* Gives the pool blocks the prefix cache holds of a token prefix (its full blocks, under sp's
 * salt, adapter and extra keys, in every KV group; sp may be NULL) an eviction priority and
 * retention, as cache_priority and cache_retention_ms of pkv_seq_params mean them. Cached blocks
 * move to their place in eviction order at once, as if released now (the retention counts from
 * this call); blocks in use keep it for their release, where the higher of it and the releasing
 * sequence's priority wins. Host-tier copies are not changed (the host tier is plain LRU).
 * *out_num_blocks (nullable) is the count of blocks given it. Events and the store are unchanged.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens NULL; num_tokens 0, above max_model_len or above
 * 2^31-1; priority outside PKV_CACHE_PRIORITY_MIN .. PKV_CACHE_PRIORITY_MAX; a bad sp; nothing
 * changed), PKV_ERR_STATE (a batch is open on e), PKV_ERR_UNSUPPORTED ((since 0.10.0)
 * retention_ms not 0 on an engine of one rank of several: pkv_engine_params.ranks).
 * Since 0.8.0. */
PKV_API pkv_status pkv_cache_set_priority(pkv_engine *e, const int32_t *tokens,
                                          uint32_t num_tokens, const pkv_seq_params *sp,
                                          int32_t priority, uint32_t retention_ms,
                                          uint32_t *out_num_blocks);

/* Pins the leading cached blocks of a token prefix (its full blocks under sp's salt, adapter and
 * extra keys; sp may be NULL) that the pool holds, as an admission's hit would use them: every KV
 * group's blocks (a windowed group's those a hit of that length needs). The pin holds a reference
 * on each, as a sequence does: they are never evicted while pinned, and are not free blocks.
 * Blocks held only in the host tier or the store are not loaded: the pin ends before them.
 * *out_pin is the pin's id (never 0, never reused), *out_num_tokens (nullable) the tokens pinned
 * (0 when nothing is cached: the pin then holds nothing). All pins together hold at most
 * PKV_MAX_PINNED_PERCENT of the pool's blocks (a block pinned twice counts once); pins do not
 * count against a request's "can it ever run" check, so keep them well below what the largest
 * request needs free.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens or out_pin NULL; num_tokens 0, above max_model_len or
 * above 2^31-1; a bad sp), PKV_ERR_NO_SPACE (the pin would take the pinned blocks past
 * PKV_MAX_PINNED_PERCENT of the pool; the message gives the numbers; nothing changed),
 * PKV_ERR_STATE (a batch is open on e).
 * Since 0.8.0. */
PKV_API pkv_status pkv_cache_pin(pkv_engine *e, const int32_t *tokens, uint32_t num_tokens,
                                 const pkv_seq_params *sp, uint64_t *out_pin,
                                 uint32_t *out_num_tokens);

/* Drops a pin: its references go as a sequence's release drops them (blocks no one else holds
 * become cached again, with the priority they had).
 * Errors: PKV_ERR_NOT_FOUND (no pin `pin`: never given, or unpinned), PKV_ERR_STATE (a batch is
 * open on e).
 * Since 0.8.0. */
PKV_API pkv_status pkv_cache_unpin(pkv_engine *e, uint64_t pin);

/* ------------------------------------------------------------ preemption, swapping and rollback */
/* Preemption by recompute: seq gives back all its blocks (as pkv_release does) but keeps its
 * tokens; its computed count becomes 0. pkv_resume re-admits it.
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is preempted or swapped out,
 * in the open batch, or a request of pkv_submit). */
PKV_API pkv_status pkv_preempt(pkv_engine *e, uint64_t seq);
/* Re-admits a preempted seq like a prompt of all its tokens (prefix lookup included, its own
 * prefix likely still cached), all-or-nothing; *out_num_cached_tokens (nullable) as pkv_allocate.
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is not preempted, or is a
 * request of pkv_submit), PKV_ERR_NO_SPACE (not enough free blocks, or (since 0.6.0) no free
 * working state slot; nothing changed). */
PKV_API pkv_status pkv_resume(pkv_engine *e, uint64_t seq, uint32_t *out_num_cached_tokens);

/* Preemption by swapping (needs the host tier): pkv_swap_out moves seq's KV to host-tier blocks
 * and gives its pool blocks back, keeping its tokens and computed count; pkv_swap_in brings it
 * back into pool blocks, all or nothing. The moves are block copies listed by the next batch
 * (copy_kind SWAP_OUT / SWAP_IN) and done before its first write; a block shared with other
 * sequences is copied once and its copies stay shared (a sharer swapped out later, or swapped in
 * while an identical block is still in the pool, copies nothing). A swapped sequence cannot be
 * appended to, forked or batched (those calls refuse it); pkv_release frees its host blocks. The
 * scheduler swaps its own requests (preemption_mode). With STATE layers (since 0.6.0) the
 * sequence's working state moves too: to a host state slot (a STATE_OUT copy) on swap-out, back to
 * a working slot (STATE_IN) on swap-in. (since 0.8.0) With KV groups (windows, chunks, unequal
 * or SHARED layers) every group's blocks move, and only those it holds (a window's given-back
 * blocks take no host block): pkv_seq_info.num_host_blocks counts them.
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_UNSUPPORTED (an engine without a host
 * tier), PKV_ERR_STATE (seq is not running, is in the open batch, or is a request of pkv_submit),
 * PKV_ERR_NO_SPACE (not enough free host-tier blocks, or ((since 0.6.0) no free host state slot);
 * nothing changed).
 * Since 0.2.0. */
PKV_API pkv_status pkv_swap_out(pkv_engine *e, uint64_t seq);
/* Brings a swapped-out seq back into pool blocks (above), all or nothing.
 * Errors: PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is not swapped out, or is a
 * request of pkv_submit), PKV_ERR_NO_SPACE (not enough free pool blocks, or ((since 0.6.0) no
 * free working state slot); nothing changed).
 * Since 0.2.0. */
PKV_API pkv_status pkv_swap_in(pkv_engine *e, uint64_t seq);

/* Rollback (rejected speculative tokens): seq keeps its first num_tokens tokens (1 .. its tokens);
 * blocks that no longer hold a kept token go back as pkv_release gives them (sealed ones stay in
 * the prefix cache), a copy-on-write block only the dropped tokens needed goes with them, and the
 * computed count becomes at most num_tokens. A sealed block the cut leaves partly filled stays in
 * the prefix cache: the next append copies it before writing. seq must be running or preempted,
 * outside the open batch, and one of pkv_allocate's. With sliding windows, a windowed KV group
 * takes back from the prefix cache the blocks it gave back that the kept tokens' window reaches
 * again (a cut of a few tokens near a block edge): a pool copy is shared, and (since 0.8.0) one
 * held only in the host tier is loaded (a PKV_COPY_LOAD the next batch lists, counted in
 * num_loaded_blocks). With STATE layers (since 0.6.0), a running seq
 * cut below its computed tokens goes back to a checkpoint, as a state cannot give tokens back: it
 * is admitted again for its first num_tokens tokens, keeping its working slot, so the prefix
 * cache (its own blocks and checkpoints included) serves the longest hit with a checkpoint, the
 * slot starts from a copy of it (queued, PKV_COPY_STATE; none: from token 0) and the tokens after
 * it are computed again (pkv_seq_info's computed count says how many are kept).
 * Errors: PKV_ERR_INVALID_ARGUMENT (num_tokens not in 1 .. the sequence's tokens),
 * PKV_ERR_NOT_FOUND (no sequence seq), PKV_ERR_STATE (seq is swapped out, in the open batch, or a
 * request of pkv_submit; or a block the window needs again is in no tier any more - evicted, or
 * prefix caching off: preempt and resume the sequence instead), PKV_ERR_NO_SPACE (not enough free
 * blocks to take those blocks back, or (since 0.6.0) for a rollback's admission of the kept
 * tokens, in which a windowed group holds every block; nothing changed).
 * Since 0.2.0. */
PKV_API pkv_status pkv_truncate(pkv_engine *e, uint64_t seq, uint32_t num_tokens);

/* ---------------------------------------------------------------- KV events */
/* With enable_kv_events, pkv queues an event when a block's KV first becomes reusable under a
 * prefix (STORED: the first copy of a prefix-tree node is sealed) and when it stops being held
 * anywhere (REMOVED: the node's last copy is evicted), with the canonical hashes
 * (pkv_block_hash), so KV-aware routers can track what this engine holds - vLLM's shape. */
typedef struct pkv_kv_event {
  uint32_t type;                  /* PKV_EVENT_* */
  uint32_t num_tokens;            /* tokens in the block (the block size) */
  uint64_t seq_no;                /* 1, 2, 3, ... per engine, never reused */
  uint64_t block_hash;            /* canonical hash of the block */
  uint64_t parent_hash;           /* of the previous block, or the salt's root hash */
  /* (since 0.2.0) 40 bytes; the 0.1 event ends above, at 32 */
  uint32_t medium;                /* PKV_TIER_* the block was stored in or removed from: DEVICE
                                     (the pool) or HOST (the host tier, offload); NONE for
                                     ALL_CLEARED and OVERFLOW, which concern every medium */
  uint32_t group;                 /* the KV group whose block it is (pkv_kv_groups; 0 without
                                     windows, and for ALL_CLEARED and OVERFLOW); (since 0.6.0)
                                     num_kv_groups: a checkpoint of the recurrent state at the
                                     block's end, stored or removed */
  /* (since 0.5.0) 56 bytes */
  uint64_t lora_id;               /* the block's adapter (pkv_seq_params.lora_id): 0 = none, and
                                     for ALL_CLEARED and OVERFLOW */
  uint32_t num_extra_keys;        /* extra keys overlapping the block (pkv_extra_key): 0 = none,
                                     its hash is pkv_block_hash's; else pkv_block_hash_extra's.
                                     The keys themselves are on the wire only (BlockStored's
                                     extra_keys) */
  uint32_t reserved0;             /* 0 */
} pkv_kv_event;

/* Moves up to cap queued events, oldest first, into out; *out_len = how many. The symbol writes
 * the 0.1 layout (32 bytes each, for binaries built against 0.1); code compiled against this
 * header calls pkv_drain_kv_events_sized through the macro below, at its sizeof(pkv_kv_event).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0). */
PKV_API pkv_status pkv_drain_kv_events(pkv_engine *e, pkv_kv_event *out, uint32_t cap,
                                       uint32_t *out_len);

/* As pkv_drain_kv_events, for a pkv_kv_event that may have grown after 0.1: event_size is
 * sizeof(pkv_kv_event) as the caller sees it, at least 32 (the 0.1 size) and a multiple of 8;
 * out[i] starts at byte i * event_size. pkv writes the fields it knows up to event_size bytes
 * and zeroes the rest of each event (a field that reads 0 is one this library does not fill).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0; event_size below 32 or
 * not a multiple of 8).
 * Since 0.2.0. */
PKV_API pkv_status pkv_drain_kv_events_sized(pkv_engine *e, pkv_kv_event *out, uint32_t event_size,
                                             uint32_t cap, uint32_t *out_len);
#define pkv_drain_kv_events(e, out, cap, out_len) \
  pkv_drain_kv_events_sized((e), (out), (uint32_t)sizeof(pkv_kv_event), (cap), (out_len))

/* ---------------------------------------------------------------- KV events on the wire */
/* (since 0.3.0) An engine may publish its KV events (see pkv_kv_event) to KV-aware routers over
 * ZeroMQ, in vLLM's protocol (vllm/distributed/kv_events.py), so a router written for vLLM's event
 * stream (llm-d's, NVIDIA Dynamo's, ...) hears pkv unchanged:
 *   - a PUB socket bound to `endpoint` sends multipart messages [topic, seq, payload]: seq is 8
 *     bytes, big-endian, 0, 1, 2, ... per engine; payload is a msgpack KVEventBatch of vLLM's
 *     classes, in one of two encodings (`format`):
 *       PKV_EVENT_FORMAT_MAP (the default; vLLM 0.26+): each object a map of its field names, an
 *       event's class name first under the key "type":
 *         {"ts", "events", "data_parallel_rank"}
 *         {"type": "BlockStored", "block_hashes", "parent_block_hash", "token_ids", "block_size",
 *          "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
 *          "kv_cache_spec_sliding_window"}
 *         {"type": "BlockRemoved", "block_hashes", "medium", "group_idx"}
 *         {"type": "AllBlocksCleared"}
 *       PKV_EVENT_FORMAT_ARRAY (vLLM before 0.26): the same fields in the same order by position,
 *       an event's class name first: [ts, events, data_parallel_rank], ["BlockStored",
 *       block_hashes, ..., kv_cache_spec_sliding_window] (12 elements), ["BlockRemoved",
 *       block_hashes, medium, group_idx], ["AllBlocksCleared"]. A decoder that knows fewer
 *       fields ignores the trailing ones.
 *     Every field is sent, in both encodings. ts: float64, seconds since the epoch. hashes are
 *     pkv's canonical block hashes (uint64, pkv_block_hash; parent_block_hash is nil when the
 *     parent is a salt's root); token_ids are the blocks' tokens; lora_id is the blocks'
 *     pkv_seq_params.lora_id (since 0.5.0), nil when 0 (the cache salt is in the hashes);
 *     lora_name is nil; extra_keys (since 0.5.0) is nil when no block of the event has extra
 *     keys, else one element per block: nil for a block without, else an array of its items in
 *     order, each [key (bin), start, end, item_start]: the key's bytes, the overlap's first
 *     and one-past-last token within the block, and the overlap's first token within the item
 *     (pkv_block_hash_extra's fields). A run of blocks shares one lora_id. group_idx is the
 *     block's KV group (pkv_kv_event.group; 0 in an engine of one group). kv_cache_spec_kind
 *     names the group's kind in vLLM's words: "sliding_window" (a group of windowed layers),
 *     "full_attention", or "mla_attention" (full attention over a PKV_KV_LAYOUT_MLA cache);
 *     kv_cache_spec_sliding_window is the group's window in tokens, nil for full attention. A
 *     run of blocks stored one after the other under one chain (one group, one medium) is one
 *     BlockStored. medium is where the block is: "GPU" (the pool of a CUDA
 *     engine), "CPU" (the pool of a CPU engine; the host tier of a CUDA engine),
 *     "CPU_HOST_TIER" (the host tier of a CPU engine), "DISK" (a FILE store), "EXTERNAL" (a
 *     REDIS or CALLBACK store).
 *   - with a replay_endpoint, a ROUTER socket answers a request [start_seq] (8 bytes, big-endian;
 *     from a REQ socket, or a DEALER sending an empty frame first) with one message
 *     [seq, payload] per kept batch whose seq >= start_seq, then [8 bytes 0xff, empty payload]
 *     (vLLM's end marker, -1).
 * Publishing runs on a thread of the engine's own: a call on the engine only stages its events
 * and hands them over once when it returns; the thread sends them within about 1 ms (a busy
 * engine's events are gathered for 1 ms into one batch), and pkv_engine_destroy sends what is
 * left, waiting at most 100 ms for subscribers to take it. A subscriber that reads too slowly
 * loses messages past send_hwm (it sees a gap in seq and can replay); it never slows the engine.
 * When the queue itself is full (the thread cannot keep up) the queued events are dropped,
 * counted, and an AllBlocksCleared is sent in their place: a router then knows less than the
 * engine holds, never more. pkv_drain_kv_events works as before, on its own queue
 * (enable_kv_events); the wire needs neither. */
typedef struct pkv_event_publisher_params {
  uint32_t struct_size;
  uint32_t data_parallel_rank;    /* KVEventBatch.data_parallel_rank of every batch. default 0 */
  const char *endpoint;           /* the ZMQ endpoint the PUB socket binds, e.g.
                                     "tcp://127.0.0.1:5557" ("tcp://127.0.0.1:*": a free port, read
                                     back by pkv_event_publisher_info); required */
  const char *replay_endpoint;    /* the ROUTER socket's; NULL = no replay. default NULL */
  const char *topic;              /* every message's first frame; NULL = "kv-events" */
  uint32_t replay_buffer_batches; /* batches kept for replay;
                                     0 = PKV_DEFAULT_EVENT_REPLAY_BATCHES */
  uint32_t send_hwm;              /* messages queued per subscriber before it loses them (ZMQ's
                                     SNDHWM); 0 = PKV_DEFAULT_EVENT_SEND_HWM */
  uint32_t max_queue_events;      /* events waiting for the publishing thread; 0 =
                                     PKV_DEFAULT_EVENT_QUEUE_EVENTS */
  uint32_t max_batch_events;      /* events in one batch at most;
                                     0 = PKV_DEFAULT_EVENT_BATCH_EVENTS */
  /* (since 0.4.0) a 0.3 caller's struct_size ends here: it gets the default */
  uint32_t format;                /* PKV_EVENT_FORMAT_*: how batches are encoded (above); other
                                     values are refused (PKV_ERR_INVALID_ARGUMENT). default MAP */
  uint32_t reserved0;             /* must be 0 */
} pkv_event_publisher_params;

/* Fills p with the defaults above; as pkv_engine_params_init.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's size in 0.3.0).
 * Since 0.3.0. */
PKV_API pkv_status pkv_event_publisher_params_init(pkv_event_publisher_params *p, uint32_t size);

/* (since 0.3.0) What an engine's event publisher did. The struct shares its name with the call;
 * set struct_size to sizeof it (at least its 0.3 size); pkv fills what it knows up to that size. */
struct pkv_event_publisher_info {
  uint32_t struct_size;
  uint32_t reserved0;
  const char *endpoint;           /* as bound: a '*' port resolved, e.g. "tcp://127.0.0.1:40123";
                                     valid while the engine lives */
  const char *replay_endpoint;    /* as bound; "" without replay */
  uint64_t next_seq;              /* the seq the next batch gets (batches sent so far) */
  uint64_t events_published;      /* events sent: block events as pkv_kv_event counts them (a
                                     BlockStored of a run of n blocks counts n) and
                                     AllBlocksCleared ones, each counted once the batch holding
                                     it is handed to the PUB socket (a subscriber past send_hwm
                                     may still lose it); batches are next_seq's count */
  uint64_t events_dropped;        /* events lost to a full queue (each loss
                                     sent AllBlocksCleared) */
  uint64_t replay_requests;       /* replay requests answered */
  uint64_t events_queued;         /* events handed to the publishing thread and not yet sent; 0:
                                     every event of the calls so far is on the wire (or dropped) */
};

/* What e's event publisher did.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small), PKV_ERR_STATE (e
 * has no event publisher).
 * Since 0.3.0. */
PKV_API pkv_status pkv_event_publisher_info(pkv_engine *e, struct pkv_event_publisher_info *out);

/* --------------------------------------------------------------- fp8 scales and the CUDA stream */
/* fp8 KV (kv_dtype FP8_*): the scales of `layer` (< num_layers), k_scales and v_scales
 * [kv_heads_per_rank] each (this rank's heads), finite and > 0; a stored element means its value
 * times its head's scale. Every scale is 1.0 until set. Set them before the first pkv_allocate or
 * pkv_submit (with the weights): KV written under one scale is not rewritten. A store's blocks
 * are named for the scales (the fingerprint), so engines with other scales never share them.
 * kv_layout MLA: k_scales is the latent's one scale and v_scales may be NULL (it is not read).
 * Ranks ALL (since 0.10.0): [tp_size][kv_heads_per_rank] each, every rank's in rank order.
 * Layer specs (since 0.5.0): [the layer's kv heads per rank] each; a k_eq_v layer's V is its K
 * (v_scales may be NULL); a SHARED layer reads its source's codes with the source's scales.
 * Errors: PKV_ERR_INVALID_ARGUMENT (the cache is not fp8; layer not below num_layers, or SHARED;
 * k_scales NULL, or v_scales NULL but for MLA and k_eq_v; a scale not finite or not > 0),
 * PKV_ERR_STATE (a sequence was made before: pkv_allocate or pkv_submit).
 * Since 0.2.0. */
PKV_API pkv_status pkv_set_kv_scales(pkv_engine *e, uint32_t layer, const float *k_scales,
                                     const float *v_scales);

/* Attention sinks (pkv_layer_spec.sinks): the logits of `layer` (< num_layers), sinks[num_sinks]
 * with num_sinks = num_q_heads / tp_size (this rank's q heads, in order; (since 0.10.0) with
 * ranks ALL num_q_heads: every rank's, in rank order), each finite. Head h's
 * softmax over scores s_j becomes exp(s_j) / (exp(sink_h) + sum_k exp(s_k)): the sink takes
 * weight and adds nothing to the output. Set them once per layer that has sinks, before the first
 * pkv_allocate or pkv_submit (with the weights); pkv_attention on a layer with sinks not set
 * fails rather than attend without them.
 * Errors: PKV_ERR_INVALID_ARGUMENT (layer not below num_layers, or a layer whose spec has no
 * sinks; sinks NULL; num_sinks not this rank's q heads; a logit not finite), PKV_ERR_STATE (a
 * sequence was made before: pkv_allocate or pkv_submit).
 * Since 0.5.0. */
PKV_API pkv_status pkv_set_attention_sinks(pkv_engine *e, uint32_t layer, const float *sinks,
                                           uint32_t num_sinks);

/* The CUDA stream pkv's later calls run on (a cudaStream_t; NULL = the default stream; default
 * NULL). A change takes effect at the next call, also in the middle of a batch. When the stream
 * differs from the current one, pkv first waits for the work it queued on the current one
 * (cudaStreamSynchronize), so its own buffers can be reused on the new one; ordering the host's
 * own work between the two streams is the host's. On a CPU engine only NULL is accepted.
 * Errors: PKV_ERR_INVALID_ARGUMENT (a stream other than NULL on a CPU engine), PKV_ERR_DEVICE
 * (CUDA: waiting for the current stream failed). */
PKV_API pkv_status pkv_engine_set_stream(pkv_engine *e, void *cuda_stream);

/* Rank `rank`'s CUDA stream (pkv_engine_params.ranks ALL), on that rank's device: as
 * pkv_engine_set_stream, which sets every rank's (NULL) or, on an engine of several ranks, only
 * accepts NULL.
 * Errors: PKV_ERR_INVALID_ARGUMENT (rank not below num_ranks; a stream other than NULL on a CPU
 * engine), PKV_ERR_DEVICE (CUDA: waiting for the rank's current stream failed).
 * Since 0.10.0. */
PKV_API pkv_status pkv_engine_set_rank_stream(pkv_engine *e, uint32_t rank, void *cuda_stream);

/* ---------------------------------------------------------------- canonical block hash */
/* The hash other processes (routers, KV tiers) use to name a block, independent of pkv's
 * internals:
 *   root  = XXH3_64bits_withSeed(salt bytes, salt_len, seed)        (empty salt when none)
 *   block = XXH3_64bits_withSeed(parent hash as u64 little-endian ++ token ids as i32
 *                                little-endian, seed)                (parent of block 0 = root)
 * pkv_block_hash_root: salt may be NULL only when salt_len is 0.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_hash NULL; salt NULL with salt_len > 0). */
PKV_API pkv_status pkv_block_hash_root(uint64_t seed, const void *salt, uint32_t salt_len,
                                       uint64_t *out_hash);
/* A block's hash (above), of num_tokens >= 1 tokens.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens or out_hash NULL; num_tokens 0). */
PKV_API pkv_status pkv_block_hash(uint64_t seed, uint64_t parent_hash, const int32_t *tokens,
                                  uint32_t num_tokens, uint64_t *out_hash);

/* The canonical hash of a block with extra keys and a LoRA adapter (pkv_seq_params.extra_keys,
 * lora_id). Without them (lora_id 0, no key overlapping the block) each is exactly the hash
 * above, so a prompt's blocks before its first key keep the hashes of the same text:
 *   root  = lora_id 0: as pkv_block_hash_root; else
 *           XXH3_64bits_withSeed(salt bytes ++ lora_id as u64 LE ++ salt_len as u32 LE ++
 *                                the 8 bytes "pkv-lora", seed)
 *   block = XXH3_64bits_withSeed(parent hash as u64 LE ++ token ids as i32 LE ++ extra, seed)
 *   extra = for each key overlapping the block's tokens, in order: the overlap's first token
 *           and one past its last, counted from the block's first token; the overlap's first
 *           token counted from the key's start_token (0 unless the key began in an earlier
 *           block); key_len; each as u32 LE, then the key's key_len bytes. (Empty: no key.)
 * pkv_block_hash_root_lora: salt may be NULL only when salt_len is 0.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_hash NULL; salt NULL with salt_len > 0).
 * Since 0.5.0. */
PKV_API pkv_status pkv_block_hash_root_lora(uint64_t seed, const void *salt, uint32_t salt_len,
                                            uint64_t lora_id, uint64_t *out_hash);
/* A block's hash (above): its num_tokens >= 1 tokens are the prompt's tokens [first_token,
 * first_token + num_tokens); keys[num_keys] (each at byte i * key_size, key_size as
 * pkv_seq_params.extra_key_size) are the prompt's extra keys, sorted and not overlapping as
 * pkv_seq_params says; those not overlapping the block are skipped, so a host may pass all of
 * them for every block. keys may be NULL when num_keys is 0.
 * Errors: PKV_ERR_INVALID_ARGUMENT (tokens or out_hash NULL; num_tokens 0; first_token +
 * num_tokens above 2^32-1; keys NULL with num_keys > 0; num_keys above PKV_MAX_EXTRA_KEYS; a bad
 * key_size; a key out of order, overlapping the previous one, empty, NULL or of a bad key_len,
 * or with reserved0 set: the message names its index and the rule).
 * Since 0.5.0. */
PKV_API pkv_status pkv_block_hash_extra(uint64_t seed, uint64_t parent_hash,
                                        const int32_t *tokens, uint32_t num_tokens,
                                        uint32_t first_token, const pkv_extra_key *keys,
                                        uint32_t num_keys, uint32_t key_size,
                                        uint64_t *out_hash);

/* ---------------------------------------------------------------- the store tier */
/* A store key: SHA-256 of (the parent block's key, the block's token ids), chained from a root of
 * the cache salt and the model's fingerprint (DESIGN.md §11); (since 0.5.0) the root also of the
 * lora_id when not 0, and the parent key of a block with extra keys mixed with them first (the
 * key stays SHA-256 of the parent key its value names and its tokens). */
typedef struct pkv_store_key {
  uint8_t bytes[32];
} pkv_store_key;

/* A store of the host's own (PKV_STORE_CALLBACK): a byte map from keys to values of one size per
 * engine (value_bytes: a header pkv writes and verifies, then the block's K and V of every layer).
 * pkv calls these from the engine's thread (pkv_allocate's lookups) and from threads of its own
 * (the writer's puts, the fetcher's lookups for submitted requests), possibly at the same time;
 * user is passed back as is. Each returns 0 on success; anything else makes
 * every key of the call a miss (nothing fails because of it) and, when message is set (at most
 * message_cap bytes, NUL-terminated), says why through pkv_engine_store_error. A store may lose or
 * damage values: pkv checks every value it reads before it can hit. */
typedef struct pkv_store_callbacks {
  uint32_t struct_size;
  uint32_t reserved0;             /* must be 0 */
  void *user;
  /* out[i] = 1 when keys[i] is held, else 0 (a hint). May be NULL: get is used instead. */
  int (*exists)(void *user, const pkv_store_key *keys, uint32_t n, uint8_t *out, char *message,
                uint32_t message_cap);
  /* For each key held: its value into values + i * value_bytes, found[i] = 1; else found[i] = 0.
   * Should return within timeout_ms (0: no limit asked). */
  int (*get)(void *user, const pkv_store_key *keys, uint32_t n, void *values, uint64_t value_bytes,
             uint8_t *found, uint32_t timeout_ms, char *message, uint32_t message_cap);
  /* Stores value i (values + i * value_bytes) under keys[i], replacing any. */
  int (*put)(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
             uint64_t value_bytes, char *message, uint32_t message_cap);
} pkv_store_callbacks;

typedef struct pkv_store_params {
  uint32_t struct_size;
  uint32_t kind;                  /* PKV_STORE_*; NONE: no store, as a NULL store. default NONE */
  uint32_t write_mode;            /* PKV_STORE_WRITE_*. default WRITE_THROUGH */
  uint32_t lookup_timeout_ms;     /* how long pkv_allocate / pkv_resume wait for the store, >= 1
                                     (a FILE store stops between blocks when it has passed; block
                                     files are opened without blocking, so a FIFO or device in a
                                     block's place is a rejected value, never a hang). A submitted
                                     request's lookup runs on pkv's fetcher thread, which makes
                                     and keeps its own connection: pkv_step never waits on it while
                                     other requests can run. default 200 */
  uint32_t write_queue_blocks;    /* blocks waiting for the writer thread, 1 .. 2^20; a block that
                                     finds the queue full is dropped and counted. default 256 */
  uint32_t reserved0;             /* must be 0 */
  /* FILE */
  const char *path;               /* the directory (made if missing); required */
  uint64_t max_bytes;             /* size cap of the directory's blocks, whichever engines and
                                     processes write them (every writable store keeps a usage
                                     record, <path>/.pkv-usage, under flock; DESIGN.md §11); the
                                     least recently used go first. 0 = none. default 0 */
  /* REDIS (or Valkey) */
  const char *host;               /* default "127.0.0.1" (NULL) */
  uint32_t port;                  /* 1 .. 65535. default 6379 */
  uint32_t database;              /* SELECT; default 0 */
  const char *username;           /* AUTH user (ACL); NULL = the default user */
  const char *password;           /* AUTH password; NULL = none */
  const char *key_prefix;         /* prepended to every key; default "pkv:" (NULL) */
  uint32_t ttl_seconds;           /* expiry of written blocks; 0 = none. default 0 */
  uint32_t connect_timeout_ms;    /* >= 1. default 1000 */
  uint32_t io_timeout_ms;         /* each command batch, >= 1. default 1000 */
  uint32_t reserved1;             /* must be 0 */
  /* CALLBACK */
  const pkv_store_callbacks *callbacks; /* required; copied at engine create */
  /* (since 0.4.0) a 0.3 caller's struct_size ends here: it gets the default */
  const char *model_id;           /* the model's identity, in the fingerprint of every key and
                                     value: engines share blocks only when their ids (and KV
                                     shapes) are equal. Name it by its weights: a weights digest,
                                     or name and revision ("org/model@<commit>"); two fine-tunes
                                     of one base model have the same config and KV shape, so only
                                     this keeps them from reading each other's KV.
                                     pkv_hf_config_digest gives one from config.json (it tells
                                     configs apart, not weights). 1 .. PKV_MAX_MODEL_ID_BYTES
                                     bytes, copied at create. NULL (the default) = none: the
                                     fingerprint is the KV shape alone (a 0.3 store's keys), any
                                     model of that shape shares the blocks, and
                                     pkv_engine_store_error says so until a store problem
                                     replaces it. Ignored by pkv_store_open */
} pkv_store_params;

/* Fills p with the defaults above; as pkv_engine_params_init.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p NULL, or size below the struct's size in 0.3.0).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_params_init(pkv_store_params *p, uint32_t size);

/* The store's last problem (a miss by error, a rejected value with why - e.g. its size when it
 * is not a block's, a failed write), as text, into out[cap] (NUL-terminated, cut to fit);
 * *out_len = its full length. "" when there was none or the engine has no store; (since 0.4.0) a
 * store without a model_id starts with a warning that other models of its KV shape share its
 * blocks. out may be NULL when cap is 0.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_len NULL; out NULL with cap > 0).
 * Since 0.2.0. */
PKV_API pkv_status pkv_engine_store_error(pkv_engine *e, char *out, uint32_t cap,
                                          uint32_t *out_len);

/* ---------------------------------------------------------------- store administration */
/* (since 0.2.0) A handle on a store for its administrator (`pkv store`): how much it holds, what
 * (key, size and, from each value's header, parent, tokens and fingerprint), whether every value
 * is whole, and removing bad values or all of them - with no engine and no model: a value
 * describes itself. Kinds FILE and REDIS; a CALLBACK store is the host's own to administer.
 * Calls on one handle are serialized inside pkv; a handle may be used while engines use the same
 * store (values written or removed meanwhile may or may not be seen). Failures leave their
 * message in pkv_last_error(); PKV_ERR_STORE is a store error (unreadable directory, server gone,
 * timeout). Every call but pkv_store_open walks the whole store (a directory listing, or
 * Redis SCAN ... MATCH prefix* COUNT, never KEYS) and takes time in proportion to it. */
typedef struct pkv_store pkv_store;

/* Opens the store p describes (as pkv_engine_params.store; the fields of the write path -
 * write_mode aside, lookup_timeout_ms, write_queue_blocks, max_bytes, ttl_seconds - do not apply).
 * write_mode PKV_STORE_READ_ONLY opens it for reading only: removals are then refused, and a
 * FILE store needs no write access. FILE: path must be an existing directory (it is never made
 * here); opening removes its stale temporary files, as an engine's open does. REDIS: connects and
 * authenticates. *out is set only on success; close it with pkv_store_close.
 * Errors: PKV_ERR_INVALID_ARGUMENT (p or out NULL; a field out of its range, named; kind NONE),
 * PKV_ERR_UNSUPPORTED (kind CALLBACK), PKV_ERR_STORE (a FILE path that is not an existing
 * directory; a Redis server that cannot be reached or refuses the login).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_open(const pkv_store_params *p, pkv_store **out);

/* Frees s: closes its connection and the handle. Accepts NULL (does nothing). Must not race with
 * other calls on s.
 * Since 0.2.0. */
PKV_API void pkv_store_close(pkv_store *s);

/* What a store holds. Like struct pkv_seq_info, the struct shares its name with the call. */
struct pkv_store_info {
  uint32_t struct_size;
  uint32_t kind;                  /* PKV_STORE_FILE or PKV_STORE_REDIS */
  uint64_t num_blocks;            /* values under block names: <path>/<hh>/<64 hex>.blk, or
                                     key_prefix + 64 hex (Redis strings) */
  uint64_t total_bytes;           /* their sizes added up (file sizes, STRLEN) */
};

/* Counts the blocks and their bytes (no value is read).
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small), PKV_ERR_STORE (the
 * store failed).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_info(pkv_store *s, struct pkv_store_info *out);

/* pkv_store_list flags */
enum { PKV_STORE_LIST_KEYS_ONLY = 1 }; /* list keys and sizes only: read no value */
/* pkv_store_entry.state: what reading the value found. */
enum { PKV_STORE_VALUE_UNREAD = 0,  /* not read (PKV_STORE_LIST_KEYS_ONLY) */
       PKV_STORE_VALUE_GOOD = 1,    /* a whole pkv block: its header, tokens and payload check out
                                       (checksums), it names this key, and the key is SHA-256 of
                                       its parent and tokens */
       PKV_STORE_VALUE_BAD = 2 };   /* anything else: `problem` says what; an engine never
                                       uses it */
enum { PKV_STORE_PROBLEM_BYTES = 64 }; /* pkv_store_entry.problem, the NUL included */

/* One block of a listing. Entries have no struct_size: pkv_store_list takes the caller's
 * sizeof(pkv_store_entry) instead (fields are only appended). */
typedef struct pkv_store_entry {
  pkv_store_key key;
  uint64_t value_bytes;           /* the value's size as listed */
  uint32_t state;                 /* PKV_STORE_VALUE_* */
  uint32_t num_tokens;            /* the block's tokens (GOOD only; else 0) */
  uint64_t payload_bytes;         /* K and V of every layer (GOOD only) */
  pkv_store_key parent;           /* the parent block's key, or the root of its salt and model
                                     (GOOD only) */
  uint8_t fingerprint[32];        /* the model's KV-shape fingerprint (GOOD only) */
  char problem[PKV_STORE_PROBLEM_BYTES]; /* BAD: why, NUL-terminated (cut to fit); else "" */
} pkv_store_entry;

/* Lists the store a page at a time. Start with *cursor = 0; each call writes up to cap entries
 * into out (entry i at byte i * entry_size), *out_len = how many, and sets *cursor to pass to the
 * next call: 0 when the listing is complete (a page may hold fewer than cap entries, even none,
 * before that). A nonzero cursor is valid only as the last one this handle returned (one listing
 * per handle at a time); a cursor of 0 starts over.
 * Unless flags has PKV_STORE_LIST_KEYS_ONLY, each listed value is read and checked (state,
 * problem; values gone before they were read are left out); memory stays bounded however large
 * cap or the values are (a value over 16 MiB is read a piece at a time: its header first, which
 * alone refuses a value not of its declared size; every declared size is checked for
 * overflow). A block held throughout a listing is listed at least once (a Redis listing may list
 * one twice). entry_size: sizeof(pkv_store_entry) as the caller sees it, at
 * least this header's and a multiple of 8; bytes past the fields pkv knows are zeroed. cap >= 1.
 * A failed call changes nothing: *cursor, *out_len and the listing stay as they were.
 * Errors: PKV_ERR_INVALID_ARGUMENT (cursor, out_len or out NULL; cap 0; a flag other than
 * PKV_STORE_LIST_*; entry_size too small or not a multiple of 8; a nonzero cursor this handle did
 * not return last), PKV_ERR_STORE (the store failed).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_list(pkv_store *s, uint64_t *cursor, uint32_t flags,
                                  pkv_store_entry *out, uint32_t entry_size, uint32_t cap,
                                  uint32_t *out_len);

typedef struct pkv_store_verify_result {
  uint32_t struct_size;
  uint32_t reserved0;
  uint64_t num_blocks;            /* values read */
  uint64_t num_good;              /* of which PKV_STORE_VALUE_GOOD */
  uint64_t num_bad;               /* of which PKV_STORE_VALUE_BAD */
  uint64_t num_removed;           /* of num_bad, removed (remove_bad) */
  uint64_t num_gone;              /* listed, then gone or resized before they were read (an
                                     engine evicted or rewrote them): not counted above */
  uint64_t good_bytes;            /* sizes of the good values */
  uint64_t bad_bytes;             /* sizes of the bad values */
  pkv_store_key first_bad_key;    /* the first bad value met (zeros when none) ... */
  char first_bad_problem[PKV_STORE_PROBLEM_BYTES]; /* ... and why ("" when none) */
} pkv_store_verify_result;

/* Reads every value of the store and checks it as pkv_store_list does; with remove_bad = 1 each
 * bad value is removed as it is found. Unlike most calls, a failure part way (the server gone)
 * keeps what was removed before it, and *out then holds the counts up to the failure. A FILE
 * store's reads mark its blocks as used (their access times), as an engine's do.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out NULL, or out's struct_size too small; remove_bad not 0
 * or 1), PKV_ERR_STATE (remove_bad 1 on a handle opened read-only), PKV_ERR_STORE (the store
 * failed, part way: *out holds the counts up to it).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_verify(pkv_store *s, uint32_t remove_bad,
                                    pkv_store_verify_result *out);

/* Removes every block of the store (only block names: other files, or keys outside key_prefix,
 * stay); *out_removed = how many this call removed. Blocks that engines write meanwhile may stay.
 * A failure part way keeps what was removed before it and still sets *out_removed.
 * Errors: PKV_ERR_INVALID_ARGUMENT (out_removed NULL), PKV_ERR_STATE (a handle opened read-only),
 * PKV_ERR_STORE (the store failed, part way: *out_removed says how many went).
 * Since 0.2.0. */
PKV_API pkv_status pkv_store_clear(pkv_store *s, uint64_t *out_removed);

/* ---------------------------------------------------------------- diagnostics */
/* Checks every block-manager invariant (each block in exactly one state, ref counts equal the
 * block-table references, the free list holds exactly the ref-0 blocks, every prefix node's
 * copies are sealed blocks holding its tokens under its parent, counters agree). O(pool size):
 * for tests and debugging.
 * Errors: PKV_ERR_INTERNAL (an invariant is broken: the message names the first violation). */
PKV_API pkv_status pkv_engine_check(pkv_engine *e);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* clang-format on */
#endif /* PKV_PKV_H */
