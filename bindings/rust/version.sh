#!/bin/sh
# version.sh - the crates' version is pkv.h's PKV_VERSION_MAJOR.MINOR.PATCH, as the Python
# package's __version__ is: never written by hand. With --write (gen.sh runs it so) it writes
# that version into both Cargo.toml, pkv's dependency on pkv-sys and Cargo.lock; without, it
# checks them (test.sh gen) and fails naming each file that differs.
#
# Usage: version.sh [--write]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
header="$here/../../include/pkv/pkv.h"

part() {
  n=$(sed -n "s/^#define PKV_VERSION_$1 \([0-9][0-9]*\)\$/\1/p" "$header")
  [ -n "$n" ] || { echo "version.sh: no PKV_VERSION_$1 in $header" >&2; exit 1; }
  echo "$n"
}
version="$(part MAJOR).$(part MINOR).$(part PATCH)"

# Each place a version is written: a file and the sed address of its line.
places='pkv-sys/Cargo.toml|/^\[package\]/,/^\[/s/^version = "[^"]*"/version = "@V@"/
pkv/Cargo.toml|/^\[package\]/,/^\[/s/^version = "[^"]*"/version = "@V@"/
pkv/Cargo.toml|s/^\(pkv-sys = {.*version = "\)[^"]*"/\1@V@"/
Cargo.lock|/^name = "pkv"$/,/^$/s/^version = "[^"]*"/version = "@V@"/
Cargo.lock|/^name = "pkv-sys"$/,/^$/s/^version = "[^"]*"/version = "@V@"/'

status=0
printf "%s\n" "$places" | while IFS='|' read -r file script; do
  script=$(printf "%s\n" "$script" | sed "s/@V@/$version/")
  if [ "${1:-}" = --write ]; then
    sed -i "$script" "$here/$file"
  fi
  if ! sed "$script" "$here/$file" | cmp -s - "$here/$file" || ! grep -q "\"$version\"" "$here/$file"; then
    echo "version.sh: $file does not carry pkv.h's version $version: run bindings/rust/gen.sh" >&2
    exit 1
  fi
done || status=1
[ $status -eq 0 ] && echo "crates at pkv.h's version $version"
exit $status
