// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} for the emulator (simt.h): the warp's
// fragments gathered into whole matrices by the PTX ISA's layouts (written out again here, apart
// from kernels/mma.cuh, so a kernel that misreads them disagrees with the fp64 reference), the
// product taken in double and rounded to fp32 once per element. A tensor core rounds its partial
// sums in its own way; the kernels' tolerances cover both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "simt.h"
#include "simt_internal.h"

namespace simt {
namespace {

struct MmaLane {
  MmaType type;
  float *d;
  const uint32_t *a, *b;
};

double element(MmaType type, uint32_t reg, int half) {
  const auto bits = static_cast<unsigned short>(half ? reg >> 16 : reg & 0xFFFFu);
  return type == MmaType::f16 ? double(__half2float(__ushort_as_half(bits)))
                              : double(__bfloat162float(__ushort_as_bfloat16(bits)));
}

}  // namespace

void mma_m16n8k16(MmaType type, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                  const char *file, int line) {
  MmaLane lane{type, d, a, b};
  warp_op(Op::mma, 0xffffffffu, uint64_t(reinterpret_cast<uintptr_t>(&lane)), int(type), 32, file,
          line);
}

void mma_complete(const uint64_t (&lanes)[32]) {
  double A[16][16], B[16][8], C[16][8];
  MmaLane *lane[32];
  for (int l = 0; l < 32; ++l) {
    lane[l] = reinterpret_cast<MmaLane *>(uintptr_t(lanes[l]));
    if (lane[l]->type != lane[0]->type) die("mma.sync: lanes 0 and %d disagree on the type", l);
    const int group = l / 4, tig = l % 4;
    const MmaType t = lane[l]->type;
    for (int i = 0; i < 4; ++i) {  // A: row group (+8 for odd i), columns 2 tig (+8 for i >= 2)
      const int row = group + 8 * (i & 1), col = 2 * tig + 8 * (i >> 1);
      A[row][col] = element(t, lane[l]->a[i], 0);
      A[row][col + 1] = element(t, lane[l]->a[i], 1);
    }
    for (int i = 0; i < 2; ++i) {  // B: rows 2 tig (+8 for i = 1), column group
      const int row = 2 * tig + 8 * i;
      B[row][group] = element(t, lane[l]->b[i], 0);
      B[row + 1][group] = element(t, lane[l]->b[i], 1);
    }
    for (int i = 0; i < 4; ++i) C[group + 8 * (i >> 1)][2 * tig + (i & 1)] = lane[l]->d[i];
  }
  for (int l = 0; l < 32; ++l) {
    const int group = l / 4, tig = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = group + 8 * (i >> 1), col = 2 * tig + (i & 1);
      double x = C[row][col];
      for (int k = 0; k < 16; ++k) x += A[row][k] * B[k][col];
      lane[l]->d[i] = float(x);
    }
  }
}

}  // namespace simt
