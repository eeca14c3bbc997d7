#!/usr/bin/env bash
# bench/latency.sh: round-trip latency the proxy adds over a direct connection, with and without
# busy-poll, and what busy-poll costs in CPU.
#
#   bench/latency.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--seconds S]
#                    [--busy "0 20 50"] [--load-spin] [--tool c|go] [--halt-poll NS] [--floor]
#                    [--proxy-args "ARGS"]
#
# bench_load's `small` workload (200-byte messages, one in flight per connection, echoed by its
# DC sink; every byte checked) with 1 and 64 dd connections: first straight to the sink
# (--direct: the same tool, same code, no proxy: the baseline), then through a one-worker proxy
# for each busy-poll value. The proxy is pinned to CPU 0, the load tool (clients and DC) to
# CPU 1. Per cell: round-trip p50/p99/p999 and, for the proxy, its CPU-seconds per second of the
# window; then each busy-poll value's CPU with one idle relayed connection (a 3 s window of no
# traffic). Medians of --repeat runs (default 3, 2 s each), interleaved. Writes latency.csv and
# latency.md into OUT (default bench/results; --quick: BUILD/results-latency-quick, 1 x 0.3 s).
# --load-spin: the load tool never sleeps (bench_load --spin), so no round trip waits for its
# CPU to wake up: what is left over direct is the proxy's own (latency-spin.* instead).
# --tool go: the load tool is bench/golat (Go, standard library: goroutines on Go's netpoller,
# client and DC in one process, GOMAXPROCS 1 on CPU 1), direct measured by it too
# (latency-go.* instead; --quick --tool go is the ctest self-check). Without a `go` on PATH or
# in /usr/local/go/bin it says so and exits 77 (skipped). Its idle row still uses bench_load.
# --halt-poll NS: the guest's cpuidle haltpoll window (/sys/module/haltpoll/parameters/
# guest_halt_poll_ns) set to NS for the run and restored at exit (names get -hpNS).
# --floor (with --tool go): also through haproxy (mode tcp, one thread, CPU 0; plain bytes, keyed
# as direct), without and with its busy-polling: what any relay hop costs here (modes haproxy,
# haproxy-busy). Without haproxy the rows are left out, with a message.
# --proxy-args "ARGS": more mtproxy options (word-split) for every proxy row, e.g. "--splice off"
# (named in the .md title; --out keeps such runs apart).
# --client tls: the proxied rows through an ee secret (FakeTLS; bench_load only): names get
# -tls; direct rows stay dd (the sink speaks no TLS), the idle rows too.
# Needs 2 CPUs (it pins); run as root inside its own network namespace, e.g.
#   unshare -n sh -c 'ip link set lo up; bench/latency.sh'
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
REPEAT=3
SECONDS_RUN=2
QUICK=0
IDLE_S=3
BUSY="0 20 50"
SPIN=()
NAME=latency
TOOL=c
HALT_POLL=""
FLOOR=0
PROXY_ARGS=""
CLIENT="dd"
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1; REPEAT=1; SECONDS_RUN=0.3; IDLE_S=0.5 ;;
    --build-dir) BUILD=$(cd "$2" && pwd); shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --seconds) SECONDS_RUN=$2; shift ;;
    --busy) BUSY=$2; shift ;;
    --load-spin) SPIN=(--spin); NAME=latency-spin ;;
    --tool) TOOL=$2; shift ;;
    --halt-poll) HALT_POLL=$2; shift ;;
    --floor) FLOOR=1 ;;
    --proxy-args) PROXY_ARGS=$2; shift ;;
    --client) CLIENT=$2; shift ;;
    -h | --help) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "latency.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$BUILD/results-latency-quick}; else OUT=${OUT:-$ROOT/bench/results}; fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
