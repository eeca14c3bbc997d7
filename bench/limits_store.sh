#!/usr/bin/env bash
# bench/limits_store.sh: what limits-store (per-user limits shared through Redis) costs.
#
#   bench/limits_store.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#
# A. One worker, a redis-server of our own on 127.0.0.1 (no persistence), one dd user with
#    `conns=100000 quota=100000G` (so the limits' data path runs in both), limits-store off and
#    on (interval 1 s) alternating in one run (--repeat rounds): bench_load's bulk-down (4
#    connections: the proxy's CPU seconds per GB, the flusher's included) and its handshake
#    workload (16 in flight: handshakes/s, connect p50/p99, the proxy's CPU per handshake).
# B. bench/limits_store_users.py: 1,000 users each holding one idle live connection through
#    each of two instances: Redis commands/s, the flusher's CPU and the flush round trip.
# Writes OUT/limits_store.csv, OUT/limits_store_users.csv and OUT/limits_store.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench" OUT="" REPEAT=3 SECONDS_RUN=3 USERS_SECONDS=10
while [ $# -gt 0 ]; do
    opt=$1
    shift
    case "$opt" in
    --quick) REPEAT=1 SECONDS_RUN=0.3 USERS_SECONDS=2 OUT=${OUT:-$BUILD/results-limits-store-quick} ;;
    --build-dir | --out | --repeat | --seconds)
        [ $# -gt 0 ] || { echo "limits_store.sh: $opt needs a value" >&2; exit 2; }
        case "$opt" in
        --build-dir) BUILD=$1 ;; --out) OUT=$1 ;; --repeat) REPEAT=$1 ;; --seconds) SECONDS_RUN=$1 ;;
        esac
        shift ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "limits_store.sh: unknown option $opt" >&2; exit 2 ;;
    esac
done
OUT=${OUT:-$ROOT/bench/results}
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
PY=${MTPROXY_BENCH_PY:-$ROOT/build/tests/integration/venv/bin/python}
for b in "$MTPROXY" "$LOAD" "$BUILD/tests/tools/fake_dc"; do
    [ -x "$b" ] || { echo "limits_store.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init limits-store
bench_start_redis

K=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
CSV=$OUT/limits_store.csv
echo "store,workload,cpu_s_per_gb,mb_s_down,handshakes_per_s,connect_p50_us,connect_p99_us,proxy_cpu_us_per_hs" >"$CSV"
for _ in $(seq "$REPEAT"); do
    for store in off on; do
        args=()
        [ "$store" = on ] && args=(--limits-store "redis://127.0.0.1:$RPORT/1")
        bench_start_proxy limits_store.sh 600 --secret "d:dd$K" \
            --limit "d conns=100000 quota=100000G" --log-level info "${args[@]}"
        sleep 0.3 # the store connects in the background
        for wl in bulk-down handshake; do
            one="$WORK/one.csv"
            rm -f "$one"
            if [ "$wl" = bulk-down ]; then
                extra=(--conns 4)
            else
                extra=(--concurrency 16)
            fi
            timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "dd$K" \
                --client dd --workload "$wl" "${extra[@]}" --seconds "$SECONDS_RUN" \
                --proxy-pid "$PROXY_PID" --proxy-log "$WORK/proxy.log" --label "store=$store" \
                --csv "$one" --quiet
            python3 - "$one" "$store" "$wl" >>"$CSV" <<'PY'
import csv, sys
path, store, wl = sys.argv[1:]
r = list(csv.DictReader(open(path)))[-1]
n = float(r["handshakes_per_s"]) * float(r["seconds"])
us = float(r["proxy_cpu_s"]) / n * 1e6 if n else 0
print(f"{store},{wl},{r['cpu_s_per_gb']},{r['mb_s_down']},{float(r['handshakes_per_s']):.0f},"
      f"{r['connect_p50_us']},{r['connect_p99_us']},{us:.1f}")
PY
        done
        if [ "$store" = on ]; then
            grep -q "limits-store: flush failed" "$WORK/proxy.log" &&
                { echo "limits_store.sh: the store failed during the run" >&2; exit 1; }
        fi
        bench_stop_proxy
    done
done

"$PY" "$ROOT/bench/limits_store_users.py" --build-dir "$BUILD" --redis-port "$RPORT" \
    --users 1000 --seconds "$USERS_SECONDS" >"$OUT/limits_store_users.csv"

python3 - "$CSV" "$OUT/limits_store_users.csv" >"$OUT/limits_store.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
med = lambda store, wl, k: statistics.median(float(r[k]) for r in rows
                                             if r["store"] == store and r["workload"] == wl)
print("| figure | store off | store on | on / off |")
print("|---|---|---|---|")
for wl, k, name in (("bulk-down", "cpu_s_per_gb", "proxy CPU s per GB (bulk-down, 4 conns)"),
                    ("bulk-down", "mb_s_down", "MB/s down"),
                    ("handshake", "handshakes_per_s", "handshakes/s (16 in flight)"),
                    ("handshake", "connect_p50_us", "connect p50 µs"),
                    ("handshake", "connect_p99_us", "connect p99 µs"),
                    ("handshake", "proxy_cpu_us_per_hs", "proxy CPU µs per handshake")):
    off, on = med("off", wl, k), med("on", wl, k)
    print(f"| {name} | {off:.3g} | {on:.3g} | {on / off if off else 0:.3f} |")
print()
print(f"medians of {len(rows) // 4} round(s), store off and on alternating")
print()
users = list(csv.DictReader(open(sys.argv[2])))
print("| 1,000 users x 2 instances | commands/s | flushes/s | flusher CPU ms/s | process CPU ms/s | flush round trip ms | Redis CPU ms/s |")
print("|---|---|---|---|---|---|---|")
for u in users:
    print(f"| {u['who']} | {u['commands_per_s']} | {u['flushes_per_s']} | "
          f"{u['flusher_cpu_ms_per_s']} | {u['process_cpu_ms_per_s']} | {u['flush_rtt_ms']} | "
          f"{u['redis_cpu_ms_per_s']} |")
PY
cat "$OUT/limits_store.md"
