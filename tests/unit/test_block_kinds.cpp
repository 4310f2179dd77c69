// The block manager's kinds of KV group (src/block_kinds.h) directly, in C++ (the rest of suite
// unit goes through pkv.h, and no engine yet makes a chunked or shared group through it): the
// kinds' rules alone, then a BlockManager with a full group beside a chunked, a sliding or a
// shared one, with block counts worked by hand in the comments (block_size 4, chunk or window 8
// tokens = 2 blocks). Every step ends with BlockManager::check (every invariant of DESIGN §9).
#include <cstdio>
#include <vector>

#include "block_manager.h"
#include "status.h"

namespace {

int passed, failed;

bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_block_kinds.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

using namespace pkv;

constexpr uint32_t kBs = 4;
const GroupKind kFull{BlockKind::kFull, 0};
const GroupKind kChunk8{BlockKind::kChunked, 8};
const GroupKind kSlide8{BlockKind::kSliding, 8};
const GroupKind kShared{BlockKind::kShared, 0};

BlockManager make(uint32_t blocks, bool caching, GroupKind second) {
  return BlockManager(blocks, kBs, caching, 1, false, 0, false, {kFull, second});
}

// One sequence as check() sees it.
struct Seq {
  SeqTables tables;
  PrefixKeys keys;
  std::vector<int32_t> tokens;
  uint32_t slotted = 0, computed = 0;
  std::vector<int32_t> host;
};

bool invariants(const BlockManager &bm, const std::vector<const Seq *> &seqs) {
  std::vector<TableOwner> owners;
  uint64_t id = 1;
  for (const Seq *s : seqs)
    owners.push_back({id++, &s->tables, &s->keys, s->tokens.data(), s->slotted, s->computed,
                      s->computed, &s->host});
  try {
    bm.check(owners);
    return true;
  } catch (const Error &e) {
    fprintf(stderr, "check: %s\n", e.what());
    return false;
  }
}

std::vector<int32_t> given_back(const BlockTable &t) {
  std::vector<int32_t> out;
  for (int32_t b : t.ids) out.push_back(b < 0 ? -1 : 1);
  return out;
}

std::vector<int32_t> tokens_from(int32_t first, uint32_t n) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = first + int32_t(i);
  return t;
}

// The rules alone: the first block each kind needs, and the most blocks it holds.
void test_rules() {
  // Chunk 8: a token at p reads from floor(p / 8) * 8. Next token 10 -> token 8 -> block 2.
  CHECK(kChunk8.first_needed(0, kBs) == 0);
  CHECK(kChunk8.first_needed(7, kBs) == 0);
  CHECK(kChunk8.first_needed(8, kBs) == 2);
  CHECK(kChunk8.first_needed(10, kBs) == 2);
  CHECK(kChunk8.first_needed(16, kBs) == 4);
  // A window of 8 at next 10 reads from token 3 (block 0): not a chunk's rule.
  CHECK(kSlide8.first_needed(10, kBs) == 0);
  CHECK(kSlide8.first_needed(16, kBs) == 2);
  // A chunk of 6 tokens (not a block multiple): next 13 -> token 12 -> block 3.
  CHECK((GroupKind{BlockKind::kChunked, 6}.first_needed(13, kBs) == 3));
  CHECK(kFull.first_needed(1000, kBs) == 0);
  CHECK(kShared.first_needed(0, kBs) == UINT32_MAX);
  // Most blocks held at 100 tokens (25 blocks): full 25, chunk or window 8 ceil(8/4) + 1 = 3,
  // shared 0; at 6 tokens a chunk holds what it has, 2.
  CHECK(kFull.max_blocks(100, kBs) == 25);
  CHECK(kChunk8.max_blocks(100, kBs) == 3);
  CHECK(kChunk8.max_blocks(6, kBs) == 2);
  CHECK(kShared.max_blocks(100, kBs) == 0);
  CHECK(kChunk8.rules().gives_back && kChunk8.rules().holds_blocks);
  CHECK(!kFull.rules().gives_back && !kShared.rules().holds_blocks);
  // The hit rule: at least the last token computes.
  CHECK(max_hit_blocks(16, kBs) == 3 && max_hit_blocks(17, kBs) == 4 &&
        max_hit_blocks(1, kBs) == 0);
}

