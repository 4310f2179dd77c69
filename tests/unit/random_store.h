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
/* Host-tier row `slot` of layer l's K (v 0) or V as group g wrote it: its shadow value, or 0 when
 * it is not. */
static inline uint64_t row_decode(const world *w, uint32_t l, int v, uint32_t g, uint64_t slot) {
  const size_t rb = row_bytes(w, l, v);
  const unsigned char *row = pool_row(w, 1, v, l, slot);
  uint64_t head, check, tail;
  memcpy(&head, row, sizeof head);
  memcpy(&check, row + sizeof head, sizeof check);
  memcpy(&tail, row + rb - sizeof tail, sizeof tail);
  if (rb < 3 * sizeof head || head != tail || head == 0 || check != row_check(head, g)) return 0;
  return head - 0x9e3779b97f4a7c15ull * (2u * l + (uint32_t)v + 1u); /* pool_tag(value, l, v) */
}

/* The value every row of group g's layers holds at host slot `slot`, or 0 when they disagree. */
static inline uint64_t slot_decode(const world *w, uint32_t g, uint64_t slot) {
  uint64_t value = 0;
  for (uint32_t l = 0; l < w->num_layers; l++)
    for (int v = 0; v < 2; v++) {
      if (!own_bytes(w, l, v) || w->layer[l].group != g) continue;
      const uint64_t got = row_decode(w, l, v, g, slot);
      if (!got || (value && got != value)) return 0;
      value = got;
    }
  return value;
}

/* With several KV groups: a stored block's slots were all written by its group, so a host block
 * pkv filled from the store has every slot's rows, in every layer of one group, carrying that
 * group's check word and one value; the shadow takes those where they differ from it. (Row 0 is
 * at the block's first byte in every group's layout, so one group at most passes there.) A
 * block only partly written by its group is none of the store's and stays as the shadow says. */
static inline void store_resync_groups(world *w) {
  uint64_t *shadow = w->shadow + (size_t)w->num_blocks * w->bs;
  for (uint32_t b = 0; b < w->host_blocks; b++) {
    uint32_t g = 0;
    while (g < w->ngroups && !slot_decode(w, g, (uint64_t)b * w->bs)) g++;
    if (g == w->ngroups) continue;
    uint64_t got[MAX_LEN];
    int changed = w->bgroup[w->num_blocks + b] != g, full = 1;
    for (uint32_t i = 0; i < w->bs && full; i++) {
      got[i] = slot_decode(w, g, (uint64_t)b * w->bs + i);
      full = got[i] != 0;
      changed |= got[i] != shadow[(size_t)b * w->bs + i];
    }
    if (!full || !changed) continue;
    memcpy(shadow + (size_t)b * w->bs, got, w->bs * sizeof got[0]);
    w->bgroup[w->num_blocks + b] = (uint8_t)g;
    w->num_store_synced++;
  }
}

static inline void store_resync(world *w) {
  if (!w->store) return;
  const uint64_t hits = tu_stats(w->e).num_store_hits;
  if (hits == w->store_hits_seen) return;
  w->store_hits_seen = hits;
  if (w->ngroups > 1) {
    store_resync_groups(w);
    return;
  }
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
