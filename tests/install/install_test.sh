#!/bin/sh
# Suite 'install': pkv as a user gets it. `meson install` of this build into a temporary
# directory, then, against that prefix only (never the build tree):
#   c        what is installed (the library, its SONAME links, pkv.h, pkv.pc, the pkv tool, and
#            nothing else); examples/basic.c and examples/demo.c copied out and built ONLY with
#            `pkg-config --cflags --libs pkv`; their output equals the build's own examples'; the
#            installed `pkv --version`
#   LANG     (python, rust, go, csharp) the binding's hook, bindings/LANG/install_test.sh
#
# Usage: install_test.sh WHAT MESON BUILD_DIR SOURCE_ROOT CC EXAMPLE_BASIC EXAMPLE_DEMO HAVE_TOOL
#   CC: the C compiler command (words); EXAMPLE_*: the build's own examples (their output is the
#   reference); HAVE_TOOL: 1 when the build has the pkv tool (option tools).
#
# The hook contract: `sh bindings/LANG/install_test.sh PREFIX WORKDIR` builds a new project in
# WORKDIR (outside the repository) that depends on the binding the way its README says, and runs
# the binding's example there against the library installed in PREFIX. Exit 0: pass; 77: skip,
# only when the language's toolchain is missing (scripts/test.sh installs them all, so CI never
# skips); anything else: fail. The environment holds no path into the build tree (no
# LD_LIBRARY_PATH, no PKV_LIBRARY); it has:
#   PKG_CONFIG_PATH         PREFIX's pkgconfig directory (where a user's would point after
#                           installing to PREFIX), so `pkg-config --variable=libdir pkv` is the
#                           installed library's directory
#   PKV_INSTALL_DEMO_OUTPUT a file with the output of examples/demo.c built against PREFIX, for
#                           seed 42: what the binding's demo must print
#   PKV_SOURCE_ROOT         the repository (the binding's sources: a path dependency, pip's input)
# Each hook's whole output is in the meson test log.
set -eu
what=$1 meson=$2 build=$3 src=$4 cc=$5 ref_basic=$6 ref_demo=$7 have_tool=$8

# A binding without its install test fails.
missing_hook_rc=1

