// The CUDA backend's recurrent state slots (DESIGN.md §13) through the Backend interface: the
// slots are allocated beside the pool, zeroed, 256-byte aligned; one copy list mixing KV block
// copies (copy-on-write) with PKV_COPY_STATE copies moves whole slots in order (a chain 0 -> 1,
// 1 -> 2 gives slot 2 slot 0's bytes; a copy onto itself changes nothing) and the blocks as
// before, and no other slot or block changes. Then the host slots of swapped-out sequences
// (pinned host memory): PKV_COPY_STATE_OUT slot 0 -> host slot 1 and PKV_COPY_STATE_IN host slot
// 1 -> slot 3 in one list (the second reads what the first wrote). Every byte is checked.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cuda_backend_state.h"
#include "kv_harness.h"
#include "status.h"

namespace {

using namespace kvtest;

constexpr uint32_t kSlots = 5, kHostSlots = 2, kBlocks = 4, kBlockSize = 4, kHeads = 2,
                   kHeadDim = 8;
constexpr uint64_t kSlotBytes = 768;

uint8_t slot_byte(uint32_t slot, uint64_t i) { return uint8_t(slot * 37 + i * 11 + 1); }
uint8_t block_byte(int t, uint32_t block, uint64_t i) { return uint8_t(t * 101 + block * 13 + i); }

size_t run_case() {
  pkv::PoolShape shape{};
  shape.num_layers = 1, shape.num_blocks = kBlocks, shape.block_size = kBlockSize;
  shape.kv_heads = kHeads, shape.head_dim = kHeadDim, shape.dtype_bytes = 4;
  shape.dtype = shape.kv_dtype = PKV_DTYPE_F32, shape.q_heads = kHeads, shape.model_layers = 1;
  shape.bytes.block = uint64_t(kBlockSize) * kHeads * kHeadDim * 4;
  shape.bytes.layer = shape.bytes.pool = shape.bytes.block * kBlocks;
  shape.num_state_slots = kSlots, shape.state_slot_bytes = kSlotBytes;
  shape.num_host_state_slots = kHostSlots;
  std::unique_ptr<pkv::Backend> be = pkv::make_cuda_backend(0, shape);
  size_t bad = 0;
  char *state = static_cast<char *>(be->state_pool());
  if (!state || reinterpret_cast<uintptr_t>(state) % 256) return 1;
  std::vector<uint8_t> host(kSlots * kSlotBytes);
  check_cuda(cudaMemcpy(host.data(), state, host.size(), cudaMemcpyDeviceToHost), "read slots");
  for (uint8_t b : host) bad += b != 0;  // zeroed at allocation
  for (uint32_t s = 0; s < kSlots; ++s)
    for (uint64_t i = 0; i < kSlotBytes; ++i) host[s * kSlotBytes + i] = slot_byte(s, i);
  check_cuda(cudaMemcpy(state, host.data(), host.size(), cudaMemcpyHostToDevice), "fill slots");
  const uint64_t pool = shape.bytes.pool;
  std::vector<uint8_t> kv(2 * pool);
  for (int t = 0; t < 2; ++t)
    for (uint32_t b = 0; b < kBlocks; ++b)
      for (uint64_t i = 0; i < shape.bytes.block; ++i)
        kv[t * pool + b * shape.bytes.block + i] = block_byte(t, b, i);
  void *tensors[2] = {be->k_pool(), be->v_pool()};
  for (int t = 0; t < 2; ++t)
    check_cuda(cudaMemcpy(tensors[t], kv.data() + t * pool, pool, cudaMemcpyHostToDevice), "kv");
  // COW 1 -> 3 between the state copies; state 0 -> 1, 1 -> 2 (a chain), 4 -> 4.
  const int32_t src[] = {0, 1, 1, 4}, dst[] = {1, 3, 2, 4};
  const int32_t kind[] = {PKV_COPY_STATE, PKV_COPY_COW, PKV_COPY_STATE, PKV_COPY_STATE};
  be->copy_blocks(src, dst, kind, 4);
  check_cuda(cudaDeviceSynchronize(), "sync");
  check_cuda(cudaMemcpy(host.data(), state, host.size(), cudaMemcpyDeviceToHost), "read slots");
  const uint32_t from[kSlots] = {0, 0, 0, 3, 4};  // whose bytes each slot should hold
  for (uint32_t s = 0; s < kSlots; ++s)
    for (uint64_t i = 0; i < kSlotBytes; ++i)
      bad += host[s * kSlotBytes + i] != slot_byte(from[s], i);
  for (int t = 0; t < 2; ++t) {
    std::vector<uint8_t> got(pool);
    check_cuda(cudaMemcpy(got.data(), tensors[t], pool, cudaMemcpyDeviceToHost), "read kv");
    for (uint32_t b = 0; b < kBlocks; ++b)
      for (uint64_t i = 0; i < shape.bytes.block; ++i)
        bad += got[b * shape.bytes.block + i] != block_byte(t, b == 3 ? 1 : b, i);
  }
  // Out to the host and back in, in one list, in order.
  uint8_t *hs = static_cast<uint8_t *>(be->host_state_pool());
  if (!hs) return bad + 1;
  std::memset(hs, 0xee, kHostSlots * kSlotBytes);
  const int32_t src2[] = {0, 1}, dst2[] = {1, 3};
  const int32_t kind2[] = {PKV_COPY_STATE_OUT, PKV_COPY_STATE_IN};
  be->copy_blocks(src2, dst2, kind2, 2);
  check_cuda(cudaDeviceSynchronize(), "sync");
  check_cuda(cudaMemcpy(host.data(), state, host.size(), cudaMemcpyDeviceToHost), "read slots");
  const uint32_t from2[kSlots] = {0, 0, 0, 0, 4};
  for (uint32_t s = 0; s < kSlots; ++s)
    for (uint64_t i = 0; i < kSlotBytes; ++i)
      bad += host[s * kSlotBytes + i] != slot_byte(from2[s], i);
  for (uint64_t i = 0; i < kSlotBytes; ++i) {
    bad += hs[i] != 0xee;                          // host slot 0: untouched
    bad += hs[kSlotBytes + i] != slot_byte(0, i);  // host slot 1: slot 0's bytes
  }
  if (bad) fprintf(stderr, "FAIL state slots: %zu bytes differ\n", bad);
  return bad;
}

}  // namespace

int run_state_backend_cases() { return run_case() ? 1 : 0; }
