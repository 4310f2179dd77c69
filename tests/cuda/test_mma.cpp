// kernels/mma.cuh's mma_m16n8k16, f16 and bf16, against a scalar product in double: small
// integers first (every product and sum exact in fp32, so the result must match bit for bit),
// then random values of the dtype with an fp32 accumulation's tolerance, once and three times
// in a row (C is the previous D). Under the emulator this checks its fragment layouts and
// arithmetic; on a GPU, that the tensor cores agree with both.
#include <cmath>
#include <cstdio>
#include <vector>

#include "kv_harness.h"
#include "mma_check.h"

namespace {

using kvtest::DevBuf;
using kvtest::DType;

// One multiply of a [16][16] by b [16][8] plus c, `times` times; true when every element of the
// result is within tol_rel * (times * sum |a b| + |c|) of the reference (0: exact).
bool check(DType t, kvtest::Rng &rng, bool integers, int times, double tol_rel) {
  std::vector<unsigned char> a(16 * 16 * 2), b(16 * 8 * 2);
  std::vector<double> av(16 * 16), bv(16 * 8);
  std::vector<float> c(16 * 8), d(16 * 8);
  auto draw = [&](double lo, double hi) {
    return integers ? std::floor(rng.uniform(lo, hi + 1)) : rng.uniform(lo, hi);
  };
  for (size_t i = 0; i < av.size(); ++i) {
    kvtest::store_elem(t, a.data(), i, draw(-8, 8));
    av[i] = kvtest::load_elem(t, a.data(), i);
  }
  for (size_t i = 0; i < bv.size(); ++i) {
    kvtest::store_elem(t, b.data(), i, draw(-8, 8));
    bv[i] = kvtest::load_elem(t, b.data(), i);
  }
  for (float &x : c) x = float(draw(-64, 64));
  DevBuf da(a.size()), db(b.size()), dc(4 * c.size()), dd(4 * d.size());
  da.upload(a.data(), a.size()), db.upload(b.data(), b.size()), dc.upload(c.data(), 4 * c.size());
  kvtest::check_cuda(launch_mma_check(t == DType::bf16, da.as<uint16_t>(), db.as<uint16_t>(),
                                      dc.as<float>(), dd.as<float>(), times),
                     "launch_mma_check");
  kvtest::check_cuda(cudaDeviceSynchronize(), "sync");
  dd.download(d.data(), 4 * d.size());
  int bad = 0;
  double worst = 0;
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double ref = 0, mag = 0;
      for (int k = 0; k < 16; ++k) ref += av[r * 16 + k] * bv[k * 8 + n];
      for (int k = 0; k < 16; ++k) mag += std::fabs(av[r * 16 + k] * bv[k * 8 + n]);
      ref = times * ref + c[r * 8 + n];
      const double err = std::fabs(d[r * 8 + n] - ref);
      worst = std::fmax(worst, err);
      if (err > tol_rel * (times * mag + std::fabs(c[r * 8 + n])) && ++bad <= 10)
        fprintf(stderr, "mma %s %s x%d: D[%d][%d] = %.9g, want %.9g\n", kvtest::dtype_name(t),
                integers ? "integers" : "random", times, r, n, double(d[r * 8 + n]), ref);
    }
  if (bad)
    fprintf(stderr, "mma %s: %d of 128 elements wrong, max error %g\n", kvtest::dtype_name(t), bad,
            worst);
  return bad == 0;
}

}  // namespace

int main() {
  if (int skip = kvtest::require_device()) return skip;
  kvtest::Rng rng(5);
  int cases = 0, failures = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (int rep = 0; rep < 4; ++rep) {
      failures += !check(t, rng, true, 1, 0.0), ++cases;
      failures += !check(t, rng, true, 3, 0.0), ++cases;
      failures += !check(t, rng, false, 1, 1e-5), ++cases;
      failures += !check(t, rng, false, 3, 1e-5), ++cases;
    }
  printf("mma: %d of %d cases passed\n", cases - failures, cases);
  return failures ? 1 : 0;
}
