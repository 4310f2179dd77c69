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

. "$(dirname "$0")/tool_expect.sh"

expect_error() { # DESCRIPTION ARGS...
  desc=$1
  shift
  run "$@"
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
  expect out 0 "$desc" "$@"
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
expect_error_says "profile: fp8 as the model's dtype" "fp8 is a --kv-dtype" profile --config "$good" --memory 1GiB --dtype fp8_e4m3
# attention variants: the kv dtype and the windows
expect_error_says "profile: bad kv dtype" "bad --kv-dtype 'int4'" profile --config "$good" --memory 1GiB --kv-dtype int4
expect_error_says "profile: kv dtype f16 under bf16" "--kv-dtype f16 under a bf16 model" profile --config "$good" --memory 1GiB --kv-dtype f16
expect_error_says "profile: kv dtype bf16 under f32" "--kv-dtype bf16 under a f32 model" profile --config "$good" --memory 1GiB --dtype f32 --kv-dtype bf16
expect_error_says "profile: kv dtype f32 under bf16" "--kv-dtype f32 under a bf16 model" profile --config "$good" --memory 1GiB --dtype bf16 --kv-dtype f32
expect_error_says "profile: empty kv dtype" "bad --kv-dtype ''" profile --config "$good" --memory 1GiB --kv-dtype ""
expect_error_says "profile: window and layer windows" "give one of them" profile --config "$good" --memory 1GiB --window 8 --layer-windows 8,0
expect_error_says "profile: negative window" "bad value '-1' for --window" profile --config "$good" --memory 1GiB --window -1
expect_error_says "profile: window past 2^32" "bad value .* for --window" profile --config "$good" --memory 1GiB --window 4294967296
expect_error_says "profile: window past 2^31-1" "--window 2147483648 exceeds 2\^31-1" profile --config "$good" --memory 1GiB --window 2147483648
expect_error_says "profile: layer window past 2^31-1" "--layer-windows\[1\] = 4294967295 exceeds 2\^31-1" profile --config "$good" --memory 1GiB --layer-windows 0,4294967295
expect_error_says "profile: layer windows too few" "names 1 layers, the model has 2 \(end it with ,\.\.\." profile --config "$good" --memory 1GiB --layer-windows 8
expect_error_says "profile: layer windows too many" "names 3 layers, the model has 2" profile --config "$good" --memory 1GiB --layer-windows 8,0,8
expect_error_says "profile: layer windows count too many" "names 5 layers" profile --config "$good" --memory 1GiB --layer-windows 8x5
for lw in "" "," "8,,0" "8x0" "8x" "x2" "8x2x2" "-8" "8 ,0" "8,0,...," "..." ",..." "8,...,0" "8.5" "1e3" "0x10" "4096y3"; do
  expect_error_says "profile: layer windows '$lw'" "bad --layer-windows" profile --config "$good" --memory 1GiB --layer-windows "$lw"
done
printf '{"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "chunked_attention"]}' >"$tmp/bad_types.json"
printf '{"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64, "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}' >"$tmp/short_types.json"
printf '{"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64, "sliding_window": 8, "sliding_window_pattern": 0}' >"$tmp/zero_pattern.json"
printf '{"num_hidden_layers": 4, "num_attention_heads": 4, "hidden_size": 64, "sliding_window": -8}' >"$tmp/negative_window.json"
expect_error_says "profile: a layer type pkv does not know" 'layer_types\[3\] must be .*not "chunked_attention"' profile --config "$tmp/bad_types.json" --memory 1GiB
expect_error_says "profile: layer_types too short" "layer_types.*num_hidden_layers \(4\)" profile --config "$tmp/short_types.json" --memory 1GiB
expect_error_says "profile: layer_types too short, --window given" "layer_types" profile --config "$tmp/short_types.json" --memory 1GiB --window 8
expect_error_says "profile: sliding_window_pattern 0" "sliding_window_pattern" profile --config "$tmp/zero_pattern.json" --memory 1GiB
expect_error_says "profile: negative sliding_window" "sliding_window" profile --config "$tmp/negative_window.json" --memory 1GiB
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
expect_error_says "demo: long prompt without windows" "give --windows too" demo --long-prompt 4096
expect_error_says "demo: long prompt too long" "at most 65536" demo --windows 64,0 --long-prompt 70000

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
expect_error_says "demo: 4e9 blocks, named as the flag" "the engine refused: --num-blocks 4000000000 exceeds 2\^31-1" \
  demo --num-blocks 4000000000
if grep -Eq "num_blocks|pkv_engine_create" "$tmp/err"; then
  bad "demo: 4e9 blocks: no C names" "stderr names C fields: $(head -n 1 "$tmp/err")"
else
  ok "demo: 4e9 blocks: no C names"
fi
# the windowed run's pool, scaled from --num-blocks, once wrapped 32 bits into a pool of 104 blocks
expect_error_says "demo: a windowed pool over 2^31-1 blocks" \
  "--num-blocks 2147483700 makes the windowed run's pool 4294967400 blocks of 1 layer .* give a smaller --num-blocks" \
  demo --requests 2 --layers 2 --windows 64,0 --num-blocks 2147483700
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
for m in 1TiB 1099511627776 "1 TiB" 1024GiB 1048576MiB 0.5TiB 512GiB 1.5GiB 1610612736 \
         18446744073709551615 24G 24GiB 24gib 24g 25769803776; do
  timeout 30 "$tool" profile --config "$llama" --memory "$m" --json >"$tmp/$m.out" 2>&1
done
expect_same() { # DESCRIPTION A B: the outputs for sizes A and B are identical
  if cmp -s "$tmp/$2.out" "$tmp/$3.out" && grep -q total_bytes "$tmp/$2.out"; then
    ok "$1"
  else
    bad "$1" "--memory $2 and --memory $3 differ"
    diff "$tmp/$2.out" "$tmp/$3.out" | head -n 6 | sed 's/^/     /'
  fi
}
expect_same "profile: 1TiB is 1099511627776 bytes" 1TiB 1099511627776
expect_same "profile: '1 TiB' is 1TiB" "1 TiB" 1TiB
expect_same "profile: 1024GiB is 1TiB" 1024GiB 1TiB
expect_same "profile: 1048576MiB is 1TiB" 1048576MiB 1TiB
expect_same "profile: 0.5TiB is 512GiB" 0.5TiB 512GiB
expect_same "profile: 1.5GiB is 1610612736" 1.5GiB 1610612736
# one rule for units (issue 26 item 6): binary, G = GiB; KB MB GB TB refused as ambiguous
expect_same "profile: 24G is 24GiB" 24G 24GiB
expect_same "profile: 24g is 24gib" 24g 24gib
expect_same "profile: 24GiB is 25769803776" 24GiB 25769803776
for m in 24gb 24GB 1.5GB 512MB 4KB 1TB "24 GB"; do
  expect_error_says "profile: $m refused" "sizes are binary; write KiB, MiB, GiB, TiB or K, M, G, T .*KB, MB, GB and TB are refused" \
    profile --config "$good" --memory "$m"
done
expect_error_says "demo: --host-cache 8MB refused" "bad value '8MB' for --host-cache: sizes are binary" demo --host-cache 8MB
# attention variants, from the example configs and the flags
configs=$(dirname "$0")/../../tools/configs
# Gemma 3's windows differ per layer: read per layer (its layers, then its groups on one page)
expect_output "profile: Gemma 3 groups, fp8" "kv cache +fp8_e4m3, 1 B per element \(the model's bf16: 2 B\)" \
  "^ +sliding 1024 +16 kv heads x 128 +scale 0.0771517: layers 0-4,6-10,12-16,.*,54-58,60,61$" \
  "^ +full +16 kv heads x 128 +scale 0.0771517: layers 5,11,\.\.,59$" \
  "block bytes +640.00 KiB +655360 +one page: every group's block, 16 tokens" \
  "- kv scales +7.75 KiB +7936 " "blocks per max sequence +8582 " \
  "KV groups: 7, each block one page of 655360 bytes" \
  "^ +0 +full +- +10 +40960 +0 +8192 +5.00 GiB +5,11,\.\.,59$" \
  "^ +1\.\.5 +sliding +1024 +10 +40960 +0 +65 +40.62 MiB +0-4,6-10,12-16,.*,54-58$" \
  "^ +6 +sliding +1024 +2 +8192 +524288 +65 +40.62 MiB +60,61$" \
  "^ +model +62 +253952 +524288 +8582 +5.24 GiB +every group$" \
  "layers of equal width keep 0.4.s layout: groups of as many layers as the kind" \
  "fp8_e4m3 holds 2.00x the tokens of bf16 \(269632 vs 134816\)" \
  "13 such sequences fit, against 2 with" \
  "fp8_e4m3 and windows together hold 13.00x the sequences of max_model_len of bf16 with full attention \(13 vs 1\)" \
  -- profile --config "$configs/gemma-3-27b.json" --memory 80GiB --kv-dtype fp8
# Multi-head latent attention: one latent of 512 + 64 values per token per layer (68.62 KiB a
# token for DeepSeek-V3 and Kimi K2's 61 layers, not K and V of 128 heads), and configs pkv cannot
# place, refused by name.
expect_output "profile: DeepSeek-V3, the latent" "multi-head latent attention" \
  "kv_lora_rank 512 \+ qk_rope_head_dim 64 = 576" "bytes per token +68.62 KiB +70272 " \
  "blocks +68759 " "max seqs at max_model_len +6 " \
  -- profile --config "$configs/deepseek-v3.json" --memory 80GiB
expect_output "profile: DeepSeek-V2-Lite" '"bytes_per_token": 31104,' '"kv_layout": "mla",' \
  -- profile --config "$configs/deepseek-v2-lite.json" --memory 80GiB --json
expect_output "profile: Kimi K2, fp8, tp 8" "bytes per token +34.31 KiB +35136 " \
  "every rank holds the whole latent" "fp8 scales: 1 \(the latent\) x 61 layers" \
  -- profile --config "$configs/kimi-k2.json" --memory 80GiB --kv-dtype fp8_e4m3 --tp 8
# DeepSeek sparse attention (issue 29): the indexer's keys beside each latent, 1152 + 132 B a layer
expect_output "profile: DeepSeek-V3.2, the latent and the indexer" "index_head_dim 128: fp8_e4m3 values" \
  "bytes per token +76.49 KiB +78324 " "^ +\+ indexer, a layer +132 B +132 " "blocks +61690 " \
  -- profile --config "$configs/deepseek-v3.2.json" --memory 80GiB
printf '{"num_hidden_layers": 61, "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 2048}' >"$tmp/dsa.json"
expect_error_says "profile: a part of the indexer named" '"index_head_dim" is missing' profile --config "$tmp/dsa.json" --memory 80GiB
printf '{"num_hidden_layers": 61, "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "index_topk": 2048, "index_n_heads": 64, "index_head_dim": 4096}' >"$tmp/dsa_wide.json"
expect_error_says "profile: an indexer too wide" '"index_head_dim" 4096 exceeds 1024' profile --config "$tmp/dsa_wide.json" --memory 80GiB
printf '{"num_hidden_layers": 61, "num_attention_heads": 128, "qk_rope_head_dim": 64}' >"$tmp/half_mla.json"
expect_error_says "profile: MLA without kv_lora_rank" "kv_lora_rank" profile --config "$tmp/half_mla.json" --memory 80GiB
# Gemma 2 (soft-caps) and gpt-oss (sinks) are read per layer (issue 27): their layers, then groups
expect_output "profile: Gemma 2 alternates" \
  "^ +sliding 4096 +8 kv heads x 256 +scale 0.0625, soft-cap 50: layers 0,2,\.\.,40$" \
  "^ +0 +full +- +21 +172032 +0 +512 +1.31 GiB +1,3,\.\.,41$" "^ +1 +sliding +4096 +21 +172032 +0 +257 +674.62 MiB +0,2,\.\.,40$" \
  "blocks per max sequence +769 " \
  -- profile --config "$configs/gemma-2-9b.json" --memory 80GiB
expect_output "profile: gpt-oss, layer_types" "^ +full +8 kv heads x 64 +scale 0.125, sinks: layers 1,3,\.\.,23$" \
  "^ +1 +sliding +128 +12 +24576 +0 +9 +3.38 MiB +0,2,\.\.,22$" "blocks per max sequence +8201 " "max seqs at max_model_len +23 " \
  "sliding windows save 3.00 GiB \(50%\) of a sequence of max_model_len 131072" "23 such sequences fit, against 12 with" \
  -- profile --config "$configs/gpt-oss-20b.json" --memory 80GiB
expect_output "profile: gpt-oss, --window 0 is full attention" "^ +full +8 kv heads x 64 +scale 0.125, sinks: layers 0-23$" \
  "blocks per max sequence +8192 " "max seqs at max_model_len +12 " \
  -- profile --config "$configs/gpt-oss-20b.json" --memory 80GiB --window 0
expect_output "profile: gpt-oss as --layer-windows" "blocks per max sequence +8201 " "max seqs at max_model_len +23 " \
  -- profile --config "$configs/gpt-oss-20b.json" --memory 80GiB --layer-windows 128,0,...
# a chunked or shared layer keeps the config's window: the flags are refused, naming the layer
expect_error_says "profile: --window on Llama 4's chunks" "layer 0 is chunked" \
  profile --config "$configs/llama-4-scout.json" --memory 80GiB --window 0
expect_error_says "profile: --layer-windows on Gemma 3n's shared layers" "layer 20 is shared" \
  profile --config "$configs/gemma-3n-E4B.json" --memory 80GiB --layer-windows 512,0,...
expect_output "profile: Mistral, one window" "windows +4096 keys in every layer" \
  "blocks per max sequence +257 +window 4096: min\(ceil\(w / 16\) \+ 1, ceil\(max_model_len 32768 / 16\)\)" \
  "sliding windows save 3.50 GiB \(87%\) of a sequence of max_model_len 32768: it takes 514.00 MiB," "143 such sequences fit, against 18 with" \
  -- profile --config "$configs/mistral-7b.json" --memory 80GiB
expect_output "profile: fp8_e5m2, json" '"kv_dtype": "fp8_e5m2",' '"kv_dtype_bytes": 1,' '"kv_scale_bytes": 2048,' \
  '"num_kv_groups": 1,' '"group_layers": 32,' '"padded_layers": 0' '"block_bytes": 1048576,' \
  '"model_dtype": \{"kv_dtype": "bf16", "num_kv_groups": 1, "block_bytes": 2097152, "num_blocks": 36864, .*"tokens_ratio": 2.0000' \
  '"full_attention": null,' -- profile --config "$llama" --memory 80GiB --kv-dtype fp8_e5m2 --json
expect_output "profile: layer windows, json" '"sliding_window": 0, "layer_windows": true' '"num_kv_groups": 4,' \
  '"group": 0, "kind": "full_attention", "window": 0, "num_layers": 8, "padded_slots": 0, "bytes_per_token": 32768, "blocks_per_max_seq": 512, "bytes_per_max_seq": 268435456, "layers": \[3, 7, 11, 15, 19, 23, 27, 31\]' \
  '"group": 3, "kind": "sliding_window", "window": 4096, "num_layers": 8, .*"layers": \[21, 22, 24, 25, 26, 28, 29, 30\]' \
  '"full_attention": \{"kv_dtype": "bf16", "num_kv_groups": 1, .*"max_seqs_at_max_model_len": 72, "tokens_ratio": .*, "seqs_ratio": 1.5833\}' \
  -- profile --config "$llama" --memory 80GiB --layer-windows 4096x3,0,... --json
expect_output "profile: a longer pattern is cut" "windows +4096 keys in every layer" \
  -- profile --config "$llama" --memory 80GiB --layer-windows 4096x40,0,...
expect_output "profile: explicit layer windows" "31 layers of full attention, 1 of 4096 keys, in 32 KV groups of 1 layers" \
  -- profile --config "$llama" --memory 80GiB --layer-windows 0x31,4096
expect_output "profile: kv dtype as the model's" "kv cache +bf16, 2 B per element \(the model's dtype\)" "blocks +36864 " \
  -- profile --config "$llama" --memory 80GiB --kv-dtype bf16
expect_output "profile: a fixed pool compares nothing" "nothing to compare" \
  -- profile --config "$llama" --memory 80GiB --kv-dtype fp8 --num-blocks 1000
expect_output "profile: windows without max_model_len" "no max_model_len, so no longest sequence" \
  -- profile --config "$llama" --memory 80GiB --max-model-len 0 --layer-windows 64,0,...
expect_output "profile: 2^64-1 bytes exactly" '"total_bytes": 18446744073709551615,' \
  -- profile --config "$llama" --memory 18446744073709551615 --json

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
