#!/bin/sh
# The ABI gate: compares libpkv.so with the committed baseline (tests/abi/libpkv.abi).
# Passes when nothing changed or functions were only added; fails on a removed or changed
# function or type layout, which breaks binaries built against the older header.
#   abi_gate.sh BASELINE LIBRARY SUPPRESSIONS
# A deliberate ABI change: bump PKV_ABI_VERSION in pkv.h (the SONAME follows), then
# tests/abi/update_baseline.sh.
set -u
baseline=$1 lib=$2 suppr=$3
command -v abidiff >/dev/null 2>&1 || { echo "abidiff missing: apt-get install abigail-tools"; exit 1; }
if ! readelf -S "$lib" | grep -q debug_info; then
  echo "$lib has no debug info: build with -Dbuildtype=debugoptimized (the default) or debug"
  exit 1
fi
out=$(abidiff --suppressions "$suppr" "$baseline" "$lib" 2>&1)
rc=$?
echo "$out"
if [ $((rc & 1)) -ne 0 ] || [ $((rc & 2)) -ne 0 ]; then echo "abidiff failed to run ($rc)"; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then echo "ABI gate: incompatible change"; exit 1; fi
if echo "$out" | grep -Eq '(^|[^0-9])[1-9][0-9]* (Removed|Changed)'; then
  echo "ABI gate: a function or a type it reaches changed or was removed"
  exit 1
fi
echo "ABI gate: compatible with the baseline"
