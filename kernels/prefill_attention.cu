// Paged prefill attention with a causal mask (see prefill_attention.cuh).
#include <cmath>

#include "attention_tile.cuh"
#include "prefill_attention.cuh"

namespace pkv::cuda {
namespace {

using dev::AttnArgs;
using dev::kAttnThreads;
using dev::RowBlock;

// Rows x keys per tile: 32 x 32 up to head_dim 128, 16 x 16 above (and for the generic path),
// which keeps shared memory under the 48 KiB default and the accumulators at 32 per thread.
template <int D>
using PrefillTile =
    std::conditional_t<(D == 0 || D > 128), dev::Tile<D, 16, 16>, dev::Tile<D, 32, 32>>;

// grid = (row tile, kv head, seq). Rows of a sequence are its query_len * group (token, q head)
// pairs; a tile needs the keys up to its last row's position.
template <class T, int D>
__global__ void __launch_bounds__(kAttnThreads, 1) prefill_kernel(AttnArgs a) {
  using Tile = PrefillTile<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int seq = blockIdx.z;
  const int query_start = a.query_start[seq];
  const int query_len = a.query_start[seq + 1] - query_start;
  const int row0 = int(blockIdx.x) * Tile::kRows;
  if (query_len < 2 || row0 >= query_len * a.group) return;
  const int context_len = a.context_lens[seq];
  const int num_rows = dev::imin(Tile::kRows, query_len * a.group - row0);
  const RowBlock rb{seq, int(blockIdx.y), row0, num_rows, query_start, query_len, context_len};
  const int last_token = (row0 + rb.num_rows - 1) / a.group;
  const int key_end = context_len - query_len + last_token + 1;
  const dev::TileSmem sm = dev::carve_smem<Tile::kRows, Tile::kKeys>(smem, D ? D : a.head_dim);
  float acc[Tile::kPairs];
  dev::attend_rows<T, D, Tile::kRows, Tile::kKeys>(a, rb, sm, 0, key_end, acc);
  dev::store_rows<T, D, Tile::kRows>(a, rb, sm, acc);
}

template <class T, int D>
cudaError_t launch_typed(const AttnArgs &a, const BatchView &b, cudaStream_t stream) {
  using Tile = PrefillTile<D>;
  const int64_t rows = int64_t(b.max_query_len) * a.group;
  const dim3 grid(uint32_t((rows + Tile::kRows - 1) / Tile::kRows), uint32_t(a.kv_heads),
                  uint32_t(b.num_seqs));
  prefill_kernel<T, D><<<grid, kAttnThreads, Tile::smem_bytes(a.head_dim), stream>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_prefill_attention(const KvLayer &layer, const BatchView &batch, const void *q,
                                     void *out, int32_t q_heads, float scale, cudaStream_t stream) {
  if (batch.num_seqs == 0 || batch.max_query_len < 2) return cudaSuccess;
  if (batch.num_seqs < 0 || batch.num_seqs > 65535 || layer.kv_heads < 1 ||
      layer.kv_heads > 65535 || q_heads < 1 || q_heads % layer.kv_heads != 0 ||
      layer.block_size < 1 || !aligned16(q) || !aligned16(out) || !aligned16(layer.k) ||
      !aligned16(layer.v))
    return cudaErrorInvalidValue;
  AttnArgs a{};
  a.q = q, a.out = out, a.k_cache = layer.k, a.v_cache = layer.v;
  a.query_start = batch.query_start, a.context_lens = batch.context_lens;
  a.block_indptr = batch.block_indptr, a.block_indices = batch.block_indices;
  a.q_heads = q_heads, a.kv_heads = layer.kv_heads, a.head_dim = layer.head_dim;
  a.block_size = layer.block_size, a.group = q_heads / layer.kv_heads;
  a.scale_log2 =
      (scale > 0.f ? scale : 1.f / std::sqrt(float(layer.head_dim))) * 1.4426950408889634f;
  return dispatch_dtype(layer.dtype, [&](auto t) {
    return dispatch_head_dim(layer.head_dim, [&](auto d) {
      return launch_typed<decltype(t), decltype(d)::value>(a, batch, stream);
    });
  });
}

}  // namespace pkv::cuda
