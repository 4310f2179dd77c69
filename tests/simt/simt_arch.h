// The GPU the emulator pretends to be (simt_arch.cpp): SIMT_ARCH=80|86|89|90|100|120 sets what
// cudaDeviceGetAttribute reports (SMs, compute capability, the opt-in shared memory a block may
// have) and the most cudaFuncSetAttribute accepts, so the launchers' tile choices run against
// each architecture's limit on the CPU. Without SIMT_ARCH: 4 SMs (small grids: fast emulation),
// compute capability 9.0 and sm_90's 227 KiB, what the emulator always reported.
#pragma once

#include <cstddef>

namespace simt {

struct Arch {
  int sm;                 // 90 for sm_90; 0: no SIMT_ARCH
  int major, minor;       // compute capability
  int sms;                // multiprocessors of the part named below
  size_t max_smem_optin;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
  const char *part;       // the GPU whose SM count this is
};

// The architecture of this process, read from SIMT_ARCH once; an unknown value stops the
// program with the list of known ones.
const Arch &arch();

}  // namespace simt
