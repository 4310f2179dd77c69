#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds pkv.
#   BUILD_DIR      build directory (default: build)
#   BUILD_TARGETS  ninja targets to build, space-separated (default: all ~500 of them, tests,
#                  fuzzers and benchmarks included; scripts/run.sh asks for the pkv tool only)
#   PKV_GPU_ARCHS  a CUDA build's SM architectures, comma-separated (-Dgpu_archs; default:
#                  meson_options.txt's six), at the first setup: .ci/run builds sm_80 only
#   extra arguments go to the first `meson setup` of that directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The CUDA toolkit is optional: its usual place is put on PATH when it is there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
builddir=${BUILD_DIR:-build}
if [ ! -f "$builddir/build.ninja" ]; then
  gpu_args=()
  if [ -n "${PKV_GPU_ARCHS:-}" ]; then gpu_args=(-Dgpu_archs="$PKV_GPU_ARCHS"); fi
  meson setup "$builddir" "${gpu_args[@]}" "$@"
fi
# shellcheck disable=SC2086  # a list of target names
ninja -C "$builddir" ${BUILD_TARGETS:-}