for b in "$MTPROXY" "$LOAD"; do
    [ -x "$b" ] || { echo "latency.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
[ "$(nproc)" -ge 2 ] || { echo "latency.sh: needs 2 CPUs (proxy and load tool pinned apart)" >&2; exit 77; }
case "$TOOL" in
c) ;;
go)
    GO=$(command -v go || true)
    [ -n "$GO" ] || [ ! -x /usr/local/go/bin/go ] || GO=/usr/local/go/bin/go
    [ -n "$GO" ] || { echo "latency.sh: --tool go: no go toolchain found (Debian: golang-go), skipped" >&2; exit 77; }
    [ ${#SPIN[@]} = 0 ] || { echo "latency.sh: --load-spin is bench_load's (--tool c)" >&2; exit 2; }
    NAME=latency-go
    GOLAT=$BUILD/golat
    # standard library only: no module, no network (GOPROXY off), the toolchain at hand
    GOCACHE=$BUILD/gocache GOPATH=$BUILD/gopath GOPROXY=off GOTOOLCHAIN=local GO111MODULE=off \
        "$GO" build -o "$GOLAT" "$ROOT/bench/golat/main.go" ||
        { echo "latency.sh: building bench/golat failed" >&2; exit 1; }
    ;;
*) echo "latency.sh: --tool c or go" >&2; exit 2 ;;
esac
case "$CLIENT" in
dd) ;;
tls) [ "$TOOL" = c ] || { echo "latency.sh: --client tls needs --tool c" >&2; exit 2; }
     NAME=$NAME-tls ;;
*) echo "latency.sh: --client dd or tls" >&2; exit 2 ;;
esac
read -ra PA <<<"$PROXY_ARGS"
if [ "$FLOOR" = 1 ]; then
    [ "$TOOL" = go ] || { echo "latency.sh: --floor needs --tool go" >&2; exit 2; }
    command -v haproxy >/dev/null || { echo "latency.sh: --floor: no haproxy, rows left out" >&2; FLOOR=0; }
fi
HALT_FILE=/sys/module/haltpoll/parameters/guest_halt_poll_ns
HALT_OLD=""
if [ -n "$HALT_POLL" ]; then
    [ -w "$HALT_FILE" ] || { echo "latency.sh: --halt-poll: no writable $HALT_FILE" >&2; exit 77; }
    HALT_OLD=$(cat "$HALT_FILE")
    NAME=$NAME-hp$HALT_POLL
fi
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init latency
if [ -n "$HALT_POLL" ]; then
    trap 'echo "$HALT_OLD" >"$HALT_FILE"; bench_cleanup' EXIT
    echo "$HALT_POLL" >"$HALT_FILE"
    echo "latency.sh: guest_halt_poll_ns $HALT_OLD -> $HALT_POLL for this run" >&2
fi
K=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
EE=ee$K$(printf 'example.com' | od -An -tx1 | tr -d ' \n')
CSV=$OUT/$NAME.csv
echo "conns,mode,busy_us,run,p50_us,p99_us,p999_us,round_trips,proxy_cpu_per_s,proxy_cpu_us_per_rt" >"$CSV"

# run_small CONNS MODE BUSY RUN [--direct]: one load-tool window; a CSV row.
run_small() {
    local conns=$1 mode=$2 busy=$3 run=$4
    shift 4
    rm -f "$WORK/run.csv" "$WORK/lat.txt"
    local cpu=0 cpu_s=0 win=$SECONDS_RUN p50 p99 p999 n
    if [ "$TOOL" = go ]; then
        local args=(-dc-port "$DCPORT" -secret "dd$K" -conns "$conns" -seconds "$SECONDS_RUN")
        if [ "${1:-}" = --direct ]; then args+=(-direct "${@:2}"); else args+=(-proxy-port "$PORT" -proxy-pid "$PROXY_PID"); fi
        GOMAXPROCS=1 taskset -c 1 timeout 120 "$GOLAT" "${args[@]}" -lat-file "$WORK/lat.txt" >/dev/null
        read -r p50 p99 p999 n cpu_s win <"$WORK/lat.txt"
    else
        local pid=() cl=(--secret "dd$K" --client dd)
        [ -n "$PROXY_PID" ] && pid=(--proxy-pid "$PROXY_PID")
        [ "$CLIENT" = dd ] || [ "$mode" = direct ] || cl=(--secret "$EE" --client tls)
        taskset -c 1 timeout 120 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" "${cl[@]}" \
            --workload small --conns "$conns" --window 1 --seconds "$SECONDS_RUN" \
            "${pid[@]}" --csv "$WORK/run.csv" --lat-file "$WORK/lat.txt" --quiet "${SPIN[@]}" "$@"
        cpu_s=$(tail -1 "$WORK/run.csv" | awk -F, '{ print $16 }')
        read -r p50 p99 p999 n <"$WORK/lat.txt"
    fi
    [ "$mode" != direct ] || cpu_s=0
    cpu=$(awk -v c="$cpu_s" -v s="$win" 'BEGIN { printf "%.3f", c / s }')
    local per_rt
    per_rt=$(awk -v c="$cpu_s" -v n="$n" 'BEGIN { printf "%.2f", (n > 0 ? c * 1e6 / n : 0) }')
    echo "$conns,$mode,$busy,$run,$p50,$p99,$p999,$n,$cpu,$per_rt" >>"$CSV"
}

