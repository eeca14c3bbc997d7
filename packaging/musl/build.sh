#!/bin/sh
# build.sh: a static x86_64 musl build of mtproxy (the C library OpenWrt uses), with its unit and integration tests.
#
# Usage: packaging/musl/build.sh [OUTDIR]        (default OUTDIR: SRC/build-musl)
# As root the first time: installs musl-tools and dpkg-dev, and (for a cold cache) adds a deb-src
# entry for Debian's own archive if there is none (/etc/apt/sources.list.d/mtproxy-musl-src.sources).
# Then:
#   1. the static libraries, from the content-keyed cache (below), or else packaging/musl/deps.sh
#      fetches the Debian source packages of libev, OpenSSL, zlib, qrencode and cmocka into
#      OUTDIR/src-HASH (apt-get source: the same versions and patches as Debian's binaries)
#      and builds them with musl-gcc into the cache: libev; OpenSSL's libcrypto only; zlib;
#      libqrencode; cmocka for the unit tests;
#   2. builds mtproxy with musl-gcc, linked -static, into OUTDIR/build;
#   3. runs ctest there (unit, packaging, and the integration suites but the ones that run for
#      minutes by design and those of the Redis stores, not in this build: MTPROXY_MUSL_EXCLUDE,
#      default integration_(load|soak|faults|fleet|limits_store));
#   4. prints: musl x86_64: mtproxy N bytes stripped, static; tests: P passed, F failed (T s)
#      and leaves the stripped binary as OUTDIR/mtproxy-VERSION-x86_64-linux-musl-static.
# Cached across runs: OUTDIR, and the libraries in $MTPROXY_CI_CACHE/musl-deps-HASH (default
# /var/cache/mtproxy-ci, OUTDIR/cache when that cannot be made; delete it to measure a cold build).
# Env: JOBS (default nproc), MTPROXY_MUSL_EXCLUDE (ctest -E regex; empty = everything),
#      MTPROXY_MUSL_NO_TESTS=1 (build everything, run no test),
#      MTPROXY_MUSL_FETCH_ONLY=1 (the installs and, for a cold cache, the sources: what needs the
#      network; the next run builds offline), MTPROXY_CI_CACHE (the cache directory).
set -eu
export DEBIAN_FRONTEND=noninteractive
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/build-musl}
mkdir -p "$out" && out=$(cd "$out" && pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
exclude=${MTPROXY_MUSL_EXCLUDE-integration_(load|soak|faults|fleet|limits_store)}
t0=$(date +%s)

log() {
    printf '[musl] %s (%ss)\n' "$*" "$(($(date +%s) - t0))"
}

need=''
command -v musl-gcc >/dev/null 2>&1 || need="$need musl-tools"
command -v dpkg-source >/dev/null 2>&1 || need="$need dpkg-dev"
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v make >/dev/null 2>&1 || need="$need make"
if [ -n "$need" ]; then
    apt-get update -q >/dev/null 2>&1 || true
    # shellcheck disable=SC2086 # a list
    apt-get install -y -q --no-install-recommends $need
fi

# The libraries (packaging/musl/deps.sh) are cached by content: $MTPROXY_CI_CACHE/musl-deps-HASH,
# HASH of deps.sh's text, the versions of the packages whose sources it builds (their binary
# candidates: built from the same source version) and of the compiler, musl and kernel headers
# it builds with. The same inputs reuse the prefix (here, in other checkouts, and in the fresh
# root of tests/fresh/run.sh, which mounts the same directory); a new version builds it again.
cache=${MTPROXY_CI_CACHE:-/var/cache/mtproxy-ci}
mkdir -p "$cache" 2>/dev/null && [ -w "$cache" ] || cache=$out/cache
mkdir -p "$cache"
vers=$(
    dpkg-query -W -f '${Package}=${Version}\n' musl-tools musl-dev linux-libc-dev gcc 2>/dev/null
    for p in libev-dev libssl-dev zlib1g-dev libcmocka-dev libqrencode-dev; do
        printf '%s=%s\n' "$p" "$(apt-cache show --no-all-versions "$p" 2>/dev/null |
            sed -n 's/^Version: //p' | sed -n 1p)"
    done
)
key=$( (cat "$src/packaging/musl/deps.sh" && printf '%s\n' "$vers") | sha256sum | cut -c1-16)
deps=$cache/musl-deps-$key
prefix=$deps/prefix
if [ ! -f "$deps/.complete" ]; then
    # One build of a given prefix at a time (a host stage and the fresh root may share it).
    exec 9>"$deps.lock"
    flock 9
