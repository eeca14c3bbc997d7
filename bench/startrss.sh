#!/usr/bin/env bash
# bench/startrss.sh: the proxy's RSS right after start, with where it goes (heap, libcrypto, anon).
#
#   bench/startrss.sh [--router] [--settle S] [--runs N] BINARY [ARGS...]
#
# Starts BINARY with the repository's mtproxy.conf (the documented defaults) and --workers 1,
# in a new network namespace with only `lo` up (unshare -n: the default DC table would dial
# Telegram; in the namespace nothing leaves the machine), waits for the "started" log line,
# then S seconds (default 3), and prints VmRSS (/proc/PID/status) and the Rss breakdown from
# /proc/PID/smaps: [heap], libcrypto (its mapping, or the binary's for a static build),
# the binary itself, other shared libraries, anonymous mappings (thread stacks, mmap'd
# blocks), [stack]; then stops it (SIGTERM). --router adds the router profile of
# packaging/README.md (--replay-cache 1M --block-size 8k --max-buffer 32k --buffer-memory 8M
# --max-connections 512). --runs N: N starts, one line each. --client TOOLS (the build's
# tests/tools, with fake_dc and test_client): DC 2 is a fake DC on loopback, and after the
# start line one client relays 4 KiB each way through the proxy and a second line ("+1
# client") shows what serving costs. ARGS go to the proxy as given. Needs root (unshare -n).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SETTLE=3
RUNS=1
PROFILE=()
ROUTER=()
TOOLS=""
while [ $# -gt 0 ]; do
    case "$1" in
    --router) PROFILE=(--replay-cache 1M --block-size 8k --max-buffer 32k --buffer-memory 8M
                       --max-connections 512)
              ROUTER=(--router) ;;
    --settle) SETTLE=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --client) TOOLS=$(readlink -f "$2"); shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "startrss.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
    shift
done
[ $# -ge 1 ] || { echo "usage: startrss.sh [--router] [--settle S] [--runs N] BINARY [ARGS...]" >&2; exit 2; }
BIN=$(readlink -f "$1")
shift
[ -x "$BIN" ] || { echo "startrss.sh: $BIN is not executable" >&2; exit 2; }

if [ "${STARTRSS_IN_NS:-}" != 1 ]; then
    exec unshare -n env STARTRSS_IN_NS=1 "$0" --settle "$SETTLE" --runs "$RUNS" \
        ${TOOLS:+--client "$TOOLS"} \
        ${ROUTER[@]+"${ROUTER[@]}"} "$BIN" "$@"
fi
ip link set lo up
WORK=$(mktemp -d /tmp/mtproxy-startrss.XXXXXX)
PID=""
DCPID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    [ -n "$DCPID" ] && kill "$DCPID" 2>/dev/null && wait "$DCPID" 2>/dev/null
    rm -rf "$WORK" "$WORK.dc"
}
trap cleanup EXIT
DCARGS=()
if [ -n "$TOOLS" ]; then
    "$TOOLS/fake_dc" --listen 127.0.0.1:18999,2,normal >"$WORK.dc" 2>&1 &
    DCPID=$!
    for _ in $(seq 50); do grep -q READY "$WORK.dc" && break; sleep 0.1; done
    DCARGS=(--dc-builtin off --dc "2 127.0.0.1:18999")
fi

# measure LABEL: VmRSS and the Rss split of the running proxy, one line.
measure() {
    local rss heap crypto binary libs anon stack
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$PID/status")
    # smaps: a mapping's header line, then its fields; Rss in kB, summed by kind.
    read -r heap crypto binary libs anon stack < <(awk -v bin="$BIN" '
        /^[0-9a-f]+-[0-9a-f]+ / {
            path = $6
            if (path == "[heap]") kind = "heap"
            else if (path ~ /libcrypto/) kind = "crypto"
            else if (path == bin) kind = "bin"
            else if (path == "[stack]") kind = "stack"
            else if (path == "") kind = "anon"
            else if (path ~ /^\[/) kind = "other"
            else kind = "libs"
            next
        }
        /^Rss:/ { kb[kind] += $2 }
        END {
            printf "%d %d %d %d %d %d\n", kb["heap"], kb["crypto"], kb["bin"], kb["libs"],
                kb["anon"], kb["stack"]
        }' "/proc/$PID/smaps")
    printf '%-9s %8s %8s %9s %8s %8s %8s %8s   (kB)\n' "$1" "$rss" "$heap" "$crypto" \
        "$binary" "$libs" "$anon" "$stack"
}

printf '%-9s %8s %8s %9s %8s %8s %8s %8s\n' run VmRSS heap libcrypto binary libs anon stack
for run in $(seq "$RUNS"); do
    rm -f "$WORK"/*
    "$BIN" --config "$ROOT/mtproxy.conf" --workers 1 --state-file "$WORK/state" \
        --links-file off --log "$WORK/log" ${PROFILE[@]+"${PROFILE[@]}"} \
        ${DCARGS[@]+"${DCARGS[@]}"} "$@" >"$WORK/out" 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        grep -q ' started, pid' "$WORK/log" 2>/dev/null && break
        kill -0 "$PID" 2>/dev/null || { cat "$WORK/out" "$WORK/log" >&2; exit 1; }
        sleep 0.1
    done
    grep -q ' started, pid' "$WORK/log" || { echo "startrss.sh: not started" >&2; exit 1; }
    sleep "$SETTLE"
    measure "$run"
    if [ -n "$TOOLS" ]; then
        secret=$(sed -n 's/^secret = [^:]*:\([0-9a-f]*\)$/\1/p' "$WORK/state")
        "$TOOLS/test_client" --proxy 127.0.0.1:8443 --secret "$secret" --tag ef --dc 2 \
            --up 4096 --down 4096 >"$WORK/client" 2>&1 ||
            { echo "startrss.sh: the client failed:" >&2; cat "$WORK/client" >&2; exit 1; }
        sleep "$SETTLE"
        measure "$run+1 client"
    fi
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
done
