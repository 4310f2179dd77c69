// What the MLA kernels share (mla_mma.cuh, mla_fma.cuh, mla_attention.cu): their arguments, which
// rows and keys a CTA computes, and where a row's result goes (the output, or a decode split's
// partial for the merge). Included by .cu files only.
#pragma once

#include "device_common.cuh"

namespace pkv::cuda::dev {

constexpr int kMlaThreads = 256;  // 8 warps
constexpr int kMlaMaxWidth = PKV_ATTENTION_MAX_KV_LORA_RANK + PKV_ATTENTION_MAX_ROPE_DIM;

// What the MLA kernels read, by value. Pointers are device memory.
struct MlaArgs {
  const void *q;         // [num_tokens][q_heads][width], the model's dtype
  void *out;             // [num_tokens][q_heads][rank]
  const void *cache;     // block b at b * block_elems: [block_size][width], the kv dtype
  const float *k_scale;  // fp8: [1], the latents' scale; else null
  const int32_t *query_start, *context_lens, *block_indptr, *block_indices;
  int32_t q_heads, width, rank, block_size;
  int64_t block_elems;  // elements from one block to the next: block_size * width, or a page's
  float scale_log2;     // scale * log2(e): the softmax is in base 2
  float *ws_acc;        // decode splits: [num_seqs][q_heads][max_splits][rank]
  float *ws_ml;         // decode splits: [num_seqs][q_heads][max_splits][2] = (max, sum)
  int32_t split_tokens, max_splits;
  // The launch's rows: 1 the decodes' (grid = split, row tile of the q heads, seq), 0 the
  // prefills' (grid = row tile of the packed rows, 1, seq).
  int32_t decode;
};

// pkv.h's limits on an MLA latent: both parts multiples of the alignment, at most the maxima.
inline bool latent_ok(int32_t width, int32_t rank) {
  const int32_t rope = width - rank, align = PKV_ATTENTION_HEAD_DIM_ALIGN;
  return rank >= align && rank <= PKV_ATTENTION_MAX_KV_LORA_RANK && rank % align == 0 &&
         rope >= 0 && rope <= PKV_ATTENTION_MAX_ROPE_DIM && rope % align == 0;
}

// A paged layer (block_stride > 0, DESIGN.md §12): at least the dense block and a multiple of
// 16 bytes, so every latent row stays as aligned as load8's chunks of 8 need.
inline bool latent_stride_ok(const KvLayer &layer) {
  if (layer.block_stride == 0) return true;
  const int64_t dense =
      int64_t(layer.block_size) * layer.head_dim * int64_t(dtype_bytes(layer.kv_dtype));
  return layer.block_stride >= dense && layer.block_stride % 16 == 0;
}

// The elements from one block's latents to the next's.
inline int64_t latent_block_elems(const KvLayer &layer) {
  return layer.block_stride ? layer.block_stride / int64_t(dtype_bytes(layer.kv_dtype))
                            : int64_t(layer.block_size) * layer.head_dim;
}

// A CTA's rows: packed rows row0 .. row0 + num_rows - 1 of its sequence's query_len * q_heads,
// p = token * q_heads + head (q and out rows query_start * q_heads + p), and its keys.
struct MlaRows {
  int32_t seq, row0, num_rows, query_start, query_len, context_len;
  int32_t key_begin, key_end;
  int32_t split;  // the decode split whose partial this CTA leaves; -1: the final output
};

__device__ __forceinline__ int mla_splits(const MlaArgs &a, int context_len) {
  return ceil_div(context_len, a.split_tokens);
}

// The CTA's rows and keys; false when it has none (a sequence of the other kind, a split past
// the context, a row tile past the rows). A prefill tile reads the keys up to its last row's.
template <int kRows> __device__ __forceinline__ bool mla_rows(const MlaArgs &a, MlaRows &rb) {
  const int seq = blockIdx.z;
  const int query_start = a.query_start[seq];
  const int query_len = a.query_start[seq + 1] - query_start;
  const int context_len = a.context_lens[seq];
  if (a.decode) {
    const int key_begin = int(blockIdx.x) * a.split_tokens, row0 = int(blockIdx.y) * kRows;
    if (query_len != 1 || key_begin >= context_len) return false;
    const int split = mla_splits(a, context_len) > 1 ? int(blockIdx.x) : -1;
    rb = MlaRows{seq,
                 row0,
                 imin(kRows, a.q_heads - row0),
                 query_start,
                 1,
                 context_len,
                 key_begin,
                 imin(context_len, key_begin + a.split_tokens),
                 split};
    return true;
  }
  const int row0 = int(blockIdx.x) * kRows;
  if (query_len < 2 || row0 >= query_len * a.q_heads) return false;
  const int num_rows = imin(kRows, query_len * a.q_heads - row0);
  const int key_end = context_len - query_len + (row0 + num_rows - 1) / a.q_heads + 1;
  rb = MlaRows{seq, row0, num_rows, query_start, query_len, context_len, 0, key_end, -1};
  return true;
}

// The last key row r sees (causal), -1 for a padding row.
__device__ __forceinline__ int mla_last_key(const MlaArgs &a, const MlaRows &rb, int r) {
  return r < rb.num_rows ? rb.context_len - rb.query_len + (rb.row0 + r) / a.q_heads : -1;
}

// Key `key`'s latent in the cache, in elements (blocks: the sequence's table).
__device__ __forceinline__ int64_t mla_latent_at(const MlaArgs &a, const int32_t *blocks, int key) {
  return int64_t(blocks[key / a.block_size]) * a.block_elems +
         int64_t(key % a.block_size) * a.width;
}

// Row r's vector in q ([tokens][q_heads][width]): packed rows are consecutive q rows.
__device__ __forceinline__ int64_t mla_q_offset(const MlaArgs &a, const MlaRows &rb, int r) {
  return (int64_t(rb.query_start) * a.q_heads + rb.row0 + r) * a.width;
}

// Row r's partial of the decode split (index into ws_ml / 2 and ws_acc / rank).
__device__ __forceinline__ int64_t mla_part(const MlaArgs &a, const MlaRows &rb, int r) {
  return (int64_t(rb.seq) * a.q_heads + rb.row0 + r) * a.max_splits + rb.split;
}

// Dims c and c + 1 of row r (< num_rows) from unnormalized accumulators, times f: into out (f =
// the fp8 scale / the row's sum) or, for a split, into its partial (f = the fp8 scale).
template <class T>
__device__ __forceinline__ void mla_put2(const MlaArgs &a, const MlaRows &rb, int r, int c,
                                         float x0, float x1, float f) {
  if (rb.split < 0) {
    T *o =
        static_cast<T *>(a.out) + (int64_t(rb.query_start) * a.q_heads + rb.row0 + r) * a.rank + c;
    o[0] = from_float<T>(x0 * f);
    o[1] = from_float<T>(x1 * f);
  } else {
    float *w = a.ws_acc + mla_part(a, rb, r) * a.rank + c;
    w[0] = x0 * f;
    w[1] = x1 * f;
  }
}

// A split's row max and sum (base 2) for the merge; nothing for a final output.
__device__ __forceinline__ void mla_put_ml(const MlaArgs &a, const MlaRows &rb, int r, float m,
                                           float l) {
  if (rb.split < 0) return;
  float *ml = a.ws_ml + 2 * mla_part(a, rb, r);
  ml[0] = m;
  ml[1] = l;
}

}  // namespace pkv::cuda::dev
