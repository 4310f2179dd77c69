/*
 * test_multimodal_keys.c - extra keys and LoRA adapter ids in block identity (pkv_extra_key,
 * pkv_seq_params.lora_id; DESIGN.md §4): a multimodal prompt's placeholder tokens are equal for
 * every image, so the image's content hash names its blocks.
 *
 *  - two prompts with the same placeholders and different item keys never hit each other past the
 *    text before the item; the same keys hit; an adapter id is a root of its own;
 *  - an item changes the hash of every block it overlaps and none before it: the events' hashes
 *    are pkv_block_hash's before the item and pkv_block_hash_extra's from it on, and carry
 *    lora_id and num_extra_keys;
 *  - a sequence keeps its keys through recompute (preempt, resume), fork, and the scheduler's
 *    requests (pkv_submit);
 *  - the store's keys include them: a file store written under one adapter and item serves
 *    another engine only under the same adapter and item;
 *  - bad keys are refused naming the key and the rule, with nothing changed.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw under -std=c11 */
#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include "sched_util.h"
#include "test_util.h"

/* 18 tokens of 4-token blocks: text [0, 6), an image's 12 placeholders [6, 18). Blocks 1-3 (and
 * the partial 4th) overlap the image; block 0 does not. A prompt hits at most 4 blocks. */
enum { BS = 4, LEN = 18, ITEM_START = 6, PLACEHOLDER = 151655 };

static void prompt(int32_t *t) {
  for (uint32_t i = 0; i < LEN; i++) t[i] = i < ITEM_START ? 100 + (int32_t)i : PLACEHOLDER;
}

static pkv_extra_key image(const char *hash) {
  pkv_extra_key k;
  memset(&k, 0, sizeof k);
  k.start_token = ITEM_START;
  k.end_token = LEN;
  k.key = hash;
  k.key_len = (uint32_t)strlen(hash);
  return k;
}

/* Seq params with one item (hash NULL: none) and an adapter. */
static pkv_seq_params keyed(const pkv_extra_key *item, uint64_t lora_id) {
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.extra_keys = item;
  sp.num_extra_keys = item ? 1 : 0;
  sp.lora_id = lora_id;
  return sp;
}

static uint32_t query(pkv_engine *e, const int32_t *t, uint32_t n, const char *hash,
                      uint64_t lora_id) {
  pkv_extra_key k = image(hash ? hash : "-");
  pkv_seq_params sp = keyed(hash ? &k : NULL, lora_id);
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate_query(e, t, n, &sp, NULL, &cached));
  return cached;
}

static uint64_t compute(pkv_engine *e, const int32_t *t, const char *hash, uint64_t lora_id,
                        uint32_t *cached) {
  pkv_extra_key k = image(hash ? hash : "-");
  pkv_seq_params sp = keyed(hash ? &k : NULL, lora_id);
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_allocate(e, t, LEN, &sp, &seq, cached))) return 0;
  tu_compute1(e, seq);
  return seq;
}

