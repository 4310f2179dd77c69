// kernels/decode_attention.cu (with write_kv before it) against the fp64 reference: decode-only
// batches over dtypes, block sizes, head dims (the specialized ones and a generic 40), GQA
// groups 1, 4, 8 (and 5, 16), single and multiple splits, and one long context.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

int main() {
  std::vector<StepCase> cases;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t block_sizes[] = {1, 7, 16, 32};
  const int32_t head_dims[] = {64, 80, 128, 256, 40};
  const int32_t groups[] = {1, 4, 8};
  int i = 0;
  for (DType t : dtypes) {
    for (int32_t bs : block_sizes) {
      const int32_t d = head_dims[i % 5], g = groups[i % 3];
      // Contexts of 1 token, under a tile, over several tiles; split 64 forces the merge.
      cases.push_back({t, bs, 2, g, d, {{1, 1}, {37, 1}, {300, 1}}, i % 2 ? 64 : 0});
      ++i;
    }
  }
  cases.push_back({DType::f16, 16, 1, 5, 96, {{130, 1}, {64, 1}}, 64});  // group not a power of 2
  cases.push_back({DType::bf16, 32, 1, 16, 64, {{200, 1}}, 64});         // two group chunks
  cases.push_back({DType::f16, 16, 1, 4, 128, {{4133, 1}, {5, 1}}, 0});  // long: planned splits
  return kvtest::run_cases("decode_attention", cases);
}
