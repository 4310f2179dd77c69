// CPU prefill kernel (tiles of several new tokens): none yet in any variant; the generic runner
// of cpu_attention.cpp computes them.
#include "backend/cpu/cpu_attention.h"

namespace pkv {
namespace PKV_CPU_VARIANT {

bool prefill_item(const CpuStep &, const CpuLayer &, const AttnItem &, float *, float *) { return false; }

}  // namespace PKV_CPU_VARIANT
}  // namespace pkv
