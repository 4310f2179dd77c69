#!/bin/sh
# build.sh SRCROOT OUTDIR - builds (or brings up to date) the fuzz harnesses in OUTDIR with clang
# and libFuzzer, one build at a time (flock). Fails naming the Debian packages when they are missing.
set -eu
src=$1 out=$2
cxx=$(command -v clang++-14 || command -v clang++ || true)
if [ -z "$cxx" ]; then
  echo "tests/fuzz: clang++ not found: install the Debian packages clang-14 libclang-rt-14-dev" >&2
  exit 1
fi
rt=$("$cxx" -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a
if [ ! -f "$rt" ]; then
  echo "tests/fuzz: libFuzzer ($rt) not found: install the Debian package libclang-rt-14-dev" >&2
  exit 1
fi
for tool in make flock; do
  command -v $tool >/dev/null || { echo "tests/fuzz: '$tool' not found (Debian make, util-linux)" >&2; exit 1; }
done
mkdir -p "$out"
exec flock "$out/.lock" make -s -j2 -f "$src/tests/fuzz/fuzz.mk" SRC="$src" OUT="$out" CXX="$cxx" all
