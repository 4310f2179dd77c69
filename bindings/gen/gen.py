#!/usr/bin/python3
"""Generates the raw declarations of every binding from include/pkv/pkv.h, with libclang.

    /usr/bin/python3 bindings/gen/gen.py [--header include/pkv/pkv.h] [--out bindings]

writes, under --out:
    python/pkv/_raw.py     ctypes structs, prototypes (argtypes/restype), constants, statuses
    csharp/Native.g.cs     [StructLayout(Sequential)] structs, [DllImport] externs, constants
    csharp/Version.g.props the package version (PKV_VERSION_*) for Pkv.csproj
    go/consts_gen.go       constants (typed enums with String), statuses, their names, sentinel
                           errors, the raw structs (cEngineParams, ...)
    go/types_gen.go        the API's structs (EngineParams, Stats, ...) and their conversions
    go/layout_gen.go       (cgo) the raw structs' sizes and offsets on both sides, checked at init
    go/load_gen.c          (cgo) every pkv_* function, calling libpkv through dlsym'd pointers

The header model is gen_header.py; each language's emitter is gen_python.py, gen_csharp.py or
gen_go.py. The outputs are committed; the meson test 'gen_up_to_date' regenerates them into a
temporary directory and fails when they differ. Needs Debian's python3-clang-14 (for /usr/bin/python3);
the libclang library is taken from $PKV_LIBCLANG, else /usr/lib/llvm-14/lib/libclang.so.1.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ of the emitters left in the source tree
import clang.cindex as ci  # noqa: E402

from gen_csharp import gen_csharp, gen_csharp_props  # noqa: E402
from gen_go import gen_go, gen_go_dl, gen_go_layout, gen_go_types  # noqa: E402
from gen_header import Header  # noqa: E402
from gen_python import gen_python  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

OUTPUTS = (('python/pkv/_raw.py', gen_python), ('csharp/Native.g.cs', gen_csharp),
           ('csharp/Version.g.props', gen_csharp_props),
           ('go/consts_gen.go', gen_go), ('go/types_gen.go', gen_go_types),
           ('go/layout_gen.go', gen_go_layout), ('go/load_gen.c', gen_go_dl))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--header', default=os.path.join(ROOT, 'include', 'pkv', 'pkv.h'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'bindings'))
    args = ap.parse_args()
    ci.Config.set_library_file(os.environ.get('PKV_LIBCLANG', '/usr/lib/llvm-14/lib/libclang.so.1'))
    h = Header(os.path.abspath(args.header))
    # Every output is generated before any is written: an emitter that refuses the header (it
    # exits naming the field) leaves the committed files as they were, not half regenerated.
    texts = [(rel, gen(h)) for rel, gen in OUTPUTS]
    for rel, text in texts:
        path = os.path.join(args.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w', encoding='utf-8', newline='\n') as f:
            f.write(text)


if __name__ == '__main__':
    main()
