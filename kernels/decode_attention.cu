// Paged decode attention with split-K and a merge pass (see decode_attention.cuh).
#include <cmath>

#include "attention_tile.cuh"
#include "decode_attention.cuh"

namespace pkv::cuda {
namespace {

using dev::AttnArgs;
using dev::kAttnThreads;
using dev::RowBlock;

constexpr int kDecodeRows = 8;  // q heads of one kv head per CTA; larger groups take more CTAs
constexpr int kMinSplitTokens = 256;
constexpr int kSplitAlign = 64;

// Keys per tile: 64 up to head_dim 128, 32 up to 256, 16 for the wider bucket (W: its widest
// head_dim), whose 512-wide tile takes 48.7 KiB of shared memory (opted in at launch).
template <int D, int W>
constexpr int kDecodeKeys = W > PKV_ATTENTION_MAX_HEAD_DIM ? 16
                            : (D == 0 || D > 128)          ? 32
                                                           : 64;
template <int D, int W> using DecodeTile = dev::Tile<D, kDecodeRows, kDecodeKeys<D, W>, W>;

// The keys a decoding sequence of context_len tokens reads: its window's or chunk's first .. the
// last.
__device__ __forceinline__ int decode_first_key(const AttnArgs &a, int context_len) {
  return dev::first_key(a, context_len - 1);
}
__device__ __forceinline__ int decode_splits(const AttnArgs &a, int context_len) {
  return dev::ceil_div(context_len - decode_first_key(a, context_len), a.split_tokens);
}

// grid = (split, kv_head * group_chunks + chunk, seq). Split s reads keys first + s *
// split_tokens on (first: the window's start), so a context far past its window reads the
// window's blocks only. Writes the normalized output when the sequence has one split, else this
// split's (max, sum, acc) to the workspace.
template <class T, class C, int D, int W>
__global__ void __launch_bounds__(kAttnThreads, 1) decode_kernel(AttnArgs a) {
  using Tile = DecodeTile<D, W>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int seq = blockIdx.z, split = blockIdx.x;
  const int query_start = a.query_start[seq];
  if (a.query_start[seq + 1] - query_start != 1) return;
  const int context_len = a.context_lens[seq];
  const int key_begin = decode_first_key(a, context_len) + split * a.split_tokens;
  if (key_begin >= context_len) return;
  const int key_end = dev::imin(context_len, key_begin + a.split_tokens);
  const int chunks = dev::ceil_div(a.group, kDecodeRows);
  const int row0 = int(blockIdx.y) % chunks * kDecodeRows;
  const int kv_head = int(blockIdx.y) / chunks, num_rows = dev::imin(kDecodeRows, a.group - row0);
  const RowBlock rb{seq, kv_head, row0, num_rows, query_start, 1, context_len};
  const dev::TileSmem sm = dev::carve_smem<Tile::kRows, Tile::kKeys>(smem, D ? D : a.head_dim);
  float acc[Tile::kPairs];
  dev::attend_rows<T, C, D, Tile::kRows, Tile::kKeys>(a, rb, sm, key_begin, key_end, acc);
  if (decode_splits(a, context_len) == 1) {
    dev::store_rows<T, D, Tile::kRows>(a, rb, sm, acc);
    return;
  }
  const int d = D ? D : a.head_dim;
#pragma unroll
  for (int i = 0; i < Tile::kPairs; ++i) {
    const int f = threadIdx.x + i * kAttnThreads, r = f / d, c = f % d;
    if (f >= Tile::kRows * d || r >= rb.num_rows) break;
    const int q_head = rb.kv_head * a.group + row0 + r;
    const int64_t part = (int64_t(seq) * a.q_heads + q_head) * a.max_splits + split;
    a.ws_acc[part * d + c] = acc[i];
    if (c == 0) {
      a.ws_ml[2 * part] = sm.m[r];
      a.ws_ml[2 * part + 1] = sm.l[r];
    }
  }
}

// grid = (q_head, seq): out = sum_s 2^(m_s - m) acc_s / sum_s 2^(m_s - m) l_s. A sink joins
// here, once: as one more split's max with sum 1 and no acc (without sinks m starts at -inf and l
// at 0, the arithmetic of before).
template <class T> __global__ void __launch_bounds__(kAttnThreads) decode_merge_kernel(AttnArgs a) {
  const int seq = blockIdx.y, q_head = blockIdx.x;
  const int query_start = a.query_start[seq];
  if (a.query_start[seq + 1] - query_start != 1) return;
  const int num_splits = decode_splits(a, a.context_lens[seq]);
  if (num_splits <= 1) return;
  const int64_t part0 = (int64_t(seq) * a.q_heads + q_head) * a.max_splits;
  const float *ml = a.ws_ml + 2 * part0;
  const float sink = a.sinks ? a.sinks[q_head] * 1.4426950408889634f : -INFINITY;  // base 2
  float m = sink, l = 0.f;
  for (int s = 0; s < num_splits; ++s) m = fmaxf(m, ml[2 * s]);
  if (a.sinks) l = exp2f(sink - m);
  for (int s = 0; s < num_splits; ++s) l += exp2f(ml[2 * s] - m) * ml[2 * s + 1];
  T *out = static_cast<T *>(a.out) + (int64_t(query_start) * a.q_heads + q_head) * a.head_dim;
  for (int c = threadIdx.x; c < a.head_dim; c += kAttnThreads) {
    float x = 0.f;
    for (int s = 0; s < num_splits; ++s)
      x += exp2f(ml[2 * s] - m) * a.ws_acc[(part0 + s) * a.head_dim + c];
    out[c] = dev::from_float<T>(x / l);
  }
}

template <class T, class C, int D, int W>
cudaError_t launch_typed(const AttnArgs &a, const BatchView &b, cudaStream_t stream) {
  const size_t smem = DecodeTile<D, W>::smem_bytes(a.head_dim);
  const int chunks = dev::ceil_div(a.group, kDecodeRows);
  const dim3 grid(uint32_t(a.max_splits), uint32_t(a.kv_heads * chunks), uint32_t(b.num_seqs));
  if (const cudaError_t e =
          allow_smem(reinterpret_cast<const void *>(&decode_kernel<T, C, D, W>), smem))
    return e;
  decode_kernel<T, C, D, W><<<grid, kAttnThreads, smem, stream>>>(a);
  if (a.max_splits > 1) {
    const dim3 merge_grid(uint32_t(a.q_heads), uint32_t(b.num_seqs));
    decode_merge_kernel<T><<<merge_grid, kAttnThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

namespace {

// The most keys one decoding sequence of the batch reads under `window` (a window or a chunk; 0 =
// all), at least 1.
int32_t max_keys(const BatchView &batch, int32_t window) {
  const int32_t keys =
      window > 0 ? dev::imin(batch.max_context_len, window) : batch.max_context_len;
  return keys > 0 ? keys : 1;
}

// Splits per sequence that keep about two CTAs per SM busy.
int64_t wanted_splits(const BatchView &batch, int32_t q_heads, int32_t kv_heads, int32_t num_sms) {
  const int64_t group = kv_heads > 0 ? q_heads / kv_heads : 1;
  const int64_t ctas =
      int64_t(batch.num_seqs) * kv_heads * dev::ceil_div(int32_t(group), kDecodeRows);
  return ctas > 0 ? (2 * int64_t(num_sms) + ctas - 1) / ctas : 1;
}

size_t workspace_for(const BatchView &batch, int32_t q_heads, int32_t head_dim,
                     int64_t max_splits) {
  return max_splits > 1 ? sizeof(float) * size_t(batch.num_seqs) * q_heads * size_t(max_splits) *
                              (size_t(head_dim) + 2)
                        : 0;
}

}  // namespace

DecodePlan plan_decode_with_split(const BatchView &batch, int32_t q_heads, int32_t head_dim,
                                  int32_t window, int32_t split_tokens) {
  DecodePlan p{};
  p.split_tokens = dev::ceil_div(split_tokens > 0 ? split_tokens : 1, kSplitAlign) * kSplitAlign;
  p.max_splits = dev::ceil_div(max_keys(batch, window), p.split_tokens);
  p.workspace_bytes = workspace_for(batch, q_heads, head_dim, p.max_splits);
  p.q_heads = q_heads, p.head_dim = head_dim;
  return p;
}

// split >= keys / wanted and >= kMinSplitTokens, so max_splits <= wanted and <=
// ceil(keys / kMinSplitTokens): decode_workspace_bound holds for every window.
DecodePlan plan_decode(const BatchView &batch, int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                       int32_t window, int32_t num_sms) {
  const int64_t want_splits = wanted_splits(batch, q_heads, kv_heads, num_sms);
  int64_t split = (int64_t(max_keys(batch, window)) + want_splits - 1) / want_splits;
  if (split < kMinSplitTokens) split = kMinSplitTokens;
  return plan_decode_with_split(batch, q_heads, head_dim, window, int32_t(split));
}

size_t decode_workspace_bound(const BatchView &batch, int32_t q_heads, int32_t kv_heads,
                              int32_t head_dim, int32_t num_sms) {
  const int64_t by_keys = dev::ceil_div(max_keys(batch, 0), kMinSplitTokens);
  const int64_t want = wanted_splits(batch, q_heads, kv_heads, num_sms);
  return workspace_for(batch, q_heads, head_dim, want < by_keys ? want : by_keys);
}

cudaError_t launch_decode_attention(const KvLayer &layer, const BatchView &batch, const void *q,
                                    void *out, int32_t q_heads, float scale, const DecodePlan &plan,
                                    void *workspace, cudaStream_t stream) {
  if (batch.num_seqs == 0) return cudaSuccess;
  if (plan.split_tokens < 1 || plan.max_splits < 1 || layer.window < 0 || layer.chunk < 0 ||
      int64_t(plan.max_splits) * plan.split_tokens < max_keys(batch, dev::attn_span(layer)) ||
      (plan.max_splits > 1 && !workspace) || plan.q_heads != q_heads ||
      plan.head_dim != layer.head_dim)
    return cudaErrorInvalidValue;
  AttnArgs a;
  if (const cudaError_t e = dev::make_attn_args(layer, batch, q, out, q_heads, scale, &a)) return e;
  a.split_tokens = plan.split_tokens, a.max_splits = plan.max_splits;
  const size_t parts = size_t(batch.num_seqs) * q_heads * plan.max_splits;
  a.ws_acc = static_cast<float *>(workspace);
  a.ws_ml = a.ws_acc ? a.ws_acc + parts * layer.head_dim : nullptr;
  return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
    return dispatch_head_dim(layer.head_dim, [&](auto d) {
      using Dim = decltype(d);
      return launch_typed<decltype(t), decltype(c), Dim::value, Dim::kWidth>(a, batch, stream);
    });
  });
}

}  // namespace pkv::cuda
