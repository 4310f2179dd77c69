#!/usr/bin/env bash
# Builds pkv and runs its test suites; the last line is "N passed, N failed[, N skipped]".
#   BUILD_DIR    build directory (default: build)
#   PKV_SUITES   space-separated suites to run (default: all)
#   PKV_TIMEOUT_MULTIPLIER  meson's per-test timeouts times this (default 1), for a machine
#                busy with other work; the tests that run for a set time stop by their own clock
#   extra arguments go to the first `meson setup` of the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchains the test suites drive: the bindings (Go, C#, Rust, Python + libclang; the
# install suite's venv and pip), the ABI gate (abigail-tools), the demo's BLAS and the CPU
# attention bench's GEMM yardstick (oneDNN; the bench is built, not run), the format check
# (clang-format).
test_packages=(golang-go mono-mcs mono-runtime python3-clang-14 python3-venv python3-pip bindgen
               librust-libloading-dev libclang-dev abigail-tools libopenblas-dev libdnnl-dev
               clang-14 libclang-rt-14-dev valgrind make redis-server python3-zmq python3-msgpack
               clang-format)
command -v cargo >/dev/null 2>&1 || test_packages+=(cargo)
bash scripts/deps.sh "${test_packages[@]}"
bash scripts/build.sh "$@"
builddir=${BUILD_DIR:-build}
suite_args=()
for s in ${PKV_SUITES:-}; do suite_args+=(--suite "$s"); done
rc=0
meson test -C "$builddir" --print-errorlogs --num-processes 2 \
  --timeout-multiplier "${PKV_TIMEOUT_MULTIPLIER:-1}" "${suite_args[@]}" || rc=$?
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