fi
if [ ! -f "$deps/.complete" ]; then
    log "libraries not cached ($deps): fetching their Debian sources"
    # In a directory of this key: sources fetched for other versions are not these.
    sh "$src/packaging/musl/deps.sh" fetch "$out/src-$key"
    if [ -n "${MTPROXY_MUSL_FETCH_ONLY:-}" ]; then
        log "fetched (MTPROXY_MUSL_FETCH_ONLY): the libraries are built by the next run"
        exit 0
    fi
    rm -rf "$deps"
    sh "$src/packaging/musl/deps.sh" build "$out/src-$key" "$prefix"
    if [ -f "$prefix/lib/libqrencode.a" ]; then
        printf '%s\n' "$vers" >"$deps/.complete"
        rm -rf "$out/src-$key"
    else
        log "built without libqrencode: not kept in the cache (the next run tries again)"
    fi
else
    log "libraries cached: $deps"
fi
exec 9>&-
[ -z "${MTPROXY_MUSL_FETCH_ONLY:-}" ] || exit 0
qr=ON
[ -f "$prefix/lib/libqrencode.a" ] || qr=OFF
cc=musl-gcc
# The kernel headers a test tool includes (linux/sockios.h), after musl's own (-idirafter).
kinc=$out/kernel-headers
mkdir -p "$kinc"
for d in linux asm-generic; do ln -sfn "/usr/include/$d" "$kinc/$d"; done
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$kinc/asm"

log "building mtproxy (static, musl)"
cd "$src"
# -isystem: the libraries' headers are system headers here too (their warnings are not ours);
# -idirafter: the kernel headers a test tool includes (linux/sockios.h), after musl's own.
cmake -S . -B "$out/build" -DCMAKE_C_COMPILER=$cc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS="-isystem $prefix/include -idirafter $kinc" \
    -DCMAKE_EXE_LINKER_FLAGS="-static -Wl,--gc-sections" -DMTPROXY_BENCH=OFF -DMTPROXY_REDIS=OFF \
    -DOPENSSL_ROOT_DIR="$prefix" -DOPENSSL_USE_STATIC_LIBS=ON \
    -DLIBEV_INCLUDE_DIR="$prefix/include" -DLIBEV_LIBRARY="$prefix/lib/libev.a" \
    -DCMOCKA_INCLUDE_DIR="$prefix/include" -DCMOCKA_LIBRARY="$prefix/lib/libcmocka.a" \
    -DZLIB_INCLUDE_DIR="$prefix/include" -DZLIB_LIBRARY="$prefix/lib/libz.a" \
    -DMTPROXY_QRENCODE=$qr -DQRENCODE_INCLUDE_DIR="$prefix/include" \
    -DQRENCODE_LIBRARY="$prefix/lib/libqrencode.a" \
    >"$out/configure.log" 2>&1 || {
    cat "$out/configure.log"
    exit 1
}
cmake --build "$out/build" -j"$jobs" >"$out/build.log" 2>&1 || {
    tail -n 60 "$out/build.log"
    exit 1
}
bin=$out/build/mtproxy
if file "$bin" | grep -q 'dynamically linked'; then
    log "mtproxy is not static: $(file "$bin")"
    exit 1
fi

rc=0
if [ -n "${MTPROXY_MUSL_NO_TESTS:-}" ]; then
    log "built; no tests run (MTPROXY_MUSL_NO_TESTS)"
    : >"$out/ctest.log"
else
    log "ctest${exclude:+ (excluding: $exclude)}"
    [ $qr = ON ] || export MTPROXY_QR_OPTIONAL=1
    ctest --test-dir "$out/build" --output-on-failure -j"$((jobs * 2))" ${exclude:+-E "$exclude"} \
        >"$out/ctest.log" 2>&1 || rc=$?
    grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|\*\*\*' "$out/ctest.log" || true
    [ "$rc" -eq 0 ] || grep -A40 -E '(Failed|\*\*\*Timeout|Exception)' "$out/ctest.log" | head -n 120
fi

version=$(sed -n 's/^project(mtproxy VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
art=$out/mtproxy-$version-x86_64-linux-musl-static
strip -o "$art" "$bin"
size=$(wc -c <"$art" | tr -d ' ')
total=$(grep -cE '^ *[0-9]+/[0-9]+ Test' "$out/ctest.log" || true)
failed=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*(\*\*\*|Failed)' "$out/ctest.log" || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*Skipped' "$out/ctest.log" || true)
failed=$((failed - skipped))
tests="$((total - failed - skipped)) passed, $failed failed, $skipped skipped"
[ -z "${MTPROXY_MUSL_NO_TESTS:-}" ] || tests="not run"
echo "musl x86_64: mtproxy $size bytes stripped, static; tests: $tests ($(($(date +%s) - t0)) s); artefact: $art"
exit "$rc"
