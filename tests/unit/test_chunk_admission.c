/* Admission per chunk (DESIGN.md §7, issue 30 item 2): in an engine with a windowed KV group,
 * pkv_step admits a request once its prefix hits and its first chunk fit, and each later chunk
 * reserves its own slots, so a windowed group peaks at its window plus one chunk during prefill
 * instead of the whole prompt. A Gemma-3-like engine (layer 0 sliding, layer 1 full) on the CPU
 * backend, driven by pkv_step with sched_util.h's checkable model: every attention output row is
 * checked against the exact windowed (or full) average, every token against the model. */
#include "sched_util.h"

#include <stdio.h>

enum { BS = 16, MAX_REQ = 8 };

/* Layer 0 windowed (window), layer 1 full: one group each. host_blocks: a host tier that
 * preemption swaps to (0: none, preemption recomputes). */
static pkv_engine *gemma_like_host(uint32_t window, uint32_t num_blocks, uint32_t max_tokens,
                                   uint32_t max_seqs, uint32_t caching, uint32_t host_blocks) {
  pkv_engine_params p;
  tu_params(&p, BS, num_blocks);
  p.host_num_blocks = host_blocks;
  p.preemption_mode = host_blocks ? PKV_PREEMPT_SWAP : p.preemption_mode;
  const uint32_t windows[2] = {window, 0};
  p.layer_windows = windows;
  p.max_num_batched_tokens = max_tokens;
  p.max_num_seqs = max_seqs;
  p.enable_prefix_caching = caching;
  return tu_engine_p(&p);
}

static pkv_engine *gemma_like(uint32_t window, uint32_t num_blocks, uint32_t max_tokens,
                              uint32_t max_seqs, uint32_t caching) {
  return gemma_like_host(window, num_blocks, max_tokens, max_seqs, caching, 0);
}

/* The group of the windowed layer (layer 0) and of the full one. */
static void groups_of(pkv_engine *e, uint32_t *windowed, uint32_t *full) {
  pkv_engine_params p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  CHECK_OK(pkv_engine_params_get(e, &p));
  uint32_t layer_group[2] = {0, 0}, n = 0;
  CHECK_OK(pkv_kv_groups(&p, layer_group, NULL, NULL, 0, &n, NULL));
  CHECK_EQ_INT(n, 2);
  *windowed = layer_group[0], *full = layer_group[1];
}

/* Blocks seq holds in group g (entries not -1). */
static uint32_t held(pkv_engine *e, uint64_t seq, uint32_t g) {
  static int32_t t[1024];
  uint32_t len = 0, k = 0;
  CHECK_OK(pkv_seq_group_block_table(e, seq, g, t, 1024, &len));
  for (uint32_t i = 0; i < len; i++) k += t[i] >= 0;
  return k;
}

static su_req *req_of(su_req *reqs, uint32_t n, uint64_t seq) {
  for (uint32_t i = 0; i < n; i++)
    if (reqs[i].seq == seq) return &reqs[i];
  CHECK(0);
  return &reqs[0];
}

/* pkv_attention with the model's V on both layers; every row checked: out * count is the sum of
 * V over the keys the layer reads (layer 0 its window, layer 1 every key), exactly. */
static void attend(pkv_batch *b, const pkv_batch_view *v, su_req *reqs, uint32_t nreqs,
                   uint32_t window) {
  size_t nq = (size_t)v->num_tokens * SU_QH * SU_HD, nkv = (size_t)v->num_tokens * SU_KV;
  float *q = calloc(nq, sizeof *q), *k = calloc(nkv, sizeof *k), *val = calloc(nkv, sizeof *val);
  float *out = calloc(nq, sizeof *out);
  for (uint32_t layer = 0; layer < SU_LAYERS && CHECK(q && k && val && out); layer++) {
    for (uint32_t i = 0; i < v->num_seqs; i++) {
      const su_req *r = req_of(reqs, nreqs, v->seq_ids[i]);
      for (int32_t row = v->query_start[i]; row < v->query_start[i + 1]; row++) {
        const int32_t *s = r->vsum + (size_t)v->positions[row] * SU_KV;
        for (uint32_t j = 0; j < SU_KV; j++)
          val[(size_t)row * SU_KV + j] =
              (float)(s[j] - (v->positions[row] ? s[(int)j - SU_KV] : 0) + (int32_t)layer);
      }
    }
    if (!CHECK_OK(pkv_attention(b, layer, q, k, val, out))) break;
    int bad = 0;
    for (uint32_t i = 0; i < v->num_seqs && !bad; i++) {
      const su_req *r = req_of(reqs, nreqs, v->seq_ids[i]);
      for (int32_t row = v->query_start[i]; row < v->query_start[i + 1] && !bad; row++) {
        const int64_t pos = v->positions[row];
        const int64_t from = layer == 0 && pos >= (int64_t)window ? pos - window + 1 : 0;
        for (uint32_t h = 0; h < SU_QH * SU_HD && !bad; h++) {
          const uint32_t j = (h / SU_HD) / (SU_QH / SU_KVH) * SU_HD + h % SU_HD;
          double want = r->vsum[pos * SU_KV + j] - (from ? r->vsum[(from - 1) * SU_KV + j] : 0);
          want += (double)layer * (double)(pos - from + 1);
          const double err = out[(size_t)row * SU_QH * SU_HD + h] * (double)(pos - from + 1) - want;
          bad = !CHECK(err < 0.25 && err > -0.25);
        }
      }
    }
  }
  free(q), free(k), free(val), free(out);
}

