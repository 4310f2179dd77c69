// One sequence: its token ids, its block table and how far its KV is computed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pkv {

// Blocks needed to hold num_tokens tokens.
inline uint32_t blocks_for_tokens(uint64_t num_tokens, uint32_t block_size) {
  return static_cast<uint32_t>((num_tokens + block_size - 1) / block_size);
}

// What the scheduler keeps of a submitted request (pkv_submit); unused for pkv_allocate's.
struct RequestState {
  bool active = false;           // this sequence is a scheduler request
  bool admitted_once = false;    // has held blocks (so "preempted" is meaningful)
  uint32_t prompt_len = 0;
  uint32_t max_new_tokens = 0;
  uint32_t generated = 0;
  int32_t stop_token = -1;
  int32_t priority = 0;
  uint32_t finish_reason = 0;    // PKV_FINISH_*
  bool has_pending = false;      // a sampled token whose slot is reserved at the next step
  int32_t pending = 0;
};

struct Sequence {
  uint64_t id = 0;
  std::string salt;                  // cache salt: sequences with different salts share nothing
  std::vector<int32_t> tokens;       // prompt + appended tokens
  std::vector<int32_t> block_table;  // physical blocks, covering every token (empty if preempted)
  uint32_t num_computed = 0;         // tokens whose KV is in the pool (cached ones included)
  uint32_t num_cached = 0;           // tokens served by the prefix cache at the last admission
  uint32_t num_sealed_blocks = 0;    // leading blocks that are copies of prefix-tree nodes
  bool preempted = false;            // holds tokens but no blocks (also: waiting, finished)
  bool in_batch = false;
  RequestState request;

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
  uint32_t num_uncomputed() const { return num_tokens() - num_computed; }
};

}  // namespace pkv
