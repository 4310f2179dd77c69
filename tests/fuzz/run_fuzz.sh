#!/bin/sh
# run_fuzz.sh SRCDIR HARNESS NAME SECONDS RUNS WORKDIR - one bounded libFuzzer run of the harness
# program HARNESS (built by ninja, tests/fuzz/meson.build) over its committed corpus
# (SRCDIR/corpus/NAME). New inputs go to WORKDIR/new, never into the source tree; a crash is saved
# under WORKDIR/artifacts: copy it to tests/fuzz/regressions/NAME/ to keep it.
#
# libFuzzer stops by its own clock (-max_total_time=SECONDS); a run still going 60 s later is
# hung (a wedged input, a machine too loaded to finish): it is stopped and fails, saying so, well
# before meson's own timeout would kill it without a word.
set -eu
src=$1 bin=$2 h=$3 secs=$4 runs=$5 work=$6
if [ ! -x "$bin" ]; then
  echo "run_fuzz.sh: $bin is not built: build the target tests/fuzz/fuzz_$h (ninja)" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
rc=0
# -error_exitcode=1: libFuzzer's default, 77, is what meson reads as a skip.
timeout -k 10 $((secs + 60)) "$bin" -error_exitcode=1 -max_total_time="$secs" -runs="$runs" \
  -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/new" "$src/corpus/$h" || rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "run_fuzz.sh: fuzz_$h ran past its ${secs} s by 60 s: stopped (hung input or overloaded machine)" >&2
  exit 1
fi
exit "$rc"
