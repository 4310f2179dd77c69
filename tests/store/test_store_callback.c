/* The store tier through the host's callbacks (PKV_STORE_CALLBACK), with a map in this file as the
 * store: an engine writes its sealed prefix blocks through (the writer thread; destroying the
 * engine finishes the queue), a second engine on the same store gets them back as cached tokens
 * (fetched, verified, staged in its host tier and loaded by the batch's copies) holding the same
 * bytes; a damaged value, another salt, another model and a failing store are misses, counted and
 * explained, never a failed call. */
#include <stddef.h>
#include <stdlib.h>

#include "../unit/test_util.h"

enum { BS = 4, BLOCKS = 12, HOST = 8, D = 8, KVH = 2, LAYERS = 2, MAX_VALUES = 64 };

/* The host's store: keys and values in arrays. */
typedef struct map {
  pkv_store_key keys[MAX_VALUES];
  unsigned char *values[MAX_VALUES];
  uint64_t value_bytes;
  uint32_t n;
  int fail_get; /* get answers an error */
  uint32_t gets, puts;
} map;

static int find(const map *m, const pkv_store_key *k) {
  for (uint32_t i = 0; i < m->n; i++)
    if (memcmp(m->keys[i].bytes, k->bytes, 32) == 0) return (int)i;
  return -1;
}

static int map_get(void *user, const pkv_store_key *keys, uint32_t n, void *values,
                   uint64_t value_bytes, uint8_t *found, uint32_t timeout_ms, char *message,
                   uint32_t cap) {
  map *m = user;
  (void)timeout_ms;
  m->gets++;
  if (m->fail_get) {
    snprintf(message, cap, "the test's store is down");
    return 5;
  }
  for (uint32_t i = 0; i < n; i++) {
    const int at = find(m, &keys[i]);
    found[i] = at >= 0 && m->value_bytes == value_bytes;
    if (found[i]) memcpy((char *)values + i * value_bytes, m->values[at], value_bytes);
  }
  return 0;
}

static int map_put(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
                   uint64_t value_bytes, char *message, uint32_t cap) {
  map *m = user;
  (void)message, (void)cap;
  for (uint32_t i = 0; i < n; i++) {
    int at = find(m, &keys[i]);
    if (at < 0) {
      if (m->n == MAX_VALUES) return 1;
      at = (int)m->n++;
      m->keys[at] = keys[i];
      m->values[at] = malloc(value_bytes);
    }
    m->value_bytes = value_bytes;
    memcpy(m->values[at], (const char *)values + i * value_bytes, value_bytes);
    m->puts++;
  }
  return 0;
}

static void map_free(map *m) {
  for (uint32_t i = 0; i < m->n; i++) free(m->values[i]);
  memset(m, 0, sizeof *m);
}

static pkv_store_callbacks callbacks(map *m) {
  pkv_store_callbacks cb;
  memset(&cb, 0, sizeof cb);
  cb.struct_size = sizeof cb;
  cb.user = m;
  cb.get = map_get;
  cb.put = map_put;
  return cb;
}

static pkv_engine *engine_mode(const pkv_store_callbacks *cb, uint32_t head_dim,
                               uint32_t write_mode) {
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  sp.kind = PKV_STORE_CALLBACK;
  sp.callbacks = cb;
  sp.write_mode = write_mode;
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS); /* f32, 2 layers, 2 kv heads of 8 */
  p.head_dim = head_dim;
  p.host_num_blocks = HOST;
  p.enable_kv_events = 1;
  p.store = &sp;
  return tu_engine_p(&p);
}

static pkv_engine *engine(const pkv_store_callbacks *cb, uint32_t head_dim) {
  return engine_mode(cb, head_dim, PKV_STORE_WRITE_THROUGH);
}

