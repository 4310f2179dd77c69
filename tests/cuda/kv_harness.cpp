// Shared test harness: see kv_harness.h.
#include "kv_harness.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "pkv/pkv.h"

namespace kvtest {

const char *dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::fp8_e5m2:
      return "fp8_e5m2";
  }
  return "?";
}

// Host buffers are bytes (std::vector<unsigned char>): elements are copied out and in, never read
// through a pointer of another type.
template <class E> E load_as(const void *p, size_t i) {
  E e;
  std::memcpy(&e, static_cast<const unsigned char *>(p) + i * sizeof(E), sizeof(E));
  return e;
}
template <class E> void store_as(void *p, size_t i, E e) {
  std::memcpy(static_cast<unsigned char *>(p) + i * sizeof(E), &e, sizeof(E));
}

double load_elem(DType t, const void *p, size_t i) {
  switch (t) {
    case DType::f32:
      return load_as<float>(p, i);
    case DType::f16:
      return __half2float(load_as<__half>(p, i));
    default:
      return __bfloat162float(load_as<__nv_bfloat16>(p, i));
  }
}

void store_elem(DType t, void *p, size_t i, double x) {
  switch (t) {
    case DType::f32:
      return store_as(p, i, float(x));
    case DType::f16:
      return store_as(p, i, __float2half_rn(float(x)));
    default:
      return store_as(p, i, __float2bfloat16_rn(float(x)));
  }
}

void tolerances(DType t, double *atol, double *rtol) {
  if (t == DType::f32)
    *atol = 2e-5, *rtol = 2e-4;
  else if (t == DType::f16)
    *atol = 1e-3, *rtol = 2e-3;
  else
    *atol = 8e-3, *rtol = 8e-3;
}

void check_cuda(cudaError_t e, const char *what) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e));
  exit(1);
}

DevBuf::DevBuf(size_t bytes) { check_cuda(cudaMalloc(&p_, bytes ? bytes : 1), "cudaMalloc"); }
DevBuf::~DevBuf() { cudaFree(p_); }
void DevBuf::upload(const void *src, size_t bytes) {
  check_cuda(cudaMemcpy(p_, src, bytes, cudaMemcpyHostToDevice), "upload");
}
void DevBuf::download(void *dst, size_t bytes) const {
  check_cuda(cudaMemcpy(dst, p_, bytes, cudaMemcpyDeviceToHost), "download");
}

PinnedBuf::PinnedBuf(size_t bytes) {
  check_cuda(cudaHostAlloc(&host_, bytes ? bytes : 1, cudaHostAllocMapped), "cudaHostAlloc");
  check_cuda(cudaHostGetDevicePointer(&device_, host_, 0), "cudaHostGetDevicePointer");
}
PinnedBuf::~PinnedBuf() { cudaFreeHost(host_); }

int require_device() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  return 0;
}

