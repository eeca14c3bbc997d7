#!/usr/bin/env bash
# bench/middle_tune.sh: sweeps the middle-proxy flow-control keys to choose their defaults.
#
#   bench/middle_tune.sh [--build-dir DIR] [--out DIR] [--repeat N] [--quick] [--only KEY]
#                        [--sndbuf BYTES]
#
# For each key, one mtproxy per value (one worker, the other keys at their defaults) runs side
# by side against one tests/tools/fake_me; the rounds alternate the values within the run, so
# the machine's load hits them alike. Medians of --repeat rounds, plus each value's ratio to the
# shipped default. Workloads (tests/tools/me_client, dd clients):
#   dl64: 64 clients downloading in 512 KiB parts, 4 in flight (as apps fetch files): MiB/s,
#         the proxy's CPU s per GiB, clients that failed (closed as slow);
#   iso:  200 clients; 199 download 1 MiB each alone (stall0) and beside one that asks for
#         16 MiB and never reads (stall1): the 199's MiB/s and its ratio stall1/stall0, and
#         when (seconds after its connect, from the log-connections line) it was closed;
#   slow16: 16 clients reading at 1 MiB/s each through 64 KiB receive buffers (slow, far
#         clients) downloading 2 MiB in 512 KiB parts, 4 in flight: how many were closed as
#         slow although they read;
#   up64: 64 clients echoing 8 packets of 512 KiB each (upload parts), one in flight: MiB/s
#         each way; up1: the same from one client (32 packets).
# Per value also: the proxy's peak RSS (VmHWM) over all its rounds, and its slow_closed and
# link_pauses counters. Keys: me-pool (dl64), me-link-buffer (dl64, iso), me-client-buffer
# (dl64, iso, slow16), me-request-buffer (up64, up1); --only sweeps one of them. --sndbuf gives every
# proxy that SO_SNDBUF (a small one leaves what the kernel no longer holds queued in the
# proxy: the case me-client-buffer must cover). Writes OUT/middle_tune.csv and OUT/middle_tune.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
OUT=""
REPEAT=3
QUICK=0
ONLY=""
EXTRA=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build-dir) BUILD=$2; shift ;;
    --out) OUT=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    --sndbuf) EXTRA=(--sndbuf "$2"); shift ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "middle_tune.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
OUT=${OUT:-$ROOT/bench/results}
MTPROXY=$BUILD/mtproxy
FAKE_ME=$BUILD/tests/tools/fake_me
ME_CLIENT=$BUILD/tests/tools/me_client
if [ "$QUICK" = 1 ]; then
    REPEAT=1 DL=$((1 << 20)) ECHOES=2
else
    DL=$((8 << 20)) ECHOES=8
fi
mkdir -p "$OUT"
# shellcheck source=bench/lib_middle.sh
. "$ROOT/bench/lib_middle.sh"
middle_init tune

# start NAME ARGS...: a middle-mode mtproxy (middle_start); sets PID_<NAME>, PORT_<NAME>.
start() {
    local name=$1 p
    shift
    p=$(port)
    middle_start "$name" "$p" --ad-tag 0123456789abcdef0123456789abcdef \
        --proxy-secret-file "$WORK/proxy-secret" --proxy-config-file "$WORK/proxy-multi.conf" \
        "${EXTRA[@]}" "$@"
    printf -v "PORT_$name" '%s' "$p"
}
summary() { sed -n "s/^SUMMARY.* $1=\([0-9.]*\).*/\1/p" "$WORK/mc.out"; }
# run NAME ARGS...: me_client against proxy NAME; prints "MiB/s cpu_s_per_GiB fails".
run() {
    local name=$1 pid port c0 c1 b
    shift
    pid=PID_$name port=PORT_$name
    c0=$(cpu_ticks "${!pid}")
    "$ME_CLIENT" --proxy "127.0.0.1:${!port}" --secret "$DD" --tag dd --timeout 60 "$@" \
        >"$WORK/mc.out" 2>&1 || true
    c1=$(cpu_ticks "${!pid}")
    b=$(summary bytes)
    awk -v m="$(summary mibps)" -v f="$(summary fail)" -v b="${b:-0}" -v c=$((c1 - c0)) \
        -v hz="$HZ" 'BEGIN {if (m == "") m = 0; if (f == "") f = "-"; g = 0
                            if (b > 0) g = c / hz / (b / 1073741824)
                            printf "%s %.2f %s\n", m, g, f}'
}

CSV=$OUT/middle_tune.csv
echo "key,value,workload,run,mibps,cpu_s_per_gib,fails,slow_close_s,slow_close_down" >"$CSV"
echo "key,value,peak_rss_kb,slow_closed,link_pauses" >"$WORK/per.csv"

