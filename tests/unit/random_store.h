/*
 * random_store.h - test_random_ops.c's store (PKV_STORE_CALLBACK): a bounded map of the values an
 * engine writes through, read back when a prompt's blocks have left both tiers. pkv writes a
 * fetched block into a host-tier block directly (not through a listed copy), so after an
 * operation that fetched some, the model takes the host tier's new contents from the real bytes
 * (store_resync); what a sequence then loads from them is checked like any other KV: every
 * computed token's slot must hold its own context. Included by random_world.h.
 */
#ifndef PKV_RANDOM_STORE_H
#define PKV_RANDOM_STORE_H

#include <pthread.h>
#include <stdlib.h>

enum { STORE_CAP = 1024 };

typedef struct rstore {
  pthread_mutex_t mutex; /* pkv calls from its writer and fetcher threads */
  pkv_store_key keys[STORE_CAP];
  unsigned char *values[STORE_CAP];
  uint64_t value_bytes;
  uint32_t n;
} rstore;

static rstore the_store = {.mutex = PTHREAD_MUTEX_INITIALIZER};

static int rstore_find(const pkv_store_key *k) {
  for (uint32_t i = 0; i < the_store.n; i++)
    if (memcmp(the_store.keys[i].bytes, k->bytes, 32) == 0) return (int)i;
  return -1;
}

static int rstore_get(void *user, const pkv_store_key *keys, uint32_t n, void *values,
                      uint64_t value_bytes, uint8_t *found, uint32_t timeout_ms, char *message,
                      uint32_t cap) {
  (void)user, (void)timeout_ms, (void)message, (void)cap;
  pthread_mutex_lock(&the_store.mutex);
  for (uint32_t i = 0; i < n; i++) {
    const int at = rstore_find(&keys[i]);
    found[i] = at >= 0 && the_store.value_bytes == value_bytes;
    if (found[i]) memcpy((char *)values + i * value_bytes, the_store.values[at], value_bytes);
  }
  pthread_mutex_unlock(&the_store.mutex);
  return 0;
}

static int rstore_put(void *user, const pkv_store_key *keys, uint32_t n, const void *values,
                      uint64_t value_bytes, char *message, uint32_t cap) {
  (void)user, (void)message, (void)cap;
  pthread_mutex_lock(&the_store.mutex);
  for (uint32_t i = 0; i < n; i++) {
    int at = rstore_find(&keys[i]);
    if (at < 0) /* full: a value is lost, as a store may lose them */
      at = the_store.n < STORE_CAP ? (int)the_store.n++
                                   : (int)(keys[i].bytes[0] | keys[i].bytes[1] << 8) % STORE_CAP;
    if (!the_store.values[at]) the_store.values[at] = malloc(value_bytes);
    the_store.keys[at] = keys[i];
    memcpy(the_store.values[at], (const char *)values + i * value_bytes, value_bytes);
    the_store.value_bytes = value_bytes;
  }
  pthread_mutex_unlock(&the_store.mutex);
  return 0;
}

static void rstore_free(void) {
  for (uint32_t i = 0; i < STORE_CAP; i++) {
    free(the_store.values[i]);
    the_store.values[i] = NULL;
  }
  the_store.n = 0;
}

static pkv_store_callbacks rstore_callbacks = {
    sizeof(pkv_store_callbacks), 0, NULL, NULL, rstore_get, rstore_put};

/* After blocks were fetched from the store (num_store_hits grew): the host-tier slots whose real
 * bytes differ from the shadow are the ones pkv filled; the shadow takes their contexts (the tag
 * of layer 0's K, whose head and tail agree, decoded). */
static inline void store_resync(world *w) {
  if (!w->store) return;
  const uint64_t hits = tu_stats(w->e).num_store_hits;
  if (hits == w->store_hits_seen) return;
  w->store_hits_seen = hits;
  const size_t rb = row_bytes(w, 0, 0);
  uint64_t *shadow = w->shadow + (size_t)w->num_blocks * w->bs;
  for (uint64_t slot = 0; slot < (uint64_t)w->host_blocks * w->bs; slot++) {
    const unsigned char *row = pool_row(w, 1, 0, 0, slot);
    uint64_t head, tail;
    memcpy(&head, row, sizeof head);
    memcpy(&tail, row + rb - sizeof tail, sizeof tail);
    if (!EXPECT(head == tail)) continue;
    const uint64_t ctx = head ? head - 0x9e3779b97f4a7c15ull : 0; /* pool_tag(ctx, 0, 0) */
    if (pool_tag(shadow[slot], 0, 0) != head) {
      shadow[slot] = ctx;
      w->num_store_synced++;
    }
  }
}

#endif /* PKV_RANDOM_STORE_H */
