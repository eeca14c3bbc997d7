#!/usr/bin/env bash
# bench/dcpool.sh: does the DC pool pay? New-connection latency over a DC link with a real round
# trip, dc-pool 0 against 1/2/4, and what the pool costs at idle.
#
#   bench/dcpool.sh [--quick] [--build-dir DIR] [--out DIR] [--repeat N] [--rtt "20 100"]
#                   [--pools "0 1 2 4"] [--singles N] [--burst N] [--bursts K] [--client dd|tls]
#                   [--cost-pools "0 1 2 4 8"] [--no-cost] [--no-latency]
#                   [--idle-close MS [--race-rtt 200] [--race-n 60] [--race-gap MS] [--race-jitter MS]
#                    [--race-pools "0 1"] [--prev-build DIR]]
#
# Latency: bench_delayline puts bench_load's DC sink behind a user-space delay line (two TUN
# devices, the sink in the line's far namespace on 10.77.0.2, every packet SYN included delayed
# RTT/2 each way); client and proxy stay on loopback. bench_load's handshake workload times, per
# new client, its connect -> the DC has the header and hello ("to DC") and connect -> the DC's
# one-byte answer is back at the client ("echo"). Two shapes: one at a time (--singles
# handshakes, 2 RTT + 20 ms apart: the pool has refilled) and bursts (--burst clients at once,
# more than the pool holds, --bursts times, 3 RTT + 50 ms apart). For each RTT, runs alternate
# over the pool sizes (--repeat rounds, a fresh proxy per run); the table gives medians over the
# runs of each run's p50 and p90, and how many clients got a pooled socket (the proxy's
# SIGUSR1 "dc_pool claims").
#
# Cost (loopback, no delay): a proxy with the 6 DC ids of the built-in table all pointing at the
# sink, 1 and 2 workers, one idle relayed client, for each --cost-pools size: its CPU over a 4 s
# idle window, VmRSS, open descriptors and the DC-side connections it holds.
#
# --idle-close MS: a DC that drops pre-connected sockets silent for MS ms (as a real DC may):
# over --race-rtt, --race-n handshakes one at a time, gaps drawn uniformly in [G, G + J] ms
# (G = --race-gap, default 0; J = --race-jitter, default MS), with each of --race-pools, for
# this build and the one in --prev-build DIR if given (its mtproxy): how
# many failed (the client got a pooled socket whose FIN was already on its way), and the pool's
# drops and recycles. Rows appended to dcpool-race.csv, a table in dcpool.md.
#
# Writes dcpool.csv, dcpool-cost.csv and dcpool.md into OUT (default bench/results; --quick:
# BUILD/results-dcpool-quick, one round, RTT 20, pools 0 and 2, few handshakes). Runs itself in
# a network namespace of its own (unshare -n, root): nothing here can reach another host.
set -euo pipefail

if [ -z "${DCPOOL_IN_NETNS:-}" ]; then
    [ "$(id -u)" = 0 ] && [ -c /dev/net/tun ] ||
        { echo "dcpool.sh: needs root and /dev/net/tun (TUN devices, network namespaces)" >&2; exit 77; }
    exec unshare -n env DCPOOL_IN_NETNS=1 sh -c 'ip link set lo up && exec "$@"' dcpool \
        bash "$0" "$@"
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-bench"
OUT=""
REPEAT=3
RTTS="20 100"
POOLS="0 1 2 4"
SINGLES=15
BURST=64
BURSTS=4
CLIENT=dd
COST_POOLS="0 1 2 4 8"
COST_WORKERS="1 2"
COST=1
LATENCY=1
QUICK=0
IDLE_CLOSE=0
RACE_RTT=200
RACE_N=60
RACE_GAP=0
RACE_JITTER=""
RACE_POOLS="0 1"
PREV_BUILD=""
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 REPEAT=1 RTTS=20 POOLS="0 2" SINGLES=4 BURST=8 BURSTS=1 COST_POOLS="0 2"
        COST_WORKERS=2 ;;
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --rtt) RTTS=$2; shift ;;
    --pools) POOLS=$2; shift ;;
    --singles) SINGLES=$2; shift ;;
    --burst) BURST=$2; shift ;;
    --bursts) BURSTS=$2; shift ;;
    --client) CLIENT=$2; shift ;;
    --cost-pools) COST_POOLS=$2; shift ;;
    --no-cost) COST=0 ;;
    --no-latency) LATENCY=0 ;;
    --idle-close) IDLE_CLOSE=$2; shift ;;
    --race-rtt) RACE_RTT=$2; shift ;;
    --race-n) RACE_N=$2; shift ;;
    --race-gap) RACE_GAP=$2; shift ;;
    --race-jitter) RACE_JITTER=$2; shift ;;
    --race-pools) RACE_POOLS=$2; shift ;;
    --prev-build) PREV_BUILD=$2; shift ;;
    -h | --help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "dcpool.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [ "$QUICK" = 1 ]; then OUT=${OUT:-$BUILD/results-dcpool-quick}; else OUT=${OUT:-$ROOT/bench/results}; fi
