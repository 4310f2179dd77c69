#!/usr/bin/env bash
# Builds pkv and runs its test suites; the last line is "N passed, N failed[, N skipped]".
#   BUILD_DIR    build directory (default: build)
#   PKV_SUITES   space-separated suites to run (default: all); with it, only what their tests
#                need is built
#   PKV_TIMEOUT_MULTIPLIER  meson's per-test timeouts times this (default 1), for a machine
#                busy with other work; the tests that run for a set time stop by their own clock
#   extra arguments go to the first `meson setup` of the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
# The toolchains the test suites drive: the bindings (Go, C#, Rust, Python + libclang; the
# install suite's venv and pip), the ABI gate (abigail-tools), the demo's BLAS and the CPU
# attention bench's GEMM yardstick (oneDNN; the bench is built, not run), the format check
# (clang-format), ucx_perftest (ucx-utils: the disaggregated demo's yardstick).
test_packages=(golang-go mono-mcs mono-runtime python3-clang-14 python3-venv python3-pip bindgen
               librust-libloading-dev libclang-dev abigail-tools libopenblas-dev libdnnl-dev
               clang-14 libclang-rt-14-dev valgrind make redis-server python3-zmq python3-msgpack
               clang-format ucx-utils)
command -v cargo >/dev/null 2>&1 || test_packages+=(cargo)
bash scripts/deps.sh "${test_packages[@]}"
builddir=${BUILD_DIR:-build}
suite_args=()
for s in ${PKV_SUITES:-}; do suite_args+=(--suite "$s"); done
if [ -z "${PKV_SUITES:-}" ]; then
  bash scripts/build.sh "$@"
else
  # Some suites: configure, then build only what their tests run (each test's `depends`, the
  # targets meson test itself would rebuild), not the ~500 targets of the other suites (the ASan
  # stage of .ci/run: the unit suite needs neither tests/store's nor tests/cpu's programs).
  BUILD_TARGETS=build.ninja bash scripts/build.sh "$@"
  # shellcheck disable=SC2086  # a list of suite names
  targets=$(python3 - "$builddir" ${PKV_SUITES} <<'PY'
import json, os, subprocess, sys
info = json.loads(subprocess.run(["meson", "introspect", "--tests", "--targets", sys.argv[1]],
                                 check=True, capture_output=True, text=True).stdout)
build = os.path.abspath(sys.argv[1])  # ninja names its targets relative to the build dir
files = {t["id"]: [os.path.relpath(f, build) for f in t["filename"]] for t in info["targets"]}
want = {s.split(":")[-1] for s in sys.argv[2:]}
outs = {f for t in info["tests"] if want & {s.split(":")[-1] for s in t["suite"]}
        for d in t["depends"] for f in files[d]}
if not outs:
    sys.exit(f"scripts/test.sh: no test of PKV_SUITES ({' '.join(want)}) builds anything; "
             f"meson test --list -C {sys.argv[1]} names the suites")
print(" ".join(sorted(outs)))
PY
)
  BUILD_TARGETS=$targets bash scripts/build.sh
fi
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
