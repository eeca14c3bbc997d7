#!/usr/bin/env bash
# bench/prefix.sh: listen-prefix: accept cost with 1 vs 10,000 users on per-user addresses, and
# handshakes/s against a single user's address, in one run.
#
#   bench/prefix.sh [--quick] [--build-dir DIR] [--out DIR] [--seconds S] [--repeat N]
#
# Root only: it re-runs itself in a network namespace of its own (unshare -n, only lo up),
# where a ULA /64 (fd00:6d74:7072::/64) is routed to lo. First bench_prefix: microseconds per
# accept (accept4 alone, and with listen-prefix's getsockname + map lookup) with the map
# holding 1 and 10,000 users. Then one mtproxy (one worker, 10,000 users, listen-prefix and
# the usual 127.0.0.1 listener) takes dd handshakes from bench_load (connect, handshake, one
# round trip, close; 16 in flight) for S seconds (default 3), alternately on user u0's own
# address and on the 127.0.0.1 listener, REPEAT times (default 3). Writes OUT/accept.csv and
# OUT/handshakes.csv and prints the figures (medians).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
QUICK=0
REPEAT=3
SECS=3
ARGS=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prefix.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "${MTPROXY_IN_NETNS:-}" != 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "prefix.sh: needs root (a network namespace)" >&2; exit 77; }
    exec unshare -n env MTPROXY_IN_NETNS=1 bash -c 'ip link set lo up && exec "$0" "$@"' \
        "$0" "${ARGS[@]}"
fi
if [ "$QUICK" = 1 ]; then
    REPEAT=1
    SECS=0.3
fi
OUT=${OUT:-$BUILD/results-prefix}
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD" "$BUILD/bench/bench_prefix"; do
    [ -x "$b" ] || { echo "prefix.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init prefix

QUICK_ARG=()
[ "$QUICK" = 1 ] && QUICK_ARG=(--quick)
"$BUILD/bench/bench_prefix" "${QUICK_ARG[@]}" --csv "$OUT/accept.csv"
cat "$OUT/accept.csv"

# 10,000 users; u0's secret is the one bench_load uses.
KEY=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
python3 - "$WORK/users.conf" "$KEY" <<'PY'
import os, sys
with open(sys.argv[1], "w") as f:
    f.write(f"secret = u0:dd{sys.argv[2]}\n")
    for i in range(1, 10000):
        f.write(f"secret = u{i}:dd{os.urandom(16).hex()}\n")
PY
PPORT=$((PORT + 2))
PREFIX_ARGS=(--config "$WORK/users.conf" --listen-prefix "[fd00:6d74:7072::]/64:$PPORT"
             --log-level warn --max-connections 10000 --links-file off)
echo "target,run,handshakes_per_s" >"$OUT/handshakes.csv"
MTPROXY=$MTPROXY bench_start_proxy prefix.sh 300 "${PREFIX_ARGS[@]}"
# u0's address (its key was drawn at first start)
ADDR=$("$MTPROXY" links --no-qr --listen "127.0.0.1:$PORT" --state-file "$WORK/state" \
       "${PREFIX_ARGS[@]}" | sed -n 's/.*tg:\/\/proxy?server=\([^&]*\)&.*/\1/p' | sed -n 1p)
echo "user u0's address: $ADDR"
for run in $(seq "$REPEAT"); do
    for target in prefix loopback; do
        rowf=$WORK/row.csv
        rm -f "$rowf"
        if [ "$target" = prefix ]; then
            extra=(--proxy-port "$PPORT" --proxy-addr6 "$ADDR")
        else
            extra=(--proxy-port "$PORT")
        fi
        timeout 120 "$LOAD" "${extra[@]}" --dc-port "$DCPORT" --secret "dd$KEY" --client dd \
            --workload handshake --concurrency 16 --seconds "$SECS" --csv "$rowf" --quiet
        awk -F, -v tag="$target,$run" 'NR == 1 { for (i = 1; i <= NF; i++)
                if ($i == "handshakes_per_s") c = i }
            NR == 2 { print tag "," $c }' "$rowf" >>"$OUT/handshakes.csv"
    done
done
bench_stop_proxy
python3 - "$OUT/handshakes.csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for t in ("prefix", "loopback"):
    v = [float(r["handshakes_per_s"]) for r in rows if r["target"] == t]
    print(f"handshakes/s, 10,000 users, on {'one user' + chr(39) + 's address' if t == 'prefix' else '127.0.0.1'}: "
          f"{statistics.median(v):.0f} (median of {len(v)})")
PY
