#!/usr/bin/env bash
# bench/middle.sh: middle-proxy mode (ad-tag) against direct mode in the same run, on 127.0.0.1.
#
#   bench/middle.sh [--build-dir DIR] [--out DIR] [--repeat N] [--quick]
#
# One worker each. Direct mode: bench_load (its own DC sink; fast mode + splice as shipped, and
# fast-mode off) with dd clients. Middle mode: tests/tools/me_client through mtproxy to
# tests/tools/fake_me (dd clients fetching 512 KiB parts, 4 outstanding, as apps fetch files;
# 64 KiB answers). Figures (medians of --repeat runs):
#   1. download throughput (MiB/s) and the proxy's CPU seconds per GiB, 1 and 64 clients;
#   2. round trip of a 256-byte packet, one client (direct: bench_load small, window 1);
#   3. the proxy's RSS with 8,000 idle middle-mode clients (the fd limit is 20,000);
#   4. slow-client isolation: 199 downloads alone vs beside one client that stopped reading.
# Writes OUT/middle.csv and OUT/middle.md (OUT default bench/results).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
REPEAT=3
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "middle.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
OUT=${OUT:-$ROOT/bench/results}
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
FAKE_ME=$BUILD/tests/tools/fake_me
ME_CLIENT=$BUILD/tests/tools/me_client
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    BYTES1=$((64 << 20)) BYTES64=$((1 << 20)) SECS=1 IDLE=500 ECHOES=200
else
    BYTES1=$((512 << 20)) BYTES64=$((8 << 20)) SECS=3 IDLE=8000 ECHOES=2000
fi
[ -x "$LOAD" ] || { echo "middle.sh: $LOAD not built" >&2; exit 1; }
mkdir -p "$OUT"
# shellcheck source=bench/lib_middle.sh
. "$ROOT/bench/lib_middle.sh"
middle_init middle

PM=$(port) PD=$(port) PN=$(port) LOADDC=$(port)
middle_start middle "$PM" --ad-tag 0123456789abcdef0123456789abcdef --me-pool 2 \
    --proxy-secret-file "$WORK/proxy-secret" --proxy-config-file "$WORK/proxy-multi.conf"
middle_start direct "$PD" --dc-builtin off --dc "2 127.0.0.1:$LOADDC"
sleep 0.5

CSV=$OUT/middle.csv
echo "figure,mode,clients,run,value,unit,cpu_s_per_gib" >"$CSV"

# Middle-mode download: prints "MiB/s cpu_s_per_GiB".
middle_down() {
    local n=$1 per=$2 t0 c0 t1 c1
    c0=$(cpu_ticks "$PID_middle")
    t0=$(now)
    "$ME_CLIENT" --proxy "127.0.0.1:$PM" --secret "$DD" --tag dd --clients "$n" \
        --download "$per" --chunk 65536 --part 524288 --window 4 --timeout 120 >"$WORK/mc.out" || {
        tail -5 "$WORK/mc.out" >&2; exit 1; }
    t1=$(now)
    c1=$(cpu_ticks "$PID_middle")
    awk -v b=$((n * per)) -v t="$(echo "$t1 - $t0" | bc)" -v c=$((c1 - c0)) -v hz="$HZ" \
        'BEGIN {printf "%.1f %.2f\n", b / t / 1048576, c / hz / (b / 1073741824)}'
}
# Direct-mode download through bench_load: prints "MiB/s cpu_s_per_GiB".
direct_down() {
    local n=$1 label=$2 pid=$3 p=$4 dcp=$5
    "$LOAD" --proxy-port "$p" --dc-port "$dcp" --secret "$DD" --client dd --workload bulk-down \
        --conns "$n" --seconds "$SECS" --proxy-pid "$pid" --label "$label" --quiet \
        --csv "$WORK/load.csv" >/dev/null
    tail -1 "$WORK/load.csv" | awk -F, '{printf "%.1f %.2f\n", $8 * 1e6 / 1048576, $17 * 1073741824 / 1e9}'
}

declare -A RES
for n in 1 64; do
    per=$([ "$n" = 1 ] && echo "$BYTES1" || echo "$BYTES64")
    for r in $(seq "$REPEAT"); do
        read -r m mc < <(middle_down "$n" "$per")
        read -r d dc < <(direct_down "$n" direct "$PID_direct" "$PD" "$LOADDC")
        echo "throughput,middle,$n,$r,$m,MiB/s,$mc" >>"$CSV"
        echo "throughput,direct,$n,$r,$d,MiB/s,$dc" >>"$CSV"
        echo "middle.sh: $n clients run $r: middle $m MiB/s ($mc s/GiB), direct $d MiB/s ($dc s/GiB)" >&2
    done