namespace {

// What a refused launch may differ in besides head_dim, q_heads, q's alignment and scale: the
// pool's dtype (an f32 model's), its fp8 scales, the window; since 0.5.0 the chunk, soft-cap,
// V's width, block stride (bytes; -1: the dense bytes minus 16) and a decode plan made for
// another head_dim (plan_head_dim, 0: the launch's).
struct PoolArgs {
  DType kv_dtype = DType::f32;
  bool scales = false;
  int32_t window = 0, chunk = 0;
  float softcap = 0.f;
  int32_t v_dim = 0;
  int64_t block_stride = 0;
  int32_t plan_head_dim = 0;
};

// One decode-only sequence of 8 tokens in one block; nothing is launched when the arguments are
// refused, and the accepted launches read what they are given (the data is not checked here).
cudaError_t try_launch(bool decode, int32_t head_dim, int32_t q_heads, size_t q_offset, float scale,
                       const PoolArgs &pa) {
  const int32_t kv_heads = 2, block_size = 16, tokens = decode ? 1 : 8;
  const int32_t query_start[2] = {0, tokens}, context_len[1] = {8}, indptr[2] = {0, 1};
  const int32_t indices[1] = {0};
  DevBuf qs(sizeof query_start), cl(sizeof context_len), ip(sizeof indptr), bi(sizeof indices);
  qs.upload(query_start, sizeof query_start), cl.upload(context_len, sizeof context_len);
  ip.upload(indptr, sizeof indptr), bi.upload(indices, sizeof indices);
  const size_t row = size_t(head_dim > 0 ? head_dim : 1) * 4;
  DevBuf kp(size_t(block_size) * kv_heads * row), vp(size_t(block_size) * kv_heads * row);
  DevBuf q(tokens * size_t(q_heads) * row + 16), out(tokens * size_t(q_heads) * row);
  check_cuda(cudaMemset(kp.as<void>(), 0, size_t(block_size) * kv_heads * row), "memset");
  check_cuda(cudaMemset(vp.as<void>(), 0, size_t(block_size) * kv_heads * row), "memset");
  check_cuda(cudaMemset(q.as<void>(), 0, tokens * size_t(q_heads) * row + 16), "memset");
  DevBuf scales(sizeof(float) * kv_heads);
  const float ones[2] = {1.f, 1.f};
  scales.upload(ones, sizeof ones);
  const float *sp = pa.scales ? scales.as<float>() : nullptr;
  pkv::cuda::KvLayer layer{kp.as<void>(), vp.as<void>(), block_size, kv_heads, head_dim,
                           DType::f32,    pa.kv_dtype,   sp,         sp,       pa.window};
  layer.chunk = pa.chunk, layer.softcap = pa.softcap, layer.v_dim = pa.v_dim;
  layer.block_stride =
      pa.block_stride >= 0 ? pa.block_stride : int64_t(block_size) * kv_heads * int64_t(row) - 16;
  const pkv::cuda::BatchView batch{
      1, tokens, tokens, 8, qs.as<int32_t>(), cl.as<int32_t>(), ip.as<int32_t>(), bi.as<int32_t>()};
  const void *qp = q.as<char>() + q_offset;
  cudaError_t e;
  if (decode) {
    const pkv::cuda::DecodePlan plan = pkv::cuda::plan_decode_with_split(
        batch, q_heads, pa.plan_head_dim ? pa.plan_head_dim : head_dim,
        pa.chunk ? pa.chunk : pa.window, 64);
    e = pkv::cuda::launch_decode_attention(layer, batch, qp, out.as<void>(), q_heads, scale, plan,
                                           nullptr, nullptr);
  } else {
    e = pkv::cuda::launch_prefill_attention(layer, batch, qp, out.as<void>(), q_heads, scale,
                                            nullptr);
  }
  check_cuda(cudaDeviceSynchronize(), "sync");
  return e;
}

// What a refused MLA launch may differ in (kv_harness.h): one decode of 8 keys in one block.
struct MlaTry {
  const char *what;
  int32_t rank, rope;
  bool ok;
  size_t q_offset = 0;
  float scale = 0.125f;
  DType dtype = DType::bf16, kv_dtype = DType::bf16;
  bool scales = false, v_pool = false;
  int32_t kv_heads = 1, window = 0, split_tokens = 32, row_groups = 2;
};

cudaError_t try_mla_launch(const MlaTry &t) {
  const int32_t block_size = 16, q_heads = 4, width = t.rank + t.rope;
  const int32_t query_start[2] = {0, 1}, context_len[1] = {8}, indptr[2] = {0, 1}, indices[1] = {0};
  DevBuf qs(sizeof query_start), cl(sizeof context_len), ip(sizeof indptr), bi(sizeof indices);
  qs.upload(query_start, sizeof query_start), cl.upload(context_len, sizeof context_len);
  ip.upload(indptr, sizeof indptr), bi.upload(indices, sizeof indices);
  const size_t row = size_t(width > 8 ? width : 8) * 4,
               out_row = size_t(t.rank > 8 ? t.rank : 8) * 4;
  DevBuf pool(block_size * row * t.kv_heads), v(block_size * row), q(q_heads * row + 16);
  DevBuf out(q_heads * out_row);
  check_cuda(cudaMemset(pool.as<void>(), 0, block_size * row * t.kv_heads), "memset");
  check_cuda(cudaMemset(q.as<void>(), 0, q_heads * row + 16), "memset");
  DevBuf scale(sizeof(float));
  const float one = 1.f;
  scale.upload(&one, sizeof one);
  const pkv::cuda::KvLayer layer{pool.as<void>(), t.v_pool ? v.as<void>() : nullptr,
                                 block_size,      t.kv_heads,
                                 width,           t.dtype,
                                 t.kv_dtype,      t.scales ? scale.as<float>() : nullptr,
                                 nullptr,         t.window};
  const pkv::cuda::BatchView batch{
      1, 1, 1, 8, qs.as<int32_t>(), cl.as<int32_t>(), ip.as<int32_t>(), bi.as<int32_t>()};
  const pkv::cuda::MlaPlan plan{t.split_tokens, 1, t.row_groups, 0};
  const cudaError_t e =
      pkv::cuda::launch_mla_attention(layer, t.rank, batch, q.as<char>() + t.q_offset,
                                      out.as<void>(), q_heads, t.scale, plan, nullptr, nullptr);
  check_cuda(cudaDeviceSynchronize(), "sync");
  return e;
}

}  // namespace

