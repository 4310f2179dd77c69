// The kernels' largest tiles against the device's opt-in shared memory a block (DESIGN.md §6,
// "Architectures"): run by the emulator as a 99 KiB part (SIMT_ARCH=86 and 120: sm_86 / 89 /
// 120, the least of the architectures pkv builds for) and on a real GPU as itself. First the
// MLA planner's rows per CTA against mla_smem_bytes at each limit pkv builds for (163, 99 and
// 227 KiB: 64 rows only where they fit), then, on this device, against the fp64 reference:
// MLA at DeepSeek's latent (512 + 64, 128 heads: 64 rows, 94.8 KiB) and at the widest one
// (512 + 128: 104.8 KiB for 64 rows, so a 99 KiB part plans 32), the fp32 MLA tile at the widest
// latent, head_dim 512 decode (48.7 KiB) and prefill (tensor cores 89.5 KiB, fp32 tiles 65.4
// KiB). The indexer's score tile against the same limits at every index_head_dim (132.5 KiB
// whole at 256); its top-k at 256 runs in test_indexer, also as a 99 KiB part
// (emu_indexer_sm86), where the key tile is staged in parts.
#include <pkv/pkv.h>

#include "indexer.cuh"
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

namespace {

StepCase mla(DType t, int32_t heads, int32_t rank, int32_t rope, std::vector<kvtest::SeqSpec> seqs,
             int32_t split) {
  StepCase c{t, 16, 1, heads, rank + rope, std::move(seqs), split};
  c.kv_dtype = t;
  c.mla_rank = rank;
  return c;
}

// plan_mla picks 64 rows for more than 32 heads exactly where they fit the limit.
bool check_mla_rows() {
  const size_t limits[] = {163u << 10, 99u << 10, 227u << 10};  // sm_80; 86, 89, 120; 90, 100
  const int32_t widths[] = {64 + 16, 512 + 64, 512 + 128};
  const int32_t context = 100, starts[2] = {0, 1};
  pkv::cuda::BatchView batch{1, 1, 1, context, starts, &context, starts, starts};
  bool ok = true;
  for (size_t limit : limits)
    for (int32_t width : widths) {
      const int32_t rank = width > 80 ? 512 : 64;
      const bool fits = pkv::cuda::mla_smem_bytes(4, width) <= limit;
      const int32_t got = pkv::cuda::plan_mla(batch, 128, rank, width, 132, limit).row_groups;
      const bool two_fit = pkv::cuda::mla_smem_bytes(2, width) <= limit;
      if (got != (fits ? 4 : 2) || !two_fit) {
        fprintf(stderr, "FAIL MLA width %d, limit %zu KiB: row groups %d (64 rows take %zu B)\n",
                width, limit >> 10, got, pkv::cuda::mla_smem_bytes(4, width));
        ok = false;
      }
    }
  return ok;
}

// The indexer's score CTA at every index_head_dim pkv takes fits each limit, whole where it can.
bool check_indexer_tiles() {
  const size_t limits[] = {163u << 10, 99u << 10, 227u << 10};
  bool ok = true;
  for (size_t limit : limits)
    for (int32_t dim = 8; dim <= PKV_INDEXER_MAX_HEAD_DIM; dim += 8) {
      const size_t bytes = pkv::cuda::indexer_score_smem_bytes(dim, limit);
      const size_t whole = pkv::cuda::indexer_score_smem_bytes(dim, size_t(1) << 30);
      if (bytes == 0 || bytes > limit || (whole <= limit && bytes != whole)) {
        fprintf(stderr, "FAIL indexer dim %d, limit %zu KiB: %zu B (whole: %zu B)\n", dim,
                limit >> 10, bytes, whole);
        ok = false;
      }
    }
  return ok;
}

}  // namespace

int main() {
  if (int skip = kvtest::require_device()) return skip;
  int smem = 0, major = 0, minor = 0;
  kvtest::check_cuda(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0),
                     "opt-in shared memory");
  kvtest::check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "cc");
  kvtest::check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), "cc");
  printf("device: compute capability %d.%d, %d KiB of shared memory a block (opt-in)\n", major,
         minor, smem >> 10);
  bool ok = check_mla_rows() && check_indexer_tiles();
  std::vector<StepCase> cases;
  // DeepSeek's latent, all 128 heads: 64 rows a CTA on every architecture.
  cases.push_back(mla(DType::bf16, 128, 512, 64, {{300, 1}, {20, 3}}, 128));
  // The widest latent pkv takes: 64 rows where they fit, else 32; and the fp32 tile.
  cases.push_back(mla(DType::f16, 64, 512, 128, {{200, 1}, {12, 12}}, 0));
  cases.push_back(mla(DType::f32, 16, 512, 128, {{150, 1}, {9, 9}}, 64));
  // head_dim 512 (Gemma 4's full layers, V its K): a split decode and a prompt on tensor cores,
  // then the fp32 tiles of an f32 model.
  StepCase wide{DType::bf16, 16, 1, 4, 512, {{150, 1}, {40, 24}}, 64};
  wide.k_eq_v = true;
  cases.push_back(wide);
  StepCase wide32{DType::f32, 16, 1, 2, 512, {{90, 1}, {30, 20}}, 64};
  wide32.k_eq_v = true;
  cases.push_back(wide32);
  for (size_t i = 0; i < cases.size(); ++i) ok = kvtest::run_step(cases[i], 500 + i) && ok;
  printf(ok ? "arch_tiles: all passed\n" : "arch_tiles: FAILED\n");
  return ok ? 0 : 1;
}
