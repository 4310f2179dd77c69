// The CUDA backend's plan for a step's queued block copies (DESIGN.md §11): the ordered list
// becomes waves of independent copies, each wave at most one kernel launch per direction (pool ->
// pool, pool -> host tier, host tier -> pool), all pairs in one array uploaded once. Pure host
// code, no CUDA: tests/cuda/test_copy_plan.cpp checks it without a device.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "backend/copy_kind.h"
#include "pkv/pkv.h"

namespace pkv {

// Which way a copy goes; a wave launches its directions in this order.
enum class CopyDirection : int32_t { device_to_device = 0, device_to_host = 1, host_to_device = 2 };
constexpr int32_t kNumCopyDirections = 3;

// The direction of a PKV_COPY_* kind (copy_kind.h's tiers); false for a kind that is none.
inline bool copy_direction(int32_t kind, CopyDirection *out) {
  if (!copy_kind_known(kind)) return false;
  *out = copy_writes_host(kind)  ? CopyDirection::device_to_host
         : copy_reads_host(kind) ? CopyDirection::host_to_device
                                 : CopyDirection::device_to_device;
  return true;
}

// One kernel launch: pairs [first_pair, first_pair + num_pairs) of CopyPlan::pairs.
struct CopyLaunch {
  CopyDirection direction;
  uint32_t first_pair, num_pairs;
};

// pairs: [num_pairs][2] (src id, dst id), each in the tier its launch's direction names.
// launches: in the order they must run; a wave's launches are consecutive, and wave_ends[w] is
// one past wave w's last launch.
struct CopyPlan {
  std::vector<int32_t> pairs;
  std::vector<CopyLaunch> launches;
  std::vector<uint32_t> wave_ends;
};

// Splits copies src[i] -> dst[i] (kinds kind[i], in this order) into waves. A block is a
// (tier, id); a copy joins the current wave unless it reads a block the wave writes, or writes a
// block the wave reads or writes; then the wave is closed and the copy opens the next. Within a
// wave no block is written twice or both read and written, so its copies run in any order and
// together give what the list gives in order. False (out untouched) on an unknown kind.
inline bool plan_block_copies(const int32_t *src, const int32_t *dst, const int32_t *kind,
                              uint32_t n, CopyPlan *out) {
  std::vector<CopyDirection> dirs(n);
  for (uint32_t i = 0; i < n; ++i)
    if (!copy_direction(kind[i], &dirs[i])) return false;
  auto key = [](bool host, int32_t id) { return int64_t(host) << 32 | uint32_t(id); };
  CopyPlan plan;
  std::vector<int32_t> wave[kNumCopyDirections];  // the open wave's pairs by direction
  std::unordered_set<int64_t> read, written;
  auto close_wave = [&] {
    bool any = false;
    for (int32_t d = 0; d < kNumCopyDirections; ++d) {
      if (wave[d].empty()) continue;
      plan.launches.push_back(
          {CopyDirection(d), uint32_t(plan.pairs.size() / 2), uint32_t(wave[d].size() / 2)});
      plan.pairs.insert(plan.pairs.end(), wave[d].begin(), wave[d].end());
      wave[d].clear();
      any = true;
    }
    if (any) plan.wave_ends.push_back(uint32_t(plan.launches.size()));
    read.clear();
    written.clear();
  };
  for (uint32_t i = 0; i < n; ++i) {
    const int64_t from = key(dirs[i] == CopyDirection::host_to_device, src[i]);
    const int64_t to = key(dirs[i] == CopyDirection::device_to_host, dst[i]);
    if (written.count(from) || written.count(to) || read.count(to)) close_wave();
    wave[int32_t(dirs[i])].push_back(src[i]);
    wave[int32_t(dirs[i])].push_back(dst[i]);
    read.insert(from);
    written.insert(to);
  }
  close_wave();
  *out = std::move(plan);
  return true;
}

}  // namespace pkv