# start_haproxy haproxy|haproxy-busy: a plain TCP relay HPORT -> DCPORT on CPU 0; HA_PID.
HPORT=$((PORT + 2))
start_haproxy() {
    local busy=""
    [ "$1" = haproxy-busy ] && busy="    busy-polling"
    printf 'global\n    nbthread 1\n%s\ndefaults\n    mode tcp\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\nlisten relay\n    bind 127.0.0.1:%s\n    server dc 127.0.0.1:%s\n' \
        "$busy" "$HPORT" "$DCPORT" >"$WORK/haproxy.cfg"
    taskset -c 0 timeout 120 haproxy -db -f "$WORK/haproxy.cfg" >"$WORK/haproxy.out" 2>&1 &
    HA_T=$!
    HA_PID=$HA_T
    for _ in $(seq 100); do
        ss -ltn | grep -q "127.0.0.1:$HPORT " && break
        sleep 0.05
    done
    ss -ltn | grep -q "127.0.0.1:$HPORT " ||
        { echo "latency.sh: haproxy did not listen on $HPORT" >&2; cat "$WORK/haproxy.out" >&2; exit 1; }
    HA_PID=$(pgrep -P "$HA_T" -x haproxy || echo "$HA_T") # its CPU: haproxy's own pid
}

for run in $(seq "$REPEAT"); do
    for conns in 1 64; do
        echo "latency.sh: run $run, $conns connection(s), direct" >&2
        PROXY_PID=""
        run_small "$conns" direct 0 "$run" --direct
        if [ "$FLOOR" = 1 ]; then
            for hb in haproxy haproxy-busy; do
                echo "latency.sh: run $run, $conns connection(s), $hb" >&2
                start_haproxy "$hb"
                run_small "$conns" "$hb" 0 "$run" --direct -proxy-port "$HPORT" -proxy-pid "$HA_PID"
                kill "$HA_T"; wait "$HA_T" 2>/dev/null || true
            done
        fi
        for busy in $BUSY; do
            echo "latency.sh: run $run, $conns connection(s), proxy busy-poll $busy" >&2
            bench_start_proxy latency.sh 120 --secret "d:dd$K" --secret "t:$EE" --busy-poll "$busy" --log-level warn "${PA[@]}"
            taskset -a -pc 0 "$PROXY_PID" >/dev/null
            run_small "$conns" proxy "$busy" "$run"
            bench_stop_proxy
        done
    done
done

# CPU at idle: a proxy with one relayed connection that sends nothing (bench_load idle); then
# between idle and full load: 64 connections each sending one message per 10 ms (trickle,
# 6,400 round trips/s in all): the proxy's CPU and the round trip with gaps for busy-poll to miss.
IDLE_CSV=$OUT/$NAME-idle.csv
echo "busy_us,idle_cpu_per_s,idle_cpu0_poll_per_s,trickle_cpu_per_s,trickle_p50_us,trickle_p99_us,trickle_msgs_per_s,trickle_cpu0_poll_per_s" >"$IDLE_CSV"
# CPU 0's time in the cpuidle POLL state (us; 0 where there is no cpuidle): the guest's halt
# polling (--halt-poll) is spent there, as idle time that no process is charged for.
POLL_FILE=/sys/devices/system/cpu/cpu0/cpuidle/state0/time
poll_us() { cat "$POLL_FILE" 2>/dev/null || echo 0; }
for busy in $BUSY; do
    bench_start_proxy latency.sh 120 --secret "d:dd$K" --secret "t:$EE" --busy-poll "$busy" --log-level warn "${PA[@]}"
    taskset -a -pc 0 "$PROXY_PID" >/dev/null
    row=$busy
    for wl in idle trickle; do
        rm -f "$WORK/run.csv"
        poll0=$(poll_us)
        taskset -c 1 timeout 60 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "dd$K" \
            --client dd --workload "$wl" --conns "$([ $wl = idle ] && echo 1 || echo 64)" \
            --interval-ms 10 --seconds "$IDLE_S" --proxy-pid "$PROXY_PID" --csv "$WORK/run.csv" --quiet
        # the POLL time over the whole bench_load run (set-up included): an upper bound
        poll=$(awk -v a="$poll0" -v b="$(poll_us)" -v s="$IDLE_S" 'BEGIN { printf "%.4f", (b - a) / 1e6 / s }')
        if [ "$wl" = idle ]; then
            row=$row,$(tail -1 "$WORK/run.csv" | awk -F, '{ printf "%.4f", $16 / $5 }'),$poll
        else
            row=$row,$(tail -1 "$WORK/run.csv" | awk -F, '{ printf "%.4f,%s,%s,%.0f", $16 / $5, $11, $12, $10 / $5 }'),$poll
        fi
    done
    echo "$row" >>"$IDLE_CSV"
    bench_stop_proxy
