// Test harness shared by the kernel tests, under the emulator (suite emu) and on a real GPU
// (suite gpu): the same sources, linked against simt or against nvcc-built kernels and cudart.
#pragma once

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cache_ops.cuh"
#include "decode_attention.cuh"
#include "mla_attention.cuh"
#include "prefill_attention.cuh"

namespace kvtest {

using pkv::cuda::DType;

const char *dtype_name(DType t);
// Element i of a host array of dtype t, as double; store rounds x to the dtype.
double load_elem(DType t, const void *p, size_t i);
void store_elem(DType t, void *p, size_t i, double x);
// Per-dtype tolerances for outputs computed in fp32 and rounded to t.
void tolerances(DType t, double *atol, double *rtol);

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1p-53; }
  uint32_t below(uint32_t n) { return uint32_t(next() % n); }
};

// Device memory that frees itself; aborts the test on CUDA errors.
class DevBuf {
 public:
  explicit DevBuf(size_t bytes);
  ~DevBuf();
  DevBuf(const DevBuf &) = delete;
  DevBuf &operator=(const DevBuf &) = delete;
  template <class T> T *as() const { return static_cast<T *>(p_); }
  void upload(const void *src, size_t bytes);
  void download(void *dst, size_t bytes) const;

 private:
  void *p_ = nullptr;
};

// Pinned, mapped host memory (cudaHostAlloc), as the CUDA backend's host tier: host() for the
// host, device() (cudaHostGetDevicePointer) for kernels. The emulator models both as one address.
class PinnedBuf {
 public:
  explicit PinnedBuf(size_t bytes);
  ~PinnedBuf();
  PinnedBuf(const PinnedBuf &) = delete;
  PinnedBuf &operator=(const PinnedBuf &) = delete;
  unsigned char *host() const { return static_cast<unsigned char *>(host_); }
  unsigned char *device() const { return static_cast<unsigned char *>(device_); }

 private:
  void *host_ = nullptr;
  void *device_ = nullptr;
};

void check_cuda(cudaError_t e, const char *what);
// 0 when a device is there; 77 (meson's skip) when cudaGetDeviceCount fails or finds none.
int require_device();

struct SeqSpec {
  int32_t context_len, query_len;
};

struct StepCase {
  DType dtype;
  int32_t block_size, kv_heads, group, head_dim;
  std::vector<SeqSpec> seqs;
  int32_t split_tokens = 0;  // decode: 0 = plan_decode's choice
  // Keys a token sees (KvLayer::window), 0 = all. As a windowed KV group's table, blocks wholly
  // before the first new token's window are -1 and have no room in the pool.
  int32_t window = 0;
  // The pool: fp8_e4m3 or fp8_e5m2, else (the default) dtype. fp8 draws each head's K and V
  // scales as fp8_scale * U(0.5, 2) (K and V apart) and elements as their head's scale *
  // U(-fp8_span, fp8_span): a span past the largest finite value saturates that share of the
  // elements, a small one gives subnormal codes.
  DType kv_dtype = DType::f32;
  double fp8_span = 0, fp8_scale = 0;
  // MLA (mla_attention.cuh) when > 0: the latent's kv_lora_rank. Then kv_heads is 1, head_dim the
  // latent's width (kv_lora_rank + rope), group the q heads, there is no V (write_kv of K alone)
  // and out has kv_lora_rank values a head; the scale is 1.5 / sqrt(width), and row_groups (0:
  // plan_mla's choice for 132 SMs and the device's opt-in shared memory) the tensor-core
  // kernel's rows.
  int32_t mla_rank = 0;
  int32_t row_groups = 0;
  // Since 0.5.0 (KvLayer's new fields). chunk: chunked local attention (KvLayer::chunk; as a
  // chunked KV group's table, blocks wholly before the first new token's chunk are -1).
  // softcap: KvLayer::softcap. sinks: a logit per q head drawn from U(-1, 3) (large enough to
  // take a real share of each softmax). k_eq_v: V is K (KvLayer::v null; no V pool). page_layers
  // > 0: the pool is pages of that many layers' blocks (block_stride = page_layers * the dense
  // block bytes) and the layer is the page's last; the other layers' bytes stay NaN, so a kernel
  // that strays into them fails.
  int32_t chunk = 0;
  float softcap = 0.f;
  bool sinks = false, k_eq_v = false;
  int32_t page_layers = 0;
};

// One forward step on fresh data: prefix K/V into a shuffled paged pool (fp8 codes of the
// reference encoder), write_kv of the new rows, decode + prefill attention; checks the pool byte
// for byte and every output row against the fp64 reference (which reads the fp8 codes times
// their scales). Returns true when everything matches.
bool run_step(const StepCase &c, uint64_t seed);
// Launches both attention launchers must refuse (cudaErrorInvalidValue) before any work:
// head_dim outside pkv.h's limits (PKV_ATTENTION_MAX_HEAD_DIM_CUDA, PKV_ATTENTION_HEAD_DIM_ALIGN),
// q_heads not a multiple of kv_heads, q not 16-byte aligned, a scale not > 0, an fp8 pool without
// scales, a pool of another 16/32-bit dtype than the model's, a negative window. True when all
// are refused and the limits themselves (fp8 pools with scales, a window of 1) are accepted.
bool check_refused_launches();
// The same for launch_mla_attention: a rank or rope off pkv.h's limits (not a multiple of the
// alignment, over PKV_ATTENTION_MAX_KV_LORA_RANK / PKV_ATTENTION_MAX_ROPE_DIM), a V pool, more
// than one kv head, a window, q not 16-byte aligned, a scale not > 0, an fp8 cache without its
// scale, a plan that does not cover the context or names no row_groups; the limits are accepted.
bool check_refused_mla_launches();
// check_refused_launches (and check_refused_mla_launches when a case is MLA), then run_step over
// every case; the process exit code (0, 1 on a failure, 77 without a device).
int run_cases(const char *name, const std::vector<StepCase> &cases);

}  // namespace kvtest
