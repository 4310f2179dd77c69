// Step planning (DESIGN.md §6): built once per step, read by the kernels of every layer.
#pragma once

#include <cstdint>
#include <vector>

#include "block_manager.h"
#include "pkv/pkv.h"

namespace pkv {

class Engine;

class Batch {
 public:
  // Validates everything, then marks the sequences as in the batch and takes the queued copies.
  Batch(Engine &engine, const uint64_t *seqs, const uint32_t *num_new_tokens, uint32_t num_seqs,
        uint64_t serial, bool from_step);
  ~Batch();
  Batch(const Batch &) = delete;
  Batch &operator=(const Batch &) = delete;

  // Every live batch is registered, so a handle used after pkv_batch_end / pkv_commit /
  // pkv_batch_abort is refused (PKV_ERR_STATE) instead of read after free. The engine of a live
  // batch, or null.
  static Engine *live_engine(const void *handle);

  Engine &engine() const { return engine_; }
  uint32_t num_seqs() const { return static_cast<uint32_t>(seq_ids_.size()); }
  pkv_batch_view view() const;
  uint64_t serial() const { return serial_; }
  bool from_step() const { return from_step_; }  // planned by pkv_step: ends with pkv_commit
  // Whether pkv itself did the copy-on-write copies (pkv_attention); then abort keeps them done.
  bool copies_done() const { return copies_done_; }
  void set_copies_done() { copies_done_ = true; }

  void commit();  // the step ran: tokens computed, full blocks sealed
  void abort();   // it did not: copies not done by pkv go back to the queue

 private:
  void plan_seq(const struct Sequence &seq, uint32_t num_new);
  void release_members();

  Engine &engine_;
  uint64_t serial_;
  bool from_step_;
  bool copies_done_ = false;
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
  std::vector<int32_t> copy_src_, copy_dst_;
  std::vector<int32_t> sample_rows_;
};

}  // namespace pkv
