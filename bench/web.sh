#!/usr/bin/env bash
# bench/web.sh: what WEB proxy mode's carriers (https, https-lanes, websocket, websocket-lanes)
# cost the proxy, against dd over TCP in the same run.
#
#   bench/web.sh [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S] [--sessions N]
#
# One worker proxy (--dc-builtin off --mask off, every address 127.0.0.1, its DC bench_load's
# sink) with a dd user and web-listen. bench_load (dd client) runs bulk-down, bulk-up and small
# (200-byte ping-pong, one in flight) on one connection, first straight to the proxy's listener
# (dd over TCP), then through bench/web_adapter.py: the tests' WEB client, which turns each
# local TCP connection into a stream of one WEB session over plain HTTP/1.1 to web-listen (no
# TLS terminator: what the proxy does is measured, not nginx); a proxy per carrier, each with
# its own dd-over-TCP rows. The proxy's CPU-s/GB comes from
# its /proc/PID/stat; the round trip includes the adapter (Python, one HTTP request per batch
# each way), so it says what the chain costs, not the proxy alone. First, on a fresh proxy,
# bench/web_sessions.py: N sessions made one after another and N OPENs in one session: CPU and
# resident memory per session and per OPEN. Medians of --repeat runs (default 3, 2 s each). Writes web.csv and
# web.md into OUT (default bench/results). Run as root in a network namespace of its own:
#   unshare -n sh -c 'ip link set lo up; bench/web.sh'
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT="$ROOT/bench/results"
REPEAT=3
SECS=2
NSESS=1000
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECS=$2; shift ;;
    --sessions) NSESS=$2; shift ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "web.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "web.sh: $b is missing (build with -DMTPROXY_BENCH=ON)" >&2; exit 2; }
done
mkdir -p "$OUT"
WORK=$(mktemp -d)
K=00112233445566778899aabbccddeeff
PORT=17101 DCPORT=17102 WEBPORT=17103
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

start_proxy() {
    "$MTPROXY" --listen "127.0.0.1:$PORT" --workers 1 --dc-builtin off --mask off \
        --dc "2 127.0.0.1:$DCPORT" --secret "u:dd$K" --state-file "$WORK/state" \
        --log-level warn --web-listen "127.0.0.1:$WEBPORT" --web-host proxy.example.com \
        --web-sessions $((NSESS + 10)) --web-bootstraps $((NSESS + 10)) \
        --web-streams-per-session $((NSESS + 10)) --web-session-rate 10000000 \
        --web-stream-rate 10000000 --web-bootstrap-rate 10000000 "$@" \
        >"$WORK/proxy.log" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    for _ in $(seq 50); do
        (exec 3<>"/dev/tcp/127.0.0.1/$WEBPORT") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "web.sh: the proxy did not start:" >&2
    cat "$WORK/proxy.log" >&2
    exit 1
}

start_adapter() {
    python3 "$ROOT/bench/web_adapter.py" "127.0.0.1:$WEBPORT" proxy.example.com "dd$K" "$1" \
        >"$WORK/adapter.out" 2>"$WORK/adapter.err" &
    PIDS+=("$!")
    for _ in $(seq 50); do
        APORT=$(sed -n 's/^ADAPTER 127.0.0.1://p' "$WORK/adapter.out")
        [ -n "$APORT" ] && return 0
        sleep 0.1
    done
    echo "web.sh: the adapter did not start:" >&2
    cat "$WORK/adapter.err" >&2
    exit 1
}

CSV=$OUT/web.csv
rm -f "$CSV" "$WORK/runs.csv"
# Sessions and OPENs first, on a fresh proxy (after bulk traffic its heap would already hold
# what they take), then another proxy for the traffic.
start_proxy
"$ROOT/bench/web_sessions.py" "127.0.0.1:$WEBPORT" proxy.example.com "dd$K" "$PROXY_PID" \
    "$NSESS" >"$WORK/sessions.txt"
kill "$PROXY_PID"
wait "$PROXY_PID" 2>/dev/null || true
# Per carrier a proxy of its own: dd over TCP and the carrier, interleaved, in the same run.
CARRIERS="https https-lanes websocket websocket-lanes"
for carrier in $CARRIERS; do
    start_proxy --web-carrier "$carrier"
    start_adapter "$carrier"
    for r in $(seq "$REPEAT"); do
        for w in bulk-down bulk-up small; do
            for via in direct "$carrier"; do
                p=$PORT
                [ "$via" = direct ] || p=$APORT
                timeout 60 "$LOAD" --proxy-port "$p" --dc-port "$DCPORT" --secret "dd$K" \
                    --client dd --workload "$w" --conns 1 --seconds "$SECS" \
                    --proxy-pid "$PROXY_PID" --label "$via" --csv "$WORK/runs.csv" --quiet
            done
        done
    done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=()
done

python3 - "$WORK/runs.csv" "$WORK/sessions.txt" "$CSV" "$OUT/web.md" "$REPEAT" <<'PY'
import csv, statistics, sys
runs, sess, out_csv, out_md, rep = sys.argv[1:6]
rows = list(csv.DictReader(open(runs)))
cells = {}
for r in rows:
    cells.setdefault((r["workload"], r["label"]), []).append(r)
def med(rs, k):
    return statistics.median(float(r[k]) for r in rs)
with open(out_csv, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["workload", "via", "runs", "mb_s", "cpu_s_per_gb", "lat_p50_us", "lat_p99_us"])
    for (wl, via), rs in sorted(cells.items()):
        mbs = med(rs, "mb_s_up" if wl == "bulk-up" else "mb_s_down")
        w.writerow([wl, via, len(rs), f"{mbs:.1f}", f"{med(rs, 'cpu_s_per_gb'):.3f}",
                    f"{med(rs, 'lat_p50_us'):.1f}", f"{med(rs, 'lat_p99_us'):.1f}"])
kv = {}
for line in open(sess):
    for tok in line.split():
        k, _, v = tok.partition("=")
        kv[k] = v
with open(out_md, "w") as f:
    f.write(f"# WEB proxy mode (each carrier) against dd over TCP, one worker, "
            f"medians of {rep}\n\n")
    f.write("| workload | via | MB/s | proxy CPU-s/GB | x dd | RTT p50 us | RTT p99 us |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    vias = ("direct", "https", "https-lanes", "websocket", "websocket-lanes")
    names = {v: "WEB " + v for v in vias}
    names["direct"] = "dd over TCP"
    for wl in ("bulk-down", "bulk-up", "small"):
        base = med(cells[(wl, "direct")], "cpu_s_per_gb")
        for via in vias:
            rs = cells[(wl, via)]
            mbs = med(rs, "mb_s_up" if wl == "bulk-up" else "mb_s_down")
            c = med(rs, "cpu_s_per_gb")
            f.write(f"| {wl} | {names[via]} | {mbs:.1f} "
                    f"| {c:.3f} | {c / base:.2f} | {med(rs, 'lat_p50_us'):.0f} "
                    f"| {med(rs, 'lat_p99_us'):.0f} |\n")
    f.write(f"\nSessions ({kv['sessions']} made one after another: bridge page, bootstrap, "
            f"HELLO): {kv['session_cpu_us']} us of proxy CPU and {kv['session_rss_bytes']} "
            f"bytes of resident memory each ({kv['sessions_per_s']} a second through the "
            f"Python client). OPENs ({kv['opens']} in one session, each a stream and a "
            f"connection waiting for its handshake): {kv['open_cpu_us']} us and "
            f"{kv['open_rss_bytes']} bytes each.\n")
print(open(out_md).read())
PY
