#!/usr/bin/env bash
# bench/handshake.sh: the proxy's CPU per handshake, split into user (ours) and kernel time.
#
#   bench/handshake.sh [--build-dir DIR] [--prev BIN] [--repeat N] [--seconds S]
#                      [--concurrency C] [--clients "tls dd"] [--out DIR]
#
# A one-worker proxy pinned to CPU 0 (--dc-builtin off --mask off, its DC is bench_load's sink)
# takes back-to-back handshakes from bench_load on CPU 1 (connect, handshake, one round trip,
# close; C in flight, default 16) for S seconds (default 3). Its utime and stime are read from
# /proc/PID/stat around the run: user time is the proxy's own work (our code, libcrypto, libc,
# libev), system time the kernel's (accept, connect, close, loopback TCP both ways). With
# --prev BIN (an mtproxy binary of an earlier build) each repeat runs prev and this build back
# to back, so their ratio comes from one run. Prints a table (medians of N, default 5) and
# writes handshake-cpu.csv into OUT (default BUILD/results-handshake).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
PREV=""
REPEAT=5
SECS=3
CONC=16
CLIENTS="tls dd"
OUT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --prev) PREV=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    --concurrency) CONC=$2; shift ;;
    --clients) CLIENTS=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "handshake.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
OUT=${OUT:-$BUILD/results-handshake}
LOAD=$BUILD/bench/bench_load
for b in "$BUILD/mtproxy" "$LOAD" ${PREV:+"$PREV"}; do
    [ -x "$b" ] || { echo "handshake.sh: $b missing" >&2; exit 2; }
done
mkdir -p "$OUT"
PORT=""
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init handshake
KEY=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
CSV=$OUT/handshake-cpu.csv
echo "client,build,run,handshakes_per_s,handshakes,user_us,sys_us,total_us" >"$CSV"
TICK=$(getconf CLK_TCK)

# utime stime of PROXY_PID in clock ticks (fields 14 and 15 of /proc/PID/stat).
ticks() { sed 's/.*) //' "/proc/$PROXY_PID/stat" | awk '{print $12, $13}'; }

run_one() { # client build-name binary run
    local client=$1 name=$2 bin=$3 run=$4 secret
    case $client in
    tls) secret="ee$KEY$(printf 'example.com' | od -An -tx1 | tr -d ' \n')" ;;
    dd) secret="dd$KEY" ;;
    *) secret=$KEY ;;
    esac
    MTPROXY=$bin bench_start_proxy handshake.sh 120 --secret "h:$secret" --log-level warn \
        --max-connections 10000
    taskset -p -c 0 "$PROXY_PID" >/dev/null
    local before after rowf
    before=$(ticks)
    rowf=$WORK/row.csv
    rm -f "$rowf"
    taskset -c 1 timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
        --secret "$secret" --client "$client" --workload handshake --concurrency "$CONC" \
        --seconds "$SECS" --csv "$rowf" --quiet
    after=$(ticks)
    bench_stop_proxy
    local hps
    hps=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "handshakes_per_s") c = i }
                   NR == 2 { print $c }' "$rowf")
    awk -v b="$before" -v a="$after" -v hps="$hps" -v secs="$SECS" -v tick="$TICK" \
        -v tag="$client,$name,$run" 'BEGIN {
            split(b, x, " "); split(a, y, " "); n = hps * secs
            u = (y[1] - x[1]) / tick * 1e6 / n; s = (y[2] - x[2]) / tick * 1e6 / n
            printf "%s,%.0f,%d,%.1f,%.1f,%.1f\n", tag, hps, n, u, s, u + s }' >>"$CSV"
}

for client in $CLIENTS; do
    for run in $(seq "$REPEAT"); do
        [ -n "$PREV" ] && run_one "$client" prev "$PREV" "$run"
        run_one "$client" this "$BUILD/mtproxy" "$run"
    done
done

python3 - "$CSV" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = {}
for key in sorted({(r["client"], r["build"]) for r in rows}):
    sel = [r for r in rows if (r["client"], r["build"]) == key]
    med[key] = {k: statistics.median(float(r[k]) for r in sel)
                for k in ("handshakes_per_s", "user_us", "sys_us", "total_us")}
    med[key]["runs"] = len(sel)
print("| client | build | handshakes/s | proxy user µs/handshake | kernel µs | total µs | runs |")
print("|---|---|---|---|---|---|---|")
for (client, build), m in med.items():
    print(f"| {client} | {build} | {m['handshakes_per_s']:.0f} | {m['user_us']:.1f} | "
          f"{m['sys_us']:.1f} | {m['total_us']:.1f} | {m['runs']} |")
for client in sorted({c for c, _ in med}):
    if (client, "prev") in med and (client, "this") in med:
        p, t = med[(client, "prev")], med[(client, "this")]
        print(f"{client}: this/prev user {t['user_us'] / p['user_us']:.2f}x, "
              f"total {t['total_us'] / p['total_us']:.2f}x, "
              f"handshakes/s {t['handshakes_per_s'] / p['handshakes_per_s']:.2f}x")
EOF
