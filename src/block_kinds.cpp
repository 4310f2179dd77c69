#include "block_kinds.h"

#include "block_kind_chunked.h"
#include "block_kind_full.h"
#include "block_kind_shared.h"
#include "block_kind_sliding.h"
#include "status.h"

namespace pkv {
namespace {

// [BlockKind]: the rules each kind's unit gives.
const KindRules kKindRules[] = {
    {"full attention", false, true, FullKind::first_needed, FullKind::max_blocks,
     FullKind::max_blocks_chunk},
    {"sliding window", true, true, SlidingKind::first_needed, SlidingKind::max_blocks,
     SlidingKind::max_blocks_chunk},
    {"chunked local attention", true, true, ChunkedKind::first_needed, ChunkedKind::max_blocks,
     ChunkedKind::max_blocks_chunk},
    {"shared", true, false, SharedKind::first_needed, SharedKind::max_blocks,
     SharedKind::max_blocks_chunk},
};

}  // namespace

const KindRules &GroupKind::rules() const { return kKindRules[static_cast<int>(kind)]; }

std::vector<GroupKind> group_kinds(const KvGroups &groups) {
  std::vector<GroupKind> kinds(groups.num_groups());
  for (uint32_t g = 0; g < groups.num_groups(); ++g) {
    const uint32_t span = groups.group_window[g];
    if (groups.chunked(g)) {
      PKV_ASSERT(span > 0);  // validated with the layer specs: a chunk of at least one token
      kinds[g] = {BlockKind::kChunked, span};
    } else {
      kinds[g] = span ? GroupKind{BlockKind::kSliding, span} : GroupKind{BlockKind::kFull, 0};
    }
  }
  return kinds;
}

}  // namespace pkv
