#!/usr/bin/env bash
# bench/middle_stall.sh: middle-proxy mode, readers beside clients that stopped reading, on one
# ME link (issue 24, finding 3).
#
#   bench/middle_stall.sh [--build-dir DIR] [--base-dir DIR] [--readers N] [--stalled "1 3 10"]
#                         [--timeout S] [--repeat R] [--out DIR]
#
# One worker, --me-pool 1 (one link), --sndbuf 64 KiB. Each run: K clients ask for 3 MiB each
# and never read (K = 0, then each of --stalled), then N dd readers download 1 MiB each through
# tests/tools/me_client (the stalled ones start 0.5 s earlier, so the ME answers them first and
# the run does not depend on who is scheduled first). Prints per run the readers' throughput
# (MiB/s, from me_client's SUMMARY), how many of them finished, and the proxy's me counters
# (link_pauses, slow_closed, stalled_evicted) from its SIGUSR1 line. --base-dir: also the same runs with that build's
# mtproxy (the tools come from --build-dir). A reader gives up after --timeout s (default 20):
# each run ends within it (plus a second). --repeat: each run R times (default 1).
# Writes OUT/middle_stall.csv (OUT default bench/results) and prints a table.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
BASE=""
OUT=""
READERS=40
STALLED="1 3 10"
TIMEOUT=20
REPEAT=1
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --base-dir) BASE=$2; shift ;;
    --readers) READERS=$2; shift ;;
    --stalled) STALLED=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "middle_stall.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
OUT=${OUT:-$ROOT/bench/results}
MTPROXY=$BUILD/mtproxy
FAKE_ME=$BUILD/tests/tools/fake_me
ME_CLIENT=$BUILD/tests/tools/me_client
mkdir -p "$OUT"
# shellcheck source=bench/lib_middle.sh
. "$ROOT/bench/lib_middle.sh"
middle_init middle_stall

CSV=$OUT/middle_stall.csv
echo "build,run,stalled,readers,ok,fail,mibps,secs,link_pauses,slow_closed,stalled_evicted" >"$CSV"

# me_counter NAME PID LOG: the proxy's "stats: me ... NAME N" value (0 when it has none).
me_counter() {
    grep 'stats: me ' "$3" | tail -1 | sed -n "s/.* $1 \([0-9]*\).*/\1/p" | grep . || echo 0
}

run_build() {
    local label=$1 bin=$2 k p pid mark r
    for r in $(seq "$REPEAT"); do
    for k in 0 $STALLED; do
        p=$(port)
        MTPROXY=$bin middle_start "$label$k" "$p" --ad-tag 0123456789abcdef0123456789abcdef \
            --me-pool 1 --proxy-secret-file "$WORK/proxy-secret" \
            --proxy-config-file "$WORK/proxy-multi.conf" --sndbuf 65536
        pid=$(eval echo "\$PID_$label$k")
        sleep 0.3 # the link's handshake
        local spid=""
        if [ "$k" -gt 0 ]; then # the stalled clients first: the ME answers them in full
            "$ME_CLIENT" --proxy "127.0.0.1:$p" --secret "$DD" --tag dd --clients "$k" \
                --stall "$k" --download $((3 << 20)) --hold-ms $(((TIMEOUT + 5) * 1000)) \
                --timeout $((TIMEOUT + 10)) >"$WORK/stalled.out" 2>&1 &
            spid=$!
            sleep 0.5
        fi
        "$ME_CLIENT" --proxy "127.0.0.1:$p" --secret "$DD" --tag dd --clients "$READERS" \
            --download $((1 << 20)) --timeout "$TIMEOUT" >"$WORK/run.out" 2>&1 || true
        [ -n "$spid" ] && { kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true; }
        mark=$(grep -c 'stats: me ' "$WORK/$label$k.log" || true)
        kill -USR1 "$pid"
        for _ in $(seq 50); do
            [ "$(grep -c 'stats: me ' "$WORK/$label$k.log" || true)" -gt "$mark" ] && break
            sleep 0.1
        done
        kill "$pid"
        read -r mibps secs < <(sed -n \
            's/^SUMMARY .* secs=\([0-9.]*\) mibps=\([0-9.]*\) .*/\2 \1/p' "$WORK/run.out")
        local rfail # readers that did not finish
        rfail=$(grep -c '^FAIL' "$WORK/run.out" || true)
        printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$label" "$r" "$k" "$READERS" \
            "$((READERS - rfail))" "$rfail" "$mibps" "$secs" \
            "$(me_counter link_pauses "$pid" "$WORK/$label$k.log")" \
            "$(me_counter slow_closed "$pid" "$WORK/$label$k.log")" \
            "$(me_counter stalled_evicted "$pid" "$WORK/$label$k.log")" | tee -a "$CSV"
    done
    done
}

[ -n "$BASE" ] && run_build before "$BASE/mtproxy"
run_build after "$MTPROXY"
echo
column -s, -t "$CSV"
