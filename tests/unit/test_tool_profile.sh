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
#     fp8: 40960, 286720. Its last group's own layers: 2 x 8192 = 16384 a token, the page's other
#     8 x 8192 x 16 = 1048576 bytes a block padding; the model's K and V 62 x 8192 = 507904.
#     Its prefill of a 131072-token prompt in chunks of 2048 (issue 30: pkv_step admits per chunk):
#     a windowed group holds 1024 + 2048 - 1 keys from a block's last slot at most, ceil(3070 /
#     16) + 1 = 193 blocks, against 131072 / 16 = 8192 whole; the full group 8192 either way.
# Since issue 27 a model whose layers differ is read per layer and printed per group: each row a
# group (or a run a..b of alike ones) with its kind, window or chunk, layers, its own bytes per
# token and padding per block (pkv_kv_group_info), blocks and bytes a sequence of max_model_len
# holds in it; "model" sums its cached layers. At 80GiB (budget 0.9 x 80 GiB = 77309411328):
#   gpt-oss-120b: 36 layers of 8 x 64, bf16: 2048 B a layer; 2 groups of 18: 36864 a token,
#     page 589824; 131072 blocks; a sequence of 131072: 8192 + ceil(128 / 16) + 1 = 8201 blocks
#     (4.50 GiB), 15 of them.
#   Gemma 4 31B: 50 windowed layers of 16 x 256 (16384 B), 10 full of 4 x 512 with K = V (4096 B):
#     the page of one windowed layer (16384 x 16 = 262144) wastes least: full groups of 4, 4, 2
#     (8192 a token, 2 x 4096 x 16 = 131072 padded); model 50 x 16384 + 10 x 4096 = 860160; a
#     sequence of 262144: 3 x 16384 + 50 x 65 = 52402 blocks (12.79 GiB), 294912 / 52402 = 5.
#   Gemma 3n E4B: 35 layers of 2 x 256 (2048 B), 15 shared: 20 cached, groups of 4 (8192 a
#     token); model 40960; 2048 + 4 x 33 = 2180 blocks a sequence of 32768 (272.50 MiB).
#   Llama 4 Scout: 48 layers of 8 x 128 (4096 B): 12 full + 36 chunked (8192) in groups of 12
#     (49152 a token); model 196608; max_model_len 10485760 needs 655360 + 3 x 513 = 656899
#     blocks (481.13 GiB): 409.13 GiB short; at 131072, 8192 + 3 x 513 = 9731 blocks, 10 fit.
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
  "^ +0 +full +- +21 +172032 +0 +512 +1.31 GiB +1,3,\.\.,41$" \
  "^ +1 +sliding +4096 +21 +172032 +0 +257 +674.62 MiB +0,2,\.\.,40$" \
  "^ +model +42 +344064 +0 +769 +1.97 GiB +every group$" \
  "sliding windows save 669.38 MiB \(25%\) of a sequence of max_model_len 8192: it takes 1.97 GiB," \
  "not the 2.62 GiB of full attention in every layer; 10 such sequences fit, against 8 with" \
  -- profile --config "$g2" --memory 24GiB
expect out 0 "Gemma 3: seven groups, the model's token in every window" \
  "bytes per token +560.00 KiB +573440 +7 KV groups x 81920" "past the windows +80.00 KiB +81920 " \
  "^ +6 +sliding +1024 +2 +16384 +1048576 +65 +81.25 MiB +60,61$" "^ +model +62 +507904 +1048576 +8582 " \
  "2 such sequences fit, against none with" \
  -- profile --config "$g3" --memory 24GiB
expect out 0 "Gemma 3: prefill peak per chunk against whole" \
  "prefill of a 131072-token prompt in chunks of 2048 \(max_num_batched_tokens\)" \
  "^ +0 +full +- +8192 +8192$" "^ +1\.\.5 +sliding +1024 +193 +8192$" \
  -- profile --config "$g3" --memory 24GiB
