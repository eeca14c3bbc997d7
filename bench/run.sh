#!/usr/bin/env bash
# bench/run.sh: builds every benchmark (Release, own build dir), runs it, writes CSV, Markdown, PNG.
#
#   bench/run.sh                 full run into bench/results/ (several minutes)
#   bench/run.sh --quick         seconds; checks the pipeline, writes build-bench/results-quick/
#   bench/run.sh --only syscalls one step (comma list); --list shows the steps
#
# Each benchmark is a step: a function step_<name> that runs a program from $BIN and writes
# $OUT/<name>*.csv|md|png. To add one (relay, crypto, memory), write step_<name> and append <name>
# to STEPS. Plots use gnuplot (Debian gnuplot-nox), installed here when missing and run as root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=(syscalls syscalls_tcp relay memory softirq)

QUICK=0
OUT=""
ONLY=""
PLOTS=1
BUILD="$ROOT/build-bench"
REPEAT=3
DURATION=0.5
WAIT_QUIET=""
PLOT_ONLY=0

usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

options:
  --quick          tiny durations, few sizes (default output: build-bench/results-quick)
  --out DIR        output directory (default: bench/results, or the quick one)
  --only LIST      run only these steps (comma list): ${STEPS[*]}
  --list           print the steps and exit
  --repeat N       runs per cell, medians reported (default $REPEAT; --quick: 1)
  --duration S     seconds per cell and run (default $DURATION; --quick: the program's own)
  --build-dir DIR  build directory (default build-bench)
  --wait-quiet S   before each step, wait up to S seconds for other processes to use less than
                   0.2 CPU of user time (default 300; --quick: 0); the programs also redo runs
                   that others disturbed, and report how busy the machine was
  --no-plots       skip the PNG plots (and the gnuplot install)
  --plot-only      redraw the plots from the CSVs already in the output directory
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --list) printf '%s\n' "${STEPS[@]}"; exit 0 ;;
    --repeat) REPEAT=$2; shift ;;
    --duration) DURATION=$2; shift ;;
    --build-dir) BUILD=$2; shift ;;
    --wait-quiet) WAIT_QUIET=$2; shift ;;
    --no-plots) PLOTS=0 ;;
    --plot-only) PLOT_ONLY=1; WAIT_QUIET=0 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "run.sh: unknown option: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

if [ "$QUICK" = 1 ]; then
    OUT=${OUT:-$BUILD/results-quick}
    REPEAT=1
    WAIT_QUIET=${WAIT_QUIET:-0}
else
    OUT=${OUT:-$ROOT/bench/results}
    WAIT_QUIET=${WAIT_QUIET:-300}
fi
if [ -n "$ONLY" ]; then
    IFS=, read -r -a WANT <<<"$ONLY"
    for s in "${WANT[@]}"; do
        case " ${STEPS[*]} " in
        *" $s "*) ;;
        *) echo "run.sh: no step '$s' (steps: ${STEPS[*]})" >&2; exit 2 ;;
        esac
    done
    STEPS=("${WANT[@]}")
fi
mkdir -p "$OUT"
log() { printf 'run.sh: %s\n' "$*" >&2; }

# --- build ---------------------------------------------------------------------------------------
# The top-level project in Release; if it does not configure (e.g. half-written sources), fall back
# to bench/ alone, which builds the benches that need no project library.
JOBS=$(nproc 2>/dev/null || echo 2)
mkdir -p "$BUILD"
if [ "$PLOT_ONLY" = 1 ]; then
    BIN="" BUILD_DIR=""
elif cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMTPROXY_BENCH=ON \
    -DMTPROXY_TESTS=OFF >"$BUILD/configure.log" 2>&1; then
    BIN="$BUILD/bench"
    BUILD_DIR="$BUILD"
else
    log "top-level configure failed (see $BUILD/configure.log); building bench/ alone"
    BUILD_DIR="$BUILD/standalone"
    cmake -S "$ROOT/bench" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
    BIN="$BUILD_DIR"
fi

# build_target NAME: builds one bench program; fails the run if it does not build.
build_target() {
    cmake --build "$BUILD_DIR" --target "$1" -j "$JOBS" >"$BUILD_DIR/build-$1.log" 2>&1 || {
        log "building $1 failed:"
        tail -20 "$BUILD_DIR/build-$1.log" >&2
        exit 1
    }
}

