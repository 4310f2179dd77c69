// Multi-head latent attention over the paged latent cache (see mla_attention.cuh): one kernel for
// decode rows (split-K, then a merge) and prefill rows, on tensor cores for f16 / bf16 models
// (mla_mma.cuh) and in fp32 for f32 models (mla_fma.cuh).
#include <cmath>

#include "mla_attention.cuh"
#include "mla_fma.cuh"
#include "mla_mma.cuh"

namespace pkv::cuda {
namespace {

using dev::kMlaThreads;
using dev::MlaArgs;
using dev::MlaRows;

constexpr int32_t kSplitAlign = 32;  // a multiple of every key tile (16, 32)
constexpr int32_t kMinSplitTokens = 256;

template <class T, class C, int RG>
__global__ void __launch_bounds__(kMlaThreads, 1) mla_mma_kernel(MlaArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  MlaRows rb;
  if (!dev::mla_rows<dev::MlaMmaTile<RG>::kRows>(a, rb)) return;
  dev::mla_attend_mma<T, C, RG>(a, rb, smem);
}

template <class T, class C>
__global__ void __launch_bounds__(kMlaThreads, 1) mla_fma_kernel(MlaArgs a) {
  extern __shared__ __align__(16) unsigned char smem[];
  MlaRows rb;
  if (!dev::mla_rows<dev::MlaFmaTile::kRows>(a, rb)) return;
  dev::mla_attend_fma<T, C>(a, rb, smem);
}

// grid = (q_head, seq): out = sum_s 2^(m_s - m) acc_s / sum_s 2^(m_s - m) l_s over the splits of
// a decode that has more than one.
template <class T> __global__ void __launch_bounds__(kMlaThreads) mla_merge_kernel(MlaArgs a) {
  const int seq = blockIdx.y, head = blockIdx.x;
  const int query_start = a.query_start[seq];
  if (a.query_start[seq + 1] - query_start != 1) return;
  const int num_splits = dev::mla_splits(a, a.context_lens[seq]);
  if (num_splits <= 1) return;
  const int64_t part0 = (int64_t(seq) * a.q_heads + head) * a.max_splits;
  const float *ml = a.ws_ml + 2 * part0;
  float m = -INFINITY, l = 0.f;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, ml[2 * s]);
  for (int s = 0; s < num_splits; ++s) l += exp2f(ml[2 * s] - m) * ml[2 * s + 1];
  T *out = static_cast<T *>(a.out) + (int64_t(query_start) * a.q_heads + head) * a.rank;
  for (int c = threadIdx.x; c < a.rank; c += kMlaThreads) {
    float x = 0.f;
    for (int s = 0; s < num_splits; ++s)
      x += exp2f(ml[2 * s] - m) * a.ws_acc[(part0 + s) * a.rank + c];
    out[c] = dev::from_float<T>(x / l);
  }
}

// The decode launch (every sequence's splits; only decodes have work), its merge, then the
// prefill launch (only sequences of 2 or more new tokens have work), rows kRows a CTA.
template <class T>
cudaError_t launch_rows(void (*kernel)(MlaArgs), int32_t rows, size_t smem, const MlaArgs &a,
                        const BatchView &b, cudaStream_t stream) {
  if (smem > 48 * 1024)  // past the default: opt in (sm_80 and sm_90 have more)
    if (const cudaError_t e =
            cudaFuncSetAttribute(reinterpret_cast<const void *>(kernel),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)))
      return e;
  MlaArgs d = a;
  d.decode = 1;
  const dim3 decode_grid(uint32_t(a.max_splits), uint32_t(dev::ceil_div(a.q_heads, rows)),
                         uint32_t(b.num_seqs));
  kernel<<<decode_grid, kMlaThreads, smem, stream>>>(d);
  if (a.max_splits > 1)
    mla_merge_kernel<T>
        <<<dim3(uint32_t(a.q_heads), uint32_t(b.num_seqs)), kMlaThreads, 0, stream>>>(d);
  if (b.max_query_len > 1) {
    d.decode = 0;
    const int64_t prefill_rows = int64_t(b.max_query_len) * a.q_heads;
    const dim3 grid(uint32_t((prefill_rows + rows - 1) / rows), 1, uint32_t(b.num_seqs));
    kernel<<<grid, kMlaThreads, smem, stream>>>(d);
  }
  return cudaGetLastError();
}

// Tensor cores for f16 / bf16 models (any cache), fp32 for f32 models.
template <class T, class C>
cudaError_t launch_typed(const MlaArgs &a, const BatchView &b, int32_t row_groups,
                         cudaStream_t stream) {
  if constexpr (dev::kMmaType<T>) {
    if (row_groups == 4)
      return launch_rows<T>(mla_mma_kernel<T, C, 4>, dev::MlaMmaTile<4>::kRows,
                            dev::MlaMmaTile<4>::smem_bytes(a.width), a, b, stream);
    return launch_rows<T>(mla_mma_kernel<T, C, 2>, dev::MlaMmaTile<2>::kRows,
                          dev::MlaMmaTile<2>::smem_bytes(a.width), a, b, stream);
  } else {
    return launch_rows<T>(mla_fma_kernel<T, C>, dev::MlaFmaTile::kRows,
                          dev::MlaFmaTile::smem_bytes(a.width), a, b, stream);
  }
}

}  // namespace