if grep -q "holds none\|, where" "$tmp/out"; then bad "Gemma 3: no garbled sentence" "$(grep 'holds none\|, where' "$tmp/out")"; else ok "Gemma 3: no garbled sentence"; fi
expect out 0 "Gemma 3, fp8: half the bytes" "bytes per token +280.00 KiB +286720 " \
  "fp8_e4m3 and windows together hold 4 sequences of max_model_len; bf16 with full attention holds none" \
  -- profile --config "$g3" --memory 24GiB --kv-dtype fp8
expect out 0 "one group: bytes per token as before" "bytes per token +128.00 KiB +131072 +block bytes / block size" \
  "max tokens +589824 +blocks x 16 tokens per block" -- profile --config "$llama" --memory 80GiB

# Item 4 of issue 27: every group with its layers, kind, window or chunk, bytes and padding
c=$configs
expect out 0 "gpt-oss-120b: sinks, two groups of 18" "^ +sliding 128 +8 kv heads x 64 +scale 0.125, sinks: layers 0,2,\.\.,34$" \
  "^ +0 +full +- +18 +36864 +0 +8192 +4.50 GiB +1,3,\.\.,35$" "^ +1 +sliding +128 +18 +36864 +0 +9 +5.06 MiB +0,2,\.\.,34$" \
  "^ +model +36 +73728 +0 +8201 +4.50 GiB +every group$" "max seqs at max_model_len +15 " \
  -- profile --config "$c/gpt-oss-120b.json" --memory 80GiB --device cpu
expect out 0 "Gemma 4 31B: heads per layer, K = V, the least waste" \
  "^ +full +4 kv heads x 512 +scale 1, K = V \(stored once\): layers 5,11,\.\.,59$" \
  "block bytes +256.00 KiB +262144 " "^ +0\.\.1 +full +- +4 +16384 +0 +16384 +4.00 GiB +5,11,\.\.,47$" \
  "^ +2 +full +- +2 +8192 +131072 +16384 +4.00 GiB +53,59$" "^ +3\.\.52 +sliding +1024 +1 +16384 +0 +65 +16.25 MiB +0-4,6-10," \
  "^ +model +60 +860160 +131072 +52402 +12.79 GiB +every group$" "no page of whole layers holds these groups without waste: this one wastes least" \
  "max seqs at max_model_len +5 " -- profile --config "$c/gemma-4-31B.json" --memory 80GiB --device cpu
expect out 0 "Gemma 3n E4B: shared layers keep no cache" \
  "^ +sliding 512 +2 kv heads x 256 +scale 1, shared: reads layer 18's K and V: layers 20-23,25-28,30-33$" \
  "^ +1\.\.4 +sliding +512 +4 +8192 +0 +33 +4.12 MiB +0-3,5-8,10-13,15-18$" \
  "^ +model +20 +40960 +0 +2180 +272.50 MiB +every group$" "15 shared layers keep no cache" \
  -- profile --config "$c/gemma-3n-E4B.json" --memory 80GiB --device cpu
expect out 1 "Llama 4 Scout: chunks, and 10M tokens do not fit" \
  "^ +chunked 8192 +8 kv heads x 128 +scale 0.0883883: layers 0-2,4-6," \
  "^ +1\.\.3 +chunked +8192 +12 +49152 +0 +513 +384.75 MiB +0-2,4-6," \
  "^ +model +48 +196608 +0 +656899 +481.13 GiB +every group$" "shortfall +409.13 GiB +439296983040 " \
  -- profile --config "$c/llama-4-scout.json" --memory 80GiB --device cpu
expect out 0 "Llama 4 Scout at 128k: what chunks save" "max seqs at max_model_len +10 " \
  "chunks save 16.87 GiB \(70%\) of a sequence of max_model_len 131072" \
  -- profile --config "$c/llama-4-scout.json" --memory 80GiB --device cpu --max-model-len 131072
expect out 0 "json: a model read per layer" '"num_cached_layers": 20, "model_bytes_per_token": 40960,' \
  '"group": 1, "kind": "sliding_window", "window": 512, "num_layers": 4, "bytes_per_token": 8192,' \
  -- profile --config "$c/gemma-3n-E4B.json" --memory 80GiB --device cpu --json