# A user's environment: nothing from meson or the developer's shell points at a build tree.
unset LD_LIBRARY_PATH PKV_LIBRARY PKV_DEMO PKV_HASH_VECTORS PKG_CONFIG_PATH PKG_CONFIG_LIBDIR \
      PKG_CONFIG_SYSROOT_DIR CARGO_TARGET_DIR PYTHONPATH GOFLAGS MONO_PATH 2>/dev/null || true

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pkv-install-$what.XXXXXX")
cleanup() {
  if [ "${PKV_KEEP_INSTALL_TEST:-}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
fail() {
  echo "install_test.sh ($what): $*" >&2
  exit 1
}

# --- install. A staged install (--destdir) is made a prefix of its own: pkv.pc names the prefix
# once (prefix=; includedir and libdir are relative to it), so rewriting that line gives the tree
# that `meson setup --prefix=$PREFIX && meson install` gives, without a second build.
"$meson" install -C "$build" --no-rebuild --destdir "$tmp/stage" > "$tmp/meson-install.log" 2>&1 ||
  { cat "$tmp/meson-install.log" >&2; fail "meson install failed"; }
pc=$(find "$tmp/stage" -name pkv.pc -path '*/pkgconfig/*')
[ -n "$pc" ] || fail "no pkv.pc installed"
configured=$(sed -n 's/^prefix=//p' "$pc")
prefix="$tmp/stage$configured"
sed "s|^prefix=.*|prefix=$prefix|" "$pc" > "$pc.new" && mv "$pc.new" "$pc"
export PKG_CONFIG_PATH="${pc%/pkv.pc}"
libdir=$(pkg-config --variable=libdir pkv) || fail "pkg-config does not find pkv in $PKG_CONFIG_PATH"
case "$libdir" in "$prefix"/*) ;; *) fail "pkv.pc's libdir $libdir is outside $prefix" ;; esac
# examples/demo.c against the prefix: the output every binding's demo must print
mkdir "$tmp/c"
cp "$src/examples/basic.c" "$src/examples/demo.c" "$tmp/c/"
for example in basic demo; do
  # shellcheck disable=SC2046,SC2086  # $cc and pkg-config's output are lists of words
  $cc -o "$tmp/c/$example" "$tmp/c/$example.c" $(pkg-config --cflags --libs pkv) ||
    fail "examples/$example.c does not build with \`pkg-config --cflags --libs pkv\`"
done
LD_LIBRARY_PATH="$libdir" "$tmp/c/demo" 42 > "$tmp/demo-42.txt" || fail "the installed C demo failed"

case "$what" in
c)
  echo "installed under $prefix:"
  (cd "$prefix" && find . ! -type d | sed 's|^\./||' | sort) | tee "$tmp/installed.txt"
  rel=${libdir#"$prefix"/}
  version=$(pkg-config --modversion pkv)
  abi=$(sed -n 's/^#define PKV_ABI_VERSION \([0-9]*\)$/\1/p' "$prefix/include/pkv/pkv.h")
  {
    [ "$have_tool" = 1 ] && echo bin/pkv
    echo include/pkv/pkv.h
    echo "$rel/libpkv.so"
    echo "$rel/libpkv.so.$abi"
    echo "$rel/libpkv.so.$abi.${version#*.}"
    echo "$rel/pkgconfig/pkv.pc"
  } | sort > "$tmp/expected.txt"
  diff -u "$tmp/expected.txt" "$tmp/installed.txt" ||
    fail "installed files differ from the expected ones (- expected, + installed)"
  [ -L "$libdir/libpkv.so" ] && [ -L "$libdir/libpkv.so.$abi" ] ||
    fail "libpkv.so and libpkv.so.$abi must be symlinks to libpkv.so.$abi.${version#*.}"
  # the SONAME is the ABI major, the name the bindings load
  if command -v readelf > /dev/null 2>&1; then
    readelf -d "$libdir/libpkv.so.$abi" | grep -q "SONAME.*\[libpkv\.so\.$abi\]" ||
      fail "the SONAME is not libpkv.so.$abi"
  fi
  grep -q "^Cflags: -I\${includedir}\$" "$pc" || fail "pkv.pc: Cflags must be -I\${includedir} (#include <pkv/pkv.h>)"
  echo "pkg-config --cflags --libs pkv: $(pkg-config --cflags --libs pkv)"

  # a program linked against the prefix finds libpkv only when told where (not on the loader's
  # path by default): a user of a prefix outside the system's library directories sets
  # LD_LIBRARY_PATH (or an rpath); a system prefix needs `ldconfig`
  if "$tmp/c/basic" > "$tmp/basic-unset.txt" 2>&1; then
    echo "note: a libpkv.so.1 is on the dynamic loader's path (installed system-wide?)"
  else
    echo "without LD_LIBRARY_PATH, as expected: $(tail -n 1 "$tmp/basic-unset.txt")"
  fi
  LD_LIBRARY_PATH="$libdir" "$tmp/c/basic" > "$tmp/basic.txt" || fail "the installed basic example failed"
  "$ref_basic" > "$tmp/basic-ref.txt"
  diff -u "$tmp/basic-ref.txt" "$tmp/basic.txt" || fail "examples/basic against the prefix differs from the build's"
  "$ref_demo" 42 > "$tmp/demo-ref.txt"
  diff -u "$tmp/demo-ref.txt" "$tmp/demo-42.txt" || fail "examples/demo against the prefix differs from the build's"
  head -n 1 "$tmp/basic.txt"
  case "$(head -n 1 "$tmp/basic.txt")" in "pkv $version:"*) ;; *) fail "basic does not report pkv $version" ;; esac
  if [ "$have_tool" = 1 ]; then
    LD_LIBRARY_PATH="$libdir" "$prefix/bin/pkv" --version || fail "the installed pkv tool failed"
  fi
  echo "install: the C library, header, pkv.pc and tool work from $prefix"
  ;;
python | rust | go | csharp)
  hook="$src/bindings/$what/install_test.sh"
  if [ ! -f "$hook" ]; then
    echo "install_test.sh: bindings/$what/install_test.sh is missing: the $what binding has no" \
         "install test yet (see tests/install/install_test.sh for the hook contract)" >&2
    exit "$missing_hook_rc"
  fi
  mkdir "$tmp/work"
  export PKV_INSTALL_DEMO_OUTPUT="$tmp/demo-42.txt" PKV_SOURCE_ROOT="$src"
  rc=0
  sh "$hook" "$prefix" "$tmp/work" || rc=$?
  case $rc in
  0) echo "install: the $what binding works against $prefix" ;;
  77) echo "install: bindings/$what/install_test.sh skipped (its toolchain is missing)" ;;
  *) fail "bindings/$what/install_test.sh failed (exit $rc)" ;;
  esac
  exit $rc
  ;;
*)
  fail "unknown WHAT (c, python, rust, go or csharp)"
  ;;
esac
