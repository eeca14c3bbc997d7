#!/usr/bin/env python3
"""check_csv.py: checks that a benchmark's CSV is well-formed (never how fast anything was).

Usage:
  check_csv.py FILE --col NAME:TYPE ... [checks] [-- COMMAND ARGS...]
  check_csv.py --self-test

The header must be exactly the --col names, in order. TYPE is one of
  str        non-empty text
  int        integer >= 0
  num        finite decimal number >= 0
  a|b|c      one of the listed words
Checks (each may be repeated):
  --positive A,B      these columns are > 0 in every row
  --le A:B            column A <= column B in every row (numbers)
  --unique A,B        no two rows share the same values of these columns
  --require "K=v1,v2;K2=w1,w2"
                      every combination (cartesian product) must be present as a row
  --rows N            exactly N data rows
  --min-rows N        at least N data rows (default 1)
With "-- COMMAND ...", COMMAND runs first (its stdout is discarded) and must exit 0; this lets a
ctest entry run a benchmark and check its output in one test. Exit status: 0 if well-formed,
1 if not (every problem is printed as FILE:LINE: message), 2 for bad usage, 77 when COMMAND
exits 77 (it cannot run here: the test is skipped, ctest's SKIP_RETURN_CODE).
"""
import argparse
import csv
import math
import os
import subprocess
import sys

SKIPPED = 77  # COMMAND's and our exit status for "cannot run here"
import tempfile


def parse_type(spec):
    if spec in ("str", "int", "num"):
        return spec
    words = spec.split("|")
    if len(words) < 2 or any(not w for w in words):
        raise ValueError("bad column type: %r" % spec)
    return set(words)


def parse_cols(specs):
    cols = []
    for spec in specs:
        name, sep, typ = spec.partition(":")
        if not sep or not name:
            raise ValueError("--col wants NAME:TYPE, got %r" % spec)
        cols.append((name, parse_type(typ)))
    return cols


def parse_require(spec):
    """'K=a,b;K2=c' -> [('K', ['a','b']), ('K2', ['c'])]"""
    out = []
    for part in spec.split(";"):
        key, sep, vals = part.partition("=")
        if not sep or not key.strip() or not vals:
            raise ValueError("--require wants K=v1,v2;K2=...: %r" % spec)
        out.append((key.strip(), [v.strip() for v in vals.split(",")]))
    return out


def as_number(text):
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def check_cell(text, typ):
    """Returns an error message or None."""
    if typ == "str":
        return None if text.strip() else "empty"
    if typ == "int":
        t = text.strip()
        return None if t.isdigit() and t.isascii() else "not an integer >= 0: %r" % text
    if typ == "num":
        v = as_number(text)
        return None if v is not None and v >= 0 else "not a number >= 0: %r" % text
    return None if text in typ else "not one of %s: %r" % ("|".join(sorted(typ)), text)


def check(path, cols, positive=(), le=(), unique=(), require=(), rows=None, min_rows=1):
    """Returns a list of 'FILE:LINE: message' problems (empty when the CSV is well-formed)."""
    errs = []

    def err(line, msg):
        errs.append("%s:%d: %s" % (path, line, msg))

    try:
        with open(path, newline="") as f:
            data = list(csv.reader(f))
    except OSError as e:
        return ["%s:0: %s" % (path, e.strerror or e)]
    except (UnicodeDecodeError, csv.Error) as e:
        return ["%s:0: unreadable: %s" % (path, e)]
    if not data:
        return ["%s:1: empty file, no header" % path]

    names = [c[0] for c in cols]
    if data[0] != names:
        err(1, "header is %s, expected %s" % (",".join(data[0]), ",".join(names)))
        return errs
    index = {n: i for i, n in enumerate(names)}
    for group in (positive, unique):
        for n in group:
            if n not in index:
                raise ValueError("unknown column %r" % n)
    for a, b in le:
        for n in (a, b):
            if n not in index:
                raise ValueError("unknown column %r" % n)
    for req in require:
        for k, _ in req:
            if k not in index:
                raise ValueError("unknown column %r" % k)

    body = data[1:]
    seen = {}
    present = set()
    for lineno, row in enumerate(body, start=2):
        if len(row) != len(names):
            err(lineno, "%d fields, expected %d" % (len(row), len(names)))
            continue
        bad = False
        for (name, typ), text in zip(cols, row):
            msg = check_cell(text, typ)
            if msg:
                err(lineno, "%s: %s" % (name, msg))
                bad = True
        if bad:
            continue
        for n in positive:
            v = as_number(row[index[n]])
            if v is None or not v > 0:
                err(lineno, "%s must be > 0, is %s" % (n, row[index[n]]))
        for a, b in le:
            va, vb = as_number(row[index[a]]), as_number(row[index[b]])
            if va is None or vb is None or not va <= vb:
                err(lineno, "%s (%s) must be <= %s (%s)" % (a, row[index[a]], b, row[index[b]]))
        if unique:
            key = tuple(row[index[n]] for n in unique)
            if key in seen:
                err(lineno, "same %s as line %d" % (",".join(unique), seen[key]))
            else:
                seen[key] = lineno
        present.add(tuple(row))

    end = len(data) + 1
    if rows is not None and len(body) != rows:
        err(end, "%d data rows, expected %d" % (len(body), rows))
    if len(body) < min_rows:
        err(end, "%d data rows, expected at least %d" % (len(body), min_rows))
    for req in require:
        keys = [k for k, _ in req]
        have = {tuple(r[index[k]] for k in keys) for r in present}
        combos = [()]
        for _, vals in req:
            combos = [c + (v,) for c in combos for v in vals]
        for combo in combos:
            if combo not in have:
                err(end, "missing row with %s" % ", ".join(
                    "%s=%s" % kv for kv in zip(keys, combo)))
    return errs