size_t mla_smem_bytes(int32_t row_groups, int32_t width) {
  return row_groups == 4 ? dev::MlaMmaTile<4>::smem_bytes(width)
                         : dev::MlaMmaTile<2>::smem_bytes(width);
}

MlaPlan plan_mla_with(const BatchView &batch, int32_t q_heads, int32_t kv_lora_rank,
                      int32_t split_tokens, int32_t row_groups) {
  MlaPlan p{};
  p.split_tokens = dev::ceil_div(split_tokens > 0 ? split_tokens : 1, kSplitAlign) * kSplitAlign;
  const int32_t keys = batch.max_context_len > 0 ? batch.max_context_len : 1;
  p.max_splits = dev::ceil_div(keys, p.split_tokens);
  p.row_groups = row_groups;
  p.workspace_bytes = p.max_splits > 1 ? sizeof(float) * size_t(batch.num_seqs) * size_t(q_heads) *
                                             size_t(p.max_splits) * (size_t(kv_lora_rank) + 2)
                                       : 0;
  return p;
}

// One wave of one CTA per SM: the kernels' registers (up to ~220 a thread of 256) leave room for
// one, and each split costs a partial of q_heads x rank floats, written and merged. Rounding the
// splits down keeps the wave whole (32 sequences of 2 row tiles on 132 SMs: 2 splits, 128 CTAs,
// not 3 splits in 1.5 waves).
MlaPlan plan_mla(const BatchView &batch, int32_t q_heads, int32_t kv_lora_rank, int32_t width,
                 int32_t num_sms, size_t max_smem) {
  const int32_t row_groups = q_heads > 32 && mla_smem_bytes(4, width) <= max_smem ? 4 : 2;
  const int64_t ctas = int64_t(batch.num_seqs) * dev::ceil_div(q_heads, 16 * row_groups);
  const int64_t want = ctas > 0 && ctas < num_sms ? num_sms / ctas : 1;
  const int64_t keys = batch.max_context_len > 0 ? batch.max_context_len : 1;
  int64_t split = (keys + want - 1) / want;
  if (split < kMinSplitTokens) split = kMinSplitTokens;
  return plan_mla_with(batch, q_heads, kv_lora_rank, int32_t(split), row_groups);
}

cudaError_t launch_mla_attention(const KvLayer &layer, int32_t kv_lora_rank, const BatchView &batch,
                                 const void *q, void *out, int32_t q_heads, float scale,
                                 const MlaPlan &plan, void *workspace, cudaStream_t stream) {
  if (batch.num_seqs < 0 || batch.num_seqs > PKV_CUDA_MAX_GRID || q_heads < 1 ||
      q_heads > PKV_CUDA_MAX_GRID || layer.v || layer.kv_heads != 1 || layer.window != 0 ||
      layer.chunk != 0 || layer.softcap != 0.f || layer.sinks ||
      (layer.v_dim != 0 && layer.v_dim != kv_lora_rank) || layer.block_size < 1 ||
      !dev::latent_ok(layer.head_dim, kv_lora_rank) || !dev::latent_stride_ok(layer) ||
      !aligned16(q) || !aligned16(out) || !aligned16(layer.k) || !(scale > 0.f) ||
      (is_fp8(layer.kv_dtype) && !layer.k_scale) || plan.split_tokens < 1 || plan.max_splits < 1 ||
      int64_t(plan.max_splits) * plan.split_tokens < batch.max_context_len ||
      (plan.max_splits > 1 && !workspace) || (plan.row_groups != 2 && plan.row_groups != 4))
    return cudaErrorInvalidValue;
  if (batch.num_seqs == 0) return cudaSuccess;
  MlaArgs a{};
  a.q = q, a.out = out, a.cache = layer.k, a.k_scale = layer.k_scale;
  a.query_start = batch.query_start, a.context_lens = batch.context_lens;
  a.block_indptr = batch.block_indptr, a.block_indices = batch.block_indices;
  a.q_heads = q_heads, a.width = layer.head_dim, a.rank = kv_lora_rank;
  a.block_size = layer.block_size;
  a.block_elems = dev::latent_block_elems(layer);
  a.scale_log2 = scale * 1.4426950408889634f;  // log2(e)
  a.split_tokens = plan.split_tokens, a.max_splits = plan.max_splits;
  const size_t parts = size_t(batch.num_seqs) * q_heads * plan.max_splits;
  a.ws_acc = static_cast<float *>(workspace);
  a.ws_ml = a.ws_acc ? a.ws_acc + parts * kv_lora_rank : nullptr;
  return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
    return launch_typed<decltype(t), decltype(c)>(a, batch, plan.row_groups, stream);
  });
}

}  // namespace pkv::cuda
