#!/bin/sh
# run.sh: cross-builds mtproxy for armhf, mipsel, arm64 and s390x with Debian's toolchains and runs its tests under qemu-user.
#
# Usage: packaging/cross/run.sh ARCH...        (ARCH: armhf, mipsel, arm64, s390x)
# Per ARCH: installs what is missing (as root, apt-get: the cross gcc, qemu-user-static), unpacks
# Debian's ARCH packages of libev, OpenSSL, zlib, cmocka and libqrencode into a sysroot (dpkg -x:
# no multiarch co-installation, so the host's libssl-dev version need not match the target's),
# builds into build-ARCH, runs ctest there (CMAKE_CROSSCOMPILING_EMULATOR runs each test binary
# through qemu; the Python integration harness prefixes MTPROXY_EMULATOR) and prints a summary:
#   cross ARCH: mtproxy N bytes stripped, needs LIBS; tests: P passed, F failed, S skipped (T s)
# The sysroot is cached by content: $MTPROXY_CI_CACHE/cross-sysroot-ARCH-HASH (default
# /var/cache/mtproxy-ci; build-ARCH.cache when that cannot be made), HASH of the packages' exact
# versions for ARCH and of this script's way of unpacking them: a new version of any of them
# (a security update) makes a new one; the same versions reuse it, here and in the fresh root of
# tests/fresh/run.sh (which mounts the same directory).
# Env: MTPROXY_CROSS_TESTS    ctest -R regex of the tests run under qemu (default below)
#      MTPROXY_CROSS_EXCLUDE  when set: ctest -E regex instead of that selection (empty = run
#                             everything)
#      MTPROXY_CROSS_FIRST_OBJECT=1  install, sysroot, configure and compile one library
#                             (mtproxy_crypto): the toolchain works; no link, no tests
#      MTPROXY_CROSS_SETUP_ONLY=1    only the installs and the sysroot (what needs the network)
#      MTPROXY_CROSS_PARALLEL N  build and test N architectures at once (default 1), each with
#                             JOBS/N jobs and its output in build-ARCH.run.log; the installs
#                             (apt, sysroots) still run one after the other first
#      MTPROXY_SLOW           factor for the integration harness's time bounds (default 2: qemu;
#                             3 with MTPROXY_CROSS_PARALLEL above 1)
#      MTPROXY_CROSS_CTEST_JOBS  ctest -j per architecture (default: twice nproc, whatever
#                             MTPROXY_CROSS_PARALLEL is: under qemu the suites mostly wait on
#                             their peers and timers, measured 85-90 % idle at one test at a time)
#      MTPROXY_CROSS_BUILD    build directory prefix (default SRC/build-)
#      MTPROXY_CI_CACHE       the content-keyed cache (default /var/cache/mtproxy-ci)
#      JOBS                   parallel build jobs (default: nproc)
set -u
export DEBIAN_FRONTEND=noninteractive

src=$(cd "$(dirname "$0")/../.." && pwd)
# Under qemu every test runs several times slower, and most of the suite's subject is the same on
# every CPU (HTTP, JSON, the status page, limits, reload, timing). What differs by architecture
# is byte order, word size, atomics and alignment: so by default all the unit tests run (every
# parser, codec, counter and the shared64 atomics, on their own), and the integration suites
# that carry bytes through the relay and the handshakes with the real binaries: tags (the
# relay and per-user counters), routing (DC ids, little-endian on the wire), faketls (TLS
# records, lengths big-endian), middle (the middle-proxy RPC frames: little-endian fields,
# crc32, padding), proxyproto (PROXY v2 headers, addresses in network order), socks5 (the
# SOCKS5 upstream: ports and addresses in network order), ipv6 (128-bit addresses), acl
# (address masks), fleet (the shared replay store's keys and the 64-bit stamps), bad_clients
# (malformed handshakes at every length: alignment), tools (fake_dc, test_client and the CLI
# on the target). Not run there: load, soak, faults, perf, fastpath and the other timing suites
# (their subject is time, and qemu's time is not the CPU's), metrics, page, users, api,
# user_cli, stealth, telethon, limits_store and the rest (the same on every CPU; their units'
# tests run: unit_users, unit_stat, unit_shared64, unit_tlsprofile, unit_http, unit_json,
# unit_userpage), and the packaging checks (host tools). Integration suites run side by side
# (each in its own network namespace; only the timing ones are RUN_SERIAL).
# MTPROXY_CROSS_TESTS=REGEX picks others; MTPROXY_CROSS_EXCLUDE=REGEX runs all but REGEX, and
# MTPROXY_CROSS_EXCLUDE= (empty) runs everything.
# And packaging_no_libatomic: the target's binary calls no __atomic_*_8 (32-bit MIPS).
tests_re=${MTPROXY_CROSS_TESTS:-'^unit_|^integration_(tags|routing|faketls|middle|proxyproto|socks5|ipv6|acl|fleet|bad_clients|tools)$|^packaging_no_libatomic$'}
if [ "${MTPROXY_CROSS_EXCLUDE+set}" = set ]; then
    exclude=$MTPROXY_CROSS_EXCLUDE
    tests_re=''
else
    exclude=''
fi
# Two arches at once on two cores give each about half the CPU: slower again under qemu.
slow_default=2
[ "${MTPROXY_CROSS_PARALLEL:-1}" -le 1 ] || slow_default=3
MTPROXY_SLOW=${MTPROXY_SLOW:-$slow_default}
export MTPROXY_SLOW
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
ctest_jobs=${MTPROXY_CROSS_CTEST_JOBS:-$((jobs * 2))}
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

