#!/bin/sh
# The Rust binding against an installed libpkv: the hook of the 'install' suite
# (tests/install/install_test.sh describes the contract). As README.md tells a user: a new crate
# outside the repository with a path dependency on bindings/rust/pkv and the .cargo/config.toml
# that builds it offline from Debian's crate sources; its main.rs is the binding's example,
# run against the library in PREFIX, found through LD_LIBRARY_PATH or PKV_LIBRARY.
#
# Usage: install_test.sh PREFIX WORKDIR   (env: PKG_CONFIG_PATH at PREFIX, PKV_INSTALL_DEMO_OUTPUT)
# Exit 0 pass, 77 when cargo or Debian's crate sources (librust-libloading-dev) are missing.
set -eu
prefix=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
registry=/usr/share/cargo/registry

fail() {
  echo "bindings/rust/install_test.sh: $*" >&2
  exit 1
}
skip() {
  echo "bindings/rust/install_test.sh: $* (apt-get install cargo librust-libloading-dev)" >&2
  exit 77
}
command -v cargo > /dev/null 2>&1 || skip "cargo is missing"
ls -d "$registry"/libloading-0.7* > /dev/null 2>&1 || skip "$registry has no libloading 0.7"

# the new crate: README.md's Cargo.toml and .cargo/config.toml, the example as its main.rs
app="$work/app"
mkdir -p "$app/src" "$app/.cargo"
cat > "$app/Cargo.toml" << EOF
[package]
name = "pkv-user"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
pkv = { path = "$here/pkv" }
EOF
cat > "$app/.cargo/config.toml" << EOF
[source.crates-io]
replace-with = "debian"

[source.debian]
directory = "$registry"

[net]
offline = true
EOF
cp "$here/pkv/examples/demo.rs" "$app/src/main.rs"
cd "$app"
CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-2} cargo build --quiet || fail "cargo build of a crate depending on pkv failed"
bin="$app/target/debug/pkv-user"

libdir=$(pkg-config --variable=libdir pkv)
soname=libpkv.so.$(sed -n 's/^#define PKV_ABI_VERSION \([0-9]*\)$/\1/p' "$prefix/include/pkv/pkv.h")

# not found: the error names the library and the variable
if "$bin" 42 > out-unset.txt 2> err-unset.txt; then
  echo "note: $soname is on the dynamic loader's path (installed system-wide?): load error not checked"
else
  tail -n 1 err-unset.txt
  grep -q "cannot load $soname" err-unset.txt && grep -q PKV_LIBRARY err-unset.txt ||
    fail "the load error names neither $soname nor PKV_LIBRARY"
fi

# found through LD_LIBRARY_PATH (the loader) and through PKV_LIBRARY; the same output as C
for how in "LD_LIBRARY_PATH=$libdir" "PKV_LIBRARY=$libdir/$soname"; do
  env "$how" "$bin" 42 > out.txt || fail "the example failed with $how"
  diff -u "$PKV_INSTALL_DEMO_OUTPUT" out.txt || fail "with $how the example's output differs from the C demo's"
  # which libpkv the process loaded (glibc's loader tells): the installed one
  env "$how" LD_DEBUG=libs "$bin" 42 2> ld-debug.txt > /dev/null
  library=$(sed -n 's/.*calling init: \(.*libpkv\.so.*\)$/\1/p' ld-debug.txt | head -n 1)
  case "$library" in "$libdir"/*) ;; *) fail "with $how the process loaded '$library', not $libdir/$soname" ;; esac
  echo "with $how: $library, the C demo's output"
done
