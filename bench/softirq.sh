#!/usr/bin/env bash
# bench/softirq.sh: how much of the proxy's download CPU is its own work, and how much is its
# loopback peers' TCP work charged to it.
#
#   bench/softirq.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S] [--steer]
#                    [--upload] [--pin] [--clients "dd tls"] [--modes "off on splice"]
#                    [--keep-perf DIR] [--proxy-args "ARGS"] [--compare DIR] [--floor]
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
# --upload: the same split for bulk-up (client -> DC: decrypt and re-encrypt; the fast-mode
# setting does not change it, so --modes on alone is enough), files softirq-up.* (-steer-up.*).
# --pin: without --steer too, the proxy on CPU 0 and the load tool on CPU 1.
# --clients / --modes: the cells to run. --keep-perf DIR: keeps each run's perf.data there
# (bench/perf_split.py splits one into AES, copies, TCP, wake-ups...). --proxy-args: more options
# for every proxy started (e.g. "--max-buffer 256k"). --compare DIR: a second build's mtproxy
# (DIR/mtproxy, e.g. the previous commit's) runs each cell too, alternating with BUILD's in every
# repetition (build column: new / prev; the load tool is BUILD's for both). --floor: before each
# repetition BUILD's bench_crypto measures AES-256-CTR at 16 KiB on the proxy's CPU; the floor is
# two passes (CPU-s per GB) and the report gives process-context CPU as a multiple of it.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
REPEAT=3
SECONDS_RUN=2
STEER=0
QUICK=0
UPLOAD=0
PIN=0
CLIENTS="dd tls"
MODES="off on splice"
KEEP_PERF=""
PROXY_ARGS=""
COMPARE=""
FLOOR=0
ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; STEER=1; REPEAT=1; SECONDS_RUN=0.3 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --steer) STEER=1 ;;
    --upload) UPLOAD=1 ;;
    --pin) PIN=1 ;;
    --clients) CLIENTS=$2; shift ;;
    --modes) MODES=$2; shift ;;
    --keep-perf) KEEP_PERF=$2; shift ;;
    --compare) COMPARE=$2; shift ;;
    --floor) FLOOR=1 ;;
    --proxy-args) PROXY_ARGS=$2; shift ;;
    -h | --help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "softirq.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$BUILD/results-softirq-quick}; else OUT=${OUT:-$ROOT/bench/results}; fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
CRYPTO=$BUILD/bench/bench_crypto
BUILDS=("new=$MTPROXY")
[ -n "$COMPARE" ] && BUILDS+=("prev=$COMPARE/mtproxy")
for b in "$MTPROXY" "$LOAD" ${COMPARE:+"$COMPARE/mtproxy"} $([ "$FLOOR" = 1 ] && echo "$CRYPTO"); do
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
    if [ "$PIN" = 1 ] && [ "$NCPU" -ge 2 ]; then
        PIN_PROXY=(taskset -a -pc 0)
        PIN_LOAD=(taskset -c 1)
    fi
    NAME=softirq
fi
WORKLOAD=bulk-down
MBCOL=8
if [ "$UPLOAD" = 1 ]; then
    WORKLOAD=bulk-up
    MBCOL=9
    NAME=$NAME-up
fi
mkdir -p "$OUT"
[ -n "$KEEP_PERF" ] && mkdir -p "$KEEP_PERF"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init softirq
K=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]=dd$K [tls]=ee$K$DOMAIN_HEX)
declare -A MODE=([off]="--fast-mode off" [on]="--splice off" [splice]="")
CSV=$OUT/$NAME.csv
echo "client,mode,steer,mb_s,cpu_s_per_gb,softirq_share,process_s_per_gb,reads_per_mb,writes_per_mb,floor_s_per_gb,build" >"$CSV"

# Two AES-256-CTR passes over a GB at 16 KiB a call, on CPU 0 (where the proxy runs when pinned).
floor_now() {
    local pin=()
    [ "$NCPU" -ge 2 ] && pin=(taskset -c 0)
    "${pin[@]}" "$CRYPTO" --seconds 0.5 | awk -F, '$1 == 16384 && $4 > 0 { printf "%.4f\n", 2000 / $4 }'
}

# The share of the proxy's samples under the softirq handler (0 when steered: not sampled).
softirq_share() {
    perf report -i "$1" --children --sort sym -g none --stdio 2>/dev/null |
        awk '$NF == "handle_softirqs" || $NF == "__do_softirq" {
                 v = $1; sub("%", "", v); if (v + 0 > m) m = v + 0 }
             END { printf "%.4f\n", m / 100 }'
}

