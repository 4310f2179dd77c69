#!/bin/sh
# The C# binding used as its README says, from a new project outside the repository, against an
# installed pkv (meson install): Pkv.dll built with the README's mcs command, the demo
# (examples/Demo.cs) built against it, run on mono with libpkv.so.1 from PREFIX only: first
# LD_LIBRARY_PATH at PREFIX's libdir, then at a directory holding libpkv.so.1 alone (a runtime
# package has no libpkv.so symlink). Its output must be examples/demo.c's, built here against
# the same prefix.
#
# Usage: install_test.sh PREFIX WORKDIR
#   PREFIX   where pkv was installed (meson install; with --destdir D, PREFIX is D/usr/local)
#   WORKDIR  an empty or new directory outside the repository, for the project
# Exit: 0 pass, 1 fail, 77 a toolchain is missing (mcs, mono, pkg-config, a C compiler).
set -u
[ $# -eq 2 ] || { echo "usage: $0 PREFIX WORKDIR" >&2; exit 1; }
lang=csharp tools="mcs mono pkg-config cc" packages="mono-mcs, mono-runtime, pkg-config, gcc"
# shellcheck source=../install_hook.sh
. "$(dirname "$0")/../install_hook.sh"

# Only the prefix: nothing from the build tree or the caller's environment.
unset PKV_LIBRARY PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR MONO_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH PKG_CONFIG_DISABLE_UNINSTALLED=1
pcprefix=$(sed -n 's/^prefix=//p' "$pc")
if [ "$pcprefix" != "$prefix" ]; then  # a staged install (--destdir D): D is the sysroot
  case "$prefix" in
    *"$pcprefix") export PKG_CONFIG_SYSROOT_DIR="${prefix%"$pcprefix"}" ;;
    *) fail "$pc says prefix=$pcprefix, not $prefix" ;;
  esac
fi
cflags=$(pkg-config --cflags pkv) || fail "pkg-config does not find pkv"

# The new project, as the README writes it: the binding's sources into Pkv.dll, the program
# against it.
rm -rf "$work/app" "$work/runtime" "$work/ref"
mkdir -p "$work/app" "$work/runtime" "$work/ref"
cp "$here/examples/Demo.cs" "$work/app/Demo.cs"
cd "$work/app" || fail "cd $work/app"
mcs -unsafe -target:library -out:Pkv.dll "$here"/*.cs || fail "mcs Pkv.dll"
mcs -r:Pkv.dll -r:System.Numerics.dll -out:Demo.exe Demo.cs || fail "mcs Demo.exe"
ln -s "$lib" "$work/runtime/libpkv.so.1"  # the library alone, as a runtime package installs it

# shellcheck disable=SC2086,SC2046  # the flags are words
cc -O2 -o "$work/ref/demo" "$root/examples/demo.c" $cflags $(pkg-config --libs pkv) -lm \
  || fail "cc examples/demo.c against the prefix"
for run in "42 $libdir" "7 $work/runtime"; do
  seed=${run%% *} dir=${run#* }
  want=$(LD_LIBRARY_PATH=$libdir "$work/ref/demo" "$seed") || fail "examples/demo $seed"
  got=$(LD_LIBRARY_PATH=$dir mono Demo.exe "$seed") || fail "the C# demo, seed $seed, LD_LIBRARY_PATH=$dir"
  [ "$got" = "$want" ] || fail "seed $seed (LD_LIBRARY_PATH=$dir): the C# demo printed
$got
examples/demo printed
$want"
done
# Without the library the demo says where it looked and what to set (unless the system has a
# libpkv.so.1 of its own).
if ! env -u LD_LIBRARY_PATH mono Demo.exe 1 >/dev/null 2>"$work/noload.txt"; then
  grep -q "LD_LIBRARY_PATH" "$work/noload.txt" || fail "the load error does not name LD_LIBRARY_PATH: $(cat "$work/noload.txt")"
fi
echo "csharp install test: ok (libpkv.so.1 from $libdir, then alone in $work/runtime; demo output equal to examples/demo's)"