done

python3 - "$CSV" "$IDLE_CSV" "${SPIN[*]}" "$TOOL" "$HALT_POLL" "$PROXY_ARGS" "$CLIENT" >"$OUT/$NAME.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
idle_rows = list(csv.DictReader(open(sys.argv[2])))
idle = {r["busy_us"]: float(r["idle_cpu_per_s"]) for r in idle_rows}
med = lambda rs, k: statistics.median(float(r[k]) for r in rs)
tool = "the Go load tool (bench/golat)" if sys.argv[4] == "go" else "bench_load"
print("# Round trip added by the proxy (bench/latency.sh%s%s%s): 200-byte echo, one in flight per "
      "connection, proxy on CPU 0, %s (clients + DC) on CPU 1%s%s\n"
      % (" --load-spin" if sys.argv[3] else "", " --tool go" if sys.argv[4] == "go" else "",
         " --halt-poll " + sys.argv[5] if sys.argv[5] else "", tool,
         ", the load tool spinning" if sys.argv[3] else "",
         ", guest_halt_poll_ns " + sys.argv[5] if sys.argv[5] else "")
      + ("proxy options: `%s`\n" % sys.argv[6] if sys.argv[6] else "")
      + ("proxied rows through an ee secret (FakeTLS); direct rows dd\n" if sys.argv[7] == "tls" else ""))
print("| conns | path | busy-poll | p50 us | p99 us | p999 us | added p50 / p99 / p999 us "
      "| proxy CPU (s per s) | proxy CPU us per round trip | idle CPU (s per s) | runs |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for conns in ("1", "64"):
    d = [r for r in rows if r["conns"] == conns and r["mode"] == "direct"]
    if not d:
        continue
    base = [med(d, k) for k in ("p50_us", "p99_us", "p999_us")]
    print("| %s | direct | - | %.1f | %.1f | %.1f | - | - | - | - | %d |" % (conns, *base, len(d)))
    for m in ("haproxy", "haproxy-busy"):
        p = [r for r in rows if r["conns"] == conns and r["mode"] == m]
        if p:
            v = [med(p, k) for k in ("p50_us", "p99_us", "p999_us")]
            add = " / ".join("%.1f" % (a - b) for a, b in zip(v, base))
            print("| %s | %s | - | %.1f | %.1f | %.1f | %s | %.2f | %.1f | - | %d |"
                  % (conns, m, *v, add, med(p, "proxy_cpu_per_s"), med(p, "proxy_cpu_us_per_rt"), len(p)))
    for busy in sorted({r["busy_us"] for r in rows if r["mode"] == "proxy"}, key=int):
        p = [r for r in rows if r["conns"] == conns and r["mode"] == "proxy" and r["busy_us"] == busy]
        v = [med(p, k) for k in ("p50_us", "p99_us", "p999_us")]
        add = " / ".join("%.1f" % (a - b) for a, b in zip(v, base))
        print("| %s | proxy | %s us | %.1f | %.1f | %.1f | %s | %.2f | %.1f | %.4f | %d |"
              % (conns, busy, *v, add, med(p, "proxy_cpu_per_s"), med(p, "proxy_cpu_us_per_rt"),
                 idle.get(busy, float("nan")), len(p)))
print("\nBetween idle and full load (bench_load trickle, 64 connections x one message per 10 ms, "
      "one run):\n")
print("| busy-poll | proxy CPU (s per s) | round trips per s | p50 us | p99 us "
      "| CPU 0 halt-polling, trickle / idle (s per s) |")
print("|---|---|---|---|---|---|")
for r in idle_rows:
    print("| %s us | %.3f | %s | %s | %s | %.3f / %.3f |" % (r["busy_us"], float(r["trickle_cpu_per_s"]),
          r["trickle_msgs_per_s"], r["trickle_p50_us"], r["trickle_p99_us"],
          float(r["trickle_cpu0_poll_per_s"]), float(r["idle_cpu0_poll_per_s"])))
PY
cat "$OUT/$NAME.md"
