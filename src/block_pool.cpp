#include "block_pool.h"

#include "status.h"

namespace pkv {

namespace {

// Retention 0 never decays: longer than any.
uint64_t span(uint32_t retention_ms) { return retention_ms ? retention_ms : UINT64_MAX; }

}  // namespace

Retention stronger(Retention a, Retention b) {
  if (a.priority != b.priority) return a.priority > b.priority ? a : b;
  return span(a.retention_ms) >= span(b.retention_ms) ? a : b;
}

Retention read_retention(int32_t priority, uint32_t retention_ms, const char *what) {
  PKV_REQUIRE(priority >= PKV_CACHE_PRIORITY_MIN && priority <= PKV_CACHE_PRIORITY_MAX,
              "%s cache_priority %d is outside PKV_CACHE_PRIORITY_MIN .. PKV_CACHE_PRIORITY_MAX "
              "(%d .. %d): 0 is normal, lower is evicted first",
              what, priority, int(PKV_CACHE_PRIORITY_MIN), int(PKV_CACHE_PRIORITY_MAX));
  return {priority, retention_ms};
}

BlockPool::BlockPool(uint32_t num_blocks)
    : num_blocks_(num_blocks),
      blocks_(size_t(num_blocks) + kClasses),
      released_ms_(num_blocks, 0),
      num_free_(num_blocks) {
  static_assert(kClasses <= 32, "class_mask_ has a bit per class");
  for (uint32_t c = 0; c < kClasses; ++c) {
    const int32_t s = sentinel(c);
    blocks_[s].prev = blocks_[s].next = s;
    classes_[c].fresh = s;
    // Classes 1.. are kRetentions slots per non-zero priority, lowest first.
    if (c == 0) continue;  // list 0: free and normal blocks
    const int32_t p = PKV_CACHE_PRIORITY_MIN + int32_t((c - 1) / kRetentions);
    classes_[c].priority = p >= 0 ? p + 1 : p;
  }
  for (int32_t b = 0; b < sentinel(); ++b) insert_after(blocks_[sentinel()].prev, b);
}

void BlockPool::insert_after(int32_t at, int32_t b) {
  const int32_t next = blocks_[at].next;
  blocks_[b].prev = at;
  blocks_[b].next = next;
  blocks_[at].next = b;
  blocks_[next].prev = b;
}

void BlockPool::remove(int32_t b) {
  Block &blk = blocks_[b];
  if (blk.cls && classes_[blk.cls].fresh == b) classes_[blk.cls].fresh = blk.next;
  blocks_[blk.prev].next = blk.next;
  blocks_[blk.next].prev = blk.prev;
  blk.prev = blk.next = -1;
  if (blk.cls && --classes_[blk.cls].count == 0) class_mask_ &= ~(1u << blk.cls);
  blk.cls = 0;
}

uint32_t BlockPool::class_for(Retention r) {
  if (r.priority == 0) return 0;
  const int32_t p = r.priority;
  const uint32_t first = 1 + uint32_t((p > 0 ? p - 1 : p) - PKV_CACHE_PRIORITY_MIN) * kRetentions;
  uint32_t open = 0, nearest = first;
  uint64_t best = UINT64_MAX;
  for (uint32_t c = first; c < first + kRetentions; ++c) {
    const Class &k = classes_[c];
    if (k.count == 0) {
      if (!open) open = c;
      continue;
    }
    if (k.retention_ms == r.retention_ms) return c;
    // All slots in use: the nearest retention (0 = forever, the longest), ties the shorter.
    const uint64_t a = span(k.retention_ms), want = span(r.retention_ms);
    const uint64_t d = a > want ? a - want : want - a;
    if (d < best || (d == best && a < span(classes_[nearest].retention_ms))) {
      best = d;
      nearest = c;
    }
  }
  if (!open) return nearest;
  classes_[open].retention_ms = r.retention_ms;
  return open;
}

void BlockPool::link(int32_t b) {
  Block &blk = blocks_[b];
  if (blk.priority == kUnset) blk.priority = 0;  // cached while no holder gave one: normal
  if (blk.node == kNoNode) {                     // nothing to keep: reused first
    blk.priority = 0;
    blk.retention_ms = 0;
    insert_after(sentinel(), b);
    return;
  }
  const uint32_t c = class_for({blk.priority, blk.retention_ms});
  Class &k = classes_[c];
  blk.cls = static_cast<uint8_t>(c);
  blk.priority = static_cast<int8_t>(k.priority);
  blk.retention_ms = k.retention_ms;  // a merged class's
  blk.stamp = next_stamp_++;
  if (c) {
    k.count++;
    class_mask_ |= 1u << c;
    if (k.retention_ms) released_ms_[b] = now_ms_;
    if (k.fresh == sentinel(c)) k.fresh = b;  // released now: its retention holds
  }
  insert_after(blocks_[sentinel(c)].prev, b);
}

bool BlockPool::ended(int32_t b) const {
  const Block &blk = blocks_[b];
  return blk.cls && blk.retention_ms && now_ms_ - released_ms_[b] >= blk.retention_ms;
}

int32_t BlockPool::fresh(uint32_t c) const {
  Class &k = classes_[c];
  while (k.fresh != sentinel(c) && ended(k.fresh)) k.fresh = blocks_[k.fresh].next;
  return k.fresh;
}

int32_t BlockPool::effective_priority(int32_t b) const {
  return ended(b) ? 0 : blocks_[b].priority;
}

int32_t BlockPool::head() const {
  if (!num_free_) return -1;
  const int32_t first = blocks_[sentinel()].next;
  const bool has_first = first != sentinel();
  if (!class_mask_ || (has_first && blocks_[first].node == kNoNode)) return first;
  // Cached blocks only: the least (effective priority, release stamp) of the lists' heads. List
  // 0's head is its oldest normal block; a class's head is its oldest, and its retention ends
  // first, so no later block of it can be lower.
  int32_t best = has_first ? first : -1;
  int32_t best_priority = 0;
  auto consider = [&](int32_t b, int32_t p) {
    if (best < 0 || p < best_priority ||
        (p == best_priority && blocks_[b].stamp < blocks_[best].stamp)) {
      best = b;
      best_priority = p;
    }
  };
  for (uint32_t m = class_mask_; m; m &= m - 1) {
    const uint32_t c = uint32_t(__builtin_ctz(m));
    const int32_t h = blocks_[sentinel(c)].next;
    consider(h, effective_priority(h));
    // A low class's ended head is normal now; its first block still held low is lower.
    if (classes_[c].priority < 0 && classes_[c].retention_ms) {
      const int32_t f = fresh(c);
      if (f != sentinel(c) && f != h) consider(f, classes_[c].priority);
    }
  }
  return best;
}

int32_t BlockPool::take() {
  const int32_t b = head();
  PKV_ASSERT(b >= 0);
  take(b);
  return b;
}

void BlockPool::take(int32_t b) {
  Block &blk = blocks_[b];
  PKV_ASSERT(blk.ref == 0 && blk.node == kNoNode);
  remove(b);
  num_free_--;
  blk.ref = 1;
  unset(blk);
}

void BlockPool::add_ref(int32_t b) {
  Block &blk = blocks_[b];
  if (blk.ref++ > 0) return;
  // Normal, or decayed: its releasers decide alone (a low one too).
  if (blk.cls == 0 || ended(b)) unset(blk);
  remove(b);
  num_free_--;
  if (blk.node != kNoNode) num_cached_--;
}

bool BlockPool::drop_ref(int32_t b, Retention r) {
  Block &blk = blocks_[b];
  PKV_ASSERT(blk.ref > 0);
  const Retention had{blk.priority, blk.retention_ms};
  const Retention kept = r.priority == kNoRetention.priority ? had
                         : blk.priority == kUnset            ? r
                                                             : stronger(had, r);
  blk.priority = static_cast<int8_t>(kept.priority);
  blk.retention_ms = kept.retention_ms;
  if (--blk.ref > 0) return false;
  num_free_++;
  if (blk.node != kNoNode) num_cached_++;
  link(b);
  return true;
}

void BlockPool::set_node(int32_t b, uint32_t node) {
  Block &blk = blocks_[b];
  if (node == kNoNode) unset(blk);  // its KV goes, and what kept it
  if (blk.ref > 0) {
    blk.node = node;
    return;
  }
  remove(b);
  num_cached_ -= blk.node != kNoNode;
  blk.node = node;
  num_cached_ += blk.node != kNoNode;
  link(b);
}

void BlockPool::touch(int32_t b) {
  if (blocks_[b].ref > 0 || blocks_[b].node == kNoNode) return;
  remove(b);
  link(b);
}

void BlockPool::set_retention(int32_t b, Retention r) {
  Block &blk = blocks_[b];
  if (blk.ref == 0 && blk.node == kNoNode) return;
  blk.priority = static_cast<int8_t>(r.priority);
  blk.retention_ms = r.retention_ms;
  if (blk.ref > 0) return;
  remove(b);
  link(b);
}

void BlockPool::check(const char *tier) const {
  uint32_t ref0 = 0, cached = 0;
  for (uint32_t b = 0; b < num_blocks_; ++b) {
    if (blocks_[b].ref < 0)
      fail(PKV_ERR_INTERNAL, "%s block %u: ref count %d", tier, b, blocks_[b].ref);
    ref0 += blocks_[b].ref == 0;
    cached += blocks_[b].ref == 0 && blocks_[b].node != kNoNode;
  }
  if (ref0 != num_free_ || cached != num_cached_)
    fail(PKV_ERR_INTERNAL, "%s counters: free %u (actual %u), cached %u (actual %u)", tier,
         num_free_, ref0, num_cached_, cached);
  uint32_t walked = 0;
  for (uint32_t c = 0; c < kClasses; ++c) {
    const Class &k = classes_[c];
    bool seen_cached = false;
    uint32_t count = 0;
    uint64_t stamp = 0, released = 0;
    bool fresh_seen = k.fresh == sentinel(c) || c == 0;
    for (int32_t b = blocks_[sentinel(c)].next; b != sentinel(c); b = blocks_[b].next) {
      if (b < 0 || uint32_t(b) >= num_blocks_ || blocks_[b].ref != 0 || ++walked > num_free_)
        fail(PKV_ERR_INTERNAL, "%s free list %u holds block %d wrongly or loops", tier, c, b);
      const Block &blk = blocks_[b];
      if (blocks_[blk.next].prev != b)
        fail(PKV_ERR_INTERNAL, "%s free list %u links broken at %d", tier, c, b);
      const bool is_cached = blk.node != kNoNode;
      if ((seen_cached && !is_cached) || (c && !is_cached))
        fail(PKV_ERR_INTERNAL, "%s free list %u: free block %d after a cached one or in a class",
             tier, c, b);
      seen_cached |= is_cached;
      count += c != 0;
      if (blk.cls != c || blk.priority != k.priority ||
          blk.retention_ms != (c ? k.retention_ms : 0))
        fail(PKV_ERR_INTERNAL, "%s block %d: class %u, priority %d, retention %u ms on list %u",
             tier, b, blk.cls, blk.priority, blk.retention_ms, c);
      // Release order, so within a class also the order retentions end in.
      if (is_cached && (blk.stamp <= stamp || (c && k.retention_ms && released_ms_[b] < released)))
        fail(PKV_ERR_INTERNAL, "%s free list %u: block %d out of release order", tier, c, b);
      // The blocks before a class's fresh one have ended (it never skips a held one).
      fresh_seen |= b == k.fresh;
      if (!fresh_seen && !ended(b))
        fail(PKV_ERR_INTERNAL, "%s class %u: block %d's retention holds, before the fresh one",
             tier, c, b);
      if (is_cached) stamp = blk.stamp;
      if (c && k.retention_ms) released = released_ms_[b];
    }
    if (!fresh_seen)
      fail(PKV_ERR_INTERNAL, "%s class %u: its fresh block %d is not on its list", tier, c,
           k.fresh);
    if (count != k.count || ((class_mask_ >> c) & 1) != (c && count > 0))
      fail(PKV_ERR_INTERNAL, "%s class %u: %u blocks counted, %u listed", tier, c, k.count, count);
  }
  if (walked != num_free_)
    fail(PKV_ERR_INTERNAL, "%s free lists hold %u of %u free blocks", tier, walked, num_free_);
}

}  // namespace pkv