# sweep KEY DEFAULT "VALUES" WORKLOADS...
sweep() {
    local key=$1 def=$2 vals=$3 v r w name
    shift 3
    [ -z "$ONLY" ] || [ "$ONLY" = "$key" ] || return 0
    for v in $vals; do start "v$v" --"$key" "$v"; done
    sleep 0.5
    for r in $(seq "$REPEAT"); do
        for w in "$@"; do
            for v in $vals; do
                name=v$v
                logged=$(wc -l <"$WORK/$name.log")
                case $w in
                dl64) read -r m c f < <(run "$name" --clients 64 --download "$DL" \
                          --chunk 65536 --part 524288 --window 4) ;;
                iso0 | iso1)
                    args=()
                    [ "$w" = iso1 ] && args=(--stall 1 --stall-bytes $((16 << 20)))
                    read -r m c f < <(run "$name" --clients 200 --download $((1 << 20)) \
                        --chunk 16384 "${args[@]}") ;;
                slow16) read -r m c f < <(run "$name" --clients 16 --download $((2 << 20)) \
                            --chunk 65536 --part 524288 --window 4 --rate 1024) ;;
                up64) read -r m c f < <(run "$name" --clients 64 --echo "$ECHOES" \
                          --size 524288) ;;
                up1) read -r m c f < <(run "$name" --echo $((ECHOES * 4)) --size 524288) ;;
                esac
                # a client closed as slow: seconds from its connect, bytes sent it (log-connections)
                read -r cs cd < <(tail -n +$((logged + 1)) "$WORK/$name.log" |
                    sed -n 's/.* down \([0-9]*\) bytes duration \([0-9.]*\) s reason slow-client.*/\2 \1/p' |
                    tail -1) || true
                echo "$key,$v,$w,$r,$m,$c,$f,${cs:-},${cd:-}" >>"$CSV"
                echo "middle_tune.sh: $key=$v $w run $r: $m MiB/s $c s/GiB fails $f" >&2
            done
        done
    done
    for v in $vals; do
        name=PID_v$v
        kill -USR1 "${!name}"
    done
    sleep 0.5
    for v in $vals; do
        name=PID_v$v
        awk -v k="$key" -v v="$v" '/^VmHWM:/ {printf "%s,%s,%s,", k, v, $2}' \
            "/proc/${!name}/status" >>"$WORK/per.csv"
        grep 'stats: me ' "$WORK/v$v.log" | tail -1 |
            sed 's/.*slow_closed \([0-9]*\) link_pauses \([0-9]*\).*/\1,\2/' >>"$WORK/per.csv"
        kill "${!name}"
        rm -f "$WORK/v$v.pid"
    done
    sleep 0.5
}

sweep me-pool 2 "1 2 4" dl64
sweep me-link-buffer 8M "2M 8M 32M" dl64 iso0 iso1
sweep me-client-buffer 4M "256k 1M 4M 16M" dl64 iso0 iso1 slow16
sweep me-request-buffer 256k "64k 256k 1M" up64 up1
cp "$WORK/per.csv" "$OUT/middle_tune-per.csv"

# Report: medians, and each value's ratio to the key's default
med() { awk -F, -v k="$1" -v v="$2" -v w="$3" -v col="$4" \
    '$1 == k && $2 == v && $3 == w {print $col}' "$CSV" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {r = 0; if (b > 0) r = a / b; printf "%.2f", r}'; }
per() { awk -F, -v k="$1" -v v="$2" -v col="$3" '$1 == k && $2 == v {print $col}' "$WORK/per.csv"; }
sumf() { awk -F, -v k="$1" -v v="$2" -v w="$3" '$1 == k && $2 == v && $3 == w {s += $7; n++} END {print n ? s : "-"}' "$CSV"; }
{
    echo "# Middle-proxy flow-control sweep (bench/middle_tune.sh)"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M') UTC on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg);"
    echo "${EXTRA[*]:+Every proxy with ${EXTRA[*]}. }One worker per proxy, values alternated within each round, medians of $REPEAT rounds."
    echo "dl64: 64 x $((DL >> 20)) MiB in 512 KiB parts, 4 in flight; iso: 199 x 1 MiB alone (0) and"
    echo "beside one stalled 16 MiB download (1); slow16: 16 x 2 MiB read at 1 MiB/s; up64: 64 x $ECHOES"
    echo "echoes of 512 KiB, up1: 1 x $((ECHOES * 4)). x = ratio to the default; fails summed over the rounds."
    echo
    echo "| key = value | dl64 MiB/s (x) | dl64 CPU s/GiB | dl64 fails | iso0 / iso1 MiB/s (1/0) | stalled closed after s, MiB sent | slow16 fails | up64 MiB/s (x) | up1 MiB/s (x) | peak RSS KiB | slow closed | link pauses |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for kv in "me-pool 2 1 2 4" "me-link-buffer 8M 2M 8M 32M" \
        "me-client-buffer 4M 256k 1M 4M 16M" "me-request-buffer 256k 64k 256k 1M"; do
        set -- $kv
        key=$1 def=$2
        shift 2
        [ -z "$ONLY" ] || [ "$ONLY" = "$key" ] || continue
        for v in "$@"; do
            d=$(med "$key" "$v" dl64 5) dd=$(med "$key" "$def" dl64 5)
            i0=$(med "$key" "$v" iso0 5) i1=$(med "$key" "$v" iso1 5)
            u=$(med "$key" "$v" up64 5) ud=$(med "$key" "$def" up64 5)
            dlc=$([ -n "$d" ] && echo "$d ($(ratio "$d" "$dd"))" || echo -)
            isoc=$([ -n "$i0" ] && echo "$i0 / $i1 ($(ratio "$i1" "$i0"))" || echo -)
            upc=$([ -n "$u" ] && echo "$u ($(ratio "$u" "$ud"))" || echo -)
            u1=$(med "$key" "$v" up1 5) u1d=$(med "$key" "$def" up1 5)
            up1c=$([ -n "$u1" ] && echo "$u1 ($(ratio "$u1" "$u1d"))" || echo -)
            echo "| $key = $v | $dlc | $(med "$key" "$v" dl64 6) | $(sumf "$key" "$v" dl64) |" \
                "$isoc | $(med "$key" "$v" iso1 8)$(med "$key" "$v" iso1 9 | awk '$1 != "" {printf ", %.1f", $1 / 1048576}') | $(sumf "$key" "$v" slow16) | $upc | $up1c | $(per "$key" "$v" 3) | $(per "$key" "$v" 4) | $(per "$key" "$v" 5) |"
        done
    done
} >"$OUT/middle_tune.md"
cat "$OUT/middle_tune.md"