expect out 0 "json: chunks" '"kind": "chunked_local", "window": 8192,' \
  -- profile --config "$c/llama-4-scout.json" --memory 80GiB --device cpu --json --max-model-len 131072

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

# Issue 28: a hybrid model's states come off the budget before the blocks. Qwen3.5-35B-A3B:
# 30 Gated DeltaNet layers of conv 8192 x 3 bf16 (49152 B) + 32 x 128 x 128 f32 (2097152 B):
# 64389120 B a sequence; 10 attention layers of 2 x 256 bf16: 20480 B a token, 327680 a block.
# 80 GiB x 0.9 = 77309411328; 64 states + 64 checkpoints (prompt-end: --max-num-seqs of them)
# = 8241807360, (77309411328 - 8241807360) / 327680 = 210777 blocks; every:4 with 16
# checkpoints: 80 slots, 220209 blocks; none: 64 slots, 223353 blocks.
q35=$configs/qwen3.5-35b-a3b.json
expect out 0 "Qwen3.5: the states, checkpoints and blocks" \
  "^    state +part 0 8192 x 3 bf16 \(48.00 KiB\), part 1 32 x 128 x 128 f32 \(2.00 MiB\): layers 0-2,4-6," \
  "state bytes per sequence +61.41 MiB +64389120 +30 STATE layers" \
  "- states +3.84 GiB +4120903680 +64 working states" \
  "- checkpoints +3.84 GiB +4120903680 +64 checkpoints \(--state-checkpoints prompt-end\)" \
  "^  blocks +210777 " \
  "^  memory +64 sequences' states \(3.84 GiB\) \+ 64 checkpoints \(3.84 GiB\) \+ 210777 blocks of KV \(64.32 GiB, 3372432 tokens\)$" \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64
expect out 0 "Qwen3.5: every:4 with 16 checkpoints" \
  "- checkpoints +982.50 MiB +1030225920 +16 checkpoints \(--state-checkpoints every:4 \(blocks\), --num-checkpoints\)" \
  "^  blocks +220209 " \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64 --state-checkpoints every:4 --num-checkpoints 16
expect out 0 "Qwen3.5 json: no checkpoints" '"state_checkpoint_policy": "none"' \
  '"num_state_layers": 30,' '"num_state_slots": 64,' '"num_state_checkpoints": 0,' \
  '"state_bytes_per_seq": 64389120,' '"state_pool_bytes": 4120903680,' '"num_blocks": 223353,' \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64 --state-checkpoints none --json
# A host tier holds a state slot per sequence (swap) and per checkpoint (offload): 128 x 64389120
expect out 0 "Qwen3.5 with a host tier: its state slots" \
  "^  host state slots +128 +max_num_seqs \(swap\) \+ checkpoints \(offload\)" \
  "^  host state bytes +7.68 GiB +8241807360 " \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64 --host-cache 64GiB
expect out 0 "Qwen3.5 json with a host tier" '"num_host_state_slots": 128,' \
  '"host_state_bytes": 8241807360$' \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64 --host-cache 64GiB --json
# --tp 2: the config is read as one rank's share (heads and conv channels halved): 32194560 B
expect out 0 "Qwen3.5 at --tp 2: each rank's state" \
  "part 0 4096 x 3 bf16 \(24.00 KiB\), part 1 16 x 128 x 128 f32 \(1.00 MiB\)" \
  "state bytes per sequence +30.70 MiB +32194560 " \
  -- profile --config "$q35" --memory 80GiB --max-num-seqs 64 --tp 2
expect err 2 "--state-checkpoints every:0 refused" "bad --state-checkpoints 'every:0': expected prompt-end, none or every:K" \
  -- profile --config "$q35" --memory 80GiB --state-checkpoints every:0
expect err 1 "--num-checkpoints with none: named as the flags" \
  "--num-checkpoints 8 with --state-checkpoints NONE: no checkpoint is taken" \
  -- profile --config "$q35" --memory 80GiB --state-checkpoints none --num-checkpoints 8
