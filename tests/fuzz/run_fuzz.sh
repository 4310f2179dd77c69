#!/bin/sh
# run_fuzz.sh SRCROOT OUTDIR HARNESS SECONDS RUNS - builds the harnesses (build.sh), then one
# bounded libFuzzer run of HARNESS over its committed corpus (corpus/HARNESS). New inputs go to
# OUTDIR/work_HARNESS/new, never into the source tree; a crash is saved under
# OUTDIR/work_HARNESS/artifacts: copy it to tests/fuzz/regressions/HARNESS/ to keep it.
set -eu
src=$1 out=$2 h=$3 secs=$4 runs=$5
sh "$src/tests/fuzz/build.sh" "$src" "$out"
work=$out/work_$h
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
# -error_exitcode=1: libFuzzer's default, 77, is what meson reads as a skip.
exec "$out/fuzz_$h" -error_exitcode=1 -max_total_time="$secs" -runs="$runs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/new" \
  "$src/tests/fuzz/corpus/$h"
