#!/bin/sh
# The Go binding used as its README says, from a new project outside the repository, against an
# installed pkv (meson install): a go.mod that requires pkv.local/pkv and replaces it with this
# directory, cgo's flags from pkg-config (PKG_CONFIG_PATH at PREFIX's pkv.pc), libpkv.so.1 from
# LD_LIBRARY_PATH at PREFIX's libdir, offline (GOPROXY=off). The project is the demo
# (cmd/demo/main.go); its output must be examples/demo.c's, built here against the same prefix.
#
# Usage: install_test.sh PREFIX WORKDIR
#   PREFIX   where pkv was installed (meson install; with --destdir D, PREFIX is D/usr/local)
#   WORKDIR  an empty or new directory outside the repository, for the project
# Exit: 0 pass, 1 fail, 77 a toolchain is missing (go, pkg-config, a C compiler).
set -u
[ $# -eq 2 ] || { echo "usage: $0 PREFIX WORKDIR" >&2; exit 1; }
lang=go tools="go pkg-config cc" packages="golang-go, pkg-config, gcc"
# shellcheck source=../install_hook.sh
. "$(dirname "$0")/../install_hook.sh"

# Only the prefix: nothing from the build tree or the caller's environment.
unset PKV_LIBRARY CGO_CFLAGS CGO_CPPFLAGS CGO_LDFLAGS GOFLAGS PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH PKG_CONFIG_DISABLE_UNINSTALLED=1
export LD_LIBRARY_PATH="$libdir"
# A staged install (meson install --destdir D) keeps the real prefix in pkv.pc: D is the sysroot.
pcprefix=$(sed -n 's/^prefix=//p' "$pc")
if [ "$pcprefix" != "$prefix" ]; then
  case "$prefix" in
    *"$pcprefix") export PKG_CONFIG_SYSROOT_DIR="${prefix%"$pcprefix"}" ;;
    *) fail "$pc says prefix=$pcprefix, not $prefix" ;;
  esac
fi
cflags=$(pkg-config --cflags pkv) || fail "pkg-config does not find pkv"
case "$cflags" in *"-I$prefix/"*) ;; *) fail "pkg-config --cflags pkv is '$cflags', not under $prefix" ;; esac

# Offline: no module proxy, nothing to download (the binding needs only the standard library).
export GOPROXY=off GOFLAGS="-mod=mod -buildvcs=false" GO111MODULE=on CGO_ENABLED=1
# A build cache of its own, as a new user's: go does not hash pkg-config's output into its cache
# keys, so a package cached by an earlier run would keep that run's -L (a prefix since deleted,
# or the build tree) and link against it, or fail to.
export GOCACHE="$work/.gocache"
[ -n "$(go env GOPATH 2>/dev/null)" ] || export GOPATH="$work/.gopath"

# The new project, as the README writes it: it requires the binding at the installed pkv's
# version, which is the package's (BindingVersion, generated from pkv.h).
version=$(pkg-config --modversion pkv) || fail "pkg-config --modversion pkv"
rm -rf "$work/app" "$work/ref"
mkdir -p "$work/app/where" "$work/ref"
cat > "$work/app/go.mod" <<EOM
module example.com/pkvdemo

go 1.19

require pkv.local/pkv v$version

replace pkv.local/pkv => $here
EOM
cp "$here/cmd/demo/main.go" "$work/app/main.go"
cat > "$work/app/where/main.go" <<'EOM'
// Prints the file libpkv was loaded from, then the package's version.
package main

import (
	"fmt"
	"os"

	"pkv.local/pkv"
)

func main() {
	if err := pkv.LoadError(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(pkv.LibraryPath())
	fmt.Println(pkv.BindingVersion)
}
EOM
cd "$work/app" || fail "cd $work/app"
go build -o demo . || fail "go build of the demo"
go build -o where-lib ./where || fail "go build of where"
where=$(./where-lib) || fail "the program does not load libpkv.so.1"
loaded=$(echo "$where" | sed -n 1p) bound=$(echo "$where" | sed -n 2p)
case "$loaded" in "$libdir"/*) ;; *) fail "libpkv loaded from $loaded, not from $libdir" ;; esac
[ "$bound" = "$version" ] || fail "pkv.BindingVersion is $bound, the installed pkv $version"

# The reference: examples/demo.c built against the same prefix.
# shellcheck disable=SC2086,SC2046  # the flags are words
cc -O2 -o "$work/ref/demo" "$root/examples/demo.c" $cflags $(pkg-config --libs pkv) -lm \
  || fail "cc examples/demo.c against the prefix"
for seed in 42 7; do
  want=$("$work/ref/demo" $seed) || fail "examples/demo $seed"
  got=$(./demo $seed) || fail "the Go demo, seed $seed"
  [ "$got" = "$want" ] || fail "seed $seed: the Go demo printed
$got
examples/demo printed
$want"
done
# Without LD_LIBRARY_PATH the program says where it looked and what to set (unless the system
# has a libpkv.so.1 of its own).
if ! env -u LD_LIBRARY_PATH ./where-lib >/dev/null 2>"$work/noload.txt"; then
  grep -q "LD_LIBRARY_PATH" "$work/noload.txt" || fail "the load error does not name LD_LIBRARY_PATH: $(cat "$work/noload.txt")"
fi
echo "go install test: ok (libpkv from $loaded; demo output equal to examples/demo's)"
