#!/bin/sh
# run.sh: cross-builds mtproxy for armhf, mipsel, arm64 and s390x with Debian's toolchains and runs its tests under qemu-user.
#
# Usage: packaging/cross/run.sh ARCH...        (ARCH: armhf, mipsel, arm64, s390x)
# Per ARCH: installs what is missing (as root, apt-get: the cross gcc, qemu-user-static), unpacks
# Debian's ARCH packages of libev, OpenSSL, zlib and cmocka into build-ARCH/sysroot (dpkg -x: no
# multiarch co-installation, so the host's libssl-dev version need not match the target's),
# builds into build-ARCH, runs ctest there (CMAKE_CROSSCOMPILING_EMULATOR runs each test binary
# through qemu; the Python integration harness prefixes MTPROXY_EMULATOR) and prints a summary:
#   cross ARCH: mtproxy N bytes stripped, needs LIBS; tests: P passed, F failed, S skipped (T s)
# Env: MTPROXY_CROSS_EXCLUDE  ctest -E regex of tests left out under qemu (default below;
#                             empty = run everything)
#      MTPROXY_CROSS_PARALLEL N  build and test N architectures at once (default 1), each with
#                             JOBS/N jobs and its output in build-ARCH.run.log; the installs
#                             (apt, sysroots) still run one after the other first
#      MTPROXY_SLOW           factor for the integration harness's time bounds (default 2: qemu;
#                             3 with MTPROXY_CROSS_PARALLEL above 1)
#      MTPROXY_CROSS_BUILD    build directory prefix (default SRC/build-)
#      JOBS                   parallel build jobs (default: nproc)
set -u
export DEBIAN_FRONTEND=noninteractive

src=$(cd "$(dirname "$0")/../.." && pwd)
# Under qemu everything is several times slower: leave out the suites that measure load or
# run for minutes by design (load: 200 connections and 10 MB transfers, ~90 s per arch; soak;
# faults), and those whose subject is the same on every CPU and that run long under
# emulation (metrics: the HTTP server, page and Prometheus; stealth: a site's TLS profile and
# record timing; users: limits and reload with 10,000 users; perf: read widths and busy-poll;
# hardening: floods measured in time and memory; telethon: the real Python client, which runs
# on the host anyway; fastpath: splice and the copy loop, whose work is the host kernel's under
# qemu-user (~110 s per arch); page: the status page with 10,000 users in Chromium, as metrics
# and users; api and user_cli: HTTP, JSON and file writes, the same on every CPU (unit_json
# runs); limits_store: two instances, HAProxy and Redis for a minute, its wire format is text
# (RESP) and its arithmetic has unit tests; fleet (the replay store) does run; their units'
# tests do run: unit_users, unit_stat, unit_shared64, unit_tlsprofile, unit_http, unit_userpage),
# to keep four arches, two at a time, within ~15 minutes; every other unit, packaging and
# integration suite runs (middle mode too: its wire format meets byte order).
# MTPROXY_CROSS_EXCLUDE= runs everything.
exclude=${MTPROXY_CROSS_EXCLUDE-integration_(load|soak|faults|metrics|stealth|users|perf|hardening|telethon|fastpath|page|api|user_cli|limits_store)}
# Two arches at once on two cores give each about half the CPU: slower again under qemu.
slow_default=2
[ "${MTPROXY_CROSS_PARALLEL:-1}" -le 1 ] || slow_default=3
MTPROXY_SLOW=${MTPROXY_SLOW:-$slow_default}
export MTPROXY_SLOW
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
summary=''
status=0

log() {
    printf '[cross] %s\n' "$*"
}

as_root() {
    if [ "$(id -u)" -ne 0 ]; then
        log "need root to run: $*" >&2
        return 1
    fi
    "$@"
}

apt_install() {
    log "installing: $*"
    # An index that fails to download (mirror sync) must not stop the install of the rest.
    as_root apt-get update -q >/dev/null 2>&1 || log "apt-get update reported errors; going on"
    # shellcheck disable=SC2068 # package names, split on purpose
    as_root apt-get install -y -q --no-install-recommends $@
}