done
kill "$PID_direct"
# direct with fast mode off: the proxy does the AES both ways, as middle mode must
NDC=$(port)
middle_start nofast "$PN" --dc-builtin off --dc "2 127.0.0.1:$NDC" --fast-mode off
for n in 1 64; do
    for r in $(seq "$REPEAT"); do
        read -r d dc < <(direct_down "$n" nofast "$PID_nofast" "$PN" "$NDC")
        echo "throughput,direct-nofast,$n,$r,$d,MiB/s,$dc" >>"$CSV"
    done
done

# 2. round trips
for r in $(seq "$REPEAT"); do
    "$ME_CLIENT" --proxy "127.0.0.1:$PM" --secret "$DD" --tag dd --echo "$ECHOES" --size 256 \
        >"$WORK/rtt.out"
    us=$(sed -n 's/.*rtt_avg_us=\([0-9.]*\).*/\1/p' "$WORK/rtt.out")
    echo "rtt,middle,1,$r,$us,us," >>"$CSV"
    "$LOAD" --proxy-port "$PN" --dc-port "$NDC" --secret "$DD" --client dd --workload small \
        --msg-size 256 --conns 1 --window 1 --seconds "$SECS" --proxy-pid "$PID_nofast" \
        --label rtt --quiet --csv "$WORK/load.csv" >/dev/null
    us=$(tail -1 "$WORK/load.csv" | cut -d, -f11)
    echo "rtt,direct-nofast,1,$r,$us,us," >>"$CSV"
done
kill "$PID_nofast"

# 3. memory: IDLE clients connected, each after one echo, then idle
base=$(rss_kb "$PID_middle")
"$ME_CLIENT" --proxy "127.0.0.1:$PM" --secret "$DD" --tag dd --echo 1 --size 64 \
    --clients "$IDLE" --hold-ms 8000 --timeout 60 >"$WORK/idle.out" &
IDLEPID=$!
sleep 6
held=$(rss_kb "$PID_middle")
fds=$(find "/proc/$PID_middle/fd" -type l | wc -l)
wait "$IDLEPID" || true
echo "memory,middle,$IDLE,1,$held,rss_kb," >>"$CSV"
echo "memory,middle,0,1,$base,rss_kb," >>"$CSV"
echo "memory_fds,middle,$IDLE,1,$fds,fds," >>"$CSV"

# 4. slow-client isolation (199 readers of 1 MiB; the stalled one asks for 16 MiB)
for r in $(seq "$REPEAT"); do
    for stall in 0 1; do
        args=()
        [ "$stall" = 1 ] && args=(--stall 1 --stall-bytes $((16 << 20)))
        "$ME_CLIENT" --proxy "127.0.0.1:$PM" --secret "$DD" --tag dd --clients 200 \
            --download $((1 << 20)) --chunk 16384 "${args[@]}" --timeout 120 >"$WORK/iso.out"
        v=$(sed -n 's/^SUMMARY.* mibps=\([0-9.]*\) .*/\1/p' "$WORK/iso.out")
        echo "isolation,stall$stall,199,$r,$v,MiB/s," >>"$CSV"
    done
done
kill -USR1 "$PID_middle"
sleep 0.3
grep 'stats: me \|stats: closed' "$WORK/middle.log" | tail -2 >"$WORK/stats.txt" || true

# Report
med() { awk -F, -v f="$1" -v m="$2" -v n="$3" -v col="$4" '$1 == f && $2 == m && $3 == n {print $col}' "$CSV" | median; }
{
    echo "# Middle-proxy mode vs direct mode (bench/middle.sh)"
    echo
    echo "$(date -u +%Y-%m-%d) on $(nproc) cores ($(uname -m)), one worker, medians of $REPEAT runs."
    echo "dd clients; middle: me_client -> mtproxy -> fake_me (64 KiB answers); direct: bench_load"
    echo "(bulk-down) -> mtproxy -> bench_load's DC sink. CPU = the proxy's own utime + stime."
    echo
    echo "| clients | mode | MiB/s | proxy CPU s per GiB |"
    echo "|---|---|---|---|"
    for n in 1 64; do
        for m in direct direct-nofast middle; do
            echo "| $n | $m | $(med throughput $m $n 5) | $(med throughput $m $n 7) |"
        done
    done
    echo
    echo "Round trip of a 256-byte packet, 1 client: middle $(med rtt middle 1 5) us, direct"
    echo "(fast-mode off) $(med rtt direct-nofast 1 5) us (averages/medians per run, median of runs)."
    echo
    echo "Memory: RSS $(med memory middle 0 5) KiB with no client, $(med memory middle "$IDLE" 5) KiB"
    echo "with $IDLE idle middle-mode clients ($(med memory_fds middle "$IDLE" 5) descriptors:"
    echo "one per client, no upstream socket)."
    echo
    echo "Slow-client isolation: 199 clients downloading 1 MiB each, $(med isolation stall0 199 5)"
    echo "MiB/s alone and $(med isolation stall1 199 5) MiB/s beside one that stopped reading"
    echo "(closed at me-client-buffer). Last stats:"
    echo
    sed 's/^/    /' "$WORK/stats.txt"
} >"$OUT/middle.md"
cat "$OUT/middle.md"
