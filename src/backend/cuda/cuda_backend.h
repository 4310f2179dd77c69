// The CUDA backend (DESIGN.md §6): the device pool and its host tier, a step's arrays on the
// device, and the kernels' launches (kernels/ holds the kernels). cuda_backend.cpp makes the
// pools, copies blocks and plans steps; cuda_backend_mla.cpp runs MLA, sparse MLA and the indexer.
//
// No stall in a step: every device buffer and pinned staging slot a step uses is made at create,
// sized for the engine's bounds (PoolShape: max_num_seqs, max_num_batched_tokens,
// max_blocks_per_seq); uploads go through pinned slots used in turn, each guarded by an event
// (cuda_buffers.h); copies stay in order on the stream without a wait. Between pkv_batch_begin
// and pkv_batch_end the host neither waits nor allocates unless a step outgrows those bounds
// (counted: host_waits(), device_allocs()) or the host reads back blocks for a store.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_buffers.h"
#include "backend/cuda/layer_table.h"
#include "decode_attention.cuh"
#include "indexer.cuh"
#include "mla_attention.cuh"

namespace pkv {

class CudaBackend final : public Backend {
 public:
  CudaBackend(int32_t device_id, const PoolShape &shape);
  ~CudaBackend() override;
  int32_t device() const override { return PKV_DEVICE_CUDA; }
  const char *kernels() const override { return "cuda"; }
  void *k_pool() const override { return k_; }
  void *state_pool() const override { return state_; }
  void *host_state_pool() const override { return host_state_; }
  void *v_pool() const override { return v_; }
  void *host_k_pool() const override { return host_; }
  void *host_v_pool() const override {
    return host_ && shape_.tensors == 2 ? static_cast<char *>(host_) + shape_.host_bytes.pool
                                        : nullptr;
  }
  uint64_t host_waits() const override { return counters_.host_waits; }
  uint64_t device_allocs() const override { return counters_.allocs; }
  void set_stream(void *stream) override;
  void copy_blocks(const int32_t *src, const int32_t *dst, const int32_t *kind,
                   uint32_t n) override;
  void read_block(int32_t block, void *dst) override;
  void read_state(int32_t slot, void *dst) override;
  void wait_host_tier() override;
  void plan(const pkv_batch_view &v) override { plan_step(v, 0); }
  void plan_graph(const pkv_batch_view &v, uint32_t bucket) override { plan_step(v, bucket); }
  void attention(const AttentionCall &call) override;
  void indexer_write(const IndexerCall &call) override;
  void indexer_topk(const IndexerCall &call) override;

 private:
  // One KV group's view of the step on the device.
  struct StepGroup {
    const int64_t *slots;   // [num_tokens]
    cuda::BatchView batch;  // block_indices: the group's
  };
  struct StepPlan {
    int32_t span, kv_heads;  // the layers it serves (with plan.q_heads, plan.head_dim)
    cuda::DecodePlan plan;
    void *ws;  // its workspace (workspace())
  };

  void reserve_step_buffers();
  size_t workspace_bound() const;
  void plan_step(const pkv_batch_view &v, uint32_t bucket);
  void copy_states(const SplitCopies &c);
  char *state_slot(bool host, int32_t slot) const;
  void release();
  cuda::KvLayer kv_layer(const AttentionCall &call);
  const StepPlan &decode_plan(const cuda::BatchView &batch, const cuda::KvLayer &layer,
                              int32_t q_heads);
  void *workspace(size_t bytes);
  const StepGroup &step_group(uint32_t group) const;
  // cuda_backend_mla.cpp
  void mla_attention(const AttentionCall &call);
  cuda::KvLayer mla_layer(const AttentionCall &call);
  const cuda::MlaPlan &mla_plan(const cuda::BatchView &batch, int32_t width, int32_t rank);
  cuda::IndexerLayer indexer_layer(const IndexerCall &call) const;

  int32_t device_id_;
  PoolShape shape_;
  int num_sms_ = 0, max_smem_ = 0;
  void *k_ = nullptr;
  void *v_ = nullptr;
  void *host_ = nullptr;        // the host tier, for the host (host_k_pool)
  void *host_dev_ = nullptr;    // the same memory, for kernels
  void *state_ = nullptr;       // the state slots (PoolShape::num_state_slots), device memory
  void *host_state_ = nullptr;  // host state slots (swapped, offloaded), pinned host memory
  cudaStream_t stream_ = nullptr;
  CudaCounters counters_;
  // The step's arrays (step_arrays.h) and the copies' pairs: device buffers, and pinned slots
  // they are uploaded from. batch_buf_ is made at create and never moves (a captured graph reads
  // it); an eager step past the bounds uses batch_overflow_, which grows.
  DeviceBuffer batch_buf_{&counters_}, batch_overflow_{&counters_}, pairs_buf_{&counters_};
  StagingRing batch_staging_{&counters_}, pairs_staging_{&counters_};
  // Decode splits and MLA's: sized at create for any step within the bounds (workspace_bound),
  // never moved; an eager step past them uses workspace_overflow_ (workspace()).
  DeviceBuffer workspace_{&counters_}, workspace_overflow_{&counters_};
  // Recorded after copies that read or write the host tier or the host state slots: the host
  // waits on it before it touches them itself (wait_host_tier).
  cudaEvent_t host_copies_ = nullptr;
  bool host_copies_pending_ = false;
  std::vector<StepGroup> groups_;       // [num_kv_groups] of the planned step
  bool graph_step_ = false;             // planned by plan_graph: padded, fixed addresses
  std::vector<StepPlan> decode_plans_;  // of the step
  cuda::MlaPlan mla_plan_{};            // MLA: the step's
  void *mla_ws_ = nullptr;              // its workspace
  bool mla_planned_ = false;            // pages: mla_plan_ is the step's
  // The indexer's top-k scores (at most kIndexerWorkspace bytes: longer prefills run in waves).
  static constexpr size_t kIndexerWorkspace = size_t(256) << 20;
  DeviceBuffer index_ws_{&counters_};
  DeviceBuffer sparse_ws_{&counters_};  // sparse MLA's split rows (SparseMlaPlan)
  LayerTable scales_;                   // fp8: [model layers][tensors][kv_heads]
  LayerTable sinks_;                    // [model layers][q_heads], when a layer has sinks
};

}  // namespace pkv
