#!/bin/sh
# Every tracked .c .cpp .h .cu .cuh file but the generated ones ("DO NOT EDIT" in their first
# lines) is formatted as .clang-format says: clang-format --dry-run --Werror changes nothing.
# Skipped (77) only where clang-format is not installed (Debian: clang-format).
# Usage: check_format.sh SOURCE_ROOT
set -u
root=$1
cf=$(command -v clang-format-14 || command -v clang-format) || {
  echo "clang-format is not installed (Debian package clang-format): skipped"
  exit 77
}
cd "$root" || exit 1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# The check has teeth: a badly formatted file under this .clang-format fails it.
cp .clang-format "$tmp/.clang-format"
printf 'int  f( int *a ){return *a;}\n' >"$tmp/bad.c"
if "$cf" --dry-run --Werror "$tmp/bad.c" >/dev/null 2>&1; then
  echo "FAIL: $cf --dry-run --Werror accepts a misformatted file: the check would see nothing"
  exit 1
fi

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files '*.c' '*.cpp' '*.h' '*.cu' '*.cuh' >"$tmp/all"
else  # a source tarball: the same kinds of files, found
  find . -path ./build -prune -o -path './build-*' -prune -o -path ./.git -prune -o -type f \
    \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print |
    sed 's|^\./||' >"$tmp/all"
fi
: >"$tmp/files"
while IFS= read -r f; do
  [ -f "$f" ] || continue  # deleted in the working tree, not yet committed
  head -n 5 "$f" | grep -q "DO NOT EDIT" && continue
  printf '%s\n' "$f" >>"$tmp/files"
done <"$tmp/all"
n=$(wc -l <"$tmp/files")
if [ "$n" -lt 50 ]; then
  echo "FAIL: only $n files found under $root: is this pkv's source tree?"
  exit 1
fi

bad=0
while IFS= read -r f; do
  if ! "$cf" --dry-run --Werror "$f" >"$tmp/log" 2>&1; then
    bad=$((bad + 1))
    echo "not formatted: $f"
    head -n 12 "$tmp/log"
  fi
done <"$tmp/files"
echo "$("$cf" --version | head -n 1): $n files checked, $bad not formatted"
if [ "$bad" -ne 0 ]; then
  echo "Format them with: clang-format -i FILE... (see .clang-format)"
  exit 1
fi
