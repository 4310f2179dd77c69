#!/usr/bin/env python3
"""Prints pkv's version or ABI major, read from include/pkv/pkv.h: the one place they are written.

    scripts/version.py          0.2.0   PKV_VERSION_MAJOR.PKV_VERSION_MINOR.PKV_VERSION_PATCH
    scripts/version.py --abi    1       PKV_ABI_VERSION (the SONAME: libpkv.so.1)

meson.build calls it for project(version:) (which the pkg-config file takes) and for the
SONAME (soversion) and the library's version.
"""
import os
import re
import sys

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'include', 'pkv', 'pkv.h')
NAMES = ('PKV_VERSION_MAJOR', 'PKV_VERSION_MINOR', 'PKV_VERSION_PATCH', 'PKV_ABI_VERSION')


def read(path=HEADER):
    with open(path, encoding='utf-8') as f:
        found = dict(re.findall(r'^#define (PKV_\w+) +([0-9]+)\s*$', f.read(), re.M))
    missing = [n for n in NAMES if n not in found]
    if missing:
        sys.exit('%s: no #define %s <number>' % (path, ', '.join(missing)))
    return [int(found[n]) for n in NAMES]


def main(argv):
    major, minor, patch, abi = read()
    forms = {None: '%d.%d.%d' % (major, minor, patch), '--abi': '%d' % abi}
    arg = argv[1] if len(argv) == 2 else None
    if len(argv) > 2 or arg not in forms:
        sys.exit('usage: version.py [--abi]')
    print(forms[arg])


if __name__ == '__main__':
    main(sys.argv)
