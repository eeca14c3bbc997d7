#!/usr/bin/env bash
# bench/users.sh: relay cost of user limits and a 100,000-entry access list, on vs off, same run.
#
#   bench/users.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#
# One worker, bench_load's DC sink (lib.sh). Two proxy configs, alternated REPEAT times so the
# machine's load hits both alike: "off" (no limit, no list) and "on" (every user with
# conns, ips, quota and rate limits set high enough never to bite, so each relay read pays
# the quota add and the rate GCRA; plus a deny-file of 100,000 entries none of which is
# 127.0.0.1, so every accept pays a lookup; plus accept-rate and max-handshakes). Workloads:
# dd and ee bulk down, 1 and 64 connections; dd handshakes per second. Writes OUT/users.csv
# (bench_load rows, label off|on) and prints the medians and the on/off ratio per workload.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
QUICK=0
REPEAT=3
SECONDS_RUN=3
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "users.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECONDS_RUN=0.3
fi
OUT=${OUT:-$BUILD/results-users}
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "users.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init users
K_DD=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
K_EE=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
DOMAIN_HEX=$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
declare -A SECRET=([dd]=dd$K_DD [tls]=ee$K_EE$DOMAIN_HEX)

# 100,000 deny entries: /32s in 10.0.0.0/8 and /24s in 192.168.0.0/16 and 172.16.0.0/12.
python3 - "$WORK/deny.netset" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(90000):
        f.write(f"10.{i >> 14 & 255}.{i >> 6 & 255}.{(i & 63) * 4}\n")
    for i in range(10000):
        f.write(f"172.{16 + (i >> 8 & 15)}.{i & 255}.0/24\n" if i < 4096 else
                f"192.168.{i & 255}.{(i >> 8) * 4}/30\n")
PY

LIMITS=(--limit "d conns=100000 ips=100000 quota=1000000G rate=1000G/s"
        --limit "t conns=100000 ips=100000 quota=1000000G rate=1000G/s"
        --deny-file "$WORK/deny.netset" --accept-rate 1000000/s --max-handshakes 1000000)
CSV=$OUT/users.csv
rm -f "$CSV"
FAILED=0
for r in $(seq "$REPEAT"); do
    for label in off on; do
        echo "users.sh: round $r, $label" >&2
        rm -f "$WORK/state" "$WORK/state.lock"
        if [ "$label" = on ]; then
            bench_start_proxy users.sh 600 --secret "d:dd$K_DD" --secret "t:ee$K_EE$DOMAIN_HEX" \
                --log-level info --ips-window 1h "${LIMITS[@]}"
        else
            bench_start_proxy users.sh 600 --secret "d:dd$K_DD" --secret "t:ee$K_EE$DOMAIN_HEX" \
                --log-level info
        fi
        for spec in "dd bulk-down 1" "tls bulk-down 1" "dd bulk-down 64" "dd handshake 1"; do
            read -r client wl conns <<<"$spec"
            extra=()
            [ "$wl" = handshake ] && extra=(--concurrency 16)
            timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" \
                --secret "${SECRET[$client]}" --client "$client" --workload "$wl" \
                --conns "$conns" --seconds "$SECONDS_RUN" --proxy-pid "$PROXY_PID" \
                --proxy-log "$WORK/proxy.log" --label "$label" --csv "$CSV" --quiet \
                "${extra[@]}" || { echo "users.sh: failed: $label $spec" >&2; FAILED=1; }
        done
        bench_stop_proxy
    done
done
python3 - "$CSV" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = sorted({(r["client"], r["workload"], r["conns"]) for r in rows})
print("client workload conns | off: MB/s down, cpu s/GB, hs/s | on: MB/s down, cpu s/GB, hs/s "
      "| on/off throughput")
for k in keys:
    out = []
    for label in ("off", "on"):
        rs = [r for r in rows if r["label"] == label and (r["client"], r["workload"], r["conns"]) == k]
        med = lambda c: statistics.median(float(r[c]) for r in rs) if rs else float("nan")
        out.append((med("mb_s_down"), med("cpu_s_per_gb"), med("handshakes_per_s")))
    hs = k[1] == "handshake"
    ratio = (out[1][2] / out[0][2]) if hs else (out[1][0] / out[0][0] if out[0][0] else float("nan"))
    print(f"{k[0]} {k[1]} {k[2]} | {out[0][0]:.0f} {out[0][1]:.2f} {out[0][2]:.0f} | "
          f"{out[1][0]:.0f} {out[1][1]:.2f} {out[1][2]:.0f} | {ratio:.3f}")
PY
exit $FAILED
