#!/usr/bin/env python3
"""The quick start in pkv.h's banner is a program that compiles (C99, -pedantic -Werror) against
the header, links against libpkv and runs, printing "ok".

    quickstart.py PKV_H LIBPKV_SO CC...

The program is the banner's lines from " *   #include <pkv/pkv.h>" to the first " *   }" after
it, each without its " *   " prefix.
"""
import os
import subprocess
import sys
import tempfile


def extract(header_text):
    lines = header_text.split('\n')
    banner = lines[:next(i for i, l in enumerate(lines) if '*/' in l)]
    try:
        start = banner.index(' *   #include <pkv/pkv.h>')
        end = banner.index(' *   }', start)
    except ValueError:
        sys.exit('FAIL: no quick start in the banner of pkv.h (" *   #include <pkv/pkv.h>" .. " *   }")')
    out = []
    for l in banner[start:end + 1]:
        if l.rstrip() == ' *':
            out.append('')
        elif l.startswith(' *   '):
            out.append(l[len(' *   '):])
        else:
            sys.exit('FAIL: quick start line not indented as the program: %r' % l)
    return '\n'.join(out) + '\n'


def main():
    header, lib, cc = sys.argv[1], sys.argv[2], sys.argv[3:]
    program = extract(open(header, encoding='utf-8').read())
    include = os.path.dirname(os.path.dirname(os.path.abspath(header)))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, 'quickstart.c'), os.path.join(tmp, 'quickstart')
        open(src, 'w').write(program)
        build = cc + ['-std=c99', '-pedantic', '-Werror', '-Wall', '-Wextra', '-I', include, src, '-o', exe,
                      lib, '-Wl,-rpath,' + os.path.dirname(os.path.abspath(lib))]
        r = subprocess.run(build, capture_output=True, text=True)
        if r.returncode != 0:
            print(program)
            sys.exit('FAIL: the quick start does not compile:\n' + r.stdout + r.stderr)
        r = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or r.stdout != 'ok\n':
            sys.exit('FAIL: the quick start exits %d, prints %r (want "ok"):\n%s' % (r.returncode, r.stdout, r.stderr))
    print('the quick start (%d lines) compiles, links and prints "ok"' % program.count('\n'))


if __name__ == '__main__':
    main()