/* A prompt computed by a batch whose KV the test writes (as a host's kernels would). */
static uint64_t compute(pkv_engine *e, const int32_t *t, uint32_t n, const char *salt,
                        uint32_t tag) {
  const uint64_t s = tu_alloc_salt(e, t, n, salt, NULL);
  pkv_batch *b = NULL;
  if (!CHECK_OK(pkv_batch_begin(e, &s, NULL, 1, &b))) return s;
  CHECK_OK(pkv_batch_copy(b));
  tu_kv_pattern(e, s, tag, n, 0);
  CHECK_OK(pkv_batch_end(b));
  return s;
}

static void store_error(pkv_engine *e, char *out, uint32_t cap) {
  uint32_t len = 0;
  CHECK_OK(pkv_engine_store_error(e, out, cap, &len));
}

/* Written through by one engine, read by another: the same bytes, counted per tier. */
static void test_share_between_engines(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13];
  tu_fill(t, 13, 1);
  pkv_engine *a = engine(&cb, D);
  if (!a) return;
  compute(a, t, 13, NULL, 7); /* 3 full blocks sealed: written through */
  pkv_engine_destroy(a);      /* the writer finishes first */
  CHECK_EQ_INT(m.n, 3);

  pkv_engine *b = engine(&cb, D);
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(b, t, 13, &cached);
  CHECK_EQ_INT(cached, 12);
  pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.store_hit_tokens, 12);
  CHECK_EQ_INT(st.host_hit_tokens, 0);
  CHECK_EQ_INT(st.device_hit_tokens, 0);
  CHECK_EQ_INT(st.num_store_lookups, 3);
  CHECK_EQ_INT(st.num_store_hits, 3);
  pkv_batch *bt = NULL;
  if (CHECK_OK(pkv_batch_begin(b, &s, NULL, 1, &bt))) {
    const pkv_batch_view v = tu_view(bt);
    uint32_t loads = 0;
    for (uint32_t i = 0; i < v.num_copies; i++) loads += v.copy_kind[i] == PKV_COPY_LOAD;
    CHECK_EQ_INT(loads, 3);
    CHECK_OK(pkv_batch_copy(bt));
    CHECK_EQ_INT(tu_kv_pattern(b, s, 7, 12, 1), 0); /* the bytes engine a computed */
    CHECK_OK(pkv_batch_end(bt));
  }
  pkv_kv_event ev[64];
  uint32_t n = 0, from_store = 0;
  CHECK_OK(pkv_drain_kv_events(b, ev, 64, &n));
  for (uint32_t i = 0; i < n; i++)
    from_store += ev[i].type == PKV_EVENT_BLOCK_STORED && ev[i].medium == PKV_TIER_STORE;
  CHECK_EQ_INT(from_store, 3);
  CHECK_ENGINE(b);
  /* Another salt, the same tokens: nothing shared. */
  uint32_t other = 99;
  const uint64_t s2 = tu_alloc_salt(b, t, 13, "other", &other);
  CHECK_EQ_INT(other, 0);
  CHECK_OK(pkv_release(b, s2));
  CHECK_OK(pkv_release(b, s));
  pkv_engine_destroy(b);

  /* Another model (head_dim 16): other keys, nothing found. */
  pkv_engine *c = engine(&cb, 16);
  if (c) {
    const uint64_t s3 = tu_alloc(c, t, 13, &cached);
    CHECK_EQ_INT(cached, 0);
    CHECK_EQ_INT(tu_stats(c).num_store_misses, 3);
    CHECK_OK(pkv_release(c, s3));
    pkv_engine_destroy(c);
  }
  map_free(&m);
}