expect err 1 "Qwen3.5 in 8 GiB: the states counted in what is missing" \
  "needs .* \(16384 blocks of 327680 bytes and 512 state slots of 64389120 bytes\)" \
  "or a smaller --max-model-len, --max-num-seqs or --num-checkpoints" \
  -- profile --config "$q35" --memory 8GiB
no_c_names "Qwen3.5 in 8 GiB: no C names"

# Issue 29: sparse attention's indexer beside each MLA latent. DeepSeek-V3.2: 61 layers of a latent
# 576 x 2 = 1152 B and an indexer key of 128 fp8 values + a 4 B fp32 scale = 132 B: 1284 B a layer,
# 61 x 1284 = 78324 a token, block 78324 x 16 = 1253184; 77309411328 / 1253184 = 61690 blocks;
# a sequence of 163840: 10240 blocks, 6 fit. fp8 latents: 576 + 132 = 708 B a layer, 43188 a token,
# (77309411328 - 61 x 4 scales) / 691008 = 111879 blocks. GLM-5 at --tp 8 (the latent and the
# indexer are whole on every rank): 78 x 1284 = 100152 a token, 48245 blocks, 3 of 202752.
dsv32=$configs/deepseek-v3.2.json glm5=$configs/glm-5.json
expect out 0 "DeepSeek-V3.2: the latent and the indexer, every term" \
  "^  indexer +index_head_dim 128: fp8_e4m3 values \+ a 4 B fp32 scale = 132 B a token a layer,$" \
  "in 61 layers; 64 query heads \(every rank's\);$" "each token attends to its top 2048 keys$" \
  "^ +full +1 kv heads x 576 +scale 0.135234, indexer 128 fp8 x 64 heads, top-k 2048: layers 0-60$" \
  "^  block bytes +1.20 MiB +1253184 " "^  bytes per token +76.49 KiB +78324 " \
  "^    latent, a layer +1.12 KiB +1152 +576 values x 2 B \(bf16\)$" \
  "^    \+ indexer, a layer +132 B +132 +128 values x 1 B \(fp8_e4m3\) \+ 4 B \(its fp32 scale\)$" \
  "^    = a layer +1.25 KiB +1284 +x 61 layers = 78324$" \
  "^  blocks +61690 " "^  max seqs at max_model_len +6 " "^ +model +61 +78324 +0 +10240 +11.95 GiB +every group$" \
  -- profile --config "$dsv32" --memory 80GiB
expect out 0 "DeepSeek-V3.2, fp8 latents: the indexer as it was" \
  "^    latent, a layer +576 B +576 +576 values x 1 B \(fp8_e4m3\)$" "^    = a layer +708 B +708 +x 61 layers = 43188$" \
  "^  blocks +111879 " -- profile --config "$dsv32" --memory 80GiB --kv-dtype fp8
expect out 0 "DeepSeek-V3.2 json: the indexer's terms" \
  '"indexer": \{"num_layers": 61, "all_alike": true, "index_head_dim": 128, "index_dtype": "fp8_e4m3", "index_n_heads": 64, "index_topk": 2048,$' \
  '"key_bytes_per_token": 128, "scale_bytes_per_token": 4, "indexer_bytes_per_token_per_layer": 132, "latent_bytes_per_token_per_layer": 1152,$' \
  '"bytes_per_token_per_layer": 1284, "latent_bytes_per_token": 70272, "indexer_bytes_per_token": 8052, "model_bytes_per_token": 78324\},$' \
  '"bytes_per_token": 78324,' '"num_blocks": 61690,' \
  -- profile --config "$dsv32" --memory 80GiB --json
expect out 0 "GLM-5 at --tp 8: whole on every rank" "softmax scale 0.0625 \(the model's\)" \
  "tp 8, rank 0: every rank holds the whole latent" "in 78 layers; 32 query heads \(every rank's\);$" \
  "^    = a layer +1.25 KiB +1284 +x 78 layers = 100152$" "^  blocks +48245 " "^  max seqs at max_model_len +3 " \
  -- profile --config "$glm5" --memory 80GiB --tp 8
expect out 0 "json: no indexer is null" '"indexer": null,' -- profile --config "$llama" --memory 80GiB --json

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
