/*
 * random_ckpt.h - random_state.h's model of pkv's prefix tree as its KV events tell it: the nodes
 * holding KV (BlockStored / BlockRemoved of a KV group) and the nodes holding a checkpoint of the
 * recurrent state (group num_kv_groups), those in least-recently-used order, each per medium
 * (device; the host tier: offloaded blocks and checkpoints). From it, the hit an admission must
 * get (the longest boundary h, at most (n - 1) / block_size blocks, whose blocks < h hold KV in
 * a tier and whose node h - 1 holds a checkpoint in a tier), and the events a batch's end must
 * queue: each checkpoint its members take, in the batch's order, touches the node's device
 * checkpoint when it has one; else drops its host one (if any) and takes a free device slot or
 * the least recently used device checkpoint's, which moves to a host checkpoint slot (a free one,
 * or the least recently used host checkpoint's, dropped first) with host_offload, else is
 * dropped. A restore touches its checkpoint. Outside a batch's end a checkpoint is only removed
 * (its node's last KV went). Included by random_state.h.
 */
#ifndef PKV_RANDOM_CKPT_H
#define PKV_RANDOM_CKPT_H

#include "random_world.h"

static inline int node_find(const uint64_t *set, uint32_t n, uint64_t hash) {
  for (uint32_t i = 0; i < n; i++)
    if (set[i] == hash) return (int)i;
  return -1;
}

/* A node stored (add 1: the newest) or removed (add 0) in a set kept in order; a second store or
 * a removal of a node not held is a failure. */
static inline void node_event(uint64_t *set, uint32_t *n, uint64_t hash, int add,
                              const char *what) {
  const int at = node_find(set, *n, hash);
  if (add ? !EXPECT(at < 0 && *n < MAX_NODES) : !EXPECT(at >= 0)) {
    fprintf(stderr, "  %s %016llx: %s\n", what, (unsigned long long)hash,
            add ? "stored twice" : "removed, not held");
    return;
  }
  if (add) {
    set[(*n)++] = hash;
    return;
  }
  memmove(set + at, set + at + 1, (*n - (uint32_t)at - 1) * sizeof set[0]);
  (*n)--;
}

/* The checkpoints of a medium (host: the host tier's) and their count. */
static inline uint64_t *ckpt_set(world *w, int host, uint32_t **n) {
  *n = host ? &w->nckpt_host : &w->nckpt;
  return host ? w->ckpt_host_nodes : w->ckpt_nodes;
}

/* A checkpoint used (taken again or restored): the most recently used of its tier. */
static inline void ckpt_touch(world *w, uint64_t hash) {
  for (int host = 0; host < 2; host++) {
    uint32_t *n;
    uint64_t *set = ckpt_set(w, host, &n);
    if (node_find(set, *n, hash) < 0) continue;
    node_event(set, n, hash, 0, "checkpoint");
    node_event(set, n, hash, 1, "checkpoint");
  }
}

static inline void ckpt_expect(world *w, uint64_t hash, int add, int host) {
  if (!EXPECT(w->nexpect < 4 * MAX_SEQS)) return;
  w->expect_hash[w->nexpect] = hash;
  w->expect_host[w->nexpect] = (uint8_t)host;
  w->expect_add[w->nexpect++] = (uint8_t)add;
}

/* The model's checkpoint of hash in a tier goes (and the event saying so is expected). */
static inline void ckpt_drop(world *w, uint64_t hash, int host) {
  uint32_t *n;
  uint64_t *set = ckpt_set(w, host, &n);
  ckpt_expect(w, hash, 0, host);
  node_event(set, n, hash, 0, "checkpoint");
}

/* A member of the ended batch takes a checkpoint at the node of hash: the model's LRU decides. */
static inline void ckpt_capture(world *w, uint64_t hash) {
  if (node_find(w->ckpt_nodes, w->nckpt, hash) >= 0) {
    ckpt_touch(w, hash);
    return;
  }
  /* one on the host is replaced: the device one serves the next hit without a host copy */
  if (node_find(w->ckpt_host_nodes, w->nckpt_host, hash) >= 0) ckpt_drop(w, hash, 1);
  if (w->nckpt == w->num_state_slots - w->num_working) { /* full: the oldest goes */
    const uint64_t old = w->ckpt_nodes[0];
    if (w->num_host_ckpt_slots && w->nckpt_host == w->num_host_ckpt_slots) {
      ckpt_drop(w, w->ckpt_host_nodes[0], 1); /* room on the host first */
      w->num_lru_evictions++;
    }
    ckpt_drop(w, old, 0);
    if (w->num_host_ckpt_slots) { /* offloaded */
      ckpt_expect(w, old, 1, 1);
      node_event(w->ckpt_host_nodes, &w->nckpt_host, old, 1, "host checkpoint");
      w->num_ckpt_offloads++;
    } else {
      w->num_lru_evictions++;
    }
  }
  ckpt_expect(w, hash, 1, 0);
  node_event(w->ckpt_nodes, &w->nckpt, hash, 1, "checkpoint");
}

/* A checkpoint's event: the next one the model expects (already in the model), or, with none
 * expected, a removal (its node's last KV copy went). */
