#!/bin/sh
# build.sh: a static x86_64 musl build of mtproxy (the C library OpenWrt uses), with its unit and integration tests.
#
# Usage: packaging/musl/build.sh [OUTDIR]        (default OUTDIR: SRC/build-musl)
# As root the first time: installs musl-tools and dpkg-dev, and adds a deb-src entry for
# Debian's own archive if there is none (/etc/apt/sources.list.d/mtproxy-musl-src.sources).
# Then, in OUTDIR:
#   1. fetches the Debian source packages of libev, OpenSSL, zlib, qrencode and cmocka
#      (apt-get source: the same versions and patches as Debian's binaries) and builds them
#      with musl-gcc as static libraries into OUTDIR/prefix: libev; OpenSSL's libcrypto only
#      (no-shared, no apps, no libssl, no engines or modules); zlib (crc32 of the middle-proxy
#      links); libqrencode (QR codes of the links); cmocka for the unit tests;
#   2. builds mtproxy with musl-gcc, linked -static, into OUTDIR/build;
#   3. runs ctest there (unit, packaging, and the integration suites but the ones that run for
#      minutes by design and those of the Redis stores, not in this build: MTPROXY_MUSL_EXCLUDE,
#      default integration_(load|soak|faults|fleet|limits_store));
#   4. prints: musl x86_64: mtproxy N bytes stripped, static; tests: P passed, F failed (T s)
#      and leaves the stripped binary as OUTDIR/mtproxy-VERSION-x86_64-linux-musl-static.
# Nothing is cached across runs but OUTDIR itself (delete it to measure a cold build).
# Env: JOBS (default nproc), MTPROXY_MUSL_EXCLUDE (ctest -E regex; empty = everything).
set -eu
export DEBIAN_FRONTEND=noninteractive
src=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$src/build-musl}
mkdir -p "$out" && out=$(cd "$out" && pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
exclude=${MTPROXY_MUSL_EXCLUDE-integration_(load|soak|faults|fleet|limits_store)}
prefix=$out/prefix
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

# apt-get source needs deb-src lines: add them for the archive the deb lines already use.
if ! grep -rqsE '^(Types:.*deb-src|deb-src )' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
            >/etc/apt/sources.list.d/mtproxy-musl-src.sources
    else
        sed -n 's/^deb \(.*debian.*\)/deb-src \1/p' /etc/apt/sources.list \
            >/etc/apt/sources.list.d/mtproxy-musl-src.list
    fi
    apt-get update -q >/dev/null 2>&1 || log "apt-get update reported errors; going on"
fi

# fetch PKG: the newest source version of PKG that downloads (a mirror can lack the newest's
# files, as a security mirror mid-sync does), unpacked with its Debian patches in ./PKG-*/.
fetch() {
    for v in $(apt-cache showsrc "$1" | sed -n 's/^Version: //p' | sort -rV); do
        rm -rf "$1".tmp && mkdir "$1".tmp
        if (cd "$1".tmp && apt-get source -q "$1=$v" >/dev/null 2>&1); then
            mv "$1".tmp/"$1"-*/ . && rm -rf "$1".tmp
            log "fetched the Debian source of $1 $v"
            return 0
        fi
        # A mirror may have the upstream tarball but not Debian's patch set: build upstream.
        for t in "$1".tmp/"$1"_*.orig.tar.*; do
            [ -f "$t" ] || continue
            if (cd "$1".tmp && tar xf "${t##*/}") && mv "$1".tmp/"$1"-*/ .; then
                rm -rf "$1".tmp
                log "fetched the upstream source of $1 $v (Debian's patches are not on the mirror)"
                return 0
            fi
        done
    done
    log "cannot fetch the Debian source of $1"
    return 1
}
mkdir -p "$out/src" "$prefix/include" "$prefix/lib"
cd "$out/src"
for pkg in libev openssl zlib cmocka; do
    ls -d "$pkg"-*/ >/dev/null 2>&1 || fetch "$pkg"
done
# QR codes are optional: without libqrencode's source the build goes on without them, and the
# tests that decode QR codes skip (MTPROXY_QR_OPTIONAL).
qr=ON
ls -d qrencode-*/ >/dev/null 2>&1 || fetch qrencode || qr=OFF
cc=musl-gcc
cflags='-O2 -fPIE'

# step NAME COMMAND...: runs COMMAND with its output in OUTDIR/NAME.log, shown if it fails.
step() {
    name=$1
    shift
    if ! "$@" >"$out/$name.log" 2>&1; then
        tail -n 40 "$out/$name.log"
        log "$name failed (log: $out/$name.log)"
        exit 1
    fi
}

# musl-gcc sees only musl's headers; OpenSSL includes a few of the kernel's (linux/mman.h):
# give it those, and only those, from linux-libc-dev.
kinc=$out/kernel-headers
mkdir -p "$kinc"
for d in linux asm-generic; do ln -sfn "/usr/include/$d" "$kinc/$d"; done
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$kinc/asm"
cflags="$cflags -isystem $kinc"

if [ ! -f "$prefix/lib/libev.a" ]; then
    log "building libev (static, musl)"
    cd libev-*/
    step libev-configure env CC=$cc CFLAGS="$cflags" ./configure --prefix="$prefix" \
        --disable-shared --enable-static
    step libev-make make -j"$jobs"
    step libev-install make install
    cd ..
fi

if [ ! -f "$prefix/lib/libcrypto.a" ]; then
    log "building OpenSSL's libcrypto (static, minimal, musl)"
    cd openssl-*/
    # shellcheck disable=SC2086 # cflags: several flags
    # mtproxy needs AES-CTR, SHA-256, HMAC, X25519 and the DRBG: the other algorithms go, so
    # the default provider (linked in whole: its tables name every algorithm) stays small.
    step openssl-configure env CC=$cc ./Configure linux-x86_64 no-shared no-module no-dso \
        no-engine no-afalgeng no-async no-comp no-ct no-ocsp no-srp no-ts no-cms no-ui-console \
        no-tests no-padlockeng no-capieng no-loadereng no-legacy no-des no-rc2 no-rc4 no-rc5 \
        no-idea no-seed no-camellia no-aria no-sm2 no-sm3 no-sm4 no-bf no-cast no-md4 no-mdc2 \
        no-rmd160 no-whirlpool no-siphash no-scrypt no-dsa no-ocb no-cmac no-gost no-srtp \
        no-ssl-trace no-psk $cflags -ffunction-sections -fdata-sections --prefix="$prefix" \
        --libdir=lib
    step openssl-generated make -j"$jobs" build_generated
    step openssl-libcrypto make -j"$jobs" libcrypto.a
    cp libcrypto.a "$prefix/lib/" && cp -r include/openssl "$prefix/include/"
    cd ..
fi

if [ ! -f "$prefix/lib/libz.a" ]; then
    log "building zlib (static, musl)"
    cd zlib-*/
    step zlib-configure env CC=$cc CFLAGS="$cflags" ./configure --static --prefix="$prefix"
    step zlib-make make -j"$jobs" libz.a
    step zlib-install make install
    cd ..
fi

if [ $qr = ON ] && [ ! -f "$prefix/lib/libqrencode.a" ]; then
    log "building libqrencode (static, musl)"
    step qrencode-configure cmake -S "$(ls -d qrencode-*/)" -B qrencode-build \
        -DCMAKE_C_COMPILER=$cc -DCMAKE_C_FLAGS="$cflags" -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF -DWITH_TOOLS=OFF -DWITH_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=Release
    step qrencode-build cmake --build qrencode-build -j"$jobs"
    step qrencode-install cmake --install qrencode-build
fi

if [ ! -f "$prefix/lib/libcmocka.a" ]; then
    log "building cmocka (static, musl)"
    step cmocka-configure cmake -S "$(ls -d cmocka-*/)" -B cmocka-build -DCMAKE_C_COMPILER=$cc \
        -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
        -DWITH_STATIC_LIB=ON -DUNIT_TESTING=OFF -DWITH_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release
    step cmocka-build cmake --build cmocka-build -j"$jobs"
    step cmocka-install cmake --install cmocka-build
    [ -f "$prefix/lib/libcmocka.a" ] || cp cmocka-build/src/libcmocka*.a "$prefix/lib/libcmocka.a"
fi

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

log "ctest${exclude:+ (excluding: $exclude)}"
rc=0
[ $qr = ON ] || export MTPROXY_QR_OPTIONAL=1
ctest --test-dir "$out/build" --output-on-failure -j"$jobs" ${exclude:+-E "$exclude"} \
    >"$out/ctest.log" 2>&1 || rc=$?
grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|\*\*\*' "$out/ctest.log" || true
[ "$rc" -eq 0 ] || grep -A40 -E '(Failed|\*\*\*Timeout|Exception)' "$out/ctest.log" | head -n 120

version=$(sed -n 's/^project(mtproxy VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
art=$out/mtproxy-$version-x86_64-linux-musl-static
strip -o "$art" "$bin"
size=$(wc -c <"$art" | tr -d ' ')
total=$(grep -cE '^ *[0-9]+/[0-9]+ Test' "$out/ctest.log" || true)
failed=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*(\*\*\*|Failed)' "$out/ctest.log" || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test .*Skipped' "$out/ctest.log" || true)
failed=$((failed - skipped))
echo "musl x86_64: mtproxy $size bytes stripped, static; tests: $((total - failed - skipped)) passed, $failed failed, $skipped skipped ($(($(date +%s) - t0)) s); artefact: $art"
exit "$rc"
