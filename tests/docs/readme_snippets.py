#!/usr/bin/env python3
"""readme_snippets.py README INCLUDE_DIR LIBPKV WORK_DIR CC... - every ```c block of README.md,
compiled against include/ and linked against libpkv, so a snippet that stops compiling (a renamed
call, a changed signature, a name used twice) fails the `unit` test readme_snippets.

The rule that turns a block into a program:
- a block that defines `main(` is a whole program: compiled and linked as it stands;
- any other block is a fragment: its `#include` lines go to the top of the file, the rest becomes
  the body of `int readme_snippet(PARAMS) { BODY return 0; }`, after pkv.h and the C headers a
  host has anyway (stdint.h, stddef.h, stdio.h, stdlib.h, string.h). PARAMS are the names the
  fragment uses without declaring them: README says them in an HTML comment (invisible when
  rendered) on the line right before the fence,
      <!-- snippet: pkv_engine *e, const uint64_t *seqs, uint32_t n -->
  and a fragment without one gets `void`. A fragment is linked too (with an empty main), so a
  call pkv.h declares but libpkv.so does not export fails as well.
The compiler's errors point at README.md's own lines (#line).
"""
import os
import re
import subprocess
import sys

FENCE_OPEN = "```c"
CONTEXT = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
MAIN = re.compile(r"\bint\s+main\s*\(")
PRELUDE = ["#include <pkv/pkv.h>", "#include <stddef.h>", "#include <stdint.h>",
           "#include <stdio.h>", "#include <stdlib.h>", "#include <string.h>"]
# -Wextra's missing-field-initializers would refuse `pkv_batch_view v = { sizeof v };`, the
# idiom pkv.h documents for struct_size; unused names are normal in a fragment.
WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
            "-Wno-unused-parameter", "-Wno-unused-but-set-parameter",
            "-Wno-unused-variable", "-Wno-unused-but-set-variable"]


def blocks(readme):
    """Yields (first line number of the code, its lines, the snippet comment's PARAMS or None)."""
    lines = open(readme, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == FENCE_OPEN:
            m = CONTEXT.match(lines[i - 1]) if i > 0 else None
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                sys.exit(f"{readme}:{i + 1}: a ```c block is never closed")
            yield i + 2, lines[i + 1:end], (m.group(1) if m else None)
            i = end
        i += 1


def program(readme, first, code, params):
    """The C file for one block (see the module's rule)."""
    name = readme.replace("\\", "\\\\").replace('"', '\\"')
    if MAIN.search("\n".join(code)):
        return "\n".join([f'#line {first} "{name}"'] + code) + "\n", "program"
    includes = [(n, c) for n, c in enumerate(code) if c.startswith("#include")]
    body = [c if not c.startswith("#include") else "" for c in code]
    out = PRELUDE + [c for _, c in includes]
    # the function's line is the snippet comment's (two above the code), the body the code's own
    out += [f'#line {max(first - 2, 1)} "{name}"', f"int readme_snippet({params or 'void'}) {{",
            f'#line {first} "{name}"']
    out += body + ["  return 0;", "}", "int main(void) { return 0; }"]
    return "\n".join(out) + "\n", "fragment"


def main():
    if len(sys.argv) < 6:
        sys.exit("usage: readme_snippets.py README INCLUDE_DIR LIBPKV WORK_DIR CC...")
    readme, include, libpkv, work = sys.argv[1:5]
    cc = sys.argv[5:]
    if len(cc) == 1:
        cc = cc[0].split()  # meson passes the compiler command as one string of words
    os.makedirs(work, exist_ok=True)
    found = failed = 0
    for first, code, params in blocks(readme):
        found += 1
        src, kind = program(readme, first, code, params)
        path = os.path.join(work, f"readme_{first}.c")
        with open(path, "w", encoding="utf-8") as f:
            f.write(src)
        cmd = cc + WARNINGS + ["-I", include, path, libpkv, "-o", path[:-2]]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failed += 1
            print(f"{readme}:{first}: this ```c block ({kind}) does not compile:\n{r.stderr}"
                  f"(the file compiled: {path}; the rule: tests/docs/readme_snippets.py)")
        else:
            print(f"{readme}:{first}: ok ({kind}, {len(code)} lines)")
    if found == 0:
        sys.exit(f"{readme}: no ```c block found: the test would check nothing")
    print(f"{found - failed} of {found} C blocks compile and link")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
