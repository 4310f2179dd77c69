#include "block_pool.h"

#include "status.h"

namespace pkv {

BlockPool::BlockPool(uint32_t num_blocks)
    : num_blocks_(num_blocks), blocks_(size_t(num_blocks) + 1), num_free_(num_blocks) {
  const int32_t s = sentinel();
  blocks_[s].prev = blocks_[s].next = s;
  for (int32_t b = 0; b < s; ++b) insert_after(blocks_[s].prev, b);
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
  blocks_[blk.prev].next = blk.next;
  blocks_[blk.next].prev = blk.prev;
  blk.prev = blk.next = -1;
}

void BlockPool::link(int32_t b) {
  insert_after(blocks_[b].node != kNoNode ? blocks_[sentinel()].prev : sentinel(), b);
}

int32_t BlockPool::take() {
  const int32_t b = head();
  PKV_ASSERT(b >= 0);
  take(b);
  return b;
}

void BlockPool::take(int32_t b) {
  PKV_ASSERT(blocks_[b].ref == 0 && blocks_[b].node == kNoNode);
  remove(b);
  num_free_--;
  blocks_[b].ref = 1;
}

void BlockPool::add_ref(int32_t b) {
  Block &blk = blocks_[b];
  if (blk.ref++ > 0) return;
  remove(b);
  num_free_--;
  if (blk.node != kNoNode) num_cached_--;
}

bool BlockPool::drop_ref(int32_t b) {
  Block &blk = blocks_[b];
  PKV_ASSERT(blk.ref > 0);
  if (--blk.ref > 0) return false;
  num_free_++;
  if (blk.node != kNoNode) num_cached_++;
  link(b);
  return true;
}

void BlockPool::set_node(int32_t b, uint32_t node) {
  Block &blk = blocks_[b];
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
  bool seen_cached = false;
  for (int32_t b = blocks_[sentinel()].next; b != sentinel(); b = blocks_[b].next) {
    if (b < 0 || uint32_t(b) >= num_blocks_ || blocks_[b].ref != 0 || ++walked > num_free_)
      fail(PKV_ERR_INTERNAL, "%s free list holds block %d wrongly or loops", tier, b);
    if (blocks_[blocks_[b].next].prev != b)
      fail(PKV_ERR_INTERNAL, "%s free list links broken at %d", tier, b);
    const bool is_cached = blocks_[b].node != kNoNode;
    if (seen_cached && !is_cached)
      fail(PKV_ERR_INTERNAL, "%s free list: free block %d after a cached one", tier, b);
    seen_cached |= is_cached;
  }
  if (walked != num_free_)
    fail(PKV_ERR_INTERNAL, "%s free list holds %u of %u free blocks", tier, walked, num_free_);
}

}  // namespace pkv
