// fp8 KV in kernels/cache_ops.cu's write_kv and in decode and prefill attention, against the
// fp64 reference reading the same codes (pkv_ref_fp8_encode) times their scales: e4m3 and e5m2
// pools under f32, f16 and bf16 models, per-head K and V scales that are not 1, elements of which
// a quarter saturate, block sizes 1, 7 and 16, head dims specialized and generic, GQA, single and
// multiple splits; then codes that are mostly subnormal (their values must not flush to 0), and
// fp8 with sliding windows. write_kv's bytes are checked against the reference encoder too.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::SeqSpec;
using kvtest::StepCase;

namespace {

// Elements scale * U(-span, span), scales 2 / span * U(0.5, 2): values of at most 4 in the model,
// codes anywhere in -span .. span (a span past the largest finite value saturates).
StepCase fp8_case(DType t, DType kv, int32_t bs, int32_t kv_heads, int32_t group, int32_t d,
                  std::vector<SeqSpec> seqs, int32_t split, double span) {
  StepCase c{t, bs, kv_heads, group, d, std::move(seqs), split};
  c.kv_dtype = kv;
  c.fp8_span = span;
  c.fp8_scale = 2.0 / span;
  return c;
}

}  // namespace

int main() {
  std::vector<StepCase> cases;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t block_sizes[] = {1, 7, 16};
  const int32_t head_dims[] = {64, 128, 256, 40, 80, 96};
  const int32_t groups[] = {1, 4, 8};
  int i = 0;
  for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const double saturating = kv == DType::fp8_e4m3 ? 448.0 * 4 / 3 : 57344.0 * 4 / 3;
    for (DType t : dtypes) {
      cases.push_back(fp8_case(t, kv, block_sizes[i % 3], 2, groups[i % 3], head_dims[i % 6],
                               {{1, 1}, {37, 1}, {300, 1}, {75, 40}, {33, 33}}, i % 2 ? 64 : 0,
                               saturating));
      ++i;
    }
    // Subnormal codes: |x / scale| below the smallest normal (2^-6, 2^-14) for most elements.
    const double subnormal = kv == DType::fp8_e4m3 ? 0x1p-5 : 0x1p-13;
    cases.push_back(fp8_case(DType::f32, kv, 16, 2, 4, 64, {{90, 1}, {40, 12}}, 0, subnormal));
  }
  // fp8 with windows: a decode far past the window, a chunk across its edge.
  StepCase w16 = fp8_case(DType::bf16, DType::fp8_e4m3, 16, 2, 4, 128, {{3000, 1}, {100, 40}}, 64,
                          448.0 * 4 / 3);
  w16.window = 16;
  cases.push_back(w16);
  StepCase w7 = fp8_case(DType::f16, DType::fp8_e5m2, 7, 1, 8, 64, {{2007, 1}, {60, 20}, {9, 9}}, 0,
                         57344.0 * 4 / 3);
  w7.window = 7;
  cases.push_back(w7);
  return kvtest::run_cases("attention_fp8", cases);
}
