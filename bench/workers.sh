#!/usr/bin/env bash
# bench/workers.sh: one worker against two on this machine: throughput, the proxy's CPU per unit
# of work (is a second worker as efficient per CPU-second as the first?), the load tool's CPU,
# and how SO_REUSEPORT spreads connections over the workers.
#
#   bench/workers.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#                    [--workers "1 2"] [--busy "20"] [--spread-runs N]
#
# For each run, alternating --workers 1 and 2 (a fresh proxy each, nothing pinned: the proxy's
# workers and bench_load's one thread share the machine's CPUs as the scheduler places them):
# ee and dd handshakes (16 in flight: connect, handshake, DC connect and header, one byte back,
# close), then 64-connection dd bulk download and upload, each --seconds long. Per cell:
# handshakes/s or MB/s, the proxy's CPU-seconds (utime+stime of the whole process) and from them
# µs per handshake or CPU-s per GB, each worker thread's share of it (/proc/PID/task), the load
# tool's own CPU, and the connections each worker accepted (SIGUSR1 "per-worker accepted").
# --busy "0 20": each cell also for each busy-poll value (µs; the proxy's default is 20 on 2+
# CPUs: a worker that ran callbacks polls that long before sleeping). Then the spread alone:
# 64 and 1,000 idle connections to a two-worker proxy, --spread-runs times each. Writes
# workers.csv, workers-spread.csv and workers.md into OUT (default bench/results; --quick:
# BUILD/results-workers-quick, 1 short run). Runs itself in a network namespace of its own
# (unshare -n, root).
set -euo pipefail

if [ -z "${WORKERS_IN_NETNS:-}" ]; then
    [ "$(id -u)" = 0 ] || { echo "workers.sh: needs root (network namespace)" >&2; exit 77; }
    exec unshare -n env WORKERS_IN_NETNS=1 sh -c 'ip link set lo up && exec "$@"' workers \
        bash "$0" "$@"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
REPEAT=3
SECONDS_RUN=2
WORKERS="1 2"
BUSY="20"
SPREAD_RUNS=4
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 REPEAT=1 SECONDS_RUN=0.3 SPREAD_RUNS=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --workers) WORKERS=$2; shift ;;
    --busy) BUSY=$2; shift ;;
    --spread-runs) SPREAD_RUNS=$2; shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "workers.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$BUILD/results-workers-quick}; else OUT=${OUT:-$ROOT/bench/results}; fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "workers.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init workers
K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]="dd$K_DD" [tls]="ee$K_EE$DOMAIN_HEX")
CSV=$OUT/workers.csv
SPREAD_CSV=$OUT/workers-spread.csv
echo "workers,busy_us,run,workload,client,rate,unit,proxy_cpu_s,seconds,cpu_per_unit,per_thread_cpu_s,load_cpu_s,accepted_per_worker,errors" >"$CSV"
echo "conns,run,accepted_per_worker" >"$SPREAD_CSV"

start_proxy() {
    bench_start_proxy workers.sh 600 --workers "$1" --busy-poll "${2:-20}" --secret "d:${SECRET[dd]}" \
        --secret "t:${SECRET[tls]}" --max-connections 5000 --log-level info
}

# accepted: "w0 N w1 M" now.
accepted() { bench_stats_line "per-worker accepted: *" | sed 's/^ *//'; }

# thread_cpu: "TID:TICKS ..." for each of the proxy's threads (utime + stime, clock ticks).
thread_cpu() {
    local t
    for t in /proc/"$PROXY_PID"/task/*; do
        awk -v t="${t##*/}" '{ sub(/.*\) /, ""); printf "%s:%d ", t, $12 + $13 }' "$t/stat"
    done
}

# delta A B: per-key differences of "k:v" (or "wN N") lists, biggest first, "/"-separated.
delta() {
    python3 - "$1" "$2" "$3" <<'EOF'
import sys
def parse(s, pairs):
    t = s.split()
    return dict(zip(t[0::2], map(int, t[1::2]))) if pairs else {k: int(v) for k, v in (x.split(":") for x in t)}
pairs = sys.argv[3] == "pairs"
a, b = parse(sys.argv[1], pairs), parse(sys.argv[2], pairs)
d = [b[k] - a.get(k, 0) for k in b]
if not pairs:
    d = sorted((x for x in d if x > 0), reverse=True) or [0]
    print("/".join("%.2f" % (x / 100.0) for x in d))
else:
    print("/".join(str(x) for x in d))
EOF
}

