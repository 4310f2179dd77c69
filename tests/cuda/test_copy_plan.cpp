// src/backend/cuda/copy_plan.h without a device: how the CUDA backend splits a step's ordered
// block copies into waves of at most one launch per direction. Named hazards first (read after
// write, write after read, a block written twice, chains, the same id in the other tier), then
// random lists over few blocks: the plan run wave by wave, every copy of a wave reading the state
// from before the wave (as parallel CTAs may), must leave both tiers as the list run in order.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/copy_plan.h"

namespace {

using pkv::CopyDirection;
using pkv::CopyLaunch;
using pkv::CopyPlan;

int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

struct Copy {
  int32_t src, dst, kind;
};

CopyPlan plan_of(const std::vector<Copy> &copies) {
  std::vector<int32_t> src, dst, kind;
  for (const Copy &c : copies) src.push_back(c.src), dst.push_back(c.dst), kind.push_back(c.kind);
  CopyPlan plan;
  const uint32_t n = uint32_t(copies.size());
  CHECK(pkv::plan_block_copies(src.data(), dst.data(), kind.data(), n, &plan));
  return plan;
}

uint32_t num_waves(const std::vector<Copy> &copies) {
  return uint32_t(plan_of(copies).wave_ends.size());
}

constexpr int32_t COW = PKV_COPY_COW, OUT = PKV_COPY_SWAP_OUT, IN = PKV_COPY_SWAP_IN;
constexpr int32_t OFFLOAD = PKV_COPY_OFFLOAD, LOAD = PKV_COPY_LOAD;

// A step's usual copies, no hazards: one wave, one launch per direction in a fixed order, the
// pairs of each launch together and in list order.
void test_one_wave() {
  const CopyPlan plan = plan_of(
      {{1, 2, OUT}, {3, 4, COW}, {5, 6, IN}, {7, 8, OFFLOAD}, {9, 10, LOAD}, {11, 12, COW}});
  CHECK(plan.wave_ends == std::vector<uint32_t>{3});
  CHECK(plan.launches.size() == 3);
  if (plan.launches.size() != 3) return;
  const CopyDirection order[3] = {CopyDirection::device_to_device, CopyDirection::device_to_host,
                                  CopyDirection::host_to_device};
  for (int i = 0; i < 3; ++i) {
    CHECK(plan.launches[i].direction == order[i]);
    CHECK(plan.launches[i].first_pair == uint32_t(2 * i) && plan.launches[i].num_pairs == 2);
  }
  CHECK((plan.pairs == std::vector<int32_t>{3, 4, 11, 12, 1, 2, 7, 8, 5, 6, 9, 10}));
  CHECK(plan_of({}).launches.empty() && plan_of({}).wave_ends.empty());
}

void test_hazards() {
  // Read after write, in each tier and across kinds.
  CHECK(num_waves({{1, 2, COW}, {2, 3, COW}}) == 2);  // a chain: a->b, then b->c
  CHECK(num_waves({{1, 2, COW}, {2, 3, COW}, {3, 4, COW}}) == 3);
  CHECK(num_waves({{1, 2, OUT}, {2, 5, IN}}) == 2);        // host 2 written, then read
  CHECK(num_waves({{2, 5, LOAD}, {5, 9, OFFLOAD}}) == 2);  // device 5 written, then read
  CHECK(num_waves({{1, 2, COW}, {2, 7, OUT}}) == 2);
  // Write after read.
  CHECK(num_waves({{1, 2, COW}, {3, 1, COW}}) == 2);
  CHECK(num_waves({{1, 2, OUT}, {4, 1, IN}}) == 2);        // device 1 read, then written
  CHECK(num_waves({{6, 2, LOAD}, {3, 6, OFFLOAD}}) == 2);  // host 6 read, then written
  // Written twice.
  CHECK(num_waves({{1, 5, OUT}, {2, 5, OFFLOAD}}) == 2);
  CHECK(num_waves({{1, 5, COW}, {2, 5, LOAD}}) == 2);
  // No hazard: reads shared, or the same id in the other tier.
  CHECK(num_waves({{1, 2, COW}, {1, 3, COW}, {1, 4, OUT}}) == 1);
  CHECK(num_waves({{3, 4, COW}, {5, 4, OUT}}) == 1);  // device 4 vs host 4, ...
  CHECK(num_waves({{1, 4, OUT}, {4, 2, COW}}) == 1);
  CHECK(num_waves({{2, 2, OUT}, {2, 2, OFFLOAD}}) == 2);  // ... but host 2 twice is not
  // A hazard closes the wave; later copies join the new one.
  const CopyPlan plan = plan_of({{1, 2, COW}, {2, 3, OUT}, {4, 5, IN}, {6, 7, COW}});
  CHECK(plan.wave_ends == (std::vector<uint32_t>{1, 4}));
  CHECK(plan.launches.size() == 4);
}

void test_unknown_kind() {
  const int32_t src[2] = {1, 2}, dst[2] = {3, 4}, kind[2] = {PKV_COPY_COW, 9};
  CopyPlan plan;
  plan.pairs = {42};
  CHECK(!pkv::plan_block_copies(src, dst, kind, 2, &plan));
  CHECK(plan.pairs == std::vector<int32_t>{42});  // untouched
}

// xorshift, as tests/cuda/kv_harness.h's Rng.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint32_t below(uint32_t n) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return uint32_t(s % n);
  }
};

