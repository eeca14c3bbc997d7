#!/bin/sh
# deps.sh: fetches (Debian sources) and builds with musl-gcc the static libraries packaging/musl/build.sh links.
#
# Usage: packaging/musl/deps.sh fetch SRCDIR           (apt-get source: needs the network)
#        packaging/musl/deps.sh build SRCDIR PREFIX    (no network: builds into PREFIX)
# fetch: the Debian source packages of libev, OpenSSL, zlib, qrencode and cmocka (apt-get source:
# the same versions and patches as Debian's binaries), unpacked in SRCDIR; adds a deb-src entry
# for Debian's own archive if there is none (/etc/apt/sources.list.d/mtproxy-musl-src.sources).
# build: static libraries with musl-gcc into PREFIX: libev; OpenSSL's libcrypto only (no-shared,
# no apps, no libssl, no engines or modules); zlib (crc32 of the middle-proxy links); libqrencode
# (QR codes of the links: optional, left out when its source cannot be fetched); cmocka for the
# unit tests. Logs in SRCDIR/NAME.log.
# build.sh keys its cache of PREFIX by this file's text (and the packages' versions): a change
# here builds them again.
set -eu
export DEBIAN_FRONTEND=noninteractive
mode=${1:?usage: deps.sh fetch SRCDIR | build SRCDIR PREFIX}
srcdir=${2:?usage: deps.sh fetch SRCDIR | build SRCDIR PREFIX}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
t0=$(date +%s)
log() {
    printf '[musl] %s (%ss)\n' "$*" "$(($(date +%s) - t0))"
}
mkdir -p "$srcdir"
srcdir=$(cd "$srcdir" && pwd)
cd "$srcdir"

if [ "$mode" = fetch ]; then
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
    for pkg in libev openssl zlib cmocka; do
        ls -d "$pkg"-*/ >/dev/null 2>&1 || fetch "$pkg"
    done
    # QR codes are optional: without libqrencode's source the build goes on without them, and
    # the tests that decode QR codes skip (MTPROXY_QR_OPTIONAL).
    ls -d qrencode-*/ >/dev/null 2>&1 || fetch qrencode || true
    exit 0
fi

[ "$mode" = build ] || { echo "usage: deps.sh fetch SRCDIR | build SRCDIR PREFIX" >&2; exit 2; }
prefix=${3:?usage: deps.sh build SRCDIR PREFIX}
mkdir -p "$prefix/include" "$prefix/lib"
for pkg in libev openssl zlib cmocka; do
    ls -d "$pkg"-*/ >/dev/null 2>&1 || { log "no source of $pkg in $srcdir (deps.sh fetch)"; exit 1; }
done
cc=musl-gcc
cflags='-O2 -fPIE'

# step NAME COMMAND...: runs COMMAND with its output in SRCDIR/NAME.log, shown if it fails.
step() {
    name=$1
    shift
    if ! "$@" >"$srcdir/$name.log" 2>&1; then
        tail -n 40 "$srcdir/$name.log"
        log "$name failed (log: $srcdir/$name.log)"
        exit 1
    fi
}

# musl-gcc sees only musl's headers; OpenSSL includes a few of the kernel's (linux/mman.h):
# give it those, and only those, from linux-libc-dev.
kinc=$srcdir/kernel-headers
mkdir -p "$kinc"
for d in linux asm-generic; do ln -sfn "/usr/include/$d" "$kinc/$d"; done
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$kinc/asm"
cflags="$cflags -isystem $kinc"

log "building libev (static, musl)"
cd libev-*/
step libev-configure env CC=$cc CFLAGS="$cflags" ./configure --prefix="$prefix" \
    --disable-shared --enable-static
step libev-make make -j"$jobs"
step libev-install make install
cd ..

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

log "building zlib (static, musl)"
cd zlib-*/
step zlib-configure env CC=$cc CFLAGS="$cflags" ./configure --static --prefix="$prefix"
step zlib-make make -j"$jobs" libz.a
step zlib-install make install
cd ..

if ls -d qrencode-*/ >/dev/null 2>&1; then
    log "building libqrencode (static, musl)"
    rm -rf qrencode-build
    step qrencode-configure cmake -S "$(ls -d qrencode-*/)" -B qrencode-build \
        -DCMAKE_C_COMPILER=$cc -DCMAKE_C_FLAGS="$cflags" -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF -DWITH_TOOLS=OFF -DWITH_TESTS=OFF \
        -DCMAKE_BUILD_TYPE=Release
    step qrencode-build cmake --build qrencode-build -j"$jobs"
    step qrencode-install cmake --install qrencode-build
else
    log "no source of qrencode: built without libqrencode"
fi

log "building cmocka (static, musl)"
rm -rf cmocka-build
step cmocka-configure cmake -S "$(ls -d cmocka-*/)" -B cmocka-build -DCMAKE_C_COMPILER=$cc \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
    -DWITH_STATIC_LIB=ON -DUNIT_TESTING=OFF -DWITH_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release
step cmocka-build cmake --build cmocka-build -j"$jobs"
step cmocka-install cmake --install cmocka-build
[ -f "$prefix/lib/libcmocka.a" ] || cp cmocka-build/src/libcmocka*.a "$prefix/lib/libcmocka.a"
log "built into $prefix"
