#!/usr/bin/env bash
# pkv's main job with its defaults: build, then `pkv demo` (extra arguments go to it): a tiny
# transformer served end to end through pkv's scheduler and attention, next to a contiguous-KV
# baseline. It builds what the demo needs only (libpkv and the tool, ~70 of the build's ~500
# targets); scripts/test.sh builds the rest in the same build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh libopenblas-dev
BUILD_TARGETS=tools/pkv bash scripts/build.sh >&2
exec "${BUILD_DIR:-build}/tools/pkv" demo "$@"
