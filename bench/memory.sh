#!/usr/bin/env bash
# bench/memory.sh: proxy memory (RSS, heap/anon/stack split) per relayed connection.
#
#   bench/memory.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--settle S]
#                   [--configs "pooled:on per-connection:off ..."]
#
# For each config (buffers pooled | per-connection) x (fast-mode on | off), a fresh one-worker
# proxy on 127.0.0.1 (--dc-builtin off --mask off, its DC is bench_load's sink) takes N dd
# clients: idle (handshake, then hold) for N = 100, 1000, 9000, and active (1000 clients each
# sending a 200-byte message every 100 ms, echoed by the DC). bench_load reads VmRSS before the
# first client (the baseline), once every connection is relayed, and (active) during the
# traffic (--settle S: how long after set-up, default 0.3 s; idle connections' cipher contexts
# are handed back after 1 s idle, so --settle 2.5 measures connections that are really idle);
# --buffer-memory 0 (no cap), so per-connection buffers are measured, not refused;
# /proc/PID/smaps gives the [heap] / anonymous / stack split. Writes memory.csv and
# memory.md into OUT (default bench/results; --quick: BUILD/results-memory-quick, N = 50, 200).
#
# Why 9000 and not 10,000: this machine allows 20,000 descriptors per process. The proxy needs
# two per relayed connection and the load tool two as well (client socket + DC-side socket), so
# 2N plus a few listeners must stay under 20,000: N = 9,000 leaves a safe margin.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
QUICK=0
REPEAT=2
SETTLE=0.3
CONFIGS_ARG="" # e.g. "per-connection:on": only these; memory.csv is then appended to
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --settle) SETTLE=$2; shift ;;
    --configs) CONFIGS_ARG=$2; shift ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    OUT=${OUT:-$BUILD/results-memory-quick}
    IDLE_NS="50 200"
    ACTIVE_N=50
    HOLD=0.3
    CONFIGS="pooled:on per-connection:on"
else
    OUT=${OUT:-$ROOT/bench/results}
    IDLE_NS="100 1000 9000"
    ACTIVE_N=1000
    HOLD=2
    CONFIGS="pooled:on pooled:off per-connection:on per-connection:off"
fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "memory.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
PORT=""
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init memory
K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# start_proxy ARGS...: the proxy with the dd secret and room for every connection; start-up
# allocations settle before the caller takes the RSS baseline.
start_proxy() {
    bench_start_proxy memory.sh 600 --secret "d:dd$K_DD" --max-connections 10000 \
        --buffer-memory 0 --log-level warn "$@"
    sleep 0.2
}
stop_proxy() { bench_stop_proxy; }

FAILED=0
CSV=$OUT/memory.csv
[ -n "$CONFIGS_ARG" ] && CONFIGS=$CONFIGS_ARG || rm -f "$CSV"
one() { # one CONFIG WORKLOAD N [args]: a fresh proxy, one bench_load run
    local cfg=$1 wl=$2 n=$3
    shift 3
    start_proxy --buffers "${cfg%%:*}" --fast-mode "${cfg##*:}"
    timeout 300 "$LOAD" --proxy-port $PORT --dc-port $DCPORT --secret "dd$K_DD" --client dd \
        --workload "$wl" --conns "$n" --seconds "$HOLD" --proxy-pid "$PROXY_PID" \
        --label "buffers=${cfg%%:*} fast=${cfg##*:}" --csv "$CSV" --settle "$SETTLE" --quiet "$@" ||
        { echo "memory.sh: run failed: $cfg $wl $n" >&2; FAILED=$((FAILED + 1)); }
    stop_proxy
}
for cfg in $CONFIGS; do
    for _ in $(seq "$REPEAT"); do
        for n in $IDLE_NS; do
            echo "memory.sh: $cfg idle $n" >&2
            one "$cfg" idle "$n"
        done
        echo "memory.sh: $cfg trickle $ACTIVE_N" >&2
        one "$cfg" trickle "$ACTIVE_N" --interval-ms 100
    done
done
python3 "$ROOT/bench/relay_report.py" --memory "$OUT"
echo "memory.sh: results in $OUT ($FAILED failed runs)" >&2
[ "$FAILED" = 0 ]
