#!/bin/sh
# Meson test 'go': go vet and go test ./... (the package and cmd/demo), offline, with the Go
# caches in the build directory. cgo finds pkv.h through pkg-config: the build directory's
# meson-uninstalled/pkv-uninstalled.pc, which pkg-config prefers to an installed pkv.pc; the
# package loads libpkv.so.1 from LD_LIBRARY_PATH (the build's src/).
# Usage: run_tests.sh SOURCE_ROOT LIB_DIR WORK_DIR PKG_CONFIG_DIR
# (env: LD_LIBRARY_PATH, PKV_DEMO, PKV_HASH_VECTORS, set by meson)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "go not found: install golang-go" >&2; exit 1; }
command -v pkg-config >/dev/null || { echo "pkg-config not found: install pkg-config" >&2; exit 1; }
mkdir -p "$3/go/cache" "$3/go/path"
export GOCACHE="$3/go/cache" GOPATH="$3/go/path" GOFLAGS=-buildvcs=false GOPROXY=off \
  GO111MODULE=on CGO_ENABLED=1 PKG_CONFIG_PATH="$4" LD_LIBRARY_PATH="$2"
unset PKV_LIBRARY  # the test loads libpkv.so.1 by its SONAME, as a program does
cd "$here"
go vet ./...
exec go test -count=1 -v ./...
