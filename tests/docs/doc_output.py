#!/usr/bin/env python3
"""doc_output.py DOC HEADING PROGRAM [ARG...] - the fenced block that follows the line HEADING in
DOC must be exactly what PROGRAM ARG... prints, so a document that quotes a program's output
cannot go stale (bindings/DEMO.md's "Output for seed 42:" quoted `pkv 200` long after the demo
printed `pkv 300`). On a difference it prints both and what to do."""
import difflib
import subprocess
import sys


def quoted_block(doc, heading):
    lines = open(doc, encoding="utf-8").read().split("\n")
    try:
        at = next(i for i, line in enumerate(lines) if line.strip() == heading)
    except StopIteration:
        sys.exit(f"{doc}: no line '{heading}': the test has nothing to compare")
    start = next((i for i in range(at + 1, len(lines)) if lines[i].startswith("```")), None)
    if start is None:
        sys.exit(f"{doc}:{at + 1}: no fenced block after '{heading}'")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("```")), None)
    if end is None:
        sys.exit(f"{doc}:{start + 1}: the fenced block is never closed")
    return start + 2, lines[start + 1:end]


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: doc_output.py DOC HEADING PROGRAM [ARG...]")
    doc, heading, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    first, quoted = quoted_block(doc, heading)
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {run.returncode}):\n{run.stderr}")
    printed = run.stdout.rstrip("\n").split("\n")
    if printed == quoted:
        print(f"{doc}:{first}: the quoted output is what {' '.join(cmd)} prints")
        return 0
    print(f"{doc}:{first}: the quoted output differs from what {' '.join(cmd)} prints "
          f"(- {doc}, + the program); paste the program's output into {doc}:")
    sys.stdout.writelines(line + "\n" for line in
                          difflib.unified_diff(quoted, printed, doc, "printed", lineterm=""))
    return 1


if __name__ == "__main__":
    sys.exit(main())
