#!/bin/sh
# gen.sh - regenerates the raw declarations of pkv-sys from include/pkv/pkv.h with bindgen
# (Debian's `bindgen` CLI, 0.60; it needs libclang). The output is committed; the meson test
# `rust_bindgen` runs this script into a temporary file and fails when the two differ.
#
# Usage: gen.sh [OUT]   (default: pkv-sys/src/bindings.rs next to this script, and then the
#   crates' version is set to pkv.h's by version.sh --write)
#
# --dynamic-loading PkvLib: a struct of function pointers filled by libloading (dlopen), so no
#   link-time dependency on libpkv. A symbol the loaded library lacks (an older minor version)
#   is an Err field, which the safe crate turns into Status::Unsupported instead of a panic.
# The output is formatted by rustfmt (with ./rustfmt.toml) when bindgen finds one; the check
# (test.sh gen) ignores formatting, so a missing or other rustfmt does not fail it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
header="$here/../../include/pkv/pkv.h"
out="${1:-$here/pkv-sys/src/bindings.rs}"
BINDGEN="${BINDGEN:-bindgen}"

"$BINDGEN" "$header" \
  --allowlist-function 'pkv_.*' \
  --allowlist-type 'pkv_.*' \
  --allowlist-var 'PKV_.*' \
  --no-layout-tests \
  --size_t-is-usize \
  --dynamic-loading PkvLib \
  --rustfmt-configuration-file "$here/rustfmt.toml" \
  --output "$out"
if [ $# -eq 0 ]; then
  "$here/version.sh" --write
fi
