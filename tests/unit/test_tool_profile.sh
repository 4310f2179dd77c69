#!/bin/sh
# test_tool_profile.sh PKV_TOOL CONFIG_DIR - `pkv profile` on the committed configs, against bytes
# computed by hand (issue 26 item 6), and the tool's refusals in its own terms: flags, never
# pkv_engine_params' fields or C structs (item 5).
#
# Hand-computed bytes per token (2 for K and V x layers of a block x kv heads x head_dim x bytes):
#   Gemma-2-9B: 42 layers, 21 full + 21 of window 4096, in 2 KV groups of 21 layers; 8 kv heads,
#     head_dim 256, bf16: a group's token 2 x 21 x 8 x 256 x 2 = 172032 bytes; a token inside the
#     window is in both groups: 344064; past the window only the full group holds it: 172032.
#     A sequence of 8192: 512 blocks (full) + ceil(4096 / 16) + 1 = 257 (window) = 769 blocks of
#     172032 x 16 = 2752512 bytes = 2116681728 bytes.
#   Gemma-3-27B: 62 layers, 10 full + 52 of window 1024, in 7 KV groups of 10 layers (the last
#     windowed group holds 2, 8 slots padded); 16 kv heads, head_dim 128, bf16: a group's token
#     2 x 10 x 16 x 128 x 2 = 81920; inside every window 7 x 81920 = 573440; past them 81920.
#     fp8: 40960, 286720.
set -u
tool=$1
configs=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

. "$(dirname "$0")/tool_expect.sh"

# no C names in what the tool said on stderr
no_c_names() { # DESCRIPTION
  if grep -Eq 'pkv_[a-z_]+_params|kv_cache_bytes|memory_total_bytes|memory_utilization|PKV_DEVICE|num_blocks [0-9]' "$tmp/err"; then
    bad "$1" "stderr names C fields: $(head -n 1 "$tmp/err")"
  else
    ok "$1"
  fi
}

g2=$configs/gemma-2-9b.json g3=$configs/gemma-3-27b.json llama=$configs/llama-3-8b.json

# Item 6: per group and for the whole model
expect out 0 "Gemma 2: a token in the window costs both groups" \
  "bytes per token +336.00 KiB +344064 +2 KV groups x 172032" \
  "past the windows +168.00 KiB +172032 +1 full-attention group x 172032" \
  "max tokens +67408 +blocks x 16 tokens / 2 KV groups" \
  "blocks per max sequence +769 " "bytes per max sequence +1.97 GiB +2116681728 " \
  "^ +0 +full +21 +0 +172032 +512 +1.31 GiB +1,3,\.\.,41$" \
  "^ +1 +4096 +21 +0 +172032 +257 +674.62 MiB +0,2,\.\.,40$" \
  "^ +model +42 +0 +344064 +769 +1.97 GiB +every group$" \
  "sliding windows save 669.38 MiB \(25%\) of a sequence of max_model_len 8192: it takes 1.97 GiB," \
  "not the 2.62 GiB of full attention in every layer; 10 such sequences fit, against 8 with" \
  -- profile --config "$g2" --memory 24GiB
expect out 0 "Gemma 3: seven groups, the model's token in every window" \
  "bytes per token +560.00 KiB +573440 +7 KV groups x 81920" "past the windows +80.00 KiB +81920 " \
  "^ +6 +1024 +2 +8 +81920 +65 +81.25 MiB +60,61$" "^ +model +62 +8 +573440 +8582 " \
  "2 such sequences fit, against none with" \
  -- profile --config "$g3" --memory 24GiB
if grep -q "holds none\|, where" "$tmp/out"; then bad "Gemma 3: no garbled sentence" "$(grep 'holds none\|, where' "$tmp/out")"; else ok "Gemma 3: no garbled sentence"; fi
expect out 0 "Gemma 3, fp8: half the bytes" "bytes per token +280.00 KiB +286720 " \
  "fp8_e4m3 and windows together hold 4 sequences of max_model_len; bf16 with full attention holds none" \
  -- profile --config "$g3" --memory 24GiB --kv-dtype fp8
expect out 0 "one group: bytes per token as before" "bytes per token +128.00 KiB +131072 +block bytes / block size" \
  "max tokens +589824 +blocks x 16 tokens per block" -- profile --config "$llama" --memory 80GiB

# the rules written where a user looks
expect out 0 "profile --help: binary sizes, the weights" "SIZEs are binary: 80G = 80GiB" "KB, MB, GB and TB are refused" \
  "weights" -- profile --help
expect out 0 "pkv --help: binary sizes" "binary units" "KB, MB, GB and TB are refused" -- --help

# the weights
expect out 0 "weights not subtracted without --used" "weights +not subtracted: give --used SIZE" \
  -- profile --config "$llama" --memory 80GiB
expect out 0 "weights subtracted with --used" "weights +--used: 17179869184 bytes subtracted" \
  "- used +16.00 GiB +17179869184 " -- profile --config "$llama" --memory 80GiB --used 16GiB

# --json: enums as words
expect out 0 "json: words for the enums" '"device": "cpu",' '"source": "utilization",' '"dtype": "bf16",' \
  '"kv_dtype": "bf16",' '"kv_layout": "heads",' '"weights_subtracted": false,' \
  '"bytes_per_token_all_groups": 344064,' '"max_tokens_all_groups": 67408,' \
  '"group": 1, "kind": "sliding_window", "window": 4096,' '"group": 0, "kind": "full_attention", "window": 0,' \
  -- profile --config "$g2" --memory 24GiB --json
