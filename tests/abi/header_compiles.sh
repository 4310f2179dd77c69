#!/bin/sh
# pkv.h alone compiles as C99 and as C++11/C++17 with -pedantic -Werror -Wall -Wextra, and includes
# nothing but <stddef.h> and <stdint.h> (DESIGN.md section 3, rule 1).
# Usage: header_compiles.sh "CC" "CXX" INCLUDE_DIR
set -u
cc=$1
cxx=$2
inc=$3
header="$inc/pkv/pkv.h"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failed=0
passed=0

check() { # name, command...
  name=$1
  shift
  if "$@" >"$tmp/log" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $name: $*"
    cat "$tmp/log"
  fi
}

# The header first and alone, then a use of what it declares.
cat >"$tmp/use.c" <<'SRC'
#include <pkv/pkv.h>
int pkv_header_use(void);
int pkv_header_use(void)
{
  pkv_engine_params p;
  pkv_batch_view v;
  struct pkv_seq_info info; /* the struct shares its name with the call, as stat() does */
  pkv_status (*get_info)(pkv_engine *, uint64_t, struct pkv_seq_info *) = pkv_seq_info;
  pkv_status s = PKV_OK;
  p.struct_size = (uint32_t)sizeof p;
  v.num_seqs = 0;
  info.num_tokens = 0;
  return (int)(s + PKV_ERR_INTERNAL + PKV_ABI_VERSION + PKV_DEVICE_CUDA + PKV_DTYPE_BF16 +
               PKV_DEBUG_CONSTANT_HASH + PKV_BUDGET_FIXED_BLOCKS + (int)p.struct_size +
               (int)v.num_seqs + (int)info.num_tokens) + (int)pkv_version() + (get_info != 0);
}
SRC
cp "$tmp/use.c" "$tmp/use.cpp"

# shellcheck disable=SC2086 # the compiler commands may hold several words (ccache)
check "C99" $cc -std=c99 -pedantic -Werror -Wall -Wextra -Wstrict-prototypes \
  -I"$inc" -c "$tmp/use.c" -o "$tmp/c99.o"
# shellcheck disable=SC2086
check "C11" $cc -std=c11 -pedantic -Werror -Wall -Wextra -I"$inc" -c "$tmp/use.c" -o "$tmp/c11.o"
for std in c++11 c++17; do
  # shellcheck disable=SC2086
  check "$std" $cxx -std=$std -pedantic -Werror -Wall -Wextra -I"$inc" -c "$tmp/use.cpp" \
    -o "$tmp/$std.o"
done

# The C and C++ objects agree on the symbol (extern "C" around every declaration).
check "extern C" grep -q "extern \"C\"" "$header"

includes=$(grep -E '^[[:space:]]*#[[:space:]]*include' "$header" |
  sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*//' | sort | tr '\n' ' ')
check "includes only stddef.h and stdint.h" test "$includes" = "<stddef.h> <stdint.h> "

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
