#!/usr/bin/env bash
# pkv's main job with its defaults: build, then `pkv simulate` (extra arguments go to it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >&2
exec "${BUILD_DIR:-build}/tools/pkv" simulate "$@"
