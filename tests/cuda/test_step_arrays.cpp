// src/backend/cuda/step_arrays.h without a device: a step's arrays as the CUDA backend uploads
// them. Packed (an eager step): one range, every array where the layout says, each group's block
// indices packed from its padded table. Padded to a bucket (a graph step): the same addresses
// for steps of different sizes, padding sequences with no tokens, context or blocks, padding
// tokens with slot -1, and only the used indices uploaded; what a kernel reads through the
// device copy (the ranges applied to a buffer of stale bytes) equals the step's arrays.
#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/cuda/step_arrays.h"

namespace {

int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      g_failures++;                                                            \
    }                                                                          \
  } while (0)

// A step of sequences with `news[i]` new tokens and `blocks[i]` blocks, in two KV groups: group
// 0's indices 100 + i * 10 + j, group 1's 200 + i * 10 + j (or -1 for its first block: a window
// gave it back), slots 1000 + t and 2000 + t.
struct Step {
  std::vector<int64_t> slots, group_slots;
  std::vector<int32_t> query_start{0}, context_lens, indptr{0}, indices, tables;
  pkv_batch_view view{};
  Step(const std::vector<uint32_t> &news, const std::vector<uint32_t> &blocks,
       uint32_t max_blocks) {
    const size_t n = news.size();
    for (size_t i = 0; i < n; ++i) {
      query_start.push_back(query_start.back() + int32_t(news[i]));
      context_lens.push_back(int32_t(blocks[i] * 16 - 3));
      indptr.push_back(indptr.back() + int32_t(blocks[i]));
      for (uint32_t j = 0; j < blocks[i]; ++j) indices.push_back(int32_t(100 + i * 10 + j));
    }
    const int32_t tokens = query_start.back();
    for (int32_t t = 0; t < tokens; ++t) slots.push_back(1000 + t);
    group_slots.assign(size_t(tokens), 0);  // group 0's row of the [groups][tokens] array
    for (int32_t t = 0; t < tokens; ++t) group_slots.push_back(2000 + t);
    tables.assign(2 * n * max_blocks, -1);
    for (size_t i = 0; i < n; ++i)
      for (uint32_t j = 1; j < blocks[i]; ++j)
        tables[(n + i) * max_blocks + j] = int32_t(200 + i * 10 + j);
    view.num_seqs = uint32_t(n), view.num_tokens = uint32_t(tokens);
    view.slot_mapping = slots.data(), view.query_start = query_start.data();
    view.context_lens = context_lens.data(), view.block_indptr = indptr.data();
    view.block_indices = indices.data(), view.num_kv_groups = 2;
    view.group_slot_mapping = group_slots.data(), view.group_block_tables = tables.data();
    view.max_blocks_per_seq = max_blocks;
  }
};

// The device's copy after the upload: stale bytes (0xAB) where no range reached.
std::vector<char> uploaded(const Step &s, const pkv::StepLayout &l) {
  std::vector<char> host(l.bytes()), dev(l.bytes(), char(0xAB));
  for (const pkv::StepRange &r : pkv::pack_step(s.view, l, host.data())) {
    CHECK(r.offset + r.bytes <= l.bytes());
    std::memcpy(dev.data() + r.offset, host.data() + r.offset, r.bytes);
  }
  return dev;
}

// What the kernels read of group g through layout l equals the step's arrays (and padding).
void check_reads(const Step &s, const pkv::StepLayout &l, const std::vector<char> &dev) {
  const int64_t *slots = reinterpret_cast<const int64_t *>(dev.data());
  const int32_t *ints = reinterpret_cast<const int32_t *>(dev.data() + l.ints_offset());
  const size_t n = s.view.num_seqs, tokens = s.view.num_tokens;
  for (size_t t = 0; t < l.tok_cap; ++t) {
    CHECK(slots[t] == (t < tokens ? 1000 + int64_t(t) : -1));
    CHECK(slots[l.tok_cap + t] == (t < tokens ? 2000 + int64_t(t) : -1));
  }
  for (size_t i = 0; i <= l.seq_cap; ++i) {
    CHECK(ints[i] == s.query_start[i < n ? i : n]);
    CHECK(ints[l.indptr_at() + i] == s.indptr[i < n ? i : n]);
    if (i < l.seq_cap) CHECK(ints[l.context_lens_at() + i] == (i < n ? s.context_lens[i] : 0));
  }
  for (size_t i = 0; i < n; ++i)
    for (int32_t j = 0; j < s.indptr[i + 1] - s.indptr[i]; ++j) {
      const size_t at = size_t(s.indptr[i] + j);
      CHECK(ints[l.indices_at(0) + at] == int32_t(100 + i * 10 + size_t(j)));
      CHECK(ints[l.indices_at(1) + at] == (j == 0 ? -1 : int32_t(200 + i * 10 + size_t(j))));
    }
}

void packed_step() {
  const Step s({3, 1}, {2, 3}, 4);
  const pkv::StepLayout l = pkv::step_layout(s.view, 0, 0);
  CHECK(l.groups == 2 && l.tok_cap == 4 && l.seq_cap == 2 && l.blk_cap == 5);
  CHECK(l.bytes() == 2 * 4 * 8 + (3 * 2 + 2) * 4 + 2 * 5 * 4);
  std::vector<char> host(l.bytes());
  const std::vector<pkv::StepRange> ranges = pkv::pack_step(s.view, l, host.data());
  CHECK(ranges.size() == 1 && ranges[0].offset == 0 && ranges[0].bytes == l.bytes());
  check_reads(s, l, uploaded(s, l));
}

// Two steps of one bucket: the same layout (so the same device addresses), each read right.
void padded_steps() {
  const uint32_t bucket = 4, max_blocks = 5;
  const Step a({1, 1, 1}, {2, 5, 1}, max_blocks), b({1}, {3}, max_blocks);
  const pkv::StepLayout la = pkv::step_layout(a.view, bucket, max_blocks);
  const pkv::StepLayout lb = pkv::step_layout(b.view, bucket, max_blocks);
  CHECK(la.bytes() == lb.bytes() && la.indices_offset() == lb.indices_offset());
  CHECK(la.tok_cap == bucket && la.seq_cap == bucket && la.blk_cap == bucket * max_blocks);
  std::vector<char> host(la.bytes());
  const std::vector<pkv::StepRange> ranges = pkv::pack_step(a.view, la, host.data());
  CHECK(ranges.size() == 3);  // slots and ints, then each group's 8 used indices
  CHECK(ranges[1].offset == la.indices_offset() && ranges[1].bytes == 8 * 4);
  CHECK(ranges[2].offset == la.indices_offset() + la.blk_cap * 4 && ranges[2].bytes == 8 * 4);
  check_reads(a, la, uploaded(a, la));
  check_reads(b, lb, uploaded(b, lb));
  // A full bucket whose tables fill every row: one range, as packed.
  const Step full({1, 1}, {2, 2}, 2);
  const pkv::StepLayout lf = pkv::step_layout(full.view, 2, 2);
  std::vector<char> hf(lf.bytes());
  CHECK(pkv::pack_step(full.view, lf, hf.data()).size() == 1);
  check_reads(full, lf, uploaded(full, lf));
}

}  // namespace

int main() {
  packed_step();
  padded_steps();
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  puts("step_arrays: ok");
  return 0;
}
