#!/usr/bin/env bash
# bench/guard_selftest.sh: bench/guard's own test. On one build (DIR, default build):
#   1. the build against itself (both sides mtproxy, two rounds): the guard passes;
#   2. mtproxy_guard_slow (one extra copy of every relayed byte, MTPROXY_GUARD_SLOWDOWN)
#      against mtproxy: the guard fails (exit 1) and names the upload figures as grown;
#   3. that run judged again with an accepted-changes file naming them and its commit: it
#      passes; with lines naming another commit: it fails.
# The relay figures only, at a tenth of their size (about 30 s on 2 cores). Loopback only:
#
#   sh tests/netns.sh bench/guard_selftest.sh [DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
W=$(mktemp -d /tmp/mtproxy-guard-selftest.XXXXXX)
trap 'rm -rf "$W"' EXIT
FIGS=start,up-dd,up-ee,rtt-dd
G=("$ROOT/bench/guard" --build-dir "$BUILD" --ref-bin "$BUILD/mtproxy" --jobs 2 --scale 0.1
    --only "$FIGS")
fail() { echo "guard_selftest: FAILED: $*" >&2; exit 1; }

"${G[@]}" --repeat 2 --out "$W/same" || fail "the guard failed a build against itself"
rc=0
"${G[@]}" --new-bin "$BUILD/bench/mtproxy_guard_slow" --out "$W/slow" || rc=$?
[ "$rc" = 1 ] || fail "the guard passed (or broke: exit $rc) the build with an extra copy"
for f in up-dd up-ee; do
    grep -q "^| $f |.*GREW" "$W/slow/guard.md" || fail "$f not flagged on the slower build"
done
# The slower binary has no commit: judged as if it were commit 5e1f7e5 (the run's CSV says
# which commits it compared), with lines naming that commit, then one naming another.
sed 's/^0,-,new_commit,.*/0,-,new_commit,5e1f7e5000000000000000000000000000000000/' \
    "$W/slow/guard.csv" >"$W/slow.csv"
printf 'up-dd 5e1f7e5 2.0 self-test\nup-ee 5e1f7e5 2.0 self-test\n' >"$W/accepted.txt"
"${G[@]}" --judge "$W/slow.csv" --accepted "$W/accepted.txt" --out "$W/judged" ||
    fail "the accepted-changes file did not accept the lines naming the figures"
sed -i 's/5e1f7e5/0badc0d/' "$W/accepted.txt"
rc=0
"${G[@]}" --judge "$W/slow.csv" --accepted "$W/accepted.txt" --out "$W/judged2" || rc=$?
[ "$rc" = 1 ] || fail "lines naming another commit accepted the figures (exit $rc)"
echo "guard_selftest: passed (same build: passes; an extra copy: fails; accepted: passes;" \
    "accepted for another commit: fails)"