/* A prompt of n tokens from seed (the model's tokens are any ids below SU_VOCAB). */
static int make_req(su_req *r, uint32_t n, uint32_t seed, uint32_t max_new) {
  static int32_t prompt[8192];
  for (uint32_t i = 0; i < n; i++) prompt[i] = (int32_t)((i * 7 + seed * 13 + i / 5) % SU_VOCAB);
  return su_req_make(r, prompt, n, max_new, -1, 0);
}

/* The peaks one run of pkv_step reached, measured after each pkv_step (the chunk reserved, not
 * yet computed) for reqs[0]: per group, and the pool's used blocks. */
typedef struct peaks {
  uint32_t windowed, full, used, steps;
} peaks;

/* Steps until every request finished: attention checked, the model's tokens sampled, and each
 * request ends with exactly the model's tokens. */
static peaks run(pkv_engine *e, su_req *reqs, uint32_t n, uint32_t window) {
  peaks pk = {0, 0, 0, 0};
  uint32_t gw = 0, gf = 0;
  groups_of(e, &gw, &gf);
  for (uint32_t finished = 0; finished < n && pk.steps < 5000; pk.steps++) {
    pkv_batch *b = NULL;
    if (!CHECK_OK(pkv_step(e, &b)) || !CHECK(b != NULL)) break;
    const pkv_batch_view v = tu_view(b);
    if (tu_info(e, reqs[0].seq).kv_tier == PKV_TIER_DEVICE) {
      const uint32_t w = held(e, reqs[0].seq, gw), f = held(e, reqs[0].seq, gf);
      pk.windowed = w > pk.windowed ? w : pk.windowed;
      pk.full = f > pk.full ? f : pk.full;
    }
    const uint32_t used = (uint32_t)tu_stats(e).num_used_blocks;
    pk.used = used > pk.used ? used : pk.used;
    attend(b, &v, reqs, n, window);
    int32_t sampled[MAX_REQ];
    su_sample(e, &v, sampled);
    if (!CHECK_OK(pkv_commit(b, sampled)) || !CHECK_ENGINE(e)) break;
    uint64_t done[MAX_REQ];
    uint32_t nd = 0;
    CHECK_OK(pkv_drain_finished(e, done, MAX_REQ, &nd));
    finished += nd;
  }
  static int32_t got[8192];
  for (uint32_t i = 0; i < n; i++) {
    const uint32_t len = su_tokens(e, reqs[i].seq, got, 8192);
    CHECK_EQ_INT(len, reqs[i].len);
    CHECK(len == reqs[i].len && memcmp(got, reqs[i].tokens, len * sizeof got[0]) == 0);
    CHECK_EQ_INT(tu_info(e, reqs[i].seq).finish_reason, PKV_FINISH_LENGTH);
  }
  return pk;
}

/* A 4096-token prompt, window 1024, chunks of 256, blocks of 16: the windowed group peaks at
 * 1024 / 16 + 256 / 16 = 80 blocks (every chunk starts on a block boundary, so the window of its
 * first token starts one token into a block: ceil((C + 256) / 16) - floor((C - 1023) / 16) = 80
 * for every C >= 1024), the full group at ceil((4096 + 3) / 16) = 257 (the prompt and the three
 * sampled tokens that get slots), the pool at 80 + 256 = 336 during the last chunk. Whole-prompt
 * admission (pkv_allocate of the same prompt) holds 256 blocks in the windowed group. */
