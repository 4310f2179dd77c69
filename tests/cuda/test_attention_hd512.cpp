// head_dim past 256 in kernels/decode_attention.cu and prefill_attention.cu (pkv.h's
// PKV_ATTENTION_MAX_HEAD_DIM_CUDA: Gemma 4's full-attention layers, 512 wide, V their K), against
// the fp64 reference: K = V layers (v null) with GQA (4 q heads a kv head), decodes split and
// unsplit, prompts and chunks over several blocks, one case with sinks and a soft-cap, fp8 pools
// under f32 and bf16 models, pages of several layers whose other layers' bytes are NaN (a kernel
// reading past its own head fails), and the generic wide bucket (264: not a specialized size)
// with its own V. bf16 / f16 prompts at 512 run on tensor cores in two passes of 256 output
// columns, f32 and 264 on the fp32 tile loop. The 512 tiles take more than the default 48 KiB of
// shared memory, so every case also runs the launchers' opt-in. Shapes stay small: the emulator
// runs every case three times.
#include "kv_harness.h"

using kvtest::DType;
using kvtest::StepCase;

int main() {
  std::vector<StepCase> cases;
  // Gemma 4's full layer: one kv head of 512, K = V, 4 q heads; a decode over three splits of
  // 64 keys, a chunk of 24 after a 16-key prefix (3 blocks); sinks and a soft-cap of 50.
  StepCase full{DType::bf16, 16, 1, 4, 512, {{150, 1}, {40, 24}}, 64};
  full.k_eq_v = true, full.sinks = true, full.softcap = 50.f;
  cases.push_back(full);
  // Unsplit decodes (the planner's split covers them) and a prompt of 33 over 3 blocks of 16, in
  // pages of 2 layers (the other layer's bytes NaN), f16.
  StepCase paged{DType::f16, 16, 1, 4, 512, {{70, 1}, {1, 1}, {33, 33}}, 0};
  paged.k_eq_v = true, paged.page_layers = 2;
  cases.push_back(paged);
  // An fp8 pool (e4m3, a quarter of the elements saturating) under an f32 model, two kv heads.
  StepCase fp8{DType::f32, 7, 2, 2, 512, {{90, 1}, {30, 20}}, 64};
  fp8.k_eq_v = true, fp8.kv_dtype = DType::fp8_e4m3, fp8.fp8_span = 448.0 * 4 / 3;
  fp8.fp8_scale = 2.0 / fp8.fp8_span;
  cases.push_back(fp8);
  // fp8 under a bf16 model: the prompt on tensor cores, codes decoded exactly into both passes.
  StepCase fp8_mma{DType::bf16, 16, 1, 4, 512, {{40, 1}, {20, 20}}, 0};
  fp8_mma.k_eq_v = true, fp8_mma.kv_dtype = DType::fp8_e5m2, fp8_mma.fp8_span = 8;
  fp8_mma.fp8_scale = 0.25;
  cases.push_back(fp8_mma);
  // The generic wide bucket: 264 with its own V (e5m2), pages of 3 layers, split decode.
  StepCase wide{DType::bf16, 16, 1, 2, 264, {{100, 1}, {40, 17}}, 64};
  wide.kv_dtype = DType::fp8_e5m2, wide.fp8_span = 8, wide.fp8_scale = 0.25;
  wide.page_layers = 3;
  cases.push_back(wide);
  return kvtest::run_cases("attention_hd512", cases);
}