// Without prefix caching a chunked group gives back every block before its chunk at once.
void test_chunked_gives_back_at_chunk_boundaries() {
  BlockManager bm = make(64, false, kChunk8);
  Seq s;
  s.tokens = tokens_from(100, 17);
  // 10 tokens: 3 blocks in each group, 6 of 64.
  bm.admit(s.tables, s.keys, s.tokens.data(), 10);
  s.slotted = 10;
  CHECK(bm.num_free() == 58);
  CHECK(invariants(bm, {&s}));
  // Computed 10: the next token (10) reads from token 8, block 2; blocks 0 and 1 go back.
  s.computed = 10;
  bm.seal(s.tables, s.keys, s.tokens.data(), 10);
  CHECK((given_back(s.tables[1]) == std::vector<int32_t>{-1, -1, 1}));
  CHECK((given_back(s.tables[0]) == std::vector<int32_t>{1, 1, 1}));
  CHECK(bm.num_free() == 60);
  CHECK(invariants(bm, {&s}));
  // 7 more tokens (17, 5 blocks): 2 new blocks in each group, 4 taken.
  bm.reserve_slots(s.tables, 10, 7);
  s.slotted = 17;
  CHECK(bm.num_free() == 56);
  CHECK(invariants(bm, {&s}));
  // Computed 17: the next token (17) reads from token 16, block 4; blocks 2 and 3 go back.
  s.computed = 17;
  bm.seal(s.tables, s.keys, s.tokens.data(), 17);
  CHECK((given_back(s.tables[1]) == std::vector<int32_t>{-1, -1, -1, -1, 1}));
  CHECK(bm.num_free() == 58);
  CHECK(invariants(bm, {&s}));
  // A window of 8 at the same points holds more: at 10 tokens blocks 0 .. 2 (from token 3).
  BlockManager sw = make(64, false, kSlide8);
  Seq w;
  w.tokens = s.tokens;
  sw.admit(w.tables, w.keys, w.tokens.data(), 10);
  w.slotted = w.computed = 10;
  sw.seal(w.tables, w.keys, w.tokens.data(), 10);
  CHECK((given_back(w.tables[1]) == std::vector<int32_t>{1, 1, 1}));
  CHECK(invariants(sw, {&w}));
  bm.free(s.tables);
  sw.free(w.tables);
  CHECK(bm.num_free() == 64 && sw.num_free() == 64);
}

// With prefix caching the last sealed block stays (the next sealed block's parent), and a hit
// needs the blocks of the hit point's chunk before it, nothing earlier.
void test_chunked_hits() {
  // 12 blocks: A (17 tokens) holds 5 full + at most 3 chunked.
  BlockManager bm = make(12, true, kChunk8);
  Seq a;
  a.tokens = tokens_from(100, 17);
  bm.admit(a.tables, a.keys, a.tokens.data(), 10);
  a.slotted = a.computed = 10;
  // Computed 10: 2 blocks sealed; the chunk starts at block 2, but block 1 (the last sealed)
  // stays: only block 0 goes back (cached).
  bm.seal(a.tables, a.keys, a.tokens.data(), 10);
  CHECK((given_back(a.tables[1]) == std::vector<int32_t>{-1, 1, 1}));
  bm.reserve_slots(a.tables, 10, 7);
  a.slotted = a.computed = 17;
  // Computed 17: 4 sealed; the chunk starts at block 4, block 3 stays; 1 and 2 go back.
  bm.seal(a.tables, a.keys, a.tokens.data(), 17);
  CHECK((given_back(a.tables[1]) == std::vector<int32_t>{-1, -1, -1, 1, 1}));
  // Used: 5 + 2 = 7; cached: chunked blocks 0, 2, 1 (in the order they went back); free: 2.
  CHECK(bm.num_free() == 5 && bm.num_cached() == 3);
  CHECK(invariants(bm, {&a}));
  // F (8 new tokens: 2 blocks per group) takes the 2 free blocks, then evicts the two oldest
  // cached ones, chunked blocks 0 and 2 of A's prefix.
  Seq f;
  f.tokens = tokens_from(900, 8);
  bm.admit(f.tables, f.keys, f.tokens.data(), 8);
  f.slotted = 8;
  CHECK(bm.num_free() == 1 && bm.num_cached() == 1);
  CHECK(invariants(bm, {&a, &f}));
  // B: A's first 16 tokens and 4 more: a hit of 4 blocks needs full blocks 0 .. 3 and, of the
  // chunk at token 16, nothing before it but block 3 (the last sealed): all there.
  std::vector<int32_t> b = a.tokens;
  b.resize(16);
  for (int32_t t = 0; t < 4; ++t) b.push_back(500 + t);
  BlockManager::Admission plan = bm.plan_admission(a.keys, b.data(), 20);
  CHECK(plan.num_hits == 4);
  CHECK(plan.groups[1].first == 3 && plan.groups[1].blocks.size() == 1);
  CHECK(plan.groups[0].first == 0 && plan.groups[0].blocks.size() == 4);
  CHECK(plan.num_new_blocks == 2);  // block 4 in each group
  // B': A's first 12 tokens and 5 others. A hit of 3 needs chunked block 2 (the chunk of token
  // 12 starts at token 8): evicted. A hit of 2 needs block 1 (the chunk of token 8 starts at 8,
  // and block 1 is the last sealed one): cached. So 2 blocks, 8 tokens.
  std::vector<int32_t> b2 = a.tokens;
  b2.resize(12);
  for (int32_t t = 0; t < 5; ++t) b2.push_back(600 + t);
  plan = bm.plan_admission(a.keys, b2.data(), 17);
  CHECK(plan.num_hits == 2);
  CHECK(plan.groups[1].first == 1 && plan.groups[1].blocks.size() == 1);
  // 5 blocks per group: full 3 new, chunked 3 new, and the cached chunked block 1 revived.
  CHECK(plan.num_new_blocks == 6 && plan.num_free_needed == 7);
  bm.free(f.tables);
  bm.free(a.tables);
  CHECK(invariants(bm, {}));
}

