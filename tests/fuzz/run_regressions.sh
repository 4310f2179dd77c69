#!/bin/sh
# run_regressions.sh SRCDIR HARNESS NAME - runs every input of SRCDIR/regressions/NAME once
# through the harness program HARNESS (built by ninja): inputs that once crashed or failed a
# check, kept so the fix stays fixed. None: passes.
set -eu
src=$1 bin=$2 h=$3
if [ ! -x "$bin" ]; then
  echo "run_regressions.sh: $bin is not built: build the target tests/fuzz/fuzz_$h (ninja)" >&2
  exit 1
fi
set -- "$src/regressions/$h"/*
if [ ! -f "$1" ]; then
  echo "no regression inputs for $h"
  exit 0
fi
exec "$bin" -error_exitcode=1 -timeout=30 -rss_limit_mb=2048 "$@"
