#!/bin/sh
# check_packages.sh: the README's run command installs only what building needs; its test command installs everything.
#
# Reads .ci/debian-packages-build (the run command's list) and .ci/debian-packages (the test
# command's). Fails when: the README does not use them so; a build package is missing from the
# full list; or a build package is test-only. A build package must be a build tool (compiler,
# cmake, pkg-config) or a -dev package that ships a header the program itself (src/, include/)
# includes: cmocka, clang, shellcheck, python3, redis, haproxy... are not.
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

run=$(grep -A4 '^Install what building needs' "$root/README.md" | grep '^apt-get' | head -1)
case "$run" in
*'$(cat .ci/debian-packages-build)'*'./build/mtproxy'*) ;;
*) fail "README.md's run command does not install \$(cat .ci/debian-packages-build): $run" ;;
esac
tst=$(grep -A8 '^Build and run all the tests' "$root/README.md" | grep '^apt-get' | head -1)
case "$tst" in
*'$(cat .ci/debian-packages)'*ctest*) ;;
*) fail "README.md's test command does not install \$(cat .ci/debian-packages): $tst" ;;
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
[ "$status" -ne 0 ] || echo "build-only list: $(grep -v '^#' "$build" | tr '\n' ' ')(no test-only package)"
exit "$status"