// A shared group holds no block: nothing is allocated, copied or sealed for it.
void test_shared_holds_nothing() {
  BlockManager bm = make(16, true, kShared);
  Seq s;
  s.tokens = tokens_from(100, 17);
  bm.admit(s.tables, s.keys, s.tokens.data(), 10);
  s.slotted = 10;
  CHECK(bm.num_free() == 13);  // 3 blocks: the full group's only
  CHECK((given_back(s.tables[1]) == std::vector<int32_t>{-1, -1, -1}));
  CHECK(invariants(bm, {&s}));
  s.computed = 10;
  bm.seal(s.tables, s.keys, s.tokens.data(), 10);
  bm.reserve_slots(s.tables, 10, 7);
  s.slotted = 17;
  CHECK(bm.num_free() == 11);
  CHECK((given_back(s.tables[1]) == std::vector<int32_t>{-1, -1, -1, -1, -1}));
  CHECK(invariants(bm, {&s}));
  s.computed = 17;
  bm.seal(s.tables, s.keys, s.tokens.data(), 17);
  CHECK(invariants(bm, {&s}));
  // A fork shares the full group's blocks; the next write into the shared last block copies it
  // once (the full group's), never the shared group's.
  Seq c = s;
  bm.fork(c.tables);
  bm.reserve_slots(c.tables, 17, 1);
  c.slotted = 18;
  CHECK(bm.pending_copies().size() == 1 && bm.num_free() == 10);
  CHECK(invariants(bm, {&s, &c}));
  // A second prompt with the same first 16 tokens hits 4 blocks through the full group alone.
  BlockManager::Admission plan = bm.plan_admission(s.keys, s.tokens.data(), 17);
  CHECK(plan.num_hits == 4 && plan.groups[1].blocks.empty() && plan.num_new_blocks == 1);
  // Peak: a prompt of 10 (3 blocks) growing to 100 tokens holds 25 blocks, all the full group's.
  CHECK(bm.peak_blocks(10, 100) == 25);
  bm.free(c.tables);
  bm.free(s.tables);
  CHECK(bm.num_free() == 16);
}

// The peak of a request with a chunked group: the full group's 25 blocks and the chunk's 3.
void test_peak_blocks() {
  BlockManager bm = make(64, true, kChunk8);
  CHECK(bm.peak_blocks(10, 100) == 28);
  CHECK(bm.peak_blocks(90, 100) == 46);  // at admission: 23 blocks in both groups
  CHECK(bm.any_windowed());
  CHECK(!BlockManager(64, kBs, true, 1, false, 0, false).any_windowed());
}

