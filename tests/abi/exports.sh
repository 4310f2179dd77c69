#!/bin/sh
# libpkv.so exports only pkv_* symbols, has SONAME libpkv.so.<PKV_ABI_VERSION of pkv.h>, and exports
# every PKV_API function that pkv.h declares (DESIGN.md section 3, rule 2).
# Usage: exports.sh LIBPKV_PATH PKV_H
set -u
lib=$1
header=$2
failed=0
passed=0
ok() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL $*"
}

exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | grep -v '^PKV_1\.0$' |
  sort -u)
[ -n "$exported" ] && ok || fail "nm found no exported symbols in $lib"
for sym in $exported; do
  case $sym in
  pkv_*) ok ;;
  *) fail "exported symbol $sym does not start with pkv_" ;;
  esac
done

abi=$(sed -n 's/^#define PKV_ABI_VERSION \([0-9][0-9]*\)$/\1/p' "$header")
[ -n "$abi" ] && ok || fail "no #define PKV_ABI_VERSION in $header"
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ "$soname" = "libpkv.so.$abi" ] && ok || fail "SONAME is '$soname', want libpkv.so.$abi (PKV_ABI_VERSION)"

declared=$(grep -E '^PKV_API' "$header" | sed -n 's/^PKV_API[^(]*[ *]\(pkv_[a-z0-9_]*\)(.*/\1/p' |
  sort -u)
count=$(echo "$declared" | grep -c .)
[ "$count" -ge 30 ] && ok || fail "parsed only $count PKV_API functions from $header"
for fn in $declared; do
  if echo "$exported" | grep -qx "$fn"; then ok; else fail "$fn is declared in pkv.h but not exported"; fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
