// Paged prefill attention with a causal mask (see prefill_attention.cuh): on tensor cores for
// f16 / bf16 models with a specialized head_dim (attention_mma.cuh; all of them are multiples of
// 16; 512 in two passes of 256 output columns), else the fp32 tile loop of attention_tile.cuh
// (f32 models, and the generic head_dims: 8 .. 504 in steps of 8, some not a multiple of 16).
#include "attention_mma.cuh"
#include "prefill_attention.cuh"

namespace pkv::cuda {
namespace {

using dev::AttnArgs;
using dev::kAttnThreads;
using dev::RowBlock;

// Rows x keys per tile: 32 x 32 up to head_dim 128, 16 x 16 above (and for the generic path),
// which keeps shared memory under the 48 KiB default and the accumulators at 32 per thread. The
// wider bucket (W: its widest head_dim, up to 512) keeps 16 x 16: 64 accumulators a thread and
// 65.4 KiB of shared memory at 512 (opted in at launch).
template <int D, int W>
using PrefillTile =
    std::conditional_t<(D == 0 || D > 128), dev::Tile<D, 16, 16, W>, dev::Tile<D, 32, 32, W>>;

// grid = (row tile, kv head, seq). Rows of a sequence are its query_len * group (token, q head)
// pairs; a tile needs the keys from its first row's window start to its last row's position.
// The CTA's rows (tiles of kRows) and keys [key_begin, key_end); false when it has none (a
// decode's sequence, or past the sequence's last tile).
template <int kRows>
__device__ bool prefill_rows(const AttnArgs &a, RowBlock &rb, int &key_begin, int &key_end) {
  const int seq = blockIdx.z;
  const int query_start = a.query_start[seq];
  const int query_len = a.query_start[seq + 1] - query_start;
  const int row0 = int(blockIdx.x) * kRows;
  if (query_len < 2 || row0 >= query_len * a.group) return false;
  const int context_len = a.context_lens[seq];
  const int num_rows = dev::imin(kRows, query_len * a.group - row0);
  rb = RowBlock{seq, int(blockIdx.y), row0, num_rows, query_start, query_len, context_len};
  key_begin = dev::first_key(a, context_len - query_len + row0 / a.group);
  key_end = context_len - query_len + (row0 + num_rows - 1) / a.group + 1;
  return true;
}

template <class T, class C, int D, int W>
__global__ void __launch_bounds__(kAttnThreads, 1) prefill_kernel(AttnArgs a) {
  using Tile = PrefillTile<D, W>;
  extern __shared__ __align__(16) unsigned char smem[];
  RowBlock rb;
  int key_begin, key_end;
  if (!prefill_rows<Tile::kRows>(a, rb, key_begin, key_end)) return;
  const dev::TileSmem sm = dev::carve_smem<Tile::kRows, Tile::kKeys>(smem, D ? D : a.head_dim);
  float acc[Tile::kPairs];
  dev::attend_rows<T, C, D, Tile::kRows, Tile::kKeys>(a, rb, sm, key_begin, key_end, acc);
  dev::store_rows<T, D, Tile::kRows>(a, rb, sm, acc);
}

// Tensor cores: keys per tile 64, 32 for head_dim 256 (registers: O is D / 2 floats a lane).
// head_dim 512 computes O in two passes of 256 columns (attend_rows_mma) with 16 keys a tile:
// 89.5 KiB of shared memory, two CTAs an SM on sm_90.
template <int D>
using PrefillMmaTile = std::conditional_t<(D > PKV_ATTENTION_MAX_HEAD_DIM),
                                          dev::MmaTile<D, 16, PKV_ATTENTION_MAX_HEAD_DIM>,
                                          dev::MmaTile<D, (D > 128 ? 32 : 64)>>;

// The same grid and rows as prefill_kernel, 64 rows a CTA.
template <class T, class C, int D>
__global__ void __launch_bounds__(kAttnThreads, 1) prefill_mma_kernel(AttnArgs a) {
  using Tile = PrefillMmaTile<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  RowBlock rb;
  int key_begin, key_end;
  if (!prefill_rows<Tile::kRows>(a, rb, key_begin, key_end)) return;
  if constexpr (Tile::kOutCols < D)
    dev::attend_rows_mma_split<T, C, D, Tile::kKeys, Tile::kOutCols>(a, rb, smem, key_begin,
                                                                     key_end);
  else
    dev::attend_rows_mma<T, C, D, Tile::kKeys>(a, rb, smem, key_begin, key_end);
}

template <class T, class C, int D>
cudaError_t launch_mma(const AttnArgs &a, const BatchView &b, cudaStream_t stream) {
  using Tile = PrefillMmaTile<D>;
  const int64_t rows = int64_t(b.max_query_len) * a.group;
  const dim3 grid(uint32_t((rows + Tile::kRows - 1) / Tile::kRows), uint32_t(a.kv_heads),
                  uint32_t(b.num_seqs));
  const void *kernel = reinterpret_cast<const void *>(&prefill_mma_kernel<T, C, D>);
  if (Tile::kSmemBytes > 48 * 1024)  // past the default: opt in (sm_80 and sm_90 have more)
    if (const cudaError_t e = cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Tile::kSmemBytes)))
      return e;
  prefill_mma_kernel<T, C, D><<<grid, kAttnThreads, Tile::kSmemBytes, stream>>>(a);
  return cudaGetLastError();
}

template <class T, class C, int D, int W>
cudaError_t launch_tile(const AttnArgs &a, const BatchView &b, cudaStream_t stream) {
  using Tile = PrefillTile<D, W>;
  const int64_t rows = int64_t(b.max_query_len) * a.group;
  const dim3 grid(uint32_t((rows + Tile::kRows - 1) / Tile::kRows), uint32_t(a.kv_heads),
                  uint32_t(b.num_seqs));
  const size_t smem = Tile::smem_bytes(a.head_dim);
  if (const cudaError_t e =
          allow_smem(reinterpret_cast<const void *>(&prefill_kernel<T, C, D, W>), smem))
    return e;
  prefill_kernel<T, C, D, W><<<grid, kAttnThreads, smem, stream>>>(a);
  return cudaGetLastError();
}

// Tensor cores where they apply; only the other combinations instantiate the fp32 kernel.
template <class T, class C, int D, int W>
cudaError_t launch_typed(const AttnArgs &a, const BatchView &b, cudaStream_t stream) {
  if constexpr (dev::kMmaType<T> && D != 0)
    return launch_mma<T, C, D>(a, b, stream);
  else
    return launch_tile<T, C, D, W>(a, b, stream);
}

}  // namespace

cudaError_t launch_prefill_attention(const KvLayer &layer, const BatchView &batch, const void *q,
                                     void *out, int32_t q_heads, float scale, cudaStream_t stream) {
  if (batch.num_seqs == 0 || batch.max_query_len < 2) return cudaSuccess;
  AttnArgs a;
  if (const cudaError_t e = dev::make_attn_args(layer, batch, q, out, q_heads, scale, &a)) return e;
  return dispatch_kv_dtype(layer.dtype, layer.kv_dtype, [&](auto t, auto c) {
    return dispatch_head_dim(layer.head_dim, [&](auto d) {
      using Dim = decltype(d);
      return launch_typed<decltype(t), decltype(c), Dim::value, Dim::kWidth>(a, batch, stream);
    });
  });
}

}  // namespace pkv::cuda
