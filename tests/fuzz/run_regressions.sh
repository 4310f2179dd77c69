#!/bin/sh
# run_regressions.sh SRCROOT OUTDIR HARNESS - runs every input of regressions/HARNESS once
# (inputs that once crashed or failed a check, kept so the fix stays fixed). None: passes.
set -eu
src=$1 out=$2 h=$3
sh "$src/tests/fuzz/build.sh" "$src" "$out"
set -- "$src/tests/fuzz/regressions/$h"/*
if [ ! -f "$1" ]; then
  echo "no regression inputs for $h"
  exit 0
fi
exec "$out/fuzz_$h" -error_exitcode=1 -timeout=30 -rss_limit_mb=2048 "$@"
