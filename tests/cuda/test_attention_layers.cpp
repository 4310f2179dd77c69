// The per-layer attention of pkv 0.5.0 in kernels/decode_attention.cu and prefill_attention.cu
// (with write_kv in the same step), against the fp64 reference: attention sinks (unsplit and
// split decodes, whose merge counts each sink once; prefill on the tensor-core and the fp32
// tile paths), logit soft-capping, chunked local attention (prompts across chunk boundaries, a
// chunk continued mid-chunk, a decode just past a boundary and one far past), K = V layers (v
// null: write_kv of K alone, V read from K; fp8 with K's scales), and pools of pages holding
// several layers' blocks (block_stride) whose other layers' bytes are NaN. Shapes stay small:
// the emulator runs every case four times.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

namespace {

StepCase sinks_case(DType t, int32_t head_dim, int32_t split_tokens) {
  // A first token, a decode over one split or several, a prompt, a chunk after a prefix.
  StepCase c{t, 16, 2, 4, head_dim, {{1, 1}, {150, 1}, {37, 37}, {90, 20}}, split_tokens};
  c.sinks = true;
  return c;
}

StepCase chunk_case(DType t, int32_t block_size, int32_t chunk, int32_t head_dim) {
  // A prompt over three chunk boundaries, a chunk continued mid-chunk, a decode on a boundary's
  // first key (it sees itself alone), one a few keys past, one thousands of chunks past.
  StepCase c{t,
             block_size,
             1,
             4,
             head_dim,
             {{3 * chunk + 5, 3 * chunk + 5},
              {2 * chunk + 9, chunk},
              {chunk + 1, 1},
              {4 * chunk + 3, 1},
              {3000, 1}},
             64};
  c.chunk = chunk;
  return c;
}

}  // namespace

int main() {
  std::vector<StepCase> cases;
  // Sinks: f16 and bf16 on tensor cores (prefill), f32 on the tile loop; decodes unsplit (the
  // planner's split covers 150 keys) and split in 64s (the merge adds the sink).
  cases.push_back(sinks_case(DType::f16, 64, 0));
  cases.push_back(sinks_case(DType::bf16, 128, 64));
  cases.push_back(sinks_case(DType::f32, 40, 64));
  // Soft-cap 1 (strong at these scores' spread), 30 (mild), on both prefill paths.
  for (float cap : {1.f, 30.f}) {
    StepCase c{cap > 1.f ? DType::bf16 : DType::f16, 16, 2, 2, 64, {{80, 1}, {70, 70}}, 64};
    c.softcap = cap;
    cases.push_back(c);
  }
  StepCase cap_tile{DType::f32, 7, 1, 3, 80, {{300, 1}, {40, 25}}, 0};
  cap_tile.softcap = 2.f;
  cases.push_back(cap_tile);
  // Chunks: block sizes that do and do not divide them, split and tile paths.
  cases.push_back(chunk_case(DType::f16, 16, 16, 64));
  cases.push_back(chunk_case(DType::f32, 7, 24, 48));
  cases.push_back(chunk_case(DType::bf16, 32, 100, 128));
  // K = V: both prefill paths, and an fp8 pool (one scale per head serves K and V).
  for (DType t : {DType::f16, DType::f32}) {
    StepCase c{t, 16, 2, 2, 64, {{200, 1}, {60, 40}}, 64};
    c.k_eq_v = true;
    cases.push_back(c);
  }
  StepCase fp8_kv{DType::bf16, 16, 2, 2, 128, {{90, 1}, {50, 50}}, 0};
  fp8_kv.k_eq_v = true, fp8_kv.kv_dtype = DType::fp8_e4m3, fp8_kv.fp8_span = 4,
  fp8_kv.fp8_scale = 0.1;
  cases.push_back(fp8_kv);
  // Pages of 2 and 3 layers' blocks: the layer is each page's last, its neighbours NaN.
  StepCase page2{DType::f16, 16, 2, 4, 64, {{130, 1}, {45, 45}}, 64};
  page2.page_layers = 2;
  cases.push_back(page2);
  StepCase page3{DType::f32, 7, 1, 2, 40, {{50, 1}, {30, 12}}, 0};
  page3.page_layers = 3;
  cases.push_back(page3);
  // Layers as models mix them: gpt-oss (window 8 and sinks, split), Gemma 2 (soft-cap 50 and
  // a window), Gemma 4 (K = V in a page of 2, with a window), Llama 4 (chunk, fp8 pool).
  StepCase oss{DType::bf16, 16, 2, 4, 64, {{300, 1}, {40, 30}, {9, 1}}, 64};
  oss.window = 8, oss.sinks = true;
  cases.push_back(oss);
  StepCase gemma2{DType::bf16, 16, 1, 2, 128, {{70, 1}, {33, 33}}, 0};
  gemma2.window = 32, gemma2.softcap = 50.f;
  cases.push_back(gemma2);
  StepCase gemma4{DType::f16, 16, 1, 2, 256, {{60, 1}, {40, 24}}, 0};
  gemma4.window = 16, gemma4.k_eq_v = true, gemma4.page_layers = 2;
  cases.push_back(gemma4);
  StepCase llama4 = chunk_case(DType::f16, 16, 32, 128);
  llama4.kv_dtype = DType::fp8_e5m2, llama4.fp8_span = 8, llama4.fp8_scale = 0.05;
  cases.push_back(llama4);
  return kvtest::run_cases("attention_layers", cases);
}
