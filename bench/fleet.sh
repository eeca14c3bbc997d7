#!/usr/bin/env bash
# bench/fleet.sh: what the fleet's Redis replay store costs a handshake, through the real mtproxy.
#
#   bench/fleet.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#
# One worker, a redis-server of our own on 127.0.0.1 (no persistence), bench_load's handshake
# workload (connect, obfuscated2 or FakeTLS handshake, one round trip, close) with 1 and 16
# handshakes in flight, for dd and ee clients, replay-store off and on alternating in one run
# (--repeat rounds). Per run: handshakes/s, connect-to-first-DC-byte p50/p99 (the latency the
# store adds is in these), the proxy's CPU per handshake and redis-server's CPU per handshake
# (/proc/PID/stat): 1e6 / redis-µs-per-handshake is how many handshakes per second one Redis
# core answers before it is the bound. Writes OUT/fleet.csv and OUT/fleet.md (medians).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
QUICK=0
REPEAT=3
SECONDS_RUN=2
PORT=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fleet.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECONDS_RUN=0.2
    OUT=${OUT:-$BUILD/results-fleet-quick}
else
    OUT=${OUT:-$ROOT/bench/results}
fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "fleet.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init fleet
bench_start_redis

K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]=dd$K_DD [tls]=ee$K_EE$DOMAIN_HEX)

cpu_of() { # CPU seconds (user + system) of a pid
    awk -v t="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / t }' "/proc/$1/stat"
}

CSV=$OUT/fleet.csv
echo "store,client,concurrency,handshakes_per_s,connect_p50_us,connect_p99_us,proxy_cpu_us_per_hs,redis_cpu_us_per_hs" >"$CSV"
for _ in $(seq "$REPEAT"); do
    for store in off on; do
        args=()
        [ "$store" = on ] && args=(--replay-store "redis://127.0.0.1:$RPORT")
        bench_start_proxy fleet.sh 600 --secret "d:dd$K_DD" --secret "t:ee$K_EE$DOMAIN_HEX" \
            --log-level info "${args[@]}"
        sleep 0.3 # the store connects in the background
        for client in dd tls; do
            for conc in 1 16; do
                one="$WORK/one.csv"
                rm -f "$one"
                r0=$(cpu_of "$REDIS_PID")
                timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
                    --secret "${SECRET[$client]}" --client "$client" --workload handshake \
                    --concurrency "$conc" --seconds "$SECONDS_RUN" --proxy-pid "$PROXY_PID" \
                    --proxy-log "$WORK/proxy.log" --label "store=$store" --csv "$one" --quiet
                r1=$(cpu_of "$REDIS_PID")
                python3 - "$one" "$store" "$client" "$conc" "$r0" "$r1" >>"$CSV" <<'PY'
import csv, sys
path, store, client, conc, r0, r1 = sys.argv[1:]
row = list(csv.DictReader(open(path)))[-1]
n = float(row["handshakes_per_s"]) * float(row["seconds"])
proxy_us = float(row["proxy_cpu_s"]) / n * 1e6 if n else 0
redis_us = (float(r1) - float(r0)) / n * 1e6 if n else 0
print(f"{store},{client},{conc},{float(row['handshakes_per_s']):.0f},{row['connect_p50_us']},"
      f"{row['connect_p99_us']},{proxy_us:.1f},{redis_us:.1f}")
PY
            done
        done
        bench_stop_proxy
    done
done

python3 - "$CSV" >"$OUT/fleet.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = ["handshakes_per_s", "connect_p50_us", "connect_p99_us", "proxy_cpu_us_per_hs",
        "redis_cpu_us_per_hs"]
print("| client | in flight | store | handshakes/s | connect p50 µs | p99 µs | proxy CPU µs/hs | redis CPU µs/hs |")
print("|---|---|---|---|---|---|---|---|")
groups = {}
for r in rows:
    groups.setdefault((r["client"], r["concurrency"], r["store"]), []).append(r)
for (client, conc, store), rs in sorted(groups.items()):
    med = {k: statistics.median(float(r[k]) for r in rs) for k in keys}
    print(f"| {client} | {conc} | {store} | {med['handshakes_per_s']:.0f} | "
          f"{med['connect_p50_us']:.0f} | {med['connect_p99_us']:.0f} | "
          f"{med['proxy_cpu_us_per_hs']:.1f} | {med['redis_cpu_us_per_hs']:.1f} |")
print()
print(f"medians of {len(rows) // max(1, len(groups))} run(s) per row")
PY
cat "$OUT/fleet.md"
