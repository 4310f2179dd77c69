#!/bin/sh
# Meson test 'python': the Python binding's unittest suite (tests/), the example included.
# Usage: run_tests.sh PYTHON   (env: PKV_LIBRARY, PKV_DEMO, PKV_HASH_VECTORS, set by meson)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
"$1" -c 'import ctypes, unittest' || { echo "$1 cannot run the tests" >&2; exit 1; }
exec "$1" -m unittest discover -s "$here/tests" -t "$here/tests" -v