static void test_prefill_peak(void) {
  pkv_engine *e = gemma_like(1024, 700, 256, 4, 1);
  if (!e) return;
  su_req r;
  if (!make_req(&r, 4096, 1, 4) || !su_submit(e, &r)) return;
  const peaks pk = run(e, &r, 1, 1024);
  CHECK_EQ_INT(pk.windowed, 80);
  CHECK_EQ_INT(pk.full, 257);
  CHECK_EQ_INT(pk.used, 336);
  CHECK_EQ_INT(pk.steps, 16 + 3); /* 16 chunks (the last samples), then 3 decode steps */
  printf("  4096-token prompt, window 1024, chunks of 256: windowed group peak %u blocks (whole "
         "prompt: 256), full %u, pool %u\n",
         pk.windowed, pk.full, pk.used);
  /* Another prompt (no hit), allocated whole. */
  uint32_t gw = 0, gf = 0;
  groups_of(e, &gw, &gf);
  su_req other;
  if (make_req(&other, 4096, 5, 1)) {
    const uint64_t whole = tu_alloc(e, other.tokens, 4096, NULL);
    CHECK_EQ_INT(held(e, whole, gw), 256);
    CHECK_EQ_INT(held(e, whole, gf), 256);
    CHECK_OK(pkv_release(e, whole));
    su_req_free(&other);
  }
  CHECK_OK(pkv_release(e, r.seq));
  su_req_free(&r);
  pkv_engine_destroy(e);
}

/* "Can it ever run" at the peak, hand-computed for prompt 4096 + max_new 4 = 4100 tokens: the
 * full group ceil(4100 / 16) = 257; the windowed group the largest of its decode window
 * (ceil(1024 / 16) + 1 = 65), a chunk of 256 at worst alignment (1024 + 256 - 1 keys from a
 * block's last slot: ceil(1278 / 16) + 1 = 81) and the last sealed block kept with caching
 * (ceil((15 + 256) / 16) + 1 = 18): 81. 338 in all: a pool of 337 refuses it, saying so; one
 * of 338 runs it to the end. */
static void test_submit_refuses_past_peak(void) {
  su_req r;
  if (!make_req(&r, 4096, 2, 4)) return;
  pkv_engine *e = gemma_like(1024, 337, 256, 4, 1);
  if (e) {
    pkv_request_params rp;
    pkv_request_params_init(&rp, sizeof rp);
    rp.max_new_tokens = 4;
    uint64_t id = 0;
    const pkv_stats before = tu_stats(e);
    CHECK_ERR(e, pkv_submit(e, r.tokens, 4096, &rp, &id), PKV_ERR_INVALID_ARGUMENT);
    CHECK(strstr(pkv_last_error(), "need 338 blocks at their peak (admitted per chunk)") != NULL);
    CHECK_EQ_INT(id, 0);
    CHECK_EQ_INT(tu_stats(e).num_waiting_requests, before.num_waiting_requests);
    pkv_engine_destroy(e);
  }
  e = gemma_like(1024, 338, 256, 4, 1);
  if (!e || !su_submit(e, &r)) return;
  const peaks pk = run(e, &r, 1, 1024);
  CHECK(pk.used <= 338);
  CHECK_OK(pkv_release(e, r.seq));
  su_req_free(&r);
  pkv_engine_destroy(e);
}

/* A first chunk that does not fit changes nothing: the request stays waiting with no blocks and
 * the pool as it was; once blocks are free it is admitted with exactly its first chunk's. */
