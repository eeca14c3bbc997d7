#!/usr/bin/env bash
# bench/ab.sh: two mtproxy builds side by side in one run, alternating, for a change that must
# not move the figures (a refactor): CPU per GB and reads/writes per MB each way, round-trip
# p50/p99, handshakes/s, idle RSS per relayed connection.
#
#   bench/ab.sh --prev BIN [--build-dir DIR] [--repeat N] [--seconds S] [--out DIR] [--quick]
#
# Each of N rounds (default 5) runs every cell on the previous binary (BIN) then on this build's
# (DIR/mtproxy), so a drift of the shared machine hits both alike; the table gives the medians
# and the ratio new/prev. One worker pinned to CPU 0, the load tool (bench_load of this build,
# the same for both) on CPU 1; everything on 127.0.0.1. Cells: dd and ee, bulk-down and bulk-up,
# 1 connection (cpu_s_per_gb, reads_per_mb, writes_per_mb); dd small 200-byte messages on 64
# connections (lat p50/p99); dd handshakes, 16 in flight (handshakes/s); 2,000 idle dd
# connections after 2.5 s (RSS per connection: 4,000 descriptors in the proxy, 4,000 in the load
# tool, within the 20,000-per-process limit). Writes ab.csv (every run) and ab.md into OUT
# (default DIR/results-ab). Exit 0 when every run succeeded. --quick (the ctest self-check): one
# round of 0.3 s cells and 100 idle connections.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build-release
PREV=""
REPEAT=5
SECONDS_RUN=2
OUT=""
IDLE=2000
SETTLE=2.5
while [ $# -gt 0 ]; do
    case $1 in
    --prev) PREV=$2; shift ;;
    --build-dir) BUILD=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --out) OUT=$2; shift ;;
    --quick) REPEAT=1; SECONDS_RUN=0.3; IDLE=100; SETTLE=0.3 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ab.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$PREV" ] || [ ! -x "$PREV" ]; then
    echo "ab.sh: --prev BIN (an mtproxy binary) needed" >&2
    exit 2
fi
OUT=${OUT:-$BUILD/results-ab}
LOAD=$BUILD/bench/bench_load
NEW=$BUILD/mtproxy
for b in "$NEW" "$LOAD"; do
    [ -x "$b" ] || { echo "ab.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
CSV=$OUT/ab.csv
rm -f "$CSV"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init ab
K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]=dd$K_DD [tls]=ee$K_EE$DOMAIN_HEX)
PIN1="taskset -c 1"
command -v taskset >/dev/null || PIN1=""
FAILED=0

# cell WHICH LABEL CLIENT WORKLOAD CONNS [bench_load args]: one run, one CSV row.
cell() {
    local which=$1 label=$2 client=$3 wl=$4 conns=$5
    shift 5
    MTPROXY=$([ "$which" = prev ] && echo "$PREV" || echo "$NEW")
    bench_start_proxy ab.sh 600 --secret "d:dd$K_DD" --secret "t:ee$K_EE$DOMAIN_HEX" \
        --buffer-memory 0 --max-connections 4100
    [ -n "$PIN1" ] && taskset -apc 0 "$PROXY_PID" >/dev/null
    # shellcheck disable=SC2086
    timeout 300 $PIN1 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
        --secret "${SECRET[$client]}" --client "$client" --workload "$wl" --conns "$conns" \
        --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" --label "$which:$label" \
        --csv "$CSV" --quiet "$@" ||
        { echo "ab.sh: run failed: $which $label" >&2; FAILED=$((FAILED + 1)); }
    bench_stop_proxy
}

for round in $(seq "$REPEAT"); do
    echo "ab.sh: round $round of $REPEAT" >&2
    for which in prev new; do
        for client in dd tls; do
            cell $which "$client-down" "$client" bulk-down 1 --seconds "$SECONDS_RUN"
            cell $which "$client-up" "$client" bulk-up 1 --seconds "$SECONDS_RUN"
        done
        cell $which small dd small 64 --window 1 --seconds "$SECONDS_RUN"
        cell $which handshake dd handshake 1 --concurrency 16 --seconds "$SECONDS_RUN"
        cell $which idle dd idle "$IDLE" --seconds "$SETTLE" --settle "$SETTLE"
    done
done

python3 - "$CSV" >"$OUT/ab.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def med(which, label, col):
    v = [float(r[col]) for r in rows if r['label'] == f'{which}:{label}' and r[col] not in ('', '-')]
    return statistics.median(v) if v else float('nan')
def rss_per_conn(which):
    v = [(float(r['rss_ready_kb']) - float(r['rss_base_kb'])) * 1024 / float(r['conns'])
         for r in rows if r['label'] == f'{which}:idle']
    return statistics.median(v) if v else float('nan')
cells = [(f'{c}-{d}', col) for c in ('dd', 'tls') for d in ('down', 'up')
         for col in ('cpu_s_per_gb', 'reads_per_mb', 'writes_per_mb', 'mb_s_' + d)]
cells += [('small', 'lat_p50_us'), ('small', 'lat_p99_us'), ('small', 'cpu_s_per_gb'),
          ('handshake', 'handshakes_per_s'), ('handshake', 'proxy_cpu_s')]
print('| cell | figure | prev | new | new/prev |')
print('|---|---|---|---|---|')
for label, col in cells:
    a, b = med('prev', label, col), med('new', label, col)
    print(f'| {label} | {col} | {a:.4g} | {b:.4g} | {b / a if a else float("nan"):.3f} |')
a, b = rss_per_conn('prev'), rss_per_conn('new')
print(f'| idle 2000 dd | RSS bytes per connection | {a:.0f} | {b:.0f} | {b / a if a else float("nan"):.3f} |')
print(f'\n{len(rows)} runs; medians of the rounds.')
EOF
cat "$OUT/ab.md"
exit $((FAILED > 0))