RUN=0
for client in $CLIENTS; do
    for mode in $MODES; do
        for rep in $(seq "$REPEAT"); do
            floor=0
            [ "$FLOOR" = 1 ] && floor=$(floor_now)
            order=("${BUILDS[@]}")
            if [ $((rep % 2)) = 0 ] && [ ${#BUILDS[@]} = 2 ]; then # alternate who goes first
                order=("${BUILDS[1]}" "${BUILDS[0]}")
            fi
            for b in "${order[@]}"; do
                build=${b%%=*}
                MTPROXY=${b#*=}
                echo "softirq.sh: $client $mode $build" >&2
                # shellcheck disable=SC2086 # MODE and PROXY_ARGS hold words
                bench_start_proxy softirq.sh 600 --secret "x:${SECRET[$client]}" ${MODE[$mode]} $PROXY_ARGS
                [ ${#PIN_PROXY[@]} -gt 0 ] && "${PIN_PROXY[@]}" "$PROXY_PID" >/dev/null
                PERF_PID=""
                if [ "$STEER" = 0 ]; then
                    perf record -q -g -o "$WORK/perf.data" -p "$PROXY_PID" >/dev/null 2>&1 &
                    PERF_PID=$!
                    sleep 0.3 # perf attached before the load starts
                fi
                rm -f "$WORK/run.csv"
                "${PIN_LOAD[@]}" timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
                    --secret "${SECRET[$client]}" --client "$client" --workload "$WORKLOAD" \
                    --conns 1 --seconds "$SECONDS_RUN" --proxy-pid "$PROXY_PID" \
                    --proxy-log "$WORK/proxy.log" --label "$client-$mode" --csv "$WORK/run.csv" --quiet
                share=0
                if [ -n "$PERF_PID" ]; then
                    kill -INT "$PERF_PID"
                    wait "$PERF_PID" || true
                    share=$(softirq_share "$WORK/perf.data")
                    RUN=$((RUN + 1))
                    [ -n "$KEEP_PERF" ] && cp "$WORK/perf.data" "$KEEP_PERF/$client-$mode-$build-$RUN.data"
                fi
                bench_stop_proxy
                tail -1 "$WORK/run.csv" | awk -F, -v c="$client" -v m="$mode" -v s="$STEER" \
                    -v sh="$share" -v mb="$MBCOL" -v f="$floor" -v b="$build" \
                    '{ printf "%s,%s,%s,%s,%s,%s,%.4f,%s,%s,%s,%s\n", c, m, s, $mb, $17, sh,
                              $17 * (1 - sh), $21, $22, f, b }' >>"$CSV"
            done
        done
    done
done

python3 - "$CSV" "$STEER" "$WORKLOAD" >"$OUT/$NAME.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
steer = sys.argv[2] == "1"
names = {"off": "off", "on": "on, splice off", "splice": "on + splice"}
med = lambda rs, k: statistics.median(float(r[k]) for r in rs)
up = sys.argv[3] == "bulk-up"
builds = sorted({r["build"] for r in rows}, key=lambda b: b != "prev")  # prev first
# one floor per repetition (the rows of its builds repeat it)
floors = list(dict.fromkeys((r["client"], r["mode"], float(r["floor_s_per_gb"])) for r in rows
                            if float(r["floor_s_per_gb"]) > 0))
floors = [f for _, _, f in floors]
print("# Proxy CPU on loopback: own work and peers' (bench/softirq.sh%s, %s, 1 connection)\n"
      % (" --steer" if steer else "", "upload" if up else "download"))
if floors:
    print("AES floor (two AES-256-CTR passes, bench_crypto at 16 KiB before each repetition): "
          "median %.4f CPU-s/GB (%s).\n" % (statistics.median(floors),
                                            ", ".join("%.4f" % f for f in floors)))
if steer:
    print("Receive processing steered (RPS) off the proxy's CPU: CPU-seconds without any of it.\n")
head = ["client", "fast mode", "build", "MB/s", "proxy CPU s/GB", "vs first"]
if not steer:
    head += ["softirq share", "process-context CPU s/GB", "vs first"]
head += ["reads/MB", "writes/MB"]
if floors:
    head += ["× AES floor"]
head += ["runs"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for client in ("dd", "tls"):
    cell = {(m, b): [r for r in rows if r["client"] == client and r["mode"] == m
                     and r["build"] == b] for m in names for b in builds}
    base = [k for k in cell if cell[k]]  # "vs first": vs the first mode (and build) run
    if not base:
        continue
    off, offp = med(cell[base[0]], "cpu_s_per_gb"), med(cell[base[0]], "process_s_per_gb")
    for (m, b), rs in cell.items():
        if not rs:
            continue
        cpu, proc = med(rs, "cpu_s_per_gb"), med(rs, "process_s_per_gb")
        line = "| %s | %s | %s | %.1f | %.3f | %.2f |" % (client, names[m], b, med(rs, "mb_s"),
                                                       cpu, cpu / off)
        if not steer:
            line += " %.0f %% | %.3f | %.2f |" % (100 * med(rs, "softirq_share"), proc, proc / offp)
        line += " %.1f | %.1f |" % (med(rs, "reads_per_mb"), med(rs, "writes_per_mb"))
        if floors:
            # process context (steered: the proxy's CPU) over the floor of the same repetition
            k = "cpu_s_per_gb" if steer else "process_s_per_gb"
            fl = [float(r[k]) / float(r["floor_s_per_gb"]) for r in rs
                  if float(r["floor_s_per_gb"]) > 0]
            line += (" %.2f |" % statistics.median(fl)) if fl else " – |"
        print(line + " %d |" % len(rs))
EOF
cat "$OUT/$NAME.md"