# --- plotting ------------------------------------------------------------------------------------
ensure_gnuplot() {
    command -v gnuplot >/dev/null 2>&1 && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        log "installing gnuplot-nox"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq gnuplot-nox >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq gnuplot-nox >/dev/null; }
    fi
    command -v gnuplot >/dev/null 2>&1 || {
        log "gnuplot is missing and could not be installed (apt-get install gnuplot-nox as root);"
        log "rerun with --no-plots to skip the plots"
        exit 1
    }
}

# csv_series CSV XCOL YCOL LOWCOL HIGHCOL FILTER > DAT
# Prints "x y low high" for the rows of CSV whose columns match FILTER ("col=value,col=value").
# Columns are found by header name, so a CSV may gain columns without breaking its plots.
csv_series() {
    awk -F, -v xc="$2" -v yc="$3" -v lc="$4" -v hc="$5" -v filter="$6" '
        NR == 1 {
            for (i = 1; i <= NF; i++) col[$i] = i
            nf = split(filter, f, ",")
            for (i = 1; i <= nf; i++) {
                split(f[i], kv, "=")
                if (!(kv[1] in col)) { print "no column " kv[1] > "/dev/stderr"; exit 1 }
                fk[i] = col[kv[1]]; fv[i] = kv[2]
            }
            split(xc " " yc " " lc " " hc, want, " ")
            for (i = 1; i <= 4; i++)
                if (!(want[i] in col)) { print "no column " want[i] > "/dev/stderr"; exit 1 }
            next
        }
        {
            for (i = 1; i <= nf; i++) if ($fk[i] != fv[i]) next
            print $col[xc], $col[yc], $col[lc], $col[hc]
        }' "$1"
}

