#!/usr/bin/env python3
"""pkv.h documents every call the same way (issue 26 item 11), and keeps doing so.

    header_doc.py PKV_H

Every PKV_API declaration has a comment block right above it. A call returning pkv_status ends
that comment with its errors, "Errors: PKV_ERR_X (when), PKV_ERR_Y (when).", naming statuses of
PKV_STATUS_MAP only, each once, and no status in the prose before it; a call returning anything
else has no Errors line and says what it does with NULL (or that it never fails). A version
appears in one of two spellings only: a call's comment ends with the line "Since 0.X.0.", and a
field, constant or struct added later carries "(since 0.X.0)". The banner (the first comment)
states the rules and is not held to them.

The checker is first run on copies of the header broken on purpose: each must be caught, so a
checker that stopped seeing anything fails here instead of passing quietly.
"""
import re
import sys

DECL = re.compile(r'^PKV_API\s+(.*?)\b(pkv_\w+)\s*\(')
VERSION_WORD = re.compile(r'since\W{0,3}\d+\.\d+', re.IGNORECASE)
FIELD_SINCE = re.compile(r'\(since \d+\.\d+\.\d+\)')
CALL_SINCE = re.compile(r'^\s*\*\s*Since \d+\.\d+\.\d+\.\s*(\*/)?\s*$')
STATUS = re.compile(r'PKV_ERR_\w+')


def statuses(lines):
    """The names of PKV_STATUS_MAP's errors."""
    names = set()
    for line in lines:
        m = re.match(r'\s*X\((ERR_\w+),', line)
        if m:
            names.add('PKV_' + m.group(1))
    return names


def comment_above(lines, i):
    """The comment block ending on the line just above line i, as lines; None without one."""
    j = i - 1
    if j < 0 or not lines[j].rstrip().endswith('*/'):
        return None
    while j >= 0 and '/*' not in lines[j]:
        j -= 1
    return lines[j:i] if j >= 0 else None


def split_errors(entries):
    """'PKV_ERR_X (when), PKV_ERR_Y (when).' -> [(name, when)], or a string saying what is wrong."""
    out, at = [], 0
    while True:
        m = re.compile(r'\s*(PKV_ERR_\w+) \(').match(entries, at)
        if not m:
            return 'an entry is not "PKV_ERR_NAME (when)": %r' % entries[at:at + 60]
        depth, k = 1, m.end()
        while k < len(entries) and depth:
            depth += {'(': 1, ')': -1}.get(entries[k], 0)
            k += 1
        if depth:
            return 'unbalanced parentheses after %s' % m.group(1)
        out.append((m.group(1), entries[m.end():k - 1]))
        rest = entries[k:]
        if rest.strip() == '.':
            return out
        if not rest.startswith(', '):
            return 'entries are separated by ", " and the list ends with ".": %r' % rest[:60]
        at = k + 2


def check_call(name, returns_status, block, known):
    """Problems of one call's comment block."""
    problems = []
    text = [re.sub(r'^\s*/?\*+\s?', '', l).replace('*/', '').rstrip() for l in block]
    since_at = [k for k, l in enumerate(block) if CALL_SINCE.match(l)]
    if since_at and since_at != [len(block) - 1]:
        problems.append('"Since 0.X.0." must be the comment\'s last line, alone')
    body = text[:since_at[0]] if since_at else text
    errors_at = [k for k, l in enumerate(body) if l.startswith('Errors:')]
    if not returns_status:
        if errors_at:
            problems.append('returns no pkv_status, yet has an Errors line')
        joined = ' '.join(body)
        if 'NULL' not in joined and 'never fails' not in joined.lower():
            problems.append('returns no pkv_status: say what it does with NULL (or that it never fails)')
        return problems
    if len(errors_at) != 1:
        return problems + ['needs one "Errors:" line (found %d)' % len(errors_at)]
    prose = ' '.join(body[:errors_at[0]])
    for s in sorted(set(STATUS.findall(prose))):
        problems.append('%s in the prose: errors belong on the Errors line' % s)
    entries = ' '.join(body[errors_at[0]:])[len('Errors:'):]
    parsed = split_errors(entries)
    if isinstance(parsed, str):
        return problems + [parsed]
    seen = [n for n, _ in parsed]
    for n in seen:
        if n not in known:
            problems.append('%s is not a status of PKV_STATUS_MAP' % n)
    for n in sorted(set(n for n in seen if seen.count(n) > 1)):
        problems.append('%s listed twice' % n)
    for n, when in parsed:
        if not when.strip():
            problems.append('%s says nothing of when' % n)
    return problems


