// Types shared by the kernel launchers and their callers. Host-safe: no device code, only the
// CUDA runtime API header, so src/backend/cuda/ can include it from plain C++.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pkv::cuda {

// Same values as PKV_DTYPE_* in pkv.h. The fp8 ones are KV dtypes only (KvLayer::kv_dtype).
enum class DType : int32_t { f32 = 0, f16 = 1, bf16 = 2, fp8_e4m3 = 3, fp8_e5m2 = 4 };

inline size_t dtype_bytes(DType t) { return t == DType::f32 ? 4 : t >= DType::fp8_e4m3 ? 1 : 2; }
inline bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

// One layer of the paged KV pool, in device memory. Block b of K starts block_stride bytes after
// block b - 1 and holds [block_size][kv_heads][head_dim] (NHD) of kv_dtype (V: v_dim for
// head_dim); the token in slot s = b * block_size + offset starts offset * kv_heads * head_dim
// elements into its block. A dense layer (block_stride 0) has its blocks back to back, so slot s
// starts at element s * kv_heads * head_dim; a paged pool whose pages hold several layers of a
// group (DESIGN.md §12) passes the page size, the same for K and V. The MLA latent cache
// (mla_attention.cuh) is K alone: v null, kv_heads 1, head_dim the latent's width. An attention
// layer whose V is its K (Gemma 4's attention_k_eq_v) also has v null: write_kv writes K alone
// and the attention kernels read V from K (v_dim is then head_dim).
struct KvLayer {
  void *k;
  void *v;
  int32_t block_size;  // tokens per block, any value >= 1
  int32_t kv_heads;
  int32_t head_dim;  // a multiple of 8, at most 512: pkv.h's PKV_ATTENTION_* limits (CUDA)
  DType dtype;       // the model's: q, out and the new k, v rows (f32, f16, bf16)
  DType kv_dtype;    // the pool's elements: dtype, or fp8 (a stored code means code * scale)
  // fp8 only (else null): device [kv_heads] each, the scale of every K (V) element of a head;
  // finite and > 0 (pkv_set_kv_scales checks them).
  const float *k_scale, *v_scale;
  int32_t window;  // keys a token attends to, itself included (p - window + 1 .. p); 0 = all
  // Since pkv 0.5.0; all 0 (null) is the layer of before, computed bit for bit as before.
  // block_stride: bytes from one block of K (and of V) to the next; 0 = dense (K's block_size *
  // kv_heads * head_dim * kv dtype bytes). Else at least that and a multiple of 16.
  int64_t block_stride = 0;
  // v_dim: V's values per head (and out's); 0 = head_dim, the only width the kernels take
  // (the launchers refuse others).
  int32_t v_dim = 0;
  // chunk: chunked local attention, a token at p sees keys p - p % chunk .. p (Llama 4); 0 =
  // none. Not with a window.
  int32_t chunk = 0;
  // softcap: c > 0 turns each scaled score s into c * tanh(s / c) (Gemma 2); 0 = none.
  float softcap = 0.f;
  // sinks: device [q_heads], head h's learned logit joins its softmax denominator once and adds
  // nothing to out (gpt-oss); null = none.
  const float *sinks = nullptr;
};

// The whole pool for block copies: K and V each
// [num_layers][num_blocks][block_size][kv_heads][head_dim]; v null for a pool of K alone (MLA).
struct KvPool {
  void *k;
  void *v;
  int32_t num_layers;
  int64_t layer_stride_bytes;  // num_blocks * block_bytes
  int64_t block_bytes;         // block_size * kv_heads * head_dim * dtype bytes
};

// One step's batch. Arrays are device memory; max_query_len and max_context_len are host values
// that size the grids (they must be at least the true maxima).
struct BatchView {
  int32_t num_seqs;
  int32_t num_tokens;
  int32_t max_query_len;
  int32_t max_context_len;
  const int32_t *query_start;   // [num_seqs + 1]: seq i's new tokens are rows query_start[i] ..
                                // query_start[i + 1] - 1 of q, k, v and out
  const int32_t *context_lens;  // [num_seqs]: tokens after this step; the new ones are the last
  const int32_t *block_indptr;  // [num_seqs + 1]
  const int32_t
      *block_indices;  // seq i's blocks: block_indices[block_indptr[i] .. block_indptr[i + 1] - 1]
};

}  // namespace pkv::cuda
