# lib_middle.sh: shared by bench/middle.sh and bench/middle_tune.sh (sourced): work dir, ports,
# process figures and the fake ME every middle-mode proxy of the run talks to.
# shellcheck shell=bash

# middle_init NAME: checks MTPROXY, FAKE_ME and ME_CLIENT are built; makes WORK (removed at
# exit, with every pid in PIDS killed); starts fake_me (ME of DC 2) on a free port and writes
# WORK/proxy-secret and WORK/proxy-multi.conf; sets SECRET, DD (its dd form), MEPORT, HZ.
middle_init() {
    local b
    for b in "$MTPROXY" "$FAKE_ME" "$ME_CLIENT"; do
        [ -x "$b" ] || { echo "$1: $b not built" >&2; exit 1; }
    done
    WORK=$(mktemp -d "/tmp/mtproxy-$1.XXXXXX")
    PIDS=()
    trap middle_cleanup EXIT
    ulimit -n 20000
    HZ=$(getconf CLK_TCK)
    SECRET=$("$MTPROXY" generate-secret)
    DD=dd$SECRET
    head -c 128 /dev/urandom >"$WORK/proxy-secret"
    MEPORT=$(port)
    "$FAKE_ME" --secret-file "$WORK/proxy-secret" --listen "127.0.0.1:$MEPORT,2" \
        >"$WORK/me.out" 2>&1 &
    PIDS+=($!)
    printf 'default 2;\nproxy_for 2 127.0.0.1:%s;\n' "$MEPORT" >"$WORK/proxy-multi.conf"
}

middle_cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}

port() { # a free loopback port
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 12000))
        ss -ltn | grep -q ":$p " || { echo "$p"; return; }
    done
    exit 1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
median() { sort -n | awk '{a[NR] = $1} END {if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
now() { date +%s.%N; }

# middle_start NAME PORT ARGS...: mtproxy with one worker on 127.0.0.1:PORT, plus ARGS; waits
# until it listens; sets PID_<NAME> (mtproxy's own pid, from its pidfile).
middle_start() {
    local name=$1 p=$2
    shift 2
    "$MTPROXY" --listen "127.0.0.1:$p" --workers 1 --mask off --secret "b:$SECRET" \
        --log "$WORK/$name.log" --pidfile "$WORK/$name.pid" --state-file "$WORK/$name.state" \
        --probe-limit-per-ip 0 --max-connections 12000 "$@" >"$WORK/$name.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 200); do
        [ -s "$WORK/$name.pid" ] && ss -ltn | grep -q "127.0.0.1:$p " && break
        sleep 0.05
    done
    printf -v "PID_$name" '%s' "$(cat "$WORK/$name.pid")"
}
