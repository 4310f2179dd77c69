#!/usr/bin/env bash
# The GPU checks, as one run on a machine with an NVIDIA GPU: build with CUDA for its
# architecture, the `gpu` suite (every kernel against the fp64 reference on the device; sparse
# attention's: gpu_indexer, gpu_sparse_mla, and gpu_cuda_backend's pages of a DSA engine),
# bench_attention_gpu (decode GB/s against the device's bandwidth, prefill GFLOP/s, MLA decode,
# sparse MLA decode at 32k .. 128k against dense MLA), and the CUDA backend's engine tests that
# skip without a GPU.
#
#   scripts/gpu-check.sh [OUT_DIR]
#
# GPU_ARCH (default: the first GPU's compute capability, from nvidia-smi) picks -gencode.
# PKV_GPU_DEPS=DIR: a folder of Debian .deb files (libxxhash-dev, libhiredis-dev,
# nlohmann-json3-dev, libssl-dev, pkgconf) for a machine without those packages: they are
# unpacked under /tmp/pkv-deps and found through pkg-config there. Logs and the bench's output
# go to OUT_DIR (default build-gpu/logs).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu/logs}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH

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

nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem --format=csv |
  tee "$out/gpu.txt"
arch=${GPU_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}

build="build-gpu/b"
if [ ! -f $build/build.ninja ]; then
  meson setup $build -Dbuildtype=release -Dgpu=enabled -Dgpu_archs="$arch" -Dtests=true \
    -Dbenchmarks=true -Dtools=false -Devents_wire=disabled >"$out/setup.log" 2>&1 ||
    { tail -40 "$out/setup.log"; exit 1; }
fi
# Only what the checks run: the gpu suite's programs and the bench.
mapfile -t targets < <(meson introspect --tests $build | python3 -c '
import json, sys, os
for t in json.load(sys.stdin):
    if "gpu" in t["suite"] or "pkv:gpu" in t["suite"]:
        print(os.path.relpath(t["cmd"][0], sys.argv[1]))' $build)
ninja -C $build "${targets[@]}" bench/bench_attention_gpu >"$out/build.log" 2>&1 ||
  { tail -60 "$out/build.log"; exit 1; }

status=0
meson test -C $build --no-rebuild --suite gpu --print-errorlogs --num-processes 1 \
  2>&1 | tee "$out/gpu-suite.log" || status=1
$build/bench/bench_attention_gpu 2>&1 | tee "$out/bench_attention_gpu.txt" || status=1
exit $status
