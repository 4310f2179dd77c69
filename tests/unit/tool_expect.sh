# tool_expect.sh - what the pkv tool's shell tests share, sourced by test_tool_errors.sh and
# test_tool_profile.sh (each sets tool, tmp, passed and failed first): running the tool, counting
# checks, and matching what it printed.

# run ARGS...: the tool on no input; stdout in $tmp/out, stderr in $tmp/err, the exit code in $rc
run() {
  timeout 30 "$tool" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
}

ok() { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1: $2"; }

# expect WHICH(out|err) RC DESCRIPTION PATTERN... -- ARGS...: the exit code, and each grep -E
# pattern found in stdout or stderr
expect() {
  which=$1 want=$2 desc=$3
  shift 3
  pats=""
  while [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
  shift
  run "$@"
  why=""
  [ "$rc" -eq "$want" ] || why="exit $rc, not $want: $(head -n 2 "$tmp/err")"
  if [ -z "$why" ]; then
    while IFS= read -r pat; do
      [ -z "$pat" ] || grep -Eq -- "$pat" "$tmp/$which" || why="std$which does not say /$pat/"
    done <<EOF_PATS
$pats
EOF_PATS
  fi
  if [ -z "$why" ]; then ok "$desc"; else bad "$desc" "$why"; fi
}
