// CPU backend: the pool in host memory, the compute in cpu_kernels.cpp on a thread pool.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "status.h"

namespace pkv {
namespace {

// Anonymous memory: zero, committed on first write, so a pool sized from the host's free memory
// costs only the blocks actually used. None when bytes is 0.
class Mapping {
 public:
  Mapping(uint64_t bytes, const char *what) : bytes_(bytes) {
    if (!bytes_) return;
    void *p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fail(PKV_ERR_OUT_OF_MEMORY, "cannot map a %llu-byte %s: %s", (unsigned long long)bytes_, what,
           std::strerror(errno));
    base_ = static_cast<char *>(p);
    // Huge pages where the kernel allows: attention strides through the pool, and 4 KiB pages
    // would cost a TLB miss every few rows. Only advice: failure changes nothing.
    madvise(p, bytes_, MADV_HUGEPAGE);
  }
  ~Mapping() {
    if (base_) munmap(base_, bytes_);
  }
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;
  char *base() const { return base_; }

 private:
  uint64_t bytes_;
  char *base_ = nullptr;
};

class CpuBackend final : public Backend {
 public:
  // One mapping for the pool's K then V (MLA: the latents alone), one for the host tier's, one
  // for the state slots (page-aligned: each slot's parts stay 256-byte aligned).
  CpuBackend(const PoolShape &shape, uint32_t num_threads)
      : shape_(shape),
        bytes_(shape.bytes_per_pool()),
        num_threads_(num_threads),
        variant_(cpu_variant()),
        pool_(shape.tensors * bytes_, "KV pool"),
        host_(shape.tensors * shape.host_bytes.pool, "host tier"),
        state_(uint64_t(shape.num_state_slots) * shape.state_slot_bytes, "state pool"),
        host_state_(uint64_t(shape.num_host_state_slots) * shape.state_slot_bytes,
                    "host state slots") {}

  int32_t device() const override { return PKV_DEVICE_CPU; }
  const char *kernels() const override { return variant_.name; }
  void *k_pool() const override { return pool_.base(); }
  void *v_pool() const override {
    return shape_.tensors == 1 ? nullptr : pool_.base() + bytes_;  // MLA, pages: none
  }
  void *host_k_pool() const override { return host_.base(); }
  void *host_v_pool() const override {
    return host_.base() && shape_.tensors == 2 ? host_.base() + shape_.host_bytes.pool : nullptr;
  }

  void *state_pool() const override { return state_.base(); }
  void *host_state_pool() const override { return host_state_.base(); }

  void copy_blocks(const int32_t *src, const int32_t *dst, const int32_t *kind,
                   uint32_t n) override {
    const CpuTier tiers[2] = {
        {pool_.base(), static_cast<char *>(v_pool()), shape_.layer_bytes()},
        {host_.base(), static_cast<char *>(host_v_pool()), shape_.host_bytes.layer}};
    if (!std::any_of(kind, kind + n, copy_is_state)) {
      kernels().copy_blocks(tiers, shape_.num_layers, shape_.tensors, shape_.block_bytes(), src,
                            dst, kind, n);
      return;
    }
    const SplitCopies c = split_copies(src, dst, kind, n);
    if (!c.src.empty())
      kernels().copy_blocks(tiers, shape_.num_layers, shape_.tensors, shape_.block_bytes(),
                            c.src.data(), c.dst.data(), c.kind.data(), uint32_t(c.src.size()));
    const uint64_t sb = shape_.state_slot_bytes;
    for (size_t i = 0; i < c.state_src.size(); ++i) {  // in order: a copy may read an earlier one's
      const int32_t k = c.state_kind[i];
      std::memmove(state_slot(state_writes_host(k), c.state_dst[i]),
                   state_slot(state_reads_host(k), c.state_src[i]), sb);
    }
  }

  // Slot `slot` of the device's state slots, or of the host's.
  char *state_slot(bool host, int32_t slot) const {
    PKV_ASSERT(slot >= 0 &&
               uint32_t(slot) < (host ? shape_.num_host_state_slots : shape_.num_state_slots));
    return (host ? host_state_ : state_).base() + uint64_t(slot) * shape_.state_slot_bytes;
  }

