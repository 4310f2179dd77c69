#!/bin/sh
# Meson test 'go': go vet and go test ./... (the package and cmd/demo), offline, with the Go
# caches in the build directory. Usage: run_tests.sh SOURCE_ROOT LIB_DIR WORK_DIR
# (env: LD_LIBRARY_PATH, PKV_DEMO, PKV_HASH_VECTORS, set by meson)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "go not found: install golang-go" >&2; exit 1; }
mkdir -p "$3/go/cache" "$3/go/path"
export GOCACHE="$3/go/cache" GOPATH="$3/go/path" GOFLAGS=-buildvcs=false GOPROXY=off \
  GO111MODULE=on CGO_ENABLED=1 CGO_CFLAGS="-I$1/include" CGO_LDFLAGS="-L$2"
cd "$here"
go vet ./...
exec go test -count=1 -v ./...
