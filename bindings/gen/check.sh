#!/bin/sh
# Meson test 'gen_up_to_date': regenerates the bindings' raw declarations from pkv.h into a
# temporary directory and fails if the committed ones differ.
# Usage: check.sh SOURCE_ROOT WORK_DIR
set -eu
src=$1
work=$2/gen
py=${PKV_GEN_PYTHON:-/usr/bin/python3}
if ! "$py" -c 'import clang.cindex' 2>/dev/null; then
  echo "$py cannot import clang.cindex: install python3-clang-14" >&2
  exit 1
fi
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/bindings/gen/gen.py" --header "$src/include/pkv/pkv.h" --out "$work"
status=0
for f in python/pkv/_raw.py csharp/Native.g.cs csharp/Version.g.props go/consts_gen.go go/types_gen.go go/layout_gen.go \
    go/load_gen.c; do
  if ! diff -u "$src/bindings/$f" "$work/$f"; then
    echo "bindings/$f is out of date: run /usr/bin/python3 bindings/gen/gen.py" >&2
    status=1
  fi
done
exit $status