bool check_refused_mla_launches() {
  const int32_t align = PKV_ATTENTION_HEAD_DIM_ALIGN, max_rank = PKV_ATTENTION_MAX_KV_LORA_RANK;
  const int32_t max_rope = PKV_ATTENTION_MAX_ROPE_DIM;
  MlaTry cases[] = {
      {"rank and rope at their maxima", max_rank, max_rope, true},
      {"rank at the alignment, no rope", align, 0, true},
      {"rank over the maximum", max_rank + align, 64, false},
      {"rope over the maximum", 64, max_rope + align, false},
      {"rank not a multiple of the alignment", align + 4, 64, false},
      {"rope not a multiple of the alignment", 64, align + 4, false},
      {"rank 0", 0, 64, false},
      {"q not 16-byte aligned", 64, 16, false, 4},
      {"scale 0", 64, 16, false, 0, 0.f},
      {"scale NaN", 64, 16, false, 0, std::nanf("")},
      {"an fp8 cache with its scale", 64, 16, true, 0, 0.125f, DType::f16, DType::fp8_e4m3, true},
      {"an fp8 cache without its scale", 64, 16, false, 0, 0.125f, DType::f16, DType::fp8_e5m2},
      {"an f32 model", 64, 16, true, 0, 0.125f, DType::f32, DType::f32},
      {"a cache of another 16/32-bit dtype", 64, 16, false, 0, 0.125f, DType::f32, DType::bf16},
      {"a V pool", 64, 16, false},
      {"two kv heads", 64, 16, false},
      {"a window", 64, 16, false},
      {"a plan whose splits do not cover the context", 64, 16, false},
      {"a plan of 3 row groups", 64, 16, false},
      {"a plan of 4 row groups", 64, 16, true},
  };
  cases[14].v_pool = true, cases[15].kv_heads = 2, cases[16].window = 4;
  cases[17].split_tokens = 4, cases[18].row_groups = 3, cases[19].row_groups = 4;
  bool all = true;
  for (const MlaTry &c : cases) {
    const cudaError_t e = try_mla_launch(c);
    const bool ok = c.ok ? e == cudaSuccess : e == cudaErrorInvalidValue;
    if (!ok) fprintf(stderr, "FAIL MLA launch, %s: got %s\n", c.what, cudaGetErrorString(e));
    all = all && ok;
  }
  return all;
}

