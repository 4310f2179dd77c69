// emu_demo: the whole `pkv demo --device cuda` in the CUDA emulator - libpkv's CUDA engine on the
// emulated kernels and runtime (as emu_engine_decode links it), the model's GEMMs on the
// emulator's cuBLAS subset through the demo's own glue - against the demo's CPU engine run. The
// demo itself fails (exit 1) unless the CUDA engine generates the CPU's tokens by its rule
// (tools/demo_cuda.c). Arguments: the demo's flags; its exit code is this program's.
#include "emu_cuda_api.h"

extern "C" {
#include "commands.h"
#include "demo.h"
}

int main(int argc, char **argv) {
  demo_cuda_api_load = emu_cuda_api_load;
  return cmd_demo(argc - 1, argv + 1);
}