// Admission per chunk (DESIGN.md §7): the most blocks group 1 holds while a chunk is reserved
// and not yet computed, over every alignment of the chunks (a first chunk of r tokens, then
// chunks of up to B), for a prompt of n tokens; the last sealed block stays with caching.
uint32_t measured_chunk_peak(GroupKind kind, bool caching, uint32_t n, uint32_t chunk) {
  uint32_t most = 0;
  for (uint32_t r = 1; r <= chunk; ++r) {
    BlockManager bm = make(256, caching, kind);
    Seq s;
    s.tokens = tokens_from(100, n);
    bm.admit(s.tables, s.keys, s.tokens.data(), n, r);
    s.slotted = bm.last_admission_tokens();
    for (;;) {
      uint32_t held = 0;
      for (int32_t b : s.tables[1].ids) held += b >= 0;
      most = std::max(most, held);
      s.computed = s.slotted;
      bm.seal(s.tables, s.keys, s.tokens.data(), s.computed);
      if (!invariants(bm, {&s}) || s.computed == n) break;
      const uint32_t next = std::min(chunk, n - s.slotted);
      bm.reserve_slots(s.tables, s.slotted, next);
      s.slotted += next;
    }
  }
  return most;
}

// peak_blocks per chunk, hand-computed (bs 4, prompt 60 + 40 = 100 tokens: the full group 25),
// and each windowed group's part reached exactly by some alignment of the chunks.
void test_peak_blocks_per_chunk() {
  // Window 8, chunks of 6: 8 + 6 - 1 = 13 keys from a block's last slot: ceil(12 / 4) + 1 = 4
  // (the decode window: ceil(8 / 4) + 1 = 3; the last sealed block: ceil((3 + 6) / 4) + 1 = 4).
  CHECK(make(64, false, kSlide8).peak_blocks(60, 100, 6) == 25 + 4);
  CHECK(make(64, true, kSlide8).peak_blocks(60, 100, 6) == 25 + 4);
  CHECK(measured_chunk_peak(kSlide8, false, 60, 6) == 4);
  CHECK(measured_chunk_peak(kSlide8, true, 60, 6) == 4);
  // Window 2 (under a block), chunks of 4: the window's 2 + 4 - 1 = 5 keys span ceil(4 / 4) + 1
  // = 2 blocks, but with caching the last sealed block stays: ceil((3 + 4) / 4) + 1 = 3.
  const GroupKind slide2{BlockKind::kSliding, 2};
  CHECK(make(64, false, slide2).peak_blocks(60, 100, 4) == 25 + 2);
  CHECK(make(64, true, slide2).peak_blocks(60, 100, 4) == 25 + 3);
  CHECK(measured_chunk_peak(slide2, false, 60, 4) == 2);
  CHECK(measured_chunk_peak(slide2, true, 60, 4) == 3);
  // Chunk 8 (block-aligned starts), chunks of 6: 8 + 6 - 1 = 13 keys from a block's first slot:
  // ceil(13 / 4) = 4.
  CHECK(make(64, false, kChunk8).peak_blocks(60, 100, 6) == 25 + 4);
  CHECK(measured_chunk_peak(kChunk8, false, 60, 6) == 4);
  // Chunk 6: starts 0, 6, 12, ... lie 0 or 2 into a block (gcd(6, 4) = 2); chunks of 3: 6 + 3 - 1
  // = 8 keys from 2 into a block: ceil((4 - 2 + 8) / 4) = 3 (the decode's ceil(6 / 4) + 1 = 3).
  const GroupKind chunk6{BlockKind::kChunked, 6};
  CHECK(make(64, false, chunk6).peak_blocks(60, 100, 3) == 25 + 3);
  CHECK(measured_chunk_peak(chunk6, false, 60, 3) == 3);
  // Chunks of 16 in chunk 6: 6 + 16 - 1 = 21 keys from 2 in: ceil(23 / 4) = 6.
  CHECK(make(64, false, chunk6).peak_blocks(60, 100, 16) == 25 + 6);
  CHECK(measured_chunk_peak(chunk6, false, 60, 16) == 6);
  // A short request: never more than its tokens' blocks (5 tokens: 2 blocks in each group).
  CHECK(make(64, true, kSlide8).peak_blocks(3, 5, 6) == 2 + 2);
  // No chunk (whole-prompt admission): as before.
  CHECK(make(64, true, kSlide8).peak_blocks(90, 100, 0) == 46);
  CHECK(make(64, true, kSlide8).admits_per_chunk() && !make(64, true, kShared).admits_per_chunk());
}

}  // namespace

int main() {
  test_rules();
  test_chunked_gives_back_at_chunk_boundaries();
  test_chunked_hits();
  test_shared_holds_nothing();
  test_peak_blocks();
  test_peak_blocks_per_chunk();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