if grep -Eq '"(source|device|dtype|kv_dtype|kv_layout|kind)": [0-9]' "$tmp/out"; then bad "json: no enum as a number" "$(grep -E '"(source|device|dtype|kv_dtype|kv_layout|kind)": [0-9]' "$tmp/out" | head -n 1)"; else ok "json: no enum as a number"; fi
expect out 0 "json: a byte cap" '"source": "kv_cache",' -- profile --config "$llama" --kv-cache 64GiB --json
expect out 0 "json: a fixed pool" '"source": "num_blocks",' -- profile --config "$llama" --memory 80GiB --num-blocks 1000 --json

# Item 5: refusals in the flags' terms
expect err 1 "a 1 KiB budget: bytes in a unit that shows them, the flag to raise" \
  "needs 1.00 GiB \(512 blocks of 2097152 bytes\); the KV budget is 1.00 KiB: 1024.00 MiB \(1073740800 bytes\) missing" \
  "Give --kv-cache 1073741824 or more, or a smaller --max-model-len, or --kv-dtype fp8" \
  -- profile --config "$llama" --kv-cache 1KiB
no_c_names "a 1 KiB budget: no C names"
expect err 1 "a small memory: the flags of the formula" "Raise --memory or --utilization, or lower --used or --reserve" \
  -- profile --config "$llama" --memory 8GiB --used 7GiB
no_c_names "a small memory: no C names"
expect err 1 "too few --num-blocks" "--num-blocks 10 cannot hold one sequence of --max-model-len 8192: it needs 512 blocks" \
  -- profile --config "$llama" --memory 80GiB --num-blocks 10
no_c_names "too few --num-blocks: no C names"
expect err 1 "a host tier beyond the host" "the host tier takes .* missing. Lower --host-cache or --host-blocks" \
  -- profile --config "$llama" --device cpu --host-cache 1000TiB
no_c_names "a host tier beyond the host: no C names"
run profile --config "$llama" --memory 80GiB --device cuda
if [ "$rc" -eq 0 ]; then
  echo "     (a CUDA GPU is usable here: no refusal of --device cuda to check)"
else
  expect err 1 "--device cuda without a GPU" "--device cuda: no usable CUDA GPU was found" "--device cpu profiles host memory" \
    -- profile --config "$llama" --memory 80GiB --device cuda
  no_c_names "--device cuda: no C names"
  if grep -q "driver version is insufficient" "$tmp/err"; then bad "--device cuda: no driver jargon" "$(head -n 1 "$tmp/err")"; else ok "--device cuda: no driver jargon"; fi
fi
# pkv's refusals of values given by flag name the flags
expect err 1 "--tp 3 named as the flag" "^pkv profile: --tp \(3\) must divide num_q_heads \(32\)$" \
  -- profile --config "$llama" --memory 1GiB --tp 3
expect err 1 "--tp-rank named as the flag" "^pkv profile: --tp-rank \(5\) must be < --tp \(2\)$" \
  -- profile --config "$llama" --memory 1GiB --tp 2 --tp-rank 5
expect err 1 "--utilization named as the flag" "^pkv profile: --utilization must be in \(0, 1\], got 2$" \
  -- profile --config "$llama" --memory 1GiB --utilization 2
no_c_names "--utilization: no C names"
# --json's "error" carries pkv's message in the flags' terms too (fields only flags set, always)
expect out 1 "json: a 1 KiB budget's error names the flags" \
  '"error": ".*the KV budget \(--kv-cache\) is 1.00 KiB .*Raise --kv-cache to at least 1073741824' \
  -- profile --config "$llama" --kv-cache 1KiB --json
expect out 1 "json: a small memory's error names the flags" \
  '"error": ".*Raise --utilization \(now 0.9\) or --memory, or lower --reserve or --used' \
  -- profile --config "$llama" --memory 8GiB --used 7GiB --json
if grep -Eq '"error": ".*(kv_cache_bytes|memory_utilization|memory_total_bytes|reserve_bytes|memory_used_bytes|kv_dtype)' "$tmp/out"; then
  bad "json: no C fields in the error" "$(grep '"error"' "$tmp/out")"
else
  ok "json: no C fields in the error"
fi
expect out 1 "json: too few --num-blocks, the error names the flag" '"error": "--num-blocks 10 cannot hold one sequence' \
  -- profile --config "$llama" --memory 80GiB --num-blocks 10 --json
expect err 1 "simulate: --num-blocks named as the flag" "--num-blocks 4000000000 exceeds 2\^31-1" \
  -- simulate --requests 2 --num-blocks 4000000000
expect err 1 "store stats on a missing directory" "pkv store stats: --dir $tmp/nope: no such directory" \
  -- store stats --dir "$tmp/nope"
no_c_names "store stats on a missing directory: no C names"
: >"$tmp/file"
expect err 1 "store ls on a file" "--dir $tmp/file: not a directory" -- store ls --dir "$tmp/file"
mkdir "$tmp/store"
expect out 0 "store stats on an empty directory" "blocks +0" -- store stats --dir "$tmp/store"

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