# setup ARCH TRIPLET QEMU: host tools and the target sysroot (sets sysroot).
setup() {
    arch=$1 triplet=$2 qemu=$3
    need=''
    # $toolchain (arch_vars): the cross gcc and libc packages, installed here when missing
    command -v "$triplet-gcc" >/dev/null 2>&1 || need="$need $toolchain"
    [ -e "/usr/$triplet/lib" ] || need="$need ${toolchain#* }"
    command -v "$qemu" >/dev/null 2>&1 || need="$need qemu-user-static"
    command -v cmake >/dev/null 2>&1 || need="$need cmake"
    command -v pkg-config >/dev/null 2>&1 || need="$need pkg-config"
    if [ -n "$need" ]; then
        apt_install "$need" || return 1
    fi
    if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
        as_root dpkg --add-architecture "$arch" || return 1
        as_root apt-get update -q >/dev/null 2>&1 || log "apt-get update reported errors; going on"
    fi
    set -- libev4 libev-dev libssl3 libssl-dev libcmocka0 libcmocka-dev zlib1g zlib1g-dev \
        libqrencode4 libqrencode-dev
    # The sysroot's key: each package's candidate version for ARCH (what apt-get download
    # fetches) and the unpacking below (its version: bump "unpack 1" when it changes).
    vers=''
    for p in "$@"; do
        v=$(apt-cache show --no-all-versions "$p:$arch" 2>/dev/null | sed -n 's/^Version: //p' | sed -n 1p)
        [ -n "$v" ] || {
            log "$arch: no candidate for $p:$arch (apt-get update?)"
            return 1
        }
        vers="$vers $p=$v"
    done
    key=$(printf 'unpack 1 %s%s\n' "$arch" "$vers" | sha256sum | cut -c1-16)
    sysroot=$cache/cross-sysroot-$arch-$key
    [ -f "$sysroot/.complete" ] && return 0
    log "$arch: unpacking a sysroot into $sysroot:$vers"

    tmp=$sysroot.tmp.$$
    debs=$tmp.debs
    rm -rf "$tmp" "$debs"
    mkdir -p "$tmp" "$debs"
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
            rm -rf "$tmp" "$debs"
            return 1
        }
    fi
    for deb in "$debs"/*.deb; do
        dpkg -x "$deb" "$tmp" || return 1
    done
    ls "$debs" >"$tmp/.complete"
    rm -rf "$debs"
    # Made aside and renamed: a run that stops half-way leaves no sysroot that looks complete,
    # and two runs making the same one at once both end with it.
    mv -T "$tmp" "$sysroot" 2>/dev/null || rm -rf "$tmp"
    [ -f "$sysroot/.complete" ]
}

# arch_vars ARCH: sets triplet, qemu, toolchain (Debian's cross gcc, then its libc: what setup
# installs when missing), build and cache for ARCH (setup sets sysroot).
arch_vars() {
    case "$1" in
    armhf)
        triplet=arm-linux-gnueabihf qemu=qemu-arm-static
        toolchain="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"
        ;;
    mipsel)
        triplet=mipsel-linux-gnu qemu=qemu-mipsel-static
        toolchain="gcc-mipsel-linux-gnu libc6-dev-mipsel-cross"
        ;;
    arm64)
        triplet=aarch64-linux-gnu qemu=qemu-aarch64-static
        toolchain="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
        ;;
    s390x)
        triplet=s390x-linux-gnu qemu=qemu-s390x-static
        toolchain="gcc-s390x-linux-gnu libc6-dev-s390x-cross"
        ;;
    *)
        log "unknown ARCH '$1' (armhf, mipsel, arm64 or s390x)" >&2
        return 2
        ;;
    esac
    build=${MTPROXY_CROSS_BUILD:-$src/build-}$1
    cache=${MTPROXY_CI_CACHE:-/var/cache/mtproxy-ci}
    mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] || cache=$build.cache
    mkdir -p "$cache"
}

run_arch() {
    arch=$1
    arch_vars "$arch" || return 2
    t0=$(date +%s)
    setup "$arch" "$triplet" "$qemu" || return 1
    if [ -n "${MTPROXY_CROSS_SETUP_ONLY:-}" ]; then
        log "$arch: installed; sysroot $sysroot ($(($(date +%s) - t0)) s)"
        summary="${summary}cross $arch: set up ($(($(date +%s) - t0)) s)
"
        return 0
    fi

    log "$arch: configuring and building in $build"
    cmake -S "$src" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$src/packaging/cross/$arch.cmake" \
        -DMTPROXY_CROSS_SYSROOT="$sysroot" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DMTPROXY_BENCH=OFF >"$build.configure.log" 2>&1 || {
        cat "$build.configure.log"
        return 1
    }
    if [ -n "${MTPROXY_CROSS_FIRST_OBJECT:-}" ]; then
        cmake --build "$build" -j"$jobs" --target mtproxy_crypto >"$build.build.log" 2>&1 || {
            tail -n 60 "$build.build.log"
            return 1
        }
        n=$(find "$build" -name '*.o' -newer "$build.configure.log" | wc -l)
        line="cross $arch: configured, first objects compiled ($n, mtproxy_crypto) ($(($(date +%s) - t0)) s)"
        summary="$summary$line
"
        log "$line"
        [ "$n" -gt 0 ]
        return
    fi
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
    log "$arch: ctest under $qemu${tests_re:+ (selected: $tests_re)}${ex:+ (excluding: $ex)}"
    ctest --test-dir "$build" --output-on-failure --no-tests=error -j"$ctest_jobs" \
        ${tests_re:+-R "$tests_re"} ${ex:+-E "$ex"} >"$build.ctest.log" 2>&1
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
    setup "$a" "$triplet" "$qemu" || { log "$a: setup failed"; exit 1; }
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
