#include "batch.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "params.h"
#include "status.h"

namespace pkv {

Batch::Batch(const SequenceTable &seqs, const uint64_t *seq_ids, const uint32_t *num_new_tokens,
             uint32_t num_seqs, uint32_t block_size, uint32_t num_groups,
             const std::vector<BlockCopy> &copies, const StatePool &states, bool from_step)
    : from_step_(from_step), block_size_(block_size), copies_(copies), num_groups_(num_groups) {
  PKV_REQUIRE(num_seqs > 0, "a batch needs at least one sequence (num_seqs is 0)");
  PKV_REQUIRE(seq_ids != nullptr, "seqs is NULL");
  std::unordered_set<uint64_t> seen;
  uint64_t total_tokens = 0;
  seq_ids_.assign(seq_ids, seq_ids + num_seqs);
  num_new_.resize(num_seqs);
  for (uint32_t i = 0; i < num_seqs; ++i) {
    const Sequence &s = seqs.get(seq_ids[i]);
    const unsigned long long id = s.id;
    PKV_REQUIRE(seen.insert(s.id).second, "sequence %llu appears twice in the batch", id);
    if (!s.running())
      fail(PKV_ERR_STATE, "sequence %llu is %s: only running sequences compute%s", id,
           state_name(s.state), s.state == SeqState::kPreempted ? " (resume it first)" : "");
    // A request's unslotted tokens (admitted per chunk) wait past its uncomputed ones.
    PKV_ASSERT((s.num_unslotted == 0 || s.request.is_request) && !s.in_batch);
    const uint32_t n = num_new_tokens ? num_new_tokens[i] : s.num_uncomputed();
    PKV_REQUIRE(n >= 1 && n <= s.num_uncomputed(),
                "sequence %llu: %u new tokens asked, it has %u uncomputed (1 .. that many allowed)",
                id, n, s.num_uncomputed());
    num_new_[i] = n;
    total_tokens += n;
  }
  PKV_REQUIRE(total_tokens <= INT32_MAX, "a batch of %llu tokens is too large (at most 2^31-1)",
              (unsigned long long)total_tokens);
  positions_.reserve(total_tokens);
  slot_mapping_.reserve(total_tokens);
  for (uint32_t i = 0; i < num_seqs; ++i) plan_seq(seqs.get(seq_ids_[i]), num_new_[i]);
  block_tables_.assign(size_t(num_seqs) * max_blocks_per_seq_, -1);
  for (uint32_t i = 0; i < num_seqs; ++i)
    std::copy(block_indices_.begin() + block_indptr_[i],
              block_indices_.begin() + block_indptr_[i + 1],
              block_tables_.begin() + size_t(i) * max_blocks_per_seq_);
  // Every group's slots and tables, group 0's first (the fields above: one group needs no more).
  if (num_groups_ > 1) plan_groups(seqs);
  const std::vector<BlockCopy> *lists[] = {&copies_, &states.pending_copies()};
  for (const std::vector<BlockCopy> *list : lists)
    for (const BlockCopy &c : *list) {
      copy_src_.push_back(c.src);
      copy_dst_.push_back(c.dst);
      copy_kind_.push_back(c.kind);
    }
  if (states.enabled())
    for (uint64_t id : seq_ids_) {
      const int32_t slot = seqs.get(id).state_slot;
      PKV_ASSERT(slot >= 0);  // a running sequence holds its working slot
      state_slots_.push_back(slot);
    }
}

void Batch::plan_groups(const SequenceTable &seqs) {
  const size_t num_seqs = seq_ids_.size();
  group_slot_mapping_ = slot_mapping_;
  group_slot_mapping_.reserve(size_t(num_groups_) * slot_mapping_.size());
  group_block_tables_ = block_tables_;
  group_block_tables_.resize(size_t(num_groups_) * block_tables_.size(), -1);
  for (uint32_t g = 1; g < num_groups_; ++g)
    for (uint32_t i = 0; i < num_seqs; ++i) {
      const std::vector<int32_t> &t = seqs.get(seq_ids_[i]).tables[g].ids;
      for (int32_t row = query_start_[i]; row < query_start_[i + 1]; ++row) {
        const uint32_t pos = static_cast<uint32_t>(positions_[row]);
        group_slot_mapping_.push_back(int64_t(t[pos / block_size_]) * block_size_ +
                                      pos % block_size_);
      }
      const size_t n = size_t(block_indptr_[i + 1] - block_indptr_[i]);
      std::copy(t.begin(), t.begin() + n,
                group_block_tables_.begin() + (size_t(g) * num_seqs + i) * max_blocks_per_seq_);
    }
}

void Batch::plan_seq(const Sequence &s, uint32_t num_new) {
  // Tokens [computed, computed + num_new) are new; the context is everything up to their end.
  const uint32_t start = s.num_computed;
  const uint32_t context = start + num_new;
  const std::vector<int32_t> &table = s.tables[0].ids;
  for (uint32_t pos = start; pos < context; ++pos) {
    positions_.push_back(static_cast<int32_t>(pos));
    slot_mapping_.push_back(int64_t(table[pos / block_size_]) * block_size_ + pos % block_size_);
  }
  // The last new token's output is sampled when it is the sequence's last token.
  const int32_t rows_before = query_start_.back();
  sample_rows_.push_back(context == s.num_tokens() ? rows_before + static_cast<int32_t>(num_new) - 1
                                                   : -1);
  query_start_.push_back(rows_before + static_cast<int32_t>(num_new));
  context_lens_.push_back(static_cast<int32_t>(context));
  const uint32_t num_blocks = blocks_for_tokens(context, block_size_);
  block_indices_.insert(block_indices_.end(), table.begin(), table.begin() + num_blocks);
  block_indptr_.push_back(static_cast<int32_t>(block_indices_.size()));
  last_block_len_.push_back(static_cast<int32_t>(context - (num_blocks - 1) * block_size_));
  max_blocks_per_seq_ = std::max(max_blocks_per_seq_, num_blocks);
  max_query_len_ = std::max(max_query_len_, num_new);
  max_context_len_ = std::max(max_context_len_, context);
}

Batch::Batch(BatchArrays &&a)
    : from_step_(false),
      imported_(true),
      block_size_(a.block_size),
      seq_ids_(std::move(a.seq_ids)),
      query_start_(std::move(a.query_start)),
      positions_(std::move(a.positions)),
      slot_mapping_(std::move(a.slot_mapping)),
      context_lens_(std::move(a.context_lens)),
      block_indptr_(std::move(a.block_indptr)),
      block_indices_(std::move(a.block_indices)),
      last_block_len_(std::move(a.last_block_len)),
      block_tables_(std::move(a.block_tables)),
      max_blocks_per_seq_(a.max_blocks_per_seq),
      max_query_len_(a.max_query_len),
      max_context_len_(a.max_context_len),
      copy_src_(std::move(a.copy_src)),
      copy_dst_(std::move(a.copy_dst)),
      copy_kind_(std::move(a.copy_kind)),
      sample_rows_(std::move(a.sample_rows)),
      num_groups_(a.num_groups),
      group_slot_mapping_(std::move(a.group_slot_mapping)),
      group_block_tables_(std::move(a.group_block_tables)),
      state_slots_(std::move(a.state_slots)) {
  num_new_.resize(seq_ids_.size());
  for (size_t i = 0; i < seq_ids_.size(); ++i)
    num_new_[i] = uint32_t(query_start_[i + 1] - query_start_[i]);
}

pkv_batch_view Batch::view() const {
  pkv_batch_view v;
  std::memset(&v, 0, sizeof v);
  v.struct_size = sizeof v;
  v.num_seqs = static_cast<uint32_t>(seq_ids_.size());
  v.num_tokens = static_cast<uint32_t>(positions_.size());
  v.max_blocks_per_seq = max_blocks_per_seq_;
  v.max_query_len = max_query_len_;
  v.max_context_len = max_context_len_;
  v.num_copies = static_cast<uint32_t>(copy_src_.size());
  v.block_size = block_size_;
  v.seq_ids = seq_ids_.data();
  v.query_start = query_start_.data();
  v.positions = positions_.data();
  v.slot_mapping = slot_mapping_.data();
  v.context_lens = context_lens_.data();
  v.block_indptr = block_indptr_.data();
  v.block_indices = block_indices_.data();
  v.last_block_len = last_block_len_.data();
  v.block_tables = block_tables_.data();
  v.copy_src = copy_src_.data();
  v.copy_dst = copy_dst_.data();
  v.sample_rows = sample_rows_.data();
  v.copy_kind = copy_kind_.data();
  v.num_kv_groups = num_groups_;
  v.group_slot_mapping = num_groups_ > 1 ? group_slot_mapping_.data() : slot_mapping_.data();
  v.group_block_tables = num_groups_ > 1 ? group_block_tables_.data() : block_tables_.data();
  v.state_slots = state_slots_.empty() ? nullptr : state_slots_.data();
  return v;
}

}  // namespace pkv
