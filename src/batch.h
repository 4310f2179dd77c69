// A step's plan (DESIGN.md §6): positions, slot mapping, block tables and copies, built once per
// step from the sequences and read by the kernels of every layer. Plain data: the engine opens,
// runs and ends batches.
#pragma once

#include <cstdint>
#include <vector>

#include "block_manager.h"
#include "pkv/pkv.h"
#include "sequence.h"
#include "state_pool.h"

namespace pkv {

// A step's arrays as another engine planned them (pkv_plan_import, plan_wire.h): every array
// of its pkv_batch_view.
struct BatchArrays {
  uint32_t block_size = 0, num_groups = 1;
  uint32_t max_blocks_per_seq = 0, max_query_len = 0, max_context_len = 0;
  std::vector<uint64_t> seq_ids;
  std::vector<int32_t> query_start, positions, context_lens, block_indptr, block_indices,
      last_block_len, block_tables, copy_src, copy_dst, copy_kind, sample_rows, state_slots,
      group_block_tables;
  std::vector<int64_t> slot_mapping, group_slot_mapping;
};

class Batch {
 public:
  // An imported plan (pkv_plan_import): its arrays as they came, no sequence of this engine's.
  explicit Batch(BatchArrays &&arrays);
  bool imported() const { return imported_; }
  // Plans the next num_new_tokens[i] tokens of seq_ids[i] (null num_new_tokens: all their
  // uncomputed tokens), with copies to do first: the block manager's, then the state pool's
  // (disjoint memory: their relative order does not matter; each list keeps its own). With
  // STATE layers the view lists each sequence's working state slot. Validates everything;
  // throws with nothing changed.
  Batch(const SequenceTable &seqs, const uint64_t *seq_ids, const uint32_t *num_new_tokens,
        uint32_t num_seqs, uint32_t block_size, uint32_t num_groups,
        const std::vector<BlockCopy> &copies, const StatePool &states, bool from_step);

  pkv_batch_view view() const;
  bool from_step() const { return from_step_; }  // planned by pkv_step: ends with pkv_commit
  const std::vector<uint64_t> &seq_ids() const { return seq_ids_; }
  const std::vector<uint32_t> &num_new_tokens() const { return num_new_; }
  const std::vector<int32_t> &sample_rows() const { return sample_rows_; }
  const std::vector<BlockCopy> &copies() const { return copies_; }  // the block manager's
  size_t num_state_copies() const { return copy_src_.size() - copies_.size(); }

 private:
  void plan_seq(const Sequence &s, uint32_t num_new);
  void plan_groups(const SequenceTable &seqs);  // group_* of groups 1 .. num_groups - 1 too

  bool from_step_;
  bool imported_ = false;
  uint32_t block_size_;
  std::vector<uint64_t> seq_ids_;
  std::vector<uint32_t> num_new_;
  std::vector<int32_t> query_start_{0};
  std::vector<int32_t> positions_;
  std::vector<int64_t> slot_mapping_;
  std::vector<int32_t> context_lens_;
  std::vector<int32_t> block_indptr_{0};
  std::vector<int32_t> block_indices_;
  std::vector<int32_t> last_block_len_;
  std::vector<int32_t> block_tables_;  // [num_seqs][max_blocks_per_seq], -1 padded
  uint32_t max_blocks_per_seq_ = 0;
  uint32_t max_query_len_ = 0;
  uint32_t max_context_len_ = 0;
  std::vector<BlockCopy> copies_;
  std::vector<int32_t> copy_src_, copy_dst_, copy_kind_;
  std::vector<int32_t> sample_rows_;
  uint32_t num_groups_ = 1;
  std::vector<int64_t> group_slot_mapping_;  // [groups][tokens], with several groups
  std::vector<int32_t> group_block_tables_;  // [groups][seqs][max_blocks_per_seq], the same
  std::vector<int32_t> state_slots_;         // [seqs] with STATE layers, else empty
};

}  // namespace pkv
