#!/usr/bin/env python3
"""Fails when a file of src/ includes a header of a layer above its own (DESIGN.md §2: data and
control flow one way, top to bottom; a file below never reaches back into a file above it).

    check_layers.py ROOT        ROOT is the repository (its src/ is read)

The layers, top to bottom. A file may include headers of its own layer and of any layer below.
status.h (pkv::Error, PKV_REQUIRE) and pkv/pkv.h are the ground every layer stands on; kernels/
are below the backends that launch them. A file of src/ that no layer names fails the check too,
so a new file is placed on purpose.
"""
import os
import re
import sys

LAYERS = [
    ("api", ["api.cpp", "batch_handles.*"]),
    ("agent", ["agent/*"]),
    ("engine", ["engine.*", "engine_batch.cpp", "engine_layers.cpp", "engine_sparse.cpp", "engine_store.cpp", "engine_retention.cpp", "engine_plans.cpp", "engine_segments.cpp", "engine_transfers.cpp"]),
    ("scheduler", ["scheduler.*"]),
    ("batch", ["batch.*", "plan_wire.*"]),
    ("sequence", ["sequence.*", "transfers.*"]),
    ("block manager", ["block_manager.*", "block_manager_admit.cpp", "block_manager_host.cpp",
                       "block_manager_check.cpp", "block_manager_state.cpp", "block_manager_retain.cpp", "block_pool.*", "block_kinds.*",
                       "block_kind_full.h", "block_kind_sliding.h", "block_kind_chunked.h",
                       "block_kind_shared.h", "tiers/store_staging.cpp", "state_pool.*"]),
    ("prefix cache", ["prefix_tree.*", "node_table.h", "block_hash.*", "state_checkpoints.*"]),
    ("tiers", ["tiers/*"]),
    ("profiler, params, config, events", ["profiler.*", "params.*", "hf_config.*", "hf_config_layers.cpp", "hf_config_state.cpp", "hf_config_dsa.cpp", "hf_json.h", "prefix_keys.*", "kv_events.*", "kv_publisher.*", "kv_wire.*", "kv_groups.*", "layer_specs.*", "state_layout.*", "checked.h"]),
    ("backends", ["backend/*"]),
    ("status", ["status.*", "huge_pages.h"]),
    ("kernels", ["kernels/*"]),
]
NOT_CODE = {"meson.build", "libpkv.map"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The index in LAYERS of a path relative to src/ (or 'kernels/x'), else None."""
    for i, (_, patterns) in enumerate(LAYERS):
        for pat in patterns:
            if pat.endswith("/*"):
                if path.startswith(pat[:-1]):
                    return i
            elif pat.endswith(".*"):
                if os.path.dirname(path) == "" and os.path.splitext(path)[0] == pat[:-2]:
                    return i
            elif path == pat:
                return i
    return None


def resolve(inc, src_dir, including, root):
    """What an #include "..." names, relative to src/ (kernels as 'kernels/...'); None if outside."""
    if inc.startswith("pkv/"):
        return None  # the public header: below everything
    here = os.path.join(src_dir, os.path.dirname(including))
    for base in (here, src_dir):
        if os.path.exists(os.path.join(base, inc)):
            return os.path.relpath(os.path.normpath(os.path.join(base, inc)), src_dir)
    if os.path.exists(os.path.join(root, "kernels", inc)):
        return "kernels/" + inc
    return None


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    src_dir = os.path.join(root, "src")
    problems, checked = [], 0
    for dirpath, _, files in os.walk(src_dir):
        for name in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, name), src_dir)
            if name in NOT_CODE:
                continue
            mine = layer_of(rel)
            if mine is None:
                problems.append(f"src/{rel}: in no layer of DESIGN.md §2 (add it to {sys.argv[0]})")
                continue
            with open(os.path.join(src_dir, rel), encoding="utf-8") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = resolve(m.group(1), src_dir, rel, root)
                    if target is None:
                        continue
                    theirs = layer_of(target)
                    checked += 1
                    if theirs is None or theirs < mine:
                        above = LAYERS[theirs][0] if theirs is not None else "no layer"
                        problems.append(f"src/{rel}:{lineno}: includes {m.group(1)} ({above}), "
                                        f"above its own layer ({LAYERS[mine][0]})")
    for p in problems:
        print(p)
    print(f"{checked} includes checked, {len(problems)} against the layer order")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
