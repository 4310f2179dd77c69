# Sourced by bindings/<lang>/install_test.sh (the `install` suite's hooks): the arguments and the
# installed prefix, the same for every binding. Before sourcing, set `lang` (for messages) and
# `tools` (the commands the hook needs, with the Debian packages named in `packages`).
# Sets: here root prefix work pc lib libdir; defines skip() and fail().
#   install_test.sh PREFIX WORKDIR   (tests/install/install_test.sh documents the contract)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
skip() { echo "$lang install test: skipped: $*" >&2; exit 77; }
fail() { echo "$lang install test: FAIL: $*" >&2; exit 1; }
for tool in $tools; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool not found (Debian: $packages)"
done
prefix=$(cd "$1" 2>/dev/null && pwd) || fail "no PREFIX $1"
mkdir -p "$2" || fail "cannot make WORKDIR $2"
work=$(cd "$2" && pwd) || fail "no WORKDIR $2"
case "$work/" in "$root"/*) rmdir "$work" 2>/dev/null; fail "WORKDIR $work is inside the repository" ;; esac

pc=$(find "$prefix" -path '*/pkgconfig/pkv.pc' | head -n 1)
lib=$(find "$prefix" -name libpkv.so.1 | head -n 1)
[ -n "$pc" ] || fail "no pkgconfig/pkv.pc under $prefix"
[ -n "$lib" ] || fail "no libpkv.so.1 under $prefix"
libdir=$(dirname "$lib")
