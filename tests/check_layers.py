#!/usr/bin/env python3
# check_layers.py: the rooms of src/ call only downwards, and nothing in src/ closes a circle:
# - every call from one room (src/ROOM/) into another is allowed by ROOMS below (a room may
#   call the rooms listed after it, and nothing else), and ROOMS itself has no circle;
# - the call graph between src/ files (the object files' defined and undefined symbols, nm)
#   and the #include graph of include/ have no cycle.
#
# usage: check_layers.py BUILD_DIR SOURCE_DIR [ALLOW_FILE]
# ALLOW_FILE lists call edges known to close a circle, one "from.c to.c" a line (# comments):
# they are left out of the graph and reported as allowed. An empty list is the goal.
import os
import re
import subprocess
import sys


# Which rooms each room may call (src/README.md says what each holds). main.c calls them all.
ROOMS = {
    'crypto': [],
    'proto': ['crypto'],
    'core': [],
    'http': ['core', 'proto', 'crypto'],
    'users': ['core', 'proto', 'crypto'],
    'relay': ['users', 'core', 'proto', 'crypto'],
    'upstream': ['relay', 'users', 'core', 'proto', 'crypto'],
    'config': ['upstream', 'relay', 'users', 'core', 'proto', 'crypto'],
    'conn': ['config', 'upstream', 'relay', 'users', 'core', 'proto', 'crypto'],
    'web': ['http', 'conn', 'config', 'upstream', 'relay', 'users', 'core', 'proto', 'crypto'],
    'admin': ['web', 'http', 'conn', 'config', 'upstream', 'relay', 'users', 'core', 'proto',
              'crypto'],
}


def room(path):
    """src/ROOM/x.c -> ROOM; src/main.c -> 'main'."""
    parts = path.split('/')
    return parts[1] if len(parts) > 2 else 'main'


def room_violations(calls):
    """Calls between rooms that ROOMS does not allow: {(from room, to room): [file edges]}."""
    out = {}
    for a, targets in calls.items():
        ra = room(a)
        for b, syms in targets.items():
            rb = room(b)
            if ra == rb or ra == 'main':
                continue
            if rb not in ROOMS.get(ra, []):
                out.setdefault((ra, rb), []).append('%s -> %s (%s)' %
                                                    (a, b, ', '.join(sorted(set(syms))[:3])))
    return out


def objects(build, src):
    """src-relative path of each src/ file -> its object file in build."""
    out = {}
    for root, _, files in os.walk(build):
        for f in files:
            if not f.endswith('.c.o'):
                continue
            path = os.path.join(root, f)
            m = re.search(r'/src/(.+\.c)\.o$', path)
            if m and 'CMakeFiles/' in path and os.path.exists(os.path.join(src, 'src', m.group(1))):
                out.setdefault('src/' + m.group(1), path)
    return out


def symbols(obj):
    """(defined, undefined) global symbols of an object file."""
    res = subprocess.run(['nm', '-P', obj], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == 'U':
            undefined.add(name)
        elif kind in 'TDBRGSVW' and kind.isupper():
            defined.add(name)
    return defined, undefined


def call_graph(objs):
    owner, needs = {}, {}
    for f, o in objs.items():
        d, u = symbols(o)
        needs[f] = u
        for s in d:
            owner.setdefault(s, f)
    edges = {}
    for f, u in needs.items():
        for s in u:
            t = owner.get(s)
            if t and t != f:
                edges.setdefault(f, {}).setdefault(t, []).append(s)
    return edges


def include_graph(src):
    edges = {}
    inc = os.path.join(src, 'include')
    for root, _, files in os.walk(inc):
        for f in files:
            if not f.endswith('.h'):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, inc)
            with open(path, encoding='utf-8', errors='replace') as fh:
                for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', fh.read(), re.M):
                    if os.path.exists(os.path.join(inc, m.group(1))):
                        edges.setdefault(rel, {})[m.group(1)] = []
    return edges


def cycles(edges):
    """Strongly connected components of more than one node (Tarjan), and self-loops."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def report(kind, edges, comps):
    for comp in comps:
        print('%s cycle: %s' % (kind, ' <-> '.join(comp)))
        for a in comp:
            for b, syms in sorted(edges.get(a, {}).items()):
                if b in comp:
                    shown = ', '.join(sorted(set(syms))[:4])
                    print('    %s -> %s%s' % (a, b, (' (' + shown + ')') if shown else ''))


def self_test():
    """The check catches what it is for: an upward call, a room circle, a file circle."""
    calls = {'src/users/users.c': {'src/conn/conn.c': ['conn_accept']},
             'src/conn/conn.c': {'src/users/users.c': ['users_admit']},
             'src/main.c': {'src/admin/api.c': ['api_start']}}
    bad = room_violations(calls)
    assert list(bad) == [('users', 'conn')], bad
    assert cycles(calls) == [['src/conn/conn.c', 'src/users/users.c']]
    assert cycles({'a': {'b': []}, 'b': {'a': []}}) == [['a', 'b']]
    assert not cycles({r: {t: [] for t in ts} for r, ts in ROOMS.items()})
    print('check_layers: self-test passed')
    return 0


def main():
    if sys.argv[1:] == ['--self-test']:
        return self_test()
    if len(sys.argv) < 3:
        print(__doc__ or 'usage: check_layers.py BUILD_DIR SOURCE_DIR [ALLOW_FILE]')
        return 2
    build, src = sys.argv[1], sys.argv[2]
    allow = set()
    if len(sys.argv) > 3 and os.path.exists(sys.argv[3]):
        with open(sys.argv[3]) as fh:
            for line in fh:
                line = line.split('#', 1)[0].split()
                if len(line) == 2:
                    allow.add((line[0], line[1]))
    objs = objects(build, src)
    if not objs:
        print('check_layers: no object files of src/ under %s (build first)' % build)
        return 2
    calls = call_graph(objs)
    unknown = sorted({room(f) for f in objs} - set(ROOMS) - {'main'})
    for r in unknown:
        print('room src/%s/ is not in check_layers.py ROOMS: say which rooms it may call' % r)
    room_cycles = cycles({r: {t: [] for t in ts} for r, ts in ROOMS.items()})
    report('rooms', {r: {t: [] for t in ts} for r, ts in ROOMS.items()}, room_cycles)
    bad = room_violations(calls)
    for (ra, rb), edges in sorted(bad.items()):
        print('room %s may not call room %s:' % (ra, rb))
        for e in sorted(edges):
            print('    ' + e)
    used = set()
    for a, b in sorted(allow):
        if b in calls.get(a, {}):
            used.add((a, b))
            del calls[a][b]
            print('allowed (to go): %s -> %s' % (a, b))
    for a, b in sorted(allow - used):
        print('allow-list entry no longer needed: %s -> %s' % (a, b))
    call_cycles = cycles(calls)
    inc = include_graph(src)
    inc_cycles = cycles(inc)
    report('call', calls, call_cycles)
    report('include', inc, inc_cycles)
    n = len(call_cycles) + len(inc_cycles) + len(room_cycles)
    between = sum(1 for a, ts in calls.items() for b in ts if room(a) != room(b))
    print('check_layers: %d files in %d rooms, %d call edges (%d between rooms), '
          '%d cycles, %d calls against the rooms\' order, %d rooms unknown' %
          (len(objs), len({room(f) for f in objs}), sum(len(v) for v in calls.values()),
           between, n, sum(len(v) for v in bad.values()), len(unknown)))
    return 1 if n or bad or unknown else 0


if __name__ == '__main__':
    sys.exit(main())
