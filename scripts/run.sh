#!/usr/bin/env bash
# pkv's main job with its defaults: build, then `pkv demo` (extra arguments go to it): a tiny
# transformer served end to end through pkv's scheduler and attention, next to a contiguous-KV
# baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh libopenblas-dev
bash scripts/build.sh >&2
exec "${BUILD_DIR:-build}/tools/pkv" demo "$@"
