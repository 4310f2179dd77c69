// kernels/prefill_attention.cu's tensor-core path (attention_mma.cuh: f16 / bf16 models, head_dim
// 64, 80, 96, 128, 256) with write_kv and decode in the same step, against the fp64 reference:
// block sizes 1, 7 and 16, GQA groups 1, 4 and 8, batches mixing decodes with a chunk after a
// cached prefix longer than a key tile, a fresh prompt of more rows than a CTA takes, a chunk
// whose rows leave warps idle, and a 2-token prompt; then sliding windows (1, 7, 16, 40, and one
// wider than a key tile), fp8 e4m3 and e5m2 pools (saturating and subnormal codes, with and
// without a window), a group that is not a power of 2, and a row alone on a tile's first key.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::SeqSpec;
using kvtest::StepCase;

namespace {

const std::vector<SeqSpec> kMixed = {{1, 1}, {90, 1}, {300, 40}, {100, 100}, {45, 17}, {2, 2}};

StepCase windowed(DType t, int32_t bs, int32_t group, int32_t d, int32_t window) {
  StepCase c{
      t, bs,
      2, group,
      d, {{window + 500, 1}, {window + 70, 70}, {150, 30}, {2 * window + 9, 2 * window + 9}}};
  c.window = window;
  return c;
}

StepCase fp8_case(DType t, DType kv, int32_t bs, int32_t group, int32_t d, double span,
                  int32_t window) {
  StepCase c{t, bs, 2, group, d, {{37, 1}, {200, 50}, {66, 66}}};
  c.kv_dtype = kv;
  c.fp8_span = span;
  c.fp8_scale = 2.0 / span;
  c.window = window;
  return c;
}

}  // namespace

int main() {
  std::vector<StepCase> cases;
  const int32_t block_sizes[] = {1, 7, 16};
  const int32_t head_dims[] = {64, 80, 128, 256};
  const int32_t groups[] = {1, 4, 8};
  // Each dtype meets every head_dim, every block size twice and every group (12 cases, not the
  // 72 of the whole product: the emulator's time is CI's).
  for (int i = 0; i < 12; ++i)
    cases.push_back({i < 6 ? DType::f16 : DType::bf16, block_sizes[i / 2 % 3], 2, groups[i % 3],
                     head_dims[i % 4], kMixed});
  const int32_t windows[] = {1, 7, 16, 40, 100};
  for (int w = 0; w < 5; ++w)
    cases.push_back(windowed(w % 2 ? DType::bf16 : DType::f16, block_sizes[w % 3], groups[w % 3],
                             head_dims[w % 4], windows[w]));
  const double e4m3_sat = 448.0 * 4 / 3, e5m2_sat = 57344.0 * 4 / 3;
  cases.push_back(fp8_case(DType::f16, DType::fp8_e4m3, 16, 4, 128, e4m3_sat, 0));
  cases.push_back(fp8_case(DType::bf16, DType::fp8_e4m3, 7, 8, 64, e4m3_sat, 0));
  cases.push_back(fp8_case(DType::f16, DType::fp8_e5m2, 1, 1, 256, e5m2_sat, 0));
  cases.push_back(fp8_case(DType::bf16, DType::fp8_e5m2, 16, 4, 80, e5m2_sat, 0));
  cases.push_back(fp8_case(DType::bf16, DType::fp8_e4m3, 16, 4, 96, 0x1p-5, 0));  // subnormal
  cases.push_back(fp8_case(DType::f16, DType::fp8_e5m2, 7, 8, 128, 0x1p-13, 0));
  cases.push_back(fp8_case(DType::bf16, DType::fp8_e4m3, 7, 4, 128, e4m3_sat, 16));
  cases.push_back(fp8_case(DType::f16, DType::fp8_e5m2, 16, 1, 64, e5m2_sat, 7));
  cases.push_back({DType::bf16, 16, 1, 5, 96, {{70, 21}, {2, 2}, {130, 130}}});
  // A prompt of 65 tokens, group 1: its last row is alone in the second CTA and is the first key
  // of the second key tile (a warp that skipped a tile starting at its last key would miss it).
  cases.push_back({DType::f16, 16, 2, 1, 64, {{65, 65}, {129, 1}}});
  return kvtest::run_cases("prefill_mma", cases);
}
