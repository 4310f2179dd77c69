/*
 * bench_chunk_admission.c - admission per chunk against whole-prompt admission, in the same run
 * (issue 30 item 2).
 *
 * A Gemma-3-like engine (layer 0 sliding 1024, layer 1 full; a tiny shape, block size 16, a pool
 * of 8192 blocks, prefix caching on) takes prompts of 16384 never-seen tokens in chunks of 512:
 *   per chunk  pkv_submit, then pkv_step + pkv_commit until the prompt is computed: pkv_step
 *              admits it with its first chunk and reserves each later one (the scheduler's path)
 *   whole      pkv_allocate of the whole prompt (every block of both groups reserved at once),
 *              then pkv_batch_begin + pkv_batch_end of each chunk (the host's path; 0.7's
 *              pkv_step reserved the same way)
 * The request or sequence is released after its last chunk (not timed), so later prompts evict
 * the cached blocks of earlier ones, as in a long-running server. No attention runs: the time is
 * the block manager's and the scheduler's. Reported: ns per block of the prompt (both groups'
 * blocks: 2 x 1024), the median over runs with the modes alternating, their ratio, and each
 * mode's peak of the windowed group's blocks (after each step: the chunk reserved, not yet
 * computed) against the full group's.
 */
#define _POSIX_C_SOURCE 200809L

#include "bench_chunk_admission.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pkv/pkv.h>

#include "bench_util.h"

enum { CA_BS = 16, CA_WINDOW = 1024, CA_CHUNK = 512, CA_PROMPT = 16384, CA_POOL = 8192 };

static pkv_status create_engine(pkv_engine **e) {
  pkv_engine_params p;
  pkv_engine_params_init(&p, sizeof p);
  static const uint32_t windows[2] = {CA_WINDOW, 0};
  p.num_layers = 2, p.layer_windows = windows;
  p.num_q_heads = 1, p.num_kv_heads = 1, p.head_dim = 8, p.dtype = PKV_DTYPE_F32;
  p.block_size = CA_BS, p.num_blocks = CA_POOL, p.device = PKV_DEVICE_CPU, p.num_threads = 1;
  p.max_num_batched_tokens = CA_CHUNK, p.max_num_seqs = 4;
  return pkv_engine_create(&p, e);
}

/* The KV group of layer 0 (the windowed one); the other is the full one. */
static uint32_t windowed_group(pkv_engine *e) {
  pkv_engine_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  uint32_t layer_group[2] = {0, 0}, n = 0;
  if (pkv_engine_params_get(e, &p) != PKV_OK ||
      pkv_kv_groups(&p, layer_group, NULL, NULL, 0, &n, NULL) != PKV_OK)
    return 0;
  return layer_group[0];
}

/* Blocks seq holds in group g; *peak keeps the most seen. */
static void note_held(pkv_engine *e, uint64_t seq, uint32_t g, uint32_t *peak) {
  static int32_t table[CA_PROMPT / CA_BS + 2];
  uint32_t len = 0, held = 0;
  if (pkv_seq_group_block_table(e, seq, g, table, CA_PROMPT / CA_BS + 2, &len) != PKV_OK) return;
  for (uint32_t i = 0; i < len; i++) held += table[i] >= 0;
  if (held > *peak) *peak = held;
}

typedef struct ca_mode {
  double ns;         /* the prompts' time, this run */
  uint32_t peak[2];  /* most blocks held, per KV group */
  int measure_peaks; /* read the tables after each step (not timed runs) */
} ca_mode;

/* One prompt through pkv_step (admission per chunk). */
static int per_chunk(pkv_engine *e, const int32_t *tokens, ca_mode *m) {
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  uint64_t seq = 0;
  const double t0 = bench_now_ns();
  pkv_status s = pkv_submit(e, tokens, CA_PROMPT, &rp, &seq);
  for (uint32_t done = 0; s == PKV_OK && done < CA_PROMPT; done += CA_CHUNK) {
    pkv_batch *b = NULL;
    s = pkv_step(e, &b);
    if (s == PKV_OK && !b) s = PKV_ERR_INTERNAL; /* the prompt must always fit */
    if (s == PKV_OK && m->measure_peaks)
      for (uint32_t g = 0; g < 2; g++) note_held(e, seq, g, &m->peak[g]);
    const int32_t sampled = 1;
    if (s == PKV_OK) s = pkv_commit(b, &sampled);
  }
  m->ns += bench_now_ns() - t0;
  if (s == PKV_OK) s = pkv_release(e, seq);
  return s == PKV_OK ? 0 : bench_fail(e, "admission per chunk", s);
}

