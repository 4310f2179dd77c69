// Sliding windows in kernels/decode_attention.cu and prefill_attention.cu (with write_kv in the
// same step), against the fp64 reference with the same window: windows 1, 7 and 16 over block
// sizes 1, 7 and 16, GQA groups 1, 4 and 8, in batches that mix the first token, a decode whose
// first key just left the window, a decode thousands of tokens past it, a chunk whose first
// tokens still see the cached keys before it, a chunk after a long prefix and a fresh prompt
// longer than the window; then a window of 4096, and splits that start at the window. Blocks
// wholly before a sequence's first window are -1 in its table and absent from the pool, as in a
// windowed KV group: a kernel that reads one fails (the ASan variant names it).
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

int main() {
  std::vector<StepCase> cases;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  const int32_t head_dims[] = {64, 128, 80, 40};
  const int32_t groups[] = {1, 4, 8};
  int i = 0;
  for (int32_t w : {1, 7, 16}) {
    for (int32_t bs : {1, 7, 16}) {
      StepCase c{
          dtypes[i % 3],
          bs,
          2,
          groups[i % 3],
          head_dims[i % 4],
          {{1, 1}, {w + 1, 1}, {w + 3005, 1}, {w + 40, 40}, {150, 30}, {2 * w + 9, 2 * w + 9}},
          i % 2 ? 64 : 0};
      c.window = w;
      cases.push_back(c);
      ++i;
    }
  }
  // A window wider than most contexts: a decode at its edge and 4000 tokens past it, a chunk
  // across its edge (its first token sees key 0, its last does not), a short prompt.
  StepCase wide{DType::f16, 16, 1, 4, 128, {{4096, 1}, {4097, 1}, {8100, 1}, {4130, 60}, {40, 40}}};
  wide.window = 4096;
  cases.push_back(wide);
  // Splits of 64 keys from the window's start (two per sequence here), and one over a window of
  // a single split.
  StepCase split{DType::f32, 16, 2, 2, 64, {{5000, 1}, {130, 1}, {101, 1}, {100, 1}}, 64};
  split.window = 100;
  cases.push_back(split);
  StepCase one{DType::bf16, 7, 2, 4, 96, {{2000, 1}, {300, 3}}, 0};
  one.window = 64;
  cases.push_back(one);
  return kvtest::run_cases("attention_window", cases);
}