MTPROXY=$BUILD/mtproxy
LOAD=$BUILD/bench/bench_load
DELAY=$BUILD/bench/bench_delayline
for b in "$MTPROXY" "$LOAD" "$DELAY"; do
    [ -x "$b" ] || { echo "dcpool.sh: $b missing (cmake --build $BUILD)" >&2; exit 2; }
done
mkdir -p "$OUT"
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
bench_init dcpool
DL_PID=""
trap 'bench_cleanup; [ -n "$DL_PID" ] && kill "$DL_PID" 2>/dev/null; true' EXIT
K=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
case "$CLIENT" in
dd) SECRET="dd$K" ;;
tls) SECRET="ee${K}$(printf 'example.com' | od -An -tx1 | tr -d ' \n')" ;;
*) echo "dcpool.sh: --client dd|tls" >&2; exit 2 ;;
esac
CSV=$OUT/dcpool.csv
COST_CSV=$OUT/dcpool-cost.csv
[ "$LATENCY" = 0 ] || echo "rtt_ms,pool,mode,run,dc_p50_ms,dc_p90_ms,dc_p99_ms,dc_max_ms,echo_p50_ms,echo_p90_ms,echo_p99_ms,echo_max_ms,handshakes,claims,errors" >"$CSV"

# start_delayline RTT: bench_delayline with RTT/2 each way; DL_PID.
start_delayline() {
    rm -f "$WORK/dl.ready"
    "$DELAY" --delay-ms "$(awk -v r="$1" 'BEGIN { print r / 2 }')" --ready "$WORK/dl.ready" \
        --seconds 900 2>"$WORK/dl.err" &
    DL_PID=$!
    for _ in $(seq 200); do [ -s "$WORK/dl.ready" ] && break; sleep 0.02; done
    [ -s "$WORK/dl.ready" ] || { echo "dcpool.sh: delay line did not start" >&2; cat "$WORK/dl.err" >&2; exit 1; }
}

# pool_stats: the proxy's "connects C claims N dropped D failures F recycled R" now.
pool_stats() { bench_stats_line "dc_pool "; }

# run_hs RTT POOL MODE RUN ARGS...: the sink starts first (waiting --pre-wait in its far
# namespace), then a fresh proxy whose pool connects at once; one CSV row.
run_hs() {
    local rtt=$1 pool=$2 mode=$3 run=$4
    shift 4
    rm -f "$WORK/hs.txt" "$WORK/proxy.pid"
    timeout 300 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "$SECRET" \
        --client "$CLIENT" --workload handshake --dc-netns "/proc/$DL_PID/ns/net" \
        --dc-addr 10.77.0.2 --proxy-pidfile "$WORK/proxy.pid" --pre-wait 1.5 \
        --hs-file "$WORK/hs.txt" --quiet "$@" >"$WORK/load.out" 2>&1 &
    local load=$!
    sleep 0.1
    BENCH_DC_HOST=10.77.0.2 bench_start_proxy dcpool 300 --secret "u:$SECRET" --dc-pool "$pool"
    local rc=0
    wait "$load" || rc=$?
    local st claims
    st=$(pool_stats)
    claims=$(echo "$st" | awk '{ print $4 }')
    bench_stop_proxy
    if [ ! -s "$WORK/hs.txt" ]; then
        echo "dcpool.sh: no figures (rtt $rtt pool $pool $mode, rc $rc):" >&2
        cat "$WORK/load.out" >&2
        exit 1
    fi
    read -r d50 d90 d99 dmax e50 e90 e99 emax nd ne <"$WORK/hs.txt"
    awk -v r="$rtt" -v p="$pool" -v m="$mode" -v run="$run" -v c="${claims:-0}" -v rc="$rc" \
        -v a="$d50 $d90 $d99 $dmax $e50 $e90 $e99 $emax" -v n="$ne" 'BEGIN {
        split(a, v, " "); printf "%s,%s,%s,%s", r, p, m, run
        for (i = 1; i <= 8; i++) printf ",%.2f", v[i] / 1000
        printf ",%s,%s,%s\n", n, c, rc }' >>"$CSV"
    echo "dcpool.sh: rtt $rtt ms pool $pool $mode run $run: to DC p50 $((${d50%.*} / 1000)) ms, echo p50 $((${e50%.*} / 1000)) ms, $ne handshakes, $claims from the pool" >&2
}

