// kernels/prefill_attention.cu with write_kv and decode in the same step, against the fp64
// reference: batches mixing a 1-token decode, a decode over a longer context, a prefill after a
// cached prefix, a chunk in the middle of a longer prompt and a fresh prompt; over dtypes,
// block sizes, head dims (specialized and generic) and GQA groups.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

int main() {
  std::vector<StepCase> cases;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t block_sizes[] = {1, 7, 16, 32};
  const int32_t head_dims[] = {64, 80, 128, 256, 72};
  const int32_t groups[] = {1, 4, 8};
  int i = 0;
  for (DType t : dtypes) {
    for (int32_t bs : block_sizes) {
      const int32_t d = head_dims[i % 5], g = groups[(i + 1) % 3];
      // ctx/query: decode of 1 token, decode, prefix + prefill, chunk of a longer prompt, fresh
      // prompt
      cases.push_back({t, bs, 2, g, d, {{1, 1}, {90, 1}, {75, 40}, {100, 30}, {33, 33}}, 64});
      ++i;
    }
  }
  cases.push_back({DType::f16, 16, 1, 5, 96, {{70, 21}, {2, 2}}, 0});  // group not a power of 2
  return kvtest::run_cases("prefill_attention", cases);
}
