#!/bin/sh
# test_store_tool.sh PKV_TOOL STORE_FILL - `pkv store stats|ls|verify|clear` on a directory that
# an engine filled (store_fill: 6 blocks): counts, listings (text, JSON, --keys-only, --limit),
# a damaged block found by verify (exit 1) and removed by --remove-bad, a crafted value whose
# header sizes wrap (bad, no crash), clear refused without
# --yes then done; usage errors exit 2 and a store that cannot be opened exits 1, each with a
# message. Then the same on a redis-server of the test's own, when one is installed.
set -u
tool=$1 fill=$2
tmp=$(mktemp -d)
redis_pid=""
cleanup() {
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0 failed=0

# expect RC DESCRIPTION ARGS...: the tool exits RC (stdout in $tmp/out, stderr in $tmp/err); a
# failure must say why on stderr.
expect() {
  want=$1 desc=$2
  shift 2
  timeout 60 "$tool" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  if [ $rc -ne "$want" ]; then
    failed=$((failed + 1))
    echo "FAIL $desc: exit $rc, want $want ($*)"
    sed 's/^/     /' "$tmp/err" | head -n 5
    return 1
  fi
  if [ "$want" -ne 0 ] && [ ! -s "$tmp/err" ]; then
    failed=$((failed + 1))
    echo "FAIL $desc: exit $rc without a message on stderr"
    return 1
  fi
  passed=$((passed + 1))
  echo "ok   $desc"
}

# says out|err PATTERN DESCRIPTION: the last run's stdout or stderr matches (grep -E).
says() {
  if grep -Eq -- "$2" "$tmp/$1"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL $3: $1 does not say /$2/"
    sed 's/^/     /' "$tmp/$1" | head -n 12
  fi
}

# lines PATTERN N DESCRIPTION: the last run's stdout has N lines matching.
lines() {
  n=$(grep -Ec -- "$1" "$tmp/out")
  if [ "$n" -eq "$2" ]; then passed=$((passed + 1)); else
    failed=$((failed + 1))
    echo "FAIL $3: $n lines match /$1/, want $2"
  fi
}

# The checks of one store named WHAT: the rest of the arguments give it (--dir D, or --redis H:P
# --prefix P); damage KEY (defined per store) makes the block of KEY (64 hex) bad.
run_store_checks() {
  what=$1
  shift
  expect 0 "$what: stats" store stats "$@" && says out "blocks +6\$" "$what: stats counts 6"
  expect 0 "$what: stats --json" store stats "$@" --json && says out '"num_blocks": 6,' "$what: stats JSON"
  expect 0 "$what: ls" store ls "$@" && lines ' good ' 6 "$what: ls shows 6 good blocks"
  says out "^\\(6 blocks\\)" "$what: ls total"
  expect 0 "$what: ls --json" store ls "$@" --json && says out '"num_entries": 6,' "$what: ls JSON"
  lines '"num_tokens": 4' 6 "$what: ls JSON tokens"
  expect 0 "$what: ls --keys-only --limit 2" store ls "$@" --keys-only --limit 2 &&
    lines '^[0-9a-f]{64} +[0-9]+$' 2 "$what: two keys"
  says out "--limit reached" "$what: --limit said"
  expect 0 "$what: verify" store verify "$@" && says out "good +6 " "$what: 6 good"

  "$tool" store ls "$@" --keys-only >"$tmp/keys" 2>/dev/null
  key=$(grep -Eo '^[0-9a-f]{64}' "$tmp/keys" | head -n 1)
  damage "$key"
  expect 1 "$what: verify finds the damaged block" store verify "$@" && says out "bad +1 " "$what: 1 bad"
  says err "1 bad blocks" "$what: verify explains"
  says out "first bad +$key: payload checksum" "$what: the first bad block and why"
  expect 1 "$what: verify --json" store verify "$@" --json && says out '"num_bad": 1,' "$what: verify JSON"
  expect 0 "$what: ls shows it" store ls "$@" && lines " bad +payload checksum" 1 "$what: ls bad line"
  expect 0 "$what: verify --remove-bad" store verify "$@" --remove-bad && says out "removed +1\$" "$what: removed 1"
  expect 0 "$what: verify after" store verify "$@" && says out "read +5\$" "$what: 5 left"
  expect 2 "$what: clear without --yes" store clear "$@" && says err "--yes" "$what: clear asks for --yes"
  expect 0 "$what: nothing cleared" store stats "$@" && says out "blocks +5\$" "$what: still 5"
  expect 0 "$what: clear --yes" store clear "$@" --yes && says out "removed 5 blocks" "$what: cleared 5"
  expect 0 "$what: empty" store stats "$@" && says out "blocks +0\$" "$what: 0 left"
}

dir=$tmp/store
mkdir "$dir"
if ! "$fill" dir "$dir"; then
  echo "FAIL store_fill dir $dir"
  exit 1
fi
damage() { # flips a byte near the end of the block's file
  f=$dir/$(echo "$1" | cut -c1-2)/$1.blk
  size=$(wc -c <"$f")
  printf 'X' | dd of="$f" bs=1 seek=$((size - 3)) conv=notrunc 2>/dev/null
}
run_store_checks "dir" --dir "$dir"

# The value of issue 26 whose header sizes wrap 64 bits (2^30 tokens): ls and verify call it bad
# and say why (they read 4 GiB past it: SIGSEGV). The fuzz regression input is a mode byte, then
# the value.
crafted=$(dirname "$0")/../fuzz/regressions/store_value/wrapping-sizes-checksum-read-4gib-past
mkdir -p "$dir/ab"
tail -c +2 "$crafted" >"$dir/ab/ab$(printf '%062d' 0).blk"
expect 1 "dir: verify a value whose sizes wrap" store verify --dir "$dir" &&
  says out "1073741824 tokens" "dir: verify says the token count"
expect 0 "dir: ls it" store ls --dir "$dir" && lines " bad +a block of 1073741824 tokens" 1 "dir: ls bad line"
rm -rf "$dir/ab"

# Usage errors (exit 2) and stores that cannot be opened (exit 1).
expect 2 "no subcommand" store
expect 0 "store --help" store --help && says out "stats" "store help"
expect 0 "ls --help" store ls --help && says out "--keys-only" "ls help"
expect 2 "unknown subcommand" store bogus && says err "unknown subcommand" "names it"
expect 2 "no store given" store stats && says err "--dir DIR or --redis" "says how"
expect 2 "both stores" store stats --dir "$dir" --redis 127.0.0.1:6379
expect 2 "bad --redis" store stats --redis nonsense && says err "HOST:PORT" "says the form"
expect 2 "bad port" store stats --redis 127.0.0.1:70000
expect 2 "--prefix with --dir" store stats --dir "$dir" --prefix x
expect 2 "--yes on ls" store ls --dir "$dir" --yes && says err "unknown option" "ls has no --yes"
expect 1 "missing directory" store stats --dir "$tmp/missing" && says err "--dir .*: no such directory" "says so, in the flag's terms"
[ ! -e "$tmp/missing" ] && passed=$((passed + 1)) || { failed=$((failed + 1)); echo "FAIL a missing directory was made"; }
: >"$tmp/afile"
expect 1 "a file, not a directory" store ls --dir "$tmp/afile" && says err "not a directory" "says so"
expect 1 "nothing listens" store stats --redis 127.0.0.1:1 --timeout-ms 300 && says err "cannot open" "refused"

# The same on a redis-server of our own (skipped without one).
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  port=$((20000 + $$ % 30000))
  for try in 1 2 3 4 5 6 7 8; do
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" \
      >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    up=0
    for i in $(seq 1 50); do
      if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then up=1; break; fi
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.1
    done
    [ $up -eq 1 ] && break
    kill "$redis_pid" 2>/dev/null
    redis_pid="" port=$((port + 97))
  done
  if [ -n "$redis_pid" ] && "$fill" redis "$port" "tool:" && "$fill" redis "$port" "other:"; then
    damage() { # overwrites 3 bytes near the end of the block's value
      k="tool:$1"
      size=$(redis-cli -p "$port" strlen "$k")
      redis-cli -p "$port" setrange "$k" $((size - 4)) XYZ >/dev/null
    }
    run_store_checks "redis" --redis "127.0.0.1:$port" --prefix "tool:"
    expect 0 "redis: other prefix kept" store stats --redis "127.0.0.1:$port" --prefix "other:" &&
      says out "blocks +6\$" "redis: clear kept the other prefix"
  else
    failed=$((failed + 1))
    echo "FAIL could not start redis-server or fill it"
    sed 's/^/     /' "$tmp/redis.log" | tail -n 5
  fi
else
  echo "skip the Redis part: redis-server or redis-cli is not installed"
fi

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