[ "$LATENCY" = 1 ] || RTTS=""
for rtt in $RTTS; do
    start_delayline "$rtt"
    for run in $(seq "$REPEAT"); do
        for pool in $POOLS; do
            run_hs "$rtt" "$pool" single "$run" --burst 1 --bursts "$SINGLES" \
                --gap-ms $((2 * rtt + 20))
            run_hs "$rtt" "$pool" burst "$run" --burst "$BURST" --bursts "$BURSTS" \
                --gap-ms $((3 * rtt + 50))
        done
    done
    kill "$DL_PID"
    wait "$DL_PID" || true
    echo "dcpool.sh: $(cat "$WORK/dl.err")" >&2
    DL_PID=""
done

# ---- a DC that drops idle pooled sockets: does a client ever get one that is closing? ----
RACE_CSV=$OUT/dcpool-race.csv
RACE_JITTER=${RACE_JITTER:-$IDLE_CLOSE}
if [ "$IDLE_CLOSE" -gt 0 ]; then
    [ -s "$RACE_CSV" ] || echo "build,rtt_ms,idle_close_ms,gap_min_ms,gap_max_ms,pool,handshakes,ok,failed,claims,dropped,recycled,echo_p50_ms" >"$RACE_CSV"
    start_delayline "$RACE_RTT"
    builds=("this:$MTPROXY")
    [ -n "$PREV_BUILD" ] && builds+=("prev:$PREV_BUILD/mtproxy")
    THIS_MTPROXY=$MTPROXY
    for b in "${builds[@]}"; do
        MTPROXY=${b#*:}
        for pool in $RACE_POOLS; do
            rm -f "$WORK/hs.txt" "$WORK/proxy.pid"
            timeout 600 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "$SECRET" \
                --client "$CLIENT" --workload handshake --dc-netns "/proc/$DL_PID/ns/net" \
                --dc-addr 10.77.0.2 --proxy-pidfile "$WORK/proxy.pid" --pre-wait 3 \
                --hs-file "$WORK/hs.txt" --quiet --burst 1 --bursts "$RACE_N" --gap-ms "$RACE_GAP" \
                --gap-jitter-ms "$RACE_JITTER" --dc-idle-close-ms "$IDLE_CLOSE" \
                >"$WORK/load.out" 2>&1 &
            load=$!
            sleep 0.1
            BENCH_DC_HOST=10.77.0.2 bench_start_proxy dcpool 600 --secret "u:$SECRET" \
                --dc-pool "$pool"
            wait "$load" || true
            st=$(pool_stats)
            bench_stop_proxy
            read -r _ _ _ _ e50 _ _ _ _ ne <"$WORK/hs.txt"
            # "connects C claims N dropped D failures F [recycled R]"
            echo "${b%%:*},$RACE_RTT,$IDLE_CLOSE,$RACE_GAP,$((RACE_GAP + RACE_JITTER)),$pool,$RACE_N,$ne,$((RACE_N - ne)),$(echo "$st" |
                awk '{ printf "%s,%s,%s", $4, $6, ($10 == "" ? 0 : $10) }'),$(awk -v e="$e50" \
                'BEGIN { printf "%.1f", e / 1000 }')" >>"$RACE_CSV"
            echo "dcpool.sh: race: $(tail -1 "$RACE_CSV")" >&2
        done
    done
    MTPROXY=$THIS_MTPROXY
    kill "$DL_PID"
    wait "$DL_PID" || true
    DL_PID=""
fi

