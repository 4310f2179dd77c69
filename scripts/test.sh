#!/usr/bin/env bash
# Builds pkv and runs its test suites; the last line is "N passed, N failed[, N skipped]".
#   BUILD_DIR    build directory (default: build)
#   PKV_SUITES   space-separated suites to run (default: all)
#   extra arguments go to the first `meson setup` of the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
builddir=${BUILD_DIR:-build}
suite_args=()
for s in ${PKV_SUITES:-}; do suite_args+=(--suite "$s"); done
rc=0
meson test -C "$builddir" --print-errorlogs --num-processes 2 "${suite_args[@]}" || rc=$?
python3 - "$builddir/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {"OK": 0, "FAIL": 0, "SKIP": 0}
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    key = "OK" if r in ("OK", "EXPECTEDFAIL") else "SKIP" if r == "SKIP" else "FAIL"
    counts[key] += 1
print(f"{counts['OK']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
PY
exit $rc