static inline void ckpt_event(world *w, uint64_t hash, int add, int host) {
  if (w->expect_at < w->nexpect) {
    const uint32_t i = w->expect_at++;
    if (!EXPECT(w->expect_hash[i] == hash && w->expect_add[i] == add && w->expect_host[i] == host))
      fprintf(stderr, "  checkpoint %s %016llx (%s), the model %s %016llx (%s)\n",
              add ? "stored" : "removed", (unsigned long long)hash, host ? "host" : "device",
              w->expect_add[i] ? "stores" : "removes", (unsigned long long)w->expect_hash[i],
              w->expect_host[i] ? "host" : "device");
    return;
  }
  if (!EXPECT(!add)) fprintf(stderr, "  a checkpoint stored outside a batch's end\n");
  uint32_t *n;
  uint64_t *set = ckpt_set(w, host, &n);
  node_event(set, n, hash, add, host ? "host checkpoint" : "checkpoint");
}

/* Whether a node holds KV (host: in the host tier), by the events. */
static inline int kv_held(const world *w, uint64_t hash) {
  return node_find(w->kv_nodes, w->nkv, hash) >= 0 ||
         node_find(w->kv_host_nodes, w->nkv_host, hash) >= 0;
}

/* Takes in the events queued so far. */
static inline void state_drain(world *w) {
  pkv_kv_event ev[64];
  uint32_t n = 64;
  while (n == 64 && CHECK_OK(pkv_drain_kv_events(w->e, ev, 64, &n)))
    for (uint32_t i = 0; i < n; i++) {
      const pkv_kv_event *x = &ev[i];
      const int add = x->type == PKV_EVENT_BLOCK_STORED;
      if (!EXPECT(add || x->type == PKV_EVENT_BLOCK_REMOVED)) { /* no overflow, nothing cleared */
        fprintf(stderr, "  event type %u\n", x->type);
        continue;
      }
      const int host = x->medium == PKV_TIER_HOST;
      EXPECT((x->medium == PKV_TIER_DEVICE || (host && w->host_blocks)) &&
             x->group <= w->num_kv_groups);
      if (x->group == w->num_kv_groups)
        ckpt_event(w, x->block_hash, add, host);
      else if (host)
        node_event(w->kv_host_nodes, &w->nkv_host, x->block_hash, add, "host KV block");
      else
        node_event(w->kv_nodes, &w->nkv, x->block_hash, add, "KV block");
    }
}

/* The batch's end queued every event the model expects, in order. */
static inline void ckpt_expect_done(world *w) {
  state_drain(w);
  if (!EXPECT(w->expect_at == w->nexpect))
    fprintf(stderr, "  %u checkpoint events of %u expected came\n", w->expect_at, w->nexpect);
  w->nexpect = w->expect_at = 0;
}

/* The canonical hashes of s's first n blocks (pkv.h: root of the salt and adapter, the item's
 * key mixed into the blocks it overlaps). */
static inline void seq_hashes(const rseq *s, uint32_t bs, uint32_t n, uint64_t *out) {
  const char *salt = salt_name(s->salt);
  uint64_t h = 0;
  CHECK_OK(pkv_block_hash_root_lora(0, salt, salt ? 1 : 0, (uint64_t)s->lora, &h));
  pkv_extra_key key;
  memset(&key, 0, sizeof key);
  key.start_token = s->item_start, key.end_token = s->item_end;
  key.key = item_name(s->item), key.key_len = 6;
  for (uint32_t b = 0; b < n; b++) {
    CHECK_OK(pkv_block_hash_extra(0, h, s->tokens + b * bs, bs, b * bs, s->item ? &key : NULL,
                                  s->item ? 1 : 0, sizeof key, &h));
    out[b] = h;
  }
}

/* What admitting s (its tokens as pkv has them) should find, in blocks: the hit and its node,
 * and the longest run of blocks holding KV (capped as the hit is: the last token is computed;
 * NONE looks up nothing, so recomputes no cached KV in the stats' sense). */
typedef struct {
  uint32_t hit, kv;
  uint64_t anchor; /* the hit's node: its checkpoint is restored */
  pkv_stats st;    /* before */
} state_want;

static inline state_want state_expect(world *w, const rseq *s) {
  state_want want = {0, 0, 0, tu_stats(w->e)};
  state_drain(w);
  if (state_policy(w) == PKV_STATE_CHECKPOINT_NONE) return want; /* no hit: nothing looked up */
  uint64_t hashes[MAX_LEN];
  const uint32_t cap = (s->len - 1) / w->bs;
  seq_hashes(s, w->bs, cap, hashes);
  while (want.kv < cap && kv_held(w, hashes[want.kv])) want.kv++;
  for (uint32_t h = want.kv; h > 0 && !want.hit; h--)
    if (node_find(w->ckpt_nodes, w->nckpt, hashes[h - 1]) >= 0 ||
        node_find(w->ckpt_host_nodes, w->nckpt_host, hashes[h - 1]) >= 0)
      want.hit = h;
  if (want.hit) want.anchor = hashes[want.hit - 1];
  return want;
}

#endif /* PKV_RANDOM_CKPT_H */
