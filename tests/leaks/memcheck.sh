#!/bin/sh
# memcheck.sh VALGRIND_ARGS... PROGRAM ARGS... - valgrind, looked up when the test runs (not when
# meson configured the build), so installing it needs no reconfigure; missing, the test fails
# naming the package.
command -v valgrind >/dev/null 2>&1 || {
  echo "memcheck.sh: valgrind not found: install the Debian package valgrind" >&2
  exit 1
}
exec valgrind "$@"
