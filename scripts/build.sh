#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds pkv.
#   BUILD_DIR      build directory (default: build)
#   BUILD_TARGETS  ninja targets to build, space-separated (default: all ~500 of them, tests,
#                  fuzzers and benchmarks included; scripts/run.sh asks for the pkv tool only)
#   PKV_GPU_ARCHS  a CUDA build's SM architectures, comma-separated (-Dgpu_archs), at the first
#                  setup. Default: this machine's GPU's (nvidia-smi), or sm_80 without one (the
#                  kernels are still compiled and the emulator runs them). A plain `meson setup`
#                  builds meson_options.txt's six, for a build that ships to other GPUs.
#   extra arguments go to the first `meson setup` of that directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The CUDA toolkit is optional: its usual place is put on PATH when it is there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
builddir=${BUILD_DIR:-build}
if [ ! -f "$builddir/build.ninja" ]; then
  gpu_args=()
  archs=${PKV_GPU_ARCHS:-}
  if [ -z "$archs" ] && command -v nvcc >/dev/null 2>&1; then
    # The scripts build for the GPU at hand: the six architectures take ~6x one's nvcc time.
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 |
      tr -d '. ' || true)
    if [[ "$cc" =~ ^[0-9]+$ ]] && [ "$cc" -ge 80 ]; then archs=$cc; else archs=80; fi
  fi
  if [ -n "$archs" ]; then gpu_args=(-Dgpu_archs="$archs"); fi
  meson setup "$builddir" "${gpu_args[@]}" "$@"
fi
# shellcheck disable=SC2086  # a list of target names
ninja -C "$builddir" ${BUILD_TARGETS:-}