static void test_first_chunk_does_not_fit(void) {
  /* Peak 42 (prompt 514: 33 full + 9 windowed); pkv_allocate reserves its prompt in both. */
  pkv_engine *e = gemma_like(64, 49, 64, 4, 1);
  if (!e) return;
  int32_t hog_tokens[21 * BS];
  tu_fill(hog_tokens, 21 * BS, 1000);
  const uint64_t hog = tu_alloc(e, hog_tokens, 21 * BS, NULL); /* 2 x 21 blocks: 7 free */
  su_req r;
  if (!make_req(&r, 512, 3, 2) || !su_submit(e, &r)) return;
  const pkv_stats before = tu_stats(e);
  CHECK_EQ_INT(before.num_free_blocks, 7);
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(e, &b)); /* the first chunk: 64 tokens, 4 blocks in each group */
  CHECK(b == NULL);
  const pkv_stats after = tu_stats(e);
  CHECK_EQ_INT(after.num_free_blocks, 7);
  CHECK_EQ_INT(after.num_used_blocks, before.num_used_blocks);
  CHECK_EQ_INT(after.num_waiting_requests, 1);
  CHECK_EQ_INT(after.num_running_requests, 0);
  CHECK_EQ_INT(after.prefix_query_tokens, before.prefix_query_tokens);
  CHECK_EQ_INT(tu_info(e, r.seq).num_blocks, 0);
  CHECK_ENGINE(e);
  /* Nine free and it fits: 8 blocks, 64 tokens computed in this step. */
  CHECK_OK(pkv_release(e, hog));
  const uint64_t hog2 = tu_alloc(e, hog_tokens, 20 * BS, NULL);
  CHECK_EQ_INT(tu_stats(e).num_free_blocks, 9);
  CHECK_OK(pkv_step(e, &b));
  if (CHECK(b != NULL)) {
    CHECK_EQ_INT(tu_view(b).num_tokens, 64);
    CHECK_EQ_INT(tu_stats(e).num_free_blocks, 1);
    pkv_batch_abort(b);
  }
  CHECK_ENGINE(e);
  CHECK_OK(pkv_release(e, hog2));
  CHECK_OK(pkv_release(e, r.seq));
  su_req_free(&r);
  pkv_engine_destroy(e);
}

/* Several long prompts racing for a small pool: later chunks that do not fit preempt the newest
 * request (recompute, or swap to the host tier: its slotted KV goes, its unslotted prompt rest
 * waits with it), and every request still finishes with the model's tokens and outputs. Each
 * needs 41 + 9 = 50 blocks at its peak (prompt 640 + 8: ceil(648 / 16) = 41 full; window 64,
 * chunks of 64: ceil(126 / 16) + 1 = 9); the pool has 64. */
static void test_preemption_under_pressure(uint32_t caching, uint32_t swap) {
  pkv_engine *e = gemma_like_host(64, 64, 64, 4, caching, swap ? 256 : 0);
  if (!e) return;
  su_req reqs[4];
  for (uint32_t i = 0; i < 4; i++)
    if (!make_req(&reqs[i], 640, 10 + i, 8) || !su_submit(e, &reqs[i])) return;
  const peaks pk = run(e, reqs, 4, 64);
  const pkv_stats st = tu_stats(e);
  CHECK(st.num_preemptions > 0);
  CHECK_EQ_INT(st.num_swap_preemptions, swap ? st.num_preemptions : 0);
  CHECK(pk.used <= 64);
  printf("  4 prompts of 640 in 64 blocks (caching %u, swap %u): %u steps, %llu preemptions\n",
         caching, swap, pk.steps, (unsigned long long)st.num_preemptions);
  for (uint32_t i = 0; i < 4; i++) {
    CHECK_OK(pkv_release(e, reqs[i].seq));
    su_req_free(&reqs[i]);
  }
  CHECK_EQ_INT(tu_stats(e).num_used_blocks, 0);
  pkv_engine_destroy(e);
}

static void test_preemption_caching(void) { test_preemption_under_pressure(1, 0); }
static void test_preemption_no_caching(void) { test_preemption_under_pressure(0, 0); }
static void test_preemption_swap(void) { test_preemption_under_pressure(1, 1); }

/* Without a windowed group the whole prompt is still reserved at admission (DESIGN.md §7). */
static void test_full_attention_admits_whole(void) {
  pkv_engine *e = su_engine(BS, 64, 4, 64, 0, 1);
  if (!e) return;
  su_req r;
  if (!make_req(&r, 512, 4, 2) || !su_submit(e, &r)) return;
  pkv_batch *b = NULL;
  CHECK_OK(pkv_step(e, &b));
  if (CHECK(b != NULL)) {
    CHECK_EQ_INT(tu_view(b).num_tokens, 64);        /* one chunk computes */
    CHECK_EQ_INT(tu_info(e, r.seq).num_blocks, 32); /* the whole prompt has its slots */
    pkv_batch_abort(b);
  }
  CHECK_OK(pkv_release(e, r.seq));
  su_req_free(&r);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_prefill_peak);
  TU_RUN(test_submit_refuses_past_peak);
  TU_RUN(test_first_chunk_does_not_fit);
  TU_RUN(test_preemption_caching);
  TU_RUN(test_preemption_no_caching);
  TU_RUN(test_preemption_swap);
  TU_RUN(test_full_attention_admits_whole);
  return tu_summary();
}