# setup ARCH TRIPLET QEMU: host tools and the target sysroot.
setup() {
    arch=$1 triplet=$2 qemu=$3 sysroot=$4
    need=''
    command -v "$triplet-gcc" >/dev/null 2>&1 || need="$need gcc-$triplet libc6-dev-$arch-cross"
    [ -e "/usr/$triplet/lib" ] || need="$need libc6-dev-$arch-cross"
    command -v "$qemu" >/dev/null 2>&1 || need="$need qemu-user-static"
    command -v cmake >/dev/null 2>&1 || need="$need cmake"
    command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
    if [ -n "$need" ]; then
        apt_install "$need" || return 1
    fi
    set -- libev4 libev-dev libssl3 libssl-dev libcmocka0 libcmocka-dev zlib1g zlib1g-dev \
        libqrencode4 libqrencode-dev
    # A sysroot unpacked earlier is reused if it holds every package named here.
    if [ -f "$sysroot/.complete" ]; then
        missing=''
        for p in "$@"; do grep -q "^${p}_" "$sysroot/.complete" || missing="$missing $p"; done
        [ -z "$missing" ] && return 0
        log "sysroot lacks:$missing: unpacking again"
    fi

    if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
        as_root dpkg --add-architecture "$arch" || return 1
        as_root apt-get update -q >/dev/null 2>&1 || log "apt-get update reported errors; going on"
    fi
    debs=$sysroot.debs
    rm -rf "$sysroot" "$debs"
    mkdir -p "$sysroot" "$debs"
    pkgs=''
    for p in "$@"; do pkgs="$pkgs $p:$arch"; done
    sandbox=''
    [ "$(id -u)" -ne 0 ] || sandbox='-o APT::Sandbox::User=root'
    # shellcheck disable=SC2086 # lists, split on purpose
    if ! (cd "$debs" && apt-get download -q $sandbox $pkgs >/dev/null); then
        as_root apt-get update -q >/dev/null 2>&1
        # shellcheck disable=SC2086
        (cd "$debs" && apt-get download -q $sandbox $pkgs >/dev/null) || {
            log "cannot download:$pkgs"
            return 1
        }
    fi
    for deb in "$debs"/*.deb; do
        dpkg -x "$deb" "$sysroot" || return 1
    done
    ls "$debs" >"$sysroot/.complete"
    rm -rf "$debs"
}

# arch_vars ARCH: sets triplet, qemu, build and sysroot for ARCH.
arch_vars() {
    case "$1" in
    armhf) triplet=arm-linux-gnueabihf qemu=qemu-arm-static ;;
    mipsel) triplet=mipsel-linux-gnu qemu=qemu-mipsel-static ;;
    arm64) triplet=aarch64-linux-gnu qemu=qemu-aarch64-static ;;
    s390x) triplet=s390x-linux-gnu qemu=qemu-s390x-static ;;
    *)
        log "unknown ARCH '$1' (armhf, mipsel, arm64 or s390x)" >&2
        return 2
        ;;
    esac
    build=${MTPROXY_CROSS_BUILD:-$src/build-}$1
    sysroot=$build/sysroot
}

run_arch() {
    arch=$1
    arch_vars "$arch" || return 2
    t0=$(date +%s)
    setup "$arch" "$triplet" "$qemu" "$sysroot" || return 1

    log "$arch: configuring and building in $build"
    cmake -S "$src" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$src/packaging/cross/$arch.cmake" \
        -DMTPROXY_CROSS_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMTPROXY_BENCH=OFF >"$build.configure.log" 2>&1 || {
        cat "$build.configure.log"
        return 1
    }
    cmake --build "$build" -j"$jobs" >"$build.build.log" 2>&1 || {
        tail -n 60 "$build.build.log"
        return 1
    }

    # The integration harness runs mtproxy, fake_dc and test_client through this prefix
    # (MTPROXY_WRAPPER stays free for valgrind and the like).
    MTPROXY_EMULATOR="$qemu -L /usr/$triplet"
    export MTPROXY_EMULATOR
    ex=$exclude
    if ! grep -qs MTPROXY_EMULATOR "$src"/tests/integration/*.py; then
        log "$arch: the integration harness does not honour MTPROXY_EMULATOR yet: skipping it"
        ex="${ex:+$ex|}integration_"
    fi
    log "$arch: ctest under $qemu${ex:+ (excluding: $ex)}"
    ctest --test-dir "$build" --output-on-failure -j"$jobs" ${ex:+-E "$ex"} \
        >"$build.ctest.log" 2>&1
    rc=$?
    grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|FAILED|Failed|\*\*\*' "$build.ctest.log"

    "$triplet-strip" -o "$build/mtproxy.stripped" "$build/mtproxy"
    size=$(wc -c <"$build/mtproxy.stripped" | tr -d ' ')
    needed=$(readelf -d "$build/mtproxy" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' |
        tr '\n' ' ' | sed 's/ $//')
    total=$(grep -cE '^ *[0-9]+/[0-9]+ Test' "$build.ctest.log")
    failed=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*(\*\*\*|Failed)' "$build.ctest.log")
    skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*Skipped' "$build.ctest.log")
    failed=$((failed - skipped))
    passed=$((total - failed - skipped))
    secs=$(($(date +%s) - t0))
    line="cross $arch: mtproxy $size bytes stripped, needs $needed; tests: $passed passed, $failed failed, $skipped skipped ($secs s)"
    summary="$summary$line
"
    log "$line"
    [ "$rc" -eq 0 ]
}

if [ $# -eq 0 ]; then
    echo "usage: $0 ARCH... (armhf, mipsel, arm64, s390x)" >&2
    exit 2
fi
parallel=${MTPROXY_CROSS_PARALLEL:-1}
if [ "$parallel" -le 1 ]; then
    for a in "$@"; do
        run_arch "$a" || status=1
    done
    printf '%s' "$summary"
    exit $status
fi

# Parallel: the installs first, one at a time (apt and dpkg take locks), then N arches at once.
arches=$*
for a in $arches; do
    arch_vars "$a" || exit 2
    setup "$a" "$triplet" "$qemu" "$sysroot" || { log "$a: setup failed"; exit 1; }
done
jobs=$((jobs / parallel))
[ "$jobs" -ge 1 ] || jobs=1
pids=''
running=0
for a in $arches; do
    if [ "$running" -ge "$parallel" ]; then
        # Wait for the oldest one: POSIX sh has no `wait -n`.
        oldest=${pids%% *}
        wait "$oldest" || status=1
        pids=${pids#"$oldest"}
        pids=${pids# }
        running=$((running - 1))
    fi
    arch_vars "$a"
    rm -f "$build.summary"
    log "$a: building and testing in the background (log: $build.run.log)"
    (
        summary=''
        run_arch "$a"
        rc=$?
        printf '%s' "$summary" >"$build.summary"
        exit $rc
    ) >"$build.run.log" 2>&1 &
    pids=${pids:+$pids }$!
    running=$((running + 1))
done
for p in $pids; do
    wait "$p" || status=1
done
for a in $arches; do
    arch_vars "$a"
    printf '\n[cross] ---- %s ----\n' "$a"
    cat "$build.run.log"
done
for a in $arches; do
    arch_vars "$a"
    cat "$build.summary" 2>/dev/null || echo "cross $a: no summary (see $build.run.log)"
done
exit $status