/* A damaged value is rejected (a miss, counted, explained); the blocks before it still hit. */
static void test_damaged_values(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13];
  tu_fill(t, 13, 100);
  pkv_engine *a = engine(&cb, D);
  if (!a) return;
  compute(a, t, 13, NULL, 3);
  pkv_engine_destroy(a);
  CHECK_EQ_INT(m.n, 3);
  /* Damage the third block's payload: one flipped bit near the end. */
  m.values[2][m.value_bytes - 5] ^= 0x10;
  pkv_engine *b = engine(&cb, D);
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(b, t, 13, &cached);
  CHECK_EQ_INT(cached, 8);
  pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.num_store_hits, 2);
  CHECK_EQ_INT(st.num_store_rejected, 1);
  char why[256];
  store_error(b, why, sizeof why);
  CHECK(strstr(why, "checksum") != NULL);
  CHECK_OK(pkv_release(b, s));
  pkv_engine_destroy(b);
  /* Another block's value under this key (the store mixed them up): rejected too. */
  unsigned char *keep = m.values[0];
  m.values[0] = m.values[1];
  b = engine(&cb, D);
  if (b) {
    const uint64_t s2 = tu_alloc(b, t, 13, &cached);
    CHECK_EQ_INT(cached, 0);
    CHECK_EQ_INT(tu_stats(b).num_store_rejected, 1);
    store_error(b, why, sizeof why);
    CHECK(strstr(why, "rejected") != NULL);
    CHECK_OK(pkv_release(b, s2));
    pkv_engine_destroy(b);
  }
  m.values[0] = keep;
  map_free(&m);
}

/* A failing store: a miss, counted as an error with the host's message; the call succeeds. */
static void test_failing_store(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13];
  tu_fill(t, 13, 200);
  pkv_engine *a = engine(&cb, D);
  if (!a) return;
  compute(a, t, 13, NULL, 5);
  pkv_engine_destroy(a);
  m.fail_get = 1;
  pkv_engine *b = engine(&cb, D);
  if (!b) return;
  uint32_t cached = 9;
  const uint64_t s = tu_alloc(b, t, 13, &cached);
  CHECK_EQ_INT(cached, 0);
  const pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.num_store_errors, 3);
  CHECK_EQ_INT(st.num_store_hits, 0);
  char why[256];
  store_error(b, why, sizeof why);
  CHECK(strstr(why, "the test's store is down") != NULL);
  CHECK_OK(pkv_release(b, s));
  CHECK_ENGINE(b);
  pkv_engine_destroy(b);
  map_free(&m);
}

/* The scheduler's path: a submitted request whose prefix is in the store loads in the background
 * (another request runs meanwhile), then is admitted with the store's blocks as cached tokens;
 * pkv_step waits for the fetch when nothing else can run. */
static void test_scheduler_loads(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13], other[3];
  tu_fill(t, 13, 300);
  tu_fill(other, 3, 900); /* shorter than a block: nothing to ask of the store */
  pkv_engine *a = engine(&cb, D);
  if (!a) return;
  compute(a, t, 13, NULL, 9);
  pkv_engine_destroy(a);
  pkv_engine *b = engine(&cb, D);
  if (!b) return;
  pkv_request_params rp;
  pkv_request_params_init(&rp, sizeof rp);
  rp.max_new_tokens = 2;
  uint64_t x = 0, y = 0;
  CHECK_OK(pkv_submit(b, t, 13, &rp, &x));
  CHECK_OK(pkv_submit(b, other, 3, &rp, &y));
  /* Step 1: x starts loading, y runs. */
  pkv_batch *bt = NULL;
  CHECK_OK(pkv_step(b, &bt));
  if (!CHECK(bt != NULL)) return;
  pkv_batch_view v = tu_view(bt);
  CHECK_EQ_INT(v.num_seqs, 1);
  CHECK(v.seq_ids[0] == y);
  CHECK_EQ_INT(tu_stats(b).num_loading_requests, 1);
  CHECK_ENGINE(b);
  int32_t sampled[2] = {5, 5};
  CHECK_OK(pkv_commit(bt, sampled));
  /* Then x comes in with 12 cached tokens (the store's), 1 to compute, once its fetch is back. */
  int admitted = 0;
  for (int step = 0; step < 50 && !admitted; step++) {
    if (!CHECK_OK(pkv_step(b, &bt)) || !bt) break;
    v = tu_view(bt);
    CHECK_OK(pkv_batch_copy(bt)); /* the loads, before anything reads the pool */
    for (uint32_t i = 0; i < v.num_seqs; i++) {
      if (v.seq_ids[i] != x) continue;
      admitted = 1;
      CHECK_EQ_INT(v.query_start[i + 1] - v.query_start[i], 1);
      CHECK_EQ_INT(tu_kv_pattern(b, x, 9, 12, 1), 0);
    }
    CHECK_OK(pkv_commit(bt, sampled));
  }
  CHECK(admitted);
  const pkv_stats st = tu_stats(b);
  CHECK_EQ_INT(st.store_hit_tokens, 12);
  CHECK_EQ_INT(st.num_loading_requests, 0);
  CHECK_ENGINE(b);
  pkv_engine_destroy(b);
  map_free(&m);
}