def build_parser():
    p = argparse.ArgumentParser(prog="check_csv.py", add_help=True,
                                description="Checks that a benchmark CSV is well-formed.")
    p.add_argument("file", nargs="?")
    p.add_argument("--col", action="append", default=[])
    p.add_argument("--positive", action="append", default=[])
    p.add_argument("--le", action="append", default=[])
    p.add_argument("--unique", default="")
    p.add_argument("--require", action="append", default=[])
    p.add_argument("--rows", type=int)
    p.add_argument("--min-rows", type=int, default=1)
    p.add_argument("--self-test", action="store_true")
    return p


def main(argv):
    command = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1:]
    args = build_parser().parse_args(argv)
    if args.self_test:
        return self_test()
    if not args.file or not args.col:
        print("check_csv.py: need FILE and at least one --col (or --self-test)", file=sys.stderr)
        return 2
    try:
        cols = parse_cols(args.col)
        positive = [n for s in args.positive for n in s.split(",") if n]
        le = []
        for s in args.le:
            a, sep, b = s.partition(":")
            if not sep or not a or not b:
                raise ValueError("--le wants A:B, got %r" % s)
            le.append((a, b))
        unique = [n for n in args.unique.split(",") if n]
        require = [parse_require(s) for s in args.require]
    except ValueError as e:
        print("check_csv.py: %s" % e, file=sys.stderr)
        return 2

    if command:
        try:
            os.unlink(args.file)  # a stale file from an earlier run must not pass for this one
        except FileNotFoundError:
            pass
        try:
            rc = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
        except OSError as e:
            print("check_csv.py: cannot run %s: %s" % (command[0], e), file=sys.stderr)
            return 1
        if rc == SKIPPED:
            print("check_csv.py: %s: skipped" % command[0], file=sys.stderr)
            return SKIPPED
        if rc != 0:
            print("check_csv.py: %s exited with %d" % (" ".join(command), rc), file=sys.stderr)
            return 1

    try:
        errs = check(args.file, cols, positive, le, unique, require, args.rows, args.min_rows)
    except ValueError as e:
        print("check_csv.py: %s" % e, file=sys.stderr)
        return 2
    for e in errs[:50]:
        print(e, file=sys.stderr)
    if len(errs) > 50:
        print("... and %d more" % (len(errs) - 50), file=sys.stderr)
    if errs:
        print("check_csv.py: %s is NOT well-formed (%d problems)" % (args.file, len(errs)))
        return 1
    print("check_csv.py: %s is well-formed" % args.file)
    return 0


def self_test():
    """Checks that the checker accepts a good file and rejects each kind of bad one."""
    spec = ["--col", "t:str", "--col", "dir:read|write", "--col", "size:int",
            "--col", "calls:int", "--col", "short:int", "--col", "mibs:num",
            "--positive", "calls,mibs", "--le", "short:calls", "--unique", "t,dir,size",
            "--require", "t=a,b;dir=read;size=1,2", "--rows", "4"]
    good = ["t,dir,size,calls,short,mibs",
            "a,read,1,10,0,1.5", "a,read,2,10,3,2", "b,read,1,5,5,0.25", "b,read,2,1,0,1e3"]
    bad = {
        "missing row": good[:-1],
        "extra row": good + ["a,write,1,1,0,1"],
        "wrong header": ["t,dir,size,calls,mibs,short"] + good[1:],
        "no header": [],
        "non-numeric": good[:1] + ["a,read,1,ten,0,1.5"] + good[2:],
        "negative": good[:1] + ["a,read,1,10,0,-1.5"] + good[2:],
        "nan": good[:1] + ["a,read,1,10,0,nan"] + good[2:],
        "calls zero": good[:1] + ["a,read,1,0,0,1.5"] + good[2:],
        "short > calls": good[:1] + ["a,read,1,10,11,1.5"] + good[2:],
        "bad enum": good[:1] + ["a,reed,1,10,0,1.5"] + good[2:],
        "short row": good[:1] + ["a,read,1,10,0"] + good[2:],
        "duplicate": good[:1] + ["a,read,2,10,0,1.5"] + good[2:],
        "empty str": good[:1] + [",read,1,10,0,1.5"] + good[2:],
    }
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.csv")

        def run(lines, extra=()):
            with open(path, "w") as f:
                f.write("".join(line + "\n" for line in lines))
            with open(os.devnull, "w") as null:
                old_out, old_err = sys.stdout, sys.stderr
                sys.stdout = sys.stderr = null
                try:
                    return main([path] + spec + list(extra))
                finally:
                    sys.stdout, sys.stderr = old_out, old_err

        if run(good) != 0:
            print("self-test: good file rejected")
            failures += 1
        for name, lines in bad.items():
            if run(lines) != 1:
                print("self-test: accepted a file with: %s" % name)
                failures += 1
        # A command that fails must fail the check, even if its file would be fine.
        if run(good, ["--", sys.executable, "-c", "raise SystemExit(3)"]) != 1:
            print("self-test: a failing command passed")
            failures += 1
        # A command that succeeds but writes nothing: the stale file is removed, so it fails.
        if run(good, ["--", sys.executable, "-c", "pass"]) != 1:
            print("self-test: a stale file passed for a command that wrote nothing")
            failures += 1
        # A command that cannot run here (77) skips the check rather than passing or failing it.
        if run(good, ["--", sys.executable, "-c", "raise SystemExit(77)"]) != SKIPPED:
            print("self-test: a command's skip (77) was not passed on")
            failures += 1
    total = len(bad) + 4
    print("%d passed, %d failed" % (total - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