# plot_sizes PNG TITLE YLABEL YCOL LOWCOL HIGHCOL "LABEL|CSV|FILTER" ...
# One line per series against buffer size (log2 x axis, log10 y axis), with min..max error bars
# when LOWCOL/HIGHCOL differ from YCOL, and a mark at the relay's default block size (16 KiB).
plot_sizes() {
    local png=$1 title=$2 ylabel=$3 ycol=$4 lcol=$5 hcol=$6
    shift 6
    local tmp plots="" i=0 style
    tmp=$(mktemp -d)
    if [ "$lcol" = "$ycol" ]; then style="linespoints"; else style="yerrorlines"; fi
    for spec in "$@"; do
        IFS='|' read -r label csv filter <<<"$spec"
        i=$((i + 1))
        csv_series "$csv" size "$ycol" "$lcol" "$hcol" "$filter" >"$tmp/$i.dat"
        [ -s "$tmp/$i.dat" ] || continue
        plots+="${plots:+, }'$tmp/$i.dat' using 1:2:3:4 with $style lw 2 pt 7 ps 0.6"
        plots+=" title '$label'"
    done
    if [ -z "$plots" ]; then
        log "no data for $png"
        rm -rf "$tmp"
        return 0
    fi
    local xrange
    xrange=$(cat "$tmp"/*.dat | awk 'NR == 1 || $1 < lo { lo = $1 } NR == 1 || $1 > hi { hi = $1 }
        END { printf "[%g:%g]", lo / 1.4, hi * 1.4 }')
    gnuplot <<EOF
set terminal pngcairo size 1100,650 font "sans,11"
set output '$png'
set title "$title"
set xlabel 'buffer size per call'
set ylabel '$ylabel'
set logscale x 2
set logscale y 10
set xrange $xrange
set format y '%.0s%c'
set xtics ('1 B' 1, '4 B' 4, '16 B' 16, '64 B' 64, '256 B' 256, '1 KiB' 1024, '4 KiB' 4096, \
    '16 KiB' 16384, '64 KiB' 65536, '256 KiB' 262144, '1 MiB' 1048576, '4 MiB' 4194304, \
    '16 MiB' 16777216, '64 MiB' 67108864, '256 MiB' 268435456)
set mxtics 2
set grid xtics ytics mytics lc rgb '#dddddd'
set key outside right top
set arrow from 16384, graph 0 to 16384, graph 1 nohead dt 2 lc rgb '#888888'
set label 'relay default' at 16384, graph 0.03 offset 0.5,0 tc rgb '#666666'
plot $plots
EOF
    rm -rf "$tmp"
}

# --- a quiet machine ---------------------------------------------------------------------------
# user_ticks: user + nice ticks of the whole machine so far (/proc/stat).
user_ticks() { awk '/^cpu / { print $2 + $3; exit }' /proc/stat; }

# wait_quiet: waits (up to $WAIT_QUIET s) until other processes use under 0.2 CPU of user time over
# 2 s. This script itself is idle meanwhile, so all user time seen is somebody else's.
wait_quiet() {
    [ "$WAIT_QUIET" -gt 0 ] 2>/dev/null || return 0
    local hz waited=0 a b busy
    hz=$(getconf CLK_TCK)
    while :; do
        a=$(user_ticks)
        sleep 2
        b=$(user_ticks)
        busy=$(awk -v d=$((b - a)) -v hz="$hz" 'BEGIN { printf "%.2f", d / hz / 2 }')
        if awk -v b="$busy" 'BEGIN { exit !(b < 0.2) }'; then
            [ "$waited" = 0 ] || log "machine quiet after ${waited} s (others: $busy CPU)"
            return 0
        fi
        waited=$((waited + 2))
        if [ "$waited" -ge "$WAIT_QUIET" ]; then
            log "machine still busy after ${waited} s (others: $busy CPU); running anyway"
            echo "busy at start of step: others used $busy CPU of user time" >>"$OUT/run-info.txt"
            return 0
        fi
        [ $((waited % 30)) != 0 ] || log "waiting for a quiet machine (others: $busy CPU)"
    done
}

# --- steps ---------------------------------------------------------------------------------------
# Arguments every step passes to its program: quick mode, or the full run's repeat and duration.
run_args() {
    if [ "$QUICK" = 1 ]; then echo "--quick"; else echo "--repeat $REPEAT --duration $DURATION"; fi
}

# Relay, crypto bound, replay cache, fast path, batching, socket buffers, handshakes, DC pool (bench/relay.sh)
# and memory per connection (bench/memory.sh): each script builds what it needs in BUILD.
step_relay() {
    [ "$PLOT_ONLY" = 1 ] && return 0
    local q=""
    [ "$QUICK" = 1 ] && q="--quick"
    local t
    for t in mtproxy bench_load bench_crypto bench_replay; do build_target "$t"; done
    # shellcheck disable=SC2086
    "$ROOT/bench/relay.sh" $q --build-dir "$BUILD" --out "$OUT"
}

step_memory() {
    [ "$PLOT_ONLY" = 1 ] && return 0
    local q=""
    [ "$QUICK" = 1 ] && q="--quick"
    local t
    for t in mtproxy bench_load; do build_target "$t"; done
    # shellcheck disable=SC2086
    "$ROOT/bench/memory.sh" $q --build-dir "$BUILD" --out "$OUT"
}

# Proxy CPU split into its own work and its loopback peers' (bench/softirq.sh): steered (root,
# 2+ CPUs) and, when perf is installed, sampled. Quick: steered only, skipped where it cannot be.
step_softirq() {
    [ "$PLOT_ONLY" = 1 ] && return 0
    local t rc=0
    for t in mtproxy bench_load; do build_target "$t"; done
    if [ "$QUICK" = 1 ]; then
        "$ROOT/bench/softirq.sh" --quick --build-dir "$BUILD" --out "$OUT" || rc=$?
        [ "$rc" = 77 ] && echo "run.sh: softirq skipped (needs root, 2 CPUs, unshare)" >&2 && rc=0
        return "$rc"
    fi
    if [ "$(id -u)" = 0 ]; then
        "$ROOT/bench/softirq.sh" --steer --build-dir "$BUILD" --out "$OUT"
    else
        echo "run.sh: softirq --steer skipped (needs root)" >&2
    fi
    if command -v perf >/dev/null; then
        "$ROOT/bench/softirq.sh" --build-dir "$BUILD" --out "$OUT"
    else
        echo "run.sh: softirq (perf) skipped: perf missing (Debian: linux-perf)" >&2
    fi
}

step_syscalls() {
    local csv="$OUT/syscalls.csv"
    if [ "$PLOT_ONLY" = 0 ]; then
        build_target bench_syscalls
        # shellcheck disable=SC2046
        "$BIN/bench_syscalls" $(run_args) --csv "$csv" >"$OUT/syscalls.md"
    fi
    [ "$PLOTS" = 1 ] || return 0
    local r="direction=read" w="direction=write"
    local note="median of runs, bars: min..max"
    plot_sizes "$OUT/syscalls_read_mibs.png" "read(2): MiB/s by buffer size ($note)" "MiB/s" \
        mib_per_s mib_per_s_min mib_per_s_max \
        "unix socket|$csv|transport=unix,$r" "TCP 127.0.0.1|$csv|transport=tcp,$r" \
        "/dev/zero|$csv|transport=zero,$r" "/dev/urandom|$csv|transport=urandom,$r"
    plot_sizes "$OUT/syscalls_write_mibs.png" \
        "write(2): MiB/s by buffer size ($note; /dev/null left out, it copies nothing)" "MiB/s" \
        mib_per_s mib_per_s_min mib_per_s_max \
        "unix socket|$csv|transport=unix,$w" "TCP 127.0.0.1|$csv|transport=tcp,$w"
    plot_sizes "$OUT/syscalls_read_calls.png" "read(2): calls per second by buffer size" \
        "calls/s" calls_per_s calls_per_s calls_per_s \
        "unix socket|$csv|transport=unix,$r" "TCP 127.0.0.1|$csv|transport=tcp,$r" \
        "/dev/zero|$csv|transport=zero,$r" "/dev/urandom|$csv|transport=urandom,$r"
    plot_sizes "$OUT/syscalls_write_calls.png" "write(2): calls per second by buffer size" \
        "calls/s" calls_per_s calls_per_s calls_per_s \
        "unix socket|$csv|transport=unix,$w" "TCP 127.0.0.1|$csv|transport=tcp,$w" \
        "/dev/null|$csv|transport=null,$w"
}

# TCP four ways, interleaved within one process so that they share the machine's moods: blocking
# or non-blocking (as the proxy does it: O_NONBLOCK, poll(2) on EAGAIN), pinned to two CPUs or not.
step_syscalls_tcp() {
    local csv="$OUT/syscalls_tcp.csv"
    if [ "$PLOT_ONLY" = 0 ]; then
        build_target bench_syscalls
        # shellcheck disable=SC2046
        "$BIN/bench_syscalls" $(run_args) --transports tcp --modes block,nonblock \
            --pinning no,yes --min-size 256 --csv "$csv" >"$OUT/syscalls_tcp.md"
    fi
    [ "$PLOTS" = 1 ] || return 0
    local d
    for d in read write; do
        plot_sizes "$OUT/syscalls_tcp_${d}_mibs.png" \
            "TCP 127.0.0.1 $d(2): blocking or not, pinned or not (median of runs)" \
            "MiB/s" mib_per_s mib_per_s mib_per_s \
            "blocking|$csv|direction=$d,mode=block,pinned=0" \
            "blocking, pinned|$csv|direction=$d,mode=block,pinned=1" \
            "non-blocking|$csv|direction=$d,mode=nonblock,pinned=0" \
            "non-blocking, pinned|$csv|direction=$d,mode=nonblock,pinned=1"
    done
}

# --- main ----------------------------------------------------------------------------------------
[ "$PLOTS" = 0 ] || ensure_gnuplot
[ "$PLOT_ONLY" = 1 ] || {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "kernel: $(uname -sr)"
    echo "cpus: $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "compiler: $(cc --version 2>/dev/null | head -1)"
    if [ "$QUICK" = 1 ]; then echo "mode: quick"; else echo "mode: full, $(run_args)"; fi
    echo "steps: ${STEPS[*]}"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/run-info.txt"

START=$SECONDS
for s in "${STEPS[@]}"; do
    wait_quiet
    log "step $s"
    t0=$SECONDS
    "step_$s"
    log "step $s done in $((SECONDS - t0)) s"
done
if [ "$PLOT_ONLY" = 0 ]; then
    echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/run-info.txt"
    echo "wall time: $((SECONDS - START)) s" >>"$OUT/run-info.txt"
fi
log "all done in $((SECONDS - START)) s; results in $OUT"