static void test_items_and_adapters_hit_exactly(uint32_t debug_flags) {
  pkv_engine *e = tu_engine(BS, 64, debug_flags);
  if (!e) return;
  int32_t t[LEN];
  prompt(t);
  uint32_t cached = 99;
  const uint64_t a = compute(e, t, "image-A", 0, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(query(e, t, LEN, "image-A", 0), 4 * BS); /* the same image hits */
  CHECK_EQ_INT(query(e, t, LEN, "image-B", 0), BS);     /* another: the text before it only */
  CHECK_EQ_INT(query(e, t, LEN, NULL, 0), BS);          /* no key: the same */
  CHECK_EQ_INT(query(e, t, LEN, "image-A", 7), 0);      /* another adapter: nothing */
  /* An adapter's blocks hit under that adapter only. */
  const uint64_t l = compute(e, t, NULL, 7, &cached);
  CHECK_EQ_INT(cached, 0);
  CHECK_EQ_INT(query(e, t, LEN, NULL, 7), 4 * BS);
  CHECK_EQ_INT(query(e, t, LEN, NULL, 8), 0);
  CHECK_EQ_INT(query(e, t, LEN, NULL, 0), BS); /* a's text block */
  /* Released, both stay cached under their keys. */
  CHECK_OK(pkv_release(e, a));
  CHECK_OK(pkv_release(e, l));
  CHECK_EQ_INT(query(e, t, LEN, "image-A", 0), 4 * BS);
  CHECK_EQ_INT(query(e, t, LEN, "image-B", 7), BS);
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

static void test_items_and_adapters(void) {
  test_items_and_adapters_hit_exactly(0);
  /* Every block hashes alike: only the exact compare of tokens and extra bytes tells them apart. */
  test_items_and_adapters_hit_exactly(PKV_DEBUG_CONSTANT_HASH);
}

static pkv_engine *event_engine(void) {
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.enable_kv_events = 1;
  p.hash_seed = 42;
  return tu_engine_p(&p);
}

/* The events of one prompt: its blocks' hashes, from the root of its adapter, chained through
 * pkv_block_hash before the item and pkv_block_hash_extra from it on. */
static void test_events_carry_keys(void) {
  pkv_engine *e = event_engine();
  if (!e) return;
  int32_t t[LEN];
  prompt(t);
  pkv_extra_key k = image("image-A");
  pkv_seq_params sp = keyed(&k, 5);
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_allocate(e, t, LEN, &sp, &seq, NULL))) return;
  tu_compute1(e, seq);
  pkv_kv_event ev[8];
  uint32_t n = 0;
  CHECK_OK(pkv_drain_kv_events(e, ev, 8, &n));
  CHECK_EQ_INT(n, 4);
  uint64_t parent = 0, plain = 0;
  CHECK_OK(pkv_block_hash_root_lora(42, NULL, 0, 5, &parent));
  CHECK_OK(pkv_block_hash_root(42, NULL, 0, &plain));
  CHECK(parent != plain); /* the adapter is in the root */
  for (uint32_t j = 0; j < n && j < 4; j++) {
    uint64_t want = 0, text = 0;
    CHECK_OK(pkv_block_hash_extra(42, parent, t + j * BS, BS, j * BS, &k, 1, sizeof k, &want));
    CHECK_OK(pkv_block_hash(42, parent, t + j * BS, BS, &text));
    CHECK_EQ_INT(ev[j].type, PKV_EVENT_BLOCK_STORED);
    CHECK(ev[j].block_hash == want && ev[j].parent_hash == parent);
    CHECK_EQ_INT(ev[j].lora_id, 5);
    CHECK_EQ_INT(ev[j].num_extra_keys, j == 0 ? 0 : 1);
    /* Block 0 is before the image: its hash is the text's; every block from the image on differs */
    CHECK(j == 0 ? want == text : want != text);
    parent = want;
  }
  /* Events of the 0.4 size still come whole up to it, without the new fields. */
  pkv_kv_event old[2];
  memset(old, 0xab, sizeof old);
  CHECK_OK(pkv_release(e, seq));
  CHECK_OK(pkv_reset_prefix_cache(e));
  CHECK_OK(pkv_drain_kv_events_sized(e, old, 40, 1, &n));
  CHECK_EQ_INT(n, 1);
  CHECK(((const unsigned char *)old)[40] == 0xab); /* nothing past the caller's 40 bytes */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Recompute after preemption, a fork's child and the scheduler's requests keep their keys. */
static void test_sequences_keep_their_keys(void) {
  pkv_engine *e = tu_engine(BS, 64, 0);
  if (!e) return;
  int32_t t[LEN + 6];
  prompt(t);
  tu_fill(t + LEN, 6, 500);
  uint32_t cached = 0;
  const uint64_t s = compute(e, t, "image-A", 3, &cached);
  CHECK_OK(pkv_preempt(e, s));
  CHECK_OK(pkv_resume(e, s, &cached));
  CHECK_EQ_INT(cached, 4 * BS); /* re-admitted under its own keys */
  tu_compute1(e, s);            /* its last 2 tokens */
  /* The child seals its own full block 4, which the image overlaps ([16, 18)): under the keys. */
  uint64_t child = 0;
  CHECK_OK(pkv_fork(e, s, &child));
  CHECK_OK(pkv_append(e, child, t + LEN, 6));
  tu_compute1(e, child);
  pkv_extra_key k = image("image-A");
  pkv_seq_params sp = keyed(&k, 3);
  CHECK_OK(pkv_allocate_query(e, t, LEN + 6, &sp, NULL, &cached));
  CHECK_EQ_INT(cached, 5 * BS);
  CHECK_OK(pkv_release(e, s));
  CHECK_OK(pkv_release(e, child));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

/* Runs a request of the prompt under an image and adapter to its end; its cached tokens. */
static uint32_t run_request(pkv_engine *e, const int32_t *t, const char *hash, uint64_t lora_id) {
  pkv_extra_key k = image(hash);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 1;
  rp.extra_keys = &k;
  rp.num_extra_keys = 1;
  rp.lora_id = lora_id;
  uint64_t seq = 0;
  if (!CHECK_OK(pkv_submit(e, t, LEN, &rp, &seq))) return 99;
  CHECK(su_run(e, 20) > 0);
  const struct pkv_seq_info info = tu_info(e, seq);
  CHECK_EQ_INT(info.finish_reason, PKV_FINISH_LENGTH);
  CHECK_OK(pkv_release(e, seq));
  return info.num_cached_tokens;
}

static void test_requests_keep_their_keys(void) {
  pkv_engine *e = su_engine(BS, 64, 4, 256, 0, 1);
  if (!e) return;
  int32_t t[LEN];
  prompt(t);
  CHECK_EQ_INT(run_request(e, t, "image-A", 2), 0);
  CHECK_EQ_INT(run_request(e, t, "image-A", 2), 4 * BS);
  CHECK_EQ_INT(run_request(e, t, "image-B", 2), BS);
  CHECK_EQ_INT(run_request(e, t, "image-A", 9), 0);
  pkv_engine_destroy(e);
}

/* ---------------------------------------------------------------- the store's keys */
static char store_dir[64];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* A fresh engine on the store directory (write-through), which admits the prompt under an image
 * and adapter; the blocks the store served it. */
static uint64_t store_hits(const int32_t *t, const char *hash, uint64_t lora_id) {
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE;
  st.path = store_dir;
  pkv_engine_params p;
  tu_params(&p, BS, 64);
  p.host_num_blocks = 16;
  p.store = &st;
  pkv_engine *e = tu_engine_p(&p);
  if (!e) return 99;
  uint32_t cached = 0;
  const uint64_t seq = compute(e, t, hash, lora_id, &cached);
  const uint64_t hits = tu_stats(e).num_store_hits;
  CHECK_EQ_INT(cached, hits * BS);
  CHECK_OK(pkv_release(e, seq));
  CHECK_ENGINE(e);
  pkv_engine_destroy(e); /* its writes are finished */
  return hits;
}

static void test_store_keys(void) {
  if (!CHECK(mkdtemp(strcpy(store_dir, "/tmp/pkv-mm-keys-XXXXXX")) != NULL)) return;
  int32_t t[LEN];
  prompt(t);
  CHECK_EQ_INT(store_hits(t, "image-A", 3), 0); /* writes blocks 0-3 under adapter 3, image A */
  CHECK_EQ_INT(store_hits(t, "image-A", 4), 0); /* another adapter: another root */
  CHECK_EQ_INT(store_hits(t, "image-B", 3), 1); /* another image: the text block only */
  CHECK_EQ_INT(store_hits(t, NULL, 3), 1);      /* no key: the same (and writes its own) */
  CHECK_EQ_INT(store_hits(t, "image-A", 3), 4); /* the same: every block */
  /* The values are well formed for the store's own check: a key is SHA-256 of the parent its
   * value names and its tokens, also for blocks with extra keys. */
  pkv_store_params st;
  pkv_store_params_init(&st, sizeof st);
  st.kind = PKV_STORE_FILE;
  st.path = store_dir;
  pkv_store *s = NULL;
  if (CHECK_OK(pkv_store_open(&st, &s))) {
    pkv_store_verify_result r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    CHECK_OK(pkv_store_verify(s, 0, &r));
    /* 4 (A, 3) + 4 (A, 4) + 3 (B, 3) + 3 (none, 3): adapter 3's text block once */
    CHECK_EQ_INT(r.num_good, 14);
    CHECK_EQ_INT(r.num_bad, 0);
    pkv_store_close(s);
  }
  nftw(store_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* ---------------------------------------------------------------- refusals */
static void expect_refused(pkv_engine *e, const int32_t *t, const pkv_extra_key *keys, uint32_t n,
                           uint32_t key_size, const char *words) {
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.extra_keys = keys;
  sp.num_extra_keys = n;
  sp.extra_key_size = key_size;
  uint64_t seq = 0;
  CHECK_ERR(e, pkv_allocate(e, t, LEN, &sp, &seq, NULL), PKV_ERR_INVALID_ARGUMENT);
  if (!CHECK(strstr(pkv_engine_last_error(e), words) != NULL))
    fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", pkv_engine_last_error(e), words);
  CHECK_EQ_INT(seq, 0);
  uint32_t blocks = 0;
  CHECK_ERR(e, pkv_allocate_query(e, t, LEN, &sp, &blocks, NULL), PKV_ERR_INVALID_ARGUMENT);
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.extra_keys = keys;
  rp.num_extra_keys = n;
  rp.extra_key_size = key_size;
  CHECK_ERR(e, pkv_submit(e, t, LEN, &rp, &seq), PKV_ERR_INVALID_ARGUMENT);
}

static void test_bad_keys_refused(void) {
  pkv_engine *e = tu_engine(BS, 64, 0);
  if (!e) return;
  int32_t t[LEN];
  prompt(t);
  pkv_extra_key k[2] = {image("a"), image("b")};
  k[0].start_token = 2, k[0].end_token = 8, k[1].start_token = 8, k[1].end_token = 12;
  const uint32_t ks = sizeof(pkv_extra_key);
  pkv_extra_key bad[2];
  memcpy(bad, k, sizeof k);
  bad[1].start_token = 7; /* overlaps key 0 */
  expect_refused(e, t, bad, 2, ks, "extra key 1 starts at token 7, before extra key 0 ends");
  memcpy(bad, k, sizeof k);
  bad[1].end_token = LEN + 1;
  expect_refused(e, t, bad, 2, ks, "extra key 1 ends at token 19, past the prompt's 18 tokens");
  memcpy(bad, k, sizeof k);
  bad[0].end_token = bad[0].start_token;
  expect_refused(e, t, bad, 2, ks, "extra key 0 covers tokens [2, 2)");
  memcpy(bad, k, sizeof k);
  bad[1].key_len = 0;
  expect_refused(e, t, bad, 2, ks, "extra key 1: key_len 0");
  bad[1].key_len = PKV_MAX_EXTRA_KEY_BYTES + 1;
  expect_refused(e, t, bad, 2, ks, "extra key 1: key_len 65");
  memcpy(bad, k, sizeof k);
  bad[0].key = NULL;
  expect_refused(e, t, bad, 2, ks, "extra key 0: key is NULL");
  memcpy(bad, k, sizeof k);
  bad[1].reserved0 = 1;
  expect_refused(e, t, bad, 2, ks, "extra key 1: reserved0 must be 0");
  expect_refused(e, t, NULL, 2, ks, "extra_keys is NULL with num_extra_keys 2");
  expect_refused(e, t, k, 2, 20, "extra_key_size 20");
  /* Nothing was admitted: the first sequence made gets id 1, and hits nothing. */
  pkv_seq_params sp;
  pkv_seq_params_init(&sp, sizeof sp);
  sp.extra_keys = k;
  sp.num_extra_keys = 2;
  uint64_t seq = 0;
  uint32_t cached = 99;
  CHECK_OK(pkv_allocate(e, t, LEN, &sp, &seq, &cached));
  CHECK_EQ_INT(seq, 1);
  CHECK_EQ_INT(cached, 0);
  /* A 0.4 caller's struct (without the new fields) is no extra key and no adapter. */
  pkv_seq_params old;
  pkv_seq_params_init(&old, sizeof old);
  old.struct_size = 16;
  CHECK_OK(pkv_allocate_query(e, t, LEN, &old, NULL, &cached));
  CHECK_EQ_INT(cached, 0); /* seq 1 is not computed */
  CHECK_ENGINE(e);
  pkv_engine_destroy(e);
}

int main(void) {
  TU_RUN(test_items_and_adapters);
  TU_RUN(test_events_carry_keys);
  TU_RUN(test_sequences_keep_their_keys);
  TU_RUN(test_requests_keep_their_keys);
  TU_RUN(test_store_keys);
  TU_RUN(test_bad_keys_refused);
  return tu_summary();
}
