#!/usr/bin/env bash
# bench/relay.sh: relay benchmark matrix through the real mtproxy binary on 127.0.0.1.
#
#   bench/relay.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#                  [--only A,B,C,D,E] [--port N (proxy port; the DC sink takes N+1)]
#
# One worker (--workers 1), the proxy's DC is bench_load's own DC sink (--dc-builtin off
# --mask off, every address 127.0.0.1). Writes into OUT (default bench/results, --quick:
# BUILD/results-relay-quick): crypto.csv, replay.csv, relay.csv (one row per bench_load run;
# the label column names the proxy config), and from those relay.md, fastpath.md, batching.md,
# handshake.md, crypto.md, replay.md and relay_*.png (gnuplot, when installed).
#
# Matrix (full): A. block size 4,8,16,32,64 KiB (fast mode and splice on, as shipped) x plain,
# dd and ee clients x bulk-down, bulk-up, mtu (1460-byte writes DC->client), mtu-up (client->
# DC), small x 1 and 64 connections. B. fast off / on (splice off) / on + splice, dd and ee,
# bulk down and up, 1 connection; for ee also on + splice with splice-tls off (read + writev).
# C. write-batch 0, and 1/10/100 ms in each write-batch-mode (buffer, cork, msg-more): small,
# 64 connections with 4 messages in flight each (lock-step echo), and 64 connections each
# sending one message per ms without waiting for echoes (trickle: a stream a window coalesces).
# D. handshakes per second (plain, dd, ee; 16 in flight). E. connect to first DC byte,
# dc-pool 0 vs 2 (dd, one handshake at a time). F. socket buffers: sndbuf = rcvbuf = 0 (kernel
# default, autotuned), 64k, 256k, 1M on every proxy socket; dd and ee, bulk down and up, 1 and
# 64 connections. Medians of --repeat runs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
QUICK=0
REPEAT=3
SECONDS_RUN=2
PORT=""
ONLY="" # sections to run (e.g. "C" or "B,C"); with --only, relay.csv is appended to, not reset
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --port) PORT=$2; shift ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "relay.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECONDS_RUN=0.3
    OUT=${OUT:-$BUILD/results-relay-quick}
    BLOCKS="16384"
    WORKLOADS="bulk-down small"
    CONNS="1"
    BATCHES="0 10:buffer 10:cork 10:msg-more"
    SOCKBUFS="0 256k"
else
    OUT=${OUT:-$ROOT/bench/results}
    BLOCKS="4096 8192 16384 32768 65536"
    WORKLOADS="bulk-down bulk-up mtu mtu-up small"
    CONNS="1 64"
    SOCKBUFS="0 64k 256k 1M"
    BATCHES="0"
    for w in 1 10 100; do
        for m in buffer cork msg-more; do BATCHES="$BATCHES $w:$m"; done
    done
fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD" "$BUILD/bench/bench_crypto" "$BUILD/bench/bench_replay"; do
    [ -x "$b" ] || { echo "relay.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init relay
QUICK_FLAG=()
[ "$QUICK" = 1 ] && QUICK_FLAG=(--quick)
K_PLAIN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([plain]=$K_PLAIN [dd]=dd$K_DD [tls]=ee$K_EE$DOMAIN_HEX)

# start_proxy ARGS...: the proxy with the plain, dd and ee secrets (see bench_start_proxy).
start_proxy() {
    bench_start_proxy relay.sh 1800 --secret "p:$K_PLAIN" --secret "d:dd$K_DD" \
        --secret "t:ee$K_EE$DOMAIN_HEX" --log-level info "$@"
}
stop_proxy() { bench_stop_proxy; }

FAILED=0
fail() {
    echo "relay.sh: $*" >&2
    FAILED=$((FAILED + 1))
}
CSV=$OUT/relay.csv
[ -z "$ONLY" ] && rm -f "$CSV"
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
# run LABEL CLIENT WORKLOAD CONNS [bench_load args]: REPEAT runs, each a CSV row.
run() {
    local label=$1 client=$2 wl=$3 conns=$4
    shift 4
    for _ in $(seq "$REPEAT"); do
        timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "${SECRET[$client]}" \
            --client "$client" --workload "$wl" --conns "$conns" --seconds "$SECONDS_RUN" \
            --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" --label "$label" \
            --csv "$CSV" --quiet "$@" || fail "run failed: $label $client $wl $conns"
    done
}

if want crypto || [ -z "$ONLY" ]; then
echo "relay.sh: crypto bound" >&2
"$BUILD/bench/bench_crypto" "${QUICK_FLAG[@]}" --csv "$OUT/crypto.csv" >/dev/null
echo "relay.sh: replay cache" >&2
"$BUILD/bench/bench_replay" "${QUICK_FLAG[@]}" --csv "$OUT/replay.csv" >/dev/null
if command -v openssl >/dev/null && [ "$QUICK" = 0 ]; then
    openssl speed -seconds 2 -evp aes-256-ctr 2>/dev/null | tail -1 >"$OUT/openssl-speed.txt" ||
        true
fi
fi

# A. block sizes (fast mode + splice on, as shipped)
want A && for b in $BLOCKS; do
    echo "relay.sh: block $b" >&2
    start_proxy --block-size "$b"
    for c in $CONNS; do
        for wl in $WORKLOADS; do
            run "block=$b" plain "$wl" "$c"
            run "block=$b" tls "$wl" "$c"
            run "block=$b" dd "$wl" "$c"
        done
    done
    stop_proxy
done

# B. fast mode off / on / on + splice: CPU seconds per GB
want B && for mode in off on splice splice-tlscopy; do
    echo "relay.sh: fast $mode" >&2
    case $mode in
    off) start_proxy --fast-mode off --splice off ;;
    on) start_proxy --fast-mode on --splice off ;;
    splice) start_proxy --fast-mode on --splice on --splice-tls on ;;
    splice-tlscopy) start_proxy --fast-mode on --splice on --splice-tls off ;;
    esac
    for wl in bulk-down bulk-up; do
        [ "$mode" = splice-tlscopy ] || run "fast=$mode" dd "$wl" 1
        run "fast=$mode" tls "$wl" 1
    done
    stop_proxy
done

# C. write batching under many small messages
want C && for wm in $BATCHES; do
    w=${wm%%:*}
    m=buffer
    [ "$wm" = "$w" ] || m=${wm#*:}
    echo "relay.sh: write-batch ${w}ms mode $m" >&2
    start_proxy --write-batch "${w}ms" --write-batch-mode "$m"
    label="batch=$w"
    [ "$w" = 0 ] || label="batch=$w:$m"
    run "$label" dd small 64 --window 4
    run "$label" tls small 64 --window 4
    run "$label" dd trickle 64 --interval-ms 1
    stop_proxy
done

# D. handshakes per second, one worker
if want D; then
    echo "relay.sh: handshakes" >&2
    start_proxy
    for c in plain dd tls; do
        run "handshake" "$c" handshake 1 --concurrency 16
    done
    stop_proxy
fi

# E. connect -> first DC byte, dc-pool 0 vs 2 (the DC sink must listen before the proxy starts)
want E && for pool in 0 2; do
    echo "relay.sh: dc-pool $pool" >&2
    for _ in $(seq "$REPEAT"); do
        timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "${SECRET[dd]}" \
            --client dd --workload handshake --concurrency 1 --seconds "$SECONDS_RUN" \
            --pre-wait 1.5 --proxy-pidfile "$WORK/proxy.pid" --proxy-log "$WORK/proxy.log" \
            --label "pool=$pool" --csv "$CSV" --quiet &
        lp=$!
        sleep 0.3
        start_proxy --dc-pool "$pool"
        wait "$lp" || fail "dc-pool run failed"
        stop_proxy
    done
done

# F. socket buffers (SO_SNDBUF / SO_RCVBUF on the proxy's sockets)
want F && for sb in $SOCKBUFS; do
    echo "relay.sh: sndbuf = rcvbuf = $sb" >&2
    start_proxy --sndbuf "$sb" --rcvbuf "$sb"
    for c in $CONNS; do
        for wl in bulk-down bulk-up; do
            run "sockbuf=$sb" dd "$wl" "$c"
            run "sockbuf=$sb" tls "$wl" "$c"
        done
    done
    stop_proxy
done

[ -z "$ONLY" ] && : >"$OUT/relay-info.txt" # --only runs add their lines to the full run's
{
    echo "sections: ${ONLY:-all}"
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "cpus: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "repeat: $REPEAT, seconds per run: $SECONDS_RUN"
} >>"$OUT/relay-info.txt"
python3 "$ROOT/bench/relay_report.py" "$OUT"
echo "relay.sh: results in $OUT ($FAILED failed runs)" >&2
[ "$FAILED" = 0 ]
