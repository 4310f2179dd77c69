// SIMT_ARCH (simt_arch.h). The opt-in shared memory per block is the CUDA C++ Programming Guide's
// "maximum amount of shared memory per thread block" per compute capability (its technical
// specifications table): 8.0 163 KiB, 8.6 and 8.9 99 KiB, 9.0 and 10.0 227 KiB, 12.0 99 KiB.
// SM counts are one part's each (a capability spans parts with other counts): they size the
// kernels' split plans, never whether a launch fits.
#include "simt_arch.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "simt_internal.h"

namespace simt {
namespace {

constexpr size_t kKiB = 1024;
constexpr Arch kArchs[] = {
    {80, 8, 0, 108, 163 * kKiB, "A100"},    {86, 8, 6, 82, 99 * kKiB, "RTX 3090"},
    {89, 8, 9, 128, 99 * kKiB, "RTX 4090"}, {90, 9, 0, 132, 227 * kKiB, "H100 SXM"},
    {100, 10, 0, 148, 227 * kKiB, "B200"},  {120, 12, 0, 170, 99 * kKiB, "RTX 5090"},
};
constexpr Arch kDefault = {0, 9, 0, 4, 227 * kKiB, "the emulator (no SIMT_ARCH)"};

const Arch &read_arch() {
  const char *env = getenv("SIMT_ARCH");
  if (!env || !*env) return kDefault;
  for (const Arch &a : kArchs) {
    char name[8];
    snprintf(name, sizeof name, "%d", a.sm);
    if (strcmp(env, name) == 0) return a;
  }
  die("SIMT_ARCH=%s: not an architecture the emulator knows (80, 86, 89, 90, 100 or 120)", env);
}

}  // namespace

const Arch &arch() {
  static const Arch &a = read_arch();
  return a;
}

}  // namespace simt
