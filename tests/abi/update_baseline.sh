#!/bin/sh
# Rewrites tests/abi/libpkv.abi from a debug-info build of libpkv.so (default: build/).
# Only for a deliberate ABI change, which also bumps PKV_ABI_VERSION in pkv.h (the SONAME follows).
set -eu
cd "$(dirname "$0")/../.."
lib=${1:-build/src/libpkv.so}
abidw --suppressions tests/abi/libpkv.suppr --no-show-locs --no-corpus-path --no-comp-dir-path \
  --out-file tests/abi/libpkv.abi "$lib"
echo "wrote tests/abi/libpkv.abi from $lib"
