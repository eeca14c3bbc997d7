#!/usr/bin/env python3
# check_sizes.py: no function in src/ over 100 lines and no file over 1,000 (the house rule:
# a function one can read on a screen or two, a file one can read in a sitting).
#
# usage: check_sizes.py SRC_DIR     (every .c file below it)
#        check_sizes.py --self-test
# A function is what the house style writes: its signature from column 0, its opening brace
# alone on a line at column 0 and its closing brace at column 0; its length runs from the
# signature's first line to the closing brace. Initializers (tables) are not functions.
import os
import sys

MAX_FUNCTION = 100
MAX_FILE = 1000


def functions(lines):
    """(name line, first line number, length) of each function in a C file's lines."""
    out = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip() == '{':
            j = i - 1
            # Back to the signature's first line: continuation lines are indented, the first
            # starts at column 0.
            while j > 0 and lines[j][:1] in (' ', '\t'):
                j -= 1
            k = i + 1
            while k < len(lines) and not lines[k].startswith('}'):
                k += 1
            if j >= 0 and '(' in ''.join(lines[j:i]):
                out.append((lines[j].strip(), j + 1, k - j + 1))
            i = k
        i += 1
    return out


def check(paths):
    """Every breach as a printable line."""
    bad = []
    for p in paths:
        with open(p, encoding='utf-8', errors='replace') as fh:
            lines = fh.read().split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        if len(lines) > MAX_FILE:
            bad.append('%s: %d lines (at most %d)' % (p, len(lines), MAX_FILE))
        for sig, line, n in functions(lines):
            if n > MAX_FUNCTION:
                bad.append('%s:%d: %s: %d lines (at most %d)' % (p, line, sig[:70], n,
                                                                   MAX_FUNCTION))
    return bad


def self_test():
    body = ['    x++;'] * (MAX_FUNCTION - 2)
    ok = ['static int f(int x)', '{'] + body[:-1] + ['}']
    long_ = ['int g(int a,', '      int b)', '{'] + body + ['}']
    table = ['static const int t[] = {'] + ['    1,'] * 200 + ['};']
    fs = functions(ok + [''] + long_ + [''] + table)
    assert [(s, n) for s, _, n in fs] == [('static int f(int x)', MAX_FUNCTION),
                                          ('int g(int a,', MAX_FUNCTION + 2)], fs
    import tempfile
    with tempfile.NamedTemporaryFile('w', suffix='.c', delete=False) as fh:
        fh.write('\n'.join(ok + long_ + ['/* pad */'] * MAX_FILE) + '\n')
    try:
        found = check([fh.name])
    finally:
        os.unlink(fh.name)
    assert len(found) == 2 and 'lines (at most 1000)' in found[0] and 'int g(' in found[1], found
    print('check_sizes: self-test passed')
    return 0


def main():
    if sys.argv[1:] == ['--self-test']:
        return self_test()
    if len(sys.argv) != 2:
        print('usage: check_sizes.py SRC_DIR | --self-test')
        return 2
    paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs
                   if f.endswith('.c'))
    bad = check(paths)
    for b in bad:
        print(b)
    longest = max((n, '%s:%d %s' % (p, line, sig[:50])) for p in paths
                  for sig, line, n in functions(open(p, encoding='utf-8').read().split('\n')))
    print('check_sizes: %d files, longest function %d lines (%s), %d over the limits' %
          (len(paths), longest[0], longest[1], len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
