#!/usr/bin/env bash
# bench/callgrind_pair.sh: instructions per message (or per MiB) of two mtproxy binaries under
# callgrind, for a refactor whose wall-clock figures drown in the shared machine's noise.
#
#   sh tests/netns.sh bash bench/callgrind_pair.sh OLD_BIN NEW_BIN [WORKLOAD] [SECONDS] [ROUNDS]
#
# Each round runs OLD then NEW under `valgrind --tool=callgrind` with one worker and a dd secret,
# drives it with this build's bench_load (WORKLOAD, default small: 4 connections' 200-byte
# ping-pong, for SECONDS, default 4), stops it with SIGTERM and takes callgrind's instruction
# total less an idle start and stop of the same binary; divided by the messages (small) or the
# MiB (bulk-*) bench_load counted. Loopback only (run it in tests/netns.sh's namespace).
# bench/guard counts fixed workloads the same way (bench/lib.sh's BENCH_WRAP) against the
# previous commit, for CI.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OLD=${1:?usage: callgrind_pair.sh OLD_BIN NEW_BIN [WORKLOAD] [SECONDS] [ROUNDS]}
NEW=${2:?usage: callgrind_pair.sh OLD_BIN NEW_BIN [WORKLOAD] [SECONDS] [ROUNDS]}
WL=${3:-small} SECS=${4:-4} ROUNDS=${5:-2}
LOAD=${BENCH_LOAD:-$ROOT/build-release/bench/bench_load}
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init callgrind-pair
KEY=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')

# one BIN WORKLOAD: prints "instructions units" (units: messages, or bytes for bulk). The
# proxy does not busy-poll: its spinning after events goes with time, not with the work.
one() {
    local bin=$1 wl=$2
    # shellcheck disable=SC2034 # bench_start_proxy runs it
    MTPROXY=$bin
    rm -f "$WORK/cg" "$WORK/csv"
    BENCH_WRAP="valgrind --tool=callgrind --callgrind-out-file=$WORK/cg" \
        bench_start_proxy callgrind_pair.sh 600 --secret "d:dd$KEY" --busy-poll 0
    if [ "$wl" != idle ]; then
        "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "dd$KEY" --client dd \
            --workload "$wl" --conns 4 --seconds "$SECS" --csv "$WORK/csv" --label x --quiet \
            >/dev/null 2>&1
    fi
    bench_stop_proxy
    local ir units=0
    ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$WORK/cg")
    if [ "$wl" = small ]; then
        units=$(tail -1 "$WORK/csv" | cut -d, -f10)
    elif [ "$wl" != idle ]; then
        units=$(tail -1 "$WORK/csv" | awk -F, '{print $6 + $7}')
    fi
    echo "$ir $units"
}

read -r idle_old _ < <(one "$OLD" idle)
read -r idle_new _ < <(one "$NEW" idle)
echo "idle start and stop: old $idle_old, new $idle_new instructions"
per=message
[ "$WL" = small ] || per=MiB
for r in $(seq "$ROUNDS"); do
    read -r a ua < <(one "$OLD" "$WL")
    read -r b ub < <(one "$NEW" "$WL")
    awk -v a="$a" -v b="$b" -v ia="$idle_old" -v ib="$idle_new" -v ua="$ua" -v ub="$ub" \
        -v per="$per" -v r="$r" 'BEGIN {
        d = (per == "MiB") ? 1048576 : 1
        x = (a - ia) / (ua / d); y = (b - ib) / (ub / d)
        printf "round %d: old %.0f, new %.0f instructions per %s: new/old %.3f\n", r, x, y, per, y / x
    }'
done