# run_load WORKERS BUSY RUN WORKLOAD CLIENT ARGS...: one bench_load window; one CSV row.
run_load() {
    local w=$1 busy=$2 run=$3 wl=$4 client=$5
    shift 5
    rm -f "$WORK/run.csv"
    local a0 t0 a1 t1 rc=0
    a0=$(accepted)
    t0=$(thread_cpu)
    timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "${SECRET[$client]}" \
        --client "$client" --workload "$wl" --seconds "$SECONDS_RUN" --proxy-pid "$PROXY_PID" \
        --csv "$WORK/run.csv" --quiet "$@" >"$WORK/load.out" 2>&1 || rc=$?
    t1=$(thread_cpu)
    a1=$(accepted)
    [ -s "$WORK/run.csv" ] || { echo "workers.sh: bench_load failed:" >&2; cat "$WORK/load.out" >&2; exit 1; }
    local acc thr
    acc=$(delta "$a0" "$a1" pairs)
    thr=$(delta "$t0" "$t1" ticks)
    tail -1 "$WORK/run.csv" | awk -F, -v w="$w,$busy" -v run="$run" -v wl="$wl" -v c="$client" \
        -v acc="$acc" -v thr="$thr" -v rc="$rc" '{
        secs = $5; cpu = $16; load = $29
        if (wl == "handshake") { rate = $15; unit = "hs/s"; per = rate > 0 ? cpu / (rate * secs) * 1e6 : 0 }
        else { rate = $8 + $9; unit = "MB/s"; per = $17 }
        printf "%s,%s,%s,%s,%.1f,%s,%.3f,%.3f,%.3f,%s,%.3f,%s,%s\n", w, run, wl, c, rate, unit,
            cpu, secs, per, thr, load, acc, $30 }' >>"$CSV"
    echo "workers.sh: $(tail -1 "$CSV")" >&2
}

for run in $(seq "$REPEAT"); do
    for busy in $BUSY; do
        for w in $WORKERS; do
            start_proxy "$w" "$busy"
            run_load "$w" "$busy" "$run" handshake tls --concurrency 16
            run_load "$w" "$busy" "$run" handshake dd --concurrency 16
            run_load "$w" "$busy" "$run" bulk-down dd --conns 64
            run_load "$w" "$busy" "$run" bulk-up dd --conns 64
            bench_stop_proxy
        done
    done
done

start_proxy 2
for conns in 64 1000; do
    for run in $(seq "$SPREAD_RUNS"); do
        a0=$(accepted)
        timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "${SECRET[dd]}" \
            --client dd --workload idle --conns "$conns" --seconds 0.2 --quiet \
            >"$WORK/load.out" 2>&1 || { cat "$WORK/load.out" >&2; exit 1; }
        a1=$(accepted)
        echo "$conns,$run,$(delta "$a0" "$a1" pairs)" >>"$SPREAD_CSV"
        echo "workers.sh: spread $conns: $(tail -1 "$SPREAD_CSV")" >&2
    done
done
bench_stop_proxy

python3 - "$CSV" "$SPREAD_CSV" "$OUT/workers.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
spread = list(csv.DictReader(open(sys.argv[2])))
out = ["# One worker against two (nothing pinned; medians over runs)\n",
       "| workload | workers | busy-poll µs | rate | proxy CPU-s per s | proxy CPU per unit | per worker thread, CPU-s (one run) | load tool CPU-s per s | accepted per worker (one run) |",
       "|---|---|---|---|---|---|---|---|---|"]
groups = {}
for r in rows:
    groups.setdefault((r["workload"] + " " + r["client"], (int(r["workers"]), int(r["busy_us"]))), []).append(r)
order = ["handshake tls", "handshake dd", "bulk-down dd", "bulk-up dd"]
for name in order:
    for w in sorted({k[1] for k in groups}):
        g = groups.get((name, w))
        if not g:
            continue
        m = lambda c: statistics.median(float(r[c]) for r in g)
        unit = g[0]["unit"]
        per = "%.1f µs/handshake" % m("cpu_per_unit") if unit == "hs/s" else "%.3f s/GB" % m("cpu_per_unit")
        mid = sorted(g, key=lambda r: float(r["rate"]))[len(g) // 2]
        out.append("| %s | %d | %d | %.0f %s | %.2f | %s | %s | %.2f | %s |" % (
            name.replace("tls", "ee").replace("handshake", "handshakes"), w[0], w[1], m("rate"), unit,
            statistics.median(float(r["proxy_cpu_s"]) / float(r["seconds"]) for r in g), per,
            mid["per_thread_cpu_s"], statistics.median(float(r["load_cpu_s"]) / float(r["seconds"]) for r in g),
            mid["accepted_per_worker"]))
out.append("\n# SO_REUSEPORT spread, two workers (connections accepted per worker, each run)\n")
out.append("| connections | runs |")
out.append("|---|---|")
for conns in sorted({int(r["conns"]) for r in spread}):
    out.append("| %d | %s |" % (conns, ", ".join(r["accepted_per_worker"] for r in spread if int(r["conns"]) == conns)))
open(sys.argv[3], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
