#!/bin/sh
# check_packages.sh: the README's run command installs only what building needs; its test command installs everything.
#
# Reads .ci/debian-packages-build (the run command's list) and .ci/debian-packages (the test
# command's). Fails when: the README does not use them so; a build package is missing from the
# full list; or a build package is test-only. A build package must be a build tool (compiler,
# cmake, pkg-config) or a -dev package that ships a header the program itself (src/, include/)
# includes: cmocka, clang, shellcheck, python3, redis, haproxy... are not. And the other way:
# every header the program includes comes from a package of the build list (dpkg -S), the
# Debian Build-Depends and the Dockerfile's build stage install the whole list, and every README
# build line that only has the build list turns the tests and benchmarks off.
# shellcheck disable=SC2016,SC2013 # README text holds $(cat ...) literally; one package a line
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/.ci/debian-packages-build
full=$root/.ci/debian-packages
status=0
fail() {
    echo "check_packages: $*" >&2
    status=1
}

run=$(grep -A12 '^Install what building needs' "$root/README.md" | grep '^apt-get' | head -1)
case "$run" in
*'$(cat .ci/debian-packages-build)'*'./build/mtproxy'*) ;;
*) fail "README.md's run command does not install \$(cat .ci/debian-packages-build): $run" ;;
esac
tst=$(grep -A30 '^Build and run all the tests' "$root/README.md" | grep '^apt-get' | head -1)
case "$tst" in
*'.ci/apt-install-no-daemons .ci/debian-packages '*ctest*) ;;
*) fail "README.md's test command does not install .ci/debian-packages (.ci/apt-install-no-daemons): $tst" ;;
esac

# Headers the program includes (not the tests).
incs=$(cat "$root"/src/*/*.c "$root"/src/*.c "$root"/include/*/*.h |
    sed -n 's/^#include <\([^>]*\)>.*/\1/p' | sort -u)
for p in $(grep -v '^#' "$build"); do
    grep -qx "$p" "$full" || fail "$p is in debian-packages-build but not in debian-packages"
    case "$p" in
    build-essential | gcc | make | libc6-dev | cmake | pkg-config | pkgconf) continue ;;
    *-dev) ;;
    *)
        fail "$p: not a build tool or library headers: test-only? (keep it in debian-packages)"
        continue
        ;;
    esac
    files=$(dpkg -L "$p" 2>/dev/null | sed -n 's|^/usr/include/||p' |
        sed 's|^[a-z0-9_]*-linux-gnu[a-z]*/||')
    if [ -z "$files" ]; then
        fail "$p: not installed or ships no headers (dpkg -L)"
        continue
    fi
    used=$(printf '%s\n' "$files" | grep -Fx "$incs" | head -1)
    [ -n "$used" ] || fail "$p: no header of it is included by src/ or include/: test-only?"
done

# Every header the program includes maps (through the file the compiler finds and dpkg -S) to a
# package of the build list, or to build-essential's libc, kernel or compiler headers (gcc's, or
# clang's where CC=clang, as in the sanitizer and fuzz builds).
cc=${CC:-cc}
if command -v "$cc" >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    for h in $incs; do
        f=$(printf '#include <%s>\n' "$h" | "$cc" -E -x c - 2>/dev/null |
            sed -n "s|^# [0-9]* \"\(/[^\"]*/$h\)\".*|\1|p" | head -1)
        if [ -z "$f" ]; then
            fail "<$h>: the compiler finds no such header here (install the build list first)"
            continue
        fi
        pkg=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1)
        case "$pkg" in
        libc6-dev | linux-libc-dev | libcrypt-dev | libgcc-*-dev | gcc-* | cpp-*) continue ;;
        libclang-common-*-dev | libclang-rt-*-dev) continue ;; # clang's own (CC=clang builds)
        '') case "$f" in /usr/lib/gcc/* | /usr/lib/llvm-*/*) continue ;; esac ;;
        esac
        if [ -z "$pkg" ]; then
            fail "<$h> ($f): no Debian package ships it"
        elif ! grep -qx "$pkg" "$build"; then
            fail "<$h> comes from $pkg, which is not in .ci/debian-packages-build"
        fi
    done
else
    echo "check_packages: no $cc or dpkg: header-to-package check not run" >&2
fi

# Build-Depends (packaging/debian/control) and the Dockerfile's build stage install every
# library of the build list.
bdeps=$(sed -n '/^Build-Depends:/,/^[A-Z]/p' "$root/packaging/debian/control" |
    sed 's/^Build-Depends://; /^[A-Z]/d' | tr ',' '\n' | sed 's/(.*//; s/[[:space:]]//g' | grep .)
dstage=$(sed -n '1,/^FROM .* AS build/d; /^FROM /q; p' "$root/Dockerfile" | sed 's/[[:space:]\]\{1,\}/\n/g')
for p in $(grep -v '^#' "$build"); do
    case "$p" in build-essential | gcc | make | libc6-dev) continue ;; esac
    printf '%s\n' "$bdeps" | grep -qx "$p" ||
        fail "$p is in debian-packages-build but not in packaging/debian/control's Build-Depends"
    printf '%s\n' "$dstage" | grep -qx "$p" ||
        fail "$p is in debian-packages-build but not installed by the Dockerfile's build stage"
done

# The run command and the service set-ups build with only the build list: no cmocka, so no
# tests or benchmarks (they are ON by default).
if ! grep -qx libcmocka-dev "$build"; then
    grep -E '(^apt-get .*&& |^)cmake -S \. -B build' "$root/README.md" | grep -v '\.ci/debian-packages[ )]' |
        while IFS= read -r line; do
            case "$line" in
            *-DMTPROXY_TESTS=OFF*-DMTPROXY_BENCH=OFF*) ;;
            *) echo "check_packages: README.md builds the tests (cmocka) with only the build list: $line" >&2
               echo x ;;
            esac
        done | grep -q x && status=1
    case "$(sed -n '/^RUN cmake/,/[^\\]$/p' "$root/Dockerfile")" in
    *-DMTPROXY_TESTS=OFF*) ;;
    *) fail "Dockerfile's build stage builds the tests" ;;
    esac
fi
[ "$status" -ne 0 ] || echo "build-only list: $(grep -v '^#' "$build" | tr '\n' ' ')(no test-only package)"
exit "$status"
