# lib.sh: shared by the bench scripts (sourced): work dir, free ports, proxy life, a Redis.
# shellcheck shell=bash

# bench_init NAME: makes WORK (removed at exit, with the proxy stopped) and picks PORT/DCPORT:
# a pair of free loopback ports below the kernel's ephemeral range (32768+), unless PORT is set.
bench_init() {
    WORK=$(mktemp -d "/tmp/mtproxy-$1.XXXXXX")
    PROXY_PID=""
    TIMEOUT_PID=""
    trap bench_cleanup EXIT
    if [ -z "${PORT:-}" ]; then
        for _ in $(seq 50); do
            PORT=$((20000 + RANDOM % 12000))
            ss -ltn | grep -qE ":($PORT|$((PORT + 1))) " || break
        done
    fi
    DCPORT=$((PORT + 1))
}

bench_cleanup() {
    bench_stop_proxy
    rm -rf "$WORK"
}

# bench_start_proxy NAME LIFETIME ARGS...: runs mtproxy (bounded by timeout LIFETIME) on PORT
# with one worker, loopback only, DC 2 at our sink on DCPORT (on BENCH_DC_HOST, default
# 127.0.0.1: bench/dcpool.sh puts it behind a delay line), plus ARGS; waits until it
# listens. PROXY_PID is mtproxy's own pid (from its pidfile: CPU, RSS and SIGUSR1 go to it),
# TIMEOUT_PID the timeout(1) wrapper. BENCH_WRAP (words, e.g. "valgrind --tool=callgrind
# --callgrind-out-file=F") goes in front of mtproxy: the pid stays mtproxy's.
bench_start_proxy() {
    local name=$1 life=$2
    shift 2
    : >"$WORK/proxy.log"
    rm -f "$WORK/proxy.pid"
    # shellcheck disable=SC2086
    timeout "$life" ${BENCH_WRAP:-} "$MTPROXY" --listen "127.0.0.1:$PORT" --dc-builtin off --mask off \
        --dc "2 ${BENCH_DC_HOST:-127.0.0.1}:$DCPORT" --workers 1 --log "$WORK/proxy.log" \
        --pidfile "$WORK/proxy.pid" --state-file "$WORK/state" --probe-limit-per-ip 0 "$@" \
        >>"$WORK/proxy.out" 2>&1 &
    TIMEOUT_PID=$!
    for _ in $(seq 200); do
        if [ -s "$WORK/proxy.pid" ] && ss -ltn | grep -q "127.0.0.1:$PORT "; then
            PROXY_PID=$(cat "$WORK/proxy.pid")
            return 0
        fi
        sleep 0.05
    done
    echo "$name: proxy did not start: $*" >&2
    cat "$WORK/proxy.log" "$WORK/proxy.out" >&2
    exit 1
}

bench_stop_proxy() {
    if [ -n "${PROXY_PID:-}" ]; then kill "$PROXY_PID" 2>/dev/null || true; fi
    if [ -n "${TIMEOUT_PID:-}" ]; then wait "$TIMEOUT_PID" 2>/dev/null || true; fi
    PROXY_PID=""
    TIMEOUT_PID=""
}

# bench_stats_line KEY: the rest of a fresh "stats: KEY..." line of the proxy's log (SIGUSR1 to
# PROXY_PID, then waits up to 2 s for the new line), e.g. KEY "dc_pool " gives "connects C ...".
bench_stats_line() {
    local before
    before=$(grep -c "stats: $1" "$WORK/proxy.log" || true)
    kill -USR1 "$PROXY_PID"
    for _ in $(seq 100); do
        [ "$(grep -c "stats: $1" "$WORK/proxy.log" || true)" -gt "$before" ] && break
        sleep 0.02
    done
    grep "stats: $1" "$WORK/proxy.log" | tail -1 | sed "s/.*stats: $1//"
}

# bench_start_redis: a redis-server of our own on 127.0.0.1:RPORT (PORT + 2), no persistence,
# in WORK; REDIS_PID is its pid, killed at exit. Exits 77 if redis-server is not installed.
bench_start_redis() {
    local exe
    exe=$(command -v redis-server || true)
    [ -n "$exe" ] || { echo "redis-server not installed (Debian: redis-server)" >&2; exit 77; }
    RPORT=$((PORT + 2))
    "$exe" --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
        --daemonize no >"$WORK/redis.log" 2>&1 &
    REDIS_PID=$!
    trap 'kill $REDIS_PID 2>/dev/null || true; bench_cleanup' EXIT
    for _ in $(seq 100); do
        ss -ltn | grep -q "127.0.0.1:$RPORT " && return 0
        sleep 0.05
    done
    echo "redis-server did not start" >&2
    exit 1
}
