#!/usr/bin/env bash
# The GPU checks, as one run on a machine with an NVIDIA GPU (README "GPU check"), in this order:
#   1. build with CUDA for this GPU's architecture only (-Dgpu_archs=<its compute capability>):
#      the `gpu` suite's programs, the pkv tool, bench_attention_gpu and bench_tier_copies;
#   2. the `gpu` suite: every kernel against the fp64 reference on the device, the CUDA backend
#      through its engine tests, the demo on cuBLAS (whatever the suite holds);
#   3. `pkv demo --device cuda`: the tiny transformer's GEMMs on cuBLAS, its attention on pkv's
#      kernels, its tokens checked against the CPU run (left out, saying so, while this tree's
#      demo has no --device);
#   4. bench_attention_gpu: decode GB/s (contexts to 16k), prefill, MLA, sparse MLA, write_kv, and
#      a whole decode step (host time, launches per layer, syncs per step, CUDA graph replay);
#   5. bench_tier_copies --device cuda: the host tier's copy kernel against cudaMemcpyAsync (DMA);
#   6. the roofline table (scripts/roofline.py): each kernel's GB/s as % of the HBM peak, and
#      where the peak came from.
# Each step runs under a time limit that keeps the whole under 8 minutes on an H100 / H200 (the
# build ~3, the suite and the demo ~1, the benches ~3); a step past its limit fails the run and
# the next steps still run. Exit status 0 only when every step passed.
#
#   scripts/gpu-check.sh [OUT_DIR]
#
# GPU_ARCH (default: the first GPU's compute capability, from nvidia-smi) picks -Dgpu_archs.
# PKV_GPU_DEPS=DIR: a folder of Debian .deb files (libxxhash-dev, libhiredis-dev,
# nlohmann-json3-dev, libssl-dev, pkgconf) for a machine without those packages: they are
# unpacked under /tmp/pkv-deps and found through pkg-config there. Logs, the benches' output and
# the roofline go to OUT_DIR (default build-gpu/logs).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu/logs}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
start=$SECONDS
step() { printf '\n== %s (at %d s)\n' "$1" $((SECONDS - start)); }

if [ -n "${PKV_GPU_DEPS:-}" ]; then
  root=/tmp/pkv-deps
  mkdir -p $root
  for f in "$PKV_GPU_DEPS"/*.deb; do dpkg -x "$f" $root; done
  lib=$root/usr/lib/x86_64-linux-gnu
  for pc in "$lib"/pkgconfig/*.pc "$root"/usr/share/pkgconfig/*.pc; do
    [ -f "$pc" ] && sed -i -e "s|=/usr/|=$root/usr/|" -e "s|=/usr\$|=$root/usr|" "$pc"
  done
  export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}  # hiredis.pc's -L is ${prefix}/lib
  if ! command -v pkg-config >/dev/null; then
    export PATH=$root/usr/bin:$PATH
    ln -sf pkgconf $root/usr/bin/pkg-config
  fi
fi

if ! command -v nvidia-smi >/dev/null || ! command -v nvcc >/dev/null; then
  echo "gpu-check: needs an NVIDIA GPU with its driver (nvidia-smi) and the CUDA toolkit (nvcc," \
    "looked for on PATH and in /usr/local/cuda/bin)" >&2
  exit 2
fi
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem --format=csv |
  tee "$out/gpu.txt"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}

step "build for sm_$arch"
build="build-gpu/sm$arch"
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dbuildtype=release -Dgpu=enabled -Dgpu_archs="$arch" -Dtests=true \
    -Dbenchmarks=true -Dtools=true -Devents_wire=disabled >"$out/setup.log" 2>&1 ||
    { tail -40 "$out/setup.log"; exit 1; }
fi
# Only what the checks run: what the gpu suite's tests depend on (as scripts/test.sh picks a
# suite's targets), the tool and the two benches.
mapfile -t targets < <(meson introspect --tests --targets "$build" | python3 -c '
import json, os, sys
info = json.load(sys.stdin)
build = os.path.realpath(sys.argv[1])  # ninja names its targets relative to the build dir
files = {t["id"]: [os.path.relpath(os.path.realpath(f), build) for f in t["filename"]]
         for t in info["targets"]}
for t in info["tests"]:
    if any(s.split(":")[-1] == "gpu" for s in t["suite"]):
        for d in t["depends"]:
            print("\n".join(files[d]))' "$build" | sort -u)
targets+=(tools/pkv bench/bench_attention_gpu bench/bench_tier_copies)
timeout 400 ninja -C "$build" "${targets[@]}" >"$out/build.log" 2>&1 ||
  { tail -60 "$out/build.log"; echo "gpu-check: the build failed (or ran past 400 s)"; exit 1; }

status=0
# check NAME LIMIT_S COMMAND...: runs it with its output in OUT_DIR/NAME.txt; fails the run when
# the command fails or passes its limit.
check() {
  local name=$1 limit=$2 rc=0
  shift 2
  step "$name"
  timeout "$limit" "$@" 2>&1 | tee "$out/$name.txt" || rc=${PIPESTATUS[0]}
  if [ "$rc" = 124 ]; then echo "gpu-check: $name ran past its $limit s"; fi
  if [ "$rc" != 0 ]; then
    echo "gpu-check: $name failed (exit $rc)"
    status=1
  fi
}

check gpu-suite 150 meson test -C "$build" --no-rebuild --suite gpu --print-errorlogs \
  --num-processes 1
if "$build/tools/pkv" demo --help 2>&1 | grep -q -- '--device'; then
  check demo-cuda 90 "$build/tools/pkv" demo --device cuda
else
  step "demo-cuda"
  echo "gpu-check: skipped: this tree's pkv demo has no --device option yet"
fi
check bench_attention_gpu 240 "$build/bench/bench_attention_gpu"
check bench_tier_copies 60 "$build/bench/bench_tier_copies" --device cuda
check roofline 10 python3 scripts/roofline.py --name "$gpu_name" "$out/bench_attention_gpu.txt" \
  "$out/bench_tier_copies.txt"
step "done: $([ $status = 0 ] && echo "every step passed" || echo "a step failed"); logs in $out"
if ((SECONDS - start > 480)); then
  echo "gpu-check: took $((SECONDS - start)) s, past its 8-minute budget: the step times above say where"
fi
exit $status