# ---- cost at idle: loopback, the built-in table's 6 ids on our sink ----
if [ "$COST" = 1 ]; then
    echo "workers,pool,proxy_cpu_s,seconds,rss_kb,fds,dc_conns" >"$COST_CSV"
    ids=()
    for id in 1 3 4 5 203; do ids+=(--dc "$id 127.0.0.1:$DCPORT"); done
    for workers in $COST_WORKERS; do
        for pool in $COST_POOLS; do
            rm -f "$WORK/cost.csv" "$WORK/proxy.pid"
            timeout 60 "$LOAD" --proxy-port "$PORT" --dc-port "$DCPORT" --secret "$SECRET" \
                --client "$CLIENT" --workload idle --conns 1 --seconds 4 --settle 1 \
                --pre-wait 0.5 --proxy-pidfile "$WORK/proxy.pid" --csv "$WORK/cost.csv" \
                --quiet >"$WORK/load.out" 2>&1 &
            load=$!
            sleep 0.1
            bench_start_proxy dcpool 120 --secret "u:$SECRET" --dc-pool "$pool" \
                --workers "$workers" "${ids[@]}"
            sleep 3 # inside bench_load's idle window
            fds=$(ls "/proc/$PROXY_PID/fd" | wc -l)
            rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$PROXY_PID/status")
            dcc=$(ss -Htn state established "( dport = :$DCPORT )" | wc -l)
            wait "$load" || { cat "$WORK/load.out" >&2; exit 1; }
            bench_stop_proxy
            cpu=$(tail -1 "$WORK/cost.csv" | awk -F, '{ print $16 }')
            secs=$(tail -1 "$WORK/cost.csv" | awk -F, '{ print $5 }')
            echo "$workers,$pool,$cpu,$secs,$rss,$fds,$((dcc - 1))" >>"$COST_CSV"
            echo "dcpool.sh: cost: $workers worker(s), pool $pool: cpu $cpu s in $secs s, rss $rss kB, $fds fds, $((dcc - 1)) pooled DC connections" >&2
        done
    done
fi

python3 - "$CSV" "$COST_CSV" "$OUT/dcpool.md" "$CLIENT" <<'EOF'
import csv, statistics, sys
import os
load = lambda f: list(csv.DictReader(open(f))) if os.path.exists(f) else []
rows = load(sys.argv[1])
cost = load(sys.argv[2])
out = []
out.append("# DC pool: new-connection latency over a DC link with a round trip (%s clients)\n" % sys.argv[4])
out.append("Medians over runs of each run's percentile; ms from the client's connect. \"to DC\": the DC has "
           "the header and first bytes; \"echo\": the DC's answer is back at the client. "
           "pooled: clients that got a pooled socket / handshakes.\n")
out.append("| RTT ms | shape | dc-pool | to DC p50 | to DC p90 | echo p50 | echo p90 | echo p50 vs pool 0 | pooled |")
out.append("|---|---|---|---|---|---|---|---|---|")
key = lambda r: (int(r["rtt_ms"]), r["mode"] != "single", int(r["pool"]))
groups = {}
for r in rows:
    groups.setdefault(key(r), []).append(r)
med = lambda g, c: statistics.median(float(r[c]) for r in g)
for k in sorted(groups):
    g = groups[k]
    base = groups.get((k[0], k[1], 0))
    ratio = "%.2f×" % (med(g, "echo_p50_ms") / med(base, "echo_p50_ms")) if base else "–"
    pooled = "%d / %d" % (sum(int(r["claims"]) for r in g), sum(int(r["handshakes"]) for r in g))
    shape = "one at a time" if not k[1] else "burst"
    out.append("| %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %s | %s |" % (
        k[0], shape, k[2], med(g, "dc_p50_ms"), med(g, "dc_p90_ms"), med(g, "echo_p50_ms"),
        med(g, "echo_p90_ms"), ratio, pooled))
if cost:
    out.append("\n# DC pool at idle (loopback, 6 DC ids as in the built-in table, one idle client)\n")
    out.append("| workers | dc-pool | proxy CPU s per s | VmRSS kB | open fds | pooled DC connections |")
    out.append("|---|---|---|---|---|---|")
    for r in cost:
        out.append("| %s | %s | %.4f | %s | %s | %s |" % (r["workers"], r["pool"],
                   float(r["proxy_cpu_s"]) / float(r["seconds"]), r["rss_kb"], r["fds"], r["dc_conns"]))
race = os.path.join(os.path.dirname(sys.argv[3]), "dcpool-race.csv")
rr = list(csv.DictReader(open(race))) if os.path.exists(race) else []
if rr:
    out.append("\n# A DC that drops pooled sockets idle for %s ms, RTT %s ms, handshakes one at a time\n"
               % (rr[0]["idle_close_ms"], rr[0]["rtt_ms"]))
    out.append("| build | gaps ms | dc-pool | failed / handshakes | pooled | DC drops | recycled | echo p50 ms |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rr:
        out.append("| %s | %s–%s | %s | %s / %s | %s | %s | %s | %s |" % (r["build"], r["gap_min_ms"],
                   r["gap_max_ms"], r["pool"], r["failed"], r["handshakes"], r["claims"], r["dropped"],
                   r["recycled"], r["echo_p50_ms"]))
open(sys.argv[3], "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