def check(source):
    """Every problem of the header text, as 'line N: name: what' strings; and the calls seen."""
    lines = source.split('\n')
    known = statuses(lines)
    problems, calls = [], []
    banner_end = next(k for k, l in enumerate(lines) if '*/' in l)
    for k, line in enumerate(lines):
        if k <= banner_end:
            continue
        for m in VERSION_WORD.finditer(line):
            if not (FIELD_SINCE.match(line, m.start() - 1) or CALL_SINCE.match(line)):
                problems.append('line %d: "%s": write "(since 0.X.0)" or a last line "Since 0.X.0."' %
                                (k + 1, line.strip()))
        m = DECL.match(line)
        if not m:
            continue
        name, returns_status = m.group(2), m.group(1).strip() == 'pkv_status'
        calls.append(name)
        block = comment_above(lines, k)
        if block is None:
            problems.append('line %d: %s: no comment right above its declaration' % (k + 1, name))
            continue
        problems += ['line %d: %s: %s' % (k + 1, name, p) for p in check_call(name, returns_status, block, known)]
    for k, line in enumerate(lines):
        if CALL_SINCE.match(line):
            nxt = lines[k + 1] if k + 1 < len(lines) else ''
            if not line.rstrip().endswith('*/') or not DECL.match(nxt):
                problems.append('line %d: "Since 0.X.0." ends a call\'s comment, right above it' % (k + 1))
    return problems, calls


def broken_copies(source):
    """(what, text) pairs: the header with one rule broken each (text None when the spot to break
    is gone from pkv.h: the self-test then fails and wants a new spot)."""
    def once(old, new):
        return source.replace(old, new, 1) if old in source else None
    m = re.search(r'\n \* Errors: PKV_ERR_\w+ \(', source)
    errors = m.group(0) if m else '\n * Errors: PKV_ERR_ ('
    return [
        ('an Errors line removed', once(errors, '\n * When: PKV_ERR_STATE (')),
        ('an unknown status', once(errors, errors.replace('PKV_ERR_', 'PKV_ERR_NO_SUCH_', 1))),
        ('another since spelling', once('(since 0.2.0) KV cache dtypes', 'since 0.2.0: KV cache dtypes')),
        ('a Since line not last', once(' * Since 0.2.0. */', ' * Since 0.2.0.\n * More. */')),
        ('a status in the prose', once('/* What seq is now.', '/* What seq is now (else PKV_ERR_STATE).')),
        ('a call without comment', once('\nPKV_API pkv_status pkv_engine_stats(',
                                        '\n\nPKV_API pkv_status pkv_engine_stats(')),
        ('a void call silent on NULL', once('Accepts NULL (does nothing). Must not race with other calls on e.',
                                            'Must not race with other calls on e.')),
    ]


def main():
    source = open(sys.argv[1], encoding='utf-8').read()
    failed = False
    for what, text in broken_copies(source):
        if text is None:
            print('FAIL self-test: the spot to break for "%s" is gone from pkv.h: pick another' % what)
            failed = True
        elif not check(text)[0]:
            print('FAIL self-test: the checker misses %s' % what)
            failed = True
    problems, calls = check(source)
    if len(calls) < 60:
        print('FAIL: only %d PKV_API declarations found: is the parser still right?' % len(calls))
        failed = True
    for p in problems:
        print('FAIL ' + p)
    print('%d calls checked, %d problems' % (len(calls), len(problems)))
    return 1 if failed or problems else 0


if __name__ == '__main__':
    sys.exit(main())
