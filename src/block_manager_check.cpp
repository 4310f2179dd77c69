// BlockManager::check: every invariant of the pool, the prefix tree and the host tier, in
// O(pool) (for tests: pkv_engine_check).
#include "block_manager.h"

#include <cstring>

#include "params.h"
#include "status.h"

namespace pkv {

void BlockManager::check(const std::vector<TableOwner> &owners) const {
  const uint32_t num_blocks = pool_.num_blocks();
  std::vector<int64_t> refs(num_blocks, 0), host_refs(host_.num_blocks(), 0);
  for (const TableOwner &o : owners) {
    for (int32_t h : *o.host_table) {
      if (h == -1) continue;  // a block its group did not hold (swap_out)
      if (h < 0 || uint32_t(h) >= host_.num_blocks())
        fail(PKV_ERR_INTERNAL, "seq %llu: host block id %d out of range", (unsigned long long)o.id,
             h);
      host_refs[h]++;
    }
    const unsigned long long id = o.id;
    if (o.num_computed > o.num_slotted)
      fail(PKV_ERR_INTERNAL, "seq %llu: more computed than tokens with a slot", id);
    if (o.tables->size() != (o.num_slotted ? num_groups() : 0))
      fail(PKV_ERR_INTERNAL, "seq %llu: %zu tables for %u groups", id, o.tables->size(),
           num_groups());
    for (uint32_t g = 0; g < o.tables->size(); ++g) {
      const BlockTable &t = (*o.tables)[g];
      if (t.ids.size() != blocks_for_tokens(o.num_slotted, block_size_))
        fail(PKV_ERR_INTERNAL, "seq %llu group %u: %zu blocks for %u tokens", id, g, t.ids.size(),
             o.num_slotted);
      if (prefix_caching_ && t.num_sealed != o.num_computed / block_size_)
        fail(PKV_ERR_INTERNAL, "seq %llu group %u: %u sealed blocks, %u full computed ones", id, g,
             t.num_sealed, o.num_computed / block_size_);
      // A windowed group holds exactly the blocks from first_held on (DESIGN.md §12).
      const uint32_t first = first_held(g, o.window_next);
      for (uint32_t j = 0; j < t.ids.size(); ++j) {
        const int32_t b = t.ids[j];
        if ((b < 0) != (j < first))
          fail(PKV_ERR_INTERNAL,
               "seq %llu group %u: block %u is %s, the window holds blocks from %u", id, g, j,
               b < 0 ? "given back" : "held", first);
        if (b < 0) continue;
        if (uint32_t(b) >= num_blocks)
          fail(PKV_ERR_INTERNAL, "seq %llu: block id %d out of range", id, b);
        refs[b]++;
      }
      // Sealed blocks are copies of the nodes of exactly this sequence's prefix, in this group.
      for (uint32_t j = first; j < t.num_sealed; ++j) {
        const uint32_t node = pool_.node(t.ids[j]);
        const uint32_t parent = j == 0      ? tree_.find_root(*o.keys, g)
                                : j > first ? pool_.node(t.ids[j - 1])
                                : node != kNoNode && tree_.is_live(node) ? tree_.parent(node)
                                                                         : kNoNode;
        if (node == kNoNode || !tree_.is_live(node) || tree_.parent(node) != parent ||
            parent == kNoNode || tree_.group(node) != g ||
            std::memcmp(tree_.tokens(node), o.tokens + size_t(j) * block_size_,
                        sizeof(int32_t) * block_size_) != 0 ||
            tree_.extra(node) != o.keys->block_extra(j * block_size_, block_size_))
          fail(PKV_ERR_INTERNAL, "seq %llu group %u: block %u is not a copy of its prefix's node",
               id, g, j);
      }
      // No write into a shared or sealed block: every slot still to compute is in a private block
      // (a shared group's layers write nothing: it holds no block).
      const uint32_t from = std::max<uint64_t>(o.num_computed, uint64_t(first) * block_size_);
      for (uint32_t pos = from; holds_blocks(g) && pos < o.num_slotted; ++pos) {
        const int32_t b = t.ids[pos / block_size_];
        if (b < 0 || pool_.ref(b) != 1 || pool_.node(b) != kNoNode)
          fail(PKV_ERR_INTERNAL,
               "seq %llu group %u: uncomputed token %u lies in shared or sealed block %d", id, g,
               pos, b);
      }
    }
  }
  check_pins(refs);  // pins are owners too
  // Each block is in one state per tier: its references are its owners', and a node it holds
  // lists it (a pool block among its node's copies, a host-tier block as its node's host copy,
  // only while no swapped-out sequence uses it).
  for (uint32_t b = 0; b < num_blocks; ++b) {
    if (pool_.ref(int32_t(b)) != refs[b])
      fail(PKV_ERR_INTERNAL, "block %u: ref count %d, %lld table references", b,
           pool_.ref(int32_t(b)), (long long)refs[b]);
    const uint32_t node = pool_.node(int32_t(b));
    if (node != kNoNode) {
      if (!tree_.is_live(node) ||
          std::count(tree_.copies(node).begin(), tree_.copies(node).end(), int32_t(b)) != 1)
        fail(PKV_ERR_INTERNAL, "block %u: not listed once among its node's copies", b);
    }
  }
  for (uint32_t h = 0; h < host_.num_blocks(); ++h) {
    if (host_.ref(int32_t(h)) != host_refs[h])
      fail(PKV_ERR_INTERNAL, "host block %u: ref count %d, %lld references", h,
           host_.ref(int32_t(h)), (long long)host_refs[h]);
    const uint32_t node = host_.node(int32_t(h));
    if (node != kNoNode &&
        (host_.ref(int32_t(h)) != 0 || !tree_.is_live(node) || tree_.host(node) != int32_t(h)))
      fail(PKV_ERR_INTERNAL, "host block %u: holds node %u, which does not hold it, or is in use",
           h, node);
  }
  for (uint32_t n = 0; n < tree_.capacity(); ++n) {
    if (!tree_.is_live(n)) continue;
    for (int32_t c : tree_.copies(n))
      if (c < 0 || uint32_t(c) >= num_blocks || pool_.node(c) != n)
        fail(PKV_ERR_INTERNAL, "prefix node %u lists block %d that is not its copy", n, c);
    const int32_t h = tree_.host(n);
    if (h >= 0 && (uint32_t(h) >= host_.num_blocks() || host_.node(h) != n))
      fail(PKV_ERR_INTERNAL, "prefix node %u lists host block %d that is not its copy", n, h);
    if (h >= 0 && !offload_ && !staged_from_store_)
      fail(PKV_ERR_INTERNAL, "prefix node %u has a host copy without offload", n);
  }
  pool_.check("pool");
  host_.check("host tier");
  if (host_twin_.size() != device_twin_.size())
    fail(PKV_ERR_INTERNAL, "twins: %zu pool blocks, %zu host blocks", host_twin_.size(),
         device_twin_.size());
  for (const auto &[d, h] : host_twin_) {
    auto back = device_twin_.find(h);
    if (back == device_twin_.end() || back->second != d || pool_.ref(d) == 0 || host_.ref(h) == 0)
      fail(PKV_ERR_INTERNAL, "twins: pool block %d and host block %d disagree or one is free", d,
           h);
  }
  tree_.check();
  check_checkpoints();
}

}  // namespace pkv