bool check_refused_launches() {
  struct Case {
    const char *what;
    int32_t head_dim, q_heads;
    size_t q_offset;
    bool ok;
    float scale = 0.125f;
    PoolArgs pool = {};
  };
  const PoolArgs e4m3{DType::fp8_e4m3, true}, e5m2{DType::fp8_e5m2, true};
  const Case cases[] = {
      {"head_dim = PKV_ATTENTION_MAX_HEAD_DIM", PKV_ATTENTION_MAX_HEAD_DIM, 4, 0, true},
      {"head_dim = PKV_ATTENTION_MAX_HEAD_DIM_CUDA", PKV_ATTENTION_MAX_HEAD_DIM_CUDA, 4, 0, true},
      {"head_dim just past PKV_ATTENTION_MAX_HEAD_DIM (the wide generic bucket)",
       PKV_ATTENTION_MAX_HEAD_DIM + PKV_ATTENTION_HEAD_DIM_ALIGN, 4, 0, true},
      {"head_dim = PKV_ATTENTION_HEAD_DIM_ALIGN", PKV_ATTENTION_HEAD_DIM_ALIGN, 4, 0, true},
      {"head_dim over the maximum", PKV_ATTENTION_MAX_HEAD_DIM_CUDA + PKV_ATTENTION_HEAD_DIM_ALIGN,
       4, 0, false},
      {"head_dim not a multiple of the alignment", PKV_ATTENTION_HEAD_DIM_ALIGN * 8 + 4, 4, 0,
       false},
      {"head_dim 0", 0, 4, 0, false},
      {"q_heads not a multiple of kv_heads", 64, 3, 0, false},
      {"q not 16-byte aligned", 64, 4, 4, false},
      {"scale 0 (the engine resolves the default)", 64, 4, 0, false, 0.f},
      {"scale NaN", 64, 4, 0, false, std::nanf("")},
      {"an e4m3 pool with scales", 64, 4, 0, true, 0.125f, e4m3},
      {"an e5m2 pool with scales", 64, 4, 0, true, 0.125f, e5m2},
      {"a window of 1", 64, 4, 0, true, 0.125f, {DType::f32, false, 1}},
      {"an fp8 pool without scales", 64, 4, 0, false, 0.125f, {DType::fp8_e4m3, false}},
      {"a pool of another 16/32-bit dtype", 64, 4, 0, false, 0.125f, {DType::bf16, false}},
      {"a negative window", 64, 4, 0, false, 0.125f, {DType::f32, false, -1}},
      {"a chunk of 1", 64, 4, 0, true, 0.125f, {DType::f32, false, 0, 1}},
      {"a negative chunk", 64, 4, 0, false, 0.125f, {DType::f32, false, 0, -1}},
      {"a window and a chunk", 64, 4, 0, false, 0.125f, {DType::f32, false, 4, 4}},
      {"a soft-cap", 64, 4, 0, true, 0.125f, {DType::f32, false, 0, 0, 30.f}},
      {"a negative soft-cap", 64, 4, 0, false, 0.125f, {DType::f32, false, 0, 0, -1.f}},
      {"a NaN soft-cap", 64, 4, 0, false, 0.125f, {DType::f32, false, 0, 0, std::nanf("")}},
      {"an infinite soft-cap", 64, 4, 0, false, 0.125f, {DType::f32, false, 0, 0, INFINITY}},
      {"v_dim = head_dim", 64, 4, 0, true, 0.125f, {DType::f32, false, 0, 0, 0.f, 64}},
      {"v_dim other than head_dim", 64, 4, 0, false, 0.125f, {DType::f32, false, 0, 0, 0.f, 32}},
      {"a block stride of the dense bytes",
       64,
       4,
       0,
       true,
       0.125f,
       {DType::f32, false, 0, 0, 0.f, 0, 16 * 2 * 64 * 4}},
      {"a block stride under the dense bytes",
       64,
       4,
       0,
       false,
       0.125f,
       {DType::f32, false, 0, 0, 0.f, 0, -1}},
      {"a block stride not a multiple of 16",
       64,
       4,
       0,
       false,
       0.125f,
       {DType::f32, false, 0, 0, 0.f, 0, 16 * 2 * 64 * 4 + 8}},
  };
  bool all = true;
  for (const Case &c : cases) {
    for (bool decode : {true, false}) {
      const cudaError_t e = try_launch(decode, c.head_dim, c.q_heads, c.q_offset, c.scale, c.pool);
      const bool ok = c.ok ? e == cudaSuccess : e == cudaErrorInvalidValue;
      if (!ok)
        fprintf(stderr, "FAIL %s launch, %s: got %s\n", decode ? "decode" : "prefill", c.what,
                cudaGetErrorString(e));
      all = all && ok;
    }
  }
  // A decode plan sizes its workspace for one shape: a plan of another head_dim is refused.
  PoolArgs other;
  other.plan_head_dim = 128;
  if (try_launch(true, 64, 4, 0, 0.125f, other) != cudaErrorInvalidValue) {
    fprintf(stderr, "FAIL decode launch, a plan made for another head_dim: accepted\n");
    all = false;
  }
  return all;
}

}  // namespace kvtest
