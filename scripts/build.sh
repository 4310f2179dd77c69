#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds pkv.
#   BUILD_DIR      build directory (default: build)
#   BUILD_TARGETS  ninja targets to build, space-separated (default: all ~500 of them, tests,
#                  fuzzers and benchmarks included; scripts/run.sh asks for the pkv tool only)
#   extra arguments go to the first `meson setup` of that directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# The CUDA toolkit is optional: its usual place is put on PATH when it is there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
builddir=${BUILD_DIR:-build}
if [ ! -f "$builddir/build.ninja" ]; then
  meson setup "$builddir" "$@"
fi
# shellcheck disable=SC2086  # a list of target names
ninja -C "$builddir" ${BUILD_TARGETS:-}
