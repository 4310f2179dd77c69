#!/usr/bin/env python3
"""test_demo_plot.py PKV - `pkv demo --plot` draws the picture a reader needs: a panel per
run (pkv, contiguous, the host tier's run; the store's cold and warm runs), each with step ticks
spanning its own steps, KV reserved and KV used as two areas (reserved never below used; the
contiguous cache's reserved well above its used), and the running sequences."""
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
SMALL = ["--requests", "24", "--num-blocks", "64", "--max-model-len", "256", "--max-num-seqs", "8",
         "--step-tokens", "128"]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def text_of(el):
    return "".join(el.itertext())


def heights(polygon):
    """The area's top edge as y per point (the first and last points are its base)."""
    pts = polygon.get("points").split()
    return [float(p.split(",")[1]) for p in pts[1:-1]]


def check_panel(g):
    run = g.get("data-run")
    texts = [t for t in g.iter(SVG + "text")]
    title = next((text_of(t) for t in texts if "steps;" in text_of(t)), "")
    m = re.search(r": (\d+) steps; KV reserved (\d+)% / used (\d+)%", title)
    if not check(m, f"{run}: no title with steps and reserved / used ({title!r})"):
        return
    steps, reserved, used = (int(x) for x in m.groups())
    ticks = [int(text_of(t)) for t in texts if t.get("class") == "xtick"]
    check(len(ticks) >= 3, f"{run}: {len(ticks)} step ticks, want at least 3")
    check(ticks == sorted(set(ticks)) and ticks[:1] == [0], f"{run}: ticks {ticks} not 0, ... rising")
    if len(ticks) >= 2:
        step = ticks[1] - ticks[0]
        check(ticks[-1] <= steps < ticks[-1] + step, f"{run}: ticks {ticks} do not span {steps} steps")
    areas = g.findall(SVG + "polygon")
    lines = g.findall(SVG + "polyline")
    if not check(len(areas) == 2 and len(lines) == 1,
                 f"{run}: {len(areas)} areas and {len(lines)} lines, want reserved + used and running"):
        return
    res, use = heights(areas[0]), heights(areas[1])
    check(len(res) == len(use) and all(r <= u + 0.05 for r, u in zip(res, use)),
          f"{run}: the reserved area dips below the used one")
    if run == "contiguous":
        check(reserved >= used + 20, f"contiguous: reserved {reserved}% not well above used {used}%")
    else:
        check(reserved == used, f"{run}: a paged run reserves what it uses ({reserved}% vs {used}%)")


def plot(pkv, svg, args, want):
    r = subprocess.run([pkv, "demo"] + SMALL + args + ["--plot", svg], capture_output=True, text=True)
    if not check(r.returncode == 0, f"pkv demo {' '.join(args)} failed: {r.stderr}"):
        return
    panels = [g for g in ET.parse(svg).getroot().iter(SVG + "g") if g.get("class") == "panel"]
    names = [g.get("data-run") for g in panels]
    check(names == want, f"{svg}: panels {names}, want {want}")
    for g in panels:
        check_panel(g)


def main(pkv, work):
    plot(pkv, f"{work}/runs.svg", ["--tenants", "16", "--host-cache", "1MiB"],
         ["pkv (paged)", "contiguous", "pkv + host tier"])
    plot(pkv, f"{work}/store.svg", ["--tenants", "4", "--store", f"{work}/store"], ["cold", "warm"])
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} checks failed")
    return 1 if failures else 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="pkv-demo-plot-") as tmp:
        sys.exit(main(sys.argv[1], tmp))