/* Write-back: nothing is written at sealing; a block is written when it leaves the host tier
 * (offloaded first, then dropped for newer offloads), with the bytes it had. Read-only: never. */
static void test_write_back(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13], fill[BLOCKS * BS];
  tu_fill(t, 13, 500);
  pkv_engine *a = engine_mode(&cb, D, PKV_STORE_WRITE_BACK);
  if (!a) return;
  CHECK_OK(pkv_release(a, compute(a, t, 13, NULL, 4)));
  CHECK_EQ_INT(m.n, 0); /* nothing written at sealing */
  /* Two pool-sized prompts: the first evicts t's blocks into the host tier, the second's blocks
   * push them out of it (HOST blocks of room). */
  for (int round = 0; round < 2; round++) {
    tu_fill(fill, BLOCKS * BS, 10000 + round * 1000);
    CHECK_OK(pkv_release(a, compute(a, fill, BLOCKS * BS, NULL, 20 + (uint32_t)round)));
  }
  tu_fill(fill, BLOCKS * BS, 30000);
  const uint64_t f = tu_alloc(a, fill, BLOCKS * BS, NULL);
  CHECK_OK(pkv_release(a, f));
  CHECK(tu_stats(a).num_host_evictions >= 3);
  CHECK_ENGINE(a);
  pkv_engine_destroy(a);
  pkv_engine *b = engine_mode(&cb, D, PKV_STORE_READ_ONLY);
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(b, t, 13, &cached);
  CHECK_EQ_INT(cached, 12);
  pkv_batch *bt = NULL;
  if (CHECK_OK(pkv_batch_begin(b, &s, NULL, 1, &bt))) {
    CHECK_OK(pkv_batch_copy(bt));
    CHECK_EQ_INT(tu_kv_pattern(b, s, 4, 12, 1), 0);
    CHECK_OK(pkv_batch_end(bt));
  }
  const uint32_t before = m.puts;
  CHECK_OK(pkv_release(b, s));
  pkv_engine_destroy(b);
  CHECK_EQ_INT(m.puts, before); /* read-only wrote nothing */
  map_free(&m);
}

/* Write-back at shutdown: what the host tier still holds is written when the engine is destroyed
 * (waiting for room in the queue, never dropped), so a restart finds it. */
