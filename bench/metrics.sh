#!/usr/bin/env bash
# bench/metrics.sh: what the metrics server costs the relay, and what one scrape costs.
#
#   bench/metrics.sh [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S] [--conns N]
#                    [--users N] [--quick]
#
# 1. Relay throughput and proxy CPU per GB (bench_load: dd clients, bulk download, --conns
#    connections, one worker) with metrics off, and with metrics on and /metrics scraped every
#    second, alternating off/on in the same run, --repeat times each; medians and the ratio.
# 2. One scrape with --users users (default 10,000) configured (every one listed): wall
#    time of GET /metrics and GET /stats (median of 10, 1.1 s apart: each rendered anew, not
#    from the metrics server's cache) and the proxy's CPU per scrape (from /proc/PID/stat
#    over the 10), and the body sizes. (bench/metrics_scrape.py: cached scrapes, and a relayed
#    client's latency beside four scrapers.)
# Writes OUT/metrics.csv and OUT/metrics.md (default OUT: bench/results; --quick: BUILD/results-
# metrics-quick with short runs). Loopback only: the proxy's DC is bench_load's own sink.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
REPEAT=5
SECONDS_RUN=4
CONNS=4
USERS=10000
QUICK=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --conns) CONNS=$2; shift ;;
    --users) USERS=$2; shift ;;
    --quick) QUICK=1 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "metrics.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECONDS_RUN=1
    USERS=500
    OUT=${OUT:-$BUILD/results-metrics-quick}
fi
OUT=${OUT:-$ROOT/bench/results}
mkdir -p "$OUT"
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init metrics
MPORT=$((PORT + 2))
SCRAPER_PID=""
CSV=$OUT/metrics.csv
rm -f "$CSV"
KEY=$("$MTPROXY" generate-secret)

stop_scraper() {
    if [ -n "$SCRAPER_PID" ]; then kill "$SCRAPER_PID" 2>/dev/null || true; wait "$SCRAPER_PID" 2>/dev/null || true; fi
    SCRAPER_PID=""
}
trap 'stop_scraper; bench_cleanup' EXIT

# 1. off / on + scraped, alternating.
for r in $(seq "$REPEAT"); do
    for mode in off on; do
        if [ "$mode" = on ]; then
            bench_start_proxy metrics 600 --secret "u:dd$KEY" --metrics "127.0.0.1:$MPORT"
            python3 - "$MPORT" <<'EOF' &
import sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
while True:
    try:
        urllib.request.urlopen(url, timeout=5).read()
    except OSError:
        pass
    time.sleep(1)
EOF
            SCRAPER_PID=$!
        else
            bench_start_proxy metrics 600 --secret "u:dd$KEY"
        fi
        echo "metrics.sh: run $r metrics=$mode" >&2
        timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "dd$KEY" \
            --client dd --workload bulk-down --conns "$CONNS" --seconds "$SECONDS_RUN" \
            --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" --label "metrics=$mode" \
            --csv "$CSV" --quiet
        stop_scraper
        bench_stop_proxy
    done
done

# 2. One scrape with USERS users.
conf=$WORK/users.conf
: >"$conf"
for i in $(seq "$USERS"); do
    printf 'secret = user%d:%s\n' "$i" "$(printf '%08x' "$i")${KEY:8}" >>"$conf"
done
bench_start_proxy metrics 600 --config "$conf" --metrics "127.0.0.1:$MPORT"
python3 - "$MPORT" "$PROXY_PID" "$USERS" "$OUT/metrics.md" "$CSV" <<'EOF'
import csv, os, statistics, sys, time, urllib.request
port, pid, users, md, csvf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def scrape(path, n=10):
    walls, size = [], 0
    c0 = cpu()
    for _ in range(n):
        time.sleep(1.1)  # past the server's cache (at most 1 s): each one rendered anew
        t = time.perf_counter()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30).read()
        walls.append(time.perf_counter() - t)
        size = len(body)
    return statistics.median(walls) * 1000, (cpu() - c0) / n * 1000, size, body

m_wall, m_cpu, m_size, body = scrape("/metrics")
assert body.count(b'mtproxy_user_connections_total{user="') == users, "not every user listed"
j_wall, j_cpu, j_size, _ = scrape("/stats")
rows = list(csv.DictReader(open(csvf)))
def med(mode, col):
    return statistics.median(float(r[col]) for r in rows if r["label"] == f"metrics={mode}")
off_t, on_t = med("off", "mb_s_down"), med("on", "mb_s_down")
off_c, on_c = med("off", "cpu_s_per_gb"), med("on", "cpu_s_per_gb")
n = sum(1 for r in rows if r["label"] == "metrics=off")
with open(md, "w") as f:
    f.write(f"""# Metrics server cost (bench/metrics.sh)

Relay: dd clients, bulk download, {rows[0]['conns']} connections, one worker, {n} runs each,
metrics off and on (/metrics scraped every second) alternating in the same run; medians.

| metrics | MB/s down | proxy CPU s per GB |
|---|---|---|
| off | {off_t:.1f} | {off_c:.3f} |
| on, scraped every 1 s | {on_t:.1f} | {on_c:.3f} |
| on / off | {on_t / off_t:.3f} | {on_c / off_c:.3f} |

One scrape with {users} users (median of 10, 1.1 s apart so that each is rendered anew; proxy
CPU averaged over the 10):

| endpoint | wall ms | proxy CPU ms | body bytes |
|---|---|---|---|
| /metrics | {m_wall:.1f} | {m_cpu:.1f} | {m_size} |
| /stats | {j_wall:.1f} | {j_cpu:.1f} | {j_size} |
""")
print(open(md).read())
EOF
