// kernels/mla_attention.cu (write_kv of the latents, K alone, before it) against the fp64
// reference pkv_ref_mla_attention: f32, f16 and bf16 models, each with a cache of its own dtype
// and fp8 e4m3 / e5m2 caches (scales not 1, a share of the codes saturating); latents of 512 + 64
// (DeepSeek V3), 64 + 16, and 32 + 8 (a width that is not a multiple of 16); 1, 16 and 128 q
// heads, on both row-group shapes of the tensor-core kernel (64 rows with 16 heads: padding rows;
// 32 rows with 128 heads: four row tiles); block sizes 1, 16 and 64 with shuffled tables; decodes
// over one split and over many (splits of 96 keys in blocks of 64: boundaries inside a block),
// prefills of fresh prompts and of chunks after a cached prefix, and batches mixing both; and
// latents in pages of several layers (block_stride: a sparse-attention engine's pool).
#include "kv_harness.h"

using kvtest::DType;
using kvtest::SeqSpec;
using kvtest::StepCase;

namespace {

StepCase mla(DType t, int32_t bs, int32_t heads, int32_t rank, int32_t rope,
             std::vector<SeqSpec> seqs, int32_t split = 0, int32_t row_groups = 0) {
  StepCase c{t, bs, 1, heads, rank + rope, std::move(seqs), split};
  c.kv_dtype = t;
  c.mla_rank = rank;
  c.row_groups = row_groups;
  return c;
}

// An fp8 cache: latents scale * U(-span, span) with a scale of about 2 / span (values of at most
// 4 in the model), a span that saturates a quarter of the codes.
StepCase fp8(StepCase c, DType kv) {
  c.kv_dtype = kv;
  c.fp8_span = (kv == DType::fp8_e4m3 ? 448.0 : 57344.0) * 4 / 3;
  c.fp8_scale = 2.0 / c.fp8_span;
  return c;
}

const std::vector<SeqSpec> kMixed = {{1, 1}, {90, 1}, {150, 20}, {60, 60}, {45, 17}, {2, 2}};

}  // namespace

int main() {
  std::vector<StepCase> cases;
  const DType dtypes[] = {DType::f32, DType::f16, DType::bf16};
  for (int i = 0; i < 3; ++i) {
    const DType t = dtypes[i];
    // DeepSeek V3's latent, 16 heads (a tensor-parallel rank of 128): decodes over one split and
    // over many, boundaries inside blocks of 64.
    cases.push_back(mla(t, 16, 16, 512, 64, {{300, 1}, {37, 1}}));
    cases.push_back(mla(t, 64, 16, 512, 64, {{1000, 1}, {130, 1}}, 96));
    // Mixed batches on a small latent, every block size.
    cases.push_back(mla(t, i == 0 ? 1 : i == 1 ? 16 : 64, 16, 64, 16, kMixed));
    // A chunk after a cached prefix, and a decode, on the wide latent.
    cases.push_back(mla(t, 16, 16, 512, 64, {{130, 17}, {260, 1}}, 64));
    // One q head (rows are tokens), a width of 40.
    cases.push_back(mla(t, 16, 1, 32, 8, {{70, 70}, {150, 20}, {600, 1}}, 128));
    for (DType kv : {DType::fp8_e4m3, DType::fp8_e5m2})
      cases.push_back(fp8(
          mla(t, kv == DType::fp8_e4m3 ? 16 : 64, 16, 512, 64, {{400, 1}, {80, 12}, {9, 9}}, 96),
          kv));
  }
  // 128 q heads (all of DeepSeek V3's): 64 rows a CTA, and 32 (four row tiles).
  cases.push_back(mla(DType::bf16, 16, 128, 512, 64, {{600, 1}, {20, 3}}, 256, 4));
  cases.push_back(mla(DType::f16, 64, 128, 64, 16, {{700, 1}, {40, 5}}, 160, 2));
  cases.push_back(mla(DType::f32, 16, 128, 64, 16, {{300, 1}, {30, 2}}));
  cases.push_back(fp8(mla(DType::bf16, 1, 128, 512, 64, {{130, 1}}, 64, 4), DType::fp8_e4m3));
  // 16 heads on 64 rows (48 padding rows), a width of 40 on both shapes.
  cases.push_back(mla(DType::bf16, 16, 16, 512, 64, {{333, 1}, {80, 12}}, 0, 4));
  cases.push_back(mla(DType::f16, 1, 8, 32, 8, kMixed, 96, 4));
  cases.push_back(mla(DType::bf16, 16, 4, 32, 8, kMixed, 0, 2));
  // Pages of 3 layers' blocks (block_stride, DESIGN.md §12: a sparse-attention engine's pool),
  // the layer the page's last: the tensor-core and fp32 kernels, an fp8 cache, many splits.
  for (StepCase c :
       {mla(DType::bf16, 16, 16, 64, 16, kMixed, 96),
        mla(DType::f32, 4, 8, 32, 8, {{150, 1}, {40, 7}}),
        fp8(mla(DType::f16, 16, 16, 512, 64, {{300, 1}, {20, 5}}, 128), DType::fp8_e4m3)}) {
    c.page_layers = 3;
    cases.push_back(c);
  }
  return kvtest::run_cases("mla_attention", cases);
}