static void test_write_back_at_destroy(void) {
  map m = {0};
  const pkv_store_callbacks cb = callbacks(&m);
  int32_t t[13], fill[BLOCKS * BS];
  tu_fill(t, 13, 700);
  tu_fill(fill, BLOCKS * BS, 40000);
  pkv_engine *a = engine_mode(&cb, D, PKV_STORE_WRITE_BACK);
  if (!a) return;
  CHECK_OK(pkv_release(a, compute(a, t, 13, NULL, 6)));
  /* A pool-sized prompt evicts t's blocks into the host tier; its batch does the offloads. */
  const uint64_t f = tu_alloc(a, fill, BLOCKS * BS, NULL);
  pkv_batch *bt = NULL;
  if (CHECK_OK(pkv_batch_begin(a, &f, NULL, 1, &bt))) {
    CHECK_OK(pkv_batch_copy(bt));
    pkv_batch_abort(bt);
  }
  CHECK_OK(pkv_release(a, f));
  CHECK_EQ_INT(tu_stats(a).num_host_cached_blocks, 3);
  CHECK_EQ_INT(m.n, 0);
  pkv_engine_destroy(a);
  CHECK_EQ_INT(m.n, 3);
  pkv_engine *b = engine(&cb, D);
  if (!b) return;
  uint32_t cached = 0;
  const uint64_t s = tu_alloc(b, t, 13, &cached);
  CHECK_EQ_INT(cached, 12);
  if (CHECK_OK(pkv_batch_begin(b, &s, NULL, 1, &bt))) {
    CHECK_OK(pkv_batch_copy(bt));
    CHECK_EQ_INT(tu_kv_pattern(b, s, 6, 12, 1), 0);
    CHECK_OK(pkv_batch_end(bt));
  }
  CHECK_OK(pkv_release(b, s));
  pkv_engine_destroy(b);
  map_free(&m);
}

/* Bad store parameters are refused at create, naming the field. */
static void test_bad_params(void) {
  map m = {0};
  pkv_store_callbacks cb = callbacks(&m);
  pkv_store_params sp;
  pkv_store_params_init(&sp, sizeof sp);
  pkv_engine_params p;
  tu_params(&p, BS, BLOCKS);
  p.host_num_blocks = HOST;
  p.store = &sp;
  pkv_engine *e = NULL;
  sp.kind = 9;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  sp.kind = PKV_STORE_CALLBACK;
  sp.callbacks = NULL;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "callbacks") != NULL);
  cb.put = NULL;
  sp.callbacks = &cb;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  cb = callbacks(&m);
  p.host_num_blocks = 0;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "host tier") != NULL);
  p.host_num_blocks = HOST;
  p.enable_prefix_caching = 0;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  sp.kind = PKV_STORE_FILE;
  p.enable_prefix_caching = 1;
  CHECK_STATUS(pkv_engine_create(&p, &e), PKV_ERR_INVALID_ARGUMENT);
  CHECK(strstr(pkv_last_error(), "path") != NULL);
  CHECK(e == NULL);
  /* Kind NONE is no store, as a NULL pointer. */
  sp.kind = PKV_STORE_NONE;
  if (CHECK_OK(pkv_engine_create(&p, &e))) {
    pkv_engine_params got;
    pkv_engine_params_init(&got, sizeof got);
    CHECK_OK(pkv_engine_params_get(e, &got));
    CHECK(got.store == NULL);
    pkv_engine_destroy(e);
  }
  /* A struct_size that cuts the store pointer in two (found by fuzz_api): the pointer is not
   * read at all - no store - rather than half of it. */
  sp.kind = PKV_STORE_CALLBACK;
  sp.callbacks = &cb;
  p.struct_size = (uint32_t)offsetof(pkv_engine_params, store) + 4;
  if (CHECK_OK(pkv_engine_create(&p, &e))) {
    int32_t t[9];
    tu_fill(t, 9, 1);
    const uint64_t s = tu_alloc(e, t, 9, NULL);
    CHECK_EQ_INT(tu_stats(e).num_store_lookups, 0);
    CHECK_OK(pkv_release(e, s));
    pkv_engine_destroy(e);
  }
}

int main(void) {
  TU_RUN(test_share_between_engines);
  TU_RUN(test_damaged_values);
  TU_RUN(test_failing_store);
  TU_RUN(test_scheduler_loads);
  TU_RUN(test_write_back);
  TU_RUN(test_write_back_at_destroy);
  TU_RUN(test_bad_params);
  return tu_summary();
}
