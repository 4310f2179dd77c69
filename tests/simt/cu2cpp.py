#!/usr/bin/env python3
"""Turn a CUDA .cu file into C++ for the emulator (tests/simt/simt.h).

Only the two constructs g++ cannot parse are rewritten; everything else is the unmodified source,
and line numbers are kept (a #line directive names the original file):
  kernel<Args><<<grid, block, smem, stream>>>(a, b)
      -> ::simt::launch(::simt::LaunchConfig(grid, block, smem, stream), kernel<Args>, a, b)
  extern __shared__ __align__(16) T name[];
      -> T *name = static_cast<T *>(::simt::dynamic_smem());

usage: cu2cpp.py input.cu output.cpp
"""
import re
import sys

SHARED_RE = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([\w:<>\s\*]+?)\s*"
    r"(?:__align__\s*\(\s*\d+\s*\)\s*)?(\w+)\s*\[\s*\]\s*;")


def match_back(text, end, open_ch, close_ch):
    """Index of the open_ch matching the close_ch at text[end]."""
    depth = 0
    for i in range(end, -1, -1):
        if text[i] == close_ch:
            depth += 1
        elif text[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit("cu2cpp: unbalanced %s%s before offset %d" % (open_ch, close_ch, end))


def match_forward(text, start, open_ch, close_ch):
    """Index just past the close_ch matching the open_ch at text[start]."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_ch:
            depth += 1
        elif text[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
    raise SystemExit("cu2cpp: unbalanced %s%s after offset %d" % (open_ch, close_ch, start))


def kernel_start(text, end):
    """Start of the kernel expression ending right before `end` (name, ::, template args)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if text[i - 1] == ">":
        i = match_back(text, i - 1, "<", ">")
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def rewrite_launches(text):
    out = []
    pos = 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        start = kernel_start(text, at)
        close = text.find(">>>", at)
        if close < 0:
            raise SystemExit("cu2cpp: <<< without >>>")
        config = text[at + 3:close]
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        if text[paren] != "(":
            raise SystemExit("cu2cpp: expected ( after >>>")
        after = match_forward(text, paren, "(", ")")
        args = text[paren + 1:after - 1]
        kernel = text[start:at].rstrip()
        sep = ", " if args.strip() else ""
        out.append(text[pos:start])
        out.append("::simt::launch(::simt::LaunchConfig(%s), %s%s%s)" % (config, kernel, sep, args))
        pos = after


def rewrite_shared(text):
    def repl(m):
        ty = " ".join(m.group(1).split())
        return "%s *%s = static_cast<%s *>(::simt::dynamic_smem());" % (ty, m.group(2), ty)
    return SHARED_RE.sub(repl, text)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text = rewrite_shared(rewrite_launches(text))
    with open(dst, "w", encoding="utf-8") as f:
        f.write('#line 1 "%s"\n' % src.replace("\\", "/"))
        f.write(text)


if __name__ == "__main__":
    main()
