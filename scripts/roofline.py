#!/usr/bin/env python3
"""The roofline table of scripts/gpu-check.sh: each kernel's achieved GB/s against the device's
HBM peak, from the lines the benches print for it (bench_attention_gpu, bench_tier_copies
--device cuda):

    roofline-peak<TAB>GB/s<TAB>where it came from     (the device's attributes)
    roofline-device<TAB>name
    roofline<TAB>kernel<TAB>shape<TAB>GB/s[<TAB>reference GB/s<TAB>reference name]

The peak comes from the device (2 x memory clock x bus width, cudaDeviceGetAttribute), else from
a table of datasheet figures by the device's name (nvidia-smi's, --name; nvidia-smi reports the
memory clock but not the bus width, so it cannot give the peak itself), else it is unknown and
the % column says "?". A row with a reference of its own (the host tier's copies cross PCIe, not
HBM) is shown as % of that reference (cudaMemcpyAsync by the copy engines) instead.

    scripts/roofline.py [--name GPU_NAME] LOG...
"""
import argparse
import sys

# Datasheet HBM bandwidths (GB/s), most specific name first.
PEAKS_BY_NAME = [
    ("H200", 4800.0, "NVIDIA H200 datasheet: 4.8 TB/s"),
    ("H100 NVL", 3900.0, "NVIDIA H100 NVL datasheet: 3.9 TB/s"),
    ("H100 PCIe", 2000.0, "NVIDIA H100 PCIe datasheet: 2.0 TB/s"),
    ("H100", 3350.0, "NVIDIA H100 SXM datasheet: 3.35 TB/s"),
    ("B200", 8000.0, "NVIDIA B200 datasheet: 8 TB/s"),
    ("A100-SXM4-80GB", 2039.0, "NVIDIA A100 80GB SXM datasheet: 2,039 GB/s"),
    ("A100 80GB PCIe", 1935.0, "NVIDIA A100 80GB PCIe datasheet: 1,935 GB/s"),
    ("A100", 1555.0, "NVIDIA A100 40GB datasheet: 1,555 GB/s"),
    ("L40S", 864.0, "NVIDIA L40S datasheet: 864 GB/s"),
    ("RTX 5090", 1792.0, "GeForce RTX 5090 specifications: 1,792 GB/s"),
    ("RTX 4090", 1008.0, "GeForce RTX 4090 specifications: 1,008 GB/s"),
]


def parse(paths):
    peak, source, device, rows = 0.0, "", "", []
    for path in paths:
        try:
            lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
        except OSError as e:
            print(f"roofline: cannot read {path}: {e.strerror}", file=sys.stderr)
            continue
        for line in lines:
            f = line.split("\t")
            if f[0] == "roofline-peak" and len(f) == 3 and float(f[1]) > 0:
                peak, source = float(f[1]), f[2]
            elif f[0] == "roofline-device" and len(f) == 2:
                device = f[1]
            elif f[0] == "roofline" and len(f) in (4, 6):
                ref = (float(f[4]), f[5]) if len(f) == 6 else None
                rows.append((f[1], f[2], float(f[3]), ref))
    return peak, source, device, rows


def peak_by_name(name):
    for key, gbs, why in PEAKS_BY_NAME:
        if key.lower() in name.lower():
            return gbs, why
    return 0.0, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="", help="the device's name (nvidia-smi), for the table")
    ap.add_argument("logs", nargs="+")
    args = ap.parse_args()
    peak, source, device, rows = parse(args.logs)
    device = device or args.name
    if peak <= 0:
        peak, source = peak_by_name(device)
    if not rows:
        print("roofline: no rows in " + ", ".join(args.logs) + " (did the benches run?)")
        return 1
    where = f"{peak:.1f} GB/s, from {source}" if peak > 0 else "unknown (no attribute, no name)"
    print(f"roofline of {device or 'an unnamed device'}: HBM peak {where}")
    print(f"{'kernel':<32} {'shape':<28} {'GB/s':>9}  {'of peak':>8}")
    for kernel, shape, gbs, ref in rows:
        if ref:
            share = f"{100 * gbs / ref[0]:7.0f}% of {ref[1]} ({ref[0]:.1f} GB/s; PCIe, not HBM)"
        elif peak > 0:
            share = f"{100 * gbs / peak:7.0f}%"
        else:
            share = f"{'?':>8}"
        print(f"{kernel:<32} {shape:<28} {gbs:9.1f}  {share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
