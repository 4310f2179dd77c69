#!/bin/sh
# test_tool_errors.sh PKV_TOOL - the pkv tool refuses bad invocations cleanly: for every
# subcommand, unknown flags, missing values, malformed / negative / huge numbers, missing files,
# a directory, a device or a FIFO as a file, empty and malformed JSON, JSON with wrong types,
# sizes that overflow or are not whole bytes; each must exit non-zero, not by a signal (exit < 124:
# no crash, no timeout), with a message on stderr. Then sizes that must parse exactly.
set -u
tool=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

expect_error() { # DESCRIPTION ARGS...
  desc=$1
  shift
  timeout 30 "$tool" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  if [ $rc -eq 0 ]; then
    why="exit 0"
  elif [ $rc -ge 124 ]; then
    why="exit $rc: killed by a signal or timed out"
  elif [ ! -s "$tmp/err" ]; then
    why="exit $rc without a message on stderr"
  else
    passed=$((passed + 1))
    echo "ok   $desc: exit $rc: $(head -n 1 "$tmp/err" | cut -c1-100)"
    return
  fi
  failed=$((failed + 1))
  echo "FAIL $desc ($*): $why"
  head -n 3 "$tmp/err" | sed 's/^/     /'
}

# expect_error, and stderr must say PATTERN (grep -E)
expect_error_says() { # DESCRIPTION PATTERN ARGS...
  desc=$1 pattern=$2
  shift 2
  before=$failed
  expect_error "$desc" "$@"
  if [ $failed -eq $before ] && ! grep -Eq -- "$pattern" "$tmp/err"; then
    passed=$((passed - 1)) failed=$((failed + 1))
    echo "FAIL $desc: stderr does not say /$pattern/"
  fi
}

# a good invocation: exit 0 and stdout saying each PATTERN (grep -E), '--' before the args
expect_output() { # DESCRIPTION PATTERN... -- ARGS...
  desc=$1
  shift
  pats=""
  while [ "$1" != "--" ]; do pats="$pats
$1"; shift; done
  shift
  timeout 30 "$tool" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  why=""
  [ $rc -eq 0 ] || why="exit $rc: $(head -n 1 "$tmp/err")"
  if [ -z "$why" ]; then
    while IFS= read -r pat; do
      [ -z "$pat" ] || grep -Eq -- "$pat" "$tmp/out" || why="stdout does not say /$pat/"
    done <<EOF_PATS
$pats
EOF_PATS
  fi
  if [ -z "$why" ]; then
    passed=$((passed + 1))
    echo "ok   $desc"
  else
    failed=$((failed + 1))
    echo "FAIL $desc ($*): $why"
  fi
}

# inputs
mkdir "$tmp/dir"
mkfifo "$tmp/fifo"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$tmp/big.json"
: >"$tmp/empty.json"
printf '{"num_hidden_layers": 32, "num_attention_heads": ' >"$tmp/truncated.json"
printf 'not json at all' >"$tmp/text.json"
printf '[32, 8, 128]' >"$tmp/array.json"
printf '{"num_hidden_layers": "32", "num_attention_heads": 32, "hidden_size": 4096}' >"$tmp/string_count.json"
printf '{"num_hidden_layers": 32.5, "num_attention_heads": 32, "hidden_size": 4096}' >"$tmp/float_count.json"
printf '{"num_hidden_layers": -1, "num_attention_heads": 32, "hidden_size": 4096}' >"$tmp/negative.json"
printf '{"num_hidden_layers": 99999999999999999999999, "num_attention_heads": 32, "hidden_size": 4096}' >"$tmp/huge.json"
printf '{"num_hidden_layers": 32, "num_attention_heads": 32, "hidden_size": 4096, "torch_dtype": 16}' >"$tmp/dtype_type.json"
printf '{"num_hidden_layers": 32, "num_attention_heads": 32}' >"$tmp/missing_field.json"
printf '{"text_config": [1]}' >"$tmp/text_config.json"
printf '\377\376\0\1{\0}' >"$tmp/binary.json"
# a 200 KB config nesting arrays 100000 deep where a count belongs (fuzzing found it crashing)
{ printf '{"num_hidden_layers": '; head -c 100000 /dev/zero | tr '\0' '['
  head -c 100000 /dev/zero | tr '\0' ']'; printf '}'; } >"$tmp/deep.json"
good=$tmp/good.json
printf '{"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}' >"$good"

# the tool itself
expect_error "no command"
expect_error "unknown command" frobnicate
expect_error "unknown option" --frobnicate