// Each block holds one value; tiers[0] the pool, tiers[1] the host tier.
void test_random(uint64_t seed) {
  Rng rng(seed);
  const uint32_t n = 1 + rng.below(40), blocks = 2 + rng.below(10);
  const int32_t kinds[5] = {COW, OUT, IN, OFFLOAD, LOAD};
  std::vector<Copy> copies;
  for (uint32_t i = 0; i < n; ++i)
    copies.push_back({int32_t(rng.below(blocks)), int32_t(rng.below(blocks)), kinds[rng.below(5)]});
  std::vector<int64_t> tiers[2], in_order[2];
  for (int t = 0; t < 2; ++t)
    for (uint32_t b = 0; b < blocks; ++b) tiers[t].push_back(t * 1000 + b);
  in_order[0] = tiers[0], in_order[1] = tiers[1];
  for (const Copy &c : copies) {
    CopyDirection d{};
    CHECK(pkv::copy_direction(c.kind, &d));
    in_order[d == CopyDirection::device_to_host][c.dst] =
        in_order[d == CopyDirection::host_to_device][c.src];
  }

  const CopyPlan plan = plan_of(copies);
  CHECK(plan.pairs.size() == 2 * copies.size());
  uint32_t launch = 0, pairs_seen = 0;
  for (uint32_t end : plan.wave_ends) {
    const std::vector<int64_t> before[2] = {tiers[0], tiers[1]};
    // The pair writing each block in this wave (-1: none), then who reads it.
    std::vector<int64_t> writer[2] = {std::vector<int64_t>(blocks, -1),
                                      std::vector<int64_t>(blocks, -1)};
    const uint32_t wave_first = launch;
    for (; launch < end; ++launch) {
      const CopyLaunch &l = plan.launches[launch];
      CHECK(l.first_pair == pairs_seen && l.num_pairs > 0);
      pairs_seen += l.num_pairs;
      const int to = l.direction == CopyDirection::device_to_host;
      for (uint32_t p = l.first_pair; p < l.first_pair + l.num_pairs; ++p) {
        const int32_t dst = plan.pairs[2 * p + 1];
        CHECK(writer[to][dst] == -1);  // no block written twice
        writer[to][dst] = p;
      }
    }
    // No block both read and written, except by one copy onto itself (harmless in a CTA); then
    // every copy of the wave reads the state from before it, whatever the CTAs' order.
    for (uint32_t i = wave_first; i < end; ++i) {
      const CopyLaunch &l = plan.launches[i];
      const int from = l.direction == CopyDirection::host_to_device;
      const int to = l.direction == CopyDirection::device_to_host;
      for (uint32_t p = l.first_pair; p < l.first_pair + l.num_pairs; ++p) {
        const int32_t src = plan.pairs[2 * p], dst = plan.pairs[2 * p + 1];
        CHECK(writer[from][src] == -1 || writer[from][src] == p);
        tiers[to][dst] = before[from][src];
      }
    }
  }
  CHECK(launch == plan.launches.size() && pairs_seen == copies.size());
  CHECK(tiers[0] == in_order[0] && tiers[1] == in_order[1]);
  if (tiers[0] != in_order[0] || tiers[1] != in_order[1])
    fprintf(stderr, "random seed %llu: the plan differs from the list in order\n",
            static_cast<unsigned long long>(seed));
}

}  // namespace

int main() {
  test_one_wave();
  test_hazards();
  test_unknown_kind();
  for (uint64_t seed = 1; seed <= 2000; ++seed) test_random(seed);
  printf("copy_plan: %d failed checks\n", g_failures);
  return g_failures ? 1 : 0;
}
