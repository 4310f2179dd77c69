#!/bin/sh
# The Python binding against an installed libpkv: the hook of the 'install' suite
# (tests/install/install_test.sh describes the contract). As README.md tells a user: a venv of
# Debian's Python, `pip install` of this directory (offline: the in-tree backend needs nothing),
# then the example, copied into a new project outside the repository, run with the installed
# package against the library in PREFIX, found through LD_LIBRARY_PATH or PKV_LIBRARY; then
# examples/serve.py (the scheduler, a FILE store and StoreAdmin) the same way.
#
# Usage: install_test.sh PREFIX WORKDIR   (env: PKG_CONFIG_PATH at PREFIX, PKV_INSTALL_DEMO_OUTPUT)
# Exit 0 pass, 77 when Debian's python3 or its venv module (python3-venv) is missing, else fail.
set -eu
prefix=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
python=/usr/bin/python3  # Debian's (python3-venv, python3-pip), not a python3 first on PATH

fail() {
  echo "bindings/python/install_test.sh: $*" >&2
  exit 1
}
skip() {
  echo "bindings/python/install_test.sh: $* (apt-get install python3-venv python3-pip)" >&2
  exit 77
}
[ -x "$python" ] || skip "$python is missing"
# pip as on a bare machine: no configured index, mirror or wheel directory to fall back on
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_NO_INDEX PIP_NO_BUILD_ISOLATION
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# the package, installed as README.md says, from a directory outside the repository
venv="$work/venv"
mkdir -p "$work/app"
cd "$work/app"
if ! "$python" -m venv --system-site-packages "$venv" > venv.log 2>&1; then
  cat venv.log >&2
  grep -q ensurepip venv.log && skip "$python has no venv module with pip"
  fail "$python -m venv failed"
fi
"$venv/bin/pip" install --quiet "$here" || fail "pip install of bindings/python failed"
"$venv/bin/pip" show pkv | sed -n 's/^\(Name\|Version\|Location\|License\): /  \1: /p'

# a new project: the example alone (outside the tree it imports the installed package)
cp "$here/examples/demo.py" "$work/app/demo.py"
libdir=$(pkg-config --variable=libdir pkv)
soname=libpkv.so.$(sed -n 's/^#define PKV_ABI_VERSION \([0-9]*\)$/\1/p' "$prefix/include/pkv/pkv.h")

# not found: the error names the library and the variable
if "$venv/bin/python" demo.py 42 > out-unset.txt 2> err-unset.txt; then
  echo "note: $soname is on the dynamic loader's path (installed system-wide?): load error not checked"
else
  tail -n 1 err-unset.txt
  grep -q "cannot load $soname" err-unset.txt && grep -q PKV_LIBRARY err-unset.txt ||
    fail "the load error names neither $soname nor PKV_LIBRARY"
  ! grep -q "build/src" err-unset.txt || fail "the installed package looked into a source tree's build/src"
fi

# found through LD_LIBRARY_PATH (the loader) and through PKV_LIBRARY; the same output as C
for how in "LD_LIBRARY_PATH=$libdir" "PKV_LIBRARY=$libdir/$soname"; do
  env "$how" "$venv/bin/python" demo.py 42 > out.txt || fail "the example failed with $how"
  diff -u "$PKV_INSTALL_DEMO_OUTPUT" out.txt || fail "with $how the example's output differs from the C demo's"
  # which package and which library this process used: the installed ones
  env "$how" "$venv/bin/python" -c '
import pkv
maps = open("/proc/self/maps").read().split()
print(pkv.__file__, pkv.__version__, sorted({p for p in maps if "/libpkv.so" in p}))' > used.txt
  read -r package version library < used.txt
  case "$package" in "$venv"/*) ;; *) fail "imported $package, not the venv's pkv" ;; esac
  case "$library" in "['$libdir/"*) ;; *) fail "loaded $library, not $libdir/$soname" ;; esac
  [ "$version" = "$(pkg-config --modversion pkv)" ] || fail "pkv.__version__ $version is not the library's"
  echo "with $how: $package $version, $library: the C demo's output"
done

# the serving example: the scheduler, a FILE store and its administration (StoreAdmin), installed
cp "$here/examples/serve.py" "$work/app/serve.py"
PKV_LIBRARY="$libdir/$soname" "$venv/bin/python" serve.py "$work/app/store" > serve.txt ||
  fail "examples/serve.py failed against the installed library"
grep -qx "verify: 4 good, 0 bad" serve.txt || { cat serve.txt >&2; fail "serve.py: not 4 good blocks"; }
echo "serve.py: $(tail -n 1 serve.txt)"