# profile
expect_error "profile: no --config" profile
expect_error "profile: unknown flag" profile --config "$good" --bogus
expect_error "profile: missing value" profile --config
expect_error "profile: missing file" profile --config "$tmp/nope.json"
expect_error "profile: directory as file" profile --config "$tmp/dir"
for f in empty truncated text array string_count float_count negative huge dtype_type \
         missing_field text_config binary deep; do
  expect_error "profile: $f.json" profile --config "$tmp/$f.json" --memory 1GiB
done
expect_error "profile: bad size" profile --config "$good" --memory 80XB
expect_error "profile: negative size" profile --config "$good" --memory -1GiB
expect_error "profile: huge size" profile --config "$good" --memory 99999999999999TiB
# sizes are exact integers: overflow, fractions of a byte and zero budgets are refused
expect_error_says "profile: 2^64 bytes" "more than 2\^64-1" profile --config "$good" --memory 18446744073709551616
expect_error_says "profile: 2^64 as TiB" "more than 2\^64-1" profile --config "$good" --memory 16777216TiB
expect_error_says "profile: reserve past 2^64" "more than 2\^64-1" profile --config "$good" --memory 1GiB --reserve 17179869184GiB
expect_error_says "profile: huge decimal" "more than 2\^64-1" profile --config "$good" --memory 99999999999999999999.5
expect_error_says "profile: half a byte" "whole number of bytes" profile --config "$good" --memory 1.5B
expect_error_says "profile: 0.1GiB" "whole number of bytes" profile --config "$good" --memory 0.1GiB
expect_error_says "profile: exponent" "expected a size" profile --config "$good" --memory 1e9
expect_error_says "profile: hex" "expected a size" profile --config "$good" --memory 0x100000
expect_error_says "profile: lone dot" "expected a size" profile --config "$good" --memory .GiB
expect_error_says "profile: memory 0" "--memory 0" profile --config "$good" --memory 0
expect_error_says "profile: memory 0GiB" "--memory 0" profile --config "$good" --memory 0GiB
expect_error_says "profile: kv-cache 0" "--kv-cache 0" profile --config "$good" --memory 1GiB --kv-cache 0
expect_error_says "profile: host-cache 0" "host tier of 0" profile --config "$good" --memory 1GiB --host-cache 0
expect_error_says "profile: host-blocks 0" "host tier of 0" profile --config "$good" --memory 1GiB --host-blocks 0
expect_error_says "profile: host tier beyond the host" "host tier.*missing" profile --config "$good" --device cpu --host-cache 1000TiB
# config files: type and size checked before reading (never read /dev/zero for gigabytes)
expect_error_says "profile: /dev/zero" "character device" profile --config /dev/zero --memory 1GiB
expect_error_says "profile: a FIFO" "FIFO" profile --config "$tmp/fifo" --memory 1GiB
expect_error_says "profile: a directory" "directory" profile --config "$tmp/dir" --memory 1GiB
expect_error_says "profile: over 16 MiB" "16 MiB" profile --config "$tmp/big.json" --memory 1GiB
expect_error "profile: bad number" profile --config "$good" --memory 1GiB --tp two
expect_error "profile: tp 0" profile --config "$good" --memory 1GiB --tp 0
expect_error "profile: block size 0" profile --config "$good" --memory 1GiB --block-size 0
expect_error "profile: utilization 2" profile --config "$good" --memory 1GiB --utilization 2
expect_error "profile: utilization nan" profile --config "$good" --memory 1GiB --utilization nan
expect_error "profile: bad dtype" profile --config "$good" --memory 1GiB --dtype int8
expect_error "profile: bad device" profile --config "$good" --memory 1GiB --device tpu

# simulate
expect_error "simulate: unknown flag" simulate --bogus
expect_error "simulate: missing value" simulate --requests
expect_error "simulate: bad number" simulate --requests many
expect_error "simulate: negative" simulate --requests -5
expect_error "simulate: huge" simulate --requests 99999999999999999999
expect_error "simulate: block size 0" simulate --requests 4 --block-size 0
expect_error "simulate: fraction 2" simulate --requests 4 --shared-fraction 2
expect_error "simulate: fraction nan" simulate --requests 4 --fork-fraction nan
expect_error "simulate: flag with a value" simulate --check=yes

# demo
expect_error "demo: unknown flag" demo --bogus
expect_error "demo: missing value" demo --seed
expect_error "demo: bad number" demo --requests lots
expect_error "demo: negative" demo --layers -2
expect_error "demo: huge" demo --num-blocks 99999999999
expect_error "demo: too many tenants" demo --tenants 17
expect_error "demo: plot into a missing directory" demo --requests 2 --plot "$tmp/nope/plot.svg"
expect_error_says "demo: preemption mode" "--preemption must be swap or auto" demo --host-cache 8MiB --preemption later
expect_error_says "demo: preemption without a host tier" "--preemption needs --host-cache" demo --preemption swap

