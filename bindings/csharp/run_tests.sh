#!/bin/sh
# Meson test 'csharp': builds Pkv.dll, the demo and the test runner with mcs, runs them on mono
# against a directory that holds libpkv.so.1 only (an installed runtime has no libpkv.so symlink).
# Usage: run_tests.sh WORK_DIR   (env: LD_LIBRARY_PATH, PKV_LIBRARY, PKV_DEMO, PKV_HASH_VECTORS,
# set by meson; PKV_LIBRARY is the built library)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=$1/csharp
for tool in mcs mono; do
  command -v $tool >/dev/null || { echo "$tool not found: install mono-mcs and mono-runtime" >&2; exit 1; }
done
rm -rf "$out/lib"
mkdir -p "$out/lib"
ln -s "$PKV_LIBRARY" "$out/lib/libpkv.so.1"
export LD_LIBRARY_PATH="$out/lib"
mcs -nologo -warnaserror -unsafe -target:library -out:"$out/Pkv.dll" "$here"/*.cs  # README's command
mcs -nologo -warnaserror -r:"$out/Pkv.dll" -r:System.Numerics.dll -out:"$out/Demo.exe" \
  "$here/examples/Demo.cs"
# Tests.exe: its assembly name, Tests, is the one Pkv.dll lets see its internals (the raw layer)
mcs -nologo -warnaserror -unsafe -r:"$out/Pkv.dll" -r:System.Core.dll -out:"$out/Tests.exe" "$here"/tests/*.cs
cd "$out"
exec mono --debug Tests.exe "$PKV_HASH_VECTORS" "$PKV_DEMO" "$out/Demo.exe"
