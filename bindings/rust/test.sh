#!/bin/sh
# test.sh - the Rust binding's meson tests (suite 'bindings'), one per MODE:
#   gen    pkv-sys/src/bindings.rs is what gen.sh makes of today's pkv.h, and the crates'
#          version is pkv.h's (version.sh)
#   cargo  cargo test (hash vectors, statuses, NULL handles, NO_SPACE, demo vs C, ...)
#   demo   cargo run --example demo prints what the C demo prints, for several seeds
#   package  cargo package --offline of both crates (metadata complete, each builds from its
#          .crate alone); pkv's dependency pkv-sys, unpublished, is found in a directory
#          registry overlaid on Debian's: the packaged pkv-sys next to Debian's crates
#
# Usage: test.sh MODE LIBPKV C_DEMO TARGET_DIR
#   LIBPKV: path of libpkv.so.1 (PKV_LIBRARY); C_DEMO: build/examples/demo;
#   TARGET_DIR: CARGO_TARGET_DIR, inside the build directory so the source tree stays clean, one
#   per MODE: meson runs the modes side by side, and one's cargo must never rebuild or package
#   into the directory another's is running from.
# cargo and bindgen are looked up on PATH when the test runs, not when meson configured the build,
# so installing one needs no reconfigure; a missing one fails the test (CI must install them).
set -eu
mode=$1 lib=$2 c_demo=$3 target=$4
cargo=$(command -v cargo || true)
bindgen=$(command -v bindgen || true)
here=$(cd "$(dirname "$0")" && pwd)

export PKV_LIBRARY="$lib"
export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CARGO_TARGET_DIR="$target"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"  # shared CI machines: stay modest

need() {
  if [ -z "$2" ]; then
    echo "test.sh: $1 not found (apt-get install $1); the Rust binding cannot be tested" >&2
    exit 1
  fi
}

# Whitespace and trailing commas are rustfmt's (present or not, any version), not bindgen's.
tokens() { tr -d '[:space:]' < "$1" | sed -e 's/,\([])}>]\)/\1/g'; }

case "$mode" in
gen)
  need bindgen "$bindgen"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  BINDGEN="$bindgen" "$here/gen.sh" "$tmp/bindings.rs"
  committed="$here/pkv-sys/src/bindings.rs"
  if ! cmp -s "$tmp/bindings.rs" "$committed" && [ "$(tokens "$tmp/bindings.rs")" != "$(tokens "$committed")" ]; then
    diff -u "$committed" "$tmp/bindings.rs" | head -n 60 >&2 || true
    echo "test.sh: $committed is stale: run bindings/rust/gen.sh and commit the result" >&2
    exit 1
  fi
  echo "bindings.rs matches pkv.h"
  "$here/version.sh"
  ;;
cargo)
  need cargo "$cargo"
  cd "$here"
  PKV_DEMO="$c_demo" "$cargo" test --offline --locked
  ;;
demo)
  need cargo "$cargo"
  cd "$here"
  "$cargo" build --offline --locked --example demo
  for seed in 42 0 7 12345 18446744073709551615; do
    "$cargo" run --offline --locked -q --example demo -- "$seed" > "$target/demo-rust.txt"
    "$c_demo" "$seed" > "$target/demo-c.txt"
    if ! diff -u "$target/demo-c.txt" "$target/demo-rust.txt"; then
      echo "test.sh: the Rust demo differs from the C demo for seed $seed" >&2
      exit 1
    fi
  done
  cat "$target/demo-rust.txt"
  ;;
package)
  need cargo "$cargo"
  cd "$here"
  # --allow-dirty: the test checks the crates, not whether the working tree is committed
  "$cargo" package --offline --locked --allow-dirty -p pkv-sys
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  registry=$(sed -n 's/^directory = "\(.*\)"$/\1/p' .cargo/config.toml)
  mkdir "$tmp/registry"
  for crate in "$registry"/*; do ln -s "$crate" "$tmp/registry/"; done
  version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pkv-sys/Cargo.toml | head -n 1)
  crate="$target/package/pkv-sys-$version.crate"
  tar -xzf "$crate" -C "$tmp/registry"
  printf '{"package":"%s","files":{}}' "$(sha256sum < "$crate" | cut -d' ' -f1)" \
    > "$tmp/registry/pkv-sys-$version/.cargo-checksum.json"
  "$cargo" package --offline --allow-dirty -p pkv --config "source.debian.directory=\"$tmp/registry\""
  ;;
*)
  echo "test.sh: unknown mode '$mode' (gen, cargo, demo or package)" >&2
  exit 2
  ;;
esac