# soak
expect_error "soak: unknown flag" soak --bogus
expect_error "soak: missing value" soak --ops
expect_error "soak: bad number" soak --ops ten
expect_error "soak: negative" soak --seed -1
expect_error "soak: huge" soak --ops 999999999999999999999
expect_error "soak: zero ops" soak --ops 0
expect_error "soak: pool too small" soak --ops 10 --num-blocks 2

# numbers that parse but that pkv or the command must refuse
expect_error "simulate: 4e9 blocks" simulate --requests 2 --num-blocks 4000000000
expect_error "simulate: 4e9 requests" simulate --requests 4000000000
expect_error "simulate: 4e9 block size" simulate --requests 2 --block-size 4000000000
expect_error "simulate: 4e9 max model len" simulate --requests 2 --max-model-len 4000000000
expect_error "simulate: step tokens 0" simulate --requests 2 --step-tokens 0
expect_error "simulate: 1e30 prompt" simulate --requests 2 --mean-prompt 1e30
expect_error "demo: 4e9 blocks" demo --num-blocks 4000000000
expect_error "demo: 4e9 block size" demo --block-size 4000000000
expect_error "demo: 1e5 layers" demo --layers 100000 --requests 1
expect_error "demo: zero requests" demo --requests 0
expect_error "profile: 4e9 blocks" profile --config "$good" --memory 1GiB --num-blocks 4000000000
expect_error "profile: 4e9 block size" profile --config "$good" --memory 1GiB --block-size 4000000000
expect_error "profile: 4e9 tp" profile --config "$good" --memory 1GiB --tp 4000000000
expect_error "soak: 4e9 block size" soak --ops 1 --block-size 4000000000

# sizes that must still parse, exactly
llama=$(dirname "$0")/../../tools/configs/llama-3-8b.json
expect_output "demo: a host tier" "preemptions [0-9]+: [1-9][0-9]* swapped out" "tokens identical to preempting by recompute: yes" -- \
  demo --requests 24 --num-blocks 96 --host-cache 8MiB
expect_output "profile: a host tier, planned" "host blocks +32768 +--host-cache" "host pool bytes +64.00 GiB +68719476736" \
  "host memory +- +not measured" -- profile --config "$llama" --memory 80GiB --host-cache 64GiB
expect_output "profile: a host tier in blocks" '"host_num_blocks": 100,' '"host_pool_bytes": 209715200,' -- \
  profile --config "$llama" --memory 80GiB --host-blocks 100 --host-cache 1GiB --json
expect_output "profile: llama-3-8b at 80GiB" "total memory +80.00 GiB +85899345920" \
  "= KV budget +72.00 GiB +77309411328" "blocks +36864 " "max tokens +589824 " \
  -- profile --config "$llama" --memory 80GiB
for m in 1TiB 1099511627776 "1 TiB" 1024GiB 1048576MiB 0.5TiB 512GiB 1.5GB 1500000000 \
         18446744073709551615; do
  timeout 30 "$tool" profile --config "$llama" --memory "$m" --json >"$tmp/$m.out" 2>&1
done
expect_same() { # DESCRIPTION A B: the outputs for sizes A and B are identical
  if cmp -s "$tmp/$2.out" "$tmp/$3.out" && grep -q total_bytes "$tmp/$2.out"; then
    passed=$((passed + 1)); echo "ok   $1"
  else
    failed=$((failed + 1)); echo "FAIL $1: --memory $2 and --memory $3 differ"
    diff "$tmp/$2.out" "$tmp/$3.out" | head -n 6 | sed 's/^/     /'
  fi
}
expect_same "profile: 1TiB is 1099511627776 bytes" 1TiB 1099511627776
expect_same "profile: '1 TiB' is 1TiB" "1 TiB" 1TiB
expect_same "profile: 1024GiB is 1TiB" 1024GiB 1TiB
expect_same "profile: 1048576MiB is 1TiB" 1048576MiB 1TiB
expect_same "profile: 0.5TiB is 512GiB" 0.5TiB 512GiB
expect_same "profile: 1.5GB is 1500000000" 1.5GB 1500000000
expect_output "profile: 2^64-1 bytes exactly" '"total_bytes": 18446744073709551615,' \
  -- profile --config "$llama" --memory 18446744073709551615 --json

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