/* One prompt allocated whole, computed chunk by chunk. */
static int whole(pkv_engine *e, const int32_t *tokens, ca_mode *m) {
  uint64_t seq = 0;
  const double t0 = bench_now_ns();
  pkv_status s = pkv_allocate(e, tokens, CA_PROMPT, NULL, &seq, NULL);
  for (uint32_t done = 0; s == PKV_OK && done < CA_PROMPT; done += CA_CHUNK) {
    const uint32_t n = CA_CHUNK;
    pkv_batch *b = NULL;
    s = pkv_batch_begin(e, &seq, &n, 1, &b);
    if (s == PKV_OK && m->measure_peaks)
      for (uint32_t g = 0; g < 2; g++) note_held(e, seq, g, &m->peak[g]);
    if (s == PKV_OK) s = pkv_batch_end(b);
  }
  m->ns += bench_now_ns() - t0;
  if (s == PKV_OK) s = pkv_release(e, seq);
  return s == PKV_OK ? 0 : bench_fail(e, "whole-prompt admission", s);
}

/* prompts prompts in one mode; tokens: [CA_PROMPT], refilled with never-seen ones. */
static int run_mode(pkv_engine *e, int chunked, uint32_t prompts, uint64_t *rng, int32_t *tokens,
                    ca_mode *m) {
  for (uint32_t i = 0; i < prompts; i++) {
    for (uint32_t t = 0; t < CA_PROMPT; t++) tokens[t] = bench_token(rng);
    if ((chunked ? per_chunk(e, tokens, m) : whole(e, tokens, m)) != 0) return -1;
  }
  return 0;
}

int bench_admission_per_chunk(int quick) {
  const uint32_t runs = quick ? 1 : 7, prompts = quick ? 2 : 8;
  int32_t *tokens = malloc(CA_PROMPT * sizeof *tokens);
  pkv_engine *e = NULL;
  pkv_status s = tokens ? create_engine(&e) : PKV_ERR_OUT_OF_MEMORY;
  if (s != PKV_OK) {
    free(tokens);
    return bench_fail(NULL, "pkv_engine_create (admission per chunk)", s);
  }
  uint64_t rng = 0xc4a7;
  ca_mode peaks[2] = {{0, {0, 0}, 1}, {0, {0, 0}, 1}}; /* [whole, per chunk], untimed warm-up */
  int rc = run_mode(e, 0, 2, &rng, tokens, &peaks[0]);
  if (rc == 0) rc = run_mode(e, 1, 2, &rng, tokens, &peaks[1]);
  double samples[2][BENCH_MAX_RUNS];
  const double blocks = (double)prompts * 2.0 * (CA_PROMPT / CA_BS);
  for (uint32_t r = 0; rc == 0 && r < runs; r++)
    for (int chunked = 0; chunked < 2 && rc == 0; chunked++) {
      const int mode = (int)(r & 1) ^ chunked; /* alternate which goes first */
      ca_mode m = {0, {0, 0}, 0};
      rc = run_mode(e, mode, prompts, &rng, tokens, &m);
      samples[mode][r] = m.ns / blocks;
    }
  if (rc == 0) {
    const double w = bench_median(samples[0], runs), c = bench_median(samples[1], runs);
    printf(
        "\nadmission per chunk (window %u, chunks of %u, prompts of %u tokens, pool %u blocks)\n",
        CA_WINDOW, CA_CHUNK, CA_PROMPT, CA_POOL);
    const uint32_t gw = windowed_group(e), gf = 1 - gw;
    printf("  %-10s %10s %16s %12s\n", "mode", "ns/block", "windowed peak", "full peak");
    printf("  %-10s %10.1f %16u %12u\n", "whole", w, peaks[0].peak[gw], peaks[0].peak[gf]);
    printf("  %-10s %10.1f %16u %12u\n", "per chunk", c, peaks[1].peak[gw], peaks[1].peak[gf]);
    printf("  per chunk / whole: %.2fx per block\n", c / w);
  }
  pkv_engine_destroy(e);
  free(tokens);
  return rc;
}
