#!/usr/bin/env bash
# bench/softirq.sh: how much of the proxy's download CPU is its own work, and how much is its
# loopback peers' TCP work charged to it.
#
#   bench/softirq.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S] [--steer]
#
# On loopback a packet is received at once, in softirq, in the context of whoever sent it. So the
# proxy's CPU-seconds (what bench/relay.sh reports) include the client's TCP receive of what the
# proxy sends and, through the ACKs the proxy sends, the DC's TCP send: work that runs on other
# machines in a deployment, and about the same in every mode. This runs section B's download cells
# (dd and ee; fast off / on, splice off / on + splice; 1 connection; one worker) and splits the
# proxy's CPU:
#   default   perf samples the proxy (perf record -g); "process context" = proxy CPU x (1 - the
#             share of samples under the softirq handler). Needs perf.
#   --steer   (root, 2+ CPUs) in a private network + mount namespace, RPS steers loopback's receive
#             processing to CPUs 1..n-1; the proxy is pinned to CPU 0, the load tool to the others.
#             The proxy's CPU-seconds then leave out all receive processing, its own included.
# Medians of --repeat runs (default 3, 2 s each). Writes softirq.csv and softirq.md (softirq-
# steer.* with --steer) into OUT (default bench/results). --quick: --steer, one 0.3 s run per cell
# into BUILD/results-softirq-quick, exit 77 (skipped) where it cannot steer.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
REPEAT=3
SECONDS_RUN=2
STEER=0
QUICK=0
ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; STEER=1; REPEAT=1; SECONDS_RUN=0.3 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --steer) STEER=1 ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "softirq.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$BUILD/results-softirq-quick}; else OUT=${OUT:-$ROOT/bench/results}; fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "softirq.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
NCPU=$(nproc)
NOSTEER=2
[ "$QUICK" = 1 ] && NOSTEER=77 # a smoke run where it cannot steer: skipped
if [ "$STEER" = 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "softirq.sh: --steer needs root" >&2; exit "$NOSTEER"; }
    [ "$NCPU" -ge 2 ] || { echo "softirq.sh: --steer needs 2 CPUs" >&2; exit "$NOSTEER"; }
    unshare -n -m true 2>/dev/null || { echo "softirq.sh: --steer needs unshare -n -m" >&2; exit "$NOSTEER"; }
    if [ -z "${SOFTIRQ_STEERED:-}" ]; then
        # a namespace of our own: loopback only, and a sysfs that shows its lo
        exec unshare -n -m env SOFTIRQ_STEERED=1 "$0" "${ARGS[@]}"
    fi
    if ! { mount -t sysfs sysfs /sys && ip link set lo up &&
        printf '%x\n' $(((1 << NCPU) - 2)) >/sys/class/net/lo/queues/rx-0/rps_cpus; }; then
        echo "softirq.sh: cannot steer loopback (sysfs, RPS)" >&2
        exit "$NOSTEER"
    fi
    PIN_PROXY=(taskset -a -pc 0)
    PIN_LOAD=(taskset -c "1-$((NCPU - 1))")
    NAME=softirq-steer
else
    command -v perf >/dev/null || { echo "softirq.sh: perf missing (apt-get install linux-perf)" >&2; exit 2; }
    PIN_PROXY=()
    PIN_LOAD=()
    NAME=softirq
fi
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init softirq
K=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]=dd$K [tls]=ee$K$DOMAIN_HEX)
declare -A MODE=([off]="--fast-mode off" [on]="--splice off" [splice]="")
CSV=$OUT/$NAME.csv
echo "client,mode,steer,mb_s,cpu_s_per_gb,softirq_share,process_s_per_gb" >"$CSV"

# The share of the proxy's samples under the softirq handler (0 when steered: not sampled).
softirq_share() {
    perf report -i "$1" --children --sort sym -g none --stdio 2>/dev/null |
        awk '$NF == "handle_softirqs" || $NF == "__do_softirq" {
                 v = $1; sub("%", "", v); if (v + 0 > m) m = v + 0 }
             END { printf "%.4f\n", m / 100 }'
}

for client in dd tls; do
    for mode in off on splice; do
        echo "softirq.sh: $client $mode" >&2
        # shellcheck disable=SC2086 # MODE holds words
        bench_start_proxy softirq.sh 600 --secret "x:${SECRET[$client]}" ${MODE[$mode]}
        [ ${#PIN_PROXY[@]} -gt 0 ] && "${PIN_PROXY[@]}" "$PROXY_PID" >/dev/null
        for _ in $(seq "$REPEAT"); do
            PERF_PID=""
            if [ "$STEER" = 0 ]; then
                perf record -q -g -o "$WORK/perf.data" -p "$PROXY_PID" >/dev/null 2>&1 &
                PERF_PID=$!
                sleep 0.3 # perf attached before the load starts
            fi
            rm -f "$WORK/run.csv"
            "${PIN_LOAD[@]}" timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
                --secret "${SECRET[$client]}" --client "$client" --workload bulk-down --conns 1 \
                --seconds "$SECONDS_RUN" --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" \
                --label "$client-$mode" --csv "$WORK/run.csv" --quiet
            share=0
            if [ -n "$PERF_PID" ]; then
                kill -INT "$PERF_PID"
                wait "$PERF_PID" || true
                share=$(softirq_share "$WORK/perf.data")
            fi
            tail -1 "$WORK/run.csv" | awk -F, -v c="$client" -v m="$mode" -v s="$STEER" -v sh="$share" \
                '{ printf "%s,%s,%s,%s,%s,%s,%.4f\n", c, m, s, $8, $17, sh, $17 * (1 - sh) }' >>"$CSV"
        done
        bench_stop_proxy
    done
done

python3 - "$CSV" "$STEER" >"$OUT/$NAME.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
steer = sys.argv[2] == "1"
names = {"off": "off", "on": "on, splice off", "splice": "on + splice"}
med = lambda rs, k: statistics.median(float(r[k]) for r in rs)
print("# Proxy CPU on loopback: own work and peers' (bench/softirq.sh%s, download, 1 connection)\n"
      % (" --steer" if steer else ""))
if steer:
    print("Receive processing steered (RPS) off the proxy's CPU: CPU-seconds without any of it.\n")
    print("| client | fast mode | MB/s | proxy CPU s/GB | vs fast off | runs |")
    print("|---|---|---|---|---|---|")
else:
    print("| client | fast mode | MB/s | proxy CPU s/GB | vs fast off | softirq share "
          "| process-context CPU s/GB | vs fast off | runs |")
    print("|---|---|---|---|---|---|---|---|---|")
for client in ("dd", "tls"):
    cell = {m: [r for r in rows if r["client"] == client and r["mode"] == m] for m in names}
    if not cell["off"]:
        continue
    off, offp = med(cell["off"], "cpu_s_per_gb"), med(cell["off"], "process_s_per_gb")
    for m, label in names.items():
        rs = cell[m]
        if not rs:
            continue
        cpu, proc = med(rs, "cpu_s_per_gb"), med(rs, "process_s_per_gb")
        line = "| %s | %s | %.1f | %.3f | %.2f |" % (client, label, med(rs, "mb_s"), cpu, cpu / off)
        if not steer:
            line += " %.0f %% | %.3f | %.2f |" % (100 * med(rs, "softirq_share"), proc, proc / offp)
        print(line + " %d |" % len(rs))
EOF
cat "$OUT/$NAME.md"