  void read_state(int32_t slot, void *dst) override {
    std::memcpy(dst, state_slot(false, slot), shape_.state_slot_bytes);
  }

  void read_block(int32_t block, void *dst) override {
    char *out = static_cast<char *>(dst);
    const uint64_t bb = shape_.block_bytes();
    for (uint32_t l = 0; l < shape_.num_layers; ++l) {
      const uint64_t at = l * shape_.layer_bytes() + uint64_t(block) * bb;
      for (uint32_t t = 0; t < shape_.tensors; ++t)
        std::memcpy(out + (shape_.tensors * l + t) * bb, pool_.base() + t * bytes_ + at, bb);
    }
  }

  void plan(const pkv_batch_view &v) override {
    PKV_ASSERT(v.num_kv_groups >= 1 && v.group_slot_mapping && v.group_block_tables);
    step_ = CpuStep{v.num_seqs,           v.num_tokens,         v.block_size,
                    v.max_blocks_per_seq, v.num_kv_groups,      v.query_start,
                    v.context_lens,       v.group_slot_mapping, v.group_block_tables};
    kernels().plan(step_, shape_.q_heads, shape_.kv_heads, shape_.head_dim, shape_.v_dim());
  }

  void attention(const AttentionCall &call) override {
    PKV_ASSERT(call.group < step_.num_groups);
    PKV_ASSERT((shape_.kv_dtype != PKV_DTYPE_FP8_E4M3 && shape_.kv_dtype != PKV_DTYPE_FP8_E5M2) ||
               (call.k_scale && call.v_scale));
    // MLA and K = V: V is read through K's bytes; pages: every layer's K and V in one page.
    char *k_cache = pool_.base() + call.k_offset,
         *v_cache = (call.v_in_k_pool ? pool_.base() : pool_.base() + bytes_) + call.v_offset;
    CpuLayer layer{k_cache,     v_cache,    shape_.q_heads, call.kv_heads,   call.head_dim,
                   call.v_dim,  call.mla,   shape_.dtype,   shape_.kv_dtype, call.group,
                   call.window, call.scale, call.k_scale,   call.v_scale,    call.q,
                   call.k,      call.v,     call.out};
    layer.block_stride = call.dense_stride ? 0 : call.block_stride;
    layer.chunk = call.chunk;
    layer.softcap = call.softcap;
    layer.sinks = call.sinks;
    if (call.write) kernels().write_kv(step_, layer);
    if (call.indices)
      kernels().sparse_mla(step_, layer, call.indices, call.topk);
    else
      kernels().attention(step_, layer);
  }

  void indexer_write(const IndexerCall &call) override {
    PKV_ASSERT(call.group < step_.num_groups);
    kernels().indexer_write(step_, pool_.base(), call, shape_.dtype);
  }

  void indexer_topk(const IndexerCall &call) override {
    PKV_ASSERT(call.group < step_.num_groups);
    kernels().indexer_topk(step_, pool_.base(), call, shape_.dtype);
  }

  void set_stream(void *stream) override {
    if (stream) fail(PKV_ERR_INVALID_ARGUMENT, "a CPU engine has no CUDA stream: pass NULL");
  }

  // The engine refuses graph steps on a CPU engine before anything of the step is done.
  void plan_graph(const pkv_batch_view &, uint32_t) override {
    fail(PKV_ERR_INTERNAL, "plan_graph on the CPU backend");
  }
  void wait_host_tier() override {}  // copies run on the calling thread: done when they return

 private:
  // The worker threads start with the first computation: an engine used only for block
  // management (or created and destroyed in a loop) never starts any.
  CpuKernels &kernels() {
    if (!kernels_) kernels_ = std::make_unique<CpuKernels>(num_threads_, variant_);
    return *kernels_;
  }

  PoolShape shape_;
  CpuStep step_{};  // the planned step
  uint64_t bytes_;
  uint32_t num_threads_;
  const CpuVariant &variant_;
  Mapping pool_, host_, state_, host_state_;
  std::unique_ptr<CpuKernels> kernels_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const PoolShape &shape, uint32_t num_threads) {
  return std::make_unique<CpuBackend>(shape, num_threads);
}

}  // namespace pkv
